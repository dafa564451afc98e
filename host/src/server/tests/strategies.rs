//! The strategy endpoints in-process: upload, list, activate, dry-run,
//! shadow, roll back and delete, and the rule that an active upload cannot
//! be deleted.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::{TestNode, assert_error};

/// The built-in hash strategy's component, as an operator would upload it.
fn hash_bytes() -> Vec<u8> {
    crate::strategy::builtin::component_bytes("hash").expect("hash is built in").to_vec()
}

/// A component that is no built-in: the misbehaving fixture, which behaves
/// (least-loaded allocation) without a configuration.
fn fixture_bytes() -> Vec<u8> {
    include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm")).to_vec()
}

async fn upload(node: &TestNode, bytes: Vec<u8>) -> Value {
    let request = Request::post("/v1/strategies").header("content-type", "application/wasm").body(Body::from(bytes));
    let (status, stored) = node.send(request.unwrap()).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    stored
}

fn names_and_causes(state: &Value) -> Vec<(String, String)> {
    state["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_owned(), a["cause"].as_str().unwrap().to_owned()))
        .collect()
}

/// Upload, activate, try to delete (409 while active), roll back, delete (204).
async fn active_upload_cannot_be_deleted(bytes: Vec<u8>) {
    let node = TestNode::start();
    let stored = upload(&node, bytes).await;
    let digest = stored["digest"].as_str().unwrap().to_owned();
    let body = json!({ "strategy": digest }).to_string();
    let (status, activated) = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{activated}");
    assert_eq!(activated["active"]["name"], stored["name"], "{activated}");

    let path = format!("/v1/strategies/{digest}");
    let answer = node.request(Method::DELETE, &path, None).await;
    let code = assert_error("deleting the active uploaded strategy", &answer, StatusCode::CONFLICT);
    assert_eq!(code, "strategy-in-use");
    let (_, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    let entry = listed["strategies"].as_array().unwrap().iter().find(|s| s["digest"] == digest.as_str()).cloned();
    assert_eq!(entry.unwrap()["activeIn"], json!(["cart"]), "GET /v1/strategies: {listed}");
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    assert_eq!(state["active"]["digest"], digest.as_str(), "the active strategy is not named by its digest: {state}");

    let (status, rolled_back) = node.request(Method::POST, "/v1/cluster/shards/cart/strategy/rollback", None).await;
    assert_eq!(status, StatusCode::OK, "{rolled_back}");
    assert_eq!(rolled_back["active"]["name"], "least-shard", "{rolled_back}");
    let answer = node.request(Method::DELETE, &path, None).await;
    assert_eq!(answer.0, StatusCode::NO_CONTENT, "deleting after the rollback: {}", answer.1);
    let (_, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    assert!(listed["strategies"].as_array().unwrap().iter().all(|s| s["digest"] != digest.as_str()), "{listed}");
    assert_error("deleting it again", &node.request(Method::DELETE, &path, None).await, StatusCode::NOT_FOUND);
    let answer = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&body)).await;
    assert_error("activating the deleted strategy", &answer, StatusCode::NOT_FOUND);
    assert!(node.node().state.store.blob(&digest).unwrap().is_none(), "the deleted component's bytes remain");
}

#[tokio::test]
async fn an_active_upload_cannot_be_deleted_until_rolled_back() {
    active_upload_cannot_be_deleted(fixture_bytes()).await;
}

/// The same with the bytes of a built-in, uploaded as any other component.
#[tokio::test]
async fn an_active_upload_of_builtin_bytes_cannot_be_deleted_until_rolled_back() {
    active_upload_cannot_be_deleted(hash_bytes()).await;
}

#[tokio::test]
async fn built_in_strategies_cannot_be_deleted() {
    let node = TestNode::start();
    let answer = node.request(Method::DELETE, "/v1/strategies/hash", None).await;
    assert_eq!(assert_error("deleting a built-in", &answer, StatusCode::CONFLICT), "builtin");
}

#[tokio::test]
async fn a_rest_caller_cannot_name_a_file() {
    let node = TestNode::start();
    for strategy in ["/etc/passwd", "./strategy.wasm", "strategy.wasm"] {
        let body = json!({ "strategy": strategy }).to_string();
        for (method, path) in [
            (Method::PUT, "/v1/cluster/shards/cart/strategy"),
            (Method::PUT, "/v1/cluster/shards/cart/strategy/shadow"),
            (Method::POST, "/v1/cluster/shards/cart/strategy/dry-run"),
        ] {
            let answer = node.request(method, path, Some(&body)).await;
            let code = assert_error(&format!("{path} with {strategy}"), &answer, StatusCode::NOT_FOUND);
            assert_eq!(code, "unknown-strategy");
            let message = answer.1["error"]["message"].as_str().unwrap();
            assert!(message.contains("least-shard") && message.contains("sha256:"), "{message}");
        }
    }
}

#[tokio::test]
async fn dry_run_shadow_and_history_answer_their_shapes() {
    let node = TestNode::start();
    let mut a = node.region("cart", "a").await;
    let _b = node.region("cart", "b").await;
    for shard in ["1", "2", "3", "4"] {
        a.home(shard).await;
    }
    let body = r#"{"strategy":"hash","rounds":2,"shardIds":["9"]}"#;
    let (status, run) = node.request(Method::POST, "/v1/cluster/shards/cart/strategy/dry-run", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert!(run["strategy"].as_str().unwrap().starts_with("hash@"), "{run}");
    assert!(["a", "b"].contains(&run["allocations"]["9"].as_str().unwrap()), "{run}");
    assert_eq!(run["rounds"].as_array().unwrap().len(), 2, "{run}");

    let (status, state) =
        node.request(Method::PUT, "/v1/cluster/shards/cart/strategy/shadow", Some(r#"{"strategy":"hash"}"#)).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["shadow"]["name"], "hash", "{state}");
    a.home("5").await;
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    assert!(state["shadowCalls"].as_u64().unwrap() >= 1, "{state}");
    let (_, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    let hash = listed["strategies"].as_array().unwrap().iter().find(|s| s["digest"] == "hash").cloned().unwrap();
    assert_eq!(hash["activeIn"], json!(["cart"]), "a shadow counts as in use: {listed}");
    // A new candidate counts from 0; the one it replaced is in the history.
    let calls = state["shadowCalls"].as_u64().unwrap();
    let (status, _) =
        node.request(Method::PUT, "/v1/cluster/shards/cart/strategy/shadow", Some(r#"{"strategy":"zone"}"#)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    assert_eq!((state["shadowCalls"].as_u64(), state["shadowDisagreements"].as_u64()), (Some(0), Some(0)), "{state}");
    let past = &state["shadowHistory"][0];
    assert!(past["candidate"].as_str().unwrap().starts_with("hash@"), "{state}");
    assert_eq!(past["calls"].as_u64(), Some(calls), "{state}");
    let answer = node.request(Method::DELETE, "/v1/cluster/shards/cart/strategy/shadow", None).await;
    assert_eq!(answer, (StatusCode::NO_CONTENT, Value::Null));
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    let candidates: Vec<&str> =
        state["shadowHistory"].as_array().unwrap().iter().map(|c| c["candidate"].as_str().unwrap()).collect();
    assert!(candidates.len() == 2 && candidates[1].starts_with("zone@"), "cleared, kept: {state}");

    let body = r#"{"strategy":"hash","config":{"rebalance_limit":3}}"#;
    let (status, state) = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["active"]["config"], json!({"rebalance_limit":3}), "{state}");
    let (_, state) = node.request(Method::POST, "/v1/cluster/shards/cart/strategy/rollback", None).await;
    assert_eq!(
        names_and_causes(&state),
        [("least-shard", "initial"), ("hash", "operator"), ("least-shard", "rollback")]
            .map(|(n, c)| (n.to_owned(), c.to_owned())),
        "{state}"
    );
    // Each change is persisted with the type.
    let loaded = node.node().state.store.load().unwrap();
    let history: Vec<&str> = loaded.types["cart"].activations.iter().map(|a| a.cause.as_str()).collect();
    assert_eq!(history, ["initial", "operator", "rollback"]);
}

#[tokio::test]
async fn a_type_declared_with_a_file_stores_it_like_an_upload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("least-loaded.wasm");
    std::fs::write(&path, fixture_bytes()).unwrap();
    let mut settings = super::settings_with(&[]);
    let declaration = crate::server::driver::TypeDeclaration {
        strategy: crate::strategy::StrategySource::parse_cli(path.to_str().unwrap()).unwrap(),
        config: String::new(),
    };
    settings.types.insert("cart".into(), declaration);
    let node = TestNode::with(settings, crate::server::state::Security::default());
    std::fs::remove_file(&path).unwrap();
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    let digest = state["active"]["digest"].as_str().unwrap().to_owned();
    assert!(digest.starts_with("sha256:"), "a file is named by its digest once stored: {state}");
    assert!(node.node().state.store.blob(&digest).unwrap().is_some(), "its bytes are stored");
    let (_, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    let entry = listed["strategies"].as_array().unwrap().iter().find(|s| s["digest"] == digest.as_str()).cloned();
    assert_eq!(entry.unwrap()["activeIn"], json!(["cart"]), "{listed}");
}

#[tokio::test]
async fn a_candidate_that_fails_its_dry_run_is_refused_unless_forced() {
    let node = TestNode::start();
    let mut region = node.region("cart", "a").await;
    let _b = node.region("cart", "b").await;
    for shard in ["1", "2", "3"] {
        region.home(shard).await;
    }
    let stored = upload(&node, fixture_bytes()).await;
    let digest = stored["digest"].as_str().unwrap();
    let faulty = json!({ "strategy": digest, "config": {"allocate": "panic"}, "shardIds": ["new"] }).to_string();
    let answer = node.request(Method::POST, "/v1/cluster/shards/cart/strategy/dry-run", Some(&faulty)).await;
    assert_eq!(
        assert_error("a trapping candidate's dry run", &answer, StatusCode::UNPROCESSABLE_ENTITY),
        "dry-run-failed"
    );
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("allocate new") && message.contains("trap"), "{message}");
    let wrong = json!({ "strategy": digest, "config": {"rebalance": "duplicate"} }).to_string();
    let answer = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&wrong)).await;
    assert_eq!(
        assert_error("activating a failing candidate", &answer, StatusCode::UNPROCESSABLE_ENTITY),
        "dry-run-failed"
    );
    let (_, state) = node.request(Method::GET, "/v1/cluster/shards/cart/strategy", None).await;
    assert_eq!(state["active"]["name"], "least-shard", "the refused candidate was activated: {state}");
    let forced = json!({ "strategy": digest, "config": {"rebalance": "duplicate"}, "force": true }).to_string();
    let (status, state) = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&forced)).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(state["active"]["digest"], digest, "{state}");
}
