//! libFuzzer entry of the `node_frames` target (see the crate's documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardalloc_fuzz::target("node_frames").expect("a target")(data));
