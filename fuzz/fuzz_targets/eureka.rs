//! libFuzzer's entry for the `eureka` target: see [`wayfinder_fuzz::eureka`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wayfinder_fuzz::eureka(data);
});
