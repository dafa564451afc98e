//! Tests of the load-balance strategy: rounds on concrete clusters, the
//! configuration, the SDK's conformance suite, and properties of `plan` on
//! random clusters (a move never raises the most loaded region; a balanced
//! cluster is left alone).

use proptest::prelude::*;
use shardalloc_guest::testing::Scenario;
use shardalloc_guest::{RegionStatus, Strategy as _, conformance};
use shardalloc_strategy_load_balance::{Bin, LoadBalance, LoadBalanceConfig, plan};

fn configured(config: &str) -> LoadBalance {
    let mut strategy = LoadBalance::default();
    strategy.configure(config).unwrap();
    strategy
}

/// `Scenario::parse(spec)` with shard loads.
fn cluster(spec: &str, loads: &[(&str, f64)]) -> Scenario {
    loads.iter().fold(Scenario::parse(spec), |s, (shard, load)| s.load(shard, *load))
}

#[test]
fn rebalance_table() {
    // (case, cluster, config, the moves of one round)
    let cases: Vec<(&str, Scenario, &str, &[&str])> = vec![
        (
            "one hot region gives its heaviest shard that fits the gap; the region it lifted above the band \
             passes one on",
            cluster("a=h,w b=x c=y", &[("h", 50.0), ("w", 30.0), ("x", 20.0), ("y", 20.0)]),
            "",
            &["w", "y"],
        ),
        (
            "a region of one hot shard is passed over and held apart: the others share the rest evenly",
            cluster(
                "a=g b=1,2,3,4,5,6,7,8 new=",
                &[
                    ("g", 100.0),
                    ("1", 10.0),
                    ("2", 10.0),
                    ("3", 10.0),
                    ("4", 10.0),
                    ("5", 10.0),
                    ("6", 10.0),
                    ("7", 10.0),
                    ("8", 10.0),
                ],
            ),
            "",
            &["1", "2", "3", "4"],
        ),
        (
            "a shard as heavy as the gap never moves: it would only swap the hot spot",
            cluster("a=h b=x", &[("h", 100.0), ("x", 10.0)]),
            "",
            &[],
        ),
        (
            "within the band: left alone",
            cluster("a=1,2 b=3,4", &[("1", 10.0), ("2", 10.5), ("3", 10.0), ("4", 10.0)]),
            "",
            &[],
        ),
        (
            "a new region is filled to the mean",
            cluster(
                "a=1,2,3 b=4,5,6 new=",
                &[("1", 10.0), ("2", 10.0), ("3", 10.0), ("4", 10.0), ("5", 10.0), ("6", 10.0)],
            ),
            "",
            &["1", "4"],
        ),
        (
            "a new region the last round's budget left short (within the band, few shards) is filled on",
            {
                let spec = format!(
                    "a={} b={} new=x",
                    (1..=12).map(|s| s.to_string()).collect::<Vec<_>>().join(","),
                    (13..=24).map(|s| s.to_string()).collect::<Vec<_>>().join(",")
                );
                let loads: Vec<(String, f64)> = (1..=24).map(|s| (s.to_string(), 5.0)).collect();
                let scenario = loads.iter().fold(Scenario::parse(&spec), |s, (shard, load)| s.load(shard, *load));
                scenario.load("x", 52.0)
            },
            "",
            &["1"],
        ),
        (
            "no load reported: shard counts",
            Scenario::parse("a=1,2,3,4,5,6 b=7 c=8"),
            "",
            // 3, 2, 3 after: one shard more would only move the excess.
            &["1", "2", "3"],
        ),
        (
            "a wide tolerance leaves a mild imbalance",
            cluster("a=1,2 b=3", &[("1", 10.0), ("2", 10.0), ("3", 14.0)]),
            r#"{"tolerance": 0.5}"#,
            &[],
        ),
        (
            "pinned shards stay",
            cluster("a=h,p b=x", &[("h", 9.0), ("p", 30.0), ("x", 1.0)]).placement("p", "a"),
            "",
            &["h"],
        ),
        (
            "a hand-off in progress holds the round",
            cluster("a=h,m b=x", &[("h", 9.0), ("m", 30.0), ("x", 1.0)]).in_progress(&["m"]),
            "",
            &[],
        ),
        (
            "draining regions are no destination",
            cluster("a=1,2,3 d=", &[("1", 10.0), ("2", 10.0), ("3", 10.0)]).draining("d"),
            "",
            &[],
        ),
        (
            "max_moves bounds a round",
            cluster("a=1,2,3,4 b= c=", &[("1", 5.0), ("2", 5.0), ("3", 5.0), ("4", 5.0)]),
            r#"{"max_moves": 1}"#,
            &["1"],
        ),
        (
            "an unreachable region holds the round",
            cluster("a=1,2,3 b=", &[("1", 5.0), ("2", 5.0), ("3", 5.0)]).status("b", RegionStatus::Unreachable),
            "",
            &[],
        ),
    ];
    for (case, scenario, config, moves) in cases {
        let strategy = configured(config);
        let got = scenario.rebalance(&strategy).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(got, moves, "{case}");
    }
}

