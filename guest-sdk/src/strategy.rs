//! The trait a strategy author implements.

use crate::view::{Allocations, RegionId, Shard, ShardKey, View};

/// What a strategy says about itself (`describe` in the contract).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Info {
    /// Short name, e.g. `least-shard`.
    pub name: String,
    /// The strategy's own version.
    pub version: String,
    /// One or two sentences for operators.
    pub description: String,
    /// JSON Schema of the accepted configuration.
    pub config_schema: String,
    /// When true the host sends every shard id with `rebalance` in bulk;
    /// otherwise [`Allocations::shard_id`] asks the host per shard.
    pub needs_shard_names: bool,
}

/// Allocation logic. Implement it over the plain view types, unit-test it
/// natively, and export it as a component with [`crate::export_strategy!`].
///
/// Answers must be deterministic for the same input. The host checks every
/// answer; an allocate answer that is not an allocatable region, or a
/// rebalance answer holding a shard that is not allocated, already moving or
/// listed twice, is refused and replaced by the host's fallback.
pub trait Strategy {
    /// Name, version, description and config schema.
    fn info(&self) -> Info;

    /// Applies settings given as JSON text (empty text means defaults). An
    /// error leaves the previous settings in place and names the problem.
    fn configure(&mut self, config: &str) -> Result<(), String>;

    /// Picks a home for `shard`; `requester` is the region that asked, if any.
    fn allocate(&self, view: &View, shard: &ShardKey, requester: Option<RegionId>) -> Result<RegionId, String>;

    /// Picks shards to move, in the order they should move.
    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Shard>, String>;
}
