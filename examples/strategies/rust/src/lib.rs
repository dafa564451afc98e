//! `latency-aware-rust`: place a shard on the region that answers fastest,
//! in the requester's zone when it can, and even out shard counts in
//! bounded rounds.
//!
//! The same strategy is written in JavaScript, Python and C next to this
//! crate; all four give the same answers.
//!
//! - allocate: among the allocatable regions (up, not proxy-only, not
//!   draining) — only those in the requester's zone (the label
//!   `zone_label`) when the requester has one and any allocatable region
//!   shares it — and of those, the ones holding at most `max_imbalance`
//!   shards more than the emptiest of them: the one with the lowest
//!   `metric` (a region that did not report it counts as infinitely slow),
//!   then the fewest shards, then the lowest index.
//! - rebalance: nothing while any hand-off is in progress. Otherwise, when
//!   the fullest allocatable region holds more than `max_imbalance` shards
//!   above the emptiest, move `min(max_moves, gap / 2)` of its oldest shards.

use serde::Deserialize;
use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, Shard, ShardKey, Strategy, View, config, log};

/// The name the strategy reports in `describe`.
pub const NAME: &str = "latency-aware-rust";

/// JSON Schema of the configuration, published in `describe`.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "metric": { "type": "string", "minLength": 1, "default": "latency_ms" },
    "zone_label": { "type": "string", "minLength": 1, "default": "zone" },
    "max_imbalance": { "type": "integer", "minimum": 1, "maximum": 4294967295, "default": 2 },
    "max_moves": { "type": "integer", "minimum": 1, "maximum": 4294967295, "default": 5 }
  }
}"#;

/// The settings. Every key is optional; an unknown key is an error naming it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The metric column to read: lower is better.
    pub metric: String,
    /// The region label compared with the requester's.
    pub zone_label: String,
    /// Rebalance acts when the fullest region holds more than this many
    /// shards above the emptiest.
    pub max_imbalance: u32,
    /// Most shards moved in one round.
    pub max_moves: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { metric: "latency_ms".to_owned(), zone_label: "zone".to_owned(), max_imbalance: 2, max_moves: 5 }
    }
}

/// The strategy. `Default` (required by `export_strategy!`) means default settings.
#[derive(Clone, Debug, Default)]
pub struct LatencyAware {
    settings: Settings,
}

impl LatencyAware {
    /// The strategy with `settings`, for tests.
    pub fn with(settings: Settings) -> Self {
        LatencyAware { settings }
    }

    fn latency(&self, view: &View, column: Option<usize>, id: RegionId) -> f64 {
        column.and_then(|c| view.metric_at(id, c)).filter(|v| !v.is_nan()).unwrap_or(f64::INFINITY)
    }
}

impl Strategy for LatencyAware {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Places a shard on the lowest-latency region, in the requester's zone when it can; \
                          evens out shard counts a few shards per round."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: false,
            needs_shard_attributes: false,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        let settings: Settings = config::parse(config)?;
        if settings.metric.is_empty() {
            return Err("invalid config: metric must be a non-empty string".to_owned());
        }
        if settings.zone_label.is_empty() {
            return Err("invalid config: zone_label must be a non-empty string".to_owned());
        }
        if settings.max_imbalance == 0 {
            return Err("invalid config: max_imbalance must be at least 1".to_owned());
        }
        if settings.max_moves == 0 {
            return Err("invalid config: max_moves must be at least 1".to_owned());
        }
        self.settings = settings;
        Ok(())
    }

    fn allocate(&self, view: &View, _shard: &ShardKey, requester: Option<RegionId>) -> Result<RegionId, String> {
        let zone = requester.and_then(|r| view.region(r).label(&self.settings.zone_label));
        let in_zone = |id: &RegionId| zone.is_none_or(|z| view.region(*id).label(&self.settings.zone_label) == Some(z));
        let column = view.metric_column(&self.settings.metric);
        let best = |candidates: &mut dyn Iterator<Item = RegionId>| {
            let candidates: Vec<RegionId> = candidates.collect();
            // Latency decides only among regions within `max_imbalance` of
            // the emptiest, so allocation never undoes what rebalance evens out.
            let floor = candidates.iter().map(|id| view.shard_count(*id)).min()?;
            let ceiling = floor.saturating_add(self.settings.max_imbalance);
            candidates.into_iter().filter(|id| view.shard_count(*id) <= ceiling).min_by(|a, b| {
                self.latency(view, column, *a)
                    .total_cmp(&self.latency(view, column, *b))
                    .then(view.shard_count(*a).cmp(&view.shard_count(*b)))
                    .then(a.cmp(b))
            })
        };
        best(&mut view.allocatable().filter(in_zone))
            .or_else(|| best(&mut view.allocatable()))
            .ok_or_else(|| "no allocatable region".to_owned())
    }

    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Move>, String> {
        if allocations.in_progress_count() > 0 {
            return Ok(Vec::new());
        }
        let fullest = view.allocatable().max_by(|a, b| view.shard_count(*a).cmp(&view.shard_count(*b)).then(b.cmp(a)));
        let emptiest = view.allocatable().min_by_key(|id| (view.shard_count(*id), *id));
        let (Some(fullest), Some(emptiest)) = (fullest, emptiest) else { return Ok(Vec::new()) };
        let gap = view.shard_count(fullest) - view.shard_count(emptiest);
        if gap <= self.settings.max_imbalance {
            return Ok(Vec::new());
        }
        let moves = self.settings.max_moves.min(gap / 2) as usize;
        // Shards pinned by placements stay: move the oldest of the others.
        let shards: Vec<Shard> =
            allocations.region_shards(fullest).filter(|s| !allocations.is_pinned(*s)).take(moves).collect();
        log(
            Level::Debug,
            "moving shards",
            &[("from", &view.region(fullest).address), ("count", &shards.len().to_string())],
        );
        Ok(shards.into_iter().map(Move::from).collect())
    }
}

shardalloc_guest::export_strategy!(LatencyAware);
