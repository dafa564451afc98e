//! How fast an operator's placement reaches the cluster, on loopback: a node
//! in process and 100 simulated regions (live sessions that heartbeat and
//! follow the hand-off protocol).
//!
//! 1. From sending `POST …/placements` (its 200 included) to every one of
//!    the 100 regions holding the `PlacementChanged`: p50 and p99 over
//!    1,000 placements of shards without a home.
//! 2. From sending the placement of a homed shard, then `POST …/rebalance`
//!    with `immediate`, to the shard running on its target: every region
//!    acknowledged `BeginHandOff`, the owner stopped it, and the target's
//!    `GetShardHome` (sent after its acknowledgement, as a region buffering
//!    the shard's messages does) is answered with itself.
//!
//! `cargo bench -p shardalloc --bench propagation`; in smoke mode
//! (`common`), 4 regions, 10 placements and 4 hand-offs.

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::live::{DEADLINE, LiveRegion};
use criterion::{Criterion, criterion_group, criterion_main};
use shardalloc::server::Node;
use shardalloc::server::driver::DriverSettings;
use shardalloc_client::admin::AdminClient;
use shardalloc_proto::protocol::{NodeMessage, RegionMessage};
use tokio::sync::mpsc;

/// Simulated regions.
const REGIONS: usize = 100;
/// Placements of shards without a home.
const PLACEMENTS: usize = 1_000;
/// Hand-offs measured end to end.
const HAND_OFFS: usize = 100;

/// What a region reports to the benchmark.
enum Seen {
    /// The region holds the placement of `shard`.
    Placement { shard: String },
    /// The shard runs on its target.
    Running { shard: String },
}

/// Plays one region: acknowledges every `BeginHandOff`, stops what it is
/// told to hand off, asks for the home of a shard placed on it once it has
/// acknowledged its hand-off, and reports what it sees.
async fn play(mut region: LiveRegion, seen: mpsc::UnboundedSender<Seen>) {
    let me = region.address().to_owned();
    let mut placed_here: HashSet<String> = HashSet::new();
    loop {
        match region.next().await {
            NodeMessage::PlacementChanged { shard, target } => {
                if target.as_deref() == Some(me.as_str()) {
                    placed_here.insert(shard.clone());
                }
                let _ = seen.send(Seen::Placement { shard });
            }
            NodeMessage::BeginHandOff { shard } => {
                region.send(RegionMessage::BeginHandOffAck { shard: shard.clone() });
                if placed_here.contains(&shard) {
                    region.send(RegionMessage::GetShardHome { shard });
                }
            }
            NodeMessage::HandOff { shard } => region.send(RegionMessage::ShardStopped { shard }),
            NodeMessage::ShardHome { shard, home } | NodeMessage::ShardHomeEpoch { shard, home, .. } => {
                if home == me && placed_here.remove(&shard) {
                    let _ = seen.send(Seen::Running { shard });
                }
            }
            NodeMessage::RegionRemoved { .. } => {}
            other => panic!("{me}: unexpected {other:?}"),
        }
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn report(what: &str, mut took: Vec<Duration>) {
    took.sort();
    println!(
        "{what}: {} samples, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        took.len(),
        quantile(&took, 0.5).as_secs_f64() * 1e3,
        quantile(&took, 0.99).as_secs_f64() * 1e3,
        took.last().unwrap().as_secs_f64() * 1e3,
    );
}

/// Waits for `count` reports about `shard` of the kind `matches` picks.
async fn wait_for(seen: &mut mpsc::UnboundedReceiver<Seen>, count: usize, matches: impl Fn(&Seen) -> bool) {
    let mut got = 0;
    while got < count {
        let next = tokio::time::timeout(DEADLINE, seen.recv()).await;
        match next {
            Ok(Some(report)) if matches(&report) => got += 1,
            Ok(Some(_)) => {}
            Ok(None) => panic!("every region stopped"),
            Err(_) => panic!("only {got} of {count} regions reported within {DEADLINE:?}"),
        }
    }
}

fn propagation(_: &mut Criterion) {
    let regions_count = common::sized(REGIONS, 4);
    let placements = common::sized(PLACEMENTS, 10);
    let hand_offs = common::sized(HAND_OFFS, 4);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let node = Node::start(common::settings(data.path(), DriverSettings::default())).unwrap();
        tokio::spawn(node.serve(shardalloc::server::no_delay(listener), std::future::pending()));
        let base = format!("ws://{address}");
        let (report_to, mut seen) = mpsc::unbounded_channel();
        let mut regions = Vec::new();
        for i in 0..regions_count {
            regions.push(LiveRegion::connect(&base, &format!("r{i}")).await);
        }
        // Shards with homes for the hand-offs, spread by least-shard.
        let homed: Vec<String> = (0..hand_offs).map(|i| format!("homed-{i}")).collect();
        let homes: HashMap<String, String> = regions[0].homes(homed.clone()).await.into_iter().collect();
        for region in regions {
            tokio::spawn(play(region, report_to.clone()));
        }
        let admin = AdminClient::new(&format!("http://{address}"), None).unwrap();

        let mut took = Vec::with_capacity(placements);
        for i in 0..placements {
            let shard = format!("placed-{i}");
            let started = Instant::now();
            admin.set_placement(common::TYPE, &shard, &format!("r{}", i % regions_count)).await.unwrap();
            wait_for(&mut seen, regions_count, |s| matches!(s, Seen::Placement { shard: s } if *s == shard)).await;
            took.push(started.elapsed());
        }
        report(&format!("placement reaches all {regions_count} regions"), took);

        let mut took = Vec::with_capacity(hand_offs);
        for (i, shard) in homed.iter().enumerate() {
            let home = &homes[shard];
            let number: usize = home.trim_start_matches('r').parse().unwrap();
            let target = format!("r{}", (number + 1 + i % (regions_count - 1)) % regions_count);
            let started = Instant::now();
            admin.set_placement(common::TYPE, shard, &target).await.unwrap();
            admin.rebalance(common::TYPE, &[shard.as_str()], true).await.unwrap();
            wait_for(&mut seen, 1, |s| matches!(s, Seen::Running { shard: s } if s == shard)).await;
            took.push(started.elapsed());
        }
        report("placement + immediate rebalance to the shard running on its target", took);
    });
}

criterion_group!(benches, propagation);
criterion_main!(benches);
