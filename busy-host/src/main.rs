//! `busy-host`: the load generator of the busy-host benchmark (issue 23,
//! item 2). `cargo xtask busy-host` builds it and the node in release and
//! runs it pinned to the cores the node does not use.
//!
//! It starts the node (`shardalloc serve`, pinned to one core with
//! `taskset`, a fresh data directory), preloads the type `bench` with
//! placements (10,000 a write), starts the reference region
//! (`reference.rs`: a real region that heartbeats and asks the home of a
//! new shard `--rate` times a second, timing each answer) and the event
//! watcher, then runs each load (`loads.rs`) for `--duration` seconds and
//! watches `--settle` seconds more for regions removed. It prints one
//! table (load × home answer p50/p99/max, regions removed, the node's CPU,
//! the load's own counts) and writes it as Markdown to `--out`.
//!
//! The bar (issue 23): home-answer p99 ≤ 50 ms and no region removed under
//! every load.

mod loads;
mod node;
mod raw;
mod reference;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use shardalloc_client::api::EventKind;
use tokio::sync::watch;

use loads::{Ctx, LOADS, PER_POST};
use node::{ADMIN_TOKEN, Node, TYPE};
use reference::{REFERENCE, Recorder, Reference};

/// The bar a home answer's p99 must stay under.
const P99_BAR: Duration = Duration::from_millis(50);

#[derive(Parser, Debug)]
#[command(about = "The busy-host benchmark: a node pinned to one core under the second attack's loads")]
struct Args {
    /// The `shardalloc` binary (a release build).
    #[arg(long)]
    node_bin: PathBuf,
    /// The cores the node is pinned to (`taskset -c` list); `none`: not pinned.
    #[arg(long, default_value = "0")]
    node_cpus: String,
    /// A load to run (repeatable; default: every one, in order): idle,
    /// snapshots, replays, storm, posts, burst.
    #[arg(long = "load")]
    loads: Vec<String>,
    /// Seconds each load runs (the burst ends when answered).
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Seconds watched after each load for regions removed (past the
    /// node's removal timeout of 15 s).
    #[arg(long, default_value_t = 20)]
    settle: u64,
    /// Placements preloaded on the type.
    #[arg(long, default_value_t = 1_000_000)]
    placements: u64,
    /// Home lookups of the burst.
    #[arg(long, default_value_t = 120_000)]
    burst: u64,
    /// Home questions a second from the reference region.
    #[arg(long, default_value_t = 150)]
    rate: u32,
    /// Where the Markdown table goes.
    #[arg(long, default_value = "target/busy-host/results.md")]
    out: PathBuf,
}

/// One load's row.
struct Row {
    load: String,
    window: Duration,
    answered: usize,
    failed: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    removed: Vec<String>,
    cpu: f64,
    rss: f64,
    figures: String,
    notes: Vec<String>,
    /// The reference region was fenced, disconnected or registered again.
    troubled: bool,
}

impl Row {
    fn passed(&self) -> bool {
        self.p99 <= P99_BAR && self.removed.is_empty() && self.failed == 0 && self.answered > 0 && !self.troubled
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let selected: Vec<String> = if args.loads.is_empty() {
        LOADS.iter().map(|l| (*l).to_owned()).collect()
    } else {
        for load in &args.loads {
            if !LOADS.contains(&load.as_str()) {
                bail!("unknown load {load:?}; the loads: {}", LOADS.join(", "));
            }
        }
        LOADS.iter().filter(|l| args.loads.iter().any(|a| a == *l)).map(|l| (*l).to_owned()).collect()
    };
    let out_dir = args.out.parent().map(PathBuf::from).unwrap_or_default();
    std::fs::create_dir_all(&out_dir).with_context(|| format!("create {}", out_dir.display()))?;
    let data = tempfile::Builder::new().prefix("data-").tempdir_in(&out_dir)?;
    let cpus = (args.node_cpus != "none").then_some(args.node_cpus.as_str());
    let mut node = Node::start(&args.node_bin, cpus, data.path())?;
    eprintln!(
        "busy-host: node {} (pid {}) pinned to cores {}, data in {}",
        node.base,
        node.pid(),
        cpus.unwrap_or("(not pinned)"),
        data.path().display()
    );
    // The loads run at a lower priority than the reference region (its own
    // runtime): on the generator's shared core, the reference's answers
    // should be late only when the node is.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(lower_priority)
        .enable_all()
        .build()?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(300)).build()?;
    runtime.block_on(preload(&http, &node.base, args.placements))?;
    node.check_running()?;

