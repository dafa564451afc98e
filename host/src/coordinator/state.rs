//! The durable state and the changes that build it.
//!
//! The coordinator changes its durable state only by applying a [`Change`]
//! and emits every change it applies in a `Persist` command, so a store that
//! applies the same changes in order (with [`Durable::apply`]) holds exactly
//! what a recovered coordinator needs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::freeze::{Freeze, FreezeScope, Freezes};
use crate::strategy::external::AllocationReason;
use crate::strategy::table::ShardTable;
use shardalloc_guest::Topology;
use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;

use shardalloc_proto::protocol::Millis;

/// The (timestamp, origin) of a placement write; the greater one wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    /// The writer's timestamp (milliseconds).
    pub timestamp: u64,
    /// The writer (node, operator, tool) breaking ties.
    pub origin: String,
}

impl Stamp {
    /// A stamp.
    pub fn new(timestamp: u64, origin: impl Into<String>) -> Self {
        Stamp { timestamp, origin: origin.into() }
    }
}

/// A region as persisted.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct RegionRecord {
    /// Its address.
    pub address: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Cluster roles.
    pub roles: Vec<String>,
    /// Application version.
    pub app_version: String,
    /// Join order: lower is older.
    pub join_order: u64,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    pub proxy_only: bool,
    /// Drained by an operator: keeps no shards, gets none.
    pub draining: bool,
    /// Leaving gracefully.
    pub leaving: bool,
    /// Its shards, in allocation order (oldest first).
    pub shards: Vec<String>,
    /// When this incarnation first registered (the driver's clock); kept
    /// when it registers again, renewed by a new incarnation. `None`: not
    /// known (a region kept by a store that did not hold it).
    #[serde(default)]
    pub registered_at: Option<Millis>,
    /// The capacity it declared when it last registered (named
    /// quantities); empty when it declared none.
    #[serde(default)]
    pub capacity: RegionCapacity,
}

/// A shard's home and why it is there.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Home {
    /// The region's address, shared by every home on that region
    /// ([`Durable::apply`] interns it).
    pub region: Arc<str>,
    /// Why the shard was allocated there, shared by the homes with the same
    /// reason.
    pub reason: Arc<AllocationReason>,
    /// When.
    pub at: Millis,
    /// The shard's epoch on this home: greater than any epoch the type gave
    /// before (0: a home stored before epochs existed).
    pub epoch: u64,
}

/// A placement: live (with a target) or a tombstone.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlacementEntry {
    /// The target region; `None` for a tombstone.
    pub target: Option<String>,
    /// The last write's stamp.
    pub stamp: Stamp,
    /// When the coordinator applied the write (tombstone retention counts from it).
    pub written_at: Millis,
}

/// What the coordinator keeps of a shard's load: the moving average of
/// what its regions reported and when it last moved. It follows the shard
/// from region to region (it is the shard's, not its home's).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ShardLoad {
    /// The smoothed load, in the units regions report per second (finite,
    /// never negative).
    pub load: f64,
    /// When its last hand-off ended with a new home (the driver's clock).
    pub moved_at: Option<Millis>,
}

impl ShardLoad {
    /// True when there is nothing to keep: no load, never moved.
    pub fn is_empty(&self) -> bool {
        self.load == 0.0 && self.moved_at.is_none()
    }
}

