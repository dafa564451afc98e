//! `cargo xtask soak-sim --seeds N [--jobs J]`: the coordinator's seeded
//! fault simulation (`host/tests/coordinator_sim.rs`, its ignored
//! `simulation_seeds`) over seeds 1..=N, J processes at a time (default:
//! every core), in chunks of [`CHUNK`] seeds, built once in release.
//!
//! Every seed's line is appended to `target/soak-sim/seeds.txt` as soon as
//! its chunk ends, so an interrupted run resumes where it stopped (seeds
//! recorded already are skipped; delete the file to start over). A progress
//! line shows seeds done, breaks and the time left; the summary counts
//! every recorded seed: steps, messages, invariant breaks (with their
//! seeds and why) and the slowest seed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Seeds per process.
const CHUNK: u64 = 25;

/// One recorded seed.
enum Outcome {
    Ok { steps: u64, messages: u64, ms: u64 },
    Broken(String),
}

/// A seed's line from the simulation's output (the first one follows
/// libtest's `test simulation_seeds ... ` on the same line): the line as
/// recorded, the seed and its outcome.
fn recorded(line: &str) -> Option<(&str, u64, Outcome)> {
    let line = &line[line.find("seed ")?..];
    parse(line).map(|(seed, outcome)| (line, seed, outcome))
}

