//! libFuzzer entry of the `component` target (see the crate's documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardalloc_fuzz::target("component").expect("a target")(data));
