//! Types under control: a region may create a type only when the node
//! allows it, a type can be deleted (with its regions leaving first when
//! forced), readiness counts the declared types, and names follow their
//! rules at every edge.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use shardalloc_proto::protocol::NodeMessage;

use super::{FakeRegion, TestNode, assert_error, settings_with};
use crate::server::state::Security;

#[tokio::test]
async fn a_region_creates_a_type_only_when_the_node_allows_it() {
    let node = TestNode::start();
    let (_, first) = FakeRegion::try_register(&node, "junk", "a").await;
    let NodeMessage::Refused { reason } = first else { panic!("an undeclared type was created: {first:?}") };
    assert!(reason.contains("--auto-create-types") && reason.contains("--type junk"), "{reason}");
    let (_, types) = node.request(Method::GET, "/v1/cluster/shards", None).await;
    assert_eq!(types["types"].as_array().unwrap().len(), 1, "{types}");

    let mut settings = settings_with(&["cart"]);
    settings.auto_create_types = true;
    let node = TestNode::with(settings, Security::default());
    let _region = node.region("junk", "a").await;
    let (status, _) = node.request(Method::GET, "/v1/cluster/shards/junk", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn readiness_counts_the_declared_types_only() {
    let mut settings = settings_with(&["cart"]);
    settings.auto_create_types = true;
    let node = TestNode::with(settings, Security::default());
    let _cart = node.region("cart", "a").await;
    // A type a region created, then left empty, does not make the node unready.
    let mut junk = node.region("junk", "b").await;
    junk.send(shardalloc_proto::protocol::RegionMessage::Leave).await;
    junk.expect("LeaveDone", |m| matches!(m, NodeMessage::LeaveDone).then_some(())).await;
    let (status, body) = node.request(Method::GET, "/readyz", None).await;
    assert_eq!((status, body), (StatusCode::OK, Value::String("ready\n".into())));
}

#[tokio::test]
async fn a_type_without_regions_is_deleted_at_once_and_with_regions_only_when_forced() {
    let mut settings = settings_with(&["cart", "empty"]);
    settings.coordinator.drain_batch = 50;
    let node = TestNode::with(settings, Security::default());
    let answer = node.request(Method::DELETE, "/v1/cluster/shards/empty", None).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
    assert_error(
        "the deleted type",
        &node.request(Method::GET, "/v1/cluster/shards/empty", None).await,
        StatusCode::NOT_FOUND,
    );
    assert_error(
        "an unknown type",
        &node.request(Method::DELETE, "/v1/cluster/shards/nope", None).await,
        StatusCode::NOT_FOUND,
    );

    let mut region = node.region("cart", "a").await;
    for shard in ["1", "2", "3"] {
        region.home(shard).await;
    }
    node.request(Method::POST, "/v1/cluster/shards/cart/placements", Some(r#"{"shardId":"1","target":"a"}"#)).await;
    let refused = node.request(Method::DELETE, "/v1/cluster/shards/cart", None).await;
    assert_eq!(assert_error("a type with regions", &refused, StatusCode::CONFLICT), "type-has-regions");
    assert!(
        refused.1["error"]["message"].as_str().unwrap().contains("\"a\"")
            || refused.1["error"]["message"].as_str().unwrap().contains("(a)"),
        "{}",
        refused.1
    );
    let bad = node.request(Method::DELETE, "/v1/cluster/shards/cart?force=maybe", None).await;
    assert_error("a bad force", &bad, StatusCode::BAD_REQUEST);

    // Forced: the region's shards stop through the hand-off, then it is let go.
    let router = node.router.clone();
    let delete = tokio::spawn(async move {
        use tower::ServiceExt;
        let request = axum::http::Request::delete("/v1/cluster/shards/cart?force=true").body(axum::body::Body::empty());
        router.oneshot(request.unwrap()).await.unwrap().status()
    });
    let seen = region.cooperate_until_gone().await;
    assert_eq!(delete.await.unwrap(), StatusCode::NO_CONTENT);
    let stopped = seen.iter().filter(|m| matches!(m, NodeMessage::HandOff { .. })).count();
    assert_eq!(stopped, 3, "every shard is stopped through the hand-off: {seen:?}");
    assert!(seen.contains(&NodeMessage::LeaveDone), "{seen:?}");
    assert_error(
        "the deleted type",
        &node.request(Method::GET, "/v1/cluster/shards/cart", None).await,
        StatusCode::NOT_FOUND,
    );
    let loaded = node.node().state.store.load().unwrap();
    assert!(!loaded.types.contains_key("cart") && !loaded.types.contains_key("empty"), "{:?}", loaded.types.keys());
}

#[tokio::test]
async fn names_follow_their_rules_at_every_edge() {
    let node = TestNode::start();
    for (path, method, body) in [
        ("/v1/cluster/shards/a%20b", Method::GET, None),
        ("/v1/cluster/shards/a%0Ab/placements", Method::GET, None),
        ("/v1/cluster/regions/a%20b/drain", Method::POST, None),
    ] {
        let answer = node.request(method, path, body).await;
        assert_eq!(assert_error(path, &answer, StatusCode::BAD_REQUEST), "invalid-name");
    }
    for (what, body) in [
        ("a target with a space", json!({"shardId": "1", "target": "a b"})),
        ("a target with a quote and a newline", json!({"shardId": "1", "target": "evil\"} 1\nx"})),
        ("a shard id with an escape", json!({"shardId": "\u{1b}[2J", "target": "b"})),
        ("a shard id with a newline", json!({"shardId": "a\nb", "target": "b"})),
    ] {
        let answer = node.request(Method::POST, "/v1/cluster/shards/cart/placements", Some(&body.to_string())).await;
        assert_error(what, &answer, StatusCode::BAD_REQUEST);
    }
    let (_, first) = FakeRegion::try_register(&node, "cart", "evil\"} 1\nshardalloc_injected{x=\"y").await;
    assert!(matches!(&first, NodeMessage::Refused { reason } if reason.contains("printable ASCII")), "{first:?}");
}

#[tokio::test]
async fn metrics_stay_parseable_with_the_worst_names_allowed() {
    let node = TestNode::start();
    let address = r#"a"b\c}{x="y"#;
    let mut region = node.region("cart", address).await;
    region.home("1").await;
    let deadline = std::time::Instant::now() + super::PATIENCE;
    loop {
        let (status, body) = node.request(Method::GET, "/metrics", None).await;
        assert_eq!(status, StatusCode::OK);
        let text = classic(body.as_str().unwrap());
        let scrape = prom_text_format_parser::Scrape::parse(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let regions: Vec<String> = scrape
            .metrics
            .iter()
            .filter(|m| m.name == "shardalloc_shards")
            .flat_map(|m| m.samples.iter().flat_map(|s| s.labels.iter()))
            .filter(|l| l.key == "region")
            .map(|l| l.value.clone())
            .collect();
        if !regions.is_empty() {
            assert_eq!(regions, [r#"a\"b\\c}{x=\"y"#], "{text}");
            assert!(scrape.metrics.iter().all(|m| m.name.starts_with("shardalloc_")), "{text}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no shard gauge in {text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The OpenMetrics exposition in the classic text format the parser reads:
/// a counter family is named with its samples' `_total` suffix there.
fn classic(openmetrics: &str) -> String {
    let counters: Vec<String> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ").and_then(|rest| rest.strip_suffix(" counter")))
        .map(str::to_owned)
        .collect();
    openmetrics
        .lines()
        .map(|line| {
            for family in &counters {
                for prefix in ["# TYPE ", "# HELP "] {
                    if let Some(rest) = line.strip_prefix(&format!("{prefix}{family} ")) {
                        return format!("{prefix}{family}_total {rest}");
                    }
                }
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_of_a_whole_type_past_the_limit_get_429_with_retry_after() {
    let node = TestNode::start();
    let held: Vec<_> = (0..crate::server::reads::MAX_EXPENSIVE_READS)
        .map(|_| node.node().state.reads.start("cart").expect("a permit"))
        .collect();
    let path = "/v1/cluster/shards/cart/snapshot";
    let response = node.open(path, &[]).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
    assert!(response.headers().contains_key("retry-after"), "{path}: no Retry-After");
    // The type's state comes a page at a time: not a read of the whole type.
    let (status, state) = node.request(Method::GET, "/v1/cluster/shards/cart", None).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    drop(held);
    let (status, _) = node.request(Method::GET, "/v1/cluster/shards/cart/snapshot", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_types_shards_come_in_pages_with_their_region_and_reason() {
    // The fake regions send no heartbeats: on a slow machine they must not
    // be removed (their shards moved) while the test reads.
    let mut settings = settings_with(&["cart"]);
    settings.coordinator.unreachable_after_ms = 600_000;
    settings.coordinator.remove_after_ms = 600_000;
    settings.coordinator.handoff_ack_timeout_ms = 600_000;
    settings.coordinator.handoff_timeout_ms = 600_000;
    settings.coordinator.rebalance_interval_ms = 600_000;
    let node = TestNode::with(settings, Security::default());
    let mut a = node.region("cart", "a").await;
    let _b = node.region("cart", "b").await;
    let pinned = r#"{"shardId":"s05","target":"b"}"#;
    let (status, _) = node.request(Method::POST, "/v1/cluster/shards/cart/placements", Some(pinned)).await;
    assert_eq!(status, StatusCode::OK);
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..7 {
        let shard = format!("s{i:02}");
        let home = a.home(&shard).await;
        let reason = if shard == "s05" { "placement" } else { "strategy" };
        expected.insert(shard, json!({"region": home, "reason": reason}));
    }
    assert_eq!(expected["s05"]["region"], "b");
    // A hand-off the regions never answer stays in flight, on every page.
    let move_one = r#"{"shardIds":["s00"],"immediate":true}"#;
    let (status, moved) = node.request(Method::POST, "/v1/cluster/shards/cart/rebalance", Some(move_one)).await;
    assert_eq!((status, &moved["accepted"]), (StatusCode::ACCEPTED, &json!(["s00"])), "{moved}");

    let mut seen = std::collections::BTreeMap::new();
    let mut path = "/v1/cluster/shards/cart?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = node.request(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        assert_eq!(page["name"], "cart", "{page}");
        assert!(page["strategy"]["name"].is_string(), "{page}");
        let from = &expected["s00"]["region"];
        assert_eq!(page["handOffs"], json!([{"shardId": "s00", "from": from}]), "{page}");
        let counts: Vec<(&str, u64)> = page["regions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["address"].as_str().unwrap(), r["shardCount"].as_u64().unwrap()))
            .collect();
        let on = |region: &str| expected.values().filter(|home| home["region"] == region).count() as u64;
        assert_eq!(counts, [("a", on("a")), ("b", on("b"))], "{page}");
        assert!(page["regions"][0].get("shards").is_none(), "no shard lists in regions: {page}");
        let shards = page["shards"].as_array().unwrap();
        assert!(shards.len() <= 2, "{page}");
        for shard in shards {
            let id = shard["shardId"].as_str().unwrap().to_owned();
            let home = json!({"region": shard["region"], "reason": shard["reason"]});
            assert!(seen.insert(id.clone(), home).is_none(), "{id} on two pages");
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/cluster/shards/cart?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, expected, "every shard exactly once, with its region and why");
    assert_eq!(pages, 4, "7 shards in pages of 2, the last without next");

    let bad = node.request(Method::GET, "/v1/cluster/shards/cart?after=zz", None).await;
    assert_eq!(assert_error("a bad cursor", &bad, StatusCode::BAD_REQUEST), "invalid-cursor");
    let unknown = node.request(Method::GET, "/v1/cluster/shards/nope?limit=2", None).await;
    assert_eq!(assert_error("an unknown type", &unknown, StatusCode::NOT_FOUND), "unknown-type");

    // The admin client reads one page, or follows every page.
    let admin = shardalloc_client::admin::AdminClient::new(&node.serve().await, None).unwrap();
    let first = admin.type_state_page("cart", None, Some(3)).await.unwrap();
    assert_eq!(first.shards.len(), 3);
    assert!(first.next.is_some());
    let all = admin.type_state("cart").await.unwrap();
    assert_eq!(all.shards.len(), 7);
    assert_eq!(all.next, None);
    assert_eq!(all.shards.iter().filter(|s| s.reason == "placement").count(), 1, "{all:?}");
}
