//! The records of schema 1, frozen: the JSON shapes the core's types had
//! when schema 1 was written (their field names, and their enum tags as
//! their `#[serde(...)]` attributes made them), copied here so that a
//! schema-1 store still reads after the core's types change. Read only, to
//! migrate a store to the current schema; never written. `contracts/store-v1/` holds
//! a redb file and an etcd dump of this schema, checked value by value by
//! `host/tests/contract_store.rs`. Do not edit these types.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::coordinator as core;
use crate::store::{self, ActivationRecord, ComponentRecord, Loaded, TypeRecord};
use crate::strategy::StrategySource;
use crate::strategy::external::AllocationReason as CoreReason;
use crate::strategy::{ActivationCause as CoreCause, FaultKind as CoreFault, StrategyError as CoreError};

/// `coordinator::Stamp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    timestamp: u64,
    origin: String,
}

/// `coordinator::RegionRecord`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    address: String,
    incarnation: u64,
    roles: Vec<String>,
    app_version: String,
    join_order: u64,
    labels: BTreeMap<String, String>,
    proxy_only: bool,
    draining: bool,
    leaving: bool,
    shards: Vec<String>,
}

/// `strategy::FaultKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum FaultKind {
    Trap,
    Deadline,
    Memory,
}

/// `strategy::StrategyError`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum StrategyError {
    Refused(String),
    Invalid(String),
    Fault { kind: FaultKind, detail: String },
}

/// `strategy::external::AllocationReason`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum AllocationReason {
    Placement,
    Strategy { name: String, version: String },
    Fallback(StrategyError),
}

/// `coordinator::Home` (its region an `Arc<str>`, serialised as a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Home {
    region: String,
    reason: AllocationReason,
    at: u64,
}

/// `coordinator::PlacementEntry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementEntry {
    target: Option<String>,
    stamp: Stamp,
    written_at: u64,
}

/// `coordinator::Change`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum Change {
    RegionRegistered(Region),
    RegionRemoved { address: String },
    RegionDraining { address: String, draining: bool },
    RegionLeaving { address: String },
    HomeSet { shard: String, home: Home },
    HomeRemoved { shard: String },
    HandOffStarted { shard: String, from: String },
    HandOffEnded { shard: String },
    PlacementWritten { shard: String, entry: PlacementEntry },
    PlacementPurged { shard: String },
    RebalanceQueued { shard: String },
    RebalanceUnqueued { shard: String },
    SignalSet { signal: Option<String> },
}

/// `store::TypeRecord` (its strategy as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    strategy: String,
    config: String,
}

/// `strategy::ActivationCause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum ActivationCause {
    Initial,
    Operator,
    Rollback,
    AutoRollback,
}

/// `store::ActivationRecord`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    strategy: String,
    name: String,
    version: String,
    config: String,
    cause: ActivationCause,
    at_ms: u64,
}

/// `store::ComponentRecord`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    digest: String,
    name: String,
    version: String,
    size: u64,
    #[serde(default)]
    uploaded_at_ms: u64,
}

/// redb's `types` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeRow {
    record: Option<Declaration>,
    signal: Option<String>,
    next_join_order: u64,
}

/// redb's `homes` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeRow {
    home: Home,
    order: u64,
}

/// `store::Turn`: an etcd log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    changes: BTreeMap<String, Vec<Change>>,
    types: BTreeMap<String, Declaration>,
    activations: Vec<(String, Activation)>,
    components: Vec<Component>,
    removed_components: Vec<String>,
    removed_types: Vec<String>,
}

/// `coordinator::Durable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durable {
    regions: BTreeMap<String, Region>,
    homes: BTreeMap<String, Home>,
    handoffs: BTreeMap<String, String>,
    placements: BTreeMap<String, PlacementEntry>,
    queued: BTreeSet<String>,
    next_join_order: u64,
    signal: Option<String>,
}

/// `store::LoadedType`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedType {
    record: Option<Declaration>,
    durable: Durable,
    activations: Vec<Activation>,
}

/// `store::Loaded`: the etcd checkpoint's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    revision: u64,
    types: BTreeMap<String, LoadedType>,
    components: BTreeMap<String, Component>,
}

impl From<Stamp> for core::Stamp {
    fn from(s: Stamp) -> Self {
        core::Stamp { timestamp: s.timestamp, origin: s.origin }
    }
}

impl From<Region> for core::RegionRecord {
    fn from(r: Region) -> Self {
        core::RegionRecord {
            address: r.address,
            incarnation: r.incarnation,
            roles: r.roles,
            app_version: r.app_version,
            join_order: r.join_order,
            labels: r.labels,
            proxy_only: r.proxy_only,
            draining: r.draining,
            leaving: r.leaving,
            shards: r.shards,
            // Schema 1 did not keep it.
            registered_at: None,
            capacity: Default::default(),
        }
    }
}

impl From<AllocationReason> for CoreReason {
    fn from(r: AllocationReason) -> Self {
        match r {
            AllocationReason::Placement => CoreReason::Placement,
            AllocationReason::Strategy { name, version } => CoreReason::Strategy { name, version },
            AllocationReason::Fallback(StrategyError::Refused(text)) => CoreReason::Fallback(CoreError::Refused(text)),
            AllocationReason::Fallback(StrategyError::Invalid(text)) => CoreReason::Fallback(CoreError::Invalid(text)),
            AllocationReason::Fallback(StrategyError::Fault { kind, detail }) => {
                let kind = match kind {
                    FaultKind::Trap => CoreFault::Trap,
                    FaultKind::Deadline => CoreFault::Deadline,
                    FaultKind::Memory => CoreFault::Memory,
                };
                CoreReason::Fallback(CoreError::Fault { kind, detail })
            }
        }
    }
}

