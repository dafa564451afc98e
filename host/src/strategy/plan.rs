//! What-if plans: what a strategy (the live one, or a candidate) would do
//! on the live view changed as asked: regions added, removed or drained,
//! shards given other loads. Nothing is applied. Round 0 re-homes the
//! shards the changes displace (those of removed and drained regions, as
//! the node would at once, or through its drain); rounds 1…N are rebalance
//! rounds, as a dry run's, over the shards' loads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use shardalloc_guest::{RegionStatus, Snapshot, SnapshotRegion};
use shardalloc_proto::capacity::LOAD_QUANTITY;

use super::churn::Paced;
use super::external::{AllocationReason, ExternalAllocation};
use super::guarded::Guarded;
use super::simulate::{Bounds, Move, Round, Stopped, simulate_within};
use super::{AllocationStrategy, ClusterView};

/// Most rounds a plan may simulate.
pub const MAX_PLAN_ROUNDS: usize = 100;
/// Most regions a plan may add, remove or drain, together.
pub const MAX_PLAN_REGIONS: usize = 1_000;
/// Most shard loads a plan may give.
pub const MAX_PLAN_LOADS: usize = 100_000;

/// A region the plan adds.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRegion {
    /// Its address.
    pub address: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its capacity (contract 0.2 strategies see it).
    pub capacity: Option<f64>,
}

/// The changes a plan makes to the live view.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Changes {
    /// Regions added (up, no shards).
    pub add: Vec<NewRegion>,
    /// Regions removed: their shards are re-homed in round 0.
    pub remove: Vec<String>,
    /// Regions drained: they get no shard, and theirs move in round 0.
    pub drain: Vec<String>,
    /// Shard loads, over the live ones.
    pub loads: BTreeMap<String, f64>,
}

/// What the plan found.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Round 0: the displaced shards' new homes.
    pub displaced: Vec<Move>,
    /// The rebalance rounds.
    pub rounds: Vec<Round>,
    /// Every region at the end, in join order: its shard count and load
    /// (the sum of its shards' loads; `None` when no shard has one).
    pub regions: Vec<(String, usize, Option<f64>)>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A region to remove or drain that the type does not have.
    #[error("the type has no region {0:?}")]
    UnknownRegion(String),
    /// A region to add that the type has, or one named twice.
    #[error("region {0:?} is already in the type or named twice")]
    RegionExists(String),
    /// A region's address that registration would refuse (empty, too
    /// long, a space or a control character).
    #[error("a region to add: {0}")]
    BadAddress(String),
    /// No region at all, or none left that can take shards.
    #[error("{0}")]
    EmptyCluster(String),
    /// A load that is not a finite number at or above 0.
    #[error("the load of shard {0:?} is not a finite number at or above 0")]
    BadLoad(String),
    /// Too many of something.
    #[error("{what}: {count}, at most {limit}")]
    TooMany {
        /// What.
        what: &'static str,
        /// How many were asked.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The strategy failed and the fallback decided.
    #[error("the strategy failed: {0}")]
    Failed(String),
    /// The plan did not finish by its deadline.
    #[error("the plan did not finish in time (after {0} complete rounds)")]
    TimedOut(usize),
}

