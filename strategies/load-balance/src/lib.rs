//! # shardalloc-strategy-load-balance: keep every region's load near the mean
//!
//! Regions report each shard's load (contract 0.2 carries the node's
//! smoothed averages). This strategy keeps every allocatable region's load
//! within a tolerance band around the mean (±10% by default) and fills new
//! or emptied regions to the mean:
//!
//! - **allocate** picks the least loaded allocatable region (where a round
//!   sends what it moves), ties by least-shard's order;
//! - **rebalance** moves shards from the most loaded region to the least
//!   loaded one while some region is above the band, or below it (then it
//!   is filled to the mean): each move takes the shard whose load fixes
//!   the most of the gap without overshooting, and only a move that leaves
//!   both regions below the source's load now, so a move never raises the
//!   maximum and a shard is never sent back and forth. While any hand-off
//!   is in progress the round moves nothing (the loads are about to
//!   change). Pinned shards stay; draining, leaving and proxy regions are
//!   neither sources of the balance nor destinations.
//! - With no load reported at all it balances shard counts the same way.
//!
//! Layout of this crate:
//! - [`LoadBalanceConfig`]: the settings (`tolerance`, `max_moves`) and their parsing;
//! - [`plan`]: the moves of one round over region loads, pure and tested alone;
//! - [`LoadBalance`]: the [`Strategy`];
//! - the component export (`export_strategy!`), active on wasm32 only.

#![warn(missing_docs)]

use shardalloc_guest::order::least_loaded;
use shardalloc_guest::{Allocations, Info, Level, RegionId, Shard, ShardKey, Strategy, View, config, host};

/// The strategy's name in `describe`.
pub const NAME: &str = "load-balance";

/// The default of [`LoadBalanceConfig::tolerance`].
pub const DEFAULT_TOLERANCE: f64 = 0.1;

/// The default of [`LoadBalanceConfig::max_moves`].
pub const DEFAULT_MAX_MOVES: usize = 100;

/// JSON Schema of the configuration.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "load-balance strategy configuration",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "tolerance": {
      "description": "How far a region's load may be from the mean, as a fraction of it, before shards move.",
      "type": "number",
      "exclusiveMinimum": 0,
      "maximum": 1,
      "default": 0.1
    },
    "max_moves": {
      "description": "Most shards one round moves (the node's churn limits may clip further).",
      "type": "integer",
      "minimum": 1,
      "default": 100
    }
  }
}"#;

/// The settings of [`LoadBalance`].
#[derive(Clone, Debug, PartialEq)]
pub struct LoadBalanceConfig {
    /// The band around the mean: a region within `mean × (1 ± tolerance)`
    /// is balanced. A finite number in (0, 1]. Default [`DEFAULT_TOLERANCE`].
    pub tolerance: f64,
    /// Most moves one round answers. Default [`DEFAULT_MAX_MOVES`].
    pub max_moves: usize,
}

impl Default for LoadBalanceConfig {
    fn default() -> Self {
        LoadBalanceConfig { tolerance: DEFAULT_TOLERANCE, max_moves: DEFAULT_MAX_MOVES }
    }
}

/// The configuration as written; values are checked by hand so that every
/// error names its key.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    tolerance: Option<serde_json::Value>,
    max_moves: Option<serde_json::Value>,
}

impl LoadBalanceConfig {
    /// Parses configuration JSON. Empty text, `null` or `{}` give the
    /// defaults; a key set to `null` takes its default. An unknown key or a
    /// bad value is an error naming the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: RawConfig = config::parse(text)?;
        let mut parsed = LoadBalanceConfig::default();
        if let Some(value) = raw.tolerance.filter(|v| !v.is_null()) {
            match value.as_f64() {
                Some(t) if t.is_finite() && t > 0.0 && t <= 1.0 => parsed.tolerance = t,
                _ => return Err(format!("`tolerance` must be a number greater than 0 and at most 1, got {value}")),
            }
        }
        if let Some(value) = raw.max_moves.filter(|v| !v.is_null()) {
            match value.as_u64() {
                Some(n) if n >= 1 => parsed.max_moves = n as usize,
                _ => return Err(format!("`max_moves` must be an integer of at least 1, got {value}")),
            }
        }
        Ok(parsed)
    }
}

/// One region as [`plan`] sees it: its load and the shards that may leave
/// it, each with its load.
#[derive(Clone, Debug, PartialEq)]
pub struct Bin<T> {
    /// The region's load now (every shard, movable or not).
    pub load: f64,
    /// The shards that may move, with their loads.
    pub movable: Vec<(T, f64)>,
}

