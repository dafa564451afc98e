//! # A strategy that misbehaves on request
//!
//! Test fixture for the host: its configuration picks how `allocate` and
//! `rebalance` misbehave, so one component covers every fault the host must
//! survive. `{"allocate":"panic","rebalance":"duplicate"}`; the default for
//! both is `ok` (least-loaded allocation, nothing to rebalance).
//!
//! Modes, for both calls: `ok`, `error`, `panic`, `loop` (never returns),
//! `grow-memory` (allocates without bound), `out-of-range` (an index or
//! handle that does not exist). allocate only: `not-allocatable` (the first
//! region that is not allocatable). rebalance only: `duplicate` (a shard
//! twice), `moving` (a shard already in progress), `homeless` (an in-progress
//! shard that has no home), `all` (every allocated shard, a valid answer),
//! `read-ids` (reads the id of every shard it has not read before, one host
//! call each in a component unless `needs_ids` is set, as a strategy keeping
//! its own index of them does: every id on its first rebalance, new ones
//! after; moves nothing), `to-last` (the oldest shard of the first region
//! that has one, moved to the last region: a valid destination),
//! `bad-destination` (a shard moved to a region index that does not exist),
//! `read-attributes` (reads every shard's attributes on each rebalance, one
//! host call each in a component unless `needs_attributes` is set; moves
//! nothing). `{"needs_ids":true}` asks the host for every id with the view,
//! `{"needs_attributes":true}` every shard's attributes.

use shardalloc_guest::order::least_loaded;
use shardalloc_guest::{Allocations, Info, Move, RegionId, Shard, ShardKey, Strategy, View};

/// How a call misbehaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Behave.
    #[default]
    Ok,
    /// Answer an error.
    Error,
    /// Panic (a trap in a component).
    Panic,
    /// Never return.
    Loop,
    /// Allocate memory without bound.
    GrowMemory,
    /// Answer an index or handle that does not exist.
    OutOfRange,
    /// allocate: answer a region that is not allocatable.
    NotAllocatable,
    /// rebalance: answer a shard twice.
    Duplicate,
    /// rebalance: answer a shard already moving.
    Moving,
    /// rebalance: answer an in-progress shard without a home.
    Homeless,
    /// rebalance: answer every allocated shard not in progress.
    All,
    /// rebalance: read every shard's id, then answer nothing.
    ReadIds,
    /// rebalance: read every shard's attributes (from the view's copy when
    /// `needs_attributes` is set, else one host call each), then answer
    /// nothing.
    ReadAttributes,
    /// rebalance: move the oldest shard of the first region holding one
    /// (not the last region) to the last region.
    ToLast,
    /// rebalance: move a shard to a region index that does not exist.
    BadDestination,
}

/// The fixture's settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Misbehaving {
    /// How allocate behaves.
    pub allocate: Mode,
    /// How rebalance behaves.
    pub rebalance: Mode,
    /// Whether the host sends every shard id with the view.
    pub needs_ids: bool,
    /// Whether the host sends every shard's attributes with the view.
    pub needs_attributes: bool,
}

/// The handles whose id `read-ids` has read, in this instance.
static READ: std::sync::Mutex<Vec<bool>> = std::sync::Mutex::new(Vec::new());

#[allow(clippy::empty_loop, reason = "the `spin` mode spins on purpose, to meet the deadline")]
fn common(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Error => Err("misbehaving on purpose".to_owned()),
        Mode::Panic => panic!("misbehaving on purpose"),
        Mode::Loop => loop {
            std::hint::black_box(());
        },
        Mode::GrowMemory => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        _ => Ok(()),
    }
}

impl Strategy for Misbehaving {
    fn info(&self) -> Info {
        Info {
            name: "misbehaving".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Misbehaves on request; a test fixture.".to_owned(),
            config_schema: r#"{"type":"object"}"#.to_owned(),
            needs_shard_names: self.needs_ids,
            needs_shard_attributes: self.needs_attributes,
        }
    }

    fn configure(&mut self, config: &str) -> Result<(), String> {
        *self = shardalloc_guest::config::parse(config)?;
        Ok(())
    }

    fn allocate(&self, view: &View, _shard: &ShardKey, _requester: Option<RegionId>) -> Result<RegionId, String> {
        common(self.allocate)?;
        match self.allocate {
            Mode::OutOfRange => Ok(RegionId(view.regions().len() as u32 + 7)),
            Mode::NotAllocatable => {
                Ok(view.region_ids().find(|id| !view.region(*id).is_allocatable()).unwrap_or(RegionId(u32::MAX)))
            }
            _ => least_loaded(view, view.allocatable()).ok_or_else(|| "no allocatable region".to_owned()),
        }
    }

    fn rebalance(&self, view: &View, allocations: &Allocations) -> Result<Vec<Move>, String> {
        common(self.rebalance)?;
        let first = allocations.allocated().find(|s| !allocations.is_in_progress(*s));
        let last = RegionId((view.regions().len() as u32).saturating_sub(1));
        let movable = |s: &Shard| !allocations.is_in_progress(*s) && !allocations.is_pinned(*s);
        match self.rebalance {
            Mode::ToLast => {
                let shard =
                    view.region_ids().filter(|r| *r != last).find_map(|r| allocations.region_shards(r).find(movable));
                return Ok(shard.map(|s| vec![Move::to(s, last)]).unwrap_or_default());
            }
            Mode::BadDestination => {
                let bad = RegionId(view.regions().len() as u32 + 5);
                return Ok(first.map(|s| vec![Move::to(s, bad)]).unwrap_or_default());
            }
            _ => {}
        }
        let shards: Vec<Shard> = match self.rebalance {
            Mode::OutOfRange => vec![Shard { handle: allocations.len() as u32 + 3, hash: 0 }],
            Mode::Duplicate => first.map(|s| vec![s, s]).unwrap_or_default(),
            Mode::Moving => allocations.in_progress().take(1).collect(),
            Mode::Homeless => allocations.in_progress().filter(|s| allocations.home(*s).is_none()).take(1).collect(),
            Mode::All => allocations.allocated().filter(|s| !allocations.is_in_progress(*s)).collect(),
            Mode::ReadIds => {
                let mut read = READ.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut bytes = 0;
                for shard in allocations.allocated() {
                    let index = shard.handle as usize;
                    if read.len() <= index {
                        read.resize(index + 1, false);
                    }
                    if !read[index] {
                        read[index] = true;
                        bytes += allocations.shard_id(shard).len();
                    }
                }
                std::hint::black_box(bytes);
                Vec::new()
            }
            Mode::ReadAttributes => {
                let bytes: usize = allocations
                    .allocated()
                    .map(|shard| allocations.attributes(shard).iter().map(|(_, v)| v.len()).sum::<usize>())
                    .sum();
                std::hint::black_box(bytes);
                Vec::new()
            }
            _ => Vec::new(),
        };
        Ok(shards.into_iter().map(Move::from).collect())
    }
}

shardalloc_guest::export_strategy!(Misbehaving);