/// One change of the durable state.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum Change {
    /// A region registered (new) or re-registered (same incarnation: shards kept).
    RegionRegistered(RegionRecord),
    /// A region is gone (its homes were removed by earlier changes).
    RegionRemoved {
        /// Its address.
        address: String,
    },
    /// A region was drained or undrained.
    RegionDraining {
        /// Its address.
        address: String,
        /// Draining or not.
        draining: bool,
    },
    /// A region is leaving.
    RegionLeaving {
        /// Its address.
        address: String,
    },
    /// A shard got a home.
    HomeSet {
        /// The shard.
        shard: String,
        /// Its home and why.
        home: Home,
    },
    /// A shard lost its home (stopped after a hand-off, or its region is gone).
    HomeRemoved {
        /// The shard.
        shard: String,
    },
    /// A hand-off started.
    HandOffStarted {
        /// The shard.
        shard: String,
        /// Its owner.
        from: String,
    },
    /// A hand-off ended (done, timed out or aborted).
    HandOffEnded {
        /// The shard.
        shard: String,
    },
    /// A placement was written (set, or removed as a tombstone).
    PlacementWritten {
        /// The shard.
        shard: String,
        /// The entry.
        entry: PlacementEntry,
    },
    /// A tombstone's retention ran out.
    PlacementPurged {
        /// The shard.
        shard: String,
    },
    /// An operator asked to move a shard on the next rebalance.
    RebalanceQueued {
        /// The shard.
        shard: String,
    },
    /// A queued shard left the queue (its hand-off started, or it is gone).
    RebalanceUnqueued {
        /// The shard.
        shard: String,
    },
    /// The type's signal changed.
    SignalSet {
        /// The JSON text, `None` when cleared.
        signal: Option<String>,
    },
    /// Smoothed loads saved: the shards' latest values (`None`: forgotten).
    /// The one change applied before it is made: loads change in memory at
    /// every report and are saved in batches
    /// ([`Config::load_save_interval_ms`](super::Config::load_save_interval_ms)).
    LoadsSaved {
        /// Shard → its load, or `None` when the shard's load is forgotten.
        loads: Vec<(String, Option<ShardLoad>)>,
    },
    /// A shard's attributes were written (the empty map: cleared).
    AttributesSet {
        /// The shard.
        shard: String,
        /// All its attributes now.
        attributes: ShardAttributes,
    },
    /// A region's drain began (after its `RegionDraining`).
    DrainStarted {
        /// The region.
        address: String,
        /// When.
        at: Millis,
    },
    /// A freeze began (replacing the one of its scope).
    FreezeSet {
        /// The freeze.
        freeze: Freeze,
    },
    /// A freeze ended: lifted, or at its time limit.
    FreezeLifted {
        /// Which freeze.
        scope: FreezeScope,
        /// When.
        at: Millis,
        /// An operator, or the node itself.
        by: shardalloc_proto::api::ChangedBy,
        /// Why.
        reason: String,
        /// It reached its time limit (not lifted).
        expired: bool,
    },
}

/// A type's operations in progress: its freezes (with their history) and
/// when its regions' drains began. Kept apart from the rest of the durable
/// state in the store (one record per type).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Operations {
    /// The freezes in force and their history.
    pub freezes: Freezes,
    /// Draining region → when its drain began.
    pub drains: BTreeMap<String, Millis>,
}

impl Operations {
    /// Applies `change` where it concerns them; false when it does not
    /// change them.
    pub fn apply(&mut self, change: &Change) -> bool {
        match change {
            Change::FreezeSet { .. } | Change::FreezeLifted { .. } => self.freezes.apply(change),
            Change::DrainStarted { address, at } => {
                self.drains.insert(address.clone(), *at);
            }
            Change::RegionDraining { address, draining: false } | Change::RegionRemoved { address } => {
                return self.drains.remove(address).is_some();
            }
            _ => return false,
        }
        true
    }
}

/// Everything the coordinator must not lose.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Durable {
    /// Registered regions by address.
    pub regions: BTreeMap<String, RegionRecord>,
    /// Shard → home.
    pub homes: BTreeMap<String, Home>,
    /// Hand-offs in flight: shard → owner.
    pub handoffs: BTreeMap<String, String>,
    /// Placements and tombstones by shard.
    pub placements: BTreeMap<String, PlacementEntry>,
    /// Shards operators queued for the next rebalance.
    pub queued: BTreeSet<String>,
    /// The next join order to give.
    pub next_join_order: u64,
    /// The type's signal (operator JSON), handed to the strategy unread.
    pub signal: Option<String>,
    /// Each shard's smoothed load and last move, for the shards that have
    /// either, as of the last [`Change::LoadsSaved`] (the coordinator keeps
    /// the current ones apart: `Coordinator::loads`).
    pub loads: BTreeMap<String, ShardLoad>,
    /// The freezes in force and their history, and when drains began.
    pub operations: Operations,
    /// Each shard's attributes, for the shards that have some: kept apart
    /// from the homes (they follow a shard through hand-offs and outlive
    /// its region).
    #[serde(default)]
    pub attributes: BTreeMap<String, ShardAttributes>,
    /// The highest epoch the type has given a home: the next home gets
    /// one more, so a shard's epoch increases at every change of its home,
    /// also after the home with the highest is gone.
    pub epoch: u64,
    /// Shares the addresses and reasons of [`Durable::homes`].
    #[serde(skip)]
    pub interned: Interned,
}

