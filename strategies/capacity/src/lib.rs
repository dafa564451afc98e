//! # shardalloc-strategy-capacity: place shards where there is room
//!
//! Regions report a load metric with their heartbeats (by default
//! `mem-used-ratio`). This strategy keeps new shards off regions whose value
//! is above a threshold and, while some region has room, drains over-full
//! regions gradually. With `of`, the metric is a count (`sessions`) and a
//! region's value is that count over the quantity of that name the region
//! declared as its capacity when it registered (contract 0.3): a region
//! that declared none counts as not reporting.
//!
//! - **allocate** picks, among the allocatable regions (up, not proxy-only,
//!   not draining), the one with the lowest reported value at or below the
//!   threshold, ties broken by least-shard's suitability order (not
//!   leaving, newer application version, fewer shards, older, address).
//!   Regions that did not report the metric come next; regions over the
//!   threshold last, and picking one logs a warning. It errs only when no
//!   region is allocatable.
//! - **rebalance** moves, from each region over the threshold, its oldest
//!   shard not already moving — one per over-full region per round, most
//!   over-full region first — while some allocatable region reports a value
//!   below the threshold.
//!
//! Layout of this crate:
//! - [`CapacityConfig`]: the settings (`metric`, `threshold`, `of`) and their parsing;
//! - [`fullness`], [`Load`] and [`load`]: how one region's report is classified;
//! - [`Capacity`]: the [`Strategy`];
//! - the component export (`export_strategy!`), active on wasm32 only.
//!
//! See the crate's `README.md` for the operator's view.

#![warn(missing_docs)]

use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, ShardKey, Strategy, View, config, host};

use shardalloc_guest::order::least_loaded;

/// The strategy's name in `describe`.
pub const NAME: &str = "capacity";

/// The default of [`CapacityConfig::metric`].
pub const DEFAULT_METRIC: &str = "mem-used-ratio";

/// The default of [`CapacityConfig::threshold`].
pub const DEFAULT_THRESHOLD: f64 = 0.8;

/// JSON Schema of the configuration.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "capacity strategy configuration",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "metric": {
      "description": "Name of the metric regions report, a ratio from 0 (empty) to 1 (full).",
      "type": "string",
      "minLength": 1,
      "default": "mem-used-ratio"
    },
    "of": {
      "description": "Divide the metric by the region's declared capacity quantity of this name (e.g. metric `sessions` of `sessions`); regions that declared none count as not reporting. Unset: the metric is already a ratio.",
      "type": ["string", "null"],
      "minLength": 1,
      "default": null
    },
    "threshold": {
      "description": "A region whose metric is above this value gets no new shards (unless every region is) and is drained one shard per round.",
      "type": "number",
      "exclusiveMinimum": 0,
      "maximum": 1,
      "default": 0.8
    }
  }
}"#;

/// The settings of [`Capacity`].
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityConfig {
    /// The metric compared with the threshold. Default [`DEFAULT_METRIC`].
    pub metric: String,
    /// Values above it are over-full; a finite number in (0, 1]. Default
    /// [`DEFAULT_THRESHOLD`].
    pub threshold: f64,
    /// The declared capacity quantity the metric is divided by; `None`
    /// (the default): the metric is a ratio already.
    pub of: Option<String>,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        CapacityConfig { metric: DEFAULT_METRIC.to_owned(), threshold: DEFAULT_THRESHOLD, of: None }
    }
}

/// The configuration as written; values are checked by hand so that every
/// error names its key.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    metric: Option<serde_json::Value>,
    threshold: Option<serde_json::Value>,
    of: Option<serde_json::Value>,
}

impl CapacityConfig {
    /// Parses configuration JSON. Empty text, `null` or `{}` give the
    /// defaults; a key set to `null` takes its default. An unknown key or a
    /// bad value is an error naming the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: RawConfig = config::parse(text)?;
        let mut parsed = CapacityConfig::default();
        if let Some(value) = raw.metric.filter(|v| !v.is_null()) {
            match value.as_str() {
                Some(name) if !name.trim().is_empty() => parsed.metric = name.to_owned(),
                _ => return Err(format!("`metric` must be a non-empty string, got {value}")),
            }
        }
        if let Some(value) = raw.of.filter(|v| !v.is_null()) {
            match value.as_str() {
                Some(name) if !name.trim().is_empty() => parsed.of = Some(name.to_owned()),
                _ => return Err(format!("`of` must be a non-empty string (a capacity quantity's name), got {value}")),
            }
        }
        if let Some(value) = raw.threshold.filter(|v| !v.is_null()) {
            match value.as_f64() {
                Some(t) if t.is_finite() && t > 0.0 && t <= 1.0 => parsed.threshold = t,
                _ => return Err(format!("`threshold` must be a number greater than 0 and at most 1, got {value}")),
            }
        }
        Ok(parsed)
    }
}

/// How a region stands against the threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Reported a value at or below the threshold.
    Room(f64),
    /// Did not report the metric.
    Unknown,
    /// Reported a value above the threshold.
    Over(f64),
}

