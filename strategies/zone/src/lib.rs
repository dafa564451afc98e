//! # shardalloc-strategy-zone: keep shards in their zone
//!
//! A shard's zone is the value of one of its attributes when the settings
//! name one (`attribute`, e.g. `region`: an operator's `region=eu` on the
//! shard) and the shard has it, else what the entity type's signal maps it
//! to (exact ids and id prefixes, see [`signal`]); regions carry a zone
//! label (`zone` by default). A shard with a zone is placed on a region
//! labelled with that zone, and rebalancing brings back the shards that
//! sit outside their zone:
//!
//! - **allocate**: when the shard maps to a zone and some allocatable region
//!   (up, not proxy-only, not draining) carries that zone's label, the least
//!   loaded of those by least-shard's suitability order (not leaving, newer
//!   application version, fewer shards, older, address). Otherwise the least
//!   loaded of all allocatable regions, logged: `Warn` when the shard's zone
//!   has no allocatable region, `Info` when the shard maps to no zone. It
//!   errs only when no region is allocatable.
//! - **rebalance**: shards not already moving whose home is not labelled
//!   with their zone while an allocatable region of that zone exists, region
//!   by region in topology order, oldest first, at most
//!   [`MAX_MOVES_PER_ROUND`] per round. Held while any region is joining or
//!   unreachable.
//!
//! An invalid signal is logged as a warning (once per signal text per
//! instance) and treated as no signal.
//!
//! Layout of this crate:
//! - [`signal`]: [`ZoneMap`], the signal's format, parsing and lookup;
//! - [`ZoneConfig`]: the settings (`label`) and their parsing;
//! - [`Zone`]: the [`Strategy`], with a cache of the parsed signal;
//! - the component export (`export_strategy!`), active on wasm32 only.
//!
//! See the crate's `README.md` for the operator's view.

#![warn(missing_docs)]

pub mod signal;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use shardalloc_guest::{Allocations, Info, Level, Move, RegionId, ShardKey, Strategy, Topology, View, config, host};

use shardalloc_guest::order::least_loaded;
pub use signal::{SIGNAL_SCHEMA, ZoneMap};

/// The strategy's name in `describe`.
pub const NAME: &str = "zone";

/// The default of [`ZoneConfig::label`].
pub const DEFAULT_LABEL: &str = "zone";

/// Most shards one rebalance round answers.
pub const MAX_MOVES_PER_ROUND: usize = 10;

/// JSON Schema of the configuration.
pub const CONFIG_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "zone strategy configuration",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "label": {
      "description": "The region label whose value is the region's zone.",
      "type": "string",
      "minLength": 1,
      "default": "zone"
    },
    "attribute": {
      "description": "The shard attribute whose value is the shard's zone, ahead of the signal's map; none by default.",
      "type": ["string", "null"],
      "minLength": 1,
      "default": null
    }
  }
}"#;

/// The settings of [`Zone`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneConfig {
    /// The region label that holds its zone. Default [`DEFAULT_LABEL`].
    pub label: String,
    /// The shard attribute that holds a shard's zone, ahead of the signal's
    /// map. Default none.
    pub attribute: Option<String>,
}

impl Default for ZoneConfig {
    fn default() -> Self {
        ZoneConfig { label: DEFAULT_LABEL.to_owned(), attribute: None }
    }
}

/// The configuration as written; values are checked by hand so that every
/// error names its key.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    label: Option<serde_json::Value>,
    attribute: Option<serde_json::Value>,
}

impl ZoneConfig {
    /// Parses configuration JSON. Empty text, `null` or `{}` give the
    /// defaults; a key set to `null` takes its default. An unknown key or a
    /// bad value is an error naming the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: RawConfig = config::parse(text)?;
        let mut parsed = ZoneConfig::default();
        if let Some(value) = raw.label.filter(|v| !v.is_null()) {
            match value.as_str() {
                Some(label) if !label.trim().is_empty() => parsed.label = label.to_owned(),
                _ => return Err(format!("`label` must be a non-empty string, got {value}")),
            }
        }
        if let Some(value) = raw.attribute.filter(|v| !v.is_null()) {
            match value.as_str() {
                Some(attribute) if !attribute.trim().is_empty() => parsed.attribute = Some(attribute.to_owned()),
                _ => return Err(format!("`attribute` must be a non-empty string, got {value}")),
            }
        }
        Ok(parsed)
    }
}

/// The signal parsed for one topology.
#[derive(Debug)]
struct Cached {
    topology: Arc<Topology>,
    map: Arc<ZoneMap>,
}

/// The zone-affinity strategy. `Default` gives the default settings.
///
/// It keeps the last parsed signal, so the signal is parsed once per change
/// rather than on every call.
#[derive(Debug, Default)]
pub struct Zone {
    config: ZoneConfig,
    cache: Mutex<Option<Cached>>,
}