/// Region addresses and allocation reasons shared by the homes that repeat
/// them: a million homes on a thousand regions hold a thousand address
/// strings, not a million. Derived data: never compared, never stored.
#[derive(Debug, Clone, Default)]
pub struct Interned {
    /// foldhash, not SipHash: a start looks an address up once per home.
    addresses: std::collections::HashSet<Arc<str>, foldhash::fast::RandomState>,
    /// The most recent distinct reasons (at most [`INTERNED_REASONS`]).
    reasons: Vec<Arc<AllocationReason>>,
}

/// Distinct allocation reasons kept for sharing: strategy versions and
/// placements repeat; fallback causes vary and are not worth keeping all.
pub const INTERNED_REASONS: usize = 16;

impl PartialEq for Interned {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Interned {
    /// The home with its address and reason shared with earlier homes.
    pub fn home(&mut self, home: Home) -> Home {
        let region = match self.addresses.get(&*home.region) {
            Some(shared) => shared.clone(),
            None => {
                self.addresses.insert(home.region.clone());
                home.region
            }
        };
        let Home { reason, at, epoch, .. } = home;
        let reason = self.reason_by(|r| *r == *reason, || reason.clone());
        Home { region, reason, at, epoch }
    }

    /// `address`, shared with the homes that name it; allocated only the
    /// first time (the store's start reads addresses it has not copied).
    pub fn address(&mut self, address: &str) -> Arc<str> {
        match self.addresses.get(address) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Arc<str> = Arc::from(address);
                self.addresses.insert(shared.clone());
                shared
            }
        }
    }

    /// The kept reason that is `same`, or the one `make` builds, kept
    /// from now on (the oldest is let go past [`INTERNED_REASONS`]).
    pub fn reason_by(
        &mut self,
        same: impl Fn(&AllocationReason) -> bool,
        make: impl FnOnce() -> Arc<AllocationReason>,
    ) -> Arc<AllocationReason> {
        match self.reasons.iter().position(|r| same(r)) {
            Some(i) => self.reasons[i].clone(),
            None => {
                if self.reasons.len() == INTERNED_REASONS {
                    self.reasons.remove(0);
                }
                let reason = make();
                self.reasons.push(reason.clone());
                reason
            }
        }
    }

    /// Forgets an address no home uses any more (its region was removed).
    pub fn forget(&mut self, address: &str) {
        self.addresses.remove(address);
    }
}

impl Durable {
    /// How many hand-offs from the region at `address` are in flight.
    pub fn handoffs_from(&self, address: &str) -> usize {
        self.handoffs.values().filter(|from| *from == address).count()
    }

