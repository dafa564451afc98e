//! The second attack's five loads (issue 23), each run until told to stop
//! (`stop`), each counting its own answers:
//!
//! - `snapshots`: 8 readers looping `GET /v1/cluster/shards/bench/snapshot`
//!   (a `429 reads-busy` is an answer: counted, retried after 100 ms);
//! - `replays`: 60 readers looping `GET /v1/events?from=oldest` until
//!   `: live`, then reconnecting;
//! - `storm`: 50 regions each connecting, registering and dropping the
//!   session in a loop; afterwards each keeps one session, heartbeating
//!   (so none is removed for having stopped);
//! - `posts`: 16 writers looping `POST …/placements` of 10,000 placements
//!   (rewrites of preloaded shards, so the type stays at its count);
//! - `burst`: one more region sending 120,000 `GetShardHome` at once on one
//!   session (pipelined), reading the answers as they come and
//!   heartbeating; the load ends when every answer came;
//!
//! and `idle` (nothing: the reference alone).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use shardalloc_client::protocol::{NodeMessage, RegionMessage};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::node::{ADMIN_TOKEN, TYPE};
use crate::raw::{self, KeeperStats};

/// Every load, in the order they run.
pub const LOADS: &[&str] = &["idle", "snapshots", "replays", "storm", "posts", "burst"];

/// Snapshot readers.
const SNAPSHOT_READERS: usize = 8;
/// Event-stream replayers.
const REPLAYERS: usize = 60;
/// Regions of the reconnect storm.
const STORM_REGIONS: usize = 50;
/// Concurrent placement writers.
const WRITERS: usize = 16;
/// Placements per write.
pub const PER_POST: u64 = 10_000;
/// The pause after a refusal (429) or an error before the next try.
const PAUSE: Duration = Duration::from_millis(100);

/// What every load shares.
pub struct Ctx {
    /// `http://…` of the node.
    pub base: String,
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The placements preloaded (`p-0` … `p-{n-1}`).
    pub placements: u64,
    /// Home lookups of the burst.
    pub burst: u64,
    /// Regions kept alive after their load, until the end of the run.
    pub keepers: Mutex<JoinSet<()>>,
    /// What the keepers saw.
    pub keeper_stats: Arc<KeeperStats>,
    /// Tells the keepers to stop (at the end of the run).
    pub end: watch::Sender<bool>,
}

/// A load's own figures, and when it ended if it ends by itself.
pub struct Outcome {
    /// Its figures, in words.
    pub figures: String,
    /// When the burst's last answer came.
    pub ended: Option<Instant>,
}

/// Status counts, `"200"`, `"429"`, `"error"`…
#[derive(Default)]
struct Counts(Mutex<BTreeMap<String, u64>>);

impl Counts {
    fn add(&self, key: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()).entry(key.into()).or_insert(0) += 1;
    }

    fn get(&self, key: &str) -> u64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(key).copied().unwrap_or(0)
    }

    fn words(&self) -> String {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        if parts.is_empty() { "no answers".to_owned() } else { parts.join(", ") }
    }
}

fn authed(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request.bearer_auth(ADMIN_TOKEN)
}

/// Runs `work` until `stop` says so; `None` when stopped first.
async fn until_stop<T>(stop: &mut watch::Receiver<bool>, work: impl Future<Output = T>) -> Option<T> {
    if *stop.borrow() {
        return None;
    }
    tokio::select! {
        _ = stop.changed() => None,
        done = work => Some(done),
    }
}

/// Counts one request's outcome (its status, or `error`) and keeps the
/// slowest `200`; after anything else, pauses. True for a `200`.
async fn tally(
    outcome: Result<StatusCode, reqwest::Error>,
    at: Instant,
    counts: &Counts,
    slowest: &Mutex<Duration>,
) -> bool {
    match outcome {
        Ok(status) => {
            counts.add(status.as_str());
            if status == StatusCode::OK {
                let mut slowest = slowest.lock().unwrap_or_else(|e| e.into_inner());
                *slowest = (*slowest).max(at.elapsed());
                return true;
            }
        }
        Err(_) => counts.add("error"),
    }
    tokio::time::sleep(PAUSE).await;
    false
}

