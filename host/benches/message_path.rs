//! The message path between region processes, on loopback: a node (the
//! release binary, fast timings) and two regions on the built-in transport,
//! one in this process and one in a child process (this benchmark's own
//! binary, started again in its child role).
//!
//! 1. `ask` round trip to a shard homed in the child, against a bare
//!    WebSocket echo (tokio-tungstenite, the same payload) between the same
//!    two processes: p50 and p99 over 2,000 sequential calls each, and their
//!    ratios.
//! 2. Sends in one direction: 200,000 messages to a shard homed in the
//!    child, then one `ask` of the same shard, answered after every message
//!    before it (order per shard and sender): messages per second. The
//!    TypeScript and Python clients' regions do the same beside it when
//!    they are built (`cargo xtask clients`).
//! 3. After a SIGKILL: a second child is killed while it homes three
//!    shards; this region asks each at once, and the time until the last
//!    answer (from the shard's new home) is the time traffic flows again;
//!    p50 and p99 over 20 kills, against the node's removal time.
//! 4. Sends to 100,000 shards never seen before, one message each (the
//!    node places each on the first message): how long until all are
//!    delivered, over both regions.
//!
//! Figures only (no criterion groups); `cargo xtask bench message_path`.
//! In smoke mode (`common`): 20 round trips, 400 sends, one kill and 40
//! new shards.

// A benchmark's main prints its figures.
#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use shardalloc_client::region::{
    Application, PeerConfig, PeerTransport, Region, RegionConfig, RegionHandle, SendError,
};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// Set in the child's environment to the node's URL.
const CHILD: &str = "SHARDALLOC_BENCH_MESSAGE_PATH_CHILD";
/// Sequential round trips measured per kind (20 in smoke mode).
const ROUND_TRIPS: usize = 2_000;
/// Messages sent in the throughput run (400 in smoke mode).
const SENDS: u64 = 200_000;
/// New shards sent one message each (40 in smoke mode).
const MANY_SHARDS: u64 = 100_000;
/// SIGKILLs measured (one in smoke mode: its wait is the node's removal
/// time, kept as it is so a busy machine does not remove a live region).
const KILLS: usize = 20;
/// Shards homed in the child at each kill.
const SHARDS_PER_KILL: usize = 3;
/// The node's timings: unreachable after 1.5 s, removed 3 s later.
const NODE_FLAGS: [&str; 12] = [
    "--rebalance-interval-ms",
    "500",
    "--heartbeat-interval-ms",
    "200",
    "--unreachable-after-ms",
    "1500",
    "--remove-after-ms",
    "3000",
    "--lease-ms",
    "2000",
    "--handoff-timeout-ms",
    "10000",
];
/// The removal time those flags give.
const REMOVAL: Duration = Duration::from_millis(4_500);

/// The messages every region of the benchmark exchanges.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Msg {
    n: u64,
}

/// Counts deliveries; answers a request with the count so far.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicU64>);

impl Application for Counter {
    type Message = Msg;
    type Reply = u64;

    async fn start_shard(&self, _shard: &str) {}

    async fn stop_shard(&self, _shard: &str) {}

    async fn deliver(&self, _shard: &str, _message: Msg) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    async fn answer(&self, _shard: &str, _request: Msg) -> Result<u64, String> {
        Ok(self.0.load(Ordering::Relaxed))
    }
}

fn main() {
    // `cargo bench` passes `--bench`; the child role ignores its arguments.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    match std::env::var(CHILD) {
        Ok(node) => runtime.block_on(child(node)),
        Err(_) => runtime.block_on(parent()),
    }
}

/// A region on the built-in transport and a bare WebSocket echo server;
/// prints both addresses, then serves until its input ends.
async fn child(node: String) {
    let peer = PeerConfig { entity_type: "cart".into(), address: String::new(), incarnation: now_ms(), token: None };
    let transport = PeerTransport::bind(peer, "127.0.0.1:0").await.expect("bind the transport");
    let mut config = RegionConfig::new(node, "cart", transport.address());
    config.incarnation = now_ms();
    let region = Region::start(config, Counter::default(), transport.clone()).expect("start the region");
    region.wait_registered().await.expect("registered");
    let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind the echo server");
    let echo_address = echo.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = echo.accept().await {
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else { return };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_binary() && socket.send(message).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    println!("{} {}", transport.address(), echo_address);
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|read| read > 0) {}
    })
    .await
    .expect("read the input");
    region.shutdown().await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_millis() as u64)
}

