//! The table of built-in strategies: compiled natively into the host and
//! embedded as components (built by `build.rs` from the crates under
//! `strategies/`). Loading a component from this table, a file or the store
//! is the engine's job (`crate::engine::source`).

use super::native::NativeStrategy;
use super::{AllocationStrategy, StrategyError};

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The built-in strategies' names.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTIN_COMPONENTS.iter().map(|(name, _)| *name)
}

/// The embedded component of a built-in.
pub fn component_bytes(name: &str) -> Option<&'static [u8]> {
    BUILTIN_COMPONENTS.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// A built-in compiled into the host, configured.
pub fn native(name: &str, config: &str) -> Option<Result<Box<dyn AllocationStrategy>, StrategyError>> {
    fn boxed<S: shardalloc_guest::Strategy + Send + 'static>(
        s: S,
        config: &str,
    ) -> Result<Box<dyn AllocationStrategy>, StrategyError> {
        Ok(Box::new(NativeStrategy::new(s, config)?))
    }
    Some(match name {
        "least-shard" => boxed(shardalloc_strategy_least_shard::LeastShard::default(), config),
        "hash" => boxed(shardalloc_strategy_hash::RendezvousHash::default(), config),
        "capacity" => boxed(shardalloc_strategy_capacity::Capacity::default(), config),
        "zone" => boxed(shardalloc_strategy_zone::Zone::default(), config),
        _ => return None,
    })
}
