//! libFuzzer entry of the `strategy_configs` target (see the crate's documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shardalloc_fuzz::target("strategy_configs").expect("a target")(data));
