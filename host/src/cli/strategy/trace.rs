//! `shardalloc strategy trace`: a generated load trace (Zipf-distributed
//! shard loads whose hot set drifts; regions that join, leave and fail;
//! with `--communities`, shards in groups that message each other, whose
//! members drift), deterministic for a seed, as CSV on stdout.

use anyhow::bail;
use shardalloc::strategy::trace::{TraceShape, generate};

/// The shape `strategy trace` asks for: its flags.
#[derive(Debug, clap::Args)]
pub struct Asked {
    /// Regions at the start.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub regions: u64,
    /// Shards.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub shards: u64,
    /// The Zipf exponent of the shard loads.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// How long the trace runs, in minutes.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=10_080))]
    pub minutes: u64,
    /// Every this many minutes the hottest 1% of shards trade their load (0: never).
    #[arg(long, default_value_t = 10)]
    pub drift_every_m: u64,
    /// Regions that join during the trace.
    #[arg(long, default_value_t = 0)]
    pub joins: usize,
    /// The joining regions join together, at the first of their times.
    #[arg(long, requires = "joins")]
    pub joins_together: bool,
    /// Regions that leave during the trace.
    #[arg(long, default_value_t = 0)]
    pub leaves: usize,
    /// Regions that fail during the trace.
    #[arg(long, default_value_t = 0)]
    pub fails: usize,
    /// Communities of shards that message each other (0: no edge lines):
    /// each shard has 2 edges, most inside its community, and at each drift
    /// 1% of the shards move to another community.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub communities: u64,
    /// The share of edges inside a shard's community, from 0 to 1.
    #[arg(long, default_value_t = 0.9)]
    pub inside: f64,
    /// The seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Prints the trace `asked` describes, after checking it can be made.
pub(super) fn run(asked: Asked) -> anyhow::Result<()> {
    let Asked {
        regions,
        shards,
        zipf,
        minutes,
        drift_every_m,
        joins,
        joins_together,
        leaves,
        fails,
        communities,
        inside,
        seed,
    } = asked;
    if !(zipf.is_finite() && zipf >= 0.0) {
        bail!("--zipf must be a finite number of at least 0, not {zipf}");
    }
    if !(0.0..=1.0).contains(&inside) {
        bail!("--inside is a share from 0 to 1, not {inside}");
    }
    if communities > shards {
        bail!("--communities ({communities}) must not exceed --shards ({shards})");
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
        communities: communities as usize,
        inside,
        seed,
    };
    print!("{}", generate(&shape));
    Ok(())
}
