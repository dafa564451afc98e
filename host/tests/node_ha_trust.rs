//! An HA cluster that trusts only what holds: real `shardalloc serve`
//! processes on a real etcd whose keys were tampered with. A leader key
//! without a live lease names no leader; a store that cannot load makes the
//! winner back off (not win and fail several times a second) and say why on
//! `/readyz`; a call forwarded to a paused leader fails within its bound.

use crate::etcd;
use crate::node;

use std::time::Duration;

use etcd::Etcd;
use node::Node;
use reqwest::{Method, StatusCode};
use shardalloc::store::etcd::DEFAULT_PREFIX;
use shardalloc::store::etcd::keys::Keys;
use shardalloc_etcd::{Client, ConnectOptions, ops};

/// Puts `value` under `key`, without a lease.
async fn put(etcd: &Etcd, key: String, value: &str) {
    let client = Client::connect(std::slice::from_ref(&etcd.url), ConnectOptions::default()).await.unwrap();
    client.txn(ops::txn(Vec::new(), vec![ops::put(key, value)], Vec::new())).await.unwrap();
}

async fn start(etcd: &Etcd, name: &str) -> Node {
    start_with(etcd, name, &[]).await
}

async fn start_with(etcd: &Etcd, name: &str, extra: &[&str]) -> Node {
    let port = node::free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = node::ha_args(&etcd.url, &format!("http://{listen}"), name);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Node::start_on(&listen, &args.iter().map(String::as_str).collect::<Vec<_>>()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_key_without_a_live_lease_names_no_leader() {
    let etcd = Etcd::start();
    // An attacker's (or a backup's) leader key: no lease, a foreign URL.
    let forged = r#"{"name":"attacker","url":"http://127.0.0.1:9"}"#;
    put(&etcd, Keys::new(DEFAULT_PREFIX).leader(), forged).await;
    let nodes = [start(&etcd, "n0").await, start(&etcd, "n1").await];
    let leader = node::wait_for("both nodes to name one of them leader", Duration::from_secs(60), async || {
        let mut names = Vec::new();
        for node in &nodes {
            let (status, answer) = node.request(Method::GET, "/v1/cluster/leader", None).await;
            names.push((status == StatusCode::OK).then(|| answer["leader"]["name"].as_str().map(str::to_owned))??);
        }
        (names[0] == names[1]).then(|| names.remove(0))
    })
    .await;
    assert!(leader == "n0" || leader == "n1", "the forged leader key was believed: {leader}");
}

/// The `won` count of the node's leadership changes.
async fn wins(node: &Node) -> u64 {
    let metrics = node.http().get(node.url("/metrics")).send().await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find(|l| l.starts_with("shardalloc_leadership_changes_total{change=\"won\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_load_makes_the_winner_back_off_and_readyz_say_why() {
    let etcd = Etcd::start();
    // The revision says 5; the log holds nothing: every load fails.
    put(&etcd, Keys::new(DEFAULT_PREFIX).revision(), "5").await;
    let node = start(&etcd, "n0").await;
    let why = node::wait_for("/readyz to say why no leader is known", Duration::from_secs(60), async || {
        let (status, answer) = node.request(Method::GET, "/readyz", None).await;
        let message = answer["error"]["message"].as_str()?.to_owned();
        (status == StatusCode::SERVICE_UNAVAILABLE && message.contains("cannot start")).then_some(message)
    })
    .await;
    assert!(why.contains("log entry is incomplete"), "{why}");
    // Backing off: 0.5 s, 1 s, 2 s, 4 s… — a handful of wins in 8 s, not
    // one every poll (80).
    let before = wins(&node).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let during = wins(&node).await - before;
    assert!(during <= 6, "{during} failed wins in 8 s: no back-off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_forwarded_to_a_paused_leader_fails_within_its_bound_with_retry_after() {
    let etcd = Etcd::start();
    let extra = ["--forward-timeout-ms", "1500"];
    let nodes = [start_with(&etcd, "n0", &extra).await, start_with(&etcd, "n1", &extra).await];
    let leader = node::wait_for("a leader both nodes name", Duration::from_secs(60), async || {
        let mut names = Vec::new();
        for node in &nodes {
            let (_, answer) = node.request(Method::GET, "/v1/cluster/leader", None).await;
            names.push(answer["leader"]["name"].as_str()?.to_owned());
        }
        (names[0] == names[1]).then(|| if names[0] == "n0" { 0 } else { 1 })
    })
    .await;
    let follower = &nodes[1 - leader];
    nodes[leader].signal("STOP");
    let started = std::time::Instant::now();
    let answer = follower.http().get(follower.url("/v1/cluster/shards/cart")).send().await.unwrap();
    let took = started.elapsed();
    nodes[leader].signal("CONT");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()).as_deref(), Some("1"));
    let (_, body) = node::read(answer).await;
    assert_eq!(body["error"]["code"], "leader-unavailable", "{body}");
    // 1.5 s asked; a hang was 30 s or more.
    assert!(took < Duration::from_secs(15), "the forwarded call took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_claim_not_signed_with_the_cluster_secret_gets_no_call_and_no_token() {
    let etcd = Etcd::start();
    // The attacker's "leader": a listener that records whether anyone connects.
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let trap_url = format!("http://{}", trap.local_addr().unwrap());
    let caught = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = caught.clone();
    tokio::spawn(async move {
        while trap.accept().await.is_ok() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    // A leader key under a live lease (60 s), with a claim that carries a
    // proof made without the cluster's secret.
    let client = Client::connect(std::slice::from_ref(&etcd.url), ConnectOptions::default()).await.unwrap();
    let lease = client.lease_grant(60).await.unwrap().id;
    let forged = format!(r#"{{"name":"attacker","url":"{trap_url}","proof":"{}"}}"#, "ab".repeat(32));
    let key = Keys::new(DEFAULT_PREFIX).leader();
    client.txn(ops::txn(Vec::new(), vec![ops::put_with_lease(key, forged, lease)], Vec::new())).await.unwrap();

    let node = start(&etcd, "n0").await;
    let why = node::wait_for("/readyz to say the claim is not the cluster's", Duration::from_secs(60), async || {
        let (status, answer) = node.request(Method::GET, "/readyz", None).await;
        let message = answer["error"]["message"].as_str()?.to_owned();
        (status == StatusCode::SERVICE_UNAVAILABLE && message.contains("not signed with this cluster's secret"))
            .then_some(message)
    })
    .await;
    assert!(why.contains("attacker"), "{why}");
    // An admin call with the operator's token is not forwarded there.
    let answer =
        node.http().get(node.url("/v1/cluster/shards/cart")).bearer_auth("the operator's token").send().await.unwrap();
    let (status, body) = node::read(answer).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "no-leader", "{body}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!caught.load(std::sync::atomic::Ordering::SeqCst), "the node connected to the forged leader");
}