    let reference = Reference::start(&node.base, args.rate).context("start the reference region")?;
    eprintln!("busy-host: the reference region {REFERENCE} is registered; asking {} homes a second", args.rate);
    std::thread::sleep(Duration::from_secs(3));
    let (end, _) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        base: node.base.clone(),
        http,
        placements: args.placements,
        burst: args.burst,
        keepers: Mutex::default(),
        keeper_stats: Arc::default(),
        end,
    });
    let mut rows = Vec::new();
    for load in &selected {
        let row = runtime.block_on(measure(load, &ctx, &node, &reference.recorder, &args))?;
        print_row(&row);
        rows.push(row);
        node.check_running()?;
    }
    let _ = ctx.end.send(true);
    let keeper_stats = &ctx.keeper_stats;
    let kept = format!(
        "regions kept after their load (storm, burst): {} sessions lost, {} NotRegistered",
        keeper_stats.sessions_lost.load(std::sync::atomic::Ordering::Relaxed),
        keeper_stats.not_registered.load(std::sync::atomic::Ordering::Relaxed)
    );
    drop(reference);
    let markdown = report(&rows, &args, cpus, &kept);
    println!("\n{markdown}");
    std::fs::write(&args.out, &markdown).with_context(|| format!("write {}", args.out.display()))?;
    eprintln!("busy-host: the table is in {}", args.out.display());
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(node);
    Ok(())
}

/// Lowers the calling thread's priority (`renice -n 10` on its thread id).
fn lower_priority() {
    if let Ok(path) = std::fs::read_link("/proc/thread-self")
        && let Some(tid) = path.file_name()
    {
        let _ = std::process::Command::new("renice").args(["-n", "10", "-p"]).arg(tid).output();
    }
}

/// Waits (at most 90 s) until the node uses under 30% of its core over 2 s:
/// what a load left queued is done before the next one starts.
async fn quiet(node: &Node) {
    let started = Instant::now();
    loop {
        let before = node.cpu();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let used = before.percent_until(&node.cpu());
        if used < 30.0 || started.elapsed() > Duration::from_secs(90) {
            if started.elapsed() > Duration::from_secs(3) {
                eprintln!(
                    "busy-host:   the node was busy {:.0} s more after the load ({used:.0}% at the end)",
                    started.elapsed().as_secs_f64()
                );
            }
            return;
        }
    }
}

/// The load generator's own CPU time in seconds (every thread).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    [11, 12].iter().filter_map(|i| fields.get(*i)?.parse::<f64>().ok()).sum::<f64>() / 100.0
}

