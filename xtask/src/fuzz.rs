//! `cargo xtask fuzz [--target NAME] [--minutes N] [--jobs J]`: builds the
//! fuzz targets (`fuzz/`) with libFuzzer and coverage instrumentation, runs
//! each for N minutes (default 10), J at a time (default: every core), and
//! merges what they found into the kept corpus.
//!
//! Stable Rust only: the instrumentation is the stable `-C
//! passes=sancov-module` with `-C llvm-args` (what cargo-fuzz passes with
//! `--sanitizer none`), no `-Z` flag and no nightly toolchain. It builds
//! for the host triple given explicitly, so the flags reach the targets'
//! code but not build scripts and proc macros, in its own target
//! directory (`target/fuzz/`), so the ordinary build is left alone.
//!
//! For each target: `fuzz/corpus/NAME/` is read (and is replaced, at the
//! end, by the smallest set of old and new inputs covering every feature,
//! through libFuzzer's `-set_cover_merge=1`); what
//! the run finds meanwhile goes to `target/fuzz/corpus/NAME/`; a crash is
//! written to `fuzz/regressions/NAME/` — kept in the repository, replayed
//! by `fuzz/tests/replay.rs` in `cargo xtask test` once the bug is fixed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The fuzz targets, as `fuzz/Cargo.toml` names its binaries.
pub const TARGETS: [&str; 6] =
    ["region_frames", "node_frames", "rest_bodies", "strategy_configs", "component", "coordinator"];

/// The instrumentation: libFuzzer's coverage feedback, on stable rustc.
const RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    --cfg fuzzing -Cdebug-assertions -Coverflow-checks";

/// Most memory one target's process may use before libFuzzer calls it a crash.
const RSS_LIMIT_MB: &str = "4096";

struct Options {
    targets: Vec<String>,
    minutes: f64,
    jobs: usize,
}

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        targets: Vec::new(),
        minutes: 10.0,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--target" => {
                let name = value("--target")?;
                if !TARGETS.contains(&name.as_str()) {
                    bail!("no fuzz target {name:?}; the targets are {}", TARGETS.join(", "));
                }
                options.targets.push(name);
            }
            "--minutes" => {
                let minutes = value("--minutes")?;
                options.minutes = minutes
                    .parse()
                    .ok()
                    .filter(|m: &f64| *m > 0.0)
                    .with_context(|| format!("--minutes must be a positive number, not {minutes:?}"))?;
            }
            "--jobs" => {
                let jobs = value("--jobs")?;
                options.jobs = jobs
                    .parse()
                    .ok()
                    .filter(|j| *j > 0)
                    .with_context(|| format!("--jobs must be a positive whole number, not {jobs:?}"))?;
            }
            other => bail!("unknown argument {other:?}: cargo xtask fuzz [--target NAME]… [--minutes N] [--jobs J]"),
        }
    }
    if options.targets.is_empty() {
        options.targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    Ok(options)
}

fn host_triple() -> anyhow::Result<String> {
    let output = Command::new("rustc").arg("-vV").output().context("run rustc -vV")?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .context("rustc -vV names no host")
}

struct Running {
    name: String,
    child: Child,
    started: Instant,
    log: PathBuf,
}

