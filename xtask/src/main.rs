//! `cargo xtask`: the project's own commands.
//!
//! - `setup`: install what builds need (the wasm32 target, or Debian's
//!   rustc-web fallback);
//! - `test`: setup, then formatting, lints and every test — what CI runs;
//! - `demo`: build the node and show the built-in strategies at work on a
//!   generated cluster;
//! - `component -p CRATE [--out FILE]`: build a workspace strategy crate
//!   into a component.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use shardalloc_guest_build::{Toolchain, build_components};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("setup") => setup().map(|_| ()),
        Some("test") => test(&root),
        Some("demo") => demo(&root),
        Some("component") => component(&root, &args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  setup       install the wasm32 toolchain (rustup target, else Debian rustc-web)\n  test        formatting, lints and every test (what CI runs)\n  demo        build the node and show the built-in strategies on a generated cluster\n  component   -p CRATE [--out FILE]: build a strategy crate into a component"
            );
            bail!("unknown or missing command");
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

fn setup() -> anyhow::Result<Toolchain> {
    match Toolchain::detect(false) {
        Ok(toolchain) => Ok(toolchain),
        Err(_) => {
            eprintln!("xtask: no wasm32 toolchain via rustup; installing Debian's rustc-web fallback");
            let _ = Command::new("apt-get").arg("update").status();
            Ok(Toolchain::detect(true)?)
        }
    }
}

fn run(root: &Path, program: &str, args: &[&str]) -> anyhow::Result<()> {
    eprintln!("xtask: {program} {}", args.join(" "));
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("could not run {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    eprintln!("xtask: done in {:.0?}", started.elapsed());
    Ok(())
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn test(root: &Path) -> anyhow::Result<()> {
    setup()?;
    let cargo = cargo();
    run(root, &cargo, &["fmt", "--all", "--", "--check"])?;
    run(root, &cargo, &["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"])?;
    run(root, &cargo, &["test", "--workspace", "--locked"])?;
    Ok(())
}

fn component(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut package = None;
    let mut out = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-p" | "--package" => package = it.next().cloned(),
            "--out" => out = it.next().map(PathBuf::from),
            other => bail!("unexpected argument {other:?}; usage: cargo xtask component -p CRATE [--out FILE]"),
        }
    }
    let package = package.context("name the strategy crate with -p CRATE")?;
    let toolchain = setup()?;
    let built = build_components(&toolchain, root, &[&package], &root.join("target/guest"))?;
    let path = match out {
        Some(out) => {
            std::fs::copy(&built[0].path, &out).with_context(|| format!("writing {}", out.display()))?;
            out
        }
        None => built[0].path.clone(),
    };
    let size = std::fs::metadata(&path)?.len();
    println!("{} ({size} bytes)", path.display());
    Ok(())
}

fn demo(root: &Path) -> anyhow::Result<()> {
    setup()?;
    run(root, &cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    let binary = root.join("target/debug/shardalloc");
    let dir = root.join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let snapshot = dir.join("snapshot.json");
    std::fs::write(&snapshot, demo_snapshot())?;
    let snapshot = snapshot.to_str().context("a UTF-8 path")?;
    println!("\nA generated cluster: 6 regions in zones eu and us, 120 shards piled on two of them,");
    println!("region 10.0.0.4 at 95% memory, region 10.0.0.6 just joined (empty). Snapshot: {snapshot}\n");
    for (strategy, what) in [
        ("least-shard", "Akka's LeastShard (current algorithm): balance shard counts"),
        ("hash", "rendezvous hashing: each shard to its hash winner"),
        ("capacity", "keep regions under 80% mem-used-ratio"),
        ("zone", "shards of tenant-eu/ in eu, tenant-us/ in us (from the signal)"),
    ] {
        println!("== {strategy}: {what}");
        let out = Command::new(&binary)
            .args(["strategy", "eval", "--strategy", strategy, "--snapshot", snapshot])
            .args(["allocate", "--shard", "tenant-us/new"])
            .output()?;
        print!("   new shard tenant-us/new -> {}", String::from_utf8_lossy(&out.stdout));
        let out = Command::new(&binary)
            .args(["strategy", "simulate", "--strategy", strategy, "--snapshot", snapshot, "--rounds", "8"])
            .output()?;
        if !out.status.success() {
            bail!("simulate failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let round: serde_json::Value = serde_json::from_str(line)?;
            let counts: Vec<String> = round["counts"]
                .as_object()
                .map(|c| c.values().map(|v| format!("{v:>3}")).collect())
                .unwrap_or_default();
            let moved = round["moved"].as_array().map_or(0, Vec::len);
            println!("   round {:>2}: moved {moved:>3}  counts {}", round["round"], counts.join(" "));
        }
        println!();
    }
    println!("Try it yourself:");
    println!("  {} strategy inspect zone", binary.display());
    println!("  {} strategy eval --strategy hash --snapshot {snapshot} allocate --shard 42", binary.display());
    println!(
        "  {} strategy simulate --config '{{\"algorithm\":\"classic\"}}' --snapshot {snapshot} --rounds 5",
        binary.display()
    );
    Ok(())
}

fn demo_snapshot() -> String {
    let mut regions = Vec::new();
    let zones = ["eu", "eu", "eu", "us", "us", "us"];
    for (i, zone) in zones.iter().enumerate() {
        let shards: Vec<String> = match i {
            0 => (0..70).map(|n| format!("tenant-us/{n:03}")).collect(),
            3 => (0..50).map(|n| format!("tenant-eu/{n:03}")).collect(),
            _ => Vec::new(),
        };
        let memory = if i == 3 { 0.95 } else { 0.2 + 0.1 * i as f64 };
        regions.push(serde_json::json!({
            "address": format!("10.0.0.{}:2552", i + 1),
            "shards": shards,
            "app_version": "1.4.0",
            "labels": { "zone": zone },
            "metrics": { "mem-used-ratio": memory },
        }));
    }
    let signal = serde_json::json!({ "prefixes": { "tenant-eu/": "eu", "tenant-us/": "us" } });
    serde_json::json!({ "regions": regions, "signal": signal }).to_string()
}
