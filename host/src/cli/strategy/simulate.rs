//! `shardalloc strategy simulate`: rounds of rebalance and re-allocation
//! over a snapshot, or a load trace replayed against one or more
//! strategies side by side.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::json;
use shardalloc::strategy::external::ExternalAllocation;
use shardalloc::strategy::guarded::Guarded;
use shardalloc::strategy::replay::Replay;
use shardalloc::strategy::simulate::simulate;
use shardalloc::strategy::trace::Trace;

use super::{Common, Sandbox, load, prepare};

/// Simulates `rounds` over `snapshot` with one strategy.
pub(super) fn snapshot(
    strategy: &[String],
    config: Option<String>,
    snapshot: Option<PathBuf>,
    rounds: Option<u32>,
    sandbox: Sandbox,
) -> anyhow::Result<()> {
    let [strategy] = strategy else {
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

/// Replays a trace against each strategy, side by side: one line per round
/// (each strategy's moves and maxOverBound), then one summary line each.
pub(super) fn replay_trace(
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