impl Load {
    /// The reported value, if any.
    pub fn value(self) -> Option<f64> {
        match self {
            Load::Room(v) | Load::Over(v) => Some(v),
            Load::Unknown => None,
        }
    }
}

/// Region `id`'s value: its metric in `column` (from
/// [`View::metric_column`]; `None` when no region reports the metric),
/// divided by its declared quantity [`CapacityConfig::of`] when set (a
/// quantity of zero leaves no room: the value is infinite). `None` when it
/// reported no metric or declared no such quantity.
pub fn fullness(view: &View, id: RegionId, column: Option<usize>, config: &CapacityConfig) -> Option<f64> {
    let value = column.and_then(|c| view.metric_at(id, c))?;
    match &config.of {
        None => Some(value),
        Some(quantity) => {
            let capacity = view.region(id).quantity(quantity)?;
            Some(if capacity > 0.0 { value / capacity } else { f64::INFINITY })
        }
    }
}

/// Classifies region `id` against the threshold by its [`fullness`].
pub fn load(view: &View, id: RegionId, column: Option<usize>, config: &CapacityConfig) -> Load {
    match fullness(view, id, column, config) {
        None => Load::Unknown,
        Some(v) if v > config.threshold => Load::Over(v),
        Some(v) => Load::Room(v),
    }
}

/// The capacity-aware strategy. `Default` gives the default settings.
#[derive(Clone, Debug, Default)]
pub struct Capacity {
    config: CapacityConfig,
}

impl Capacity {
    /// A strategy with these settings.
    pub fn with_config(config: CapacityConfig) -> Self {
        Capacity { config }
    }

    /// The settings in force.
    pub fn config(&self) -> &CapacityConfig {
        &self.config
    }

    fn load(&self, view: &View, id: RegionId, column: Option<usize>) -> Load {
        load(view, id, column, &self.config)
    }
}

/// Among `regions` (each with a reported value), the least-loaded of those
/// with the lowest value, and that value.
fn lowest(view: &View, regions: &[(RegionId, f64)]) -> Option<(RegionId, f64)> {
    let min = regions.iter().map(|(_, v)| *v).min_by(f64::total_cmp)?;
    let best = least_loaded(view, regions.iter().filter(|(_, v)| *v == min).map(|(id, _)| *id))?;
    Some((best, min))
}

impl Strategy for Capacity {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Allocates to the region with the most free capacity by a reported metric \
                          (mem-used-ratio by default), avoiding regions over a threshold, and drains \
                          over-full regions one shard per region per round."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: false,
            needs_shard_attributes: false,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        self.config = CapacityConfig::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        let column = view.metric_column(&self.config.metric);
        let mut room = Vec::new();
        let mut unknown = Vec::new();
        let mut over = Vec::new();
        for id in view.allocatable() {
            match self.load(view, id, column) {
                Load::Room(v) => room.push((id, v)),
                Load::Unknown => unknown.push(id),
                Load::Over(v) => over.push((id, v)),
            }
        }
        if let Some((best, _)) = lowest(view, &room) {
            return Ok(best);
        }
        if let Some(best) = least_loaded(view, unknown.into_iter()) {
            return Ok(best);
        }
        let (best, value) = lowest(view, &over).ok_or_else(|| "no allocatable region".to_owned())?;
        host::log(
            Level::Warn,
            "every allocatable region is over the capacity threshold; allocating to the least full",
            &[
                ("shard", shard.id()),
                ("region", &view.region(best).address),
                ("metric", &self.config.metric),
                ("value", &value.to_string()),
                ("threshold", &self.config.threshold.to_string()),
            ],
        );
        Ok(best)
    }

    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Move>, String> {
        if let Some(blocker) = view.hand_off_blocker() {
            let region = view.region(blocker);
            host::log(
                Level::Debug,
                "rebalance held: a region is joining or unreachable",
                &[("region", &region.address), ("status", region.status.as_str())],
            );
            return Ok(Vec::new());
        }
        let Some(column) = view.metric_column(&self.config.metric) else {
            return Ok(Vec::new());
        };
        let has_destination = view
            .allocatable()
            .any(|id| fullness(view, id, Some(column), &self.config).is_some_and(|v| v < self.config.threshold));
        if !has_destination {
            return Ok(Vec::new());
        }
        let regions = allocations.region_count().min(view.regions().len()) as u32;
        let mut over: Vec<(RegionId, f64)> = (0..regions)
            .map(RegionId)
            .filter(|id| !view.region(*id).proxy_only)
            .filter_map(|id| match self.load(view, id, Some(column)) {
                Load::Over(v) => Some((id, v)),
                _ => None,
            })
            .collect();
        // Most over-full first; equal values by address, so the order never
        // depends on the topology's.
        over.sort_by(|(a, va), (b, vb)| {
            vb.total_cmp(va).then_with(|| view.region(*a).address.cmp(&view.region(*b).address))
        });
        Ok(over
            .into_iter()
            .filter_map(|(id, _)| {
                allocations.region_shards(id).find(|s| !allocations.is_in_progress(*s) && !allocations.is_pinned(*s))
            })
            .map(Move::from)
            .collect())
    }
}

shardalloc_guest::export_strategy!(Capacity);
