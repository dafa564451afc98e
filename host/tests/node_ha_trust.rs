//! An HA cluster that trusts only what holds: real `shardalloc serve`
//! processes on a real etcd whose keys were tampered with. A leader key
//! without a live lease names no leader; a store that cannot load makes the
//! winner back off (not win and fail several times a second) and say why on
//! `/readyz`.

mod etcd;
mod node;

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
    let port = node::free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = node::ha_args(&etcd.url, &format!("http://{listen}"), name);
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
