//! Rounds of rebalance and re-allocation over a snapshot, as
//! `shardalloc strategy simulate` and dry runs do them.
//!
//! Each round: rebalance; remove the returned shards from their regions;
//! allocate each of them in ascending bytewise id order with no requester,
//! adding each to its new region before the next allocate. The snapshot's
//! in-progress shards count as moving during round 1 only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use shardalloc_guest::Snapshot;

use super::churn::Paced;
use super::external::ExternalAllocation;
use super::table::ShardTable;
use super::{AllocationCause, ClusterView};

/// What one round did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Round {
    /// 1-based round number.
    pub round: usize,
    /// Shards moved, in the order rebalance returned them.
    pub moved: Vec<String>,
    /// Shard count of every region after the round.
    pub counts: BTreeMap<String, usize>,
    /// Shards that found no allocatable region (left without a home).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unallocated: Vec<String>,
    /// Set when the strategy failed and the fallback decided.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
    /// Moves the churn limits clipped, in the answer's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clipped: Vec<ClippedMove>,
    /// Each moved shard with the region it left and the one it got (`None`:
    /// none could take it), in `moved`'s order.
    #[serde(skip)]
    pub moves: Vec<Move>,
}

/// A shard's move in a simulated round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The shard.
    pub shard: String,
    /// The region it left.
    pub from: String,
    /// The region it got, `None` when no region could take it.
    pub to: Option<String>,
}

/// A move the churn limits clipped in a simulated round.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClippedMove {
    /// The shard.
    pub shard: String,
    /// The limit (`max-moves-per-round`, `move-cooldown`, `min-round-interval`).
    pub limit: &'static str,
}

/// When a simulation stops early.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// Stop once this instant passes.
    pub deadline: Option<Instant>,
    /// Stop at the first answer the fallback had to replace.
    pub stop_at_fallback: bool,
}

/// Why a simulation stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Its deadline passed, after this many complete rounds.
    TimedOut(usize),
    /// The strategy failed and the fallback decided (what, and why).
    Fallback(String),
}

/// Runs `rounds` rounds on a copy of `snapshot`'s homes, calling `each` after
/// every round (for progress output), and returns all rounds.
pub fn simulate(
    external: &mut ExternalAllocation,
    snapshot: &Snapshot,
    rounds: usize,
    each: impl FnMut(&Round),
) -> Vec<Round> {
    simulate_within(external, snapshot, &BTreeMap::new(), rounds, Bounds::default(), &mut Paced::default(), each)
        .expect("unbounded simulations do not stop")
}

/// [`simulate`], the shards carrying `loads` (a contract 0.2 strategy sees
/// them), stopping early as `bounds` say, each round's answer clipped by
/// `paced`'s churn limits.
pub fn simulate_within(
    external: &mut ExternalAllocation,
    snapshot: &Snapshot,
    loads: &BTreeMap<String, f64>,
    rounds: usize,
    bounds: Bounds,
    paced: &mut Paced,
    mut each: impl FnMut(&Round),
) -> Result<Vec<Round>, Stopped> {
    let late = || bounds.deadline.is_some_and(|d| Instant::now() >= d);
    let base = ClusterView::from_snapshot(snapshot);
    let topology = Arc::clone(base.topology());
    let metrics = base.metrics().to_vec();
    let mut homes: Vec<Vec<String>> = base.homes().to_vec();
    let mut in_progress: BTreeSet<String> = base.in_progress().clone();
    // The shard table a contract 0.2 strategy follows, kept in step with
    // the simulated homes as the coordinator keeps its own.
    let mut table = Arc::new(base.built_table_with_loads(loads).expect("a snapshot's view has homes"));
    let view_of = |homes: &Vec<Vec<String>>, in_progress: &BTreeSet<String>, table: &Arc<ShardTable>| {
        ClusterView::new(topology.clone(), metrics.clone(), homes.clone(), in_progress.clone())
            .expect("simulation keeps the view consistent")
            .with_table(table.clone())
    };
    let mut all = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        if late() {
            return Err(Stopped::TimedOut(round - 1));
        }
        let now = paced.now(round);
        let view = view_of(&homes, &in_progress, &table).at(now);
        let decision = external.rebalance(&view);
        drop(view);
        let mut fallbacks: Vec<String> = decision.fallback.iter().map(|e| format!("rebalance: {e}")).collect();
        if bounds.stop_at_fallback
            && let Some(first) = fallbacks.first()
        {
            return Err(Stopped::Fallback(format!("round {round}, {first}")));
        }
        let homed = homes.iter().map(Vec::len).sum();
        let destinations = decision.destinations;
        let clipped = paced.round(round, decision.shards, decision.placement_moves, homed);
        let moved = clipped.kept;
        let clipped: Vec<ClippedMove> =
            (clipped.clipped.into_iter()).map(|(shard, limit)| ClippedMove { shard, limit: limit.as_str() }).collect();
        let moving: BTreeSet<&str> = moved.iter().map(String::as_str).collect();
        let mut left: BTreeMap<&str, String> = BTreeMap::new();
        for (region, shards) in topology.regions().iter().zip(&mut homes) {
            shards.retain(|s| {
                let stays = !moving.contains(s.as_str());
                if !stays && let Some(shard) = moving.get(s.as_str()) {
                    left.insert(shard, region.address.clone());
                }
                stays
            });
        }
        let mut got: BTreeMap<&str, String> = BTreeMap::new();
        let changing = Arc::make_mut(&mut table);
        for shard in &in_progress {
            changing.set_moving(shard, false);
        }
        for shard in &moving {
            changing.unhome(shard);
        }
        in_progress.clear();
        let mut unallocated = Vec::new();
        for shard in &moving {
            if late() {
                return Err(Stopped::TimedOut(round - 1));
            }
            // allocate needs only counts: no per-shard copy per decision.
            let counts = homes.iter().map(|h| h.len() as u32).collect();
            let view = ClusterView::for_allocation(topology.clone(), metrics.clone(), counts)
                .expect("simulation keeps the view consistent")
                .with_table(table.clone())
                .because(AllocationCause::Rebalance)
                .at(now);
            let allocation = external.allocate_to(&view, shard, None, destinations.get(*shard).map(String::as_str));
            drop(view);
            match allocation {
                Ok(allocation) => {
                    if let super::external::AllocationReason::Fallback(e) = &allocation.reason {
                        fallbacks.push(format!("allocate {shard}: {e}"));
                        if bounds.stop_at_fallback {
                            return Err(Stopped::Fallback(format!("round {round}, allocate {shard}: {e}")));
                        }
                    }
                    let index = topology
                        .regions()
                        .iter()
                        .position(|r| r.address == allocation.region)
                        .expect("allocations name known regions");
                    homes[index].push((*shard).to_owned());
                    got.insert(shard, allocation.region.clone());
                    Arc::make_mut(&mut table).home(shard, &allocation.region, now).expect("a region of the topology");
                }
                Err(_) => unallocated.push((*shard).to_owned()),
            }
        }
        let counts = topology.regions().iter().zip(&homes).map(|(r, h)| (r.address.clone(), h.len())).collect();
        let moves = (moved.iter())
            .map(|shard| Move {
                shard: shard.clone(),
                from: left.get(shard.as_str()).cloned().unwrap_or_default(),
                to: got.get(shard.as_str()).cloned(),
            })
            .collect();
        let result = Round { round, moved, counts, unallocated, fallbacks, clipped, moves };
        each(&result);
        all.push(result);
    }
    Ok(all)
}
