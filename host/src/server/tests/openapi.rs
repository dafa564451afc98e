//! The OpenAPI document against the router, in both directions: every
//! documented operation is routed, and every routed path and method is
//! documented. The body schemas are the types' own: a field a body type
//! serializes is a property of its schema.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::TestNode;
use crate::server::{document, router};

const METHODS: [Method; 5] = [Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::PATCH];

/// A concrete path for a templated one.
fn concrete(path: &str) -> String {
    path.replace("{type}", "cart")
        .replace("{shardId}", "42")
        .replace("{digest}", "sha256:0000000000000000000000000000000000000000000000000000000000000000")
        .replace("{address}", "sim-1")
}

fn documented() -> BTreeSet<(String, Method)> {
    let document: Value = serde_json::from_str(document()).expect("the document is JSON");
    let paths = document["paths"].as_object().expect("the document lists paths");
    let mut operations = BTreeSet::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method.as_str().to_lowercase()).is_some() {
                operations.insert((path.clone(), method));
            }
        }
    }
    operations
}

/// The paths the router routes, read from its debug form (axum keeps no
/// other list).
fn routed_paths(node: &TestNode) -> BTreeSet<String> {
    let text = format!("{:?}", router(node.node().state.clone()));
    // The routes, not the fallback router's catch-alls.
    let routes = text.split("fallback_router").next().expect("a debug form");
    routes.split('"').filter(|s| s.starts_with('/') && !s.contains("__private__")).map(str::to_owned).collect()
}

fn not_routed(answer: &(StatusCode, Value)) -> bool {
    let code = answer.1["error"]["code"].as_str().unwrap_or_default();
    code == "no-route" || code == "method-not-allowed"
}

#[tokio::test]
async fn every_documented_operation_is_routed() {
    let node = TestNode::start();
    let operations = documented();
    assert!(operations.len() >= 25, "only {} operations documented", operations.len());
    for path in ["/healthz", "/livez", "/readyz", "/metrics", "/v1/regions/connect", "/v1/openapi.json"] {
        assert!(operations.iter().any(|(p, _)| p == path), "{path} is not documented");
    }
    for (path, method) in &operations {
        let answer = node.request(method.clone(), &concrete(path), Some("{}")).await;
        assert!(!not_routed(&answer), "{method} {path} is documented but not routed: {answer:?}");
    }
}

#[tokio::test]
async fn every_routed_operation_is_documented() {
    let node = TestNode::start();
    let operations = documented();
    let paths = routed_paths(&node);
    assert!(paths.len() >= 20, "only {} routed paths found: {paths:?}", paths.len());
    let documented_paths: BTreeSet<String> = operations.iter().map(|(p, _)| p.clone()).collect();
    let undocumented: Vec<&String> = paths.difference(&documented_paths).collect();
    assert!(undocumented.is_empty(), "routed but not documented: {undocumented:?}");
    for path in &paths {
        for method in METHODS {
            let answer = node.request(method.clone(), &concrete(path), Some("{}")).await;
            if !not_routed(&answer) {
                assert!(
                    operations.contains(&(path.clone(), method.clone())),
                    "{method} {path} is routed ({}) but not documented",
                    answer.0
                );
            }
        }
    }
}

/// The property names of a component schema.
fn properties(document: &Value, schema: &str) -> BTreeSet<String> {
    let schema = &document["components"]["schemas"][schema];
    schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("schema {schema} has no properties"))
        .keys()
        .cloned()
        .collect()
}

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().expect("an object").keys().cloned().collect()
}

#[tokio::test]
async fn body_schemas_are_the_bodies_the_node_sends() {
    let node = TestNode::start();
    let mut region = node.region("cart", "a").await;
    region.home("1").await;
    let document: Value = serde_json::from_str(document()).unwrap();
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart", None).await;
    assert_eq!(keys(&state), properties(&document, "TypeState"));
    assert_eq!(keys(&state["regions"][0]), properties(&document, "RegionState"));
    assert_eq!(keys(&state["shards"][0]), properties(&document, "ShardHome"));
    assert_eq!(keys(&state["strategy"]), properties(&document, "ActivationInfo"));
    let (_, strategy) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    assert_eq!(keys(&strategy), properties(&document, "StrategyState"));
    let (_, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/1", None).await;
    assert_eq!(keys(&shard), properties(&document, "ShardState"));
    let (_, error) = node.request(Method::GET, "/v1/cluster/shards/nope", None).await;
    assert_eq!(keys(&error), properties(&document, "ErrorBody"));
    // Closed sets of words are listed as such.
    let statuses = &document["components"]["schemas"]["RegionStatus"]["enum"];
    assert_eq!(*statuses, json!(["up", "unreachable", "leaving"]), "{statuses}");
}

#[tokio::test]
async fn the_document_is_served_and_parses() {
    let node = TestNode::start();
    let (status, served) = node.request(Method::GET, "/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(served, serde_json::from_str::<Value>(document()).unwrap());
    assert_eq!(served["openapi"], "3.1.0", "{}", served["openapi"]);
    assert!(served["components"]["securitySchemes"]["bearerAuth"].is_object());
}