/// Plans `changes` on `snapshot` (whose shards carry `loads`) with
/// `strategy`, `rounds` rebalance rounds clipped by `paced`, until `deadline`.
pub fn plan(
    strategy: Box<dyn AllocationStrategy>,
    snapshot: &Snapshot,
    mut loads: BTreeMap<String, f64>,
    changes: Changes,
    rounds: usize,
    deadline: Instant,
    mut paced: Paced,
) -> Result<Plan, PlanError> {
    check(snapshot, &changes, rounds)?;
    loads.extend(changes.loads.iter().map(|(s, l)| (s.clone(), *l)));
    let (changed, displaced) = change(snapshot, &changes);
    if !changed.regions.iter().any(|r| !r.proxy_only && !r.draining && r.status == RegionStatus::Up) {
        return Err(PlanError::EmptyCluster("the plan leaves no region that can take shards".into()));
    }
    let mut external = ExternalAllocation::new(Guarded::new(strategy));
    for (shard, target) in &changed.placements {
        external.set_placement(shard.clone(), target.clone());
    }
    let mut changed = changed;
    let mut moves = Vec::with_capacity(displaced.len());
    for (shard, from) in displaced {
        if Instant::now() >= deadline {
            return Err(PlanError::TimedOut(0));
        }
        let view = view_with_loads(&changed, &loads);
        let to = match external.allocate(&view, &shard, None) {
            Ok(allocation) => {
                if let AllocationReason::Fallback(error) = &allocation.reason {
                    return Err(PlanError::Failed(format!("allocate {shard}: {error}")));
                }
                Some(allocation.region)
            }
            Err(_) => None,
        };
        if let Some(to) = &to {
            let region = changed.regions.iter_mut().find(|r| r.address == *to).expect("allocations name known regions");
            region.shards.push(shard.clone());
        }
        moves.push(Move { shard, from, to });
    }
    let bounds = Bounds { deadline: Some(deadline), stop_at_fallback: true };
    let rounds =
        simulate_within(&mut external, &changed, &loads, rounds, bounds, &mut paced, |_| {}).map_err(|stopped| {
            match stopped {
                Stopped::TimedOut(done) => PlanError::TimedOut(done),
                Stopped::Fallback(what) => PlanError::Failed(what),
            }
        })?;
    // The end: round 0's homes, then each round's moves.
    let mut homes: BTreeMap<String, String> =
        changed.regions.iter().flat_map(|r| r.shards.iter().map(|s| (s.clone(), r.address.clone()))).collect();
    for round in &rounds {
        for m in &round.moves {
            match &m.to {
                Some(to) => homes.insert(m.shard.clone(), to.clone()),
                None => homes.remove(&m.shard),
            };
        }
    }
    // Each region's shards and, when any has a load, their load together.
    let mut totals: BTreeMap<&str, (usize, Option<f64>)> = BTreeMap::new();
    for (shard, home) in &homes {
        let (count, load) = totals.entry(home.as_str()).or_default();
        *count += 1;
        if let Some(more) = loads.get(shard) {
            *load = Some(load.unwrap_or(0.0) + more);
        }
    }
    let regions = (changed.regions.iter())
        .map(|r| {
            let (count, load) = totals.get(r.address.as_str()).copied().unwrap_or_default();
            (r.address.clone(), count, load)
        })
        .collect();
    Ok(Plan { displaced: moves, rounds, regions })
}

fn check(snapshot: &Snapshot, changes: &Changes, rounds: usize) -> Result<(), PlanError> {
    if rounds > MAX_PLAN_ROUNDS {
        return Err(PlanError::TooMany { what: "rounds", count: rounds, limit: MAX_PLAN_ROUNDS });
    }
    let named = changes.add.len() + changes.remove.len() + changes.drain.len();
    if named > MAX_PLAN_REGIONS {
        return Err(PlanError::TooMany { what: "regions named", count: named, limit: MAX_PLAN_REGIONS });
    }
    if changes.loads.len() > MAX_PLAN_LOADS {
        let count = changes.loads.len();
        return Err(PlanError::TooMany { what: "shard loads", count, limit: MAX_PLAN_LOADS });
    }
    if snapshot.regions.is_empty() && changes.add.is_empty() {
        return Err(PlanError::EmptyCluster("the type has no region; add some to plan".into()));
    }
    let known: BTreeSet<&str> = snapshot.regions.iter().map(|r| r.address.as_str()).collect();
    for address in changes.remove.iter().chain(&changes.drain) {
        if !known.contains(address.as_str()) {
            return Err(PlanError::UnknownRegion(address.clone()));
        }
    }
    let mut added = BTreeSet::new();
    for region in &changes.add {
        shardalloc_proto::protocol::check_address(&region.address).map_err(PlanError::BadAddress)?;
        if known.contains(region.address.as_str()) || !added.insert(region.address.as_str()) {
            return Err(PlanError::RegionExists(region.address.clone()));
        }
    }
    if let Some((shard, _)) = changes.loads.iter().find(|(_, l)| !l.is_finite() || **l < 0.0) {
        return Err(PlanError::BadLoad(shard.clone()));
    }
    Ok(())
}