fn parse(line: &str) -> Option<(u64, Outcome)> {
    let rest = line.strip_prefix("seed ")?;
    let (seed, rest) = rest.split_once(' ')?;
    let seed = seed.parse().ok()?;
    if let Some(why) = rest.strip_prefix("broken: ") {
        return Some((seed, Outcome::Broken(why.to_owned())));
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words.as_slice() {
        ["ok", "steps", steps, "messages", messages, "ms", ms] => Some((
            seed,
            Outcome::Ok { steps: steps.parse().ok()?, messages: messages.parse().ok()?, ms: ms.parse().ok()? },
        )),
        _ => None,
    }
}

fn test_binary(root: &Path) -> anyhow::Result<String> {
    let output = Command::new(super::cargo())
        .args(["test", "--locked", "--release", "-p", "shardalloc", "--test", "in_process", "--no-run"])
        .args(["--message-format", "json"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("build the simulation")?;
    if !output.status.success() {
        bail!("the simulation did not build");
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.contains("\"executable\"") && l.contains("in_process"))
        .find_map(|l| {
            let value: serde_json::Value = serde_json::from_str(l).ok()?;
            value["executable"].as_str().map(str::to_owned)
        })
        .context("cargo named no simulation binary")
}

/// Runs `cargo xtask soak-sim`.
pub fn soak_sim(root: &Path, target_dir: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut seeds: u64 = 10_000;
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it.next().with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seeds" => seeds = value.parse().ok().filter(|n| *n > 0).context("--seeds must be a positive number")?,
            "--jobs" => jobs = value.parse().ok().filter(|n| *n > 0).context("--jobs must be a positive number")?,
            other => bail!("unknown argument {other:?}: cargo xtask soak-sim --seeds N [--jobs J]"),
        }
    }
    let dir = target_dir.join("soak-sim");
    std::fs::create_dir_all(&dir)?;
    let record = dir.join("seeds.txt");
    let mut done: BTreeMap<u64, Outcome> =
        std::fs::read_to_string(&record).unwrap_or_default().lines().filter_map(parse).collect();
    let todo: Vec<u64> = (1..=seeds).filter(|s| !done.contains_key(s)).collect();
    eprintln!(
        "xtask: soak-sim: {} of {seeds} seeds recorded in {}; {} to run, {jobs} at a time",
        seeds as usize - todo.len(),
        record.display(),
        todo.len()
    );
    let binary = test_binary(root)?;
    let mut chunks: Vec<(u64, u64)> = Vec::new();
    for seed in &todo {
        match chunks.last_mut() {
            Some((from, to)) if *to == *seed && *to - *from < CHUNK => *to += 1,
            _ => chunks.push((*seed, seed + 1)),
        }
    }
    chunks.reverse();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&record)?;
    let started = Instant::now();
    let mut running: Vec<Child> = Vec::new();
    let total = todo.len();
    let mut finished = 0usize;
    while !chunks.is_empty() || !running.is_empty() {
        while running.len() < jobs
            && let Some((from, to)) = chunks.pop()
        {
            let child = Command::new(&binary)
                .args([
                    "--ignored",
                    "--exact",
                    "coordinator_sim::simulation_seeds",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("SHARDALLOC_SIM_SEEDS", format!("{from}..{to}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("start the simulation")?;
            running.push(child);
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut still = Vec::new();
        for mut child in running {
            if child.try_wait()?.is_none() {
                still.push(child);
                continue;
            }
            let output = child.wait_with_output()?;
            for line in String::from_utf8_lossy(&output.stdout).lines() {
                if let Some((line, seed, outcome)) = recorded(line) {
                    writeln!(file, "{line}")?;
                    if let Outcome::Broken(why) = &outcome {
                        eprintln!("\nxtask: seed {seed} BROKE AN INVARIANT: {why}");
                    }
                    done.insert(seed, outcome);
                    finished += 1;
                }
            }
            file.flush()?;
        }
        running = still;
        let elapsed = started.elapsed().as_secs_f64();
        let left = if finished > 0 { elapsed / finished as f64 * (total - finished) as f64 } else { 0.0 };
        let width = 30;
        let filled = finished.checked_mul(width).and_then(|n| n.checked_div(total)).unwrap_or(width);
        eprint!(
            "\rxtask: [{}{}] {finished}/{total} seeds, {} broken, {:.0} s left   ",
            "#".repeat(filled),
            " ".repeat(width - filled),
            done.values().filter(|o| matches!(o, Outcome::Broken(_))).count(),
            left
        );
    }
    eprintln!();
    summary(&done, seeds)
}

fn summary(done: &BTreeMap<u64, Outcome>, seeds: u64) -> anyhow::Result<()> {
    let (mut steps, mut messages) = (0u64, 0u64);
    let mut slowest = (0u64, 0u64);
    let mut broken = Vec::new();
    for (seed, outcome) in done.range(1..=seeds) {
        match outcome {
            Outcome::Ok { steps: s, messages: m, ms } => {
                steps += s;
                messages += m;
                if *ms > slowest.1 {
                    slowest = (*seed, *ms);
                }
            }
            Outcome::Broken(why) => broken.push(format!("seed {seed}: {why}")),
        }
    }
    let counted = done.range(1..=seeds).count();
    println!(
        "soak-sim: {counted} of {seeds} seeds run, {steps} steps, {messages} messages, {} invariant breaks, slowest seed {} ({} ms)",
        broken.len(),
        slowest.0,
        slowest.1
    );
    for line in &broken {
        println!("  {line}");
    }
    if !broken.is_empty() {
        bail!("{} seed(s) broke an invariant", broken.len());
    }
    if (counted as u64) < seeds {
        bail!("{} seed(s) not run", seeds - counted as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_line_is_recorded_even_after_libtest_s_prefix() {
        let (line, seed, outcome) =
            recorded("test simulation_seeds ... seed 26 ok steps 9000 messages 24817 ms 79").unwrap();
        assert_eq!((line, seed), ("seed 26 ok steps 9000 messages 24817 ms 79", 26));
        assert!(matches!(outcome, Outcome::Ok { steps: 9000, messages: 24817, ms: 79 }));
        let (_, seed, outcome) = recorded("seed 3 broken: two regions run shard 7").unwrap();
        assert!(seed == 3 && matches!(outcome, Outcome::Broken(why) if why == "two regions run shard 7"));
        assert!(recorded("running 1 test").is_none());
        assert!(recorded("test simulation_seeds ... ok").is_none());
    }
}
