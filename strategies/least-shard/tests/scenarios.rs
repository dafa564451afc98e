//! Concrete scenarios with literal answers, worked out from Akka's documented
//! behaviour and its `LeastShardAllocationStrategySpec` (current algorithm)
//! and `DeprecatedLeastShardAllocationStrategySpec` (classic algorithm),
//! plus this strategy's own rules for proxy-only, draining and leaving regions.

mod common;

use common::{abc, apply, ids, range, sizes, strategy, unlimited};
use shardalloc_guest::RegionStatus::{Joining, Leaving, Unreachable};
use shardalloc_guest::testing::Scenario;
use shardalloc_guest::{RegionId, Strategy};
use shardalloc_strategy_least_shard::{LeastShard, least_loaded, region_order};

// ---------------------------------------------------------------- allocate

#[test]
fn allocates_to_the_region_with_fewest_shards_ignoring_the_requester() {
    let s = LeastShard::default();
    let cluster = abc(1, 1, 0);
    assert_eq!(cluster.allocate(&s, "003").unwrap(), "c");
    assert_eq!(cluster.allocate_from(&s, "003", Some("a")).unwrap(), "c");
    assert_eq!(cluster.allocate_from(&s, "003", Some("b")).unwrap(), "c");
}

#[test]
fn higher_version_beats_fewer_shards_and_compares_numerically() {
    let s = LeastShard::default();
    let cluster = Scenario::parse("a=1,2,3 b= c=").version("a", "1.10").version("b", "1.9").version("c", "1.9");
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "a");
    let cluster = cluster.version("c", "1.10.1");
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "c");
}

#[test]
fn fewer_shards_beat_join_order() {
    let s = LeastShard::default();
    let cluster = Scenario::parse("a=1 b=").join_order("a", 1).join_order("b", 9);
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "b");
}

#[test]
fn older_region_wins_a_tie_on_shards() {
    let s = LeastShard::default();
    let cluster = Scenario::parse("a=1 b=2 c=3").join_order("a", 5).join_order("b", 2).join_order("c", 3);
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "b");
}

#[test]
fn address_bytewise_breaks_the_last_tie() {
    let s = LeastShard::default();
    let cluster = Scenario::parse("b= a= B=").join_order("a", 1).join_order("b", 1).join_order("B", 1).version("B", "");
    // "B" (0x42) sorts before "a" (0x61) and "b".
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "B");
    let cluster = Scenario::parse("b= a=").join_order("a", 1).join_order("b", 1);
    assert_eq!(cluster.allocate(&s, "x").unwrap(), "a");
}

#[test]
fn only_allocatable_regions_receive_shards() {
    let s = LeastShard::default();
    let base = Scenario::parse("a= b=1 c=2,3");
    assert_eq!(base.allocate(&s, "x").unwrap(), "a");
    assert_eq!(base.clone().draining("a").allocate(&s, "x").unwrap(), "b");
    assert_eq!(base.clone().proxy_only("a").allocate(&s, "x").unwrap(), "b");
    for status in [Joining, Leaving, Unreachable] {
        assert_eq!(base.clone().status("a", status).allocate(&s, "x").unwrap(), "b", "{status:?}");
    }
}

#[test]
fn allocate_errs_clearly_when_nothing_is_allocatable() {
    let s = LeastShard::default();
    let err = Scenario::default().allocate(&s, "x").unwrap_err();
    assert!(err.contains("no allocatable region") && err.contains("no regions"), "{err}");
    let cluster =
        Scenario::parse("a=1 p= l=2 j=").draining("a").proxy_only("p").status("l", Leaving).status("j", Joining);
    let err = cluster.allocate(&s, "x").unwrap_err();
    assert_eq!(
        err,
        "no allocatable region (up, not proxy-only, not draining) among 4: 1 proxy-only, 1 draining, 1 joining, \
         1 leaving"
    );
}

