//! # shardalloc-strategy-least-shard: the built-in `least-shard` strategy
//!
//! New shards go to the region with the fewest shards; rebalancing moves
//! shards from the most to the least loaded regions. It follows Akka Cluster
//! Sharding's `LeastShardAllocationStrategy` (2.6.10+, the `current`
//! algorithm, the default) and, on request, the classic
//! `ShardCoordinator.LeastShardAllocationStrategy` (the `classic` algorithm).
//!
//! Layout of this crate:
//! - [`region_order`] and [`least_loaded`]: the suitability order of regions,
//!   shared with other strategies (the `zone` strategy uses them);
//! - [`config`]: [`Config`], [`Algorithm`], their JSON parsing, the schema;
//! - [`rebalance`]: the conditions that hold rebalancing ([`rebalance::Hold`])
//!   and the two algorithms;
//! - [`LeastShard`]: the [`Strategy`] tying them together;
//! - the component export (`export_strategy!`), active on wasm32 only.
//!
//! See the crate's `README.md` for the operator's view.

pub mod config;
pub mod rebalance;

use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, RegionStatus, ShardKey, Strategy, View};

pub use config::{Algorithm, CONFIG_SCHEMA, Config};
use rebalance::Hold;

/// The strategy's name in `describe`.
pub const NAME: &str = "least-shard";

pub use shardalloc_guest::order::{least_loaded, region_order};

/// The least-shard strategy. [`Default`] is the `current` algorithm with
/// `absolute_limit` 20 and `relative_limit` 0.1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeastShard {
    config: Config,
}

impl LeastShard {
    /// A strategy with these settings.
    pub fn new(config: Config) -> Self {
        LeastShard { config }
    }

    /// The settings in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Why rebalancing is held for this input, if it is.
    pub fn hold(&self, view: &View, allocations: &Allocations) -> Option<Hold> {
        let moving = allocations.in_progress_count();
        match self.config.algorithm {
            Algorithm::Current if moving > 0 => return Some(Hold::InProgress(moving)),
            Algorithm::Classic if moving >= self.config.max_simultaneous_rebalance as usize => {
                return Some(Hold::TooManyInProgress(moving));
            }
            _ => {}
        }
        rebalance::topology_hold(view)
    }
}

/// Describes why no region is allocatable, for the allocate error.
fn no_region_error(view: &View) -> String {
    if view.regions().is_empty() {
        return "no allocatable region: no regions are known".to_owned();
    }
    let mut reasons: Vec<String> = Vec::new();
    let mut count = |what: &str, n: usize| {
        if n > 0 {
            reasons.push(format!("{n} {what}"));
        }
    };
    let regions = view.regions();
    count("proxy-only", regions.iter().filter(|r| r.proxy_only).count());
    count("draining", regions.iter().filter(|r| !r.proxy_only && r.draining).count());
    for status in [RegionStatus::Joining, RegionStatus::Leaving, RegionStatus::Unreachable] {
        count(status.as_str(), regions.iter().filter(|r| !r.proxy_only && !r.draining && r.status == status).count());
    }
    format!("no allocatable region (up, not proxy-only, not draining) among {}: {}", regions.len(), reasons.join(", "))
}

impl Strategy for LeastShard {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Allocates each shard to the region with the fewest shards (newest application version \
                          first, leaving regions last) and rebalances from the most to the least loaded regions, \
                          as Akka's LeastShardAllocationStrategy."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            // The classic algorithm sorts a region's shards by id.
            needs_shard_names: self.config.algorithm == Algorithm::Classic,
            needs_shard_attributes: false,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        self.config = Config::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, _shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        // `least_loaded(view, view.allocatable())`, kept in order by the
        // view instead of scanned on every call.
        view.most_suitable_allocatable().ok_or_else(|| no_region_error(view))
    }

    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Move>, String> {
        if allocations.region_count() != view.regions().len() {
            return Err(format!(
                "allocations cover {} regions but the view has {}",
                allocations.region_count(),
                view.regions().len()
            ));
        }
        if let Some(hold) = self.hold(view, allocations) {
            shardalloc_guest::log(Level::Debug, "rebalance held", &[("reason", &hold.to_string())]);
            return Ok(Vec::new());
        }
        let shards = match self.config.algorithm {
            Algorithm::Current => rebalance::current(&self.config, view, allocations),
            Algorithm::Classic => rebalance::classic(&self.config, view, allocations),
        };
        // No destination: allocate sends each to the least-loaded region
        // when it arrives, as Akka's least-shard does.
        Ok(shards.into_iter().map(Move::from).collect())
    }
}

shardalloc_guest::export_strategy!(LeastShard);
