//! `cargo xtask busy-host [ARGS…]`: the busy-host benchmark (issue 23,
//! item 2). Builds the node and the load generator (`busy-host/`) in
//! release, then runs the load generator pinned with `taskset` to every
//! core but the first; it starts the node pinned to the first core (a busy
//! host), preloads the placements, runs a live reference region and each of
//! the attack's loads, and prints one table, also written to
//! `target/busy-host/results.md` (what docs/reliability.md shows).
//!
//! ARGS go to the load generator: `--load NAME` (repeatable: idle,
//! snapshots, replays, storm, posts, burst), `--duration S`, `--settle S`,
//! `--placements N`, `--burst N`, `--rate N`, `--out FILE`.
//!
//! Not part of `cargo xtask test`: it takes minutes and its figures mean
//! something only on a quiet machine.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// Runs the benchmark with the load generator's `args`.
pub fn run(root: &Path, target: &Path, args: &[String]) -> anyhow::Result<()> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        eprintln!(
            "usage: cargo xtask busy-host [--load NAME]… [--duration S] [--settle S] [--placements N] [--burst N] \
             [--rate N] [--out FILE]\n  loads: idle, snapshots, replays, storm, posts, burst (default: all, in that order)"
        );
        return Ok(());
    }
    let taskset = Command::new("taskset").arg("--version").output();
    if !taskset.is_ok_and(|o| o.status.success()) {
        bail!(
            "`taskset` was not found: the benchmark pins the node to one core with it. It is in util-linux \
             (Debian: `apt-get install util-linux`)"
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        bail!(
            "the benchmark needs at least two cores (one for the node, the rest for the load); this machine has {cores}"
        );
    }
    crate::run(
        root,
        &crate::cargo(),
        &[
            "build",
            "--release",
            "-p",
            "shardalloc",
            "--bin",
            "shardalloc",
            "-p",
            "shardalloc-busy-host",
            "--bin",
            "busy-host",
        ],
    )?;
    let release = target.join("release");
    let out = target.join("busy-host/results.md");
    let generator_cores = format!("1-{}", cores - 1);
    let mut command = Command::new("taskset");
    command
        .args(["-c", &generator_cores])
        .arg(release.join("busy-host"))
        .arg("--node-bin")
        .arg(release.join("shardalloc"))
        .args(["--node-cpus", "0"]);
    if !args.iter().any(|a| a == "--out" || a.starts_with("--out=")) {
        command.arg("--out").arg(&out);
    }
    command.args(args).current_dir(root);
    eprintln!("xtask: {command:?}");
    let status = command.status().context("could not run the load generator")?;
    if !status.success() {
        bail!("the busy-host benchmark failed ({status})");
    }
    Ok(())
}