    /// Applies one change.
    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::RegionRegistered(record) => {
                let mut record = record.clone();
                if let Some(old) = self.regions.get(&record.address)
                    && old.incarnation == record.incarnation
                {
                    record.shards = old.shards.clone();
                }
                self.next_join_order = self.next_join_order.max(record.join_order + 1);
                self.regions.insert(record.address.clone(), record);
            }
            Change::RegionRemoved { address } => {
                self.operations.apply(change);
                if let Some(record) = self.regions.remove(address) {
                    for shard in record.shards {
                        self.homes.remove(&shard);
                    }
                }
                self.interned.forget(address);
            }
            Change::RegionDraining { address, draining } => {
                self.operations.apply(change);
                if let Some(r) = self.regions.get_mut(address) {
                    r.draining = *draining;
                }
            }
            Change::RegionLeaving { address } => {
                if let Some(r) = self.regions.get_mut(address) {
                    r.leaving = true;
                }
            }
            Change::HomeSet { shard, home } => {
                self.remove_home(shard);
                if let Some(r) = self.regions.get_mut(&*home.region) {
                    r.shards.push(shard.clone());
                }
                self.epoch = self.epoch.max(home.epoch);
                let home = self.interned.home(home.clone());
                self.homes.insert(shard.clone(), home);
            }
            Change::HomeRemoved { shard } => self.remove_home(shard),
            Change::SignalSet { signal } => self.signal = signal.clone(),
            Change::HandOffStarted { shard, from } => {
                self.queued.remove(shard);
                self.handoffs.insert(shard.clone(), from.clone());
            }
            Change::HandOffEnded { shard } => {
                self.handoffs.remove(shard);
            }
            Change::PlacementWritten { shard, entry } => {
                self.placements.insert(shard.clone(), entry.clone());
            }
            Change::PlacementPurged { shard } => {
                self.placements.remove(shard);
            }
            Change::RebalanceQueued { shard } => {
                self.queued.insert(shard.clone());
            }
            Change::RebalanceUnqueued { shard } => {
                self.queued.remove(shard);
            }
            Change::FreezeSet { .. } | Change::FreezeLifted { .. } | Change::DrainStarted { .. } => {
                self.operations.apply(change);
            }
            Change::AttributesSet { shard, attributes } => {
                if attributes.is_empty() {
                    self.attributes.remove(shard);
                } else {
                    self.attributes.insert(shard.clone(), attributes.clone());
                }
            }
            Change::LoadsSaved { loads } => {
                for (shard, load) in loads {
                    match load {
                        Some(load) if !load.is_empty() => {
                            self.loads.insert(shard.clone(), *load);
                        }
                        _ => {
                            self.loads.remove(shard);
                        }
                    }
                }
            }
        }
    }

    fn remove_home(&mut self, shard: &str) {
        if let Some(old) = self.homes.remove(shard)
            && let Some(r) = self.regions.get_mut(&*old.region)
        {
            r.shards.retain(|s| s != shard);
        }
    }

    /// The shard table strategies see over `topology`: every home, region
    /// by region in allocation order, the hand-offs in flight, the shards
    /// pinned where they are, and the `loads` of those shards (the
    /// coordinator's current ones, or these saved ones).
    pub fn shard_table<'a>(
        &'a self,
        topology: &Topology,
        metrics: Vec<f64>,
        loads: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> ShardTable {
        let homes = topology.regions().iter().enumerate().flat_map(|(index, region)| {
            let shards = self.regions.get(&region.address).map(|r| r.shards.as_slice()).unwrap_or_default();
            let since = |shard: &String| self.homes.get(shard).map_or(0, |h| h.at);
            shards.iter().map(move |shard| (shard.as_str(), index as u32, since(shard)))
        });
        let pinned = self
            .live_placements()
            .filter(|(shard, target)| self.homes.get(*shard).is_some_and(|home| *home.region == ***target))
            .map(|(shard, _)| shard.as_str());
        let loads = loads.into_iter().filter(|(_, load)| *load != 0.0);
        let attributes = self.attributes.iter().map(|(shard, a)| (shard.as_str(), strategy_attributes(a)));
        ShardTable::build(topology, metrics, homes, self.handoffs.keys().map(String::as_str), pinned, loads, attributes)
    }

    /// The live placements: shard → target.
    pub fn live_placements(&self) -> impl Iterator<Item = (&String, &String)> {
        self.placements.iter().filter_map(|(s, e)| e.target.as_ref().map(|t| (s, t)))
    }
}

/// A shard's attributes as strategies read them.
pub fn strategy_attributes(attributes: &ShardAttributes) -> shardalloc_guest::Attributes {
    shardalloc_guest::Attributes::new(attributes.iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::StrategyError;

    fn home(region: &str, reason: AllocationReason) -> Home {
        Home { region: region.into(), reason: Arc::new(reason), at: 1, epoch: 1 }
    }

    #[test]
    fn homes_share_their_address_and_reason_and_the_sharing_is_bounded() {
        let mut durable = Durable::default();
        durable.apply(&Change::RegionRegistered(RegionRecord { address: "a".into(), ..RegionRecord::default() }));
        for shard in ["s1", "s2"] {
            durable.apply(&Change::HomeSet { shard: shard.into(), home: home("a", AllocationReason::Placement) });
        }
        let (s1, s2) = (&durable.homes["s1"], &durable.homes["s2"]);
        assert!(Arc::ptr_eq(&s1.region, &s2.region), "one address string for both homes");
        assert!(Arc::ptr_eq(&s1.reason, &s2.reason), "one reason for both homes");
        assert_eq!(durable.regions["a"].shards, ["s1", "s2"]);

        durable.apply(&Change::RegionRemoved { address: "a".into() });
        assert!(durable.homes.is_empty());
        assert!(durable.interned.addresses.is_empty(), "a removed region's address is forgotten");

        let mut interned = Interned::default();
        for i in 0..40 {
            interned.home(home("b", AllocationReason::Fallback(StrategyError::Refused(format!("cause {i}")))));
        }
        assert_eq!(interned.reasons.len(), INTERNED_REASONS);
    }
}
