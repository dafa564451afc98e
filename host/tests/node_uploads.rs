//! The compile budget on the real node: an upload compiles in a child
//! process of the node (`shardalloc internal-compile`), which is killed
//! when it runs past its time or when its client goes away, leaving no
//! process behind. (The budget measured before compiling, the quota and
//! the collection are tested in-process: `host/src/server/tests/uploads.rs`.)

use crate::node;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use node::{Node, assert_error, read, wait_for};

/// The attack's compile bomb: one core module of `functions` functions of
/// `locals` locals each, in a component.
fn bomb(functions: u32, locals: u32) -> Vec<u8> {
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

/// The node's child processes running the compiler (zombies included).
fn compilers(node: &Node) -> Vec<u32> {
    let parent = node.pid();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid …`: comm may hold spaces, so after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// A node whose budget lets the bomb compile (it takes minutes), with
/// `timeout_ms` to compile.
async fn lenient_node(timeout_ms: u64) -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("shardalloc.toml");
    let settings =
        format!("[uploads]\nmax-locals = 1000000000\nmax-function-locals = 50000\ncompile-timeout-ms = {timeout_ms}\n");
    std::fs::write(&config, settings).unwrap();
    (Node::start(&["--config", config.to_str().unwrap(), "--type", "cart"]).await, dir)
}

async fn upload(node: &Node, bytes: Vec<u8>) -> (StatusCode, serde_json::Value) {
    let request = node.http().post(node.url("/v1/strategies")).header("content-type", "application/wasm");
    read(request.body(bytes).send().await.expect("the upload is answered")).await
}

#[tokio::test]
async fn an_upload_compiles_in_a_child_process_and_activates() {
    let node = Node::start(&["--type", "cart"]).await;
    // The hash built-in with a custom section: bytes no engine holds or caches.
    let mut bytes = shardalloc::strategy::builtin::component_bytes("hash").unwrap().to_vec();
    let section = wasm_encoder::CustomSection { name: "nonce".into(), data: b"child".as_slice().into() };
    bytes.push(wasm_encoder::ComponentSection::id(&section));
    wasm_encoder::Encode::encode(&section, &mut bytes);
    let (status, stored) = upload(&node, bytes).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    assert!(compilers(&node).is_empty(), "a compiler process is left: {:?}", compilers(&node));
    let body = json!({ "strategy": stored["digest"] }).to_string();
    let (status, state) = node.request(Method::PUT, "/v1/cluster/shards/cart/strategy", Some(&body)).await;
    assert_eq!(status, StatusCode::OK, "{state}\n{}", node.log_tail());
    assert_eq!(state["active"]["digest"], stored["digest"], "{state}");
    // `strategies ls` names each one's contract, beside where it is active.
    let (code, out, err) = node::run_binary(&["strategies", "ls", "--node", &node.base], Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "{err}");
    let contract = stored["contract"].as_str().expect("the upload names its contract");
    let line = out.lines().find(|l| l.starts_with(stored["digest"].as_str().unwrap())).expect("the upload listed");
    assert_eq!(line.split('\t').skip(2).collect::<Vec<_>>(), [contract, "cart"], "{out}");
}

#[tokio::test]
async fn a_compile_past_its_time_is_killed_and_leaves_no_process() {
    let (node, _dir) = lenient_node(2_000).await;
    let started = std::time::Instant::now();
    let answer = upload(&node, bomb(2_000, 50_000)).await;
    assert_eq!(
        assert_error("the bomb", &answer, StatusCode::UNPROCESSABLE_ENTITY),
        "compile-timeout",
        "{}",
        node.log_tail()
    );
    assert!(answer.1["error"]["message"].as_str().unwrap().contains("2000 ms"), "{}", answer.1);
    assert!(started.elapsed() < Duration::from_secs(30), "answered after {:?}", started.elapsed());
    // Killed and reaped before the answer.
    assert!(compilers(&node).is_empty(), "a compiler process is left: {:?}", compilers(&node));
    let (status, listed) = node.request(Method::GET, "/v1/strategies", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        listed["strategies"].as_array().unwrap().iter().all(|s| !s["digest"].as_str().unwrap().starts_with("sha256:"))
    );
}

#[tokio::test]
async fn a_compile_whose_client_left_is_killed() {
    let (node, _dir) = lenient_node(600_000).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap();
    let request = client.post(node.url("/v1/strategies")).header("content-type", "application/wasm");
    let leaving = tokio::spawn(request.body(bomb(2_000, 50_000)).send());
    let compiling = wait_for("the compiler process", Duration::from_secs(30), async || {
        Some(compilers(&node)).filter(|c| !c.is_empty())
    })
    .await;
    assert_eq!(compiling.len(), 1, "{compiling:?}");
    assert!(leaving.await.unwrap().is_err(), "the client gave up after 2 s");
    wait_for("the compiler process to be killed", Duration::from_secs(30), async || {
        Some(()).filter(|()| compilers(&node).is_empty())
    })
    .await;
    assert_eq!(node.request(Method::GET, "/healthz", None).await.0, StatusCode::OK);
}