impl From<Home> for core::Home {
    fn from(h: Home) -> Self {
        core::Home { region: Arc::from(h.region), reason: Arc::new(h.reason.into()), at: h.at, epoch: 0 }
    }
}

impl From<PlacementEntry> for core::PlacementEntry {
    fn from(p: PlacementEntry) -> Self {
        core::PlacementEntry { target: p.target, stamp: p.stamp.into(), written_at: p.written_at }
    }
}

impl From<Change> for core::Change {
    fn from(c: Change) -> Self {
        use core::Change as C;
        match c {
            Change::RegionRegistered(record) => C::RegionRegistered(record.into()),
            Change::RegionRemoved { address } => C::RegionRemoved { address },
            Change::RegionDraining { address, draining } => C::RegionDraining { address, draining },
            Change::RegionLeaving { address } => C::RegionLeaving { address },
            Change::HomeSet { shard, home } => C::HomeSet { shard, home: home.into() },
            Change::HomeRemoved { shard } => C::HomeRemoved { shard },
            Change::HandOffStarted { shard, from } => C::HandOffStarted { shard, from },
            Change::HandOffEnded { shard } => C::HandOffEnded { shard },
            Change::PlacementWritten { shard, entry } => C::PlacementWritten { shard, entry: entry.into() },
            Change::PlacementPurged { shard } => C::PlacementPurged { shard },
            Change::RebalanceQueued { shard } => C::RebalanceQueued { shard },
            Change::RebalanceUnqueued { shard } => C::RebalanceUnqueued { shard },
            Change::SignalSet { signal } => C::SignalSet { signal },
        }
    }
}

impl From<Declaration> for TypeRecord {
    fn from(t: Declaration) -> Self {
        TypeRecord { strategy: StrategySource::parse_stored(&t.strategy), config: t.config }
    }
}

impl From<Activation> for ActivationRecord {
    fn from(a: Activation) -> Self {
        let cause = match a.cause {
            ActivationCause::Initial => CoreCause::Initial,
            ActivationCause::Operator => CoreCause::Operator,
            ActivationCause::Rollback => CoreCause::Rollback,
            ActivationCause::AutoRollback => CoreCause::AutoRollback,
        };
        ActivationRecord {
            strategy: StrategySource::parse_stored(&a.strategy),
            name: a.name,
            version: a.version,
            config: a.config,
            cause,
            at_ms: a.at_ms,
        }
    }
}

impl From<Component> for ComponentRecord {
    fn from(c: Component) -> Self {
        ComponentRecord {
            digest: c.digest,
            name: c.name,
            version: c.version,
            size: c.size,
            uploaded_at_ms: c.uploaded_at_ms,
        }
    }
}

impl From<TypeRow> for super::TypeValues {
    fn from(row: TypeRow) -> Self {
        super::TypeValues {
            record: row.record.map(Into::into),
            signal: row.signal,
            next_join_order: row.next_join_order,
            ..super::TypeValues::default()
        }
    }
}

impl From<HomeRow> for (core::Home, u64) {
    fn from(row: HomeRow) -> Self {
        (row.home.into(), row.order)
    }
}

impl From<Turn> for store::Turn {
    fn from(turn: Turn) -> Self {
        store::Turn {
            changes: turn
                .changes
                .into_iter()
                .map(|(t, changes)| (t, changes.into_iter().map(Into::into).collect()))
                .collect(),
            types: turn.types.into_iter().map(|(t, record)| (t, record.into())).collect(),
            activations: turn.activations.into_iter().map(|(t, a)| (t, a.into())).collect(),
            components: turn.components.into_iter().map(Into::into).collect(),
            removed_components: turn.removed_components,
            removed_types: turn.removed_types,
        }
    }
}

impl From<Durable> for core::Durable {
    fn from(d: Durable) -> Self {
        let mut durable = core::Durable {
            regions: d.regions.into_iter().map(|(address, r)| (address, r.into())).collect(),
            handoffs: d.handoffs,
            placements: d.placements.into_iter().map(|(s, p)| (s, p.into())).collect(),
            queued: d.queued,
            next_join_order: d.next_join_order,
            signal: d.signal,
            ..core::Durable::default()
        };
        for (shard, home) in d.homes {
            let home = durable.interned.home(home.into());
            durable.homes.insert(shard, home);
        }
        durable
    }
}

impl From<Checkpoint> for Loaded {
    fn from(c: Checkpoint) -> Self {
        let types = c
            .types
            .into_iter()
            .map(|(name, t)| {
                let loaded = store::LoadedType {
                    record: t.record.map(Into::into),
                    durable: t.durable.into(),
                    activations: t.activations.into_iter().map(Into::into).collect(),
                };
                (name, loaded)
            })
            .collect();
        let components = c.components.into_iter().map(|(digest, c)| (digest, c.into())).collect();
        Loaded { revision: c.revision, types, components }
    }
}