/// A child process in its role: its region's address and its echo server's.
struct ChildRegion {
    process: Child,
    address: String,
    echo: String,
}

impl ChildRegion {
    fn start(node: &str) -> ChildRegion {
        let mut process = Command::new(std::env::current_exe().expect("this benchmark's binary"))
            .env(CHILD, node)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child region");
        let mut line = String::new();
        BufReader::new(process.stdout.take().expect("piped")).read_line(&mut line).expect("its addresses");
        let mut parts = line.split_whitespace().map(str::to_owned);
        let (Some(address), Some(echo)) = (parts.next(), parts.next()) else {
            panic!("the child region printed {line:?}, not its addresses");
        };
        ChildRegion { process, address, echo }
    }
}

impl Drop for ChildRegion {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The node binary, started on a free port; its URL.
fn start_node(data: &std::path::Path) -> (Child, String) {
    let mut process = Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(["--type", "cart"])
        .args(NODE_FLAGS)
        .env("SHARDALLOC_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the node");
    let mut reader = BufReader::new(process.stdout.take().expect("piped"));
    let mut line = String::new();
    while reader.read_line(&mut line).expect("the node's output") > 0 {
        if let Some(url) = line.split_whitespace().find(|word| word.starts_with("http://")) {
            let url = url.to_owned();
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            return (process, url);
        }
        line.clear();
    }
    let _ = process.kill();
    let _ = process.wait();
    panic!("the node printed no address");
}

/// The first of `prefix0`, `prefix1`, … that the node homes at `address`.
async fn shard_homed_at(region: &RegionHandle<Msg, u64>, address: &str, prefix: &str, skip: usize) -> String {
    let mut found = 0;
    for i in 0.. {
        let shard = format!("{prefix}{i}");
        if region.home_of(&shard).await.expect("a home") == address {
            if found == skip {
                return shard;
            }
            found += 1;
        }
    }
    unreachable!()
}

/// The `q`-quantile of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn parent() {
    let round_trips = common::sized(ROUND_TRIPS, 20);
    let sends = common::sized(SENDS, 400);
    let many_shards = common::sized(MANY_SHARDS, 40);
    let kills = common::sized(KILLS, 1);
    let data = tempfile::tempdir().expect("a directory");
    let (mut node_process, node) = start_node(data.path());
    let peer = PeerConfig { entity_type: "cart".into(), address: String::new(), incarnation: 1, token: None };
    let transport = PeerTransport::bind(peer, "127.0.0.1:0").await.expect("bind the transport");
    let mut config = RegionConfig::new(node.clone(), "cart", transport.address());
    config.home_retry = Duration::from_millis(300);
    // Rounds of failed forwards outlast the removal.
    config.forward_attempts = 60;
    let local = Counter::default();
    let region = Region::start(config, local.clone(), transport.clone()).expect("start the region");
    region.wait_registered().await.expect("registered");

    // 1. ask against a bare WebSocket echo.
    let mut home = ChildRegion::start(&node);
    let shard = shard_homed_at(&region, &home.address, "a", 0).await;
    let payload = serde_json::to_vec(&Msg { n: 12_345 }).expect("JSON");
    let (mut echo, _) =
        tokio_tungstenite::connect_async(format!("ws://{}", home.echo)).await.expect("connect to the echo server");
    let wait = Duration::from_secs(30);
    for n in 0..common::sized(200, 5) {
        region.ask(&shard, Msg { n }, wait).await.expect("a warm-up answer");
        echo.send(Message::Binary(payload.clone().into())).await.expect("echo");
        echo.next().await.expect("an echo").expect("an echo");
    }
    let mut asks = Vec::with_capacity(round_trips);
    let mut echoes = Vec::with_capacity(round_trips);
    for n in 0..round_trips as u64 {
        let started = Instant::now();
        region.ask(&shard, Msg { n }, wait).await.expect("an answer");
        asks.push(started.elapsed());
        let started = Instant::now();
        echo.send(Message::Binary(payload.clone().into())).await.expect("echo");
        echo.next().await.expect("an echo").expect("an echo");
        echoes.push(started.elapsed());
    }
    asks.sort();
    echoes.sort();
    let (ask_50, ask_99, echo_50, echo_99) =
        (quantile(&asks, 0.5), quantile(&asks, 0.99), quantile(&echoes, 0.5), quantile(&echoes, 0.99));
    println!(
        "message path: ask round trip p50 {} p99 {}; bare WebSocket echo p50 {} p99 {}; ask/echo p50 {:.2}x p99 {:.2}x ({round_trips} each, two processes)",
        micros(ask_50),
        micros(ask_99),
        micros(echo_50),
        micros(echo_99),
        ask_50.as_secs_f64() / echo_50.as_secs_f64(),
        ask_99.as_secs_f64() / echo_99.as_secs_f64(),
    );

