//! Load through the real node: a region records load, the node smooths it
//! per shard, the REST API shows it (a shard's detail, the hottest shards
//! in pages), and the saved loads survive a SIGKILL and a restart.

use crate::node;

use std::time::Duration;

use reqwest::StatusCode;
use shardalloc_client::region::InMemoryTransport;
use shardalloc_proto::api::ShardLoads;

use node::{FAST, Journal, Node, read, registered, wait_for};

/// A generous bound: loads arrive every heartbeat (200 ms here).
const PATIENCE: Duration = Duration::from_secs(30);

async fn by_load(node: &Node, query: &str) -> (StatusCode, serde_json::Value) {
    let url = node.url(&format!("/v1/cluster/shards/cart/shards{query}"));
    read(node.http().get(url).send().await.unwrap()).await
}

/// A node with the FAST timings and this settings file.
async fn node_with(settings: &str) -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shardalloc.toml");
    std::fs::write(&file, settings).unwrap();
    let mut args = vec!["--config", file.to_str().unwrap()];
    args.extend_from_slice(FAST);
    (Node::start(&args).await, dir)
}

async fn hottest(node: &Node, query: &str) -> ShardLoads {
    let (status, body) = by_load(node, query).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value(body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regions_load_reaches_the_api_and_survives_a_restart() {
    let settings = "[coordinator]\nload-save-interval-ms = 200\n\n[types.cart]\nstrategy = \"least-shard\"\n\
                    load-half-life-ms = 1000\n";
    let (mut node, _dir) = node_with(settings).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let region = node.region("cart", "r1", &journal, &network, |_| {});
    registered(&region).await;
    for shard in ["hot", "warm", "cold"] {
        assert_eq!(tokio::time::timeout(PATIENCE, region.home_of(shard)).await.unwrap().unwrap(), "r1");
    }
    wait_for("the shards running on r1", PATIENCE, async || (region.running_shards().len() == 3).then_some(())).await;

    region.set_load("warm", 10.0);
    let loads = wait_for("hot, then warm, by load", PATIENCE, async || {
        region.record_load("hot", 100.0);
        let page = hottest(&node, "?sort=load").await;
        let names: Vec<&str> = page.shards.iter().map(|s| s.shard_id.as_str()).collect();
        (names == ["hot", "warm"] && page.shards[0].load > page.shards[1].load).then_some(page)
    })
    .await;
    assert_eq!(loads.shards[0].home.as_deref(), Some("r1"));
    assert_eq!(loads.next, None);
    let page = hottest(&node, "?limit=1").await;
    assert_eq!(page.shards.len(), 1, "sort=load is the default");
    let next = page.next.expect("a second page");
    let rest = hottest(&node, &format!("?limit=1&after={next}")).await;
    assert_eq!(rest.shards.iter().map(|s| s.shard_id.as_str()).collect::<Vec<_>>(), ["warm"]);
    let detail = node.admin().shard("cart", "warm").await.unwrap();
    assert!((detail.load - 10.0).abs() < 1e-9, "a gauge's average is the gauge: {detail:?}");

    // Bad queries name the problem.
    let (status, body) = by_load(&node, "?sort=size").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("sort must be load"), "{body}");
    let (status, body) = by_load(&node, "?after=7a7a").await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid-cursor")));

    // The region stops reporting; what the node saved is all there is after a SIGKILL.
    region.set_load("warm", 0.0);
    region.shutdown().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = hottest(&node, "").await;
    assert!(!before.shards.is_empty(), "the shards keep their load without a region");
    node.kill();
    node.restart().await;
    let after = hottest(&node, "").await;
    let names = |page: &ShardLoads| page.shards.iter().map(|s| s.shard_id.clone()).collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before), "the loads saved before the kill: {after:?}");
    assert!(after.shards.iter().all(|s| s.load > 0.0), "{after:?}");
}

/// A type's churn limits clip its strategy's rounds in the node, count in
/// the metrics, and show in a dry run of any candidate on the type.
#[tokio::test(flavor = "multi_thread")]
async fn churn_limits_clip_real_rounds_and_show_in_dry_runs_and_metrics() {
    let settings = "[types.cart]\nstrategy = \"least-shard\"\nconfig = { relative_limit = 1.0 }\n\
                    max-moves-per-round = 1\nmin-round-interval-ms = 5000\n";
    let (node, _dir) = node_with(settings).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    registered(&a).await;
    // Ten moves to balance, one every 5 s at most: the state a dry run sees
    // below is far from balanced.
    for i in 0..20 {
        a.home_of(&format!("s{i}")).await.unwrap();
    }
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&b).await;

    // The dry run of a candidate without limits of its own: the type's apply.
    let body = serde_json::json!({"strategy": "least-shard", "config": {"relative_limit": 1.0}, "rounds": 1});
    let url = node.url("/v1/cluster/shards/cart/strategy/dry-run");
    let (status, answer) = read(node.http().post(url).json(&body).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let round = &answer["rounds"][0];
    let clipped = round["clipped"].as_array().unwrap();
    // One move, or none when a real round moved a shard less than 5 s before.
    assert!(round["moved"].as_array().unwrap().len() <= 1, "{answer}");
    let limits = ["max-moves-per-round", "min-round-interval"];
    assert!(!clipped.is_empty() && clipped.iter().all(|c| limits.contains(&c["limit"].as_str().unwrap())), "{answer}");

    // The real rounds move one shard at a time and say so.
    let metrics = wait_for("clipped moves in the metrics", PATIENCE, async || {
        let text = node.http().get(node.url("/metrics")).send().await.unwrap().text().await.unwrap();
        text.contains("shardalloc_moves_clipped_total{type=\"cart\",limit=\"max-moves-per-round\"}").then_some(text)
    })
    .await;
    assert!(metrics.contains("shardalloc_moves_clipped_total"), "{metrics}");
    a.shutdown().await;
    b.shutdown().await;
}

/// The built-in `load-balance` in a node: two hot shards on one region, a
/// second region joins, and one hot shard moves to it (not the oldest
/// shards, as counting would move), topped up to the mean with cold ones.
#[tokio::test(flavor = "multi_thread")]
async fn load_balance_moves_load_not_counts() {
    let (node, _dir) = node_with("[types.cart]\nstrategy = \"load-balance\"\n").await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    registered(&a).await;
    let shards = ["c1", "c2", "c3", "c4", "h1", "h2"];
    for shard in shards {
        assert_eq!(a.home_of(shard).await.unwrap(), "a");
    }
    for (shard, load) in [("h1", 100.0), ("h2", 100.0), ("c1", 1.0), ("c2", 1.0), ("c3", 1.0), ("c4", 1.0)] {
        a.set_load(shard, load);
    }
    wait_for("the loads on the node", PATIENCE, async || {
        let page = hottest(&node, "").await;
        (page.shards.len() == 6).then_some(())
    })
    .await;

    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&b).await;
    let admin = node.admin();
    wait_for("a hot shard on b", PATIENCE, async || {
        let state = admin.shard("cart", "h1").await.ok()?;
        (state.home.as_deref() == Some("b") && !state.moving).then_some(())
    })
    .await;
    // A few more rounds (500 ms apart). b is filled to the mean (102) with
    // cold shards, at most two; counting would have moved the three oldest
    // (c1, c2, c3) and left both hot shards on a.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for shard in ["c3", "c4", "h2"] {
        let state = admin.shard("cart", shard).await.unwrap();
        assert_eq!(state.home.as_deref(), Some("a"), "{shard} moved: {state:?}");
    }
    a.shutdown().await;
    b.shutdown().await;
}
