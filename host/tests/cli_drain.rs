//! `shardalloc drain REGION [--wait SECONDS]` against the real node: with
//! another region to take its shards, `--wait` returns once the drained
//! region holds none, its progress shown as a bar and the drain's state
//! (`GET …/drain`) reporting nothing left; with none, it fails within its
//! bound naming what the region still holds; an unknown region fails at once.

use crate::node;

use std::process::Output;
use std::time::{Duration, Instant};

use shardalloc_client::region::{InMemoryTransport, RegionHandle};

use node::{Journal, Msg, Node, fast_args, registered};

/// Runs `shardalloc drain` against `node` with `args` (on a blocking thread).
async fn drain(node: &Node, args: &[&str]) -> Output {
    let mut command = node::command();
    command.args(["drain", "--node", &node.url("")]).args(args);
    tokio::task::spawn_blocking(move || command.output().expect("run shardalloc drain")).await.unwrap()
}

/// Asks `region` for the home of `count` shards, so that some live on it.
async fn home_shards(regions: &[&RegionHandle<Msg, String>], count: usize) {
    for i in 0..count {
        for region in regions {
            tokio::time::timeout(Duration::from_secs(30), region.home_of(&format!("s{i}")))
                .await
                .expect("a home within 30 s")
                .expect("a home");
        }
    }
}

async fn shards_of(node: &Node, address: &str) -> Option<usize> {
    let regions = node.admin().regions().await.unwrap();
    regions.regions.iter().find(|r| r.address == address).map(|r| r.shards)
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_wait_returns_once_the_region_holds_no_shard() {
    let node = Node::start(&fast_args(&[])).await;
    let (journal, network) = (Journal::default(), InMemoryTransport::new());
    let a = node.region("cart", "a", &journal, &network, |_| {});
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&a).await;
    registered(&b).await;
    home_shards(&[&a, &b], 12).await;
    let held = shards_of(&node, "a").await.unwrap();
    assert!(held > 0, "a holds no shard to drain");

    let started = Instant::now();
    let output = drain(&node, &["a", "--wait", "120"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stdout}{stderr}", output.status);
    assert!(stdout.contains("region a drained: it holds no shard"), "{stdout}");
    // The progress, a line at each change (stderr is not a terminal here),
    // ends with every shard handed off.
    let last = stderr.lines().last().unwrap_or_default();
    let (bar, rest) = last.split_once("] ").unwrap_or_default();
    let (done, total) = rest.split_once(" shards").unwrap_or_default().0.split_once('/').unwrap_or_default();
    assert!(bar == format!("[{}", "#".repeat(30)) && done == total && total != "0", "held {held}: {stderr}");
    // Asked before the undrain below: once undrained, a rebalance may bring
    // shards back to it at once.
    assert_eq!(shards_of(&node, "a").await, Some(0), "drain --wait returned while a still held shards");
    // The drain's state: nothing left, and when it began.
    let state = node.admin().drain_state("a").await.unwrap();
    assert!(state.draining && state.shards_left == 0 && state.hand_offs_in_flight == 0, "{state:?}");
    assert!(state.started_at_ms.is_some(), "{state:?}");
    // Cancelled (undrained): no drain any more.
    node.admin().undrain("a").await.unwrap();
    let state = node.admin().drain_state("a").await.unwrap();
    assert!(!state.draining && state.started_at_ms.is_none(), "{state:?}");
    eprintln!("drain --wait returned after {:?}", started.elapsed());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_wait_fails_within_its_bound_when_no_region_can_take_the_shards() {
    let node = Node::start(&fast_args(&[])).await;
    let (journal, network) = (Journal::default(), InMemoryTransport::new());
    let a = node.region("cart", "a", &journal, &network, |_| {});
    registered(&a).await;
    home_shards(&[&a], 3).await;

    let started = Instant::now();
    let output = drain(&node, &["a", "--wait", "1"]).await;
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "drain --wait 1 succeeded with no region to take a's shards: {stderr}");
    assert!(stderr.contains("region a still holds 3 shard(s) after 1 s"), "{stderr}");
    // 1 s of waiting, 10× over for a busy machine.
    assert!(elapsed < Duration::from_secs(20), "drain --wait 1 took {elapsed:?}");

    let output = drain(&node, &["nobody", "--wait", "1"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("unknown-region"), "{stderr}");
    a.shutdown().await;
}