    // 2. Sends in one direction.
    let sink = shard_homed_at(&region, &home.address, "t", 0).await;
    let before = region.ask(&sink, Msg { n: 0 }, wait).await.expect("a count");
    let started = Instant::now();
    let mut n = 0;
    while n < sends {
        match region.send(&sink, Msg { n }) {
            Ok(()) => n += 1,
            // The peer holds 8 MiB unacknowledged and the shard's buffer is
            // full: back-pressure; wait for it to drain.
            Err(SendError::BufferFull { .. } | SendError::TotalBufferFull { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("send: {error}"),
        }
    }
    let count = region.ask(&sink, Msg { n: 0 }, Duration::from_secs(300)).await.expect("the count");
    let elapsed = started.elapsed();
    assert_eq!(count - before, sends, "every message delivered before the ask");
    let rust_rate = sends as f64 / elapsed.as_secs_f64();
    println!(
        "message path: sends in one direction, Rust: {rust_rate:.0} messages/s ({sends} in {:.2} s, delivered and counted)",
        elapsed.as_secs_f64()
    );
    for (language, rate) in other_languages(&node, &home.address, &sink, sends / 4) {
        match rate {
            Ok(rate) => println!(
                "message path: sends in one direction, {language}: {rate:.0} messages/s ({:.2}x Rust)",
                rate / rust_rate
            ),
            Err(why) => println!("message path: sends in one direction, {language}: not measured ({why})"),
        }
    }

    // 3. Resuming after a SIGKILL.
    let mut resumes = Vec::with_capacity(kills);
    for kill in 0..kills {
        let victim = ChildRegion::start(&node);
        let mut shards = Vec::new();
        for i in 0..SHARDS_PER_KILL {
            shards.push(shard_homed_at(&region, &victim.address, &format!("k{kill}-"), i).await);
        }
        drop(victim);
        let killed = Instant::now();
        let answers = shards.iter().map(|shard| {
            let region = region.clone();
            async move { region.ask(shard, Msg { n: 0 }, Duration::from_secs(60)).await.map(|_| killed.elapsed()) }
        });
        let times = futures_util::future::join_all(answers).await;
        let last = times.into_iter().map(|t| t.expect("answered by the new home")).max().expect("three shards");
        resumes.push(last);
    }
    resumes.sort();
    println!(
        "message path: traffic to a SIGKILLed region's shards flows again after p50 {:.2} s p99 {:.2} s ({kills} kills, {SHARDS_PER_KILL} shards each) against the node's removal time {:.1} s: p50 {:.2}x",
        quantile(&resumes, 0.5).as_secs_f64(),
        quantile(&resumes, 0.99).as_secs_f64(),
        REMOVAL.as_secs_f64(),
        quantile(&resumes, 0.5).as_secs_f64() / REMOVAL.as_secs_f64(),
    );
    // 4. (Last: the node keeps placing these shards.) Sends to many shards
    // never seen before: each asks the node for a
    // home (the node places it), buffering its message meanwhile.
    let before = (local.0.load(Ordering::Relaxed), region.ask(&sink, Msg { n: 0 }, wait).await.expect("a count"));
    let started = Instant::now();
    let mut i = 0;
    while i < many_shards {
        match region.send(&format!("m{i}"), Msg { n: i }) {
            Ok(()) => i += 1,
            Err(SendError::BufferFull { .. } | SendError::TotalBufferFull { .. }) => {
                tokio::time::sleep(Duration::from_millis(1)).await
            }
            Err(error) => panic!("send: {error}"),
        }
    }
    let sent = started.elapsed();
    let delivered = loop {
        let here = local.0.load(Ordering::Relaxed) - before.0;
        let there = region.ask(&sink, Msg { n: 0 }, wait).await.expect("a count") - before.1;
        if here + there >= many_shards {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(600), "{here} + {there} of {many_shards} delivered in 600 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "message path: one message to each of {many_shards} new shards (each placed by the node on the first message): all delivered in {:.2} s ({:.0} shards/s; sent in {:.2} s)",
        delivered.as_secs_f64(),
        many_shards as f64 / delivered.as_secs_f64(),
        sent.as_secs_f64(),
    );
    drop(home.process.stdin.take());
    drop(home);
    region.shutdown().await;
    let _ = node_process.kill();
    let _ = node_process.wait();
}

/// The TypeScript and Python regions' send rates to `shard` at `home`, each
/// in a process of its own, when their clients are built, each sending
/// `count` messages.
fn other_languages(node: &str, home: &str, shard: &str, count: u64) -> Vec<(&'static str, Result<f64, String>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let typescript = root.join("clients/typescript/dist/src/index.js");
    let python = root.join("target/clients/python-venv/bin/python");
    let script_ts = format!(
        r#"
import {{ PeerTransport, Region }} from {client};
const transport = await PeerTransport.bind({{ entityType: 'cart', incarnation: Date.now() }});
const region = Region.start({{ node: {node:?}, entityType: 'cart', address: transport.address }}, {{ startShard() {{}}, stopShard() {{}}, deliver() {{}} }}, transport);
await region.waitRegistered();
while ((await region.homeOf({shard:?})) !== {home:?}) await new Promise((r) => setTimeout(r, 50));
const before = await region.ask({shard:?}, {{ n: 0 }}, {{ timeoutMs: 60000 }});
const started = performance.now();
let n = 0;
while (n < {count}) {{
  try {{ region.send({shard:?}, {{ n }}); n += 1; }} catch (error) {{ await new Promise((r) => setImmediate(r)); }}
}}
const after = await region.ask({shard:?}, {{ n: 0 }}, {{ timeoutMs: 300000 }});
const seconds = (performance.now() - started) / 1000;
if (after - before !== {count}) throw new Error(`counted ${{after - before}}`);
console.log({count} / seconds);
await region.shutdown();
transport.close();
"#,
        client = serde_json::to_string(&format!("file://{}", typescript.display())).unwrap_or_default(),
    );
    let script_py = format!(
        r#"
import asyncio, time
from shardalloc_client import PeerTransport, Region, RegionConfig, SendError

class App:
    async def start_shard(self, shard, epoch): pass
    async def stop_shard(self, shard): pass
    async def deliver(self, shard, message): pass

async def main():
    transport = await PeerTransport.bind(entity_type="cart", incarnation=time.time_ns() // 1_000_000)
    region = await Region.start(RegionConfig(node={node:?}, entity_type="cart", address=transport.address), App(), transport)
    await region.wait_registered()
    while await region.home_of({shard:?}) != {home:?}:
        await asyncio.sleep(0.05)
    before = await region.ask({shard:?}, {{"n": 0}}, timeout=60)
    started = time.monotonic()
    n = 0
    while n < {count}:
        try:
            region.send({shard:?}, {{"n": n}})
            n += 1
        except SendError:
            await asyncio.sleep(0)
    after = await region.ask({shard:?}, {{"n": 0}}, timeout=300)
    assert after - before == {count}, after - before
    print({count} / (time.monotonic() - started))
    await region.shutdown()
    transport.close()

asyncio.run(main())
"#
    );
    let mut rates = Vec::new();
    rates.push((
        "TypeScript",
        if typescript.is_file() {
            run_script("node", &["--input-type=module", "-"], &script_ts)
        } else {
            Err(format!("{} is not built: cargo xtask clients", typescript.display()))
        },
    ));
    rates.push((
        "Python",
        if python.is_file() {
            run_script(&python.to_string_lossy(), &["-"], &script_py)
        } else {
            Err(format!("{} is missing: cargo xtask clients", python.display()))
        },
    ));
    rates
}

/// Runs `program` with `script` on its input; the rate it prints.
fn run_script(program: &str, args: &[&str], script: &str) -> Result<f64, String> {
    let mut process = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    process.stdin.take().expect("piped").write_all(script.as_bytes()).map_err(|e| e.to_string())?;
    let output = process.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim().lines().last().and_then(|line| line.trim().parse::<f64>().ok()).ok_or_else(|| {
        format!("{program} printed {:?}: {}", text.trim(), String::from_utf8_lossy(&output.stderr).trim())
    })
}
