//! `cargo xtask`: the project's own commands.
//!
//! - `setup`: install what builds need (the wasm32 target, or Debian's
//!   rustc-web fallback);
//! - `test`: setup (the packages of docs/development.md, `packages.rs`),
//!   then formatting, the code's shape (`shape.rs`), the build with protoc
//!   hidden (`sysfree.rs`), lints,
//!   every test, the example strategies (`examples/`), every benchmark
//!   once at a tiny size (`bench.rs`, smoke mode) and the strategy guide's
//!   crate (`guide.rs`) — what CI runs —
//!   ending with one summary line
//!   `N passed, N failed[, N skipped]` counted over every test binary
//!   (`tests.rs`);
//! - `shape`: only the shape check;
//! - `demo`: build and start a node with three simulated regions, and print
//!   its URL and commands to try; `demo --ha` (`demo_ha.rs`): three etcd
//!   members, three nodes and three regions, and how to kill the leader;
//!   both stop everything they started, newest first, when xtask gets
//!   SIGTERM or SIGINT (`children.rs`);
//! - `ha-faults`: the long high-availability fault series against real
//!   etcd (ten leader kills with the failover figures, twenty SIGTERMs of
//!   the leader with the graceful failover figures, a three-member etcd
//!   losing members, a rolling restart);
//! - `fuzz [--target NAME]… [--minutes N] [--jobs J]` (`fuzz.rs`): build
//!   the fuzz targets (`fuzz/`) with libFuzzer on stable Rust, run them and
//!   keep the inputs that add coverage and any crash;
//! - `soak-sim --seeds N [--jobs J]` (`soak_sim.rs`): the coordinator's
//!   seeded fault simulation over N seeds on every core, resumable;
//! - `soak --minutes N [--etcd [--kill-every S]] [--out PNG]`: the real
//!   node under churn for N minutes (`host/tests/soak.rs`), with its
//!   memory, descriptors and counters in `target/soak/soak.csv`, its churn
//!   events in `events.csv`, both drawn in `soak.png` (`soak_plot.rs`;
//!   `--out`: also there); `--etcd`: three nodes on a real etcd, the leader
//!   killed every S seconds (`target/soak-etcd/`); `soak --plot CSV
//!   [--events CSV] [--out PNG]`: draw a soak's CSV again, without running
//!   it;
//! - `screenshots`: run the dashboard's browser tests and copy the
//!   screenshots they take into `docs/images/` (what docs/dashboard.md shows);
//! - `demo-strategies`: show the built-in strategies at work offline on a
//!   generated cluster;
//! - `component -p CRATE [--out FILE]`: build a workspace strategy crate
//!   into a component;
//! - `examples [NAME…]` (`examples/`): build every example strategy by
//!   following its README, and check that they conform and agree; run
//!   every example service (`examples/services/`) by its README;
//!   `c-example`: the C example's build, which its README runs;
//! - `clients` (`clients.rs`): check the clients in other languages
//!   (`clients/typescript`, `clients/python`), as `test` does;
//! - `bench [NAME…]` (`bench.rs`): every benchmark in one run and one table
//!   of ratios (`target/bench-report.md`);
//! - `busy-host [--load NAME]… [--duration S] [--placements N] …`
//!   (`busy_host.rs`): the node in release pinned to one core with
//!   `taskset` under the second attack's five loads, with a live region's
//!   home answers timed (`target/busy-host/results.md`);
//! - `etcd-api`: regenerate `etcd-api/src/generated/` from
//!   `etcd-api/proto/` (a generator outside the workspace, no system protoc);
//! - `sysfree` (`sysfree.rs`): only the guard `test` runs: the node builds
//!   with protoc and protobuf's include files hidden;
//! - `image [--no-test]` (`image.rs`): build the node's OCI image
//!   `shardalloc:latest` from the `Containerfile` with podman (making its
//!   Debian and Rust base images locally when missing), then run it
//!   read-only as uid 10001 and check its probes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use children::Child;
use shardalloc_guest_build::{Toolchain, build_components};

