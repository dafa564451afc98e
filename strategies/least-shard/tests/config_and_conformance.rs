//! Configuration (defaults, unknown keys, bad values, failed configure keeps
//! the old settings), `describe`, the SDK's conformance suite for both
//! algorithms, and properties of the region order.

mod common;

use common::{abc, ids, strategy};
use proptest::prelude::*;
use shardalloc_guest::conformance::assert_conforms;
use shardalloc_guest::testing::{Shape, generate};
use std::cmp::Ordering;

use shardalloc_guest::{RegionId, RegionStatus, Strategy, View, compare_versions};
use shardalloc_strategy_least_shard::{Algorithm, CONFIG_SCHEMA, Config, LeastShard, least_loaded, region_order};

#[test]
fn defaults() {
    let expected = Config {
        algorithm: Algorithm::Current,
        absolute_limit: 20,
        relative_limit: 0.1,
        rebalance_threshold: 1,
        max_simultaneous_rebalance: 3,
    };
    assert_eq!(*LeastShard::default().config(), expected);
    assert_eq!(Config::default(), expected);
    for text in ["", "  ", "null", "{}", r#"{"algorithm":null}"#] {
        let mut s = strategy(r#"{"algorithm":"classic","absolute_limit":3}"#);
        s.configure(text).unwrap();
        assert_eq!(*s.config(), expected, "{text:?}");
    }
}

#[test]
fn every_key_is_read() {
    let s = strategy(
        r#"{"algorithm":"classic","absolute_limit":7,"relative_limit":1,"rebalance_threshold":4,
            "max_simultaneous_rebalance":9}"#,
    );
    assert_eq!(
        *s.config(),
        Config {
            algorithm: Algorithm::Classic,
            absolute_limit: 7,
            relative_limit: 1.0,
            rebalance_threshold: 4,
            max_simultaneous_rebalance: 9
        }
    );
}