/// The snapshot changed as asked, and the shards displaced (shard, the
/// region it leaves), removed regions' first, in their regions' order.
fn change(snapshot: &Snapshot, changes: &Changes) -> (Snapshot, Vec<(String, String)>) {
    let mut changed = snapshot.clone();
    let removed: BTreeSet<&str> = changes.remove.iter().map(String::as_str).collect();
    let drained: BTreeSet<&str> = changes.drain.iter().map(String::as_str).collect();
    let mut displaced = Vec::new();
    for region in &mut changed.regions {
        if removed.contains(region.address.as_str()) || drained.contains(region.address.as_str()) {
            displaced.extend(region.shards.drain(..).map(|s| (s, region.address.clone())));
        }
        if drained.contains(region.address.as_str()) {
            region.draining = true;
        }
    }
    changed.regions.retain(|r| !removed.contains(r.address.as_str()));
    changed.placements.retain(|_, target| !removed.contains(target.as_str()));
    let mut next =
        changed.regions.iter().enumerate().map(|(i, r)| r.join_order.unwrap_or(i as u64 + 1)).max().unwrap_or(0);
    for region in &changes.add {
        next += 1;
        changed.regions.push(SnapshotRegion {
            address: region.address.clone(),
            shards: Vec::new(),
            status: RegionStatus::Up,
            app_version: String::new(),
            join_order: Some(next),
            labels: region.labels.clone(),
            metrics: BTreeMap::new(),
            proxy_only: false,
            draining: false,
            capacity: region.capacity,
            // A region added in a plan declares its load capacity only.
            quantities: region
                .capacity
                .map(|load| BTreeMap::from([(LOAD_QUANTITY.to_owned(), load)]))
                .unwrap_or_default(),
        });
    }
    (changed, displaced)
}

