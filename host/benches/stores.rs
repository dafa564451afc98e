//! The embedded store against etcd, side by side in one run: store commits
//! of one placement (the driver's smallest turn) one after another, and
//! `POST …/placements` from 8 concurrent admin clients through a node on
//! each store (on etcd, the node leads a cluster of one). etcd is a real
//! one-member etcd started on 127.0.0.1 with its data on tmpfs, as in the
//! tests. `docs/performance.md` reports the results.
//!
//! `cargo bench -p shardalloc --bench stores`; smoke mode (`common`) has
//! nothing to make smaller: criterion's test mode (`cargo test --benches`)
//! commits once and POSTs one batch on each store.

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;
#[path = "../tests/etcd/mod.rs"]
mod etcd;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TYPE, least_shard};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shardalloc::coordinator::{Change, PlacementEntry, Stamp};
use shardalloc::server::driver::DriverSettings;
use shardalloc::server::{ClusterSettings, Node};
use shardalloc::store::{EtcdConfig, EtcdStore, RedbStore, Store, StoreConfig, Turn, TypeRecord};
use shardalloc_client::admin::AdminClient;

/// Admin clients writing at once.
const CLIENTS: usize = 8;

fn one_placement(i: u64) -> Turn {
    let change = Change::PlacementWritten {
        shard: format!("s{i}"),
        entry: PlacementEntry { target: Some("r1".into()), stamp: Stamp::new(i, "bench"), written_at: i },
    };
    Turn { changes: [(TYPE.to_string(), vec![change])].into(), ..Turn::default() }
}

fn declared() -> Turn {
    let record = TypeRecord { strategy: least_shard(), config: String::new() };
    Turn { types: [(TYPE.to_string(), record)].into(), ..Turn::default() }
}

/// Commits per second of one store; returns its mean commit time.
fn commits(c: &mut Criterion, name: &str, store: &dyn Store) -> Duration {
    let mut revision = store.load().unwrap().revision;
    revision = store.commit(revision, &declared()).unwrap();
    let mut spent = Duration::ZERO;
    let mut count = 0u32;
    let mut group = c.benchmark_group("store_commit");
    group.sample_size(20).measurement_time(Duration::from_secs(5)).throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                revision = store.commit(revision, &one_placement(revision)).unwrap();
            }
            let elapsed = started.elapsed();
            spent += elapsed;
            count += iterations as u32;
            elapsed
        })
    });
    group.finish();
    spent / count.max(1)
}

/// POSTs per second through a node on `store`; returns the mean time of a
/// batch of [`CLIENTS`] concurrent POSTs.
fn posts(c: &mut Criterion, name: &str, store: StoreConfig, data: &std::path::Path) -> Duration {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let clients = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut settings = common::settings(data, DriverSettings::default());
        settings.store = store;
        settings.cluster = ClusterSettings {
            identity: shardalloc::server::leadership::NodeIdentity {
                name: "bench".into(),
                url: format!("http://{address}"),
            },
            secret: Some(
                shardalloc::server::leadership::claim::ClusterSecret::new(b"the benchmark's cluster secret").unwrap(),
            ),
            ..ClusterSettings::default()
        };
        let node = Node::start(settings).unwrap();
        tokio::spawn(node.serve(listener, std::future::pending()));
        let clients: Vec<AdminClient> =
            (0..CLIENTS).map(|_| AdminClient::new(&format!("http://{address}"), None).unwrap()).collect();
        // Warm, and wait for a node on etcd to lead.
        let started = Instant::now();
        for client in &clients {
            while client.set_placement(TYPE, "warm", "r0").await.is_err() {
                assert!(started.elapsed() < Duration::from_secs(60), "the node on {name} never answered");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        clients
    });
    let clients = Arc::new(clients);
    let mut spent = Duration::ZERO;
    let mut batches = 0u32;
    let mut written = 0u64;
    let mut group = c.benchmark_group("placement_posts");
    group.sample_size(10).measurement_time(Duration::from_secs(8)).throughput(Throughput::Elements(CLIENTS as u64));
    group.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let batch = clients.iter().map(|client| {
                        written += 1;
                        let shard = format!("new-{written}");
                        async move { client.set_placement(TYPE, &shard, "r1").await.unwrap() }
                    });
                    futures_util::future::join_all(batch).await;
                }
                let elapsed = started.elapsed();
                spent += elapsed;
                batches += iterations as u32;
                elapsed
            })
        })
    });
    group.finish();
    drop(runtime);
    spent / batches.max(1)
}

fn stores(c: &mut Criterion) {
    let server = etcd::Etcd::start();
    let redb_dir = tempfile::tempdir().unwrap();
    let redb = RedbStore::open(redb_dir.path()).unwrap();
    let etcd_store =
        EtcdStore::open(&EtcdConfig { prefix: "/bench-commits/".into(), ..EtcdConfig::new(vec![server.url.clone()]) })
            .unwrap();
    let redb_commit = commits(c, "redb", &redb);
    let etcd_commit = commits(c, "etcd", &etcd_store);
    drop((redb, etcd_store));

    let node_dir = tempfile::tempdir().unwrap();
    let redb_posts =
        posts(c, "redb", StoreConfig::Embedded { dir: node_dir.path().join("redb"), migrate: true }, node_dir.path());
    let etcd_config = EtcdConfig { prefix: "/bench-node/".into(), ..EtcdConfig::new(vec![server.url.clone()]) };
    let etcd_posts = posts(c, "etcd", StoreConfig::Etcd(etcd_config), &node_dir.path().join("etcd"));

    let per_second = |d: Duration, n: usize| n as f64 / d.as_secs_f64();
    println!("\nstore | commits/s | POSTs/s (8 clients)");
    println!("redb  | {:>9.0} | {:>8.0}", per_second(redb_commit, 1), per_second(redb_posts, CLIENTS));
    println!(
        "etcd  | {:>9.0} ({:.2}× redb's time) | {:>8.0} ({:.2}× redb's time)",
        per_second(etcd_commit, 1),
        etcd_commit.as_secs_f64() / redb_commit.as_secs_f64(),
        per_second(etcd_posts, CLIENTS),
        etcd_posts.as_secs_f64() / redb_posts.as_secs_f64(),
    );
}

criterion_group!(benches, stores);
criterion_main!(benches);
