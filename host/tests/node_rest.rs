//! The admin REST API of the real node (`shardalloc serve` as a child
//! process): a placement survives a restart, the loopback guard, and the
//! snapshot as `shardalloc strategy eval` reads it. Every endpoint's shapes
//! and bad inputs are tested in-process (`host/src/server/tests/`).

use crate::node;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use shardalloc_client::region::InMemoryTransport;

use node::{Journal, Node, assert_error, registered, run_binary};

const PLACEMENTS: &str = "/v1/cluster/shards/cart/placements";

#[tokio::test(flavor = "multi_thread")]
async fn a_placement_is_set_listed_persisted_and_removed() {
    let mut node = Node::start(&["--type", "cart"]).await;
    let answer = node.request(Method::POST, PLACEMENTS, Some(r#"{"shardId":42,"target":"b"}"#)).await;
    assert_eq!(answer, (StatusCode::OK, json!({"written":[{"shardId":"42","target":"b"}],"total":1})));
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}],"next":null}))
    );
    let (status, shard) = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_eq!(status, StatusCode::OK, "{shard}");
    assert_eq!(shard["placement"], "b", "{shard}");

    // Durable: a restart on the same data directory still has it.
    let exit = node.terminate().await;
    assert!(exit.success(), "SIGTERM: the node exited with {exit}");
    node.restart().await;
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[{"shardId":"42","target":"b"}],"next":null})),
        "the placement did not survive a restart"
    );

    let (status, body) = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_eq!((status, &body), (StatusCode::NO_CONTENT, &Value::Null));
    let again = node.request(Method::DELETE, &format!("{PLACEMENTS}/42"), None).await;
    assert_error("DELETE of a removed placement", &again, StatusCode::NOT_FOUND);
    assert_eq!(
        node.request(Method::GET, PLACEMENTS, None).await,
        (StatusCode::OK, json!({"placements":[],"next":null}))
    );
    // The admin client reads the same.
    assert!(!node.admin().remove_placement("cart", "42").await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn listening_beyond_loopback_without_an_admin_token_is_refused() {
    let data = node::scratch();
    let data = data.path().to_str().unwrap().to_owned();
    let (code, stdout, stderr) =
        run_binary(&["serve", "--listen", "0.0.0.0:0", "--data", &data], Duration::from_secs(60)).await;
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}; stdout {stdout}; stderr {stderr}");
    assert!(!stdout.contains("listening"), "it listened: {stdout}");
    assert!(
        stderr.contains("without an admin token") && stderr.contains("0.0.0.0"),
        "the refusal does not say why: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_snapshot_is_what_strategy_eval_reads() {
    let node = Node::start(&["--type", "cart"]).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    for shard in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        tokio::time::timeout(Duration::from_secs(30), a.home_of(shard)).await.unwrap().unwrap();
    }
    let admin = node.admin();
    admin.set_placement("cart", "p", "b").await.unwrap();
    let (status, snapshot) = node.request(Method::GET, "/v1/cluster/shards/cart/snapshot", None).await;
    assert_eq!(status, StatusCode::OK, "{snapshot}");
    let mut addresses: Vec<&str> =
        snapshot["regions"].as_array().unwrap().iter().map(|r| r["address"].as_str().unwrap()).collect();
    addresses.sort();
    assert_eq!(addresses, ["a", "b"], "{snapshot}");
    let shards: usize =
        snapshot["regions"].as_array().unwrap().iter().map(|r| r["shards"].as_array().unwrap().len()).sum();
    assert_eq!(shards, 6, "{snapshot}");
    assert_eq!(snapshot["placements"], json!({"p":"b"}), "{snapshot}");

    let dir = node::scratch();
    let file = node::path_in(&dir, "snapshot.json");
    std::fs::write(&file, serde_json::to_vec(&snapshot).unwrap()).unwrap();
    let file = file.to_str().unwrap();
    let eval = async |args: &[&str]| {
        let mut all = vec!["strategy", "eval", "--snapshot", file];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = run_binary(&all, Duration::from_secs(120)).await;
        assert_eq!(code, Some(0), "strategy eval {args:?} failed: {stderr}");
        serde_json::from_str::<Value>(stdout.trim()).unwrap_or_else(|e| panic!("{stdout}: {e}"))
    };
    assert_eq!(eval(&["allocate", "--shard", "p"]).await, json!({"region":"b"}), "the placement is not honoured");
    let fresh = eval(&["allocate", "--shard", "fresh", "--requester", "a"]).await;
    assert!(["a", "b"].contains(&fresh["region"].as_str().unwrap_or_default()), "{fresh}");
    let rebalance = eval(&["rebalance"]).await;
    assert!(rebalance["shards"].is_array(), "{rebalance}");
    let hashed = eval(&["--strategy", "hash", "allocate", "--shard", "s1"]).await;
    assert!(hashed["region"].is_string(), "{hashed}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unready_node_says_so_once_in_its_log_not_at_every_probe() {
    let node = Node::start(&["--type", "cart", "--min-regions", "2"]).await;
    for _ in 0..20 {
        let answer = node.request(Method::GET, "/readyz", None).await;
        assert_eq!(assert_error("/readyz", &answer, StatusCode::SERVICE_UNAVAILABLE), "not-ready");
    }
    let log = node.log_tail();
    let lines = |needle: &str| log.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(lines("not ready"), 1, "{log}");
    assert_eq!(lines("ERROR"), 0, "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn shardalloc_events_tails_the_stream_in_a_terminal() {
    use std::io::BufRead;
    let node = Node::start(&["--type", "cart", "--admin-token", "t0ken"]).await;
    for json in [true, false] {
        let mut command = node::command();
        command.args(["events", "--node", &node.base, "--type", "cart"]).env("SHARDALLOC_ADMIN_TOKEN", "t0ken");
        if json {
            command.arg("--json");
        }
        let mut child = command.stdout(std::process::Stdio::piped()).spawn().expect("start shardalloc events");
        let stdout = child.stdout.take().unwrap();
        let (sent, lines) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sent.send(line);
            }
        });
        // Placements until the command shows one (it may connect after the first).
        let admin = node.admin_with("t0ken");
        let mut line = None;
        for attempt in 0..300 {
            admin.set_placement("cart", &format!("s{attempt}"), "r9").await.unwrap();
            if let Ok(got) = lines.recv_timeout(Duration::from_millis(200)) {
                line = Some(got);
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let line = line.expect("shardalloc events printed an event within a minute");
        if json {
            let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(
                (&event["kind"], &event["type"], &event["target"]),
                (&json!("placement-set"), &json!("cart"), &json!("r9"))
            );
        } else {
            assert!(line.contains(" cart placement-set shard s") && line.ends_with("-> r9"), "{line}");
        }
    }
}

/// Runs the CLI against `node`; standard output and error, after it exited 0.
async fn cli(node: &Node, args: &[&str]) -> (String, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--node", node.base.as_str()]);
    let (code, out, err) = run_binary(&all, Duration::from_secs(120)).await;
    assert_eq!(code, Some(0), "shardalloc {all:?}: {err}");
    (out, err)
}

#[tokio::test(flavor = "multi_thread")]
async fn shard_attributes_are_written_by_the_cli_and_survive_a_kill() {
    let mut node = Node::start(&["--type", "cart"]).await;
    let (out, _) = cli(&node, &["attributes", "set", "cart", "42", "tenant=acme", "tier=gold"]).await;
    assert_eq!(out, "attributes of 42 written: {\"tenant\": \"acme\", \"tier\": \"gold\"}\n");
    // 25,000 shards from a file: three requests, with progress.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.json");
    let many: serde_json::Map<String, Value> =
        (0..25_000).map(|i| (format!("t-{i}"), json!({"tenant": format!("tenant-{}", i % 250)}))).collect();
    std::fs::write(&file, Value::Object(many).to_string()).unwrap();
    let (out, err) = cli(&node, &["attributes", "write", "cart", file.to_str().unwrap()]).await;
    assert_eq!(out, "25000 shard(s) written; 25000 changed\n");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        ["10000 of 25000 shards written", "20000 of 25000 shards written", "25000 of 25000 shards written"]
    );

    // Durable through a SIGKILL: every write was answered after its commit.
    node.kill();
    node.restart().await;
    let (out, _) = cli(&node, &["attributes", "show", "cart", "42"]).await;
    assert_eq!(out, "tenant=acme\ntier=gold\n");
    let state = node.admin().shard("cart", "t-24999").await.unwrap();
    assert_eq!(state.attributes.get("tenant"), Some("tenant-249"), "{state:?}");
    let (out, _) = cli(&node, &["attributes", "set", "cart", "42"]).await;
    assert_eq!(out, "attributes of 42 written: {}\n");
    let gone = node.request(Method::GET, "/v1/cluster/shards/cart/shards/42", None).await;
    assert_error("a shard whose attributes were cleared", &gone, StatusCode::NOT_FOUND);
    // A bad file is refused before anything is sent.
    std::fs::write(&file, r#"{"t-1": {"tenant": "changed"}, "t-2": {"bad key": "x"}}"#).unwrap();
    let (code, _, err) = run_binary(
        &["attributes", "write", "cart", file.to_str().unwrap(), "--node", node.base.as_str()],
        Duration::from_secs(60),
    )
    .await;
    assert_ne!(code, Some(0));
    assert!(err.contains("shard t-2") && err.contains("an attribute key"), "{err}");
    assert_eq!(node.admin().shard("cart", "t-1").await.unwrap().attributes.get("tenant"), Some("tenant-1"));
}
