//! The allocatable regions in suitability order ([`crate::order`]), kept
//! as shard counts change, so that the most suitable one is a lookup and
//! not a scan of every region ([`crate::View::most_suitable_allocatable`]).
//!
//! Each region's place is its [`Ranks::key`] (standing, shard count,
//! seniority, index), held in an ordered set: a count that changes costs a
//! removal and an insertion (O(log regions)), the answer is the set's first
//! key. The view builds the set on its second use (its first scans, so a
//! view made for one call costs a scan), from its counts, and keeps it by
//! its own count bookkeeping after that.

use std::collections::BTreeSet;

use crate::topology::{Ranks, RegionId};

/// The allocatable regions of one topology ordered by suitability under
/// the counts they were last told.
#[derive(Clone, Debug, Default)]
pub(crate) struct Suitable {
    keys: BTreeSet<u128>,
}

impl Suitable {
    /// The allocatable regions of `ranks` under `counts` (one per region).
    pub(crate) fn build(ranks: &Ranks, counts: &[u32]) -> Self {
        Suitable { keys: ranks.allocatable().iter().map(|&id| ranks.key(id, counts)).collect() }
    }

    /// A region's shard count went from `old` to `new`; regions that are
    /// not allocatable are not in the set and stay out of it.
    pub(crate) fn recount(&mut self, ranks: &Ranks, id: RegionId, old: u32, new: u32) {
        if self.keys.remove(&ranks.key_with(id, old)) {
            self.keys.insert(ranks.key_with(id, new));
        }
    }

    /// The most suitable allocatable region, if there is one.
    pub(crate) fn first(&self) -> Option<RegionId> {
        self.keys.first().map(|&key| Ranks::region(key))
    }
}
