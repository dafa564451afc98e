//! Tests of the hash strategy: concrete scenarios, minimal movement,
//! configuration, the SDK's conformance suite and random clusters.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use proptest::prelude::*;
use shardalloc_guest::host::take_logs;
use shardalloc_guest::testing::{Scenario, Shape, generate};
use shardalloc_guest::{Level, RegionStatus, ShardKey, Strategy, View, conformance, shard_hash};
use shardalloc_strategy_hash::{CONFIG_SCHEMA, DEFAULT_REBALANCE_LIMIT, HashConfig, RendezvousHash, choose, score};

fn configured(config: &str) -> RendezvousHash {
    let mut strategy = RendezvousHash::default();
    strategy.configure(config).unwrap();
    strategy
}

#[test]
fn score_is_pinned() {
    // A change here would move every hash-placed shard in every cluster.
    assert_eq!(score(0, 0), 0xd0a6_6a65_c752_8968);
    assert_eq!(score(shard_hash("1"), shard_hash("a")), 0x5831_75e5_e471_a541);
}

#[test]
fn allocate_table() {
    let base = || Scenario::parse("a= b= c=");
    let cases: Vec<(&str, Scenario, &str, Result<&str, ()>)> = vec![
        ("three regions, 1", base(), "1", Ok("a")),
        ("three regions, 2", base(), "2", Ok("b")),
        ("three regions, 6", base(), "6", Ok("c")),
        ("three regions, tenant/42", base(), "tenant/42", Ok("c")),
        ("leaving winner: runner-up", base().status("c", RegionStatus::Leaving), "6", Ok("b")),
        ("leaving winner, other shard", base().status("c", RegionStatus::Leaving), "tenant/42", Ok("b")),
        ("joining winner skipped", base().status("c", RegionStatus::Joining), "6", Ok("b")),
        ("unreachable winner skipped", base().status("a", RegionStatus::Unreachable), "1", Ok("c")),
        ("draining winner skipped", base().draining("a"), "1", Ok("c")),
        ("proxy-only winner skipped", base().proxy_only("b"), "2", Ok("a")),
        ("non-winner gone: unchanged", base().draining("b"), "1", Ok("a")),
        ("loads are ignored", Scenario::parse("a=x1,x2,x3,x4,x5 b= c="), "1", Ok("a")),
        ("nothing allocatable", base().draining("a").proxy_only("b").status("c", RegionStatus::Leaving), "1", Err(())),
        ("no regions", Scenario::default(), "1", Err(())),
    ];
    let strategy = RendezvousHash::default();
    for (name, scenario, shard, want) in cases {
        let got = scenario.allocate(&strategy, shard);
        match want {
            Ok(address) => assert_eq!(got.as_deref(), Ok(address), "{name}"),
            Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
        }
    }
}

#[test]
fn allocate_ignores_the_requester() {
    let scenario = Scenario::parse("a= b= c=");
    let strategy = RendezvousHash::default();
    for requester in ["a", "b", "c"] {
        assert_eq!(scenario.allocate_from(&strategy, "1", Some(requester)).unwrap(), "a");
    }
}

#[test]
fn rebalance_table() {
    // Rendezvous homes over a, b, c: 1→a 2→b 3→a 4→b 5→b 6→c 7→b 8→a.
    let base = || Scenario::parse("a=1,2,3 b=4,5,6 c=7,8");
    let cases: Vec<(&str, Scenario, &str, Vec<&str>)> = vec![
        ("misplaced shards, region order, oldest first", base(), "", vec!["2", "6", "7", "8"]),
        ("in-progress shards are skipped", base().in_progress(&["6", "8"]), "", vec!["2", "7"]),
        ("limit", base(), r#"{"rebalance_limit":2}"#, vec!["2", "6"]),
        ("limit 0 is unlimited", base(), r#"{"rebalance_limit":0}"#, vec!["2", "6", "7", "8"]),
        // c leaves: its shards move first (7→b, 8→a); 6's home is now b.
        ("leaving region first", base().status("c", RegionStatus::Leaving), "", vec!["7", "8", "2"]),
        ("draining region first", base().draining("c"), "", vec!["7", "8", "2"]),
        ("held while a region joins", base().status("c", RegionStatus::Joining), "", vec![]),
        ("held while a region is unreachable", base().status("c", RegionStatus::Unreachable), "", vec![]),
        (
            "held while an empty proxy joins",
            Scenario::parse("a=1,2,3 b=4,5,6 c=7,8 p=").proxy_only("p").status("p", RegionStatus::Joining),
            "",
            vec![],
        ),
        ("nothing allocatable", base().draining("a").draining("b").draining("c"), "", vec![]),
        ("already home", Scenario::parse("a=1,3,8 b=2,4,5,7 c=6"), "", vec![]),
        ("an empty newcomer gets its shards", Scenario::parse("a=1,3,8 b=2,4,5,6,7 c="), "", vec!["6"]),
    ];
    for (name, scenario, config, want) in cases {
        assert_eq!(scenario.rebalance(&configured(config)).unwrap(), want, "{name}");
    }
}

#[test]
fn a_held_rebalance_is_logged_at_debug() {
    take_logs();
    let scenario = Scenario::parse("a=1,2 b=").status("b", RegionStatus::Unreachable);
    assert!(scenario.rebalance(&RendezvousHash::default()).unwrap().is_empty());
    let logs = take_logs();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].level, Level::Debug);
    assert!(logs[0].fields.contains(&("region".to_owned(), "b".to_owned())));
}