#[test]
fn configure_replaces_rather_than_merges() {
    let mut s = strategy(r#"{"absolute_limit":7}"#);
    s.configure(r#"{"relative_limit":0.5}"#).unwrap();
    assert_eq!(s.config().absolute_limit, 20);
    assert_eq!(s.config().relative_limit, 0.5);
}

#[test]
fn unknown_keys_are_named() {
    let mut s = LeastShard::default();
    let err = s.configure(r#"{"absolute_limt":5}"#).unwrap_err();
    assert!(err.contains("absolute_limt"), "{err}");
    let err = s.configure(r#"{"algorithm":"classic","rebalanceThreshold":2}"#).unwrap_err();
    assert!(err.contains("rebalanceThreshold"), "{err}");
}

#[test]
fn bad_values_are_refused_with_the_key() {
    let cases = [
        (r#"{"algorithm":"newest"}"#, "algorithm"),
        (r#"{"algorithm":"Current"}"#, "algorithm"),
        (r#"{"algorithm":1}"#, "algorithm"),
        (r#"{"absolute_limit":0}"#, "absolute_limit"),
        (r#"{"absolute_limit":-1}"#, "absolute_limit"),
        (r#"{"absolute_limit":2.5}"#, "absolute_limit"),
        (r#"{"absolute_limit":"20"}"#, "absolute_limit"),
        (r#"{"absolute_limit":4294967296}"#, "absolute_limit"),
        (r#"{"relative_limit":0}"#, "relative_limit"),
        (r#"{"relative_limit":-0.1}"#, "relative_limit"),
        (r#"{"relative_limit":1.01}"#, "relative_limit"),
        (r#"{"relative_limit":"0.1"}"#, "relative_limit"),
        (r#"{"rebalance_threshold":0}"#, "rebalance_threshold"),
        (r#"{"max_simultaneous_rebalance":0}"#, "max_simultaneous_rebalance"),
        (r#"{"max_simultaneous_rebalance":true}"#, "max_simultaneous_rebalance"),
    ];
    for (text, key) in cases {
        let err = LeastShard::default().configure(text).unwrap_err();
        assert!(err.contains(key), "{text}: {err}");
    }
    assert!(LeastShard::default().configure("[1]").unwrap_err().contains("object"));
    assert!(LeastShard::default().configure("{").unwrap_err().contains("JSON"));
    // The boundaries that are allowed.
    strategy(r#"{"relative_limit":1}"#);
    strategy(r#"{"relative_limit":0.0001,"absolute_limit":1,"rebalance_threshold":1}"#);
    strategy(r#"{"absolute_limit":4294967295}"#);
}

#[test]
fn a_failed_configure_keeps_the_previous_settings() {
    let mut s = strategy(r#"{"absolute_limit":3,"relative_limit":1.0}"#);
    let before = *s.config();
    assert!(s.configure(r#"{"absolute_limit":0}"#).is_err());
    assert!(s.configure(r#"{"algorithm":"classic","bogus":1}"#).is_err());
    assert!(s.configure(r#"{"algorithm":"classic","relative_limit":2}"#).is_err());
    assert_eq!(*s.config(), before);
    // And it behaves accordingly.
    assert_eq!(abc(1, 9, 0).rebalance(&s).unwrap(), ids(&["002", "003", "004"]));
}

#[test]
fn describe() {
    let info = LeastShard::default().info();
    assert_eq!(info.name, "least-shard");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert!(!info.description.is_empty());
    assert!(!info.needs_shard_names);
    assert_eq!(info.config_schema, CONFIG_SCHEMA);
    let schema: serde_json::Value = serde_json::from_str(&info.config_schema).unwrap();
    assert_eq!(schema["additionalProperties"], false);
    let p = &schema["properties"];
    assert_eq!(p["algorithm"]["default"], "current");
    assert_eq!(p["absolute_limit"]["default"], 20);
    assert_eq!(p["relative_limit"]["default"], 0.1);
    assert_eq!(p["rebalance_threshold"]["default"], 1);
    assert_eq!(p["max_simultaneous_rebalance"]["default"], 3);
    // The schema's defaults are the parser's defaults.
    let from_schema: serde_json::Map<String, serde_json::Value> =
        p.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v["default"].clone())).collect();
    assert_eq!(Config::parse(&serde_json::Value::Object(from_schema).to_string()).unwrap(), Config::default());
}

#[test]
fn conforms_current() {
    assert_conforms(LeastShard::default());
    assert_conforms(strategy(r#"{"absolute_limit":1000,"relative_limit":1}"#));
}

#[test]
fn conforms_classic() {
    assert_conforms(strategy(r#"{"algorithm":"classic"}"#));
    assert_conforms(strategy(r#"{"algorithm":"classic","rebalance_threshold":2,"max_simultaneous_rebalance":10}"#));
}

/// The suitability order written field by field, as it was before the
/// topology's part was ranked once per topology.
fn field_order(view: &View, a: RegionId, b: RegionId) -> Ordering {
    let (ra, rb) = (view.region(a), view.region(b));
    let leaving = |status: RegionStatus| status == RegionStatus::Leaving;
    leaving(ra.status)
        .cmp(&leaving(rb.status))
        .then_with(|| compare_versions(&rb.app_version, &ra.app_version))
        .then_with(|| view.shard_count(a).cmp(&view.shard_count(b)))
        .then_with(|| ra.join_order.cmp(&rb.join_order))
        .then_with(|| ra.address.as_bytes().cmp(rb.address.as_bytes()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The region order is a total order (antisymmetric, transitive,
    /// equal only for the same region), so sorting and `least_loaded` agree.
    #[test]
    fn region_order_is_total(seed in 0u64..10_000, regions in 1usize..25, shards in 0usize..200) {
        let cluster = generate(seed, &Shape::messy(regions, shards));
        let view = cluster.view();
        let ids: Vec<RegionId> = view.region_ids().collect();
        for &a in &ids {
            for &b in &ids {
                let ab = region_order(&view, a, b);
                prop_assert_eq!(ab, region_order(&view, b, a).reverse());
                prop_assert_eq!(ab == std::cmp::Ordering::Equal, a == b);
                for &c in &ids {
                    if ab.is_lt() && region_order(&view, b, c).is_lt() {
                        prop_assert!(region_order(&view, a, c).is_lt());
                    }
                }
            }
        }
        let mut sorted = ids.clone();
        sorted.sort_by(|a, b| region_order(&view, *a, *b));
        prop_assert_eq!(least_loaded(&view, ids.iter().copied()), sorted.first().copied());
        prop_assert_eq!(least_loaded(&view, ids.iter().rev().copied()), sorted.first().copied());
    }

    /// The ranked order (topology ranks computed once, then three integers
    /// per comparison) is exactly the field-by-field order it replaces, and
    /// the one-pass scan picks what sorting every region picked before.
    #[test]
    fn ranked_order_is_the_field_order(seed in 0u64..10_000, regions in 1usize..40, shards in 0usize..200) {
        let mut shape = Shape::messy(regions, shards);
        shape.mixed_versions = true;
        let view = generate(seed, &shape).view();
        let ids: Vec<RegionId> = view.region_ids().collect();
        for &a in &ids {
            for &b in &ids {
                prop_assert_eq!(region_order(&view, a, b), field_order(&view, a, b), "{:?} vs {:?}", a, b);
            }
        }
        let allocatable: Vec<RegionId> =
            view.region_ids().filter(|id| view.region(*id).is_allocatable()).collect();
        prop_assert_eq!(view.allocatable().collect::<Vec<_>>(), allocatable.clone());
        let mut sorted = allocatable;
        sorted.sort_by(|a, b| field_order(&view, *a, *b));
        prop_assert_eq!(least_loaded(&view, view.allocatable()), sorted.first().copied());
        prop_assert_eq!(view.most_suitable_allocatable(), sorted.first().copied(), "the first call's scan");
        prop_assert_eq!(view.most_suitable_allocatable(), sorted.first().copied(), "the view's kept order");
    }

    /// The current algorithm never answers more than its limit, and never a
    /// shard twice or one already moving (the conformance rules) on messy
    /// clusters with any settings.
    #[test]
    fn answers_stay_within_the_rules(
        seed in 0u64..10_000,
        regions in 1usize..30,
        shards in 0usize..400,
        absolute in 1u32..50,
        relative in 0.01f64..=1.0,
        classic in any::<bool>(),
        threshold in 1u32..5,
        max_simultaneous in 1u32..8,
    ) {
        let mut shape = Shape::messy(regions, shards);
        shape.mixed_versions = seed % 2 == 0;
        shape.not_up_percent = seed % 3 * 10;
        shape.in_progress_percent = seed % 4;
        let cluster = generate(seed, &shape);
        let algorithm = if classic { "classic" } else { "current" };
        let s = strategy(&format!(
            r#"{{"algorithm":"{algorithm}","absolute_limit":{absolute},"relative_limit":{relative},
                "rebalance_threshold":{threshold},"max_simultaneous_rebalance":{max_simultaneous}}}"#
        ));
        let moved = cluster.rebalance(&s).unwrap();
        let total: usize = cluster.counts().values().sum();
        if classic {
            let room = (max_simultaneous as usize).saturating_sub(cluster.snapshot.in_progress.len());
            prop_assert!(moved.len() <= room.min(threshold as usize));
            let mut sorted = moved.clone();
            sorted.sort();
            prop_assert_eq!(&sorted, &moved);
        } else {
            prop_assert!(moved.len() <= s.config().limit(total));
            if !cluster.snapshot.in_progress.is_empty() {
                prop_assert!(moved.is_empty());
            }
        }
        let mut seen = std::collections::HashSet::new();
        for id in &moved {
            prop_assert!(cluster.snapshot.home_of(id).is_some());
            prop_assert!(!cluster.snapshot.in_progress.contains(id));
            prop_assert!(seen.insert(id.clone()));
        }
    }
}
