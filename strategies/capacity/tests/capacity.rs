//! Tests of the capacity strategy: concrete scenarios, configuration, the
//! SDK's conformance suite and random clusters.

use std::collections::HashSet;

use proptest::prelude::*;
use shardalloc_guest::host::take_logs;
use shardalloc_guest::testing::{Scenario, Shape, generate};
use shardalloc_guest::{Level, RegionStatus, Strategy, conformance};
use shardalloc_strategy_capacity::{CONFIG_SCHEMA, Capacity, CapacityConfig, DEFAULT_METRIC, DEFAULT_THRESHOLD};

const MEM: &str = "mem-used-ratio";

fn configured(config: &str) -> Capacity {
    let mut strategy = Capacity::default();
    strategy.configure(config).unwrap();
    strategy
}

/// `Scenario::parse(spec)` with `mem-used-ratio` values by address.
fn cluster(spec: &str, mem: &[(&str, f64)]) -> Scenario {
    mem.iter().fold(Scenario::parse(spec), |s, (address, value)| s.metric(address, MEM, *value))
}

#[test]
fn allocate_table() {
    let cases: Vec<(&str, Scenario, &str, Result<&str, ()>)> = vec![
        (
            "lowest value under the threshold",
            cluster("a=1 b=2,3 c=", &[("a", 0.5), ("b", 0.3), ("c", 0.9)]),
            "",
            Ok("b"),
        ),
        ("at the threshold has room", cluster("a= b=", &[("a", 0.8), ("b", 0.81)]), "", Ok("a")),
        ("just over vs far over: least full (warns)", cluster("a= b=", &[("a", 0.800_001), ("b", 0.9)]), "", Ok("a")),
        ("equal values: fewer shards", cluster("a=1,2 b=3", &[("a", 0.5), ("b", 0.5)]), "", Ok("b")),
        (
            "equal values: newer version before fewer shards",
            cluster("a= b=1,2", &[("a", 0.5), ("b", 0.5)]).version("a", "1.0").version("b", "1.1"),
            "",
            Ok("b"),
        ),
        ("lower value beats fewer shards", cluster("a=1,2,3 b=", &[("a", 0.2), ("b", 0.3)]), "", Ok("a")),
        ("unreported before over", cluster("a= b=1,2", &[("a", 0.9)]), "", Ok("b")),
        ("reported room before unreported", cluster("a=1,2 b=", &[("a", 0.7)]), "", Ok("a")),
        ("nobody reports: least-shard order", Scenario::parse("a=1,2 b=3 c=4,5"), "", Ok("b")),
        ("draining region skipped", cluster("a= b=", &[("a", 0.1), ("b", 0.5)]).draining("a"), "", Ok("b")),
        (
            "leaving region skipped",
            cluster("a= b=", &[("a", 0.1), ("b", 0.5)]).status("a", RegionStatus::Leaving),
            "",
            Ok("b"),
        ),
        (
            "proxy skipped, the rest over (warns)",
            cluster("p= b=", &[("p", 0.0), ("b", 0.95)]).proxy_only("p"),
            "",
            Ok("b"),
        ),
        (
            "custom metric and threshold",
            cluster("a= b=", &[("a", 0.1), ("b", 0.99)]).metric("a", "cpu", 0.6).metric("b", "cpu", 0.4),
            r#"{"metric":"cpu","threshold":0.5}"#,
            Ok("b"),
        ),
        (
            "custom threshold 1: nothing over",
            cluster("a= b=1", &[("a", 1.0), ("b", 0.99)]),
            r#"{"threshold":1}"#,
            Ok("b"),
        ),
        (
            "nothing allocatable",
            cluster("a= b=", &[("a", 0.1)]).draining("a").status("b", RegionStatus::Unreachable),
            "",
            Err(()),
        ),
        ("no regions", Scenario::default(), "", Err(())),
    ];
    for (name, scenario, config, want) in cases {
        take_logs();
        let got = scenario.allocate(&configured(config), "42");
        match want {
            Ok(address) => assert_eq!(got.as_deref(), Ok(address), "{name}"),
            Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
        }
        let warnings = take_logs().into_iter().filter(|r| r.level == Level::Warn).count();
        let all_over = name.ends_with("(warns)");
        assert_eq!(warnings, usize::from(all_over), "{name}: warnings");
    }
}