/// Runs load `name` until `stop`.
pub async fn run(name: &str, ctx: Arc<Ctx>, stop: watch::Receiver<bool>) -> Outcome {
    let figures = match name {
        "idle" => {
            let mut stop = stop;
            let _ = stop.wait_for(|stopped| *stopped).await;
            "the reference region alone".to_owned()
        }
        "snapshots" => snapshots(&ctx, stop).await,
        "replays" => replays(&ctx, stop).await,
        "storm" => storm(&ctx, stop).await,
        "posts" => posts(&ctx, stop).await,
        "burst" => return burst(&ctx, stop).await,
        other => format!("unknown load {other}"),
    };
    Outcome { figures, ended: None }
}

async fn snapshots(ctx: &Arc<Ctx>, stop: watch::Receiver<bool>) -> String {
    let counts = Arc::new(Counts::default());
    let bytes = Arc::new(AtomicU64::new(0));
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..SNAPSHOT_READERS {
        let (ctx, counts, bytes, slowest, mut stop) =
            (ctx.clone(), counts.clone(), bytes.clone(), slowest.clone(), stop.clone());
        tasks.spawn(async move {
            let url = format!("{}/v1/cluster/shards/{TYPE}/snapshot", ctx.base);
            loop {
                let at = Instant::now();
                let read = async {
                    let response = authed(ctx.http.get(&url)).send().await?;
                    let status = response.status();
                    let mut response = response;
                    let mut read = 0u64;
                    while let Some(chunk) = response.chunk().await? {
                        read += chunk.len() as u64;
                    }
                    Ok::<_, reqwest::Error>((status, read))
                };
                let Some(outcome) = until_stop(&mut stop, read).await else { return };
                let read = outcome.as_ref().map_or(0, |(_, read)| *read);
                if tally(outcome.map(|(status, _)| status), at, &counts, &slowest).await {
                    bytes.fetch_add(read, Ordering::Relaxed);
                }
            }
        });
    }
    tasks.join_all().await;
    let ok = counts.get("200");
    let each = bytes.load(Ordering::Relaxed) as f64 / ok.max(1) as f64 / 1e6;
    let slowest = *slowest.lock().unwrap_or_else(|e| e.into_inner());
    format!(
        "{SNAPSHOT_READERS} readers: {} ({:.1} snapshots/s of {each:.1} MB, slowest {:.1} s)",
        counts.words(),
        ok as f64 / started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    )
}

async fn replays(ctx: &Arc<Ctx>, stop: watch::Receiver<bool>) -> String {
    let counts = Arc::new(Counts::default());
    let bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..REPLAYERS {
        let (ctx, counts, bytes, mut stop) = (ctx.clone(), counts.clone(), bytes.clone(), stop.clone());
        tasks.spawn(async move {
            let url = format!("{}/v1/events?from=oldest", ctx.base);
            loop {
                let replay = async {
                    let response = authed(ctx.http.get(&url)).header("accept", "text/event-stream").send().await?;
                    let status = response.status();
                    if status != StatusCode::OK {
                        return Ok::<_, reqwest::Error>((status, false));
                    }
                    let mut response = response;
                    let mut tail: Vec<u8> = Vec::new();
                    while let Some(chunk) = response.chunk().await? {
                        bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        tail.extend_from_slice(&chunk);
                        if tail.windows(7).any(|w| w == b"\n: live") || tail.starts_with(b": live") {
                            return Ok((status, true));
                        }
                        let keep = tail.len().saturating_sub(8);
                        tail.drain(..keep);
                    }
                    Ok((status, false))
                };
                match until_stop(&mut stop, replay).await {
                    None => return,
                    Some(Ok((status, live))) => {
                        counts.add(match (status.as_u16(), live) {
                            (200, true) => "replayed to live".to_owned(),
                            (200, false) => "ended before live".to_owned(),
                            (code, _) => code.to_string(),
                        });
                        if !live {
                            tokio::time::sleep(PAUSE).await;
                        }
                    }
                    Some(Err(_)) => {
                        counts.add("error");
                        tokio::time::sleep(PAUSE).await;
                    }
                }
            }
        });
    }
    tasks.join_all().await;
    let done = counts.get("replayed to live");
    format!(
        "{REPLAYERS} replayers: {} ({:.1} replays/s, {:.0} MB read)",
        counts.words(),
        done as f64 / started.elapsed().as_secs_f64(),
        bytes.load(Ordering::Relaxed) as f64 / 1e6
    )
}

