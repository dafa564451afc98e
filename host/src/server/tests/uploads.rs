//! Uploads within bounds, in-process: the compile bomb refused before it
//! compiles, the quota (count and bytes) with its 507, and the collection
//! of unused components that never touches what a type uses or a rollback
//! could need. (The compile killed past its time, in a child process, is
//! tested on the real binary: `host/tests/node_uploads.rs`.)

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};

use super::{TestNode, assert_error, engine, settings_with};
use crate::server::state::Security;
use crate::server::uploads::UploadSettings;
use crate::server::{Node, NodeSettings};
use crate::store::StoreConfig;

/// The attack's compile bomb: a component carrying one core module of
/// `functions` functions of `locals` locals each (2,000 × 50,000 is 165 KB
/// that Cranelift takes minutes over).
pub fn bomb(functions: u32, locals: u32) -> Vec<u8> {
    use wasm_encoder::{CodeSection, Component, Function, FunctionSection, Module, ModuleSection, TypeSection};
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], []);
    module.section(&types);
    let mut declared = FunctionSection::new();
    let mut code = CodeSection::new();
    for _ in 0..functions {
        declared.function(0);
        let mut body = Function::new([(locals, wasm_encoder::ValType::I64)]);
        body.instructions().end();
        code.function(&body);
    }
    module.section(&declared).section(&code);
    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    component.finish()
}

/// A component no other upload has: the hash built-in with a custom
/// section naming `nonce`.
pub fn distinct(nonce: &str) -> Vec<u8> {
    let mut bytes = crate::strategy::builtin::component_bytes("hash").unwrap().to_vec();
    let section = wasm_encoder::CustomSection { name: "nonce".into(), data: nonce.as_bytes().into() };
    bytes.push(wasm_encoder::ComponentSection::id(&section));
    wasm_encoder::Encode::encode(&section, &mut bytes);
    bytes
}

fn node_with(uploads: UploadSettings) -> TestNode {
    let settings = NodeSettings {
        store: StoreConfig::Memory,
        cache_dir: None,
        driver: settings_with(&["cart"]),
        security: Security::default(),
        max_instances: 0,
        connections: Default::default(),
        cluster: Default::default(),
        uploads,
    };
    let node = Node::with_engine(settings, engine()).expect("start a node");
    let router = node.router();
    TestNode { node: Some(node), router }
}

async fn upload(node: &TestNode, bytes: Vec<u8>) -> (StatusCode, Value) {
    let request = Request::post("/v1/strategies").header("content-type", "application/wasm").body(Body::from(bytes));
    node.send(request.unwrap()).await
}

async fn uploaded(node: &TestNode, bytes: Vec<u8>) -> String {
    let (status, stored) = upload(node, bytes).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    stored["digest"].as_str().unwrap().to_owned()
}

async fn stored(node: &TestNode) -> Vec<String> {
    let (_, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    let all = listed["strategies"].as_array().unwrap().iter();
    all.filter_map(|s| s["digest"].as_str().filter(|d| d.starts_with("sha256:")).map(str::to_owned)).collect()
}

#[tokio::test]
async fn a_compile_bomb_is_refused_before_anything_compiles() {
    let node = TestNode::start();
    let bomb = bomb(2_000, 50_000);
    assert!(bomb.len() < 200_000, "the bomb is small: {} bytes", bomb.len());
    let started = std::time::Instant::now();
    let answer = upload(&node, bomb).await;
    assert_eq!(assert_error("the bomb", &answer, StatusCode::UNPROCESSABLE_ENTITY), "over-compile-budget");
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("max-function-locals") && message.contains("50000"), "{message}");
    // Measured, not compiled: Cranelift takes minutes over it.
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    assert!(stored(&node).await.is_empty());
    // Many functions of few locals each: the total is the limit.
    let answer = upload(&node, self::bomb(200, 15_000)).await;
    assert_eq!(assert_error("3,000,000 locals", &answer, StatusCode::UNPROCESSABLE_ENTITY), "over-compile-budget");
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("max-locals"), "{}", answer.1);
    node.stop().await;
}

#[tokio::test]
async fn the_quota_refuses_one_more_component_with_507_naming_it() {
    let node = node_with(UploadSettings { max_components: 2, ..UploadSettings::default() });
    let first = uploaded(&node, distinct("quota-1")).await;
    uploaded(&node, distinct("quota-2")).await;
    let answer = upload(&node, distinct("quota-3")).await;
    assert_eq!(assert_error("a third", &answer, StatusCode::INSUFFICIENT_STORAGE), "component-quota");
    let message = answer.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("max-components") && message.contains("stores 2 components"), "{message}");
    assert_eq!(stored(&node).await.len(), 2);
    // The same bytes again store nothing new, so they fit.
    assert_eq!(uploaded(&node, distinct("quota-1")).await, first);
    // Deleting one makes room.
    assert_eq!(node.request(Method::DELETE, &format!("/v1/strategies/{first}"), None).await.0, StatusCode::NO_CONTENT);
    uploaded(&node, distinct("quota-3")).await;
    node.stop().await;

    let size = distinct("bytes-1").len() as u64;
    let node = node_with(UploadSettings { max_bytes: size * 3 / 2, ..UploadSettings::default() });
    uploaded(&node, distinct("bytes-1")).await;
    let answer = upload(&node, distinct("bytes-2")).await;
    assert_eq!(assert_error("past the bytes", &answer, StatusCode::INSUFFICIENT_STORAGE), "component-quota");
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("max-component-bytes-mib"), "{}", answer.1);
    node.stop().await;
}

