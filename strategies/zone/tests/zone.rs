//! Tests of the zone strategy: concrete scenarios, the signal, configuration,
//! the SDK's conformance suite and random clusters.

use std::collections::HashSet;

use proptest::prelude::*;
use shardalloc_guest::host::{LogRecord, take_logs};
use shardalloc_guest::testing::{Scenario, Shape, generate};
use shardalloc_guest::{Level, RegionStatus, Strategy, conformance};
use shardalloc_strategy_zone::{CONFIG_SCHEMA, MAX_MOVES_PER_ROUND, SIGNAL_SCHEMA, Zone, ZoneConfig};

const SIGNAL: &str = r#"{
    "shards": {"tenant-a/7": "ap", "42": "us", "43": "mars"},
    "prefixes": {"tenant-a/": "us", "tenant-": "eu", "t": "ap"},
    "comment": "unknown top-level keys are ignored"
}"#;

fn configured(config: &str) -> Zone {
    let mut strategy = Zone::default();
    strategy.configure(config).unwrap();
    strategy
}

/// eu: e1 (2 shards), e2 (1 shard); us: u1; ap: p1; no label: n1.
fn zones() -> Scenario {
    Scenario::parse("e1=1,2 e2=3 u1=4,5,6 p1=7,8,9,10 n1=")
        .label("e1", "zone", "eu")
        .label("e2", "zone", "eu")
        .label("u1", "zone", "us")
        .label("p1", "zone", "ap")
        .signal(SIGNAL)
}

fn field<'a>(record: &'a LogRecord, key: &str) -> Option<&'a str> {
    record.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[test]