/// Preloads `count` placements, `PER_POST` a write, with progress.
async fn preload(http: &reqwest::Client, base: &str, count: u64) -> anyhow::Result<()> {
    let url = format!("{base}/v1/cluster/shards/{TYPE}/placements");
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let n = PER_POST.min(count - done);
        let body = loads::placements_body(done, n, count, &format!("target-{}.bench:2552", (done / n) % 64));
        let response = http
            .post(&url)
            .bearer_auth(ADMIN_TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .context("preload POST")?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            bail!("preload: POST of placements {done}.. answered {status}: {text}");
        }
        done += n;
        let rate = done as f64 / started.elapsed().as_secs_f64();
        eprint!(
            "\rbusy-host: preload {done:>9} / {count} placements ({rate:>7.0}/s, {:>4.0} s left)   ",
            (count - done) as f64 / rate.max(1.0)
        );
    }
    eprintln!("\nbusy-host: preloaded {count} placements in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Runs one load with the reference region asking meanwhile; its row.
async fn measure(load: &str, ctx: &Arc<Ctx>, node: &Node, recorder: &Recorder, args: &Args) -> anyhow::Result<Row> {
    eprintln!("busy-host: load {load}: {} s, then {} s watched", args.duration, args.settle);
    let (stop, stopped) = watch::channel(false);
    let t0 = Instant::now();
    let cpu0 = node.cpu();
    let own0 = own_cpu_seconds();
    let name = load.to_owned();
    let ctx_for_load = ctx.clone();
    let mut task = tokio::spawn(async move { loads::run(&name, ctx_for_load, stopped).await });
    let limit = if load == "burst" {
        Duration::from_secs(args.duration.max(1) * 10)
    } else {
        Duration::from_secs(args.duration)
    };
    let mut outcome = None;
    let mut progress =
        tokio::time::interval_at(tokio::time::Instant::now() + Duration::from_secs(5), Duration::from_secs(5));
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        tokio::select! {
            done = &mut task, if outcome.is_none() => {
                outcome = Some(done.context("the load panicked")?);
                break;
            }
            _ = tokio::time::sleep_until(deadline) => break,
            _ = progress.tick() => {
                let (answered, p99) = window_stats(recorder, t0, Instant::now());
                eprintln!(
                    "busy-host:   {load} {:>4.0} s: {answered} homes answered, p99 so far {:.1} ms, node CPU {:.0}%",
                    t0.elapsed().as_secs_f64(),
                    p99.as_secs_f64() * 1e3,
                    cpu0.percent_until(&node.cpu())
                );
            }
        }
    }
    let t1 = outcome.as_ref().and_then(|o| o.ended).unwrap_or_else(Instant::now);
    let cpu1 = node.cpu();
    let own = 100.0 * (own_cpu_seconds() - own0) / t1.duration_since(t0).as_secs_f64().max(0.001);
    let _ = stop.send(true);
    let outcome = match outcome {
        Some(outcome) => outcome,
        None => match tokio::time::timeout(Duration::from_secs(120), &mut task).await {
            Ok(done) => done.context("the load panicked")?,
            Err(_) => {
                task.abort();
                loads::Outcome { figures: "did not stop within 120 s of its end".to_owned(), ended: None }
            }
        },
    };
    eprintln!("busy-host:   {load}: {}", outcome.figures);
    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    let watched_until = Instant::now();
    let rss = node.rss_mib();
    quiet(node).await;
    let mut row = row(load, recorder, t0, t1, watched_until, cpu0.percent_until(&cpu1), rss, outcome.figures);
    let mut lag: Vec<Duration> = recorder
        .lag
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(at, _)| *at >= t0 && *at <= t1)
        .map(|(_, late)| *late)
        .collect();
    lag.sort();
    row.notes.push(format!(
        "the load generator: {own:.0}% CPU; its reference runtime's timer lag p99 {}, max {}",
        ms(percentile(&lag, 0.99)),
        ms(lag.last().copied().unwrap_or_default())
    ));
    Ok(row)
}

