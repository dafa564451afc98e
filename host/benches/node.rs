//! The node over its real sockets: home requests answered per second over
//! region sessions (one session against several, in one run), the same and
//! the heartbeats' round trips with 100 regions reporting load every second
//! against the same run without load reports, the memory
//! of a node holding 1,000 regions and 1,000,000 shards loaded from its
//! store, and its memory before, during and after a flood of connections
//! that never finish their request. `docs/performance.md` reports the
//! results.
//!
//! `cargo bench -p shardalloc --bench node`; in smoke mode (`common`), 4
//! sessions and 100 shards, load reports from 3 regions in two phases of
//! half a second, the memory of 10 regions and 2,000 shards, a flood of 40
//! connections, and every wait under a second.

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;

use std::time::{Duration, Instant};

use common::TYPE;
use common::live::LiveRegion;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use shardalloc::coordinator::{Change, Home, RegionRecord};
use shardalloc::server::Node;
use shardalloc::server::driver::DriverSettings;
use shardalloc::store::{RedbStore, Store, Turn};
use shardalloc::strategy::external::AllocationReason;
use shardalloc_proto::protocol::{LoadReport, RegionMessage, ShardLoad};
use tokio::net::TcpStream;

/// Shards every session asks about (allocated before measuring).
const SHARDS: usize = 1_000;

/// Region sessions the benchmarks open (all registered before measuring, so
/// none joins while another is measured).
const SESSIONS: usize = 16;

/// [`SHARDS`], or 100 in smoke mode.
fn shards() -> usize {
    common::sized(SHARDS, 100)
}

/// How many sessions ask at once: 1, 4 and [`SESSIONS`] (1 and 4 in smoke
/// mode, which opens 4 sessions).
fn parallels() -> Vec<usize> {
    common::sized(vec![1, 4, SESSIONS], vec![1, 4])
}

/// Starts a node in process on 127.0.0.1 over a redb store in `data`,
/// registers [`SESSIONS`] live regions (4 in smoke mode) and gives every
/// shard its home.
async fn node_with_regions(data: &std::path::Path) -> Vec<LiveRegion> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("ws://{}", listener.local_addr().unwrap());
    let node = Node::start(common::settings(data, DriverSettings::default())).unwrap();
    tokio::spawn(node.serve(shardalloc::server::no_delay(listener), std::future::pending()));
    let mut sessions = Vec::new();
    for i in 0..common::sized(SESSIONS, 4) {
        sessions.push(LiveRegion::connect(&base, &format!("r{i}")).await);
    }
    // Every shard gets its home before measuring: answers come from the state.
    sessions[0].homes((0..shards()).map(|s| s.to_string())).await;
    sessions
}

/// Runs `work` on the first `parallel` sessions at once and gives them back.
async fn on_sessions<F, Fut, R>(sessions: &mut Vec<LiveRegion>, parallel: usize, work: F) -> Vec<R>
where
    F: Fn(usize, LiveRegion) -> Fut,
    Fut: std::future::Future<Output = (LiveRegion, R)> + Send + 'static,
    R: Send + 'static,
{
    let tasks: Vec<_> = sessions.drain(..parallel).enumerate().map(|(i, s)| tokio::spawn(work(i, s))).collect();
    let mut results = Vec::new();
    for (i, done) in futures_util::future::join_all(tasks).await.into_iter().enumerate() {
        let (session, result) = done.expect("a session task");
        sessions.insert(i, session);
        results.push(result);
    }
    results
}

fn home_requests(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut sessions = runtime.block_on(node_with_regions(data.path()));
    let mut group = c.benchmark_group("home_requests");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    let batch = common::sized(1_000, 10);
    let shards = shards();
    for parallel in parallels() {
        group.throughput(Throughput::Elements((batch * parallel) as u64));
        group.bench_function(BenchmarkId::new("sessions", parallel), |b| {
            b.iter(|| {
                runtime.block_on(on_sessions(&mut sessions, parallel, |i, mut session| async move {
                    session.homes((0..batch).map(|n| ((i * 97 + n) % shards).to_string())).await;
                    (session, ())
                }))
            })
        });
    }
    group.finish();
}