async fn activate(node: &TestNode, strategy: &str) {
    let body = json!({ "strategy": strategy, "force": true }).to_string();
    let (status, state) = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{state}");
}

#[tokio::test]
async fn only_components_nothing_uses_are_collected_and_rollback_still_works() {
    let node = node_with(UploadSettings { retention: Duration::ZERO, ..UploadSettings::default() });
    let previous = uploaded(&node, distinct("gc-previous")).await;
    let active = uploaded(&node, distinct("gc-active")).await;
    let shadow = uploaded(&node, distinct("gc-shadow")).await;
    let in_flight_bytes = distinct("gc-in-flight");
    let in_flight = uploaded(&node, in_flight_bytes.clone()).await;
    let unused = uploaded(&node, distinct("gc-unused")).await;
    activate(&node, &previous).await;
    activate(&node, &active).await;
    let body = json!({ "strategy": shadow }).to_string();
    assert_eq!(
        node.request(Method::PUT, "/v1/cluster/shards/cart/strategy/shadow", Some(&body)).await.0,
        StatusCode::OK
    );
    // A dry run or an activation under way holds its compiled component.
    let held = node.node().state.engine.compile(&in_flight_bytes).unwrap();

    let state = &node.node().state;
    assert_eq!(crate::server::uploads::collect(state).await.unwrap(), vec![unused.clone()]);
    assert!(state.store.blob(&unused).unwrap().is_none(), "the collected component's bytes remain");
    let mut kept = stored(&node).await;
    kept.sort();
    let mut expected = vec![previous.clone(), active.clone(), shadow.clone(), in_flight.clone()];
    expected.sort();
    assert_eq!(kept, expected);
    for digest in &expected {
        assert!(state.store.blob(digest).unwrap().is_some(), "{digest}'s bytes were deleted");
    }
    // What a rollback needs is there.
    let (status, rolled) = node.request(Method::POST, "/v1/cluster/shards/cart/strategy/rollback", None).await;
    assert_eq!(status, StatusCode::OK, "{rolled}");
    assert_eq!(rolled["active"]["digest"], previous.as_str(), "{rolled}");
    // Once released, the in-flight one goes too.
    drop(held);
    assert_eq!(crate::server::uploads::collect(state).await.unwrap(), vec![in_flight]);
    node.stop().await;

    // Within the retention, nothing unused is collected.
    let node = node_with(UploadSettings { retention: Duration::from_secs(3600), ..UploadSettings::default() });
    uploaded(&node, distinct("gc-recent")).await;
    assert_eq!(crate::server::uploads::collect(&node.node().state).await.unwrap(), Vec::<String>::new());
    node.stop().await;
}

/// Each listed strategy's contract, by digest (or built-in name).
async fn listed_contracts(node: &TestNode) -> std::collections::BTreeMap<String, Value> {
    let (status, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let all = listed["strategies"].as_array().unwrap().iter();
    all.map(|s| (s["digest"].as_str().unwrap().to_owned(), s["contract"].clone())).collect()
}

#[tokio::test]
async fn the_listing_says_which_contract_each_strategy_speaks_also_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::on_disk(dir.path());
    let mut uploaded = Vec::new();
    for version in ["0.1", "0.2"] {
        let fixture = format!("{}/../contracts/strategy-{version}/zone.wasm", env!("CARGO_MANIFEST_DIR"));
        let (status, old) = upload(&node, std::fs::read(fixture).unwrap()).await;
        assert_eq!(status, StatusCode::CREATED, "{old}");
        assert_eq!(old["contract"], format!("shardalloc:strategy@{version}.0"));
        uploaded.push((old["digest"].as_str().unwrap().to_owned(), format!("shardalloc:strategy@{version}.0")));
    }
    let (status, new) = upload(&node, distinct("listed")).await;
    assert_eq!(status, StatusCode::CREATED, "{new}");
    assert_eq!(new["contract"], "shardalloc:strategy@0.3.0");
    uploaded.push((new["digest"].as_str().unwrap().to_owned(), "shardalloc:strategy@0.3.0".to_owned()));
    let expected = |listed: &std::collections::BTreeMap<String, Value>| {
        for (digest, contract) in &uploaded {
            assert_eq!(listed[digest], contract.as_str(), "{listed:?}");
        }
        for builtin in crate::strategy::builtin::names() {
            assert_eq!(listed[builtin], "shardalloc:strategy@0.3.0", "{listed:?}");
        }
    };
    expected(&listed_contracts(&node).await);
    node.stop().await;
    // A new node knows nothing of them but their bytes in the store.
    let node = TestNode::on_disk(dir.path());
    expected(&listed_contracts(&node).await);
    node.stop().await;
}
