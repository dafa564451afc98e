//! Metric label values from outside are escaped.

use super::*;

#[test]
fn label_values_from_outside_are_escaped() {
    let metrics = Metrics::new();
    let worst = ["back\\slash", "quo\"te", "new\nline", "brace}{=,", "plain"];
    for (i, address) in worst.iter().enumerate() {
        let labels = ShardLabels { r#type: "cart".into(), region: (*address).into() };
        metrics.shards.get_or_create(&labels).set(i as i64);
    }
    let text = metrics.render();
    // The parser reads Prometheus' text format, where a counter's samples
    // are named as its family; OpenMetrics (what the node serves) adds
    // `_total`. The counters' lines are left out: the labels are the point.
    let counters: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let text: String = text
        .lines()
        .filter(|line| {
            let name = line.trim_start_matches("# HELP ").trim_start_matches("# TYPE ");
            !counters.iter().any(|counter| name.starts_with(counter))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let scrape = prom_text_format_parser::Scrape::parse(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let shards = scrape.metrics.iter().find(|m| m.name == "shardalloc_shards").expect("the shards family");
    let mut regions: Vec<String> = shards
        .samples
        .iter()
        .flat_map(|s| s.labels.iter())
        .filter(|l| l.key == "region")
        .map(|l| l.value.clone())
        .collect();
    regions.sort();
    // The parser keeps values as written: escaped.
    let mut expected: Vec<String> =
        [r"back\\slash", r#"quo\"te"#, r"new\nline", "brace}{=,", "plain"].iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(regions, expected, "{text}");
    assert_eq!(scrape.metrics.iter().filter(|m| m.name.contains("injected")).count(), 0);
}

#[test]
fn strategy_calls_are_timed_per_strategy() {
    use crate::engine::Engine;
    use crate::engine::slot::{AutoRollback, Slot};
    use crate::strategy::{AllocationStrategy, ClusterView, StrategySource};
    use shardalloc_guest::Snapshot;

    let engine = Engine::for_tool().unwrap();
    let compiled = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let slot =
        Slot::new("cart", engine, AutoRollback::default(), compiled, "", crate::engine::limits::Limits::default())
            .unwrap();
    let metrics = Metrics::new();
    let mut timed = metrics.timed("cart", slot.handle());
    let snapshot = Snapshot::from_json(r#"{"regions":[{"address":"a:1","shards":["1"]}]}"#).unwrap();
    let view = ClusterView::from_snapshot(&snapshot);
    timed.allocate(&view, "2", None).unwrap();
    timed.allocate(&view, "3", None).unwrap();
    let text = metrics.render();
    let count = text
        .lines()
        .find(|l| {
            l.starts_with("shardalloc_strategy_call_seconds_count{")
                && l.contains(r#"call="allocate""#)
                && l.contains(r#"strategy="least-shard@"#)
        })
        .unwrap_or_else(|| panic!("no allocate series labelled with the strategy:\n{text}"));
    assert!(count.ends_with(" 2"), "{count}");
}

#[test]
fn region_load_and_the_imbalance_come_from_the_regions_that_report() {
    let metrics = Metrics::new();
    let region = |address, load| RegionGauges { address, status: RegionStatus::Up, draining: false, shards: 1, load };
    let regions = vec![region("a", Some(30.0)), region("b", Some(10.0)), region("old", None)];
    let quiet = vec![region("c", Some(0.0)), region("d", None)];
    metrics.update_gauges([
        TypeGauges { name: "cart", regions, placements: 0, frozen: 2 },
        TypeGauges { name: "idle", regions: quiet, placements: 0, frozen: 0 },
    ]);
    let text = metrics.render();
    assert!(text.contains("shardalloc_region_load{type=\"cart\",region=\"a\"} 30.0"), "{text}");
    assert!(text.contains("shardalloc_region_load{type=\"cart\",region=\"b\"} 10.0"), "{text}");
    assert!(
        !text.contains("shardalloc_region_load{type=\"cart\",region=\"old\"}"),
        "a region that never reported has no load: {text}"
    );
    assert!(text.contains("shardalloc_load_imbalance{type=\"cart\"} 1.5"), "30 over a mean of 20: {text}");
    assert!(!text.contains("shardalloc_load_imbalance{type=\"idle\"}"), "no imbalance without load: {text}");
    assert!(text.contains("shardalloc_frozen{type=\"cart\"} 2"), "strictly frozen: {text}");
    assert!(text.contains("shardalloc_frozen{type=\"idle\"} 0"), "not frozen: {text}");
}

#[test]
fn a_deleted_types_series_are_removed_and_the_others_kept() {
    use crate::engine::Engine;
    use crate::engine::slot::{AutoRollback, Slot};
    use crate::strategy::{AllocationStrategy, ClusterView, StrategySource};
    use shardalloc_guest::Snapshot;

    let engine = Engine::for_tool().unwrap();
    let compiled = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let slot =
        Slot::new("gone", engine, AutoRollback::default(), compiled, "", crate::engine::limits::Limits::default())
            .unwrap();
    let metrics = Metrics::new();
    let snapshot = Snapshot::from_json(r#"{"regions":[{"address":"a:1","shards":["1"]}]}"#).unwrap();
    let view = ClusterView::from_snapshot(&snapshot);
    for entity_type in ["gone", "kept"] {
        let mut timed = metrics.timed(entity_type, slot.handle());
        timed.allocate(&view, "2", None).unwrap();
        timed.rebalance(&view).unwrap();
        metrics.observe(entity_type, &Observation::RebalanceFallback { error: "a trap".into() });
        let handoff = Observation::HandOff { shard: "1".into(), from: "a:1".into(), step: Step::Begin };
        metrics.observe(entity_type, &handoff);
        let clipped = Observation::MovesClipped {
            asked: 3,
            by_limit: vec![(ClipReason::Cooldown, 1), (ClipReason::MovesPerRound, 2)],
            shards: vec![],
        };
        metrics.observe(entity_type, &clipped);
    }
    let series =
        |text: &str, entity_type: &str| text.lines().filter(|l| l.contains(&format!("type=\"{entity_type}\""))).count();
    let before = metrics.render();
    assert!(series(&before, "gone") >= 10, "{before}");
    let kept = series(&before, "kept");
    metrics.forget_type("gone");
    let after = metrics.render();
    assert_eq!(series(&after, "gone"), 0, "a deleted type's series stay:\n{after}");
    assert_eq!(series(&after, "kept"), kept, "another type's series went:\n{after}");
}
