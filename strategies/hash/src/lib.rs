//! # shardalloc-strategy-hash: rendezvous (highest-random-weight) hashing
//!
//! Every shard belongs on the allocatable region (up, not proxy-only, not
//! draining) with the highest [`score`] for that shard. The score depends only
//! on the shard's contract hash and the region's address, so:
//!
//! - every node, and any client that knows the addresses, computes the same
//!   home for a shard without asking anyone;
//! - when a region joins, only the shards it now wins move to it (about 1/N of
//!   them); when a region leaves, only its own shards move, each to its
//!   runner-up; nothing else moves.
//!
//! The strategy ignores shard counts, metrics, labels, versions and the
//! requester.
//!
//! Layout of this crate:
//! - [`score`] and [`choose`]: the placement function, usable on its own;
//! - [`HashConfig`]: the settings (`rebalance_limit`) and their parsing;
//! - [`RendezvousHash`]: the [`Strategy`] (allocate, rebalance);
//! - the component export (`export_strategy!`), active on wasm32 only.
//!
//! See the crate's `README.md` for the operator's view.

#![warn(missing_docs)]

use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, ShardKey, Strategy, View, config, host, shard_hash};

/// The strategy's name in `describe`.
pub const NAME: &str = "hash";

/// The default of [`HashConfig::rebalance_limit`].
pub const DEFAULT_REBALANCE_LIMIT: u32 = 10;

/// JSON Schema of the configuration.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "hash strategy configuration",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "rebalance_limit": {
      "description": "Most shards one rebalance round moves; 0 means unlimited.",
      "type": "integer",
      "minimum": 0,
      "maximum": 4294967295,
      "default": 10
    }
  }
}"#;

/// The rendezvous score of a shard on a region: xxh3-64 (seed 0) over the 16
/// bytes `shard_hash.to_le_bytes() ‖ address_hash.to_le_bytes()`, where
/// `shard_hash` is the contract's hash of the shard id and `address_hash` is
/// [`shard_hash`] of the region's address. The highest score wins.
///
/// This function is part of the strategy's behaviour: changing it would move
/// shards. It is pinned by tests.
pub fn score(shard_hash: u64, address_hash: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&shard_hash.to_le_bytes());
    bytes[8..].copy_from_slice(&address_hash.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// A candidate region with its address hash, computed once per call.
struct Candidate<'a> {
    id: RegionId,
    address: &'a str,
    address_hash: u64,
}

fn candidates(view: &View) -> Vec<Candidate<'_>> {
    view.allocatable()
        .map(|id| {
            let address = view.region(id).address.as_str();
            Candidate { id, address, address_hash: shard_hash(address) }
        })
        .collect()
}

/// The winner among `candidates`: highest score; on the (2⁻⁶⁴-rare) equal
/// score, the lexicographically smaller address, so the answer never depends
/// on the order of regions in the topology.
fn winner(candidates: &[Candidate<'_>], shard_hash: u64) -> Option<RegionId> {
    candidates
        .iter()
        .map(|c| (score(shard_hash, c.address_hash), c))
        .max_by(|(sa, a), (sb, b)| sa.cmp(sb).then_with(|| b.address.cmp(a.address)))
        .map(|(_, c)| c.id)
}

/// The rendezvous choice for a shard (by its contract hash) among the view's
/// allocatable regions; `None` when no region is allocatable.
pub fn choose(view: &View, shard_hash: u64) -> Option<RegionId> {
    winner(&candidates(view), shard_hash)
}

/// The settings of [`RendezvousHash`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashConfig {
    /// Most shards one rebalance round answers; 0 means unlimited.
    /// Default [`DEFAULT_REBALANCE_LIMIT`].
    pub rebalance_limit: u32,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig { rebalance_limit: DEFAULT_REBALANCE_LIMIT }
    }
}

/// The configuration as written; values are checked by hand so that every
/// error names its key.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    rebalance_limit: Option<serde_json::Value>,
}

impl HashConfig {
    /// Parses configuration JSON. Empty text, `null` or `{}` give the
    /// defaults; a key set to `null` takes its default. An unknown key or a
    /// bad value is an error naming the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: RawConfig = config::parse(text)?;
        let mut parsed = HashConfig::default();
        if let Some(value) = raw.rebalance_limit.filter(|v| !v.is_null()) {
            parsed.rebalance_limit = value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("`rebalance_limit` must be an integer from 0 to {}, got {value}", u32::MAX))?;
        }
        Ok(parsed)
    }
}

/// The rendezvous-hashing strategy. `Default` gives the default settings.
#[derive(Clone, Debug, Default)]
pub struct RendezvousHash {
    config: HashConfig,
}

impl RendezvousHash {
    /// A strategy with these settings.
    pub fn with_config(config: HashConfig) -> Self {
        RendezvousHash { config }
    }

    /// The settings in force.
    pub fn config(&self) -> &HashConfig {
        &self.config
    }
}

impl Strategy for RendezvousHash {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Rendezvous (highest-random-weight) hashing of shard ids over the allocatable regions: \
                          stable, coordination-free homes; only the minimal set of shards moves when regions \
                          come and go."
                .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: false,
            needs_shard_attributes: false,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        self.config = HashConfig::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        choose(view, shard.hash).ok_or_else(|| "no allocatable region".to_owned())
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
        let candidates = candidates(view);
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let limit = match self.config.rebalance_limit {
            0 => usize::MAX,
            n => n as usize,
        };
        // Shards on regions that may not keep them (leaving, draining) first,
        // then the rest; region by region in topology order, oldest first.
        let regions = (0..allocations.region_count().min(view.regions().len()) as u32).map(RegionId);
        let (blocked, open): (Vec<RegionId>, Vec<RegionId>) =
            regions.partition(|id| !view.region(*id).is_allocatable());
        let mut moves = Vec::new();
        for region in blocked.into_iter().chain(open) {
            for shard in allocations.region_shards(region) {
                if moves.len() == limit {
                    return Ok(moves);
                }
                if allocations.is_in_progress(shard) || allocations.is_pinned(shard) {
                    continue;
                }
                match winner(&candidates, shard.hash) {
                    Some(to) if to != region => moves.push(Move::to(shard, to)),
                    _ => {}
                }
            }
        }
        Ok(moves)
    }
}

shardalloc_guest::export_strategy!(RendezvousHash);