fn sorted_latencies(recorder: &Recorder, from: Instant, to: Instant) -> (Vec<Duration>, usize) {
    let samples = recorder.samples.lock().unwrap_or_else(|e| e.into_inner());
    let in_window = samples.iter().filter(|s| s.asked >= from && s.asked <= to);
    let mut failed = 0;
    let mut took: Vec<Duration> = in_window
        .filter_map(|s| {
            if s.took.is_none() {
                failed += 1;
            }
            s.took
        })
        .collect();
    took.sort();
    (took, failed)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn window_stats(recorder: &Recorder, from: Instant, to: Instant) -> (usize, Duration) {
    let (took, _) = sorted_latencies(recorder, from, to);
    (took.len(), percentile(&took, 0.99))
}

#[allow(clippy::too_many_arguments, reason = "one table row's every column, named at the call")]
fn row(
    load: &str,
    recorder: &Recorder,
    t0: Instant,
    t1: Instant,
    watched_until: Instant,
    cpu: f64,
    rss: f64,
    figures: String,
) -> Row {
    let (took, failed) = sorted_latencies(recorder, t0, t1);
    let mut notes = Vec::new();
    let mut removed = Vec::new();
    {
        let events = recorder.events.lock().unwrap_or_else(|e| e.into_inner());
        let mut unreachable = Vec::new();
        let mut missed = 0u64;
        for event in events.iter().filter(|e| e.seen >= t0 && e.seen <= watched_until) {
            let at = event.seen.duration_since(t0).as_secs_f64();
            match event.kind {
                EventKind::RegionGone if event.cause != "left" => {
                    removed.push(format!("{} ({}, at {at:.1} s)", event.region, event.cause))
                }
                EventKind::RegionUnreachable => unreachable.push(format!("{} at {at:.1} s", event.region)),
                EventKind::Missed => missed += event.cause.parse::<u64>().unwrap_or(0).max(1),
                _ => {}
            }
        }
        if !unreachable.is_empty() {
            notes.push(format!("regions unreachable: {}", unreachable.join(", ")));
        }
        if missed > 0 {
            notes.push(format!("the event watcher missed {missed} events (fell behind the node's backlog)"));
        }
    }
    let updates = recorder.updates.lock().unwrap_or_else(|e| e.into_inner());
    let reference_updates: Vec<String> = updates
        .iter()
        .filter(|u| u.at >= t0 && u.at <= watched_until)
        .map(|u| format!("{} at {:.1} s", u.what, u.at.duration_since(t0).as_secs_f64()))
        .collect();
    let troubled = !reference_updates.is_empty();
    if troubled {
        notes.push(format!("the reference region: {}", reference_updates.join("; ")));
    }
    if failed > 0 {
        notes.push(format!("{failed} home questions failed or went unanswered for 60 s"));
    }
    let samples = recorder.samples.lock().unwrap_or_else(|e| e.into_inner());
    let mut slow: Vec<_> = samples.iter().filter(|s| s.asked >= t0 && s.asked <= t1 && s.took.is_some()).collect();
    slow.sort_by_key(|s| std::cmp::Reverse(s.took));
    let slowest: Vec<String> = slow
        .iter()
        .take(3)
        .map(|s| {
            format!(
                "{} asked at {:.1} s took {:.0} ms",
                s.shard,
                s.asked.duration_since(t0).as_secs_f64(),
                s.took.unwrap_or_default().as_secs_f64() * 1e3
            )
        })
        .collect();
    if !slowest.is_empty() {
        notes.push(format!("slowest home answers: {}", slowest.join("; ")));
    }
    Row {
        load: load.to_owned(),
        window: t1.duration_since(t0),
        answered: took.len(),
        failed,
        p50: percentile(&took, 0.50),
        p99: percentile(&took, 0.99),
        max: took.last().copied().unwrap_or_default(),
        removed,
        cpu,
        rss,
        figures,
        notes,
        troubled,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn print_row(row: &Row) {
    eprintln!(
        "busy-host: {} — {} homes in {:.1} s: p50 {}, p99 {}, max {}; removed {}; node CPU {:.0}%; {}",
        row.load,
        row.answered,
        row.window.as_secs_f64(),
        ms(row.p50),
        ms(row.p99),
        ms(row.max),
        row.removed.len(),
        row.cpu,
        if row.passed() { "within the bar" } else { "BREAKS THE BAR" }
    );
    for note in &row.notes {
        eprintln!("busy-host:     {note}");
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!("{cores} cores visible to the load generator ({model}); load average at the end {}", load.join(" "))
}

fn report(rows: &[Row], args: &Args, cpus: Option<&str>, kept: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Node: release build, pinned to core {} with `taskset`; {} placements preloaded on type `{TYPE}`; \
         the reference region asks {} new homes a second; each load {} s (the burst: until answered), \
         then {} s watched for removals. {}.\n",
        cpus.unwrap_or("(none)"),
        args.placements,
        args.rate,
        args.duration,
        args.settle,
        machine()
    );
    let _ = writeln!(md, "| load | home answers | p50 | p99 | max | regions removed | node CPU | bar |");
    let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for row in rows {
        let _ = writeln!(
            md,
            "| {} | {} in {:.0} s{} | {} | {} | {} | {} | {:.0}% | {} |",
            row.load,
            row.answered,
            row.window.as_secs_f64(),
            if row.failed > 0 { format!(" ({} failed)", row.failed) } else { String::new() },
            ms(row.p50),
            ms(row.p99),
            ms(row.max),
            if row.removed.is_empty() {
                "0".to_owned()
            } else {
                format!("**{}**: {}", row.removed.len(), row.removed.join(", "))
            },
            row.cpu,
            if row.passed() { "ok" } else { "**broken**" }
        );
    }
    let _ = writeln!(md, "\nWhat each load did, and what else was seen:\n");
    for row in rows {
        let _ = writeln!(md, "- `{}`: {}; node resident memory {:.0} MiB after it.", row.load, row.figures, row.rss);
        for note in &row.notes {
            let _ = writeln!(md, "  {note}.");
        }
    }
    let _ = writeln!(md, "- {kept}.");
    md
}