/// The `q` quantile of sorted latencies.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Not a timing by criterion: the latency of one home request at a time
/// per session (send, wait for the answer, next), at 1, 4 and 16 sessions
/// asking at once: for shards that have a home (answered from the state)
/// and for new shards (answered after their home is committed).
fn home_latency(_: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut sessions = runtime.block_on(node_with_regions(data.path()));
    println!("home request latency (one request in flight per session):");
    println!("| sessions | shard | requests | p50 | p99 |");
    let shards = shards();
    for parallel in parallels() {
        for new in [false, true] {
            let per_session = if new { common::sized(500, 5) } else { common::sized(2_000, 20) };
            let latencies = runtime.block_on(on_sessions(&mut sessions, parallel, move |i, mut session| async move {
                let mut took = Vec::with_capacity(per_session);
                for n in 0..per_session {
                    let shard =
                        if new { format!("new-{parallel}-{i}-{n}") } else { ((i * 97 + n) % shards).to_string() };
                    let started = Instant::now();
                    session.send(RegionMessage::GetShardHome { shard: shard.clone() });
                    let (answered, _) = session.home().await;
                    assert_eq!(answered, shard, "answers come in order");
                    took.push(started.elapsed());
                }
                (session, took)
            }));
            let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
            all.sort();
            println!(
                "| {parallel} | {} | {} | {:.0} µs | {:.0} µs |",
                if new { "new" } else { "homed" },
                all.len(),
                quantile(&all, 0.5).as_secs_f64() * 1e6,
                quantile(&all, 0.99).as_secs_f64() * 1e6,
            );
        }
    }
}

/// One phase of [`load_reports`].
struct Phase {
    reporting: bool,
    /// Home answers per second.
    per_second: f64,
    /// Heartbeat round trips.
    p50: Duration,
    p99: Duration,
    /// Heartbeats timed.
    timed: usize,
}

/// Not a timing by criterion: 100 regions, each home to 100 shards and
/// heartbeating every second, in six phases of one run without and with
/// (in the order ABBAAB) a load report after every heartbeat (each region naming its
/// own 100 shards): the home answers per second one session gets (1,000
/// pipelined at a time, from the state) and the heartbeats' round-trip
/// p50 and p99 over every region. Issue 26's target: with load reports,
/// within 1.2× of the run without. Smoke mode: 3 regions × 10 shards,
/// heartbeats every 100 ms, one phase without and one with, of 0.5 s each.
fn load_reports(_: &mut Criterion) {
    const REGIONS: usize = 100;
    const PER_REGION: usize = 100;
    const PHASE: Duration = Duration::from_secs(20);
    let (regions, per_region) = common::sized((REGIONS, PER_REGION), (3, 10));
    let phase = common::sized(PHASE, Duration::from_millis(500));
    let settle = common::sized(Duration::from_secs(2), Duration::from_millis(200));
    let batch = common::sized(1_000, 50);
    // Without, with, with, without, without, with: a drift of the
    // machine's speed over the run weighs on both sides alike.
    let phases = common::sized(vec![false, true, true, false, false, true], vec![false, true]);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let data = tempfile::tempdir().unwrap();
    let rows = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("ws://{}", listener.local_addr().unwrap());
        let node = Node::start(common::settings(data.path(), DriverSettings::default())).unwrap();
        tokio::spawn(node.serve(shardalloc::server::no_delay(listener), std::future::pending()));
        let mut sessions = Vec::new();
        for i in 0..regions {
            sessions.push(LiveRegion::connect(&base, &format!("r{i}")).await);
        }
        let homes = sessions[0].homes((0..regions * per_region).map(|s| format!("shard-{s}"))).await;
        let mut reports: std::collections::HashMap<String, Vec<ShardLoad>> = Default::default();
        for (n, (shard, home)) in homes.into_iter().enumerate() {
            reports.entry(home).or_default().push(ShardLoad { shard, load: (n % 1_000) as f64 + 1.0 });
        }
        let mut rows = Vec::new();
        for &reporting in &phases {
            for session in &sessions {
                let shards = reports.get(session.address()).cloned().unwrap_or_default();
                session.report_load(reporting.then_some(LoadReport { window_ms: 1_000, shards, rest: 0.0 }));
            }
            // Two heartbeats with the new setting before measuring, every
            // session reading what the node sends meanwhile (an ack left
            // unread would count its wait as a round trip).
            let settling: Vec<_> = sessions
                .drain(..)
                .map(|mut s| {
                    tokio::spawn(async move {
                        s.idle(settle).await;
                        s
                    })
                })
                .collect();
            for session in futures_util::future::join_all(settling).await {
                let session = session.unwrap();
                session.take_round_trips();
                sessions.push(session);
            }
            let asker = sessions.remove(0);
            let ask = tokio::spawn(async move {
                let mut asker = asker;
                let started = Instant::now();
                let mut answered = 0;
                while started.elapsed() < phase {
                    asker.homes((0..batch).map(|n| format!("shard-{}", (answered + n) % (regions * per_region)))).await;
                    answered += batch;
                }
                (asker, answered as f64 / started.elapsed().as_secs_f64())
            });
            let idle: Vec<_> = sessions
                .drain(..)
                .map(|mut s| {
                    tokio::spawn(async move {
                        s.idle(phase).await;
                        s
                    })
                })
                .collect();
            let (asker, per_second) = ask.await.unwrap();
            sessions.push(asker);
            for session in futures_util::future::join_all(idle).await {
                sessions.push(session.unwrap());
            }
            let mut trips: Vec<Duration> = sessions.iter().flat_map(|s| s.take_round_trips()).collect();
            trips.sort();
            let (p50, p99, timed) = (quantile(&trips, 0.5), quantile(&trips, 0.99), trips.len());
            rows.push(Phase { reporting, per_second, p50, p99, timed });
        }
        // The reports reached the node: its hottest shard has a load.
        let url = format!("{}/v1/cluster/shards/{TYPE}/shards?sort=load&limit=1", base.replace("ws://", "http://"));
        let page: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
        assert!(page["shards"][0]["load"].as_f64().is_some_and(|l| l > 0.0), "no load reached the node: {page}");
        rows
    });
    let every = common::sized("every second", "every 100 ms");
    println!("load reports: {regions} regions × {per_region} shards, heartbeats {every}, phases of {phase:?}:");
    println!("| phase | load reports | home answers/s | heartbeats timed | heartbeat p50 | heartbeat p99 |");
    for (i, row) in rows.iter().enumerate() {
        println!(
            "| {} | {} | {:.0} | {} | {:.2} ms | {:.2} ms |",
            i + 1,
            if row.reporting { "every second" } else { "none" },
            row.per_second,
            row.timed,
            row.p50.as_secs_f64() * 1e3,
            row.p99.as_secs_f64() * 1e3
        );
    }
    let mean = |reporting: bool, pick: fn(&Phase) -> f64| {
        let picked: Vec<f64> = rows.iter().filter(|r| r.reporting == reporting).map(pick).collect();
        picked.iter().sum::<f64>() / picked.len() as f64
    };
    let throughput = mean(false, |r| r.per_second) / mean(true, |r| r.per_second);
    let p99 = mean(true, |r| r.p99.as_secs_f64()) / mean(false, |r| r.p99.as_secs_f64());
    println!(
        "load reports cost: home answers {throughput:.2}× slower, heartbeat p99 {p99:.2}× (with over without, \
         means of the three phases each; the target is at most 1.2×)"
    );
}

/// Resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// Starts the real binary on `data`; returns its resident memory in MiB
/// once it listens (it has loaded and recovered everything by then), the
/// same `settle` later (jemalloc has returned what the start-up read freed
/// after 15 s: the steady state), and how long the start took.
fn serve_rss_mib(data: &std::path::Path, settle: Duration) -> (f64, f64, Duration) {
    use std::io::BufRead;
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(["serve", "--listen", "127.0.0.1:0", "--type", TYPE, "--data"])
        .arg(data)
        .env("SHARDALLOC_LOG", "shardalloc=info")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the node");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut listening = false;
    for line in lines.by_ref().map_while(Result::ok) {
        // Where the start went: the store's read and the coordinators' recovery.
        if line.contains("read_ms") || line.contains("store is checked") {
            println!("node: {}", line.trim());
        }
        if line.contains("listening") {
            listening = true;
            break;
        }
    }
    assert!(listening, "the node did not start");
    let load = started.elapsed();
    let at_start = rss_mib(child.id());
    std::thread::sleep(settle);
    let settled = rss_mib(child.id());
    // SIGTERM: the node closes its store cleanly, so the next start on it
    // is a restart, not a recovery after a crash.
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    (at_start, settled, load)
}

/// Not a timing: prints the resident memory a node needs for 1,000 regions
/// and 1,000,000 shards, loaded from its store as after a restart (smoke
/// mode: 10 regions and 2,000 shards, measured 0.2 s after the start).
fn memory(_: &mut Criterion) {
    let (regions, shards) = common::sized((1_000, 1_000_000), (10, 2_000));
    let sizes = common::sized("1,000 regions and 1,000,000 shards", "10 regions and 2,000 shards");
    let mut data = tempfile::tempdir().unwrap();
    // To profile a start by hand: `SHARDALLOC_BENCH_KEEP=1` keeps the store.
    if std::env::var_os("SHARDALLOC_BENCH_KEEP").is_some() {
        data.disable_cleanup(true);
        println!("the store is kept in {}", data.path().display());
    }
    {
        let store = RedbStore::open(data.path()).unwrap();
        let mut revision = 0;
        let registered: Vec<Change> = (0..regions as u64)
            .map(|i| {
                Change::RegionRegistered(RegionRecord {
                    address: format!("10.0.{}.{}:2552", i / 256, i % 256),
                    incarnation: 1,
                    join_order: i,
                    ..RegionRecord::default()
                })
            })
            .collect();
        let turn = Turn { changes: [(TYPE.to_string(), registered)].into(), ..Turn::default() };
        revision = store.commit(revision, &turn).unwrap();
        let reason = AllocationReason::Strategy { name: "least-shard".into(), version: "0.1.0".into() };
        let chunk = shards / 10;
        for first in (0..shards).step_by(chunk) {
            let homes: Vec<Change> = (first..first + chunk)
                .map(|s| Change::HomeSet {
                    shard: format!("shard-{s}"),
                    home: Home {
                        region: format!("10.0.{}.{}:2552", (s % regions) / 256, (s % regions) % 256).into(),
                        reason: reason.clone().into(),
                        at: 1_700_000_000_000,
                        epoch: s as u64 + 1,
                    },
                })
                .collect();
            let turn = Turn { changes: [(TYPE.to_string(), homes)].into(), ..Turn::default() };
            revision = store.commit(revision, &turn).unwrap();
        }
    }
    let settle = common::sized(Duration::from_secs(15), Duration::from_millis(200));
    let empty = tempfile::tempdir().unwrap();
    let (_, idle, _) = serve_rss_mib(empty.path(), settle);
    // The first start compiles the type's built-in into the data
    // directory's (empty) artifact cache; a restart loads it from there.
    let (_, _, first) = serve_rss_mib(data.path(), Duration::ZERO);
    let (at_start, full, restart) = serve_rss_mib(data.path(), settle);
    let after = common::sized("15 s", "0.2 s");
    println!(
        "node memory (RSS, {after} after start): empty {idle:.0} MiB; with {sizes} \
         {full:.0} MiB ({:.0} bytes per shard; {at_start:.0} MiB right at start); started, loaded and recovered \
         in {:.2} s (restart), {:.2} s (first start, compiling into an empty artifact cache)",
        (full - idle) * 1_048_576.0 / shards as f64,
        restart.as_secs_f64(),
        first.as_secs_f64()
    );
}

