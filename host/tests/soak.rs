//! The soak of the real node, run by `cargo xtask soak --minutes N` (this
//! test is ignored otherwise): the `shardalloc` binary, a probe region that
//! never churns, and up to eight more regions, each behind a TCP proxy the
//! soak can cut. Every second, one churn action — a region joins, leaves,
//! crashes (its connection cut: it keeps its shards until its lease runs
//! out), a region is drained or undrained, a placement set or removed,
//! shards rebalanced, the strategy swapped or rolled back — while traffic
//! flows to 400 shards and the probe region asks where shards live.
//!
//! Checked all along: no shard ever runs on two regions (the journal every
//! region's application writes to), and every home the probe asks for is
//! answered (within 30 s). Every 5 s a sample: the node's resident memory,
//! its open file descriptors, regions, homes, the strategy fallbacks and
//! deadline faults — written to `soak.csv` and drawn in `soak.png` under
//! `SHARDALLOC_SOAK_DIR` (default `target/tmp/soak/`). At the end, memory
//! must not have grown more than 10% after the first fifth of the run (at
//! most its first 5 minutes).

mod node;
#[path = "soak/plot.rs"]
mod plot;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shardalloc_client::api::ActivateRequest;
use shardalloc_client::region::{InMemoryTransport, RegionHandle};

use node::{Journal, Msg, Node, Proxy, fast_args, region_config, registered};

/// Region slots besides the probe region.
const SLOTS: usize = 8;
/// Shards traffic goes to: "1" … "400".
const SHARDS: u64 = 400;
/// How long a home request may take before it counts as unanswered.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Memory may grow by this share after the baseline.
const MAX_GROWTH: f64 = 0.10;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

struct Slot {
    address: String,
    proxy: Proxy,
    region: Option<RegionHandle<Msg>>,
    /// Cut off at this time: shut down and emptied once its lease is surely gone.
    crashed: Option<Instant>,
    /// The last region's leave or shutdown: the address is reused only once
    /// it ended (a region's address is one process at a time).
    ending: Option<tokio::task::JoinHandle<()>>,
}

impl Slot {
    fn free(&self) -> bool {
        self.region.is_none() && self.ending.as_ref().is_none_or(|e| e.is_finished())
    }
}

#[derive(Default)]
struct Probes {
    asked: AtomicU64,
    answered: AtomicU64,
    unanswered: AtomicU64,
    slowest_ms: AtomicU64,
}

