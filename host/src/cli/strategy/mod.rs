//! `shardalloc strategy …`: strategies offline, against a snapshot file,
//! with one JSON line per answer on stdout (one module per subcommand:
//! `inspect.rs`, `conform.rs`, `wrap.rs`, `eval.rs`, `simulate.rs`,
//! `trace.rs`); `dry-run` and `shadow` ask a running node instead
//! (`tryout.rs`). This file holds the commands' flags, the dispatch and
//! what several share (loading a strategy, reading a snapshot).

mod conform;
mod eval;
mod inspect;
mod simulate;
mod trace;
pub mod tryout;
mod wrap;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use shardalloc::engine::instance::Sandboxed;
use shardalloc::engine::limits::Limits;
use shardalloc::strategy::StrategySource;
use shardalloc::strategy::external::ExternalAllocation;
use shardalloc::strategy::guarded::Guarded;
use shardalloc_guest::Snapshot;

#[derive(Debug, Subcommand)]
pub enum StrategyCommand {
    /// Ask a running node what a candidate would do on a type's current
    /// state (its allocations, its rebalance, rounds of it), nothing applied.
    DryRun(tryout::DryRunArgs),
    /// Run a candidate beside a type's active strategy on a running node,
    /// counting where it disagrees (`set`, `show`, `clear`).
    #[command(subcommand)]
    Shadow(tryout::ShadowCommand),
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
    Trace(trace::Asked),
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
    #[arg(long, default_value_t = (shardalloc::engine::limits::DEFAULT_MEMORY_LIMIT >> 20) as u64, value_parser = clap::value_parser!(u64).range(1..=1024))]
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
        StrategyCommand::DryRun(args) => tryout::dry_run(args),
        StrategyCommand::Shadow(command) => tryout::shadow(command),
        StrategyCommand::Conform { strategy, config, sandbox } => conform::run(&strategy, config.as_deref(), &sandbox),
        StrategyCommand::Inspect { strategy, config } => inspect::run(&strategy, config.as_deref()),
        StrategyCommand::Wrap { module, out } => wrap::run(&module, &out),
        StrategyCommand::Eval { common, question } => eval::run(&common, question),
        StrategyCommand::Trace(asked) => trace::run(asked),
        StrategyCommand::Simulate {
            strategy,
            config,
            snapshot: None,
            trace: Some(trace),
            rounds_every_s,
            sandbox,
            ..
        } => simulate::replay_trace(&trace, &strategy, config.as_deref(), rounds_every_s * 1_000, &sandbox),
        StrategyCommand::Simulate { strategy, config, snapshot, rounds, sandbox, .. } => {
            simulate::snapshot(&strategy, config, snapshot, rounds, sandbox)
        }
    }
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