/// Not a timing: prints the real node's resident memory before, during
/// and after 4,000 connections that send half a request head and wait (the
/// node allows them all: `--max-unauthenticated-connections 4096`), and
/// whether `/healthz` answered throughout (smoke mode: 40 connections,
/// held 0.2 s, memory read again 0.5 s after they closed).
fn connection_flood(_: &mut Criterion) {
    use std::io::BufRead;
    const CONNECTIONS: usize = 4_000;
    let connections = common::sized(CONNECTIONS, 40);
    let (held_for, after_for) = common::sized(
        (Duration::from_secs(1), Duration::from_secs(15)),
        (Duration::from_millis(200), Duration::from_millis(500)),
    );
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(["serve", "--listen", "127.0.0.1:0", "--max-unauthenticated-connections", "4096", "--data"])
        .arg(data.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the node");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.find_map(|l| l.ok().filter(|l| l.contains("listening"))).expect("the node started");
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).expect("a URL").to_owned();
    let pid = child.id();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let healthz = |url: String| async move {
        reqwest::get(format!("{url}/healthz")).await.is_ok_and(|r| r.status().is_success())
    };
    let (before, during, healthy) = runtime.block_on(async {
        let before = rss_mib(pid);
        let address = url.trim_start_matches("http://").to_owned();
        let mut held = Vec::new();
        for _ in 0..connections {
            use tokio::io::AsyncWriteExt;
            let Ok(mut stream) = TcpStream::connect(&address).await else { break };
            let head = format!("GET /v1/cluster/shards HTTP/1.1\r\nHost: {address}\r\nX-Pad: {}", "a".repeat(1_000));
            if stream.write_all(head.as_bytes()).await.is_ok() {
                held.push(stream);
            }
        }
        tokio::time::sleep(held_for).await;
        let during = rss_mib(pid);
        let healthy = healthz(url.clone()).await;
        println!("connection flood: {} connections held", held.len());
        drop(held);
        (before, during, healthy)
    });
    std::thread::sleep(after_for);
    let after = rss_mib(pid);
    let healthy_after = runtime.block_on(healthz(url));
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "node memory (RSS) around a flood of {connections} half-sent requests: before {before:.0} MiB, \
         during {during:.0} MiB, {} s after they closed {after:.0} MiB; /healthz answered during: {healthy}, after: {healthy_after}",
        after_for.as_secs_f64()
    );
}

criterion_group!(benches, home_requests, home_latency, load_reports, memory, connection_flood);
criterion_main!(benches);