fn view_with_loads(snapshot: &Snapshot, loads: &BTreeMap<String, f64>) -> ClusterView {
    let view = ClusterView::from_snapshot(snapshot);
    let table = view.built_table_with_loads(loads).expect("a snapshot's view has homes");
    view.with_table(Arc::new(table))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::strategy::builtin;

    fn strategy(name: &str) -> Box<dyn AllocationStrategy> {
        builtin::native(name, "").unwrap().unwrap()
    }

    /// Regions a, b, c with 4 shards each.
    fn three() -> Snapshot {
        let region = |address: &str, first: usize| SnapshotRegion {
            address: address.into(),
            shards: (first..first + 4).map(|i| format!("s{i:02}")).collect(),
            ..SnapshotRegion::default()
        };
        Snapshot { regions: vec![region("a", 0), region("b", 4), region("c", 8)], ..Snapshot::default() }
    }

    fn run(
        name: &str,
        snapshot: &Snapshot,
        loads: BTreeMap<String, f64>,
        changes: Changes,
        rounds: usize,
    ) -> Result<Plan, PlanError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        plan(strategy(name), snapshot, loads, changes, rounds, deadline, Paced::default())
    }

    fn counts(plan: &Plan) -> Vec<(&str, usize)> {
        plan.regions.iter().map(|(a, n, _)| (a.as_str(), *n)).collect()
    }

    #[test]
    fn a_drained_region_is_emptied_in_round_zero_and_gets_nothing_after() {
        let changes = Changes { drain: vec!["c".into()], ..Changes::default() };
        let plan = run("least-shard", &three(), BTreeMap::new(), changes, 3).unwrap();
        assert_eq!(plan.displaced.len(), 4);
        assert!(plan.displaced.iter().all(|m| m.from == "c" && m.to.as_deref() != Some("c")), "{:?}", plan.displaced);
        assert_eq!(counts(&plan), [("a", 6), ("b", 6), ("c", 0)]);
    }

    #[test]
    fn an_added_region_is_filled_by_the_rebalance_rounds() {
        let new = NewRegion { address: "d".into(), labels: BTreeMap::new(), capacity: Some(100.0) };
        let plan = run("least-shard", &three(), BTreeMap::new(), Changes { add: vec![new], ..Changes::default() }, 10);
        let plan = plan.unwrap();
        assert!(plan.displaced.is_empty());
        assert_eq!(counts(&plan), [("a", 3), ("b", 3), ("c", 3), ("d", 3)]);
        // Every move of a round says where from and where to.
        let moves: Vec<&Move> = plan.rounds.iter().flat_map(|r| &r.moves).collect();
        assert_eq!(moves.len(), 3);
        assert!(moves.iter().all(|m| m.to.as_deref() == Some("d") && m.from != "d"), "{moves:?}");
    }

    #[test]
    fn a_removed_regions_shards_are_rehomed_in_round_zero() {
        let new = NewRegion { address: "d".into(), labels: BTreeMap::new(), capacity: None };
        let changes = Changes { add: vec![new], remove: vec!["a".into()], ..Changes::default() };
        let plan = run("least-shard", &three(), BTreeMap::new(), changes, 3).unwrap();
        assert_eq!(plan.displaced.len(), 4, "a's shards");
        assert!(plan.displaced.iter().all(|m| m.from == "a" && m.to.as_deref() == Some("d")), "{:?}", plan.displaced);
        assert_eq!(counts(&plan), [("b", 4), ("c", 4), ("d", 4)]);
    }

    #[test]
    fn loads_given_by_the_plan_are_balanced_and_summed_per_region() {
        // s00 is hot; load-balance moves load off a.
        let mut loads: BTreeMap<String, f64> = (0..12).map(|i| (format!("s{i:02}"), 1.0)).collect();
        let changes =
            Changes { loads: [("s01".to_owned(), 9.0), ("s02".to_owned(), 9.0)].into(), ..Changes::default() };
        loads.insert("s00".into(), 1.0);
        let plan = run("load-balance", &three(), loads, changes, 10).unwrap();
        let total: f64 = plan.regions.iter().map(|(_, _, l)| l.unwrap()).sum();
        assert_eq!(total, 28.0);
        let max = plan.regions.iter().map(|(_, _, l)| l.unwrap()).fold(0.0, f64::max);
        assert!(max < 22.0, "the two hot shards left a together: {:?}", plan.regions);
    }

    #[test]
    fn plans_that_cannot_be_made_say_why() {
        let snapshot = three();
        let err =
            |changes: Changes, rounds| run("least-shard", &snapshot, BTreeMap::new(), changes, rounds).unwrap_err();
        assert_eq!(
            err(Changes { drain: vec!["x".into()], ..Changes::default() }, 1),
            PlanError::UnknownRegion("x".into())
        );
        let again = NewRegion { address: "a".into(), labels: BTreeMap::new(), capacity: None };
        assert_eq!(err(Changes { add: vec![again], ..Changes::default() }, 1), PlanError::RegionExists("a".into()));
        // Addresses registration would refuse are refused here too.
        for bad in ["", "two words", &"x".repeat(300)] {
            let new = NewRegion { address: bad.to_owned(), labels: BTreeMap::new(), capacity: None };
            let error = err(Changes { add: vec![new], ..Changes::default() }, 1);
            assert!(matches!(&error, PlanError::BadAddress(why) if why.contains("printable ASCII")), "{error:?}");
        }
        let all = Changes { remove: vec!["a".into(), "b".into()], drain: vec!["c".into()], ..Changes::default() };
        assert!(matches!(err(all, 1), PlanError::EmptyCluster(_)));
        let nan = Changes { loads: [("s00".to_owned(), f64::NAN)].into(), ..Changes::default() };
        assert_eq!(err(nan, 1), PlanError::BadLoad("s00".into()));
        assert!(matches!(err(Changes::default(), 101), PlanError::TooMany { what: "rounds", .. }));
        let empty = run("least-shard", &Snapshot::default(), BTreeMap::new(), Changes::default(), 1).unwrap_err();
        assert!(matches!(empty, PlanError::EmptyCluster(_)));
    }
}