/// Regions reporting `sessions` counts, each declaring (or not) a
/// `sessions` capacity: (address, count, declared).
fn sessions(spec: &str, regions: &[(&str, f64, Option<f64>)]) -> Scenario {
    regions.iter().fold(Scenario::parse(spec), |s, (address, count, declared)| {
        let s = s.metric(address, "sessions", *count);
        match declared {
            Some(amount) => s.quantity(address, "sessions", *amount),
            None => s,
        }
    })
}

#[test]
fn of_divides_the_metric_by_the_declared_quantity() {
    let of = r#"{"metric":"sessions","of":"sessions"}"#;
    let cases: Vec<(&str, Scenario, &str, Vec<&str>)> = vec![
        (
            // a: 900 of 1,000 (0.9, over); b: 1,200 of 4,000 (0.3): the
            // bigger count has the more room.
            "the ratio, not the count",
            sessions("a=1,2 b=3", &[("a", 900.0, Some(1_000.0)), ("b", 1_200.0, Some(4_000.0))]),
            "b",
            vec!["1"],
        ),
        (
            "no declared quantity counts as unreported",
            sessions("a=1 b=2", &[("a", 10.0, None), ("b", 700.0, Some(1_000.0))]),
            "b",
            vec![],
        ),
        (
            "a quantity of zero leaves no room",
            sessions("a=1 b=2,3", &[("a", 0.0, Some(0.0)), ("b", 500.0, Some(1_000.0))]),
            "b",
            vec!["1"],
        ),
        (
            "at the threshold has room, nothing moves",
            sessions("a=1 b=2", &[("a", 800.0, Some(1_000.0)), ("b", 1_600.0, Some(2_000.0))]),
            "a",
            vec![],
        ),
    ];
    for (name, scenario, want, moves) in cases {
        let strategy = configured(of);
        assert_eq!(scenario.allocate(&strategy, "42").as_deref(), Ok(want), "{name}: allocate");
        let got = scenario.rebalance(&strategy).unwrap();
        assert_eq!(got, moves, "{name}: rebalance");
    }
}

#[test]
fn every_region_over_picks_the_least_full_and_warns() {
    let scenario = cluster("a=1 b=2,3,4 c=", &[("a", 0.95), ("b", 0.85), ("c", 0.99)]);
    take_logs();
    assert_eq!(scenario.allocate(&Capacity::default(), "tenant/7").unwrap(), "b");
    let logs = take_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let record = &logs[0];
    assert_eq!(record.level, Level::Warn);
    assert!(record.message.contains("over"), "{}", record.message);
    let field = |key: &str| record.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    assert_eq!(field("shard"), Some("tenant/7"));
    assert_eq!(field("region"), Some("b"));
    assert_eq!(field("metric"), Some(MEM));
    assert_eq!(field("value"), Some("0.85"));
    assert_eq!(field("threshold"), Some("0.8"));
}