mod bench;
mod busy_host;
mod children;
mod clients;
mod demo_ha;
mod examples;
mod fuzz;
mod guide;
mod image;
mod packages;
mod shape;
mod soak_plot;
mod soak_sim;
mod sysfree;
mod tests;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args.first().map(String::as_str) {
        Some("setup") => setup().map(|_| ()),
        Some("test") => test(&root),
        Some("shape") => shape::check(&root),
        Some("demo") if args.get(1).is_some_and(|a| a == "--ha") => demo_ha::demo_ha(&root),
        Some("demo") => demo(&root),
        Some("demo-strategies") => demo_strategies(&root),
        Some("screenshots") => screenshots(&root),
        Some("fuzz") => fuzz::fuzz(&root, &target_dir(&root), &args[1..]),
        Some("soak-sim") => soak_sim::soak_sim(&root, &target_dir(&root), &args[1..]),
        Some("soak") => soak(&root, &args[1..]),
        Some("ha-faults") => ha_faults(&root),
        Some("component") => component(&root, &args[1..]),
        Some("examples") => examples::run(&root, &args[1..], true),
        Some("clients") => clients::run(&root),
        Some("c-example") => examples::c_example(&root),
        Some("guide") => guide::follow(&root, &target_dir(&root).join("debug")),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("busy-host") => busy_host::run(&root, &target_dir(&root), &args[1..]),
        Some("image") => image::image(&root, &args[1..]),
        Some("etcd-api") => etcd_api(&root),
        Some("sysfree") => sysfree::check(&root, &target_dir(&root)),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  setup       install the wasm32 toolchain (rustup target, else Debian rustc-web)\n  test        formatting, the code's shape, lints and every test (what CI runs)\n  shape       check the code's shape: server file sizes, import direction, no OpenAPI JSON, no I/O under shardalloc-proto, the core free of the client crate\n  demo        build and start a node with three simulated regions (--ha: three etcd members, three nodes)\n  fuzz        [--target NAME]… [--minutes N] [--jobs J]: run the fuzz targets (libFuzzer, stable Rust) and keep what they find\n  soak-sim    --seeds N [--jobs J]: the coordinator's fault simulation over N seeds, resumable\n  soak        --minutes N [--etcd [--kill-every S]] [--out PNG]: the real node under churn for N minutes (soak.csv, events.csv, soak.png in target/soak/); --etcd: three nodes on etcd, the leader killed every S seconds\n              --plot CSV [--events CSV] [--out PNG]: draw a soak's samples and events again, without running it\n  screenshots regenerate the dashboard's screenshots in docs/images/ (runs its browser tests)\n  demo-strategies  show the built-in strategies offline on a generated cluster\n  ha-faults   the long HA fault series on real etcd (ten leader kills, twenty leader SIGTERMs, etcd members lost, rolling restart)\n  component   -p CRATE [--out FILE]: build a strategy crate into a component\n  examples    [NAME…]: build every example strategy (examples/strategies/) and run every example service (examples/services/) by following its README, and check them\n  clients     check the clients in other languages (clients/typescript, clients/python): their tests, types and packages\n  c-example   build the C example strategy (used by its README)\n  guide       follow docs/writing-a-strategy.md in a scratch crate: write its files, run its commands, compare its transcripts\n  bench       [NAME…]: run every benchmark in one go and print one table of ratios\n  busy-host   [--load NAME]… [--duration S] [--placements N]: the release node pinned to one core (taskset) under the attack's five loads; home-answer p99 and regions removed per load (target/busy-host/results.md)\n  image       [--no-test]: build the OCI image shardalloc:latest (Containerfile, podman) and check its probes\n  etcd-api    regenerate the etcd client's protocol code from etcd-api/proto/ (no system protoc)\n  sysfree     only the guard: the node builds with protoc and protobuf's include files hidden"
            );
            bail!("unknown or missing command");
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

fn setup() -> anyhow::Result<Toolchain> {
    match Toolchain::detect() {
        Ok(toolchain) => Ok(toolchain),
        Err(_) => {
            eprintln!("xtask: no wasm32 toolchain via rustup; installing Debian's rustc-web fallback");
            packages::ensure("wasm-fallback")?;
            Ok(Toolchain::detect()?)
        }
    }
}

/// Where cargo builds: `CARGO_TARGET_DIR` when set, else `target/`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
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

