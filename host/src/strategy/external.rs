//! External allocation: operators' placements ("shard S belongs on region
//! R"), wrapped around whatever strategy is active so they survive swaps.
//!
//! - allocate: the placement's target when it is allocatable; otherwise the
//!   strategy's answer plus a warning naming shard, target and reason.
//! - rebalance: shards whose home differs from an allocatable placement
//!   target come first (by shard id), then the strategy's answer without
//!   pinned shards that already sit at their target.

use std::collections::{BTreeMap, HashSet};

use super::ClusterView;
use super::guarded::{Decision, Guarded, NoAllocatableRegion};
use super::{Info, StrategyError};

/// Why a shard got the home it got.
#[derive(Debug, Clone, PartialEq)]
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
        let mut warning = None;
        if let Some(target) = self.placements.get(shard) {
            match view.not_allocatable_reason(target) {
                None => return Ok(Allocation { region: target.clone(), reason: AllocationReason::Placement, warning }),
                Some(reason) => {
                    let text = format!(
                        "placement of shard {shard} on {target} not honoured ({reason}); using strategy {} instead",
                        self.info().name
                    );
                    tracing::warn!(shard, target = %target, reason = %reason, "{text}");
                    warning = Some(text);
                }
            }
        }
        let Decision { value, fallback } = self.strategy.allocate(view, shard, requester)?;
        let reason = match fallback {
            Some(error) => AllocationReason::Fallback(error),
            None => AllocationReason::Strategy { name: self.info().name.clone(), version: self.info().version.clone() },
        };
        Ok(Allocation { region: value, reason, warning })
    }

    /// Shards to move.
    pub fn rebalance(&mut self, view: &ClusterView) -> Rebalance {
        let homes = view.home_index();
        let regions = view.regions();
        let mut shards = Vec::new();
        for (shard, target) in &self.placements {
            let Some(&home) = homes.get(shard.as_str()) else { continue };
            if regions[home].address != *target && view.is_allocatable(target) && !view.in_progress().contains(shard) {
                shards.push(shard.clone());
            }
        }
        let placement_moves = shards.len();
        let decision = self.strategy.rebalance(view);
        let mut chosen: HashSet<String> = shards.iter().cloned().collect();
        for shard in decision.value {
            let pinned_home = self
                .placements
                .get(&shard)
                .is_some_and(|target| homes.get(shard.as_str()).is_some_and(|&h| regions[h].address == *target));
            if !pinned_home && chosen.insert(shard.clone()) {
                shards.push(shard);
            }
        }
        Rebalance { shards, placement_moves, fallback: decision.fallback }
    }
}
