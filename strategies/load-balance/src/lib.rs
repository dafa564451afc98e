//! # shardalloc-strategy-load-balance: keep every region's load near the level
//!
//! Regions report each shard's load (contract 0.2 carries the node's
//! smoothed averages). This strategy keeps every allocatable region's load
//! within a tolerance band (±10% by default) around the **level** and
//! fills new or emptied regions to it. The level is the mean, except that a
//! region's floor (its heaviest shard, or the load it cannot give away)
//! above it is held apart: under a Zipf-shaped load a few shards outweigh
//! the mean, and the level is what every other region can carry.
//!
//! - **allocate** picks the least loaded allocatable region (where a round
//!   sends what it moves), ties by least-shard's order;
//! - **rebalance** ([`plan`]) moves shards toward the least loaded region
//!   being filled (below the band, until it reaches the level; or a region
//!   with markedly fewer shards than the others more than half the band
//!   below it: a new one the last round's budget left short), else toward
//!   the least loaded region. The most loaded region above the band (and
//!   above its floor by more than the band's half-width) gives first; a
//!   region with nothing to give, one hot shard alone, is passed over.
//!   While the target is being filled and no hot spot can give, the move
//!   that evens out the most, from any region above the level, is taken.
//!   Each move takes the heaviest shard that does not overshoot the need,
//!   and only one lighter than the gap between the two regions, so a move
//!   never raises the maximum and a shard is never sent back and forth.
//!   While any hand-off is in progress the round moves nothing (the loads
//!   are about to change). Pinned shards stay; draining, leaving and proxy
//!   regions are neither sources of the balance nor destinations.
//! - With no load reported at all it balances shard counts the same way.
//!
//! Layout of this crate:
//! - [`LoadBalanceConfig`]: the settings (`tolerance`, `max_moves`) and their parsing;
//! - [`plan`]: the moves of one round over region loads, pure and tested alone;
//! - [`LoadBalance`]: the [`Strategy`];
//! - the component export (`export_strategy!`), active on wasm32 only.

#![warn(missing_docs)]

use shardalloc_guest::order::least_loaded;
use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, Shard, ShardKey, Strategy, View, config, host};

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
    let floors: Vec<f64> = bins.iter().map(floor).collect();
    let mean = level(bins.iter().map(|b| b.load).sum(), floors.iter().copied(), bins.len());
    if mean <= 0.0 {
        return moves;
    }
    let (upper, lower) = (mean * (1.0 + tolerance), mean * (1.0 - tolerance));
    // Each region's shards lightest first (in the region's order among equals).
    for bin in &mut bins {
        bin.movable.sort_by(|a, b| a.1.total_cmp(&b.1));
    }
    // Regions below the band are filled to the mean, not just to the band;
    // so is a region holding fewer shards than (1 − tolerance) × the mean
    // count while more than half the band's width below the mean: a new
    // region whose fill the last round's move budget cut short.
    let mean_count = bins.iter().map(|b| b.movable.len()).sum::<usize>() as f64 / bins.len() as f64;
    let new: Vec<bool> = bins.iter().map(|b| (b.movable.len() as f64) < mean_count * (1.0 - tolerance)).collect();
    let mut filling = vec![false; bins.len()];
    let mut order: Vec<usize> = (0..bins.len()).collect();
    while moves.len() < max_moves {
        for (index, bin) in bins.iter().enumerate() {
            if bin.load < lower || (new[index] && bin.load < mean * (1.0 - tolerance / 2.0)) {
                filling[index] = true;
            } else if bin.load >= mean {
                filling[index] = false;
            }
        }
        // Most loaded first, ties by the earlier bin first (so the target,
        // the last, is the later of equally loaded bins).
        order.sort_by(|a, b| bins[*b].load.total_cmp(&bins[*a].load).then(a.cmp(b)));
        // The least loaded region being filled, else the least loaded.
        let target = order.iter().rev().find(|i| filling[**i]).copied().unwrap_or(order[order.len() - 1]);
        // The most loaded region above the band that can give the target a
        // shard gives first: hot spots are fixed before anything else. A
        // region with no shard lighter than its gap (one hot shard alone)
        // is passed over. While the target is being filled and no region
        // above the band can give, every region above the mean may: the
        // move that evens out the most is taken (x units across a gap g
        // lower the sum of the squared distances to the mean by 2x(g − x)).
        let mut chosen: Option<(usize, usize, f64)> = None;
        for pass in [Pass::Over, Pass::Filling] {
            if pass == Pass::Filling && (chosen.is_some() || !filling[target]) {
                break;
            }
            for &source in &order {
                // Above the band, and above its floor by more than the
                // band's half-width: a region of one hot shard and a few
                // light ones is no hot spot that moving the light ones fixes.
                let load = bins[source].load;
                let over = load > upper && load - floors[source] > mean * tolerance;
                if source == target || bins[source].load <= mean {
                    break;
                }
                if pass == Pass::Over && !over {
                    continue;
                }
                let gap = bins[source].load - bins[target].load;
                // What the move should carry: down to the mean on the
                // source, up to the mean on the target, whichever is less.
                let need = (bins[source].load - mean).min(mean - bins[target].load).max(0.0);
                let Some(index) = candidate(&bins[source].movable, gap, need) else { continue };
                let load = bins[source].movable[index].1;
                let evens = load * (gap - load);
                if chosen.is_none_or(|(_, _, best)| evens > best) {
                    chosen = Some((source, index, evens));
                }
                if pass == Pass::Over {
                    break;
                }
            }
        }
        let Some((source, index, _)) = chosen else { break };
        let (shard, load) = bins[source].movable.remove(index);
        bins[source].load -= load;
        bins[target].load += load;
        moves.push((shard, source, target));
    }
    moves
}