/// Runs `cargo xtask fuzz`.
pub fn fuzz(root: &Path, target_dir: &Path, args: &[String]) -> anyhow::Result<()> {
    let options = options(args)?;
    let triple = host_triple()?;
    let fuzz_dir = target_dir.join("fuzz");
    eprintln!(
        "xtask: building the fuzz targets with coverage instrumentation (target/fuzz; the first build takes minutes)"
    );
    let status = Command::new(super::cargo())
        .args(["build", "--locked", "--release", "-p", "shardalloc-fuzz", "--features", "libfuzzer", "--bins"])
        .args(["--target", &triple])
        .env("CARGO_TARGET_DIR", &fuzz_dir)
        .env("RUSTFLAGS", RUSTFLAGS)
        .current_dir(root)
        .status()
        .context("run cargo build")?;
    if !status.success() {
        bail!("the fuzz targets did not build ({status})");
    }
    let binaries = fuzz_dir.join(&triple).join("release");
    let seconds = (options.minutes * 60.0).round() as u64;
    let mut queue: Vec<String> = options.targets.clone();
    queue.reverse();
    let mut running: Vec<Running> = Vec::new();
    let mut crashed = Vec::new();
    let logs = fuzz_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    eprintln!(
        "xtask: fuzzing {} target(s) for {} min each, {} at a time",
        options.targets.len(),
        options.minutes,
        options.jobs
    );
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < options.jobs
            && let Some(name) = queue.pop()
        {
            running.push(start(root, &binaries, &fuzz_dir, &logs, &name, seconds)?);
        }
        std::thread::sleep(Duration::from_secs(5));
        let mut still = Vec::new();
        for mut run in running {
            match run.child.try_wait()? {
                None => {
                    let done = run.started.elapsed().as_secs().min(seconds);
                    eprint!("\rxtask: {}: {done}/{seconds} s   ", run.name);
                    still.push(run);
                }
                Some(status) => {
                    eprintln!();
                    let summary = last_stats(&run.log);
                    if status.success() {
                        eprintln!("xtask: {}: no crash in {:.0?}; {summary}", run.name, run.started.elapsed());
                        merge(root, &binaries, &fuzz_dir, &run.name)?;
                    } else {
                        eprintln!(
                            "xtask: {}: CRASHED ({status}); see {} and fuzz/regressions/{}/",
                            run.name,
                            run.log.display(),
                            run.name
                        );
                        crashed.push(run.name.clone());
                    }
                }
            }
        }
        running = still;
    }
    if !crashed.is_empty() {
        bail!(
            "crashes in {}: fix them; the inputs in fuzz/regressions/ are replayed by cargo xtask test",
            crashed.join(", ")
        );
    }
    eprintln!("xtask: fuzzing done, no crash");
    Ok(())
}

fn start(
    root: &Path,
    binaries: &Path,
    fuzz_dir: &Path,
    logs: &Path,
    name: &str,
    seconds: u64,
) -> anyhow::Result<Running> {
    let found = fuzz_dir.join("corpus").join(name);
    let kept = root.join("fuzz/corpus").join(name);
    let regressions = root.join("fuzz/regressions").join(name);
    for dir in [&found, &kept, &regressions] {
        std::fs::create_dir_all(dir)?;
    }
    let log = logs.join(format!("{name}.log"));
    let child = Command::new(binaries.join(name))
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", regressions.display()))
        .arg(&found)
        .arg(&kept)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .current_dir(root)
        .spawn()
        .with_context(|| format!("start the fuzz target {name}"))?;
    Ok(Running { name: name.to_owned(), child, started: Instant::now(), log })
}

/// Replaces the kept corpus with the smallest set of inputs, from it and
/// from what the run found, that covers every feature either covers
/// (libFuzzer's `-set_cover_merge=1`), so the repository keeps few files.
fn merge(root: &Path, binaries: &Path, fuzz_dir: &Path, name: &str) -> anyhow::Result<()> {
    let kept_dir = root.join("fuzz/corpus").join(name);
    let merged = fuzz_dir.join("merged").join(name);
    let _ = std::fs::remove_dir_all(&merged);
    std::fs::create_dir_all(&merged)?;
    let status = Command::new(binaries.join(name))
        .arg("-set_cover_merge=1")
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(&merged)
        .arg(&kept_dir)
        .arg(fuzz_dir.join("corpus").join(name))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("merging the corpus of {name} failed ({status})");
    }
    for entry in std::fs::read_dir(&kept_dir)? {
        std::fs::remove_file(entry?.path())?;
    }
    for entry in std::fs::read_dir(&merged)? {
        let entry = entry?;
        std::fs::copy(entry.path(), kept_dir.join(entry.file_name()))?;
    }
    let kept = std::fs::read_dir(&kept_dir)?.count();
    eprintln!("xtask: {name}: {kept} input(s) kept in fuzz/corpus/{name}/");
    Ok(())
}

/// libFuzzer's final statistics from a run's log, in one line.
fn last_stats(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let stats: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("stat::number_of_executed_units") || l.starts_with("stat::peak_rss_mb"))
        .collect();
    let coverage = text.lines().rev().find(|l| l.contains(" cov: ")).unwrap_or("");
    format!("{} {}", stats.join(" "), coverage.split_whitespace().skip(1).take(4).collect::<Vec<_>>().join(" "))
}
