//! `shardalloc strategy inspect|eval|simulate`: strategies offline, against
//! a snapshot file, with one JSON line per answer on stdout; `dry-run` and
//! `shadow` ask a running node instead (`tryout.rs`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use shardalloc::engine::Engine;
use shardalloc::engine::instance::Sandboxed;
use shardalloc::engine::limits::Limits;
use shardalloc::strategy::external::{AllocationReason, ExternalAllocation};
use shardalloc::strategy::guarded::Guarded;
use shardalloc::strategy::replay::Replay;
use shardalloc::strategy::simulate::simulate;
use shardalloc::strategy::trace::{Trace, TraceShape, generate};
use shardalloc::strategy::{ClusterView, StrategySource};
use shardalloc_guest::Snapshot;
use shardalloc_guest::conformance::Problem;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum StrategyCommand {
    /// Ask a running node what a candidate would do on a type's current
    /// state (its allocations, its rebalance, rounds of it), nothing applied.
    DryRun(super::tryout::DryRunArgs),
    /// Run a candidate beside a type's active strategy on a running node,
    /// counting where it disagrees (`set`, `show`, `clear`).
    #[command(subcommand)]
    Shadow(super::tryout::ShadowCommand),
    /// Print a strategy's name, version, description and config schema.
    Inspect {
        /// A built-in name (least-shard, hash, capacity, zone, load-balance) or a .wasm component.
        strategy: String,
        /// A configuration to apply first (some settings change what the strategy needs).
        #[arg(long)]
        config: Option<String>,
    },
    /// Run the conformance suite against a strategy (as a component) and
    /// print every violation; exits non-zero when there is any.
    Conform {
        /// A built-in name or a .wasm component.
        strategy: String,
        /// The strategy's configuration, a JSON object.
        #[arg(long)]
        config: Option<String>,
        #[command(flatten)]
        sandbox: Sandbox,
    },
    /// Wrap a core module built for wasm32-unknown-unknown with the SDK into
    /// a strategy component.
    Wrap {
        /// The core module (target/wasm32-unknown-unknown/release/NAME.wasm).
        module: PathBuf,
        /// Where to write the component.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Ask a strategy one question about a snapshot.
    Eval {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        question: Question,
    },
    /// Run rounds of rebalance and re-allocation over a snapshot
    /// (`--snapshot`, `--rounds`), or replay a load trace against one or
    /// more strategies side by side (`--trace`).
    Simulate {
        /// A built-in name or the path of a .wasm component; repeat it to
        /// compare strategies on a trace.
        #[arg(long, default_value = "least-shard")]
        strategy: Vec<String>,
        /// The strategy's configuration, a JSON object (each strategy's, on a trace).
        #[arg(long)]
        config: Option<String>,
        /// The snapshot file (JSON).
        #[arg(long, conflicts_with = "trace", required_unless_present = "trace")]
        snapshot: Option<PathBuf>,
        /// Number of rounds over the snapshot.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000), requires = "snapshot")]
        rounds: Option<u32>,
        /// A load trace (CSV `t_ms,kind,subject,value`; docs/load.md).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Seconds between two rounds of a trace's replay.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400), requires = "trace")]
        rounds_every_s: u64,
        #[command(flatten)]
        sandbox: Sandbox,
    },
    /// Generate a load trace: Zipf-distributed shard loads whose hot set
    /// drifts, and regions that join, leave and fail; deterministic for a seed.
    Trace {
        /// Regions at the start.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        regions: u64,
        /// Shards.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        shards: u64,
        /// The Zipf exponent of the shard loads.
        #[arg(long, default_value_t = 1.1)]
        zipf: f64,
        /// How long the trace runs, in minutes.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=10_080))]
        minutes: u64,
        /// Every this many minutes the hottest 1% of shards trade their load (0: never).
        #[arg(long, default_value_t = 10)]
        drift_every_m: u64,
        /// Regions that join during the trace.
        #[arg(long, default_value_t = 0)]
        joins: usize,
        /// The joining regions join together, at the first of their times.
        #[arg(long, requires = "joins")]
        joins_together: bool,
        /// Regions that leave during the trace.
        #[arg(long, default_value_t = 0)]
        leaves: usize,
        /// Regions that fail during the trace.
        #[arg(long, default_value_t = 0)]
        fails: usize,
        /// The seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Debug, Args)]
pub struct Common {
    /// A built-in name or the path of a .wasm component.
    #[arg(long, default_value = "least-shard")]
    strategy: String,
    /// The strategy's configuration, a JSON object.
    #[arg(long)]
    config: Option<String>,
    /// The snapshot file (JSON).
    #[arg(long)]
    snapshot: PathBuf,
    #[command(flatten)]
    sandbox: Sandbox,
}

/// The sandbox limits of offline tools.
#[derive(Debug, Args)]
pub struct Sandbox {
    /// Deadline of one strategy call, in milliseconds (offline tools default
    /// to a generous 1000, so a busy machine does not fail a run; the node's
    /// default is 50).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    deadline_ms: u64,
    /// Memory cap of the strategy, in MiB.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    memory_mib: u64,
}

impl Sandbox {
    fn limits(&self) -> Limits {
        Limits {
            deadline: Duration::from_millis(self.deadline_ms),
            memory: (self.memory_mib as usize) << 20,
            ..Limits::default()
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Question {
    /// Which region should own a shard: prints {"region":"ADDRESS"}.
    Allocate {
        /// The shard id.
        #[arg(long)]
        shard: String,
        /// The address of the region asking.
        #[arg(long)]
        requester: Option<String>,
    },
    /// Which shards should move: prints {"shards":[…]}.
    Rebalance,
}

/// Runs a strategy subcommand.
pub fn run(command: StrategyCommand) -> anyhow::Result<()> {
    match command {
        StrategyCommand::DryRun(args) => super::tryout::dry_run(args),
        StrategyCommand::Shadow(command) => super::tryout::shadow(command),
        StrategyCommand::Conform { strategy, config, sandbox } => {
            let loaded = load(&strategy, config.as_deref(), sandbox.limits())?;
            let contract = loaded.compiled().contract.name();
            let scenarios = shardalloc_guest::conformance::scenarios().len();
            let problems = shardalloc_guest::conformance::run(&mut Conformance(loaded));
            let kinds = problem_kinds(&problems);
            for (kind, count, first) in &kinds {
                println!("{}", json!({ "problem": kind, "count": count, "first": first }));
            }
            if problems.is_empty() {
                println!("{}", json!({ "conformant": true, "contract": contract, "scenarios": scenarios }));
                return Ok(());
            }
            println!(
                "{}",
                json!({
                    "conformant": false,
                    "contract": contract,
                    "scenarios": scenarios,
                    "problems": problems.len(),
                    "distinct": kinds.len()
                })
            );
            bail!(
                "{} conformance problems ({} distinct, each printed once with its count) over {scenarios} scenarios",
                problems.len(),
                kinds.len()
            )
        }
        StrategyCommand::Inspect { strategy, config } => {
            let loaded = load(&strategy, config.as_deref(), Limits::default())?;
            let info = shardalloc::strategy::AllocationStrategy::info(&loaded);
            let schema: serde_json::Value =
                serde_json::from_str(&info.config_schema).unwrap_or_else(|_| info.config_schema.clone().into());
            println!(
                "{}",
                json!({
                    "name": info.name,
                    "version": info.version,
                    "description": info.description,
                    "needs_shard_names": info.needs_shard_names,
                    "config_schema": schema,
                    "contract": loaded.compiled().contract.name(),
                })
            );
            Ok(())
        }
        StrategyCommand::Wrap { module, out } => {
            let core = std::fs::read(&module).with_context(|| format!("cannot read {}", module.display()))?;
            let component = shardalloc_guest_build::wrap_core_module(&core)?;
            // Prove it loads before writing it.
            let loaded = Engine::for_tool()?
                .load(&component, "", Default::default())
                .with_context(|| format!("the wrapped {} is not a usable strategy", module.display()))?;
            std::fs::write(&out, &component).with_context(|| format!("cannot write {}", out.display()))?;
            let info = shardalloc::strategy::AllocationStrategy::info(&loaded);
            println!(
                "{}",
                json!({ "component": out, "name": info.name, "version": info.version, "bytes": component.len() })
            );
            Ok(())
        }
        StrategyCommand::Eval { common, question } => {
            let (snapshot, mut external) = prepare(&common)?;
            let view = ClusterView::from_snapshot(&snapshot);
            match question {
                Question::Allocate { shard, requester } => {
                    if shard.is_empty() {
                        bail!("--shard must not be empty");
                    }
                    if let Some(r) = &requester
                        && view.region_index(r).is_none()
                    {
                        bail!("--requester {r} is not a region of the snapshot");
                    }
                    let allocation = external.allocate(&view, &shard, requester.as_deref())?;
                    if let Some(warning) = &allocation.warning {
                        eprintln!("warning: {warning}");
                    }
                    let mut line = json!({ "region": allocation.region });
                    if let AllocationReason::Fallback(error) = &allocation.reason {
                        eprintln!("fallback: {error}");
                        line["fallback"] = error.to_string().into();
                    }
                    println!("{line}");
                }
                Question::Rebalance => {
                    let rebalance = external.rebalance(&view);
                    let mut line = json!({ "shards": rebalance.shards });
                    if let Some(error) = &rebalance.fallback {
                        eprintln!("fallback: {error}");
                        line["fallback"] = error.to_string().into();
                    }
                    println!("{line}");
                }
            }
            Ok(())
        }
        StrategyCommand::Trace {
            regions,
            shards,
            zipf,
            minutes,
            drift_every_m,
            joins,
            joins_together,
            leaves,
            fails,
            seed,
        } => {
            if !(zipf.is_finite() && zipf >= 0.0) {
                bail!("--zipf must be a finite number of at least 0, not {zipf}");
            }
            if leaves + fails >= regions as usize + joins {
                bail!(
                    "--leaves and --fails ({}) must leave a region: {regions} present and {joins} joining",
                    leaves + fails
                );
            }
            let shape = TraceShape {
                regions: regions as usize,
                shards: shards as usize,
                zipf,
                duration_ms: minutes * 60_000,
                drift_every_ms: drift_every_m * 60_000,
                joins,
                joins_together,
                leaves,
                fails,
                seed,
            };
            print!("{}", generate(&shape));
            Ok(())
        }
        StrategyCommand::Simulate {
            strategy,
            config,
            snapshot: None,
            trace: Some(trace),
            rounds_every_s,
            sandbox,
            ..
        } => replay_trace(&trace, &strategy, config.as_deref(), rounds_every_s * 1_000, &sandbox),
        StrategyCommand::Simulate { strategy, config, snapshot, rounds, sandbox, .. } => {
            let [strategy] = &strategy[..] else {
                bail!(
                    "--strategy is given {} times; a snapshot is simulated with one (compare several on a --trace)",
                    strategy.len()
                );
            };
            let snapshot = snapshot.context("--snapshot or --trace is needed")?;
            let rounds = rounds.context("--rounds is needed with --snapshot")?;
            let common = Common { strategy: strategy.clone(), config, snapshot, sandbox };
            let (snapshot, mut external) = prepare(&common)?;
            simulate(&mut external, &snapshot, rounds as usize, |round| {
                for fallback in &round.fallbacks {
                    eprintln!("fallback in round {}: {fallback}", round.round);
                }
                let line = json!({ "round": round.round, "moved": round.moved, "counts": round.counts });
                let mut line = line;
                if !round.unallocated.is_empty() {
                    line["unallocated"] = json!(round.unallocated);
                }
                println!("{line}");
            });
            Ok(())
        }
    }
}

/// Replays a trace against each strategy, side by side: one line per round
/// (each strategy's moves and maxOverBound), then one summary line each.
fn replay_trace(
    path: &Path,
    strategies: &[String],
    config: Option<&str>,
    every_ms: u64,
    sandbox: &Sandbox,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read trace {}", path.display()))?;
    let trace = Trace::parse(&text).with_context(|| format!("trace {}", path.display()))?;
    let mut replays = Vec::with_capacity(strategies.len());
    for spec in strategies {
        let strategy = load(spec, config, sandbox.limits())?;
        replays.push((spec.clone(), Replay::new(&trace, ExternalAllocation::new(Guarded::new(Box::new(strategy))))));
    }
    let rounds = trace.end_ms() / every_ms + 1;
    for round in 1..=rounds {
        let at = round * every_ms;
        let mut figures = serde_json::Map::new();
        for (spec, replay) in &mut replays {
            figures.insert(spec.clone(), serde_json::to_value(replay.round(at))?);
        }
        println!("{}", json!({ "round": round, "tMs": at, "strategies": figures }));
    }
    for (_, replay) in &replays {
        println!("{}", serde_json::to_string(&replay.summary())?);
    }
    Ok(())
}

fn load(spec: &str, config: Option<&str>, limits: Limits) -> anyhow::Result<Sandboxed> {
    let config = match config {
        None => String::new(),
        Some(text) => {
            let value: serde_json::Value =
                serde_json::from_str(text).with_context(|| format!("--config is not valid JSON: {text}"))?;
            if !value.is_object() {
                bail!("--config must be a JSON object, got {text}");
            }
            value.to_string()
        }
    };
    let source = StrategySource::parse_cli(spec)?;
    let engine = super::artifacts::tool_engine()?;
    super::artifacts::announce_compile(&engine, &source);
    Ok(engine.load_source(&source, &config, limits, None)?)
}

/// Problems grouped by what went wrong, in order of first appearance: the
/// description, how many times, and where first (`scenario: call`).
fn problem_kinds(problems: &[Problem]) -> Vec<(String, usize, String)> {
    let mut kinds: Vec<(String, usize, String)> = Vec::new();
    for problem in problems {
        let kind = problem.kind();
        match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, count, _)) => *count += 1,
            None => kinds.push((kind, 1, format!("{}: {}", problem.scenario, problem.call))),
        }
    }
    kinds
}

fn read_snapshot(path: &Path) -> anyhow::Result<Snapshot> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read snapshot {}", path.display()))?;
    Snapshot::from_json(&text).with_context(|| format!("snapshot {}", path.display()))
}

fn prepare(common: &Common) -> anyhow::Result<(Snapshot, ExternalAllocation)> {
    let snapshot = read_snapshot(&common.snapshot)?;
    let strategy = load(&common.strategy, common.config.as_deref(), common.sandbox.limits())?;
    let mut external = ExternalAllocation::new(Guarded::new(Box::new(strategy)));
    for (shard, target) in &snapshot.placements {
        external.set_placement(shard.clone(), target.clone());
    }
    Ok((snapshot, external))
}

/// A loaded strategy as a conformance subject: each snapshot is viewed as
/// the node would view it.
struct Conformance(Sandboxed);

impl shardalloc_guest::conformance::Subject for Conformance {
    fn allocate(&mut self, snapshot: &Snapshot, shard: &str, requester: Option<&str>) -> Result<String, String> {
        use shardalloc::strategy::AllocationStrategy;
        self.0.allocate(&ClusterView::from_snapshot(snapshot), shard, requester).map_err(|e| e.to_string())
    }

    fn rebalance(&mut self, snapshot: &Snapshot) -> Result<Vec<String>, String> {
        use shardalloc::strategy::AllocationStrategy;
        self.0.rebalance(&ClusterView::from_snapshot(snapshot)).map_err(|e| e.to_string())
    }
}