fn addresses(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("10.0.0.{i}:2552")).collect()
}

fn empty_view(addresses: &[String]) -> View {
    Scenario::parse(&addresses.iter().map(|a| format!("{a}=")).collect::<Vec<_>>().join(" ")).view()
}

fn homes(view: &View, shards: &[String]) -> Vec<String> {
    let strategy = RendezvousHash::default();
    shards
        .iter()
        .map(|s| view.region(strategy.allocate(view, &ShardKey::new(s.as_str()), None).unwrap()).address.clone())
        .collect()
}

const SHARDS: usize = 10_000;

fn shard_ids() -> Vec<String> {
    (0..SHARDS).map(|i| format!("shard-{i}")).collect()
}

#[test]
fn shards_spread_evenly() {
    let regions = addresses(10);
    let placed = homes(&empty_view(&regions), &shard_ids());
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for home in &placed {
        *counts.entry(home.as_str()).or_default() += 1;
    }
    assert_eq!(counts.len(), 10);
    for (region, count) in counts {
        assert!((850..=1150).contains(&count), "{region} got {count} of {SHARDS}");
    }
}

#[test]
fn adding_a_region_moves_only_what_it_wins() {
    let shards = shard_ids();
    let before = homes(&empty_view(&addresses(10)), &shards);
    let after = homes(&empty_view(&addresses(11)), &shards);
    let newcomer = "10.0.0.11:2552";
    let mut moved = 0;
    for (old, new) in before.iter().zip(&after) {
        if old != new {
            assert_eq!(new, newcomer, "a shard moved between two old regions");
            moved += 1;
        }
    }
    // About 1/11 of the shards (909).
    assert!((750..=1070).contains(&moved), "moved {moved} of {SHARDS}");
}

#[test]
fn removing_a_region_moves_only_its_shards() {
    let shards = shard_ids();
    let all = addresses(10);
    let before = homes(&empty_view(&all), &shards);
    let gone = all[3].clone();
    let remaining: Vec<String> = all.iter().filter(|a| **a != gone).cloned().collect();
    let after = homes(&empty_view(&remaining), &shards);
    let mut moved = 0;
    for (old, new) in before.iter().zip(&after) {
        if *old == gone {
            assert_ne!(new, &gone);
            moved += 1;
        } else {
            assert_eq!(old, new, "a shard moved off a region that stayed");
        }
    }
    assert!((850..=1150).contains(&moved), "moved {moved} of {SHARDS}");
}