/// The two passes of a move's search in [`plan`].
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    /// Regions above the band, the most loaded first.
    Over,
    /// Regions above the mean, for a target being filled.
    Filling,
}

/// The least load a region can be left with: its heaviest shard
/// (wherever that goes, some region carries it) or what it cannot give away.
fn floor<T>(bin: &Bin<T>) -> f64 {
    let movable: f64 = bin.movable.iter().map(|(_, load)| load).sum();
    let heaviest = bin.movable.iter().map(|(_, load)| *load).fold(0.0, f64::max);
    (bin.load - movable).max(heaviest)
}

/// The mean the band is drawn around: the load every region would carry
/// if loads could be spread at will, except that a region cannot go below
/// its floor (its heaviest shard, wherever that goes, or what it cannot
/// give away). `total` is spread over `regions`; floors above the level
/// each hold a region of their own (the heaviest first) and the other
/// regions share the rest. Without such floors it is the plain mean; with
/// a few shards heavier than the mean it is what the other regions can all
/// reach, so a region being filled is not left short of a mean only those
/// shards lift. Trace replay measures joining regions against it too.
pub fn level(total: f64, floors: impl IntoIterator<Item = f64>, regions: usize) -> f64 {
    let mut floors: Vec<f64> = floors.into_iter().collect();
    floors.sort_by(|a, b| b.total_cmp(a));
    let (mut rest, mut left) = (total, regions);
    for floor in floors {
        if left <= 1 || floor <= rest / left as f64 {
            break;
        }
        rest -= floor;
        left -= 1;
    }
    rest / left.max(1) as f64
}

/// The shard of `movable` (lightest first) to move across a `gap` (the
/// source's load over the target's) that should carry `need`: only a shard
/// lighter than the gap, so both regions end below the source's load now;
/// the heaviest that does not overshoot the need (the oldest of equals),
/// else the lightest that helps.
fn candidate<T>(movable: &[(T, f64)], gap: f64, need: f64) -> Option<usize> {
    let first = movable.partition_point(|(_, load)| *load <= 0.0);
    let within = movable.partition_point(|(_, load)| *load <= need);
    if within > first && movable[within - 1].1 < gap {
        let heaviest = movable[within - 1].1;
        return Some(movable.partition_point(|(_, load)| *load < heaviest));
    }
    (first < movable.len() && movable[first].1 < gap).then_some(first)
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
                          around the level (the mean, with shards heavier than it counted alone), filling \
                          new regions to it, hot spots first, with the moves that fix the most load per \
                          shard moved; balances shard counts while no load is reported."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: false,
            needs_shard_attributes: false,
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
        // Each move goes where the plan balanced it, not where the least
        // loaded region is when it arrives.
        let moves = plan(bins, self.config.tolerance, self.config.max_moves);
        Ok(moves.into_iter().map(|(shard, _, to)| Move::to(shard, regions[to])).collect())
    }
}

shardalloc_guest::export_strategy!(LoadBalance);
