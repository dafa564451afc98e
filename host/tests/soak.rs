//! The soak of the real node, run by `cargo xtask soak --minutes N [--etcd]`
//! (this test is ignored otherwise): the `shardalloc` binary, a probe
//! region that never churns, and up to eight more regions. Every second,
//! one churn action — a region joins, leaves, crashes, a region is drained
//! or undrained, a placement set or removed, shards rebalanced, the
//! strategy swapped or rolled back — while traffic flows to 400 shards and
//! the probe region asks where shards live.
//!
//! On one node (its redb store), each region sits behind a TCP proxy and a
//! crash cuts it: the region keeps its shards until its lease runs out.
//! With `SHARDALLOC_SOAK_ETCD=1`, three nodes run on a real etcd and every
//! `SHARDALLOC_SOAK_KILL_EVERY_S` seconds (default 60) the leader is
//! SIGKILLed and started again 5 s later; regions follow redirects to the
//! leader (past any proxy), so a crash there is a region stopping without
//! leaving.
//!
//! Checked all along: no shard ever runs on two regions (the journal every
//! region's application writes to), and every home the probe asks for is
//! answered (within 30 s). At the end: every acknowledged placement call
//! holds in the store ([`ledger`]). Every 5 s a sample: resident memory and
//! open file descriptors (summed over the running nodes), regions, homes,
//! the strategy fallbacks and deadline faults of the leader, leader kills —
//! written to `soak.csv` under `SHARDALLOC_SOAK_DIR` (default
//! `target/tmp/soak/`), and every churn event as it happens (the run itself
//! first, then each region joining, leaving, crashing, drained or
//! undrained, each strategy swap, leader kill and node restart) to
//! `events.csv` beside it. `cargo xtask soak` draws both in `soak.png`
//! (`xtask/src/soak_plot.rs`). On one node, memory must not have grown
//! more than 10% after the first fifth of the run (at most its first 5
//! minutes); on etcd, memory is reported, not judged (a node's memory steps
//! when it becomes leader, and a killed node starts from nothing).

use crate::etcd;
#[path = "soak/fleet.rs"]
mod fleet;
#[path = "soak/ledger.rs"]
mod ledger;
use crate::node;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shardalloc_client::region::{InMemoryTransport, Region, RegionHandle};
use shardalloc_proto::api::ActivateRequest;

use fleet::Fleet;
use ledger::Ledger;
use node::{Journal, Msg, Proxy, region_config, registered};

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
    /// The cuttable way to the node (one node only: on etcd, regions
    /// follow redirects to the leader's own URL).
    proxy: Option<Proxy>,
    region: Option<RegionHandle<Msg, String>>,
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

/// The churn events as they happen, as `events.csv`: `seconds,event,detail`.
struct Events {
    started: Instant,
    csv: String,
}

impl Events {
    fn new(started: Instant) -> Events {
        Events { started, csv: String::from("seconds,event,detail\n") }
    }

    /// One event now: `kind` one word, `detail` free text (the last column).
    fn add(&mut self, kind: &str, detail: &str) {
        writeln!(self.csv, "{:.1},{kind},{detail}", self.started.elapsed().as_secs_f64()).unwrap();
    }
}

/// One sample of the nodes, every 5 s, as the end judges it: resident
/// memory (KiB) and open descriptors summed over the running nodes (the
/// CSV has every column).
struct Sample {
    seconds: f64,
    rss: f64,
    fds: f64,
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
        .fold(0.0, |sum, v| sum + v) // not `sum()`: that of nothing is -0
}

fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name).ok().and_then(|m| m.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn soak() {
    let minutes = env_number("SHARDALLOC_SOAK_MINUTES", 1.0);
    let on_etcd = std::env::var("SHARDALLOC_SOAK_ETCD").is_ok_and(|v| v == "1");
    let kill_every = Duration::from_secs_f64(env_number("SHARDALLOC_SOAK_KILL_EVERY_S", 60.0).max(10.0));
    let out = std::env::var_os("SHARDALLOC_SOAK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak"));
    std::fs::create_dir_all(&out).unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = Rng(seed);
    let backend = if on_etcd {
        format!("three nodes on etcd, the leader killed every {} s", kill_every.as_secs())
    } else {
        "one node on its redb store".into()
    };
    eprintln!("soak: {minutes} min, {backend}, seed {seed}, output in {}", out.display());

    let mut fleet = if on_etcd { Fleet::on_etcd().await } else { Fleet::one().await };
    let journal = Journal::default();
    let network = InMemoryTransport::default();
    let probe = Region::start(region_config(&fleet.urls(), "cart", "probe"), journal.app("probe"), network.clone())
        .expect("start the probe region");
    registered(&probe).await;
    let mut slots = Vec::new();
    for i in 0..SLOTS {
        let proxy = if on_etcd { None } else { Some(Proxy::start(fleet.nodes[0].addr).await) };
        slots.push(Slot { address: format!("r{i}"), proxy, region: None, crashed: None, ending: None });
    }
    let urls = fleet.urls();
    let start_region = |slot: &mut Slot| {
        let base = match &slot.proxy {
            Some(proxy) => {
                proxy.heal();
                proxy.base()
            }
            None => urls.clone(),
        };
        let config = region_config(&base, "cart", &slot.address);
        let region = Region::start(config, journal.app(&slot.address), network.clone()).expect("start a region");
        slot.region = Some(region);
        slot.crashed = None;
    };
    let started = Instant::now();
    let mut events = Events::new(started);
    events.add("start", &backend);
    for slot in slots.iter_mut().take(5) {
        start_region(slot);
        events.add("join", &slot.address);
    }

    let probes = Arc::new(Probes::default());
    let mut ledger = Ledger::default();
    let deadline = started + Duration::from_secs_f64(minutes * 60.0);
    let mut csv = String::from(
        "seconds,rss_kib,fds,regions,homes,fallbacks,deadline_faults,asked,answered,unanswered,actions,leader,kills\n",
    );
    let mut samples: Vec<Sample> = Vec::new();
    let mut actions: u64 = 0;
    let mut next_sample = started;
    let mut next_kill = started + kill_every;
    let (mut regions, mut homes) = (0usize, 0usize);
    let mut hash_active = false;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < deadline {
        ticker.tick().await;
        // Traffic from live regions to random shards.
        let live: Vec<RegionHandle<Msg, String>> =
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
        // The leader's death, and its return.
        for restarted in fleet.restart_due().await {
            events.add("restart", &format!("n{restarted}"));
        }
        if on_etcd && Instant::now() >= next_kill {
            next_kill += kill_every;
            if let Some(killed) = fleet.kill_leader().await {
                events.add("kill", &format!("n{killed}"));
                eprintln!("soak: killed the leader n{killed} (kill {})", fleet.kills);
            }
        }
        // One churn action, through any running node.
        actions += 1;
        let admin = fleet.admin(rng.below(u64::MAX));
        let i = rng.below(SLOTS as u64) as usize;
        let shard = (1 + rng.below(SHARDS)).to_string();
        match rng.below(10) {
            0 | 1 => {
                if let Some(slot) = slots.iter_mut().find(|s| s.free()) {
                    start_region(slot);
                    events.add("join", &slot.address);
                }
            }
            2 => {
                if slots[i].crashed.is_none()
                    && let Some(region) = slots[i].region.take()
                {
                    slots[i].ending = Some(tokio::spawn(async move {
                        let _ = region.leave().await;
                    }));
                    events.add("leave", &slots[i].address);
                }
            }
            3 => {
                let slot = &mut slots[i];
                if slot.crashed.is_none() && slot.region.is_some() {
                    match &slot.proxy {
                        Some(proxy) => {
                            proxy.cut();
                            slot.crashed = Some(Instant::now());
                        }
                        None => slot.ending = slot.region.take().map(|region| tokio::spawn(region.shutdown())),
                    }
                    events.add("crash", &slot.address);
                }
            }
            4 => {
                let address = slots[i].address.clone();
                let (kind, answered) = if rng.below(2) == 0 {
                    ("drain", admin.drain(&address).await.is_ok())
                } else {
                    ("undrain", admin.undrain(&address).await.is_ok())
                };
                if answered {
                    events.add(kind, &address);
                }
            }
            5 => {
                let target = slots[i].address.clone();
                let acknowledged = admin.set_placement("cart", &shard, &target).await.is_ok();
                ledger.set(&shard, &target, acknowledged);
            }
            6 => {
                let acknowledged = admin.remove_placement("cart", &shard).await.is_ok();
                ledger.remove(&shard, acknowledged);
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
                    events.add("activate", strategy);
                }
            }
            _ => {
                if admin.rollback("cart").await.is_ok() {
                    hash_active = !hash_active;
                    events.add("rollback", if hash_active { "hash" } else { "least-shard" });
                }
            }
        }
        let overlaps = journal.overlaps();
        assert!(overlaps.is_empty(), "a shard ran on two regions at once: {overlaps:?}");
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(5);
            let seconds = started.elapsed().as_secs_f64();
            let running = fleet.nodes.iter().filter(|n| n.running());
            let rss: f64 = running.clone().map(|n| proc_status(n.pid(), "VmRSS:") as f64).sum();
            let fds: f64 = running.map(|n| open_fds(n.pid()) as f64).sum();
            let leader = fleet.leader().await;
            let metrics = match leader {
                Some(i) => fleet.metrics(i).await.unwrap_or_default(),
                None => String::new(),
            };
            let fallbacks = metric_sum(&metrics, "shardalloc_fallbacks_total", "");
            let deadlines = metric_sum(&metrics, "shardalloc_fallbacks_total", "deadline");
            // Through a node that may be a follower whose leader just died:
            // the last figures stand until the next answer.
            if let Ok(state) = fleet.admin(rng.below(u64::MAX)).type_state_page("cart", None, Some(1)).await {
                regions = state.regions.len();
                homes = state.regions.iter().map(|r| r.shard_count).sum();
            }
            let (asked, answered, unanswered) = (
                probes.asked.load(Ordering::Relaxed),
                probes.answered.load(Ordering::Relaxed),
                probes.unanswered.load(Ordering::Relaxed),
            );
            let leader_column = leader.map_or(String::from("none"), |i| format!("n{i}"));
            writeln!(
                csv,
                "{seconds:.0},{rss},{fds},{regions},{homes},{fallbacks},{deadlines},{asked},{answered},{unanswered},{actions},{leader_column},{}",
                fleet.kills
            )
            .unwrap();
            std::fs::write(out.join("soak.csv"), &csv).unwrap();
            std::fs::write(out.join("events.csv"), &events.csv).unwrap();
            samples.push(Sample { seconds, rss, fds });
            eprintln!(
                "soak: {:>5.0}/{:.0} s  rss {:.1} MiB  fds {fds}  regions {regions}  homes {homes}  probes {answered}/{asked} answered, {unanswered} not  actions {actions}  leader {leader_column}  kills {}",
                seconds,
                minutes * 60.0,
                rss / 1024.0,
                fleet.kills
            );
            assert_eq!(unanswered, 0, "home requests went unanswered");
        }
    }
    // Every node up again; let the last probes finish.
    if on_etcd {
        tokio::time::sleep(Duration::from_secs(6)).await;
        for restarted in fleet.restart_due().await {
            events.add("restart", &format!("n{restarted}"));
        }
    }
    std::fs::write(out.join("events.csv"), &events.csv).unwrap();
    tokio::time::sleep(ANSWER_WITHIN).await;
    assert!(journal.overlaps().is_empty(), "a shard ran on two regions at once: {:?}", journal.overlaps());
    let (asked, answered, unanswered) = (
        probes.asked.load(Ordering::Relaxed),
        probes.answered.load(Ordering::Relaxed),
        probes.unanswered.load(Ordering::Relaxed),
    );
    // Every acknowledged placement call holds.
    let admin = fleet.admin(0);
    let stored = node::wait_for("the placements to be readable", Duration::from_secs(60), async || {
        admin.placements("cart").await.ok()
    })
    .await;
    let stored = stored.placements.into_iter().map(|p| (p.shard_id.to_string(), p.target)).collect();
    let (known, lost) = ledger.check(&stored);

    // Memory after the warm-up (a fifth of the run, at most 5 minutes) against the end.
    let warm = (minutes * 60.0 / 5.0).min(300.0);
    let baseline = samples.iter().find(|s| s.seconds >= warm).map_or(0.0, |s| s.rss);
    let last = samples.last().map_or(0.0, |s| s.rss);
    let peak = samples.iter().filter(|s| s.seconds >= warm).map(|s| s.rss).fold(0.0, f64::max);
    let growth = if baseline > 0.0 { (last - baseline) / baseline } else { 0.0 };
    let summary = format!(
        "soak: {minutes} min, {backend}: {actions} churn actions, {} leader kills; home requests: {asked} asked, {answered} answered, \
         {unanswered} unanswered, slowest {} ms; {known} acknowledged placements checked, {} lost; \
         rss{} after warm-up {:.1} MiB, at the end {:.1} MiB ({:+.1}%{}), peak {:.1} MiB; fds at the end {}; no shard on two regions",
        fleet.kills,
        probes.slowest_ms.load(Ordering::Relaxed),
        lost.len(),
        if on_etcd { " (the running nodes' sum)" } else { "" },
        baseline / 1024.0,
        last / 1024.0,
        growth * 100.0,
        if on_etcd { ", not judged: nodes restart and change roles" } else { "" },
        peak / 1024.0,
        samples.last().map_or(0.0, |s| s.fds),
    );
    std::fs::write(out.join("summary.txt"), format!("{summary}\n")).unwrap();
    eprintln!("{summary}");
    assert!(lost.is_empty(), "acknowledged placement calls did not hold: {lost:?}");
    assert_eq!(unanswered, 0, "home requests went unanswered");
    assert_eq!(asked, answered, "home requests still unanswered at the end");
    if !on_etcd {
        assert!(growth < MAX_GROWTH, "memory grew {:.1}% after the warm-up", growth * 100.0);
    }
}
