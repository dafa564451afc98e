//! Per-shard epochs against the real node: every move raises the shard's
//! epoch, its new home starts it at that epoch and the REST API names the
//! same; a restart keeps the epochs and the next move goes on from them; the
//! client's fenced example (`client/examples/fenced.rs`, run here as it is)
//! refuses the stale region's write. (Across an etcd leader's kill:
//! `a_killed_leader_is_replaced_and_nothing_acknowledged_is_lost` in
//! node_ha.rs.)

use crate::node;

#[path = "../../client/examples/fenced.rs"]
mod fenced;

use std::time::Duration;

use node::{Journal, Node, registered, wait_for};
use shardalloc_client::region::{InMemoryTransport, RegionHandle};

/// Waits until `region` runs `shard` (it asks the home, as a sender does)
/// and answers the epoch its application started it at.
async fn started_on(region: &RegionHandle<node::Msg, String>, journal: &Journal, shard: &str) -> u64 {
    wait_for(&format!("{shard} to start on {}", region.address()), Duration::from_secs(60), async || {
        let home = tokio::time::timeout(Duration::from_secs(2), region.home_of(shard)).await.ok()?.ok()?;
        let (on, epoch) = journal.starts(shard).last().cloned()?;
        (home == region.address() && on == home && region.epoch_of(shard) == Some(epoch)).then_some(epoch)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_move_raises_the_epoch_its_home_starts_at_and_a_restart_keeps_them() {
    let mut node = Node::start(&node::fast_args(&[])).await;
    let journal = Journal::default();
    let network = InMemoryTransport::new();
    let a = node.region("cart", "a", &journal, &network, |_| {});
    registered(&a).await;
    let b = node.region("cart", "b", &journal, &network, |_| {});
    registered(&b).await;
    let admin = node.admin();

    admin.set_placement("cart", "s", "a").await.unwrap();
    let first = started_on(&a, &journal, "s").await;
    assert_eq!(admin.shard("cart", "s").await.unwrap().epoch, Some(first));
    admin.set_placement("cart", "s", "b").await.unwrap();
    let second = started_on(&b, &journal, "s").await;
    assert!(second > first, "a move kept or lowered the epoch: {first} then {second}");
    assert_eq!(admin.shard("cart", "s").await.unwrap().epoch, Some(second));
    // Another shard's home takes the type's next epoch: epochs are never
    // given twice within a type.
    admin.set_placement("cart", "t", "a").await.unwrap();
    let other = started_on(&a, &journal, "t").await;
    assert!(other > second, "{other} after {second}");

    // A restart keeps every epoch and the type's highest.
    assert!(node.terminate().await.success());
    node.restart().await;
    let admin = node.admin();
    wait_for("the restarted node to answer", Duration::from_secs(60), async || admin.types().await.ok()).await;
    assert_eq!(admin.shard("cart", "s").await.unwrap().epoch, Some(second), "the restart lost the epoch");
    assert_eq!(admin.shard("cart", "t").await.unwrap().epoch, Some(other), "the restart lost the epoch");
    registered(&a).await;
    registered(&b).await;
    admin.set_placement("cart", "s", "a").await.unwrap();
    let third = started_on(&a, &journal, "s").await;
    assert!(third > other, "the epoch after the restart ({third}) is not above every earlier one ({other})");
    assert_eq!(admin.shard("cart", "s").await.unwrap().epoch, Some(third));
    assert!(journal.overlaps().is_empty(), "{:?}", journal.overlaps());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_example_refuses_the_stale_regions_write() {
    let node = Node::start(&node::fast_args(&[])).await;
    let outcome = fenced::run(&node.base, "cart", &|config| {
        let short = node::region_config(&config.node, &config.entity_type, &config.address);
        config.reconnect_min = short.reconnect_min;
        config.reconnect_max = short.reconnect_max;
        config.home_retry = short.home_retry;
    })
    .await
    .unwrap_or_else(|error| panic!("the example failed: {error}\n{}", node.log_tail()));
    assert!(outcome.second > outcome.first, "{outcome:?}");
    assert_eq!(outcome.refused, fenced::Stale { attempted: outcome.first, stored: outcome.second });
    assert_eq!(outcome.row, fenced::Row { balance: 150, epoch: outcome.second });
}