async fn storm(ctx: &Arc<Ctx>, stop: watch::Receiver<bool>) -> String {
    let counts = Arc::new(Counts::default());
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..STORM_REGIONS {
        let (ctx, counts, slowest, mut stop) = (ctx.clone(), counts.clone(), slowest.clone(), stop.clone());
        tasks.spawn(async move {
            let address = format!("storm-{i}:1");
            // One incarnation: every session after the first is a reconnect.
            let incarnation = 1;
            loop {
                let at = Instant::now();
                match until_stop(&mut stop, raw::registered(&ctx.base, &address, incarnation)).await {
                    None => break,
                    Some(Ok(socket)) => {
                        counts.add("registered");
                        let mut slowest = slowest.lock().unwrap_or_else(|e| e.into_inner());
                        *slowest = (*slowest).max(at.elapsed());
                        drop(socket);
                    }
                    Some(Err(error)) => {
                        counts.add(format!("failed ({})", short(&error.to_string())));
                        tokio::time::sleep(PAUSE).await;
                    }
                }
            }
            // After the storm the region stays, heartbeating.
            for _ in 0..20 {
                if let Ok(socket) = raw::registered(&ctx.base, &address, incarnation).await {
                    let keeper = raw::keeper(
                        ctx.base.clone(),
                        address,
                        incarnation,
                        socket,
                        ctx.end.subscribe(),
                        ctx.keeper_stats.clone(),
                    );
                    ctx.keepers.lock().unwrap_or_else(|e| e.into_inner()).spawn(keeper);
                    return;
                }
                tokio::time::sleep(PAUSE * 5).await;
            }
            counts.add("not kept after the storm");
        });
    }
    tasks.join_all().await;
    let registered = counts.get("registered");
    let slowest = *slowest.lock().unwrap_or_else(|e| e.into_inner());
    format!(
        "{STORM_REGIONS} regions reconnecting: {} ({:.0} registrations/s, slowest connect-to-Registered {:.2} s)",
        counts.words(),
        registered as f64 / started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    )
}

fn short(text: &str) -> String {
    text.chars().take(60).collect()
}

/// The body of a write of `PER_POST` placements from shard `first` on.
pub fn placements_body(first: u64, count: u64, total: u64, target: &str) -> String {
    let mut body = String::with_capacity(count as usize * 48);
    body.push_str("{\"placements\":[");
    for k in 0..count {
        if k > 0 {
            body.push(',');
        }
        let _ = write!(body, "{{\"shardId\":\"p-{}\",\"target\":\"{target}\"}}", (first + k) % total.max(1));
    }
    body.push_str("]}");
    body
}

async fn posts(ctx: &Arc<Ctx>, stop: watch::Receiver<bool>) -> String {
    let counts = Arc::new(Counts::default());
    let slowest = Arc::new(Mutex::new(Duration::ZERO));
    let started = Instant::now();
    let per_post = PER_POST.min(ctx.placements.max(1));
    let mut tasks = JoinSet::new();
    for task in 0..WRITERS as u64 {
        let (ctx, counts, slowest, mut stop) = (ctx.clone(), counts.clone(), slowest.clone(), stop.clone());
        tasks.spawn(async move {
            let url = format!("{}/v1/cluster/shards/{TYPE}/placements", ctx.base);
            for round in 0u64.. {
                let first = (task + WRITERS as u64 * round) * per_post;
                let target = format!("target-{}.bench:2552", (round + task) % 64);
                let body = placements_body(first, per_post, ctx.placements, &target);
                let at = Instant::now();
                let write = async {
                    let response = authed(ctx.http.post(&url))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    let status = response.status();
                    response.bytes().await?;
                    Ok::<_, reqwest::Error>(status)
                };
                let Some(outcome) = until_stop(&mut stop, write).await else { return };
                tally(outcome, at, &counts, &slowest).await;
            }
        });
    }
    tasks.join_all().await;
    let ok = counts.get("200");
    let slowest = *slowest.lock().unwrap_or_else(|e| e.into_inner());
    format!(
        "{WRITERS} writers of {per_post}: {} ({:.0} placements/s written, slowest POST {:.1} s)",
        counts.words(),
        (ok * per_post) as f64 / started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    )
}