impl Clone for Zone {
    fn clone(&self) -> Self {
        Zone::with_config(self.config.clone())
    }
}

impl Zone {
    /// A strategy with these settings.
    pub fn with_config(config: ZoneConfig) -> Self {
        Zone { config, cache: Mutex::new(None) }
    }

    /// The settings in force.
    pub fn config(&self) -> &ZoneConfig {
        &self.config
    }

    /// The zone map of the view's signal: empty when there is no signal or it
    /// is invalid (then a warning is logged, once per signal text).
    pub fn zone_map(&self, view: &View) -> Arc<ZoneMap> {
        let topology = view.topology();
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cached) = cache.as_mut() {
            if Arc::ptr_eq(&cached.topology, topology) {
                return cached.map.clone();
            }
            if cached.topology.signal() == topology.signal() {
                cached.topology = topology.clone();
                return cached.map.clone();
            }
        }
        let map = Arc::new(match topology.signal() {
            None => ZoneMap::default(),
            Some(text) => ZoneMap::parse(text).unwrap_or_else(|problem| {
                host::log(
                    Level::Warn,
                    "the zone signal is invalid; ignoring it until it changes",
                    &[("problem", &problem)],
                );
                ZoneMap::default()
            }),
        });
        *cache = Some(Cached { topology: topology.clone(), map: map.clone() });
        map
    }

    /// The zone of the shard being allocated: its attribute's value, else
    /// the signal's.
    fn zone_of_key<'a>(&self, map: &'a ZoneMap, shard: &'a ShardKey) -> Option<&'a str> {
        let by_attribute = self.config.attribute.as_deref().and_then(|key| shard.attribute(key));
        by_attribute.or_else(|| map.zone_of(shard.id()))
    }

    fn in_zone(&self, view: &View, id: RegionId, zone: &str) -> bool {
        view.region(id).label(&self.config.label) == Some(zone)
    }
}

impl Strategy for Zone {
    fn info(&self) -> Info {
        Info {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Places each shard in its zone (the shard attribute the settings name, else what the \
                          signal maps it to: exact shard ids, then the longest id prefix), on the least loaded \
                          region labelled with that zone, and moves shards that sit outside their zone back into \
                          it."
            .to_owned(),
            config_schema: CONFIG_SCHEMA.to_owned(),
            needs_shard_names: true,
            needs_shard_attributes: self.config.attribute.is_some(),
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        self.config = ZoneConfig::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        let map = self.zone_map(view);
        let zone = self.zone_of_key(&map, shard);
        if let Some(zone) = zone
            && let Some(best) = least_loaded(view, view.allocatable().filter(|id| self.in_zone(view, *id, zone)))
        {
            return Ok(best);
        }
        let best = view.most_suitable_allocatable().ok_or_else(|| "no allocatable region".to_owned())?;
        let address = view.region(best).address.as_str();
        match zone {
            Some(zone) => host::log(
                Level::Warn,
                "no allocatable region in the shard's zone; allocating to the least loaded region outside it",
                &[("shard", shard.id()), ("zone", zone), ("label", &self.config.label), ("region", address)],
            ),
            None => host::log(
                Level::Info,
                "the shard maps to no zone; allocating to the least loaded region",
                &[("shard", shard.id()), ("zone", ""), ("region", address)],
            ),
        }
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
        let map = self.zone_map(view);
        if map.is_empty() && self.config.attribute.is_none() {
            return Ok(Vec::new());
        }
        // The zones that can receive a shard now.
        let open: BTreeSet<&str> =
            view.allocatable().filter_map(|id| view.region(id).label(&self.config.label)).collect();
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let mut moves = Vec::new();
        let regions = allocations.region_count().min(view.regions().len()) as u32;
        for region in (0..regions).map(RegionId) {
            let home_zone = view.region(region).label(&self.config.label);
            for shard in allocations.region_shards(region) {
                if allocations.is_in_progress(shard) || allocations.is_pinned(shard) {
                    continue;
                }
                let by_attribute = self.config.attribute.as_deref().and_then(|key| allocations.attribute(shard, key));
                let id;
                let zone = match &by_attribute {
                    Some(zone) => &**zone,
                    None => {
                        id = allocations.shard_id(shard);
                        let Some(zone) = map.zone_of(&id) else { continue };
                        zone
                    }
                };
                if home_zone != Some(zone) && open.contains(zone) {
                    // The zone is the strategy's say; allocate picks its region.
                    moves.push(Move::from(shard));
                    if moves.len() == MAX_MOVES_PER_ROUND {
                        return Ok(moves);
                    }
                }
            }
        }
        Ok(moves)
    }
}

shardalloc_guest::export_strategy!(Zone);