/// `cargo metadata --format-version 1 --locked` with `extra` arguments, in
/// `root`, parsed.
fn cargo_metadata(root: &Path, extra: &[&str]) -> anyhow::Result<serde_json::Value> {
    let output = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(extra)
        .current_dir(root)
        .output()
        .context("run cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("read cargo metadata")
}

/// Runs a prepared command, failing with its name when it fails.
fn checked(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("could not run {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

/// `cargo xtask etcd-api`: regenerates the etcd client's protocol code
/// (`etcd-api/src/generated/`) from `etcd-api/proto/` with the generator
/// outside the workspace (a protobuf compiler in Rust: no system protoc).
fn etcd_api(root: &Path) -> anyhow::Result<()> {
    let manifest = root.join("etcd-api/generate/Cargo.toml");
    let manifest = manifest.to_str().context("a UTF-8 path")?;
    run(root, &cargo(), &["run", "--locked", "--manifest-path", manifest])
}

fn test(root: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut steps: Vec<(&str, std::time::Duration)> = Vec::new();
    let mut step = |name, since: Instant| steps.push((name, since.elapsed()));
    let at = Instant::now();
    setup()?;
    packages::ensure("test")?;
    kubectl_present()?;
    step("setup", at);
    let cargo = cargo();
    let at = Instant::now();
    run(root, &cargo, &["fmt", "--all", "--", "--check"])?;
    shape::check(root)?;
    step("format and shape", at);
    let at = Instant::now();
    sysfree::check(root, &target_dir(root))?;
    step("the build with protoc hidden", at);
    let at = Instant::now();
    run(root, &cargo, &["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"])?;
    step("clippy", at);
    let at = Instant::now();
    let (mut tally, passed) = tests::run(root, &cargo, &["--workspace", "--locked"])?;
    step("tests (build and run; fuzz corpora replayed)", at);
    let at = Instant::now();
    let examples = examples::checks(root, &[], false);
    step("example strategies", at);
    match &examples {
        Ok(checks) => {
            for (name, outcome) in checks {
                match outcome {
                    Ok(()) => tally.passed += 1,
                    Err(error) => {
                        tally.failed += 1;
                        eprintln!("xtask: {name} failed: {error}");
                    }
                }
            }
        }
        Err(error) => {
            tally.failed += 1;
            eprintln!("xtask: the example strategies could not start: {error:#}");
        }
    }
    // After the example strategies: the examples benchmark calls their
    // components. Each benchmark counts as one test.
    let at = Instant::now();
    tally.add_step("the benchmarks' smoke run", bench::smoke(root));
    step("benchmarks, once each at a tiny size (smoke)", at);
    let at = Instant::now();
    match guide::follow(root, &target_dir(root).join("debug")) {
        Ok(()) => tally.passed += 1,
        Err(error) => {
            tally.failed += 1;
            eprintln!("xtask: the strategy guide failed: {error:#}");
        }
    }
    step("the strategy guide's crate, built and run as written", at);
    let at = Instant::now();
    for (name, outcome) in clients::checks(root) {
        tally.add_step(&name, outcome);
    }
    step("clients in other languages", at);
    for (name, took) in &steps {
        eprintln!("xtask: step {name}: {:.0?}", took);
    }
    eprintln!("xtask: everything took {:.0?}", started.elapsed());
    println!("{}", tally.summary());
    if !passed || tally.failed > 0 {
        bail!("the tests failed ({})", tally.summary());
    }
    Ok(())
}

/// host/tests/kubernetes.rs renders deploy/kubernetes with `kubectl
/// kustomize`: fail early, saying how to get kubectl, when it is missing.
fn kubectl_present() -> anyhow::Result<()> {
    match Command::new("kubectl").args(["version", "--client"]).output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => bail!(
            "kubectl is missing: the Kubernetes manifests' test (host/tests/kubernetes.rs) renders them with \
             `kubectl kustomize`. It comes with this project's machine image and is not a Debian package here: \
             install kubectl 1.27 or later from the Kubernetes project's release binaries (its documentation, \
             \"Install Tools\") onto PATH, then run `cargo xtask test` again"
        ),
    }
}

/// The HA tests marked `#[ignore]` (too long for every run), one at a
/// time, with their output (the failover figures) shown.
fn ha_faults(root: &Path) -> anyhow::Result<()> {
    setup()?;
    packages::ensure("ha-faults")?;
    let args = [
        "test",
        "--locked",
        "-p",
        "shardalloc",
        "--test",
        "with_etcd",
        "--",
        "node_ha::",
        "--ignored",
        "--test-threads",
        "1",
        "--nocapture",
    ];
    run(root, &cargo(), &args)
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

/// Reads a child's stdout lines until one satisfies `want`, echoing nothing.
fn wait_for_line(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    what: &str,
    want: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<String> {
    for line in lines {
        if let Some(found) = want(&line?) {
            return Ok(found);
        }
    }
    bail!("{what} exited before it was ready (see its messages above)")
}

/// Starts three simulated regions of `cart` on `nodes` (one URL or
/// several, comma-separated) and waits until they are registered; their
/// output must be drained by the caller.
fn start_regions(
    binary: &Path,
    nodes: &str,
    extra: &[&str],
) -> anyhow::Result<(Child, impl Iterator<Item = std::io::Result<String>> + Send + 'static)> {
    use std::io::BufRead;
    let mut regions = Child::spawn(
        Command::new(binary)
            .args(["regions", "--node", nodes, "--type", "cart", "--count", "3", "--shards", "30"])
            .args(extra)
            .stdout(std::process::Stdio::piped()),
    )
    .context("start the simulated regions")?;
    let mut lines = std::io::BufReader::new(regions.take_stdout().expect("piped")).lines();
    wait_for_line(&mut lines, "the region simulator", |line| line.starts_with("ready").then(String::new))?;
    Ok((regions, lines))
}

fn demo(root: &Path) -> anyhow::Result<()> {
    use std::io::BufRead;
    use std::process::Stdio;
    setup()?;
    run(root, &cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    let binary = target_dir(root).join("debug/shardalloc");
    let data = target_dir(root).join("demo/data");
    let listen = std::env::var("SHARDALLOC_LISTEN").unwrap_or_else(|_| "127.0.0.1:7878".into());
    let mut node = Child::spawn(
        Command::new(&binary)
            .args(["serve", "--listen", &listen, "--type", "cart", "--rebalance-interval-ms", "2000"])
            .arg("--data")
            .arg(&data)
            .env_remove("SHARDALLOC_ADMIN_TOKEN")
            .stdout(Stdio::piped()),
    )
    .context("start the node")?;
    let mut node_lines = std::io::BufReader::new(node.take_stdout().expect("piped")).lines();
    let url = wait_for_line(&mut node_lines, "the node", |line| {
        line.strip_prefix("shardalloc listening on ").and_then(|rest| rest.split_whitespace().next()).map(str::to_owned)
    })
    .with_context(|| format!("is {listen} already in use? Set SHARDALLOC_LISTEN to another address"))?;
    let (_regions, region_lines) = start_regions(&binary, &url, &["--zones", "2"])?;
    let bin = binary.display();
    println!();
    println!("Dashboard: {url}/ui/  (open it in a browser: the cluster live, and every action)");
    println!();
    println!("shardalloc is running at {url} with 3 simulated regions (sim-1, sim-2, sim-3)");
    println!("serving entity type 'cart'; traffic flows to shards 1 to 30. Data in {}.", data.display());
    println!();
    println!("Try:");
    println!("  # 1. pin shard 7 to sim-2");
    println!("  {bin} placements set --node {url} cart sim-2 7");
    println!("  # 2. watch it move there (home, reason) within a rebalance interval (2 s)");
    println!("  curl -s {url}/v1/cluster/shards/cart/shards/7");
    println!("  # 3. move shards 1, 2 and 3 now; the strategy re-homes them");
    println!("  {bin} rebalance --node {url} cart 1 2 3 --immediate");
    println!("  # 4. watch every decision as it is made");
    println!("  {bin} events --node {url}");
    println!();
    println!("More: curl -s {url}/v1/cluster/shards/cart    curl -s {url}/metrics    docs/operations.md");
    println!("Press Ctrl-C to stop (the regions drain and leave, then the node flushes its state).");
    // Keep draining the children's output so they never block on a full pipe.
    std::thread::spawn(move || region_lines.for_each(drop));
    for line in node_lines.map_while(Result::ok) {
        println!("{line}");
    }
    node.wait();
    Ok(())
}

fn soak(root: &Path, args: &[String]) -> anyhow::Result<()> {
    const USAGE: &str = "usage: cargo xtask soak [--minutes N] [--etcd [--kill-every S]] [--out PNG] (default 60 \
                         minutes, a kill every 60 s), or cargo xtask soak --plot CSV [--events CSV] [--out PNG] \
                         (draw a soak's CSV again; events.csv and soak.png beside the CSV by default)";
    let (mut minutes, mut etcd, mut kill_every) = ("60".to_owned(), false, "60".to_owned());
    let (mut plot, mut events, mut png): (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--etcd" => etcd = true,
            "--minutes" => minutes = it.next().context(USAGE)?.clone(),
            "--kill-every" => kill_every = it.next().context(USAGE)?.clone(),
            "--plot" => plot = Some(it.next().context(USAGE)?.into()),
            "--events" => events = Some(it.next().context(USAGE)?.into()),
            "--out" => png = Some(it.next().context(USAGE)?.into()),
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    if let Some(csv) = plot {
        let dir = csv.parent().unwrap_or(Path::new(".")).to_path_buf();
        let out = png.unwrap_or_else(|| dir.join("soak.png"));
        soak_plot::redraw(&csv, Some(&events.unwrap_or_else(|| dir.join("events.csv"))), &out)?;
        eprintln!("xtask: drew {} into {}", csv.display(), out.display());
        return Ok(());
    }
    if events.is_some() {
        bail!("--events goes with --plot; {USAGE}");
    }
    let _: f64 = minutes.parse().ok().filter(|m: &f64| *m > 0.0).context("--minutes must be a positive number")?;
    let _: f64 =
        kill_every.parse().ok().filter(|s: &f64| *s >= 10.0).context("--kill-every must be at least 10 (seconds)")?;
    setup()?;
    if etcd {
        packages::ensure("soak --etcd")?;
    }
    let out = target_dir(root).join(if etcd { "soak-etcd" } else { "soak" });
    // A previous run's output would be drawn as this one's.
    for stale in ["soak.csv", "events.csv", "soak.png", "summary.txt"] {
        let _ = std::fs::remove_file(out.join(stale));
    }
    let status = Command::new(cargo())
        .args([
            "test",
            "--locked",
            "-p",
            "shardalloc",
            "--test",
            "with_etcd",
            "--",
            "soak::",
            "--ignored",
            "--nocapture",
        ])
        .env("SHARDALLOC_SOAK_MINUTES", &minutes)
        .env("SHARDALLOC_SOAK_ETCD", if etcd { "1" } else { "0" })
        .env("SHARDALLOC_SOAK_KILL_EVERY_S", &kill_every)
        .env("SHARDALLOC_SOAK_DIR", &out)
        .current_dir(root)
        .status()
        .context("run the soak")?;
    // Drawn whether the soak passed or not: a failed run's samples say most.
    let csv = out.join("soak.csv");
    let mut drawn: anyhow::Result<()> = Ok(());
    for png in std::iter::once(out.join("soak.png")).chain(png).filter(|_| csv.exists()) {
        drawn = drawn.and_then(|()| {
            soak_plot::redraw(&csv, Some(&out.join("events.csv")), &png)?;
            eprintln!("xtask: the plot in {}", png.display());
            Ok(())
        });
    }
    eprintln!("xtask: soak output in {}", out.display());
    if !status.success() {
        if let Err(error) = drawn {
            eprintln!("xtask: the plot could not be drawn: {error:#}");
        }
        bail!("the soak failed ({status}); see {}", out.join("soak.csv").display());
    }
    drawn?;
    Ok(())
}

/// The dashboard's screenshots the docs show: the browser tests' names.
const SCREENSHOTS: [&str; 11] =
    ["map", "pinned", "drained", "dry-run", "strategy", "wrong-token", "many", "load", "overview", "freeze", "plan"];

fn screenshots(root: &Path) -> anyhow::Result<()> {
    setup()?;
    packages::ensure("screenshots")?;
    let tests = ["test", "--locked", "-p", "shardalloc", "--test", "with_node", "--", "dashboard"];
    run(root, &cargo(), &tests)?;
    let taken = target_dir(root).join("tmp/dashboard");
    let docs = root.join("docs/images");
    std::fs::create_dir_all(&docs)?;
    for name in SCREENSHOTS {
        let from = taken.join(format!("{name}.png"));
        let to = docs.join(format!("dashboard-{name}.png"));
        std::fs::copy(&from, &to).with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
        eprintln!("xtask: {}", to.display());
    }
    Ok(())
}

fn demo_strategies(root: &Path) -> anyhow::Result<()> {
    setup()?;
    run(root, &cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    let binary = target_dir(root).join("debug/shardalloc");
    let dir = target_dir(root).join("demo");
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
