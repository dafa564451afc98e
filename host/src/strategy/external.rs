//! External allocation: operators' placements ("shard S belongs on region
//! R"), wrapped around whatever strategy is active so they survive swaps.
//!
//! - allocate: the placement's target when it is allocatable; otherwise the
//!   destination the strategy's rebalance gave a moved shard, when it is
//!   allocatable; otherwise the strategy's answer (plus a warning naming
//!   shard, target and reason when a placement was not honoured).
//! - rebalance: shards whose home differs from an allocatable placement
//!   target come first (by shard id), then the strategy's answer without
//!   pinned shards that already sit at their target, with the destinations
//!   it named.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::ClusterView;
use super::guarded::{Decision, Guarded, NoAllocatableRegion};
use super::{Info, RebalanceMove, StrategyError};

/// Why a shard got the home it got.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocationReason {
    /// An operator's placement.
    Placement,
    /// The active strategy's answer.
    Strategy {
        /// Its name.
        name: String,
        /// Its version.
        version: String,
    },
    /// The built-in fallback, because the strategy failed.
    Fallback(StrategyError),
}

/// An allocation decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// The chosen home's address.
    pub region: String,
    /// Why.
    pub reason: AllocationReason,
    /// Set when a placement could not be honoured.
    pub warning: Option<String>,
}

/// A rebalance decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Rebalance {
    /// Shards to move, in order.
    pub shards: Vec<String>,
    /// How many of them are placement mismatches (they come first).
    pub placement_moves: usize,
    /// The destinations the strategy named, by shard (a subset of
    /// `shards`).
    pub destinations: HashMap<String, String>,
    /// Set when the strategy's answer was replaced by the fallback's.
    pub fallback: Option<StrategyError>,
}

/// Placements around a guarded strategy.
pub struct ExternalAllocation {
    strategy: Guarded,
    placements: BTreeMap<String, String>,
}

impl ExternalAllocation {
    /// Wraps a strategy, with no placements.
    pub fn new(strategy: Guarded) -> Self {
        ExternalAllocation { strategy, placements: BTreeMap::new() }
    }

    /// The wrapped strategy's description.
    pub fn info(&self) -> &Info {
        self.strategy.info()
    }

    /// Replaces the wrapped strategy, keeping the placements; returns the old one.
    pub fn replace_strategy(&mut self, strategy: Guarded) -> Guarded {
        std::mem::replace(&mut self.strategy, strategy)
    }

    /// Sets (or replaces) the placement of `shard`.
    pub fn set_placement(&mut self, shard: impl Into<String>, target: impl Into<String>) {
        self.placements.insert(shard.into(), target.into());
    }

    /// Removes the placement of `shard`, returning its target.
    pub fn remove_placement(&mut self, shard: &str) -> Option<String> {
        self.placements.remove(shard)
    }

    /// Every placement: shard → target.
    pub fn placements(&self) -> &BTreeMap<String, String> {
        &self.placements
    }

    /// A home for `shard`.
    pub fn allocate(
        &mut self,
        view: &ClusterView,
        shard: &str,
        requester: Option<&str>,
    ) -> Result<Allocation, NoAllocatableRegion> {
        self.allocate_to(view, shard, requester, None)
    }

    /// A home for a shard a rebalance moved to `destination` (the
    /// strategy's say): a placement's target first, then the destination
    /// when it is allocatable, then the strategy's `allocate`.
    pub fn allocate_to(
        &mut self,
        view: &ClusterView,
        shard: &str,
        requester: Option<&str>,
        destination: Option<&str>,
    ) -> Result<Allocation, NoAllocatableRegion> {
        let mut warning = None;
        if let Some(target) = self.placements.get(shard) {
            match view.not_allocatable_reason(target) {
                None => return Ok(Allocation { region: target.clone(), reason: AllocationReason::Placement, warning }),
                // Not logged here: the allocation carries the warning, and
                // the node's driver logs it once with the type.
                Some(reason) => {
                    warning = Some(format!(
                        "placement of shard {shard} on {target} not honoured ({reason}); using strategy {} instead",
                        self.info().name
                    ));
                }
            }
        }
        let strategy =
            || AllocationReason::Strategy { name: self.info().name.clone(), version: self.info().version.clone() };
        if let Some(to) = destination
            && view.is_allocatable(to)
        {
            return Ok(Allocation { region: to.to_owned(), reason: strategy(), warning });
        }
        let Decision { value, fallback } = self.strategy.allocate(view, shard, requester)?;
        let reason = match fallback {
            Some(error) => AllocationReason::Fallback(error),
            None => AllocationReason::Strategy { name: self.info().name.clone(), version: self.info().version.clone() },
        };
        Ok(Allocation { region: value, reason, warning })
    }