/// The moves of one round over `bins` (every allocatable region), at most
/// `max_moves`: (shard, from bin, to bin). See the module documentation.
pub fn plan<T: Clone>(mut bins: Vec<Bin<T>>, tolerance: f64, max_moves: usize) -> Vec<(T, usize, usize)> {
    let mut moves = Vec::new();
    if bins.len() < 2 {
        return moves;
    }
    let mean = bins.iter().map(|b| b.load).sum::<f64>() / bins.len() as f64;
    if mean <= 0.0 {
        return moves;
    }
    let (upper, lower) = (mean * (1.0 + tolerance), mean * (1.0 - tolerance));
    // Regions below the band are filled to the mean, not just to the band.
    let mut filling = vec![false; bins.len()];
    while moves.len() < max_moves {
        let by_load = |a: &usize, b: &usize| bins[*a].load.total_cmp(&bins[*b].load).then(b.cmp(a));
        let source = (0..bins.len()).max_by(by_load).expect("two bins");
        let target = (0..bins.len()).min_by(by_load).expect("two bins");
        for (index, bin) in bins.iter().enumerate() {
            if bin.load < lower {
                filling[index] = true;
            } else if bin.load >= mean {
                filling[index] = false;
            }
        }
        let over = bins[source].load > upper;
        if !over && !filling[target] {
            break;
        }
        let gap = bins[source].load - bins[target].load;
        // What the move should carry: down to the mean on the source, up to
        // the mean on the target, whichever is less.
        let need = (bins[source].load - mean).min(mean - bins[target].load).max(0.0);
        let movable = &bins[source].movable;
        // Every candidate must leave both regions below the source's load
        // now (a shard lighter than the gap); prefer the heaviest one that
        // does not overshoot the need, else the lightest that helps.
        let fits = |load: f64| load > 0.0 && load < gap;
        let best = movable
            .iter()
            .enumerate()
            .filter(|(_, (_, load))| fits(*load) && *load <= need)
            // The oldest of equal loads (the first in the region's order).
            .max_by(|a, b| a.1.1.total_cmp(&b.1.1).then(b.0.cmp(&a.0)))
            .or_else(|| {
                movable.iter().enumerate().filter(|(_, (_, load))| fits(*load)).min_by(|a, b| a.1.1.total_cmp(&b.1.1))
            })
            .map(|(index, _)| index);
        let Some(index) = best else { break };
        let (shard, load) = bins[source].movable.remove(index);
        bins[source].load -= load;
        bins[target].load += load;
        moves.push((shard, source, target));
    }
    moves
}

/// The load-balancing strategy. `Default` gives the default settings.
#[derive(Clone, Debug, Default)]
pub struct LoadBalance {
    config: LoadBalanceConfig,
}

impl LoadBalance {
    /// A strategy with these settings.
    pub fn with_config(config: LoadBalanceConfig) -> Self {
        LoadBalance { config }
    }

    /// The settings in force.
    pub fn config(&self) -> &LoadBalanceConfig {
        &self.config
    }
}

impl Strategy for LoadBalance {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Keeps every region's load (the shards' reported loads) within a tolerance band \
                          around the mean, filling new regions to the mean, with the moves that fix the \
                          most load per shard moved; balances shard counts while no load is reported."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: false,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        self.config = LoadBalanceConfig::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, _shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        // The least loaded region (where a round sends what it moves), ties
        // by least-shard's order; by that order alone while no load is known.
        let lowest = view.allocatable().map(|id| view.region_load(id)).min_by(f64::total_cmp);
        let candidates = view.allocatable().filter(|id| Some(view.region_load(*id)) == lowest);
        least_loaded(view, candidates).ok_or_else(|| "no allocatable region".to_owned())
    }

    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Shard>, String> {
        if let Some(blocker) = view.hand_off_blocker() {
            let region = view.region(blocker);
            host::log(
                Level::Debug,
                "rebalance held: a region is joining or unreachable",
                &[("region", &region.address), ("status", region.status.as_str())],
            );
            return Ok(Vec::new());
        }
        if allocations.in_progress_count() > 0 {
            // The loads are about to change: moves planned now would be
            // planned on a state that no longer holds.
            return Ok(Vec::new());
        }
        let regions: Vec<RegionId> = view.allocatable().filter(|id| id.index() < allocations.region_count()).collect();
        let by_load = regions.iter().any(|id| allocations.region_load(*id) > 0.0);
        let bins = regions
            .iter()
            .map(|id| {
                let load_of = |shard: Shard| if by_load { allocations.load(shard) } else { 1.0 };
                let movable = allocations
                    .region_shards(*id)
                    .filter(|s| !allocations.is_in_progress(*s) && !allocations.is_pinned(*s))
                    .map(|s| (s, load_of(s)))
                    .collect();
                let load = if by_load { allocations.region_load(*id) } else { allocations.region_len(*id) as f64 };
                Bin { load, movable }
            })
            .collect();
        Ok(plan(bins, self.config.tolerance, self.config.max_moves).into_iter().map(|(shard, _, _)| shard).collect())
    }
}

shardalloc_guest::export_strategy!(LoadBalance);
