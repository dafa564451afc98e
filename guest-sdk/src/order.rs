//! The suitability order of regions (Akka's `ShardSuitabilityOrdering`),
//! shared by the built-in strategies and available to any author.

use std::cmp::Ordering;

use crate::view::{Ranks, RegionId, View};

/// The suitability order of two regions of `view`: `Less` means `a` is more
/// suitable to receive a shard than `b`. It is total:
///
/// 1. not leaving before leaving;
/// 2. higher application version first ([`compare_versions`]);
/// 3. fewer shards first ([`View::shard_count`]);
/// 4. lower join order (older) first;
/// 5. address, bytewise.
///
/// It looks at nothing else: whether a region is allocatable is the caller's
/// filter. Everything but the shard count depends only on the topology, so
/// it is ranked once per topology ([`Ranks`]) and each comparison compares
/// three integers.
pub fn region_order(view: &View, a: RegionId, b: RegionId) -> Ordering {
    let ranks = view.topology().ranks();
    let counts = view.shard_counts();
    Ranks::compare(ranks.key(a, counts), ranks.key(b, counts))
}

/// The most suitable of `candidates` by [`region_order`] (the first one on
/// an exact tie, which only a repeated id can cause); `None` when there are
/// none. Pass `view.allocatable()` for least-shard's own allocation. One
/// pass over the candidates: two loads, a shift, an or and a minimum each
/// ([`Ranks::most_suitable`]). For the allocatable regions themselves,
/// [`View::most_suitable_allocatable`] gives the same answer without the
/// scan: the view keeps them in this order as their counts change.
pub fn least_loaded(view: &View, candidates: impl Iterator<Item = RegionId>) -> Option<RegionId> {
    view.topology().ranks().most_suitable(candidates, view.shard_counts())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Scenario;
    use crate::view::RegionStatus;

    #[test]
    fn each_tie_break_in_turn() {
        let view = Scenario::parse("leaving= old=1 new=2 busy=3,4 young=5 b=6")
            .status("leaving", RegionStatus::Leaving)
            .version("old", "1.9")
            .version("new", "1.10")
            .version("busy", "1.10")
            .version("young", "1.10")
            .version("b", "1.10")
            .join_order("young", 9)
            .join_order("b", 9)
            .version("leaving", "2.0")
            .view();
        let id = |a: &str| view.find(a).unwrap();
        assert_eq!(region_order(&view, id("new"), id("leaving")), Ordering::Less, "not leaving first");
        assert_eq!(region_order(&view, id("new"), id("old")), Ordering::Less, "newer version first");
        assert_eq!(region_order(&view, id("new"), id("busy")), Ordering::Less, "fewer shards first");
        assert_eq!(region_order(&view, id("new"), id("young")), Ordering::Less, "older first");
        assert_eq!(region_order(&view, id("b"), id("young")), Ordering::Less, "address last");
        assert_eq!(least_loaded(&view, view.region_ids()), Some(id("new")));
        assert_eq!(least_loaded(&view, std::iter::empty()), None);
    }
}
