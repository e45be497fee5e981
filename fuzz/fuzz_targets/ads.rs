//! libFuzzer's entry for the `ads` target: see [`wayfinder_fuzz::ads`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wayfinder_fuzz::ads(data);
});
