//! The node over its real sockets: home requests answered per second over
//! region sessions (one session against several, in one run), the same and
//! the heartbeats' round trips with 100 regions reporting load every second
//! against the same run without load reports, the same with one region
//! holding 100,000 or 1,000,000 shards reporting ten times a second, the memory
//! of a node holding 1,000 regions and 1,000,000 shards loaded from its
//! store, and its memory before, during and after a flood of connections
//! that never finish their request. `docs/performance.md` reports the
//! results.
//!
//! `cargo bench -p shardalloc --bench node`; in smoke mode (`common`), 4
//! sessions and 100 shards, load reports from 3 regions in two phases of
//! half a second, one region of 2,000 shards reporting every 10 ms beside
//! 3 others, the memory of 10 regions and 2,000 shards, a flood of 40
//! connections, and every wait under a second.

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;

use std::time::{Duration, Instant};

use common::TYPE;
use common::live::{LiveRegion, idle_all};
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
            sessions = idle_all(sessions, settle).await;
            for session in &sessions {
                session.take_round_trips();
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
            let others = idle_all(sessions, phase).await;
            let (asker, per_second) = ask.await.unwrap();
            sessions = std::iter::once(asker).chain(others).collect();
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

/// One phase of [`heavy_reporters`].
struct Flooded {
    /// Whether the big region reported at ten times the pace.
    flooding: bool,
    /// The other regions' heartbeat round trips.
    p50: Duration,
    p99: Duration,
    /// Heartbeats timed.
    timed: usize,
}

/// A store holding one region `big` with `held` shards and `quiet` regions
/// `q0`, `q1`, … with 10 shards each, as a node left it (every region at
/// incarnation 1, so the sessions that register again keep their shards).
fn store_with_a_big_region(data: &std::path::Path, held: usize, quiet: usize) {
    let store = RedbStore::open(data).unwrap();
    let addresses: Vec<String> = std::iter::once("big".to_owned()).chain((0..quiet).map(|i| format!("q{i}"))).collect();
    let registered: Vec<Change> = (addresses.iter().enumerate())
        .map(|(i, address)| {
            Change::RegionRegistered(RegionRecord {
                address: address.clone(),
                incarnation: 1,
                join_order: i as u64,
                ..RegionRecord::default()
            })
        })
        .collect();
    let turn = Turn { changes: [(TYPE.to_string(), registered)].into(), ..Turn::default() };
    let mut revision = store.commit(0, &turn).unwrap();
    let reason = AllocationReason::Strategy { name: "least-shard".into(), version: "0.1.0".into() };
    let homes = (0..held)
        .map(|s| (format!("big-{s}"), "big".to_owned()))
        .chain((0..quiet * 10).map(|s| (format!("quiet-{s}"), format!("q{}", s % quiet))));
    let homes: Vec<Change> = homes
        .enumerate()
        .map(|(n, (shard, region))| Change::HomeSet {
            shard,
            home: Home {
                region: region.into(),
                reason: reason.clone().into(),
                at: 1_700_000_000_000,
                epoch: n as u64 + 1,
            },
        })
        .collect();
    for chunk in homes.chunks(100_000) {
        let turn = Turn { changes: [(TYPE.to_string(), chunk.to_vec())].into(), ..Turn::default() };
        revision = store.commit(revision, &turn).unwrap();
    }
}

/// Not a timing by criterion: issue 41's first finding. One region holding
/// 100,000 shards, then one holding 1,000,000, sends a load report (256
/// shards named, the rest summed) ten times a second, ten times the
/// clients' pace, while 100 other regions heartbeat every second; phases
/// without and with the flood (ABBAAB, 15 s each, 1,500 round trips each)
/// time the others' heartbeat round trips. The target: p99 with the flood within 1.2× of
/// the p99 without. The type rebalances once an hour (no round falls in a
/// phase: a round reads the whole view, flood or not). Smoke mode: 2,000
/// shards, 3 regions, two phases of 0.5 s.
fn heavy_reporters(_: &mut Criterion) {
    let sizes = common::sized(vec![100_000, 1_000_000], vec![2_000]);
    let quiet = common::sized(100, 3);
    let phase = common::sized(Duration::from_secs(15), Duration::from_millis(500));
    let settle = common::sized(Duration::from_secs(2), Duration::from_millis(200));
    let phases = common::sized(vec![false, true, true, false, false, true], vec![false, true]);
    let every = common::sized(Duration::from_millis(100), Duration::from_millis(10));
    let mut summary = Vec::new();
    for held in sizes {
        let data = tempfile::tempdir().unwrap();
        store_with_a_big_region(data.path(), held, quiet);
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let rows = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("ws://{}", listener.local_addr().unwrap());
            let mut driver = DriverSettings::default();
            driver.coordinator.rebalance_interval_ms = 3_600_000;
            let node = Node::start(common::settings(data.path(), driver)).unwrap();
            tokio::spawn(node.serve(shardalloc::server::no_delay(listener), std::future::pending()));
            let mut big = LiveRegion::connect(&base, "big").await;
            let mut sessions = Vec::new();
            for i in 0..quiet {
                sessions.push(LiveRegion::connect(&base, &format!("q{i}")).await);
            }
            let named: Vec<ShardLoad> =
                (0..256.min(held)).map(|s| ShardLoad { shard: format!("big-{s}"), load: 1_000.0 - s as f64 }).collect();
            let report = LoadReport { window_ms: 1_000, shards: named, rest: held as f64 };
            let mut rows = Vec::new();
            for &flooding in &phases {
                sessions = idle_all(sessions, settle).await;
                for session in &sessions {
                    session.take_round_trips();
                }
                let reports = report.clone();
                let flood = tokio::spawn(async move {
                    let started = tokio::time::Instant::now();
                    let mut tick = tokio::time::interval(every);
                    while started.elapsed() < phase {
                        tick.tick().await;
                        if flooding {
                            big.send(RegionMessage::Load(reports.clone()));
                        }
                        // Reads the node's answers to its heartbeats meanwhile.
                        big.idle(Duration::ZERO).await;
                    }
                    big
                });
                sessions = idle_all(sessions, phase).await;
                big = flood.await.unwrap();
                let mut trips: Vec<Duration> = sessions.iter().flat_map(|s| s.take_round_trips()).collect();
                trips.sort();
                let (p50, p99, timed) = (quantile(&trips, 0.5), quantile(&trips, 0.99), trips.len());
                rows.push(Flooded { flooding, p50, p99, timed });
            }
            // The reports reached the node: the big region's first shard has its load.
            let url = format!("{}/v1/cluster/shards/{TYPE}/shards/big-0", base.replace("ws://", "http://"));
            let shard: serde_json::Value = reqwest::get(url).await.unwrap().json().await.unwrap();
            assert!(shard["load"].as_f64().is_some_and(|l| l > 0.0), "no load reached the node: {shard}");
            rows
        });
        println!(
            "heavy reporters: one region holding {held} shards reporting every {every:?} while {quiet} others \
             heartbeat, phases of {phase:?}:"
        );
        println!("| phase | big region's reports | heartbeats timed | heartbeat p50 | heartbeat p99 |");
        for (i, row) in rows.iter().enumerate() {
            println!(
                "| {} | {} | {} | {:.2} ms | {:.2} ms |",
                i + 1,
                if row.flooding { "ten times the pace" } else { "none" },
                row.timed,
                row.p50.as_secs_f64() * 1e3,
                row.p99.as_secs_f64() * 1e3
            );
        }
        let mean = |flooding: bool| {
            let picked: Vec<f64> =
                rows.iter().filter(|r| r.flooding == flooding).map(|r| r.p99.as_secs_f64()).collect();
            picked.iter().sum::<f64>() / picked.len() as f64
        };
        summary.push((held, mean(true) / mean(false)));
    }
    for (held, ratio) in summary {
        println!(
            "heavy reporters: a region holding {held} shards reporting ten times the pace gives the others a \
             heartbeat p99 {ratio:.2}× the one without (means of the phases each; the target is at most 1.2×)"
        );
    }
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

criterion_group!(benches, home_requests, home_latency, load_reports, heavy_reporters, memory, connection_flood);
criterion_main!(benches);
