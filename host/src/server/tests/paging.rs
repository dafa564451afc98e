//! Every list comes in pages: `?limit=` (default 1,000, clamped to 10,000)
//! and `?after=` the previous page's `next`; the admin client follows them.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::{TestNode, assert_error, settings_with};
use crate::server::state::Security;

const PLACEMENTS: &str = "/v1/cluster/shards/cart/placements";

async fn set(node: &TestNode, shards: impl Iterator<Item = String>) {
    let placements: Vec<Value> = shards.map(|s| json!({"shardId": s, "target": "b"})).collect();
    let body = json!({ "placements": placements }).to_string();
    let (status, answer) = node.request(Method::POST, PLACEMENTS, Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn placements_come_in_pages_that_join_up() {
    let node = TestNode::start();
    set(&node, (0..25).map(|i| format!("s{i:02}"))).await;
    // A tombstone inside the range is skipped.
    node.request(Method::DELETE, &format!("{PLACEMENTS}/s10"), None).await;
    let mut seen = Vec::new();
    let mut path = format!("{PLACEMENTS}?limit=10");
    let mut pages = 0;
    loop {
        let (status, page) = node.request(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let items = page["placements"].as_array().unwrap();
        assert!(items.len() <= 10, "{page}");
        seen.extend(items.iter().map(|p| p["shardId"].as_str().unwrap().to_owned()));
        pages += 1;
        match page["next"].as_str() {
            Some(next) => path = format!("{PLACEMENTS}?limit=10&after={next}"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).filter(|i| *i != 10).map(|i| format!("s{i:02}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3, "24 placements in pages of 10");
    // The admin client follows every page.
    let base = node.serve().await;
    let admin = shardalloc_client::admin::AdminClient::new(&base, None).unwrap();
    let all = admin.placements("cart").await.unwrap();
    assert_eq!(all.placements.len(), 24);
    assert_eq!(all.next, None);
}

#[tokio::test]
async fn limits_are_clamped_and_bad_paging_is_refused() {
    let node = TestNode::start();
    set(&node, (0..10_000).map(|i| format!("a{i:05}"))).await;
    set(&node, std::iter::once("b".to_owned())).await;
    let (_, page) = node.request(Method::GET, &format!("{PLACEMENTS}?limit=20000"), None).await;
    assert_eq!(page["placements"].as_array().unwrap().len(), 10_000, "a limit over 10,000 is clamped");
    assert!(page["next"].is_string(), "the 10,001st is on the next page");
    let (_, page) = node.request(Method::GET, PLACEMENTS, None).await;
    assert_eq!(page["placements"].as_array().unwrap().len(), 1_000, "the default page");
    for query in ["?limit=0", "?limit=-1", "?limit=x", "?after=zz", "?after=abc"] {
        let answer = node.request(Method::GET, &format!("{PLACEMENTS}{query}"), None).await;
        assert_error(query, &answer, StatusCode::BAD_REQUEST);
    }
}

#[tokio::test]
async fn types_regions_strategies_and_history_come_in_pages() {
    let settings = settings_with(&["a", "b", "c"]);
    let node = TestNode::with(settings, Security::default());
    let (_, first) = node.request(Method::GET, "/v1/cluster/shards?limit=2", None).await;
    let names: Vec<&str> = first["types"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    let next = first["next"].as_str().expect("a next page");
    let (_, second) = node.request(Method::GET, &format!("/v1/cluster/shards?limit=2&after={next}"), None).await;
    assert_eq!(second["types"][0]["name"], "c");
    assert_eq!(second["next"], Value::Null);

    for address in ["r1", "r2", "r3"] {
        let _ = node.region("a", address).await;
    }
    let (_, regions) = node.request(Method::GET, "/v1/cluster/regions?limit=2", None).await;
    assert_eq!(regions["regions"].as_array().unwrap().len(), 2, "{regions}");
    let next = regions["next"].as_str().unwrap();
    let (_, rest) = node.request(Method::GET, &format!("/v1/cluster/regions?limit=2&after={next}"), None).await;
    assert_eq!(rest["regions"][0]["address"], "r3", "{rest}");

    let mut digests = Vec::new();
    let mut path = "/v1/strategies?limit=3".to_owned();
    loop {
        let (_, page) = node.request(Method::GET, &path, None).await;
        digests.extend(page["strategies"].as_array().unwrap().iter().map(|s| s["digest"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/strategies?limit=3&after={next}"),
            None => break,
        }
    }
    let builtins: Vec<String> = crate::strategy::builtin::names().map(str::to_owned).collect();
    assert_eq!(digests, builtins, "built-ins, in order, across pages");

    for strategy in ["hash", "zone", "least-shard"] {
        let body = json!({ "strategy": strategy }).to_string();
        node.request(Method::PUT, "/v1/cluster/shards/a/strategy", Some(&body)).await;
    }
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/a/strategy?limit=3", None).await;
    assert_eq!(state["history"].as_array().unwrap().len(), 3, "{state}");
    let next = state["next"].as_str().unwrap();
    let (_, rest) =
        node.request(Method::GET, &format!("/v1/cluster/shards/a/strategy?limit=3&after={next}"), None).await;
    assert_eq!(rest["history"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest["history"][0]["name"], "least-shard", "{rest}");
    assert_eq!(rest["next"], Value::Null);
}
