//! libFuzzer's entry for the `consul` target: see [`wayfinder_fuzz::consul`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wayfinder_fuzz::consul(data);
});