#[test]
fn rebalance_after_a_join_moves_exactly_the_newcomers_shards() {
    let shards = shard_ids();
    let old = addresses(10);
    let before = homes(&empty_view(&old), &shards);
    let mut per_region: BTreeMap<&str, Vec<&str>> = old.iter().map(|a| (a.as_str(), Vec::new())).collect();
    for (shard, home) in shards.iter().zip(&before) {
        per_region.get_mut(home.as_str()).unwrap().push(shard);
    }
    let spec = old.iter().map(|a| format!("{a}={}", per_region[a.as_str()].join(","))).collect::<Vec<_>>().join(" ");
    let settled = Scenario::parse(&spec);
    let strategy = configured(r#"{"rebalance_limit":0}"#);
    assert!(settled.rebalance(&strategy).unwrap().is_empty(), "settled cluster must not move");

    let joined = Scenario::parse(&format!("{spec} 10.0.0.11:2552="));
    let moves: BTreeSet<String> = joined.rebalance(&strategy).unwrap().into_iter().collect();
    let view = joined.view();
    let newcomer = view.find("10.0.0.11:2552").unwrap();
    let expected: BTreeSet<String> =
        shards.iter().filter(|s| choose(&view, shard_hash(s)) == Some(newcomer)).cloned().collect();
    assert_eq!(moves, expected);
    assert!((750..=1070).contains(&moves.len()), "moved {} of {SHARDS}", moves.len());
    // With the default limit, the first ten of them.
    assert_eq!(joined.rebalance(&RendezvousHash::default()).unwrap().len(), DEFAULT_REBALANCE_LIMIT as usize);
}

#[test]
fn config_defaults_and_info() {
    let strategy = RendezvousHash::default();
    assert_eq!(strategy.config().rebalance_limit, 10);
    assert_eq!(HashConfig::parse("").unwrap(), HashConfig::default());
    assert_eq!(HashConfig::parse("{}").unwrap(), HashConfig::default());
    assert_eq!(HashConfig::parse("null").unwrap(), HashConfig::default());
    assert_eq!(HashConfig::parse(r#"{"rebalance_limit":null}"#).unwrap(), HashConfig::default());
    assert_eq!(HashConfig::parse(r#"{"rebalance_limit":4294967295}"#).unwrap().rebalance_limit, u32::MAX);
    let info = strategy.info();
    assert_eq!(info.name, "hash");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(!info.needs_shard_names);
    assert_eq!(info.config_schema, CONFIG_SCHEMA);
    let schema: serde_json::Value = serde_json::from_str(&info.config_schema).unwrap();
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["rebalance_limit"]);
    assert_eq!(schema["properties"]["rebalance_limit"]["default"], DEFAULT_REBALANCE_LIMIT);
}

#[test]
fn config_errors_name_the_problem() {
    let cases = [
        (r#"{"limit":3}"#, "limit"),
        (r#"{"rebalance_limit":3,"extra":1}"#, "extra"),
        (r#"{"rebalance_limit":-1}"#, "rebalance_limit"),
        (r#"{"rebalance_limit":1.5}"#, "rebalance_limit"),
        (r#"{"rebalance_limit":"5"}"#, "rebalance_limit"),
        (r#"{"rebalance_limit":4294967296}"#, "rebalance_limit"),
        (r#"{"rebalance_limit":true}"#, "rebalance_limit"),
        ("[1]", "object"),
        ("{", "JSON"),
    ];
    for (config, needle) in cases {
        let err = RendezvousHash::default().configure(config).unwrap_err();
        assert!(err.contains(needle), "{config}: {err}");
    }
}

#[test]
fn failed_configure_keeps_the_previous_config() {
    let mut strategy = configured(r#"{"rebalance_limit":1}"#);
    assert!(strategy.configure(r#"{"rebalance_limit":-3}"#).is_err());
    assert!(strategy.configure(r#"{"bogus":true}"#).is_err());
    assert_eq!(strategy.config().rebalance_limit, 1);
    assert_eq!(Scenario::parse("a=1,2,3 b=4,5,6 c=7,8").rebalance(&strategy).unwrap(), ["2"]);
    strategy.configure("").unwrap();
    assert_eq!(strategy.config(), &HashConfig::default());
}

#[test]
fn conforms() {
    conformance::assert_conforms(RendezvousHash::default());
    conformance::assert_conforms(configured(r#"{"rebalance_limit":1}"#));
    conformance::assert_conforms(configured(r#"{"rebalance_limit":0}"#));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_clusters(seed in any::<u64>(), regions in 0usize..24, shards in 0usize..400, limit in 0u32..20) {
        let scenario = generate(seed, &Shape::messy(regions, shards));
        let strategy = configured(&format!(r#"{{"rebalance_limit":{limit}}}"#));
        let view = scenario.view();
        let allocatable: HashSet<String> =
            view.allocatable().map(|id| view.region(id).address.clone()).collect();
        for shard in ["s1", "new", "tenant/7", "s250"] {
            match scenario.allocate(&strategy, shard) {
                Ok(address) => {
                    prop_assert!(allocatable.contains(&address), "{} is not allocatable", address);
                    // Taking any other region out of the running keeps the answer.
                    for other in allocatable.iter().filter(|a| **a != address) {
                        let without = scenario.clone().draining(other);
                        prop_assert_eq!(without.allocate(&strategy, shard).unwrap(), address.clone());
                    }
                }
                Err(_) => prop_assert!(allocatable.is_empty()),
            }
        }
        let moves = scenario.rebalance(&strategy).unwrap();
        if limit > 0 {
            prop_assert!(moves.len() <= limit as usize);
        }
        let mut seen = HashSet::new();
        for shard in &moves {
            let home = scenario.snapshot.home_of(shard);
            prop_assert!(home.is_some(), "{} is not allocated", shard);
            prop_assert!(!scenario.snapshot.in_progress.contains(shard), "{} is moving", shard);
            prop_assert!(seen.insert(shard.clone()), "{} twice", shard);
            let winner = choose(&view, shard_hash(shard)).map(|id| id.index());
            prop_assert_ne!(winner, home, "{} is already home", shard);
        }
    }
}