#[test]
fn region_order_prefers_least_shards_latest_version_and_not_leaving() {
    // Akka: "prefer least shards, latest version, non downed, leaving or exiting nodes".
    let cluster = Scenario::parse("fewest= leaving= most=ShardId2,ShardId3 oldapp= oneshard=ShardId1")
        .version("fewest", "1.0.1")
        .version("leaving", "1.0.0")
        .status("leaving", Leaving)
        .version("most", "1.0.1")
        .version("oldapp", "1.0.0")
        .version("oneshard", "1.0.1");
    let view = cluster.view();
    let mut order: Vec<RegionId> = view.region_ids().collect();
    order.sort_by(|a, b| region_order(&view, *a, *b));
    let addresses: Vec<&str> = order.iter().map(|id| view.region(*id).address.as_str()).collect();
    assert_eq!(addresses, ["fewest", "oneshard", "most", "oldapp", "leaving"]);

    // A leaving region is last even with a newer version and no shards.
    let cluster = Scenario::parse("a=1,2,3 l=").status("l", Leaving).version("l", "9");
    let view = cluster.view();
    assert_eq!(region_order(&view, RegionId(1), RegionId(0)), std::cmp::Ordering::Greater);
    assert_eq!(least_loaded(&view, view.region_ids()), Some(RegionId(0)));
}

#[test]
fn least_loaded_picks_among_the_candidates_only() {
    let cluster = Scenario::parse("a=1,2 b= c=1x");
    let view = cluster.view();
    assert_eq!(least_loaded(&view, std::iter::empty()), None);
    assert_eq!(least_loaded(&view, view.region_ids()), Some(RegionId(1)));
    assert_eq!(least_loaded(&view, [RegionId(0), RegionId(2)].into_iter()), Some(RegionId(2)));
    // Order of the candidates does not matter.
    assert_eq!(least_loaded(&view, [RegionId(2), RegionId(0)].into_iter()), Some(RegionId(2)));
}

// ------------------------------------------------------- current algorithm