#[test]
fn rebalance_table() {
    let cases: Vec<(&str, Scenario, &str, Vec<&str>)> = vec![
        (
            "oldest shard of the over-full region",
            cluster("a=1,2,3 b=4 c=", &[("a", 0.95), ("b", 0.2), ("c", 0.99)]),
            "",
            vec!["1"],
        ),
        (
            "one per over-full region, most over-full first",
            cluster("a=1,2 b=3,4 c=", &[("a", 0.9), ("b", 0.95), ("c", 0.1)]),
            "",
            vec!["3", "1"],
        ),
        ("equal values by address", cluster("b=3 a=1 c=", &[("a", 0.9), ("b", 0.9), ("c", 0.1)]), "", vec!["1", "3"]),
        (
            "in-progress shards skipped",
            cluster("a=1,2,3 c=", &[("a", 0.9), ("c", 0.1)]).in_progress(&["1"]),
            "",
            vec!["2"],
        ),
        ("every shard moving", cluster("a=1,2 c=", &[("a", 0.9), ("c", 0.1)]).in_progress(&["1", "2"]), "", vec![]),
        ("at the threshold stays", cluster("a=1,2 c=", &[("a", 0.8), ("c", 0.1)]), "", vec![]),
        ("no region under the threshold", cluster("a=1,2 b=", &[("a", 0.9), ("b", 0.8)]), "", vec![]),
        ("an unreported region is no destination", cluster("a=1,2 b=", &[("a", 0.9)]), "", vec![]),
        (
            "a draining region is no destination",
            cluster("a=1,2 b=", &[("a", 0.9), ("b", 0.1)]).draining("b"),
            "",
            vec![],
        ),
        (
            "a draining over-full region is drained too",
            cluster("a=1,2 b=", &[("a", 0.9), ("b", 0.1)]).draining("a"),
            "",
            vec!["1"],
        ),
        (
            "held while a region joins",
            cluster("a=1,2 b= j=", &[("a", 0.9), ("b", 0.1)]).status("j", RegionStatus::Joining),
            "",
            vec![],
        ),
        (
            "held while a region is unreachable",
            cluster("a=1,2 b= u=3", &[("a", 0.9), ("b", 0.1)]).status("u", RegionStatus::Unreachable),
            "",
            vec![],
        ),
        ("nobody reports the metric", Scenario::parse("a=1,2,3,4 b="), "", vec![]),
        (
            "custom metric",
            cluster("a=1,2 b=3 c=", &[("a", 0.99), ("b", 0.1)])
                .metric("a", "cpu", 0.1)
                .metric("b", "cpu", 0.7)
                .metric("c", "cpu", 0.2),
            r#"{"metric":"cpu","threshold":0.6}"#,
            vec!["3"],
        ),
    ];
    for (name, scenario, config, want) in cases {
        assert_eq!(scenario.rebalance(&configured(config)).unwrap(), want, "{name}");
    }
}

