//! The trait a strategy author implements.

use crate::view::{Allocations, Move, RegionId, ShardKey, View};

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
    /// When true the host sends every shard's id with the view, in bulk
    /// (contract 0.3's `needs-shard-ids`; 0.1 sent them with `rebalance`),
    /// so [`Allocations::shard_id`] costs nothing; otherwise
    /// [`Allocations::shard_id`] asks the host, one call per shard. Set it
    /// when `rebalance` reads ids: one call per shard does not fit a call's
    /// deadline at a million shards.
    pub needs_shard_names: bool,
    /// When true the host sends every shard's attributes with the view, in
    /// bulk (contract 0.3's `needs-shard-attributes`), so
    /// [`Allocations::attributes`] costs nothing; otherwise it asks the
    /// host, one call per shard. [`ShardKey::attributes`] (in `allocate`)
    /// asks the host either way, once per call that reads it.
    pub needs_shard_attributes: bool,
}

/// Allocation logic. Implement it over the plain view types, unit-test it
/// natively, and export it as a component with [`crate::export_strategy!`].
///
/// Answers must be deterministic for the same input. The host checks every
/// answer; an allocate answer that is not an allocatable region is refused
/// and replaced by the host's fallback (least-shard), and a rebalance answer
/// holding a shard that is not allocated, already moving or listed twice,
/// or a destination that is not a region, is refused and nothing moves that
/// round.
pub trait Strategy {
    /// Name, version, description and config schema.
    fn info(&self) -> Info;

    /// Applies settings given as JSON text (empty text means defaults). An
    /// error leaves the previous settings in place and names the problem.
    fn configure(&mut self, config: &str) -> Result<(), String>;

    /// Picks a home for `shard` ([`ShardKey::cause`] says why it needs
    /// one); `requester` is the region that asked, if any.
    fn allocate(&self, view: &View, shard: &ShardKey, requester: Option<RegionId>) -> Result<RegionId, String>;

    /// Picks shards to move, in the order they should move, each with its
    /// destination if the strategy has one ([`Move`]; `Move::from(shard)`
    /// leaves it to `allocate`).
    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Move>, String>;
}
