//! libFuzzer's entry for the `config` target: see [`wayfinder_fuzz::config`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wayfinder_fuzz::config(data);
});
