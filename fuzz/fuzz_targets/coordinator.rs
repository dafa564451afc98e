//! libFuzzer entry of the `coordinator` target (see the crate's documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardalloc_fuzz::target("coordinator").expect("a target")(data));
