//! `shardalloc strategy trace`: a generated load trace (Zipf-distributed
//! shard loads whose hot set drifts; regions that join, leave and fail),
//! deterministic for a seed, as CSV on stdout.

use anyhow::bail;
use shardalloc::strategy::trace::{TraceShape, generate};

/// The shape `strategy trace` asks for, as its flags give it.
pub(super) struct Asked {
    pub regions: u64,
    pub shards: u64,
    pub zipf: f64,
    pub minutes: u64,
    pub drift_every_m: u64,
    pub joins: usize,
    pub joins_together: bool,
    pub leaves: usize,
    pub fails: usize,
    pub seed: u64,
}

/// Prints the trace `asked` describes, after checking it can be made.
pub(super) fn run(asked: Asked) -> anyhow::Result<()> {
    let Asked { regions, shards, zipf, minutes, drift_every_m, joins, joins_together, leaves, fails, seed } = asked;
    if !(zipf.is_finite() && zipf >= 0.0) {
        bail!("--zipf must be a finite number of at least 0, not {zipf}");
    }
    if leaves + fails >= regions as usize + joins {
        bail!("--leaves and --fails ({}) must leave a region: {regions} present and {joins} joining", leaves + fails);
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