#[test]
fn config_defaults_and_info() {
    let strategy = Capacity::default();
    assert_eq!(strategy.config().metric, "mem-used-ratio");
    assert_eq!(strategy.config().threshold, 0.8);
    assert_eq!((DEFAULT_METRIC, DEFAULT_THRESHOLD), (MEM, 0.8));
    for text in ["", "{}", "null", r#"{"metric":null,"threshold":null}"#] {
        assert_eq!(CapacityConfig::parse(text).unwrap(), CapacityConfig::default(), "{text}");
    }
    let parsed = CapacityConfig::parse(r#"{"metric":"cpu","threshold":1}"#).unwrap();
    assert_eq!(parsed, CapacityConfig { metric: "cpu".to_owned(), threshold: 1.0, of: None });
    let parsed = CapacityConfig::parse(r#"{"metric":"sessions","of":"sessions"}"#).unwrap();
    assert_eq!(parsed.of.as_deref(), Some("sessions"));
    let info = strategy.info();
    assert_eq!(info.name, "capacity");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(!info.needs_shard_names);
    assert_eq!(info.config_schema, CONFIG_SCHEMA);
    let schema: serde_json::Value = serde_json::from_str(&info.config_schema).unwrap();
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["metric", "of", "threshold"]);
    assert_eq!(schema["properties"]["threshold"]["default"], 0.8);
    assert_eq!(schema["properties"]["metric"]["default"], MEM);
}

#[test]
fn config_errors_name_the_problem() {
    let cases = [
        (r#"{"metrc":"cpu"}"#, "metrc"),
        (r#"{"threshold":0.5,"limit":1}"#, "limit"),
        (r#"{"metric":""}"#, "metric"),
        (r#"{"metric":"  "}"#, "metric"),
        (r#"{"metric":5}"#, "metric"),
        (r#"{"threshold":0}"#, "threshold"),
        (r#"{"threshold":-0.1}"#, "threshold"),
        (r#"{"threshold":1.01}"#, "threshold"),
        (r#"{"threshold":80}"#, "threshold"),
        (r#"{"threshold":"0.5"}"#, "threshold"),
        (r#"{"threshold":[0.5]}"#, "threshold"),
        (r#"{"of":""}"#, "`of` must be a non-empty string"),
        (r#"{"of":7}"#, "`of`"),
        ("[1]", "object"),
        ("{", "JSON"),
    ];
    for (config, needle) in cases {
        let err = Capacity::default().configure(config).unwrap_err();
        assert!(err.contains(needle), "{config}: {err}");
    }
}

#[test]
fn failed_configure_keeps_the_previous_config() {
    let mut strategy = configured(r#"{"metric":"cpu","threshold":0.5}"#);
    assert!(strategy.configure(r#"{"threshold":2}"#).is_err());
    assert!(strategy.configure(r#"{"metric":"mem","bogus":1}"#).is_err());
    assert_eq!(strategy.config(), &CapacityConfig { metric: "cpu".to_owned(), threshold: 0.5, of: None });
    let scenario = Scenario::parse("a= b=").metric("a", "cpu", 0.6).metric("b", "cpu", 0.4);
    assert_eq!(scenario.allocate(&strategy, "1").unwrap(), "b");
    strategy.configure("").unwrap();
    assert_eq!(strategy.config(), &CapacityConfig::default());
}

#[test]
fn conforms() {
    conformance::assert_conforms(Capacity::default());
    conformance::assert_conforms(configured(r#"{"threshold":0.3}"#));
    conformance::assert_conforms(configured(r#"{"metric":"not-reported"}"#));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_clusters(seed in any::<u64>(), regions in 0usize..24, shards in 0usize..400, percent in 1u32..=100) {
        let threshold = f64::from(percent) / 100.0;
        let strategy = configured(&format!(r#"{{"threshold":{threshold}}}"#));
        let scenario = generate(seed, &Shape::messy(regions, shards));
        let snapshot = &scenario.snapshot;
        let allocatable: Vec<_> = snapshot
            .regions
            .iter()
            .filter(|r| r.status == RegionStatus::Up && !r.proxy_only && !r.draining)
            .collect();
        let lowest_with_room = allocatable
            .iter()
            .filter_map(|r| r.metrics.get(MEM).copied())
            .filter(|v| *v <= threshold)
            .min_by(f64::total_cmp);
        for shard in ["s1", "new", "tenant/7"] {
            match scenario.allocate(&strategy, shard) {
                Ok(address) => {
                    let region = allocatable.iter().find(|r| r.address == address);
                    prop_assert!(region.is_some(), "{} is not allocatable", address);
                    if let Some(lowest) = lowest_with_room {
                        prop_assert_eq!(region.unwrap().metrics.get(MEM).copied(), Some(lowest));
                    }
                }
                Err(_) => prop_assert!(allocatable.is_empty()),
            }
        }
        let moves = scenario.rebalance(&strategy).unwrap();
        let mut seen = HashSet::new();
        let mut sources = HashSet::new();
        for shard in &moves {
            let home = snapshot.home_of(shard);
            prop_assert!(home.is_some(), "{} is not allocated", shard);
            prop_assert!(!snapshot.in_progress.contains(shard), "{} is moving", shard);
            prop_assert!(seen.insert(shard.clone()), "{} twice", shard);
            let region = &snapshot.regions[home.unwrap()];
            prop_assert!(region.metrics.get(MEM).is_some_and(|v| *v > threshold), "{} is not over", region.address);
            prop_assert!(sources.insert(home), "two shards from {}", region.address);
        }
    }
}
