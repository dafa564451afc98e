//! libFuzzer entry of the `rest_bodies` target (see the crate's documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardalloc_fuzz::target("rest_bodies").expect("a target")(data));
