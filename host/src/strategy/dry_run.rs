//! Dry runs: what a candidate strategy would do on the current state,
//! without applying anything. Allocation answers for given shards, the
//! rebalance set, and K rounds of moves and counts computed by the same
//! code as `shardalloc strategy simulate`.

use shardalloc_guest::Snapshot;

use super::external::{Allocation, ExternalAllocation, Rebalance};
use super::guarded::{Guarded, NoAllocatableRegion};
use super::simulate::{Round, simulate};
use super::{AllocationStrategy, ClusterView};

/// Most rounds a dry run may simulate.
pub const MAX_DRY_RUN_ROUNDS: usize = 100;

/// Most shards a dry run may be asked to allocate.
pub const MAX_DRY_RUN_SHARDS: usize = 1_000;

/// What a candidate would do.
#[derive(Debug, Clone, PartialEq)]
pub struct DryRun {
    /// For each shard asked about, its allocation (placements honoured).
    pub allocations: Vec<(String, Result<Allocation, NoAllocatableRegion>)>,
    /// The rebalance set on the current state.
    pub rebalance: Rebalance,
    /// Rounds of rebalance and re-allocation.
    pub rounds: Vec<Round>,
}

/// Why a dry run was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DryRunError {
    /// Too many rounds requested.
    #[error("{0} rounds requested; at most {MAX_DRY_RUN_ROUNDS}")]
    TooManyRounds(usize),
    /// Too many shards requested.
    #[error("{0} shards requested; at most {MAX_DRY_RUN_SHARDS}")]
    TooManyShards(usize),
}

/// Runs `candidate` on `snapshot` (its placements included) without
/// applying anything.
pub fn dry_run(
    candidate: Box<dyn AllocationStrategy>,
    snapshot: &Snapshot,
    shards: &[String],
    rounds: usize,
) -> Result<DryRun, DryRunError> {
    if rounds > MAX_DRY_RUN_ROUNDS {
        return Err(DryRunError::TooManyRounds(rounds));
    }
    if shards.len() > MAX_DRY_RUN_SHARDS {
        return Err(DryRunError::TooManyShards(shards.len()));
    }
    let mut external = ExternalAllocation::new(Guarded::new(candidate));
    for (shard, target) in &snapshot.placements {
        external.set_placement(shard.clone(), target.clone());
    }
    let view = ClusterView::from_snapshot(snapshot);
    let allocations = shards.iter().map(|s| (s.clone(), external.allocate(&view, s, None))).collect();
    let rebalance = external.rebalance(&view);
    let rounds = simulate(&mut external, snapshot, rounds, |_| {});
    Ok(DryRun { allocations, rebalance, rounds })
}