#[test]
fn current_1_2_0() {
    let s = unlimited();
    let cluster = abc(1, 2, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["002"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [1, 1, 1]);
}

#[test]
fn current_2_0_0() {
    let s = unlimited();
    let cluster = abc(2, 0, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["001"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [1, 1, 0]);
}

#[test]
fn current_1_1_0_is_balanced() {
    assert_eq!(abc(1, 1, 0).rebalance(&unlimited()).unwrap(), Vec::<String>::new());
}

#[test]
fn current_3_0_0() {
    let s = unlimited();
    let cluster = abc(3, 0, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["001", "002"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [1, 1, 1]);
}

#[test]
fn current_4_4_0_phase_1() {
    let s = unlimited();
    let cluster = abc(4, 4, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["001", "005"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [3, 3, 2]);
}

#[test]
fn current_4_4_2_phase_2() {
    let s = unlimited();
    let cluster = abc(4, 4, 2);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["001"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [3, 4, 3]);
}

#[test]
fn current_5_5_0_takes_two_rounds() {
    let s = unlimited();
    let cluster = abc(5, 5, 0);
    let first = cluster.rebalance(&s).unwrap();
    assert_eq!(first, ids(&["001", "006"]));
    let cluster = apply(&s, &cluster, &first);
    assert_eq!(sizes(&cluster), [4, 4, 2]);
    let second = cluster.rebalance(&s).unwrap();
    assert_eq!(second, ids(&["002"]));
    let cluster = apply(&s, &cluster, &second);
    assert_eq!(sizes(&cluster), [3, 4, 3]);
    assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new());
}

#[test]
fn current_50_0_50_takes_two_rounds() {
    let s = unlimited();
    let cluster = abc(50, 0, 50);
    let first = cluster.rebalance(&s).unwrap();
    // Regions in order: b (0 shards), a (50, older), c (50); each gives its
    // 50 - 34 oldest shards.
    let mut expected = range(1, 16);
    expected.extend(range(51, 66));
    assert_eq!(first, expected);
    let cluster = apply(&s, &cluster, &first);
    assert_eq!(sizes(&cluster), [34, 32, 34]);
    let second = cluster.rebalance(&s).unwrap();
    assert_eq!(second, ids(&["017"]));
    let cluster = apply(&s, &cluster, &second);
    assert_eq!(sizes(&cluster), [33, 33, 34]);
    assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new());
}

#[test]
fn current_phase_2_is_bounded_by_the_limit_and_takes_oldest_in_region_order() {
    // 22 shards on 7 regions: optimal 4, nobody above it; e and f are two
    // below optimal - 1 each (count 4), the 4-shard regions give one each.
    let cluster = Scenario::parse("a=a1,a2,a3,a4 b=b1,b2,b3,b4 c=c1,c2,c3,c4 d=d1,d2,d3,d4 e=e1 f=f1 g=g1,g2,g3,g4")
        .join_order("g", 0);
    assert_eq!(cluster.rebalance(&unlimited()).unwrap(), ids(&["g1", "a1", "b1", "c1"]));
    let limited = strategy(r#"{"absolute_limit":2,"relative_limit":1}"#);
    assert_eq!(cluster.rebalance(&limited).unwrap(), ids(&["g1", "a1"]));
    // 0.1 × 22 = 2.2 → 2.
    assert_eq!(cluster.rebalance(&LeastShard::default()).unwrap(), ids(&["g1", "a1"]));
}

#[test]
fn current_respects_the_absolute_limit() {
    let s = strategy(r#"{"absolute_limit":3,"relative_limit":1.0}"#);
    let cluster = abc(1, 9, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["002", "003", "004"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [2, 6, 2]);
}

#[test]
fn current_respects_the_relative_limit() {
    let s = strategy(r#"{"absolute_limit":5,"relative_limit":0.3}"#);
    let cluster = abc(1, 9, 0);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["002", "003", "004"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [2, 6, 2]);
}

#[test]
fn current_default_limit_is_at_least_one() {
    // 0.1 × 10 = 1 and 0.1 × 2 = 0.2 → at least 1.
    let s = LeastShard::default();
    assert_eq!(abc(1, 9, 0).rebalance(&s).unwrap(), ids(&["002"]));
    assert_eq!(abc(2, 0, 0).rebalance(&s).unwrap(), ids(&["001"]));
    // 0.1 × 1000 = 100, capped at 20.
    let cluster = Scenario::parse(&format!("a={} b=", range(1, 1000).join(",")));
    assert_eq!(cluster.rebalance(&s).unwrap(), range(1, 20));
}

#[test]
fn current_holds_while_any_hand_off_is_in_progress() {
    let s = unlimited();
    assert_eq!(abc(10, 0, 0).in_progress(&["002", "003"]).rebalance(&s).unwrap(), Vec::<String>::new());
    // Even a homeless moving shard holds it.
    assert_eq!(abc(10, 0, 0).in_progress(&["999"]).rebalance(&s).unwrap(), Vec::<String>::new());
    assert_eq!(abc(10, 0, 0).rebalance(&s).unwrap(), range(1, 6));
}

#[test]
fn holds_during_a_rolling_update() {
    for s in
        [unlimited(), strategy(r#"{"algorithm":"classic","rebalance_threshold":2,"max_simultaneous_rebalance":100}"#)]
    {
        let cluster = abc(5, 5, 0).version("a", "1.0.0").version("b", "1.0.1").version("c", "1.0.0");
        assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new());
        assert_eq!(cluster.clone().in_progress(&["001", "002"]).rebalance(&s).unwrap(), Vec::<String>::new());
        let cluster = cluster.version("b", "1.0.0");
        assert_ne!(cluster.rebalance(&s).unwrap(), Vec::<String>::new());
    }
}

#[test]
fn holds_while_a_region_is_unreachable_or_joining() {
    for s in
        [unlimited(), strategy(r#"{"algorithm":"classic","rebalance_threshold":2,"max_simultaneous_rebalance":100}"#)]
    {
        for status in [Unreachable, Joining] {
            let cluster = abc(5, 5, 0).status("b", status);
            assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new(), "{status:?}");
            let cluster = abc(5, 5, 0).status("c", status);
            assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new(), "{status:?}");
            // A proxy's hand-off acknowledgement is needed too.
            let cluster = Scenario::parse("a=1,2,3,4 b= p=").proxy_only("p").status("p", status);
            assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new(), "{status:?}");
        }
    }
}

#[test]
fn proxies_are_ignored_by_the_counts_and_the_version_check() {
    let s = unlimited();
    let cluster =
        Scenario::parse("a=1,2,3,4 b= p=").proxy_only("p").version("p", "7").version("a", "1").version("b", "1");
    // 4 shards over a and b: optimal 2.
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["1", "2"]));
}

#[test]
fn draining_regions_count_as_target_zero() {
    let s = unlimited();
    let cluster = Scenario::parse("a=1,2,3,4,5,6 b= d=7,8").draining("d");
    // Receivers a, b: optimal 8 / 2 = 4. In region order b (0), d (2), a (6):
    // d gives all its shards, a its 2 oldest.
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["7", "8", "1", "2"]));
    let after = apply(&s, &cluster, &moved);
    assert_eq!(sizes(&after), [4, 4, 0]);
    assert_eq!(after.rebalance(&s).unwrap(), Vec::<String>::new());
    // With the default limit (0.1 × 8 → 1) the first one only.
    assert_eq!(cluster.rebalance(&LeastShard::default()).unwrap(), ids(&["7"]));
}

#[test]
fn leaving_regions_count_as_target_zero_and_come_last() {
    let s = unlimited();
    let cluster = Scenario::parse("l=7,8 a=1,2,3,4,5,6 b=").status("l", Leaving);
    let moved = cluster.rebalance(&s).unwrap();
    assert_eq!(moved, ids(&["1", "2", "7", "8"]));
    assert_eq!(sizes(&apply(&s, &cluster, &moved)), [0, 4, 4]);
    // No churn: balanced receivers and an empty leaving region stay put.
    let cluster = Scenario::parse("a=1,2,3,4,5 b=6,7,8,9,10 l=").status("l", Leaving);
    assert_eq!(cluster.rebalance(&s).unwrap(), Vec::<String>::new());
}

#[test]
fn nothing_to_do_without_receivers_or_shards() {
    let s = unlimited();
    assert_eq!(Scenario::parse("a= b=").rebalance(&s).unwrap(), Vec::<String>::new());
    assert_eq!(Scenario::parse("a=1,2 b=3").draining("a").draining("b").rebalance(&s).unwrap(), Vec::<String>::new());
    assert_eq!(Scenario::default().rebalance(&s).unwrap(), Vec::<String>::new());
}

// ------------------------------------------------------- classic algorithm

fn classic(threshold: u32, max_simultaneous: u32) -> LeastShard {
    strategy(&format!(
        r#"{{"algorithm":"classic","rebalance_threshold":{threshold},"max_simultaneous_rebalance":{max_simultaneous}}}"#
    ))
}

fn none() -> Vec<String> {
    Vec::new()
}

#[test]
fn classic_allocates_to_least_shards() {
    assert_eq!(abc(1, 1, 0).allocate(&classic(3, 10), "003").unwrap(), "c");
}

#[test]
fn classic_threshold_1() {
    let s = classic(1, 10);
    let cluster = abc(2, 0, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001"]));
    assert_eq!(cluster.in_progress(&["001"]).rebalance(&s).unwrap(), none());

    assert_eq!(abc(1, 1, 0).rebalance(&s).unwrap(), none());

    let cluster = abc(1, 2, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["002"]));
    assert_eq!(cluster.in_progress(&["002"]).rebalance(&s).unwrap(), none());

    let cluster = abc(3, 0, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001"]));
    assert_eq!(cluster.in_progress(&["001"]).rebalance(&s).unwrap(), ids(&["002"]));

    let cluster = abc(4, 4, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001"]));
    assert_eq!(cluster.in_progress(&["001"]).rebalance(&s).unwrap(), ids(&["005"]));

    let cluster = abc(4, 4, 2);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001"]));
    assert_eq!(cluster.in_progress(&["001"]).rebalance(&s).unwrap(), ids(&["005"]));
}

#[test]
fn classic_threshold_2() {
    let s = classic(2, 10);
    assert_eq!(abc(1, 2, 0).rebalance(&s).unwrap(), none());
    let cluster = abc(1, 3, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["002"]));
    assert_eq!(cluster.in_progress(&["002"]).rebalance(&s).unwrap(), none());

    assert_eq!(abc(2, 2, 0).rebalance(&s).unwrap(), none());

    let cluster = abc(3, 3, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001"]));
    assert_eq!(cluster.clone().in_progress(&["001"]).rebalance(&s).unwrap(), ids(&["004"]));
    assert_eq!(cluster.in_progress(&["001", "004"]).rebalance(&s).unwrap(), none());

    let cluster = abc(4, 4, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001", "002"]));
    assert_eq!(cluster.clone().in_progress(&["001", "002"]).rebalance(&s).unwrap(), ids(&["005", "006"]));
    assert_eq!(cluster.in_progress(&["001", "002", "005", "006"]).rebalance(&s).unwrap(), none());

    let cluster = abc(5, 5, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001", "002"]));
    assert_eq!(cluster.clone().in_progress(&["001", "002"]).rebalance(&s).unwrap(), ids(&["006", "007"]));
    assert_eq!(cluster.in_progress(&["001", "002", "006", "007"]).rebalance(&s).unwrap(), ids(&["003"]));
}

#[test]
fn classic_50_0_50_alternates_between_equally_loaded_regions() {
    let s = classic(2, 100);
    let cluster = abc(50, 0, 50);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["001", "002"]));
    assert_eq!(cluster.clone().in_progress(&["001", "002"]).rebalance(&s).unwrap(), ids(&["051", "052"]));
    assert_eq!(cluster.in_progress(&["001", "002", "051", "052"]).rebalance(&s).unwrap(), ids(&["003", "004"]));
}

#[test]
fn classic_limits_simultaneous_rebalances() {
    let s = classic(3, 2);
    let cluster = abc(1, 10, 0);
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["002", "003"]));
    assert_eq!(cluster.in_progress(&["002", "003"]).rebalance(&s).unwrap(), none());
}

#[test]
fn classic_skips_shards_in_progress() {
    let s = classic(3, 4);
    assert_eq!(abc(10, 0, 0).in_progress(&["002", "003"]).rebalance(&s).unwrap(), ids(&["001", "004"]));
}

#[test]
fn classic_sorts_by_id_bytewise_not_by_age() {
    let cluster = Scenario::parse("a=a,B,9,10,x b=");
    assert_eq!(cluster.rebalance(&classic(1, 10)).unwrap(), ids(&["10"]));
    assert_eq!(cluster.rebalance(&classic(2, 10)).unwrap(), ids(&["10", "9"]));
    // n = min(5 - 1, 1) with threshold 1 … and min(5 - 3, 3) = 2 with threshold 3.
    assert_eq!(cluster.rebalance(&classic(3, 10)).unwrap(), ids(&["10", "9"]));
    assert_eq!(cluster.rebalance(&classic(4, 10)).unwrap(), ids(&["10"]));
    assert_eq!(cluster.rebalance(&classic(5, 10)).unwrap(), none());
}

#[test]
fn classic_moves_from_a_draining_region_when_it_is_the_most_loaded() {
    let s = classic(1, 3);
    let cluster = Scenario::parse("a=1,2 b=3,4 d=5,6,7,8,9").draining("d");
    assert_eq!(cluster.rebalance(&s).unwrap(), ids(&["5"]));
    // The least loaded region is chosen among allocatable ones only.
    let cluster = Scenario::parse("a=1,2,3,4 d=").draining("d");
    assert_eq!(cluster.rebalance(&s).unwrap(), none());
    let cluster = Scenario::parse("a=1,2,3,4 p=").proxy_only("p");
    assert_eq!(cluster.rebalance(&s).unwrap(), none());
}

#[test]
fn same_input_same_answer() {
    for s in [LeastShard::default(), unlimited(), classic(1, 3), classic(2, 10)] {
        let cluster = shardalloc_guest::testing::generate(7, &shardalloc_guest::testing::Shape::healthy(13, 400));
        let first = cluster.rebalance(&s).unwrap();
        assert!(!first.is_empty());
        for _ in 0..3 {
            assert_eq!(cluster.rebalance(&s).unwrap(), first);
            assert_eq!(Scenario::new(cluster.snapshot.clone()).rebalance(&s).unwrap(), first);
        }
    }
}

#[test]
fn rebalance_rejects_a_table_that_does_not_match_the_view() {
    let s = LeastShard::default();
    let view = Scenario::parse("a=1 b=").view();
    let table = Scenario::parse("a=1").allocations();
    let err = s.rebalance(&view, &table).unwrap_err();
    assert!(err.contains("1 regions") && err.contains("has 2"), "{err}");
}

// ------------------------------------------------------------------ pins

/// Shards pinned where they are by placements cannot move: both algorithms
/// pick past them. Before pins were in the view (contract 0.1), `classic`
/// picked the lowest ids, 1 and 2, at every round, the host dropped them,
/// and 3…6 never moved.
#[test]
fn pinned_shards_are_never_picked_so_a_region_still_drains() {
    let pinned = Scenario::parse("a=1,2,3,4,5,6 b=7 c=").placement("1", "a").placement("2", "a");
    assert_eq!(pinned.rebalance(&classic(1, 3)).unwrap(), ["3"]);
    assert_eq!(pinned.rebalance(&strategy("")).unwrap(), ["3"]);
    // Without the placements the same cluster moves the lowest id and the oldest.
    let free = Scenario::parse("a=1,2,3,4,5,6 b=7 c=");
    assert_eq!(free.rebalance(&classic(1, 3)).unwrap(), ["1"]);
    assert_eq!(free.rebalance(&strategy("")).unwrap(), ["1"]);
    // A placement on another region does not pin: the shard may move.
    let elsewhere = Scenario::parse("a=1,2,3,4,5,6 b=7 c=").placement("1", "c");
    assert_eq!(elsewhere.rebalance(&classic(1, 3)).unwrap(), ["1"]);
}