    /// Shards to move: those away from their placement's target, then the
    /// strategy's answer.
    pub fn rebalance(&mut self, view: &ClusterView) -> Rebalance {
        self.moves(view, true)
    }

    /// Only the shards away from their placement's target: the strategy
    /// is not asked (a frozen type).
    pub fn placement_moves(&mut self, view: &ClusterView) -> Rebalance {
        self.moves(view, false)
    }

    fn moves(&mut self, view: &ClusterView, ask_strategy: bool) -> Rebalance {
        let homes = view.home_index();
        let regions = view.regions();
        let misplaced = |shard: &String, target: &String, home: usize| {
            regions[home].address != *target && view.is_allocatable(target) && !view.in_progress().contains(shard)
        };
        // Walk the smaller side: placements of shards without a home (many,
        // on a fresh node) cost nothing, nor do homes without a placement.
        let mut shards = Vec::new();
        if self.placements.len() <= homes.len() {
            for (shard, target) in &self.placements {
                if homes.get(shard.as_str()).is_some_and(|&home| misplaced(shard, target, home)) {
                    shards.push(shard.clone());
                }
            }
        } else {
            for (home, list) in view.homes().iter().enumerate() {
                for shard in list {
                    if self.placements.get(shard).is_some_and(|target| misplaced(shard, target, home)) {
                        shards.push(shard.clone());
                    }
                }
            }
            shards.sort();
        }
        let placement_moves = shards.len();
        if !ask_strategy {
            return Rebalance { shards, placement_moves, destinations: HashMap::new(), fallback: None };
        }
        // A shard pinned to its home cannot move: it comes last in its
        // region's list, so a strategy that picks the oldest shards first
        // (least-shard) picks shards that can move instead of picking the
        // same pinned ones, dropped below, at every tick.
        let pinned_at =
            |region: usize, shard: &str| self.placements.get(shard).is_some_and(|t| regions[region].address == *t);
        let pinned_last = if self.placements.is_empty() { None } else { view.with_last(pinned_at) };
        let decision = self.strategy.rebalance(pinned_last.as_ref().unwrap_or(view));
        let mut chosen: HashSet<String> = shards.iter().cloned().collect();
        let mut destinations = HashMap::new();
        for RebalanceMove { shard, to } in decision.value {
            let pinned_home = homes.get(shard.as_str()).is_some_and(|&home| pinned_at(home, &shard));
            if !pinned_home && chosen.insert(shard.clone()) {
                if let Some(to) = to {
                    destinations.insert(shard.clone(), to);
                }
                shards.push(shard);
            }
        }
        Rebalance { shards, placement_moves, destinations, fallback: decision.fallback }
    }
}

#[cfg(test)]
mod tests {
    use shardalloc_guest::RegionStatus;
    use shardalloc_guest::testing::Scenario;

    use super::*;
    use crate::strategy::builtin;