fn allocate_table() {
    // (name, scenario, config, shard, expected address, expected log level and zone)
    type Case =
        (&'static str, Scenario, &'static str, &'static str, Result<&'static str, ()>, Option<(Level, &'static str)>);
    let cases: Vec<Case> = vec![
        ("exact id", zones(), "", "tenant-a/7", Ok("p1"), None),
        ("exact id beats prefixes", zones(), "", "42", Ok("u1"), None),
        ("prefix", zones(), "", "tenant-a/8", Ok("u1"), None),
        ("shorter prefix", zones(), "", "tenant-b/1", Ok("e2"), None),
        ("shortest prefix", zones(), "", "tx", Ok("p1"), None),
        ("least loaded within the zone", zones(), "", "tenant-c", Ok("e2"), None),
        (
            "within the zone: newer version first",
            zones().version("e1", "2.0").version("e2", "1.0"),
            "",
            "tenant-c",
            Ok("e1"),
            None,
        ),
        ("unmapped: least loaded overall, logged", zones(), "", "other", Ok("n1"), Some((Level::Info, ""))),
        ("zone without regions: fallback", zones(), "", "43", Ok("n1"), Some((Level::Warn, "mars"))),
        (
            "zone down: fallback",
            zones().status("p1", RegionStatus::Unreachable),
            "",
            "tx",
            Ok("n1"),
            Some((Level::Warn, "ap")),
        ),
        ("zone draining: fallback", zones().draining("u1"), "", "42", Ok("n1"), Some((Level::Warn, "us"))),
        (
            "zone leaving: fallback",
            zones().status("u1", RegionStatus::Leaving).status("n1", RegionStatus::Joining),
            "",
            "42",
            Ok("e2"),
            Some((Level::Warn, "us")),
        ),
        ("half the zone down", zones().draining("e2"), "", "tenant-c", Ok("e1"), None),
        (
            "another label",
            zones().label("n1", "dc", "us").label("e1", "dc", "eu"),
            r#"{"label":"dc"}"#,
            "42",
            Ok("n1"),
            None,
        ),
        ("another label, unlabelled zone", zones(), r#"{"label":"dc"}"#, "42", Ok("n1"), Some((Level::Warn, "us"))),
        ("no signal", Scenario::parse("a=1 b="), "", "42", Ok("b"), Some((Level::Info, ""))),
        (
            "nothing allocatable",
            zones().draining("e1").draining("e2").draining("u1").draining("p1").proxy_only("n1"),
            "",
            "42",
            Err(()),
            None,
        ),
    ];
    for (name, scenario, config, shard, want, log) in cases {
        take_logs();
        let got = scenario.allocate(&configured(config), shard);
        match want {
            Ok(address) => assert_eq!(got.as_deref(), Ok(address), "{name}"),
            Err(()) => assert!(got.is_err(), "{name}: {got:?}"),
        }
        let logs = take_logs();
        match log {
            None => assert!(logs.is_empty(), "{name}: {logs:?}"),
            Some((level, zone)) => {
                assert_eq!(logs.len(), 1, "{name}: {logs:?}");
                assert_eq!(logs[0].level, level, "{name}");
                assert_eq!(field(&logs[0], "shard"), Some(shard), "{name}");
                assert_eq!(field(&logs[0], "zone"), Some(zone), "{name}");
                assert_eq!(field(&logs[0], "region"), want.ok(), "{name}");
            }
        }
    }
}

#[test]
fn rebalance_table() {
    // Homes: e1 (eu) 1,2; e2 (eu) 3; u1 (us) 4,5,6; p1 (ap) 7,8,9,10; n1 (none) 11.
    let signal =
        r#"{"shards":{"1":"us","3":"eu","4":"eu","5":"us","7":"mars","11":"ap"},"prefixes":{"9":"eu","1":"ap"}}"#;
    let base = || {
        Scenario::parse("e1=1,2 e2=3 u1=4,5,6 p1=7,8,9,10 n1=11")
            .label("e1", "zone", "eu")
            .label("e2", "zone", "eu")
            .label("u1", "zone", "us")
            .label("p1", "zone", "ap")
            .signal(signal)
    };
    let cases: Vec<(&str, Scenario, &str, Vec<&str>)> = vec![
        // 1 us on eu; 3 eu home; 4 eu on us; 5 us home; 7 mars (no region); 9 eu on ap;
        // 10 prefix "1" → ap, home; 11 ap on an unlabelled region; 2, 6, 8 unmapped.
        ("out-of-zone shards only, region order, oldest first", base(), "", vec!["1", "4", "9", "11"]),
        ("in-progress shards skipped", base().in_progress(&["4", "11"]), "", vec!["1", "9"]),
        ("zone without an allocatable region", base().draining("u1"), "", vec!["4", "9", "11"]),
        ("zone partly open", base().draining("e1"), "", vec!["1", "4", "9", "11"]),
        ("held while a region joins", base().status("n1", RegionStatus::Joining), "", vec![]),
        ("held while a region is unreachable", base().status("p1", RegionStatus::Unreachable), "", vec![]),
        ("another label: nothing is labelled", base(), r#"{"label":"dc"}"#, vec![]),
        ("no signal", Scenario::parse("a=1,2 b=").label("b", "zone", "eu"), "", vec![]),
    ];
    for (name, scenario, config, want) in cases {
        assert_eq!(scenario.rebalance(&configured(config)).unwrap(), want, "{name}");
    }
}

#[test]
fn rebalance_is_bounded_per_round() {
    let ids: Vec<String> = (1..=15).map(|i| i.to_string()).collect();
    let scenario = Scenario::parse(&format!("a={} b=", ids.join(",")))
        .label("b", "zone", "eu")
        .signal(r#"{"prefixes":{"":"eu"}}"#);
    assert_eq!(scenario.rebalance(&Zone::default()).unwrap(), ids[..MAX_MOVES_PER_ROUND]);
}

#[test]
fn bad_signals_are_logged_and_ignored() {
    let bad = [
        ("[1,2]", "array"),
        (r#""eu""#, "string"),
        (r#"{"shards":["42"]}"#, "shards"),
        (r#"{"prefixes":{"t":1}}"#, "\"t\""),
        (r#"{"shards":{"42":""}}"#, "\"42\""),
    ];
    for (signal, needle) in bad {
        let strategy = Zone::default();
        let scenario = Scenario::parse("a=1,2 b=").label("a", "zone", "eu").signal(signal);
        take_logs();
        assert_eq!(scenario.allocate(&strategy, "42").unwrap(), "b", "{signal}");
        let logs = take_logs();
        assert_eq!(logs.len(), 2, "{signal}: {logs:?}");
        assert_eq!(logs[0].level, Level::Warn);
        assert!(field(&logs[0], "problem").unwrap().contains(needle), "{signal}: {logs:?}");
        assert_eq!(logs[1].level, Level::Info);
        assert!(scenario.rebalance(&strategy).unwrap().is_empty());
        // Warned once per signal text, not on every call.
        assert_eq!(scenario.allocate(&strategy, "43").unwrap(), "b");
        assert!(take_logs().iter().all(|r| r.level == Level::Info));
    }
}

#[test]
fn a_changed_signal_is_reparsed() {
    let strategy = Zone::default();
    let base = Scenario::parse("a= b=").label("a", "zone", "eu").label("b", "zone", "us");
    assert_eq!(base.clone().signal(r#"{"shards":{"42":"eu"}}"#).allocate(&strategy, "42").unwrap(), "a");
    assert_eq!(base.clone().signal(r#"{"shards":{"42":"us"}}"#).allocate(&strategy, "42").unwrap(), "b");
    assert_eq!(base.signal(r#"{"shards":{"42":"eu"}}"#).allocate(&strategy, "42").unwrap(), "a");
}

#[test]
fn config_defaults_and_info() {
    let strategy = Zone::default();
    assert_eq!(strategy.config().label, "zone");
    for text in ["", "{}", "null", r#"{"label":null}"#] {
        assert_eq!(ZoneConfig::parse(text).unwrap(), ZoneConfig::default(), "{text}");
    }
    assert_eq!(ZoneConfig::parse(r#"{"label":"dc"}"#).unwrap().label, "dc");
    let info = strategy.info();
    assert_eq!(info.name, "zone");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(info.needs_shard_names);
    assert_eq!(info.config_schema, CONFIG_SCHEMA);
    let schema: serde_json::Value = serde_json::from_str(&info.config_schema).unwrap();
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["label", "attribute"]);
    assert!(!info.needs_shard_attributes, "without an attribute nothing is read in bulk");
    assert!(configured(r#"{"attribute":"region"}"#).info().needs_shard_attributes);
    assert_eq!(schema["properties"]["label"]["default"], "zone");
    let signal: serde_json::Value = serde_json::from_str(SIGNAL_SCHEMA).unwrap();
    assert!(signal["properties"]["shards"].is_object() && signal["properties"]["prefixes"].is_object());
}

#[test]
fn config_errors_name_the_problem() {
    let cases = [
        (r#"{"lable":"zone"}"#, "lable"),
        (r#"{"label":"zone","zones":["eu"]}"#, "zones"),
        (r#"{"label":""}"#, "label"),
        (r#"{"label":" "}"#, "label"),
        (r#"{"label":7}"#, "label"),
        (r#"{"label":["zone"]}"#, "label"),
        (r#"{"attribute":""}"#, "`attribute` must be a non-empty string"),
        (r#"{"attribute":3}"#, "`attribute` must be a non-empty string"),
        ("[1]", "object"),
        ("{", "JSON"),
    ];
    for (config, needle) in cases {
        let err = Zone::default().configure(config).unwrap_err();
        assert!(err.contains(needle), "{config}: {err}");
    }
}

#[test]
fn failed_configure_keeps_the_previous_config() {
    let mut strategy = configured(r#"{"label":"dc"}"#);
    assert!(strategy.configure(r#"{"label":""}"#).is_err());
    assert!(strategy.configure(r#"{"label":"zone","x":1}"#).is_err());
    assert_eq!(strategy.config().label, "dc");
    let scenario =
        Scenario::parse("a= b=1").label("a", "zone", "us").label("b", "dc", "us").signal(r#"{"shards":{"42":"us"}}"#);
    assert_eq!(scenario.allocate(&strategy, "42").unwrap(), "b");
    strategy.configure("").unwrap();
    assert_eq!(scenario.allocate(&strategy, "42").unwrap(), "a");
}

#[test]
fn conforms() {
    conformance::assert_conforms(Zone::default());
    conformance::assert_conforms(configured(r#"{"label":"dc"}"#));
    conformance::assert_conforms(configured(r#"{"attribute":"region"}"#));
}

#[test]
fn a_shard_attribute_names_the_zone_ahead_of_the_signal() {
    let strategy = configured(r#"{"attribute":"region"}"#);
    // "42" maps to us by the signal; its attribute says eu, and wins. "7"
    // has no attribute and no mapping; "tenant-a/9" falls back to the
    // signal's prefix.
    let scenario = zones().attribute("42", "region", "eu").attribute("5", "region", "ap").attribute("3", "tier", "x");
    let cases = [("42", "e2"), ("tenant-a/9", "u1"), ("new", "n1")];
    for (shard, expected) in cases {
        assert_eq!(scenario.allocate(&strategy, shard).unwrap(), expected, "{shard}");
    }
    assert_eq!(scenario.clone().attribute("new", "region", "ap").allocate(&strategy, "new").unwrap(), "p1");
    // Rebalance moves the shard whose attribute names another zone (5 on
    // u1, attribute ap) and leaves 3 (an attribute of another key, no
    // mapping) where it is.
    assert_eq!(scenario.rebalance(&strategy).unwrap(), ["5"]);
    // Without the setting the attribute is not read.
    assert_eq!(scenario.allocate(&Zone::default(), "42").unwrap(), "u1");
    assert!(scenario.rebalance(&Zone::default()).unwrap().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_clusters(seed in any::<u64>(), regions in 0usize..24, shards in 0usize..400) {
        let strategy = Zone::default();
        let scenario = generate(seed, &Shape::messy(regions, shards));
        let snapshot = &scenario.snapshot;
        let map = shardalloc_strategy_zone::ZoneMap::parse(&snapshot.signal_text().unwrap()).unwrap();
        let allocatable: Vec<_> = snapshot
            .regions
            .iter()
            .filter(|r| r.status == RegionStatus::Up && !r.proxy_only && !r.draining)
            .collect();
        let zone_of = |address: &str| {
            snapshot.regions.iter().find(|r| r.address == address).and_then(|r| r.labels.get("zone")).cloned()
        };
        for shard in ["s1", "s2", "s9", "s16", "new", "tenant/7"] {
            match scenario.allocate(&strategy, shard) {
                Ok(address) => {
                    prop_assert!(allocatable.iter().any(|r| r.address == address), "{} is not allocatable", address);
                    if let Some(zone) = map.zone_of(shard) {
                        let open = allocatable.iter().any(|r| r.labels.get("zone").map(String::as_str) == Some(zone));
                        prop_assert_eq!(open, zone_of(&address).as_deref() == Some(zone), "{} on {}", shard, address);
                    }
                }
                Err(_) => prop_assert!(allocatable.is_empty()),
            }
        }
        let moves = scenario.rebalance(&strategy).unwrap();
        prop_assert!(moves.len() <= MAX_MOVES_PER_ROUND);
        let mut seen = HashSet::new();
        for shard in &moves {
            let home = snapshot.home_of(shard);
            prop_assert!(home.is_some(), "{} is not allocated", shard);
            prop_assert!(!snapshot.in_progress.contains(shard), "{} is moving", shard);
            prop_assert!(seen.insert(shard.clone()), "{} twice", shard);
            let zone = map.zone_of(shard);
            prop_assert!(zone.is_some(), "{} maps to no zone", shard);
            prop_assert_ne!(snapshot.regions[home.unwrap()].labels.get("zone").map(String::as_str), zone);
        }
    }
}
