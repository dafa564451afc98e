//! What is measured: the reference region, a real region of the client
//! crate (`Region::start`) that heartbeats as usual and asks the home of a
//! new shard `rate` times a second, each answer's latency recorded with
//! when it was asked; and the watcher, which reads the node's decision
//! events (`GET /v1/events`) and keeps every region event (unreachable,
//! gone) and every `missed`.
//!
//! Both run on their own runtime (their own threads), so the loads' tasks
//! never queue ahead of them in the load generator.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardalloc_client::admin::AdminClient;
use shardalloc_client::api::EventKind;
use shardalloc_client::region::{Application, InMemoryTransport, Region, RegionConfig, RegionHandle, Update};

use crate::node::{ADMIN_TOKEN, TYPE};

/// The reference region's address.
pub const REFERENCE: &str = "reference-region:1";

/// How long one home answer may take before it counts as failed.
const HOME_TIMEOUT: Duration = Duration::from_secs(60);

/// One home question.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was asked.
    pub asked: Instant,
    /// How long the answer took; `None`: an error or no answer within [`HOME_TIMEOUT`].
    pub took: Option<Duration>,
    /// The shard asked.
    pub shard: String,
}

/// A region event the watcher saw.
#[derive(Debug, Clone)]
pub struct RegionEvent {
    /// When the watcher read it.
    pub seen: Instant,
    /// `region-gone`, `region-unreachable`, `region-reachable`, `missed`.
    pub kind: EventKind,
    /// The region (none for `missed`).
    pub region: String,
    /// Why (`heartbeat timeout`, `left`), or how many were missed.
    pub cause: String,
}

/// What the reference region's updates told.
#[derive(Debug, Clone)]
pub struct RegionUpdate {
    /// When.
    pub at: Instant,
    /// The update, in words.
    pub what: String,
}

/// Everything recorded, shared with the report.
#[derive(Default)]
pub struct Recorder {
    /// Every home question.
    pub samples: Mutex<Vec<Sample>>,
    /// Region events and `missed`.
    pub events: Mutex<Vec<RegionEvent>>,
    /// The reference region's updates other than shards starting and
    /// stopping and placements changing (registrations, disconnections,
    /// refusals, fencing).
    pub updates: Mutex<Vec<RegionUpdate>>,
    /// The reference runtime's own lag: how late a 10 ms timer fired, with
    /// when. Large values mean the load generator, not the node, was slow.
    pub lag: Mutex<Vec<(Instant, Duration)>>,
}

struct Quiet;

impl Application for Quiet {
    type Message = ();
    type Reply = ();
    async fn start_shard(&self, _shard: &str) {}
    async fn stop_shard(&self, _shard: &str) {}
    async fn deliver(&self, _shard: &str, _message: ()) {}
}

/// The reference region and the watcher, on their own runtime.
pub struct Reference {
    runtime: Option<tokio::runtime::Runtime>,
    /// What they recorded.
    pub recorder: Arc<Recorder>,
}

impl Reference {
    /// Starts the watcher, then the reference region (registered before
    /// this returns), asking `rate` homes a second.
    pub fn start(base: &str, rate: u32) -> anyhow::Result<Reference> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("reference")
            .enable_all()
            .build()?;
        let recorder = Arc::new(Recorder::default());
        let admin = AdminClient::new(base, Some(ADMIN_TOKEN.to_owned()))?;
        runtime.spawn(watch(admin, recorder.clone()));
        let config = RegionConfig::new(base, TYPE, REFERENCE);
        let region = runtime.block_on(async {
            let region = Region::start(config, Quiet, InMemoryTransport::new())?;
            tokio::time::timeout(Duration::from_secs(60), region.wait_registered()).await??;
            anyhow::Ok(region)
        })?;
        runtime.spawn(follow(region.clone(), recorder.clone()));
        runtime.spawn(lag(recorder.clone()));
        runtime.spawn(ask(region, rate, recorder.clone()));
        Ok(Reference { runtime: Some(runtime), recorder })
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn ask(region: RegionHandle<()>, rate: u32, recorder: Arc<Recorder>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for n in 0u64.. {
        tick.tick().await;
        let region = region.clone();
        let recorder = recorder.clone();
        tokio::spawn(async move {
            let shard = format!("ref-{n}");
            let asked = Instant::now();
            let answer = tokio::time::timeout(HOME_TIMEOUT, region.home_of(&shard)).await;
            let took = matches!(answer, Ok(Ok(_))).then(|| asked.elapsed());
            recorder.samples.lock().unwrap_or_else(|e| e.into_inner()).push(Sample { asked, took, shard });
        });
    }
}

async fn lag(recorder: Arc<Recorder>) {
    const PERIOD: Duration = Duration::from_millis(10);
    loop {
        let at = Instant::now();
        tokio::time::sleep(PERIOD).await;
        let late = at.elapsed().saturating_sub(PERIOD);
        recorder.lag.lock().unwrap_or_else(|e| e.into_inner()).push((at, late));
    }
}

async fn follow(region: RegionHandle<()>, recorder: Arc<Recorder>) {
    let mut updates = region.updates();
    loop {
        let what = match updates.recv().await {
            Ok(
                Update::HomeChanged { .. }
                | Update::ShardStarted { .. }
                | Update::ShardStopped { .. }
                | Update::PlacementChanged { .. },
            ) => continue,
            Ok(update) => format!("{update:?}"),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => format!("lagged {n}"),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if what.starts_with("lagged") {
            continue;
        }
        recorder.updates.lock().unwrap_or_else(|e| e.into_inner()).push(RegionUpdate { at: Instant::now(), what });
    }
}

async fn watch(admin: AdminClient, recorder: Arc<Recorder>) {
    let mut last: Option<String> = None;
    loop {
        let mut stream = match admin.events(Some(TYPE), last.as_deref()).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Ok(Some(streamed)) = stream.next().await {
            if streamed.id.is_some() {
                last = streamed.id.clone();
            }
            let event = streamed.event;
            let cause = match event.kind {
                EventKind::RegionGone | EventKind::RegionUnreachable | EventKind::RegionReachable => {
                    event.cause.clone().unwrap_or_default()
                }
                EventKind::Missed => event.missed.unwrap_or(0).to_string(),
                _ => continue,
            };
            recorder.events.lock().unwrap_or_else(|e| e.into_inner()).push(RegionEvent {
                seen: Instant::now(),
                kind: event.kind,
                region: event.region.unwrap_or_default(),
                cause,
            });
        }
    }
}
