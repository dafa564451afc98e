//! Table-driven native tests: plain `cargo test`, no component, no host.

use latency_aware::{LatencyAware, Settings};
use shardalloc_guest::testing::Scenario;
use shardalloc_guest::{RegionStatus, Strategy, conformance};

fn configured(config: &str) -> Result<LatencyAware, String> {
    let mut strategy = LatencyAware::default();
    strategy.configure(config).map(|()| strategy)
}

fn two_zones() -> Scenario {
    Scenario::parse("eu-1=1,2 eu-2=3 us-1= us-2=4")
        .label("eu-1", "zone", "eu")
        .label("eu-2", "zone", "eu")
        .label("us-1", "zone", "us")
        .label("us-2", "zone", "us")
        .metric("eu-1", "latency_ms", 5.0)
        .metric("eu-2", "latency_ms", 9.0)
        .metric("us-1", "latency_ms", 7.0)
        .metric("us-2", "latency_ms", 3.0)
}

#[test]
fn allocate_picks_the_lowest_latency_in_the_requesters_zone() {
    let strategy = LatencyAware::default();
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("no requester: lowest latency overall", None, "us-2"),
        ("requester in eu", Some("eu-2"), "eu-1"),
        ("requester in us", Some("us-1"), "us-2"),
    ];
    for (name, requester, expected) in cases {
        let scenario = two_zones();
        let got = match requester {
            Some(r) => scenario.allocate_from(&strategy, "42", Some(r)),
            None => scenario.allocate(&strategy, "42"),
        };
        assert_eq!(got.as_deref(), Ok(*expected), "{name}");
    }
}

#[test]
fn allocate_skips_regions_that_cannot_take_shards_and_unreported_metrics() {
    let strategy = LatencyAware::default();
    let cases: Vec<(&str, Scenario, &str)> = vec![
        ("draining", two_zones().draining("us-2"), "eu-1"),
        ("proxy-only", two_zones().proxy_only("us-2"), "eu-1"),
        ("leaving", two_zones().status("us-2", RegionStatus::Leaving), "eu-1"),
        ("no metric: fewest shards, then index", Scenario::parse("a=1 b= c="), "b"),
        (
            "latency only among regions within max_imbalance of the emptiest",
            Scenario::parse("a=1,2,3,4,5,6,7,8,9 b=10,11,12,13,14,15 c=16,17,18,19,20")
                .metric("a", "latency_ms", 1.0)
                .metric("b", "latency_ms", 5.0)
                .metric("c", "latency_ms", 9.0),
            "b",
        ),
        ("a region without the metric is last", Scenario::parse("a= b=1,2").metric("b", "latency_ms", 100.0), "b"),
        ("zone with nothing allocatable: anywhere", two_zones().draining("eu-1").draining("eu-2"), "us-2"),
    ];
    for (name, scenario, expected) in cases {
        let requester = scenario.view().find("eu-1").map(|_| "eu-1");
        let got = scenario.allocate_from(&strategy, "42", requester);
        assert_eq!(got.as_deref(), Ok(expected), "{name}");
    }
    let none = Scenario::parse("a=").draining("a").allocate(&strategy, "42");
    assert_eq!(none, Err("no allocatable region".to_owned()));
}

#[test]
fn another_metric_is_read_when_configured() {
    let strategy = configured(r#"{"metric":"cpu"}"#).unwrap();
    let scenario = Scenario::parse("a= b=").metric("a", "cpu", 0.9).metric("b", "cpu", 0.1);
    assert_eq!(scenario.allocate(&strategy, "1").as_deref(), Ok("b"));
}

#[test]
fn rebalance_moves_the_oldest_shards_of_the_fullest_region() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("balanced enough", "", "a=1,2,3 b=4", &[]),
        ("gap 4: two moves", "", "a=1,2,3,4,5 b=6", &["1", "2"]),
        ("capped by max_moves", r#"{"max_moves":1}"#, "a=1,2,3,4,5,6,7,8 b=", &["1"]),
        ("handles are region-major", "", "a=1 b=2,3,4,5,6,7 c=", &["2", "3", "4"]),
        ("threshold", r#"{"max_imbalance":5}"#, "a=1,2,3,4,5 b=", &[]),
    ];
    for (name, config, spec, expected) in cases {
        let strategy = configured(config).unwrap();
        let moved = Scenario::parse(spec).rebalance(&strategy).unwrap();
        assert_eq!(moved, *expected, "{name}");
    }
}

#[test]
fn rebalance_waits_for_hand_offs_in_progress() {
    let strategy = LatencyAware::default();
    let scenario = Scenario::parse("a=1,2,3,4,5,6 b=").in_progress(&["6"]);
    assert_eq!(scenario.rebalance(&strategy), Ok(vec![]));
}

#[test]
fn bad_configuration_names_the_key() {
    let cases: &[(&str, &str)] = &[
        (r#"{"metrc":"x"}"#, "unknown field `metrc`"),
        (r#"{"metric":""}"#, "metric must be a non-empty string"),
        (r#"{"zone_label":""}"#, "zone_label must be a non-empty string"),
        (r#"{"max_imbalance":0}"#, "max_imbalance must be at least 1"),
        (r#"{"max_moves":0}"#, "max_moves must be at least 1"),
        (r#"{"max_moves":"3"}"#, "invalid type: string \"3\", expected u32"),
        ("[1]", "config must be a JSON object"),
    ];
    for (config, expected) in cases {
        let error = configured(config).unwrap_err();
        assert!(error.contains(expected), "{config}: {error}");
    }
    assert_eq!(configured("").unwrap().info().name, "latency-aware-rust");
    let _ = Settings::default();
}

#[test]
fn conforms() {
    conformance::assert_conforms(LatencyAware::default());
    conformance::assert_conforms(LatencyAware::with(Settings { max_moves: 1, ..Settings::default() }));
}