async fn burst(ctx: &Arc<Ctx>, mut stop: watch::Receiver<bool>) -> Outcome {
    const ADDRESS: &str = "burst-region:1";
    let started = Instant::now();
    let socket = match raw::registered(&ctx.base, ADDRESS, 1).await {
        Ok(socket) => socket,
        Err(error) => return Outcome { figures: format!("the burst region could not register: {error}"), ended: None },
    };
    let (mut sink, mut stream) = socket.split();
    let (frames, mut outgoing) = mpsc::channel::<RegionMessage>(1024);
    let writer = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if sink.feed(raw::frame(&message)).await.is_err() {
                return;
            }
            if outgoing.is_empty() && sink.flush().await.is_err() {
                return;
            }
        }
    });
    let total = ctx.burst;
    let sender = {
        let frames = frames.clone();
        tokio::spawn(async move {
            for i in 0..total {
                if frames.send(RegionMessage::GetShardHome { shard: format!("burst-{i}") }).await.is_err() {
                    return;
                }
            }
        })
    };
    // Heartbeats every second, queued behind whatever the burst has queued.
    let sent_at = Arc::new(Mutex::new(BTreeMap::<u64, Instant>::new()));
    let heartbeats = {
        let (frames, sent_at) = (frames.clone(), sent_at.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for sequence in 2u64.. {
                tick.tick().await;
                sent_at.lock().unwrap_or_else(|e| e.into_inner()).insert(sequence, Instant::now());
                let heartbeat = RegionMessage::Heartbeat { sequence, metrics: Default::default() };
                if frames.send(heartbeat).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut answered = 0u64;
    let mut refused = 0u64;
    let mut slowest_ack = Duration::ZERO;
    let mut others = Counts::default();
    let mut ended = None;
    let reason = loop {
        let next = tokio::select! {
            _ = stop.changed() => break "stopped at the load's time limit".to_owned(),
            next = stream.next() => next,
        };
        let Some(Ok(frame)) = next else { break format!("the session ended: {next:?}") };
        let Some(message) = raw::node_message(&frame) else { continue };
        if let Some(reply) = raw::answer(&message) {
            // Never wait here: the node holds back its answers until this
            // reads, and the queue may be full of lookups.
            let frames = frames.clone();
            tokio::spawn(async move { frames.send(reply).await });
        }
        match message {
            NodeMessage::ShardHome { .. } | NodeMessage::ShardHomeEpoch { .. } => answered += 1,
            NodeMessage::ShardRefused { .. } => refused += 1,
            NodeMessage::HeartbeatAck { sequence, .. } => {
                if let Some(at) = sent_at.lock().unwrap_or_else(|e| e.into_inner()).remove(&sequence) {
                    slowest_ack = slowest_ack.max(at.elapsed());
                }
            }
            other => others.add(format!("{other:?}").split([' ', '{']).next().unwrap_or("?").to_owned()),
        }
        if answered + refused >= total && ended.is_none() {
            ended = Some(Instant::now());
            break "every lookup answered".to_owned();
        }
    };
    sender.abort();
    heartbeats.abort();
    writer.abort();
    let took = ended.map_or_else(|| started.elapsed(), |at| at.duration_since(started));
    let others = std::mem::take(&mut others).words();
    let figures = format!(
        "one region, {total} lookups pipelined: {answered} answered, {refused} refused in {:.1} s ({:.0}/s; {reason}); \
         its own slowest heartbeat ack {:.2} s; other messages: {others}",
        took.as_secs_f64(),
        (answered + refused) as f64 / took.as_secs_f64(),
        slowest_ack.as_secs_f64(),
    );
    // The burst region then stays, heartbeating, until the end of the run.
    if let Ok(socket) = raw::registered(&ctx.base, ADDRESS, 1).await {
        let keeper =
            raw::keeper(ctx.base.clone(), ADDRESS.to_owned(), 1, socket, ctx.end.subscribe(), ctx.keeper_stats.clone());
        ctx.keepers.lock().unwrap_or_else(|e| e.into_inner()).spawn(keeper);
    }
    Outcome { figures, ended }
}