    fn least_shard() -> ExternalAllocation {
        ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()))
    }

    fn view(scenario: Scenario) -> ClusterView {
        ClusterView::from_snapshot(&scenario.snapshot)
    }

    #[test]
    fn placement_is_honoured() {
        let mut external = least_shard();
        external.set_placement("42", "b");
        let v = view(Scenario::parse("a= b=1,2,3 c="));
        let allocation = external.allocate(&v, "42", None).unwrap();
        assert_eq!(allocation, Allocation { region: "b".into(), reason: AllocationReason::Placement, warning: None });
    }

    #[test]
    fn unplaced_shard_goes_to_the_strategy() {
        let mut external = least_shard();
        external.set_placement("42", "b");
        let v = view(Scenario::parse("a=1 b=2,3 c="));
        let allocation = external.allocate(&v, "7", None).unwrap();
        assert_eq!(allocation.region, "c");
        assert_eq!(
            allocation.reason,
            AllocationReason::Strategy { name: "least-shard".into(), version: env!("CARGO_PKG_VERSION").into() }
        );
        assert_eq!(allocation.warning, None);
    }

    #[test]
    fn unallocatable_target_falls_to_the_strategy_with_a_warning() {
        let cases = [
            (Scenario::parse("a= b=1 c=2").status("b", RegionStatus::Unreachable), "b", "region b is unreachable"),
            (Scenario::parse("a= b=1 c=2").draining("b"), "b", "region b is draining"),
            (Scenario::parse("a= b=1 c=2").proxy_only("b"), "b", "region b is proxy-only"),
            (Scenario::parse("a= b=1 c=2"), "z", "region z is not a known region"),
        ];
        for (scenario, target, reason) in cases {
            let mut external = least_shard();
            external.set_placement("42", target);
            let allocation = external.allocate(&view(scenario), "42", None).unwrap();
            assert_eq!(allocation.region, "a", "{reason}");
            let warning = allocation.warning.expect("a warning");
            for part in ["42", target, reason] {
                assert!(warning.contains(part), "{warning:?} lacks {part:?}");
            }
        }
    }

    #[test]
    fn rebalance_adds_misplaced_pinned_shards_first() {
        let mut external = least_shard();
        external.set_placement("3", "c");
        external.set_placement("1", "a");
        let v = view(Scenario::parse("a=1,2,3,4,5,6 b=7 c="));
        let rebalance = external.rebalance(&v);
        // 3 is misplaced; least-shard's own pick (the oldest of a that can
        // move, limit 1) is 2 — 1 is pinned at home — then 3 again.
        assert_eq!(rebalance.shards, ["3", "2"]);
        assert_eq!(rebalance.placement_moves, 1);
        assert_eq!(rebalance.fallback, None);
    }

    #[test]
    fn the_strategy_picks_past_shards_pinned_at_their_home() {
        let mut external = least_shard();
        external.set_placement("1", "a");
        external.set_placement("2", "a");
        let v = view(Scenario::parse("a=1,2,3,4,5,6 b=7 c="));
        // 1 and 2 come last in a's list, so least-shard's pick (the oldest,
        // limit 1) is 3; were they first, it would pick 1, dropped at every
        // tick, and 3…6 would never move.
        assert_eq!(external.rebalance(&v).shards, ["3"]);
        external.remove_placement("1");
        external.remove_placement("2");
        assert_eq!(external.rebalance(&v).shards, ["1"]);
    }

    #[test]
    fn misplaced_shards_are_the_same_whichever_side_is_walked() {
        let v = view(Scenario::parse("a=1,2,3 b=4,5 c="));
        // Fewer placements than homes: the placements are walked.
        let mut few = least_shard();
        few.set_placement("4", "a");
        few.set_placement("2", "c");
        // More: the homes are walked, and the order is still the shards'.
        let mut many = least_shard();
        for shard in ["4", "2", "x", "y", "z", "w"] {
            many.set_placement(shard, if shard == "4" { "a" } else { "c" });
        }
        many.set_placement("1", "a");
        let (few, many) = (few.rebalance(&v), many.rebalance(&v));
        assert_eq!((few.placement_moves, many.placement_moves), (2, 2));
        assert_eq!(few.shards[..2], ["2", "4"]);
        assert_eq!(many.shards[..2], ["2", "4"]);
    }

    #[test]
    fn rebalance_never_moves_a_shard_at_its_target() {
        let mut external = ExternalAllocation::new(Guarded::new(
            builtin::native("least-shard", r#"{"absolute_limit":100,"relative_limit":1.0}"#).unwrap().unwrap(),
        ));
        for shard in ["1", "2", "3", "4", "5", "6"] {
            external.set_placement(shard, "a");
        }
        let v = view(Scenario::parse("a=1,2,3,4,5,6 b= c="));
        assert_eq!(external.rebalance(&v).shards, Vec::<String>::new());
        // A moving or homeless pinned shard, or one whose target is down, is not added.
        external.set_placement("9", "b");
        external.set_placement("7", "c");
        let v = view(
            Scenario::parse("a=1,2,3,4,5,6 b=7 c= d=9").status("c", RegionStatus::Unreachable).in_progress(&["9"]),
        );
        assert_eq!(external.rebalance(&v).shards, Vec::<String>::new());
    }

    #[test]
    fn placements_survive_a_strategy_swap() {
        let mut external = least_shard();
        external.set_placement("42", "b");
        let old = external.replace_strategy(Guarded::new(builtin::native("hash", "").unwrap().unwrap()));
        assert_eq!(old.info().name, "least-shard");
        let allocation = external.allocate(&view(Scenario::parse("a= b=1")), "42", None).unwrap();
        assert_eq!(allocation.region, "b");
        assert_eq!(external.remove_placement("42").as_deref(), Some("b"));
        assert!(external.placements().is_empty());
    }
}