#[test]
fn allocate_takes_the_least_loaded_region_then_least_shards_order() {
    let strategy = LoadBalance::default();
    assert_eq!(Scenario::parse("a=1,2 b=3 c=4,5").allocate(&strategy, "new").unwrap(), "b", "no load: counts");
    let loaded = cluster("a=h b=1,2", &[("h", 100.0), ("1", 1.0), ("2", 1.0)]);
    assert_eq!(loaded.allocate(&strategy, "new").unwrap(), "b", "the lighter region, though it holds more shards");
    let tie = cluster("a=1 b=2,3", &[("1", 2.0), ("2", 1.0), ("3", 1.0)]);
    assert_eq!(tie.allocate(&strategy, "new").unwrap(), "a", "equal loads: fewer shards");
    let scenario = Scenario::parse("a= b=1").draining("a");
    assert_eq!(scenario.allocate(&strategy, "new").unwrap(), "b");
    let nowhere = Scenario::parse("a=").draining("a");
    assert_eq!(nowhere.allocate(&strategy, "new").unwrap_err(), "no allocatable region");
}

#[test]
fn configuration_errors_name_the_key() {
    assert_eq!(LoadBalanceConfig::parse("").unwrap(), LoadBalanceConfig::default());
    assert_eq!(LoadBalanceConfig::parse(r#"{"tolerance": 0.25}"#).unwrap().tolerance, 0.25);
    for (bad, says) in [
        (r#"{"tolerance": 0}"#, "`tolerance`"),
        (r#"{"tolerance": 1.5}"#, "`tolerance`"),
        (r#"{"tolerance": "x"}"#, "`tolerance`"),
        (r#"{"max_moves": 0}"#, "`max_moves`"),
        (r#"{"max_moves": 2.5}"#, "`max_moves`"),
        (r#"{"spread": true}"#, "spread"),
    ] {
        let error = LoadBalanceConfig::parse(bad).unwrap_err();
        assert!(error.contains(says), "{bad}: {error}");
    }
}

#[test]
fn conforms() {
    conformance::assert_conforms(LoadBalance::default());
}

fn bins() -> impl Strategy<Value = Vec<Bin<usize>>> {
    prop::collection::vec(prop::collection::vec(0u32..1_000, 0..12), 2..8).prop_map(|regions| {
        let mut next = 0;
        regions
            .into_iter()
            .map(|loads| {
                let movable: Vec<(usize, f64)> = loads
                    .into_iter()
                    .map(|load| {
                        next += 1;
                        (next, f64::from(load))
                    })
                    .collect();
                Bin { load: movable.iter().map(|(_, l)| l).sum(), movable }
            })
            .collect()
    })
}

fn apply(bins: &[Bin<usize>], moves: &[(usize, usize, usize)]) -> Vec<f64> {
    let mut loads: Vec<f64> = bins.iter().map(|b| b.load).collect();
    let weight = |shard: usize| bins.iter().flat_map(|b| &b.movable).find(|(s, _)| *s == shard).unwrap().1;
    for (shard, from, to) in moves {
        loads[*from] -= weight(*shard);
        loads[*to] += weight(*shard);
    }
    loads
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every move lowers the pair it joins below the source's load before
    /// it: the most loaded region never gets more loaded, a shard never
    /// moves twice in a round, and the spread never grows.
    #[test]
    fn moves_never_raise_the_maximum(bins in bins(), tolerance in 0.01f64..1.0) {
        let moves = plan(bins.clone(), tolerance, 1_000);
        let before = bins.iter().map(|b| b.load).fold(0.0, f64::max);
        let after = apply(&bins, &moves);
        prop_assert!(after.iter().copied().fold(0.0, f64::max) <= before + 1e-9);
        let mut shards: Vec<usize> = moves.iter().map(|(s, _, _)| *s).collect();
        shards.sort();
        shards.dedup();
        prop_assert_eq!(shards.len(), moves.len(), "a shard moved twice");
        let spread = |loads: &[f64]| loads.iter().copied().fold(0.0, f64::max) - loads.iter().copied().fold(f64::MAX, f64::min);
        prop_assert!(spread(&after) <= spread(&bins.iter().map(|b| b.load).collect::<Vec<_>>()) + 1e-9);
    }

    /// A cluster where every region is within the band is left alone.
    #[test]
    fn a_balanced_cluster_is_left_alone(loads in prop::collection::vec(95u32..=105, 2..8)) {
        let bins: Vec<Bin<usize>> =
            loads.iter().enumerate().map(|(i, l)| Bin { load: f64::from(*l), movable: vec![(i, f64::from(*l))] }).collect();
        prop_assert!(plan(bins, 0.1, 1_000).is_empty());
    }
}
