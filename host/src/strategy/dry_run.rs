//! Dry runs: what a candidate strategy would do on the current state,
//! without applying anything. Allocation answers for given shards, the
//! rebalance set, and K rounds of moves and counts computed by the same
//! code as `shardalloc strategy simulate`.
//!
//! A dry run is a test the candidate must pass: it stops at the first
//! answer the fallback had to replace (a fault, an error, an invalid answer)
//! and at its deadline, and says which.

use shardalloc_guest::Snapshot;

use std::time::Instant;

use super::churn::Paced;
use super::external::{Allocation, AllocationReason, ExternalAllocation, Rebalance};
use super::guarded::{Guarded, NoAllocatableRegion};
use super::simulate::{Bounds, Round, Stopped, simulate_within};
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
    /// The candidate failed and the fallback decided.
    #[error("the candidate failed: {0}")]
    Failed(String),
    /// The dry run did not finish by its deadline.
    #[error("the dry run did not finish in time (after {0} complete rounds)")]
    TimedOut(usize),
}

/// Runs `candidate` on `snapshot` (its placements included) without
/// applying anything, until `deadline`; each round's answer clipped by
/// `paced`'s churn limits as the type's coordinator would clip it.
pub fn dry_run(
    candidate: Box<dyn AllocationStrategy>,
    snapshot: &Snapshot,
    shards: &[String],
    rounds: usize,
    deadline: Instant,
    mut paced: Paced,
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
    let mut allocations = Vec::with_capacity(shards.len());
    for shard in shards {
        if Instant::now() >= deadline {
            return Err(DryRunError::TimedOut(0));
        }
        let allocation = external.allocate(&view, shard, None);
        if let Ok(Allocation { reason: AllocationReason::Fallback(error), .. }) = &allocation {
            return Err(DryRunError::Failed(format!("allocate {shard}: {error}")));
        }
        allocations.push((shard.clone(), allocation));
    }
    let rebalance = external.rebalance(&view);
    if let Some(error) = &rebalance.fallback {
        return Err(DryRunError::Failed(format!("rebalance: {error}")));
    }
    let bounds = Bounds { deadline: Some(deadline), stop_at_fallback: true };
    let rounds = simulate_within(&mut external, snapshot, &Default::default(), rounds, bounds, &mut paced, |_| {})
        .map_err(|stopped| match stopped {
            Stopped::TimedOut(done) => DryRunError::TimedOut(done),
            Stopped::Fallback(what) => DryRunError::Failed(what),
        })?;
    Ok(DryRun { allocations, rebalance, rounds })
}
