//! Dry runs: what a candidate strategy would do on the current state,
//! without applying anything. Allocation answers for given shards, the
//! rebalance set, and K rounds of moves and counts computed by the same
//! code as `shardalloc strategy simulate`.
//!
//! A dry run is a test the candidate must pass: it stops at the first
//! answer the fallback had to replace (a fault, an error, an invalid answer)
//! and at its deadline, and says which. Before the answers it brings the
//! candidate one batch of changes (`exercise_apply`), so a component whose
//! copy of the view goes wrong under `apply` is refused before it is
//! active, not caught by its first fallbacks after.

use shardalloc_guest::Snapshot;

use std::sync::Arc;
use std::time::Instant;

use super::churn::Paced;
use super::external::{Allocation, AllocationReason, ExternalAllocation, Rebalance};
use super::guarded::{Guarded, NoAllocatableRegion};
use super::simulate::{Bounds, Round, Stopped, simulate_within};
use super::table::ShardTable;
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
    exercise_apply(&mut external, snapshot)?;
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

/// The shard id [`exercise_apply`] homes; another is taken when the
/// snapshot has a shard of that name.
const PROBE: &str = "shardalloc-dry-run-probe";

/// Brings `external`'s strategy a batch of changes: an allocation on a
/// throwaway table of the snapshot (a component loads it whole), a probe
/// shard homed on that table, and an allocation again (the component
/// applies the batch and its checksum is compared with the table's). A
/// dry run on whole views alone never calls `apply`, where a component's
/// copy of the view can go wrong. Nothing of this is in the answers.
fn exercise_apply(external: &mut ExternalAllocation, snapshot: &Snapshot) -> Result<(), DryRunError> {
    let whole = ClusterView::from_snapshot(snapshot);
    let Some(table) = whole.built_table() else { return Ok(()) };
    let Some(region) = whole.regions().iter().find(|r| r.is_allocatable()) else { return Ok(()) };
    let region = region.address.clone();
    let taken: std::collections::HashSet<&str> =
        snapshot.regions.iter().flat_map(|r| r.shards.iter().map(String::as_str)).collect();
    let probe = (0..).map(|n| format!("{PROBE}-{n}")).find(|id| !taken.contains(id.as_str())).expect("a free name");
    let mut table = Arc::new(table);
    let view_of = |table: &Arc<ShardTable>| {
        let counts = table.view().shard_counts().to_vec();
        ClusterView::for_allocation(whole.topology().clone(), whole.metrics().to_vec(), counts)
            .expect("the snapshot's own shape")
            .with_table(table.clone())
    };
    let mut ask = |view: &ClusterView| match external.allocate(view, &probe, None) {
        Ok(Allocation { reason: AllocationReason::Fallback(error), .. }) => Err(error),
        _ => Ok(()),
    };
    // A candidate that fails on the whole view already is named by the
    // dry run's own answers, about the shards asked for.
    if ask(&view_of(&table)).is_err() {
        return Ok(());
    }
    Arc::make_mut(&mut table).home(&probe, &region, 0).expect("a region of the snapshot");
    ask(&view_of(&table))
        .map_err(|error| DryRunError::Failed(format!("allocate {probe} after a batch of changes (apply): {error}")))
}

#[cfg(test)]
mod tests {
    use shardalloc_guest::testing::Scenario;

    use super::*;
    use crate::strategy::{Info, RebalanceMove, StrategyError, builtin};

    /// Answers as least-shard until it is called on a view whose table has
    /// a shard it was not loaded with: a component whose `apply` goes wrong.
    struct BreaksOnApply {
        inner: Box<dyn AllocationStrategy>,
        seen: Option<usize>,
    }

    impl AllocationStrategy for BreaksOnApply {
        fn info(&self) -> &Info {
            self.inner.info()
        }

        fn allocate(
            &mut self,
            view: &ClusterView,
            shard: &str,
            requester: Option<&str>,
        ) -> Result<String, StrategyError> {
            if let Some(table) = view.table() {
                let shards = table.allocations().len();
                if self.seen.is_some_and(|seen| seen != shards) {
                    return Err(StrategyError::Fault {
                        kind: crate::strategy::FaultKind::Trap,
                        detail: "the view checksum is not the host's".into(),
                    });
                }
                self.seen = Some(shards);
            }
            self.inner.allocate(view, shard, requester)
        }

        fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
            self.inner.rebalance(view)
        }
    }

    fn run(candidate: Box<dyn AllocationStrategy>, snapshot: &Snapshot) -> Result<DryRun, DryRunError> {
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        dry_run(candidate, snapshot, &["new".into()], 2, deadline, Paced::default())
    }

    #[test]
    fn a_candidate_whose_copy_goes_wrong_under_a_batch_fails_its_dry_run() {
        let snapshot = Scenario::parse("a=1,2,3 b=4").snapshot;
        let sound = builtin::native("least-shard", "").unwrap().unwrap();
        assert!(run(sound, &snapshot).is_ok());
        let breaks = BreaksOnApply { inner: builtin::native("least-shard", "").unwrap().unwrap(), seen: None };
        let error = run(Box::new(breaks), &snapshot).unwrap_err();
        let DryRunError::Failed(why) = error else { panic!("{error:?}") };
        assert!(why.contains("after a batch of changes (apply)") && why.contains("checksum"), "{why}");
    }

    #[test]
    fn the_probe_is_never_a_shard_of_the_snapshot() {
        let snapshot = Scenario::parse("a=shardalloc-dry-run-probe-0,2 b=").snapshot;
        let run = run(builtin::native("least-shard", "").unwrap().unwrap(), &snapshot).unwrap();
        // The snapshot's own shard is untouched: the answers are about it.
        assert!(run.rounds.iter().all(|r| r.counts.values().sum::<usize>() == 2), "{:?}", run.rounds);
    }
}