fn proc_status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or("");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// The sum of a metric's samples whose line contains `filter`.
fn metric_sum(text: &str, name: &str, filter: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn soak() {
    let minutes: f64 = std::env::var("SHARDALLOC_SOAK_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(1.0);
    let out = std::env::var_os("SHARDALLOC_SOAK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak"));
    std::fs::create_dir_all(&out).unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    eprintln!("soak: {minutes} min, seed {seed}, output in {}", out.display());

    let node = Node::start(&fast_args(&[])).await;
    let pid = node.pid();
    let admin = node.admin();
    let journal = Journal::default();
    let network = InMemoryTransport::default();
    let probe = node.region("cart", "probe", &journal, &network, |_| {});
    registered(&probe).await;
    let mut slots = Vec::new();
    for i in 0..SLOTS {
        let proxy = Proxy::start(node.addr).await;
        slots.push(Slot { address: format!("r{i}"), proxy, region: None, crashed: None, ending: None });
    }
    let start_region = |slot: &mut Slot| {
        slot.proxy.heal();
        let config = region_config(&slot.proxy.base(), "cart", &slot.address);
        let region = shardalloc_client::region::Region::start(config, journal.app(&slot.address), network.clone())
            .expect("start a region");
        slot.region = Some(region);
        slot.crashed = None;
    };
    for slot in slots.iter_mut().take(5) {
        start_region(slot);
    }

    let probes = Arc::new(Probes::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(minutes * 60.0);
    let mut csv =
        String::from("seconds,rss_kib,fds,regions,homes,fallbacks,deadline_faults,asked,answered,unanswered,actions\n");
    let mut samples: Vec<(f64, f64, f64, f64, f64)> = Vec::new();
    let mut actions: u64 = 0;
    let mut next_sample = started;
    let mut hash_active = false;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < deadline {
        ticker.tick().await;
        // Traffic from live regions to random shards.
        let live: Vec<RegionHandle<Msg>> =
            slots.iter().filter(|s| s.crashed.is_none()).filter_map(|s| s.region.clone()).collect();
        for n in 0..20 {
            if let Some(region) = live.get(rng.below(live.len() as u64) as usize) {
                let _ = region.send(&(1 + rng.below(SHARDS)).to_string(), Msg::new(region.address(), n));
            }
        }
        // Home requests the node must answer.
        for _ in 0..3 {
            let shard = (1 + rng.below(SHARDS)).to_string();
            let (probe, probes) = (probe.clone(), probes.clone());
            probes.asked.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let asked = Instant::now();
                match tokio::time::timeout(ANSWER_WITHIN, probe.home_of(&shard)).await {
                    Ok(Ok(_)) => {
                        probes.answered.fetch_add(1, Ordering::Relaxed);
                        probes.slowest_ms.fetch_max(asked.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                    Ok(Err(error)) => {
                        eprintln!("soak: home of {shard}: {error}");
                        probes.unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        eprintln!("soak: home of {shard}: no answer within {ANSWER_WITHIN:?}");
                        probes.unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // Crashed regions are shut down and emptied once their lease is gone.
        for slot in slots.iter_mut() {
            if slot.crashed.is_some_and(|at| at.elapsed() > Duration::from_secs(8))
                && let Some(region) = slot.region.take()
            {
                slot.ending = Some(tokio::spawn(region.shutdown()));
                slot.crashed = None;
            }
        }
        // One churn action.
        actions += 1;
        let i = rng.below(SLOTS as u64) as usize;
        let shard = (1 + rng.below(SHARDS)).to_string();
        match rng.below(10) {
            0 | 1 => {
                if let Some(slot) = slots.iter_mut().find(|s| s.free()) {
                    start_region(slot);
                }
            }
            2 => {
                if slots[i].crashed.is_none()
                    && let Some(region) = slots[i].region.take()
                {
                    slots[i].ending = Some(tokio::spawn(async move {
                        let _ = region.leave().await;
                    }));
                }
            }
            3 => {
                if slots[i].region.is_some() && slots[i].crashed.is_none() {
                    slots[i].proxy.cut();
                    slots[i].crashed = Some(Instant::now());
                }
            }
            4 => {
                let address = slots[i].address.clone();
                let _ = if rng.below(2) == 0 { admin.drain(&address).await } else { admin.undrain(&address).await };
            }
            5 => {
                let _ = admin.set_placement("cart", &shard, &slots[i].address).await;
            }
            6 => {
                let _ = admin.remove_placement("cart", &shard).await;
            }
            7 => {
                let other = (1 + rng.below(SHARDS)).to_string();
                let _ = admin.rebalance("cart", &[shard.as_str(), other.as_str()], rng.below(2) == 0).await;
            }
            8 => {
                let strategy = if hash_active { "least-shard" } else { "hash" };
                let request = ActivateRequest { strategy: strategy.into(), config: None, force: true };
                if admin.activate("cart", &request).await.is_ok() {
                    hash_active = !hash_active;
                }
            }
            _ => {
                if admin.rollback("cart").await.is_ok() {
                    hash_active = !hash_active;
                }
            }
        }
        let overlaps = journal.overlaps();
        assert!(overlaps.is_empty(), "a shard ran on two regions at once: {overlaps:?}");
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(5);
            let seconds = started.elapsed().as_secs_f64();
            let rss = proc_status(pid, "VmRSS:") as f64;
            let fds = open_fds(pid) as f64;
            let metrics = node.http().get(node.url("/metrics")).send().await.unwrap().text().await.unwrap();
            let fallbacks = metric_sum(&metrics, "shardalloc_fallbacks_total", "") + 0.0;
            let deadlines = metric_sum(&metrics, "shardalloc_fallbacks_total", "deadline") + 0.0;
            let state = admin.type_state("cart").await.unwrap();
            let homes: usize = state.regions.iter().map(|r| r.shards.len()).sum();
            let (asked, answered, unanswered) = (
                probes.asked.load(Ordering::Relaxed),
                probes.answered.load(Ordering::Relaxed),
                probes.unanswered.load(Ordering::Relaxed),
            );
            writeln!(
                csv,
                "{seconds:.0},{rss},{fds},{},{homes},{fallbacks},{deadlines},{asked},{answered},{unanswered},{actions}",
                state.regions.len()
            )
            .unwrap();
            std::fs::write(out.join("soak.csv"), &csv).unwrap();
            samples.push((seconds, rss, fds, homes as f64, fallbacks));
            eprintln!(
                "soak: {:>5.0}/{:.0} s  rss {:.1} MiB  fds {fds}  regions {}  homes {homes}  probes {answered}/{asked} answered, {unanswered} not  actions {actions}",
                seconds,
                minutes * 60.0,
                rss / 1024.0,
                state.regions.len()
            );
            assert_eq!(unanswered, 0, "home requests went unanswered");
        }
    }
    // Let the last probes finish.
    tokio::time::sleep(ANSWER_WITHIN).await;
    assert!(journal.overlaps().is_empty(), "a shard ran on two regions at once: {:?}", journal.overlaps());
    let (asked, answered, unanswered) = (
        probes.asked.load(Ordering::Relaxed),
        probes.answered.load(Ordering::Relaxed),
        probes.unanswered.load(Ordering::Relaxed),
    );
    let series = |pick: fn(&(f64, f64, f64, f64, f64)) -> f64| samples.iter().map(|s| (s.0, pick(s))).collect();
    plot::plot(
        &out.join("soak.png"),
        &[
            ("rss", series(|s| s.1)),
            ("fds", series(|s| s.2)),
            ("homes", series(|s| s.3)),
            ("fallbacks", series(|s| s.4)),
        ],
    )
    .unwrap();
    // Memory after the warm-up (a fifth of the run, at most 5 minutes) against the end.
    let warm = (minutes * 60.0 / 5.0).min(300.0);
    let baseline = samples.iter().find(|s| s.0 >= warm).map_or(0.0, |s| s.1);
    let last = samples.last().map_or(0.0, |s| s.1);
    let peak = samples.iter().filter(|s| s.0 >= warm).map(|s| s.1).fold(0.0, f64::max);
    let growth = if baseline > 0.0 { (last - baseline) / baseline } else { 0.0 };
    let summary = format!(
        "soak: {minutes} min, {actions} churn actions; home requests: {asked} asked, {answered} answered, {unanswered} unanswered, slowest {} ms; \
         rss after warm-up {:.1} MiB, at the end {:.1} MiB ({:+.1}%), peak {:.1} MiB; fds at the end {}; no shard on two regions",
        probes.slowest_ms.load(Ordering::Relaxed),
        baseline / 1024.0,
        last / 1024.0,
        growth * 100.0,
        peak / 1024.0,
        samples.last().map_or(0.0, |s| s.2),
    );
    std::fs::write(out.join("summary.txt"), format!("{summary}\n")).unwrap();
    eprintln!("{summary}");
    assert_eq!(unanswered, 0, "home requests went unanswered");
    assert_eq!(asked, answered, "home requests still unanswered at the end");
    assert!(growth < MAX_GROWTH, "memory grew {:.1}% after the warm-up", growth * 100.0);
}
