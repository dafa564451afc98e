//! The records of schema 2, frozen: the postcard records schema 2 wrote
//! (positional: no field names, no tags), copied here so that a schema-2
//! store still reads after the records of [`super`] change. Read only, to
//! migrate a store to the current schema; never written. `contracts/store-v2/`
//! and `contracts/store-v2-late/` hold a redb file and an etcd dump of this
//! schema, checked value by value by `host/tests/contract_store.rs`. Do not
//! edit these types.
//!
//! Schema 2 grew by additions an older schema-2 store reads as empty:
//! redb's `loads`, `operations`, `home-epochs` and `epochs` tables, the log's
//! `LoadsSaved`, `FreezeSet`, `FreezeLifted`, `DrainStarted` and `HomeSetAt`
//! changes, and the checkpoint's loads, operations and epochs sections after
//! its data ([`CheckpointLoads`], [`CheckpointOperations`],
//! [`CheckpointEpochs`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::coordinator as core;
use crate::store::{self, ActivationRecord, ComponentRecord, Loaded, TypeRecord};
use crate::strategy::external::AllocationReason;
use crate::strategy::{ActivationCause, FaultKind, StrategyError, StrategySource};

/// A record from its postcard bytes, all of them (bytes left over are an
/// error).
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    match postcard::take_from_bytes(bytes) {
        Ok((record, [])) => Ok(record),
        Ok((_, rest)) => Err(format!("{} bytes after the record", rest.len())),
        Err(error) => Err(error.to_string()),
    }
}

/// A placement's stamp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The writer's timestamp (milliseconds).
    pub timestamp: u64,
    /// The writer.
    pub origin: String,
}

/// A region. In redb's `regions` table without its shards (rebuilt from
/// the homes); in the etcd log and checkpoint with them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Its address.
    pub address: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Cluster roles.
    pub roles: Vec<String>,
    /// Application version.
    pub app_version: String,
    /// Join order.
    pub join_order: u64,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    pub proxy_only: bool,
    /// Drained by an operator.
    pub draining: bool,
    /// Leaving gracefully.
    pub leaving: bool,
    /// Its shards, in allocation order.
    pub shards: Vec<String>,
}

/// What kind of fault stopped a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// A trap.
    Trap,
    /// Its deadline.
    Deadline,
    /// Its memory cap.
    Memory,
}

/// Why a shard got its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// An operator's placement.
    Placement,
    /// The active strategy's answer.
    Strategy {
        /// Its name.
        name: String,
        /// Its version.
        version: String,
    },
    /// The fallback: the strategy answered an error of its own.
    Refused(String),
    /// The fallback: the strategy answered something invalid.
    Invalid(String),
    /// The fallback: the strategy faulted.
    Fault {
        /// What kind of fault.
        kind: Fault,
        /// The runtime's description.
        detail: String,
    },
}

/// A shard's home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Home {
    /// The region's address.
    pub region: String,
    /// Why.
    pub reason: Reason,
    /// When (milliseconds).
    pub at: u64,
}

/// A placement or a tombstone (`target` `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The target region.
    pub target: Option<String>,
    /// The last write's stamp.
    pub stamp: Stamp,
    /// When the coordinator applied it (milliseconds).
    pub written_at: u64,
}

/// A shard's smoothed load and last move: redb's `loads` table, the etcd
/// log's `LoadsSaved` and the checkpoint's loads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShardLoad {
    /// The smoothed load (units per second).
    pub load: f64,
    /// When the shard last moved (milliseconds of the driver's clock).
    pub moved_at: Option<u64>,
}

/// One change of a type's durable state (the etcd log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum Change {
    RegionRegistered(Region),
    RegionRemoved {
        address: String,
    },
    RegionDraining {
        address: String,
        draining: bool,
    },
    RegionLeaving {
        address: String,
    },
    HomeSet {
        shard: String,
        home: Home,
    },
    HomeRemoved {
        shard: String,
    },
    HandOffStarted {
        shard: String,
        from: String,
    },
    HandOffEnded {
        shard: String,
    },
    PlacementWritten {
        shard: String,
        entry: Placement,
    },
    PlacementPurged {
        shard: String,
    },
    RebalanceQueued {
        shard: String,
    },
    RebalanceUnqueued {
        shard: String,
    },
    SignalSet {
        signal: Option<String>,
    },
    /// Added within schema 2, at the end: a store written before it never
    /// holds one.
    LoadsSaved {
        loads: Vec<(String, Option<ShardLoad>)>,
    },
    /// Added within schema 2, at the end (as the next one).
    FreezeSet {
        freeze: Freeze,
    },
    FreezeLifted {
        scope: FreezeScope,
        at: u64,
        by: ChangedBy,
        reason: String,
        expired: bool,
    },
    DrainStarted {
        address: String,
        at: u64,
    },
    /// Added within schema 2, at the end: a home with the shard's epoch.
    /// The node writes it for every home; a `HomeSet` (written before)
    /// reads as epoch 0.
    HomeSetAt {
        shard: String,
        home: Home,
        epoch: u64,
    },
}

/// Whose freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum FreezeScope {
    Type,
    Cluster,
    Maintenance,
}

/// Who made a change: an operator or the node itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum ChangedBy {
    Operator,
    Automatic,
}

/// What happened to a freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum FreezeAction {
    Frozen,
    Lifted,
    Expired,
}

/// A freeze in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    /// Whose.
    pub scope: FreezeScope,
    /// Why.
    pub reason: String,
    /// When it began (the driver's clock).
    pub since: u64,
    /// When it ends (the driver's clock).
    pub until: Option<u64>,
    /// Operators' moves wait too.
    pub strict: bool,
}

/// One entry of a freeze history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeRecord {
    /// When (the driver's clock).
    pub at: u64,
    /// What.
    pub action: FreezeAction,
    /// Which freeze.
    pub scope: FreezeScope,
    /// Who.
    pub by: ChangedBy,
    /// Why.
    pub reason: String,
    /// The freeze's end.
    pub until: Option<u64>,
    /// Whether it was strict.
    pub strict: bool,
}

/// A type's freezes and their history.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Freezes {
    /// In force, by scope.
    pub now: Vec<Freeze>,
    /// The history, oldest first.
    pub history: Vec<FreezeRecord>,
}

/// A type's operations in progress: redb's `operations` row and the etcd
/// checkpoint's operations (added within schema 2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Operations {
    /// Its freezes.
    pub freezes: Freezes,
    /// Draining region → when its drain began (the driver's clock).
    pub drains: Vec<(String, u64)>,
}

/// A type's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declaration {
    /// A built-in's name or a component's `sha256:…` digest.
    pub strategy: String,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// Why a strategy became active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs, reason = "a frozen record of an older schema: its variants are the ones named")]
pub enum Cause {
    Initial,
    Operator,
    Rollback,
    AutoRollback,
}

/// One activation of a type's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    /// A built-in's name or a component's digest.
    pub strategy: String,
    /// The name the strategy describes itself with.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its configuration.
    pub config: String,
    /// Why.
    pub cause: Cause,
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
}

/// An uploaded component's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// `sha256:…`.
    pub digest: String,
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was uploaded (milliseconds since the Unix epoch).
    pub uploaded_at_ms: u64,
}

/// redb's `types` row: the declaration, the signal, the next join order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeRow {
    /// The declaration, if declared.
    pub record: Option<Declaration>,
    /// The signal.
    pub signal: Option<String>,
    /// The next join order.
    pub next_join_order: u64,
}

/// redb's `homes` row: the home and its allocation order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeRow {
    /// The home.
    pub home: Home,
    /// Its allocation order (across the store).
    pub order: u64,
}

/// One driver turn (an etcd log entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Changes per type, in order.
    pub changes: Vec<(String, Vec<Change>)>,
    /// Types declared.
    pub types: Vec<(String, Declaration)>,
    /// Activations appended.
    pub activations: Vec<(String, Activation)>,
    /// Component records stored.
    pub components: Vec<Component>,
    /// Component records deleted, by digest.
    pub removed_components: Vec<String>,
    /// Types deleted (applied first).
    pub removed_types: Vec<String>,
}

/// A type's durable state (the etcd checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durable {
    /// Regions, with their shards.
    pub regions: Vec<Region>,
    /// Shard → home.
    pub homes: Vec<(String, Home)>,
    /// Hand-offs in flight: shard → owner.
    pub handoffs: Vec<(String, String)>,
    /// Placements and tombstones.
    pub placements: Vec<(String, Placement)>,
    /// The rebalance queue.
    pub queued: Vec<String>,
    /// The next join order.
    pub next_join_order: u64,
    /// The signal.
    pub signal: Option<String>,
}

/// One type of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadedType {
    /// Its name.
    pub name: String,
    /// Its declaration.
    pub record: Option<Declaration>,
    /// Its coordinator's state.
    pub durable: Durable,
    /// Its activations, oldest first.
    pub activations: Vec<Activation>,
}

/// The whole state at a revision (the etcd checkpoint's data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The revision.
    pub revision: u64,
    /// Every type.
    pub types: Vec<LoadedType>,
    /// Every component record.
    pub components: Vec<Component>,
}

/// The shards' loads of a checkpoint, written after its [`Checkpoint`] in
/// the same chunks (added within schema 2: a checkpoint written before has
/// none, and its record says where they start when it has).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CheckpointLoads {
    /// Type → its shards' loads, by shard.
    pub types: Vec<(String, Vec<(String, ShardLoad)>)>,
}

/// The types' operations of a checkpoint, written after its loads (added
/// within schema 2: a checkpoint written before has none, and its record
/// says where they start when it has).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CheckpointOperations {
    /// Type → its operations.
    pub types: Vec<(String, Operations)>,
}

/// The types' epochs of a checkpoint, written after its operations (added
/// within schema 2: a checkpoint written before has none, and its record
/// says where they start when it has).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CheckpointEpochs {
    /// The types that gave an epoch.
    pub types: Vec<TypeEpochs>,
}

/// One type's epochs in a checkpoint (postcard writes it as the tuple of
/// its fields, in order).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TypeEpochs {
    /// The type.
    pub name: String,
    /// The highest epoch it gave.
    pub highest: u64,
    /// Its homes' epochs, by shard (those above 0).
    pub homes: Vec<(String, u64)>,
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
            // Schema 2 did not keep it.
            registered_at: None,
            capacity: Default::default(),
        }
    }
}

impl From<Reason> for AllocationReason {
    fn from(r: Reason) -> Self {
        match r {
            Reason::Placement => AllocationReason::Placement,
            Reason::Strategy { name, version } => AllocationReason::Strategy { name, version },
            Reason::Refused(text) => AllocationReason::Fallback(StrategyError::Refused(text)),
            Reason::Invalid(text) => AllocationReason::Fallback(StrategyError::Invalid(text)),
            Reason::Fault { kind, detail } => {
                AllocationReason::Fallback(StrategyError::Fault { kind: kind.into(), detail })
            }
        }
    }
}

impl From<Fault> for FaultKind {
    fn from(kind: Fault) -> Self {
        match kind {
            Fault::Trap => FaultKind::Trap,
            Fault::Deadline => FaultKind::Deadline,
            Fault::Memory => FaultKind::Memory,
        }
    }
}

impl From<Home> for core::Home {
    fn from(h: Home) -> Self {
        core::Home { region: Arc::from(h.region), reason: Arc::new(h.reason.into()), at: h.at, epoch: 0 }
    }
}

impl From<Placement> for core::PlacementEntry {
    fn from(p: Placement) -> Self {
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
            Change::HomeSetAt { shard, home, epoch } => {
                C::HomeSet { shard, home: core::Home { epoch, ..core::Home::from(home) } }
            }
            Change::HomeRemoved { shard } => C::HomeRemoved { shard },
            Change::HandOffStarted { shard, from } => C::HandOffStarted { shard, from },
            Change::HandOffEnded { shard } => C::HandOffEnded { shard },
            Change::PlacementWritten { shard, entry } => C::PlacementWritten { shard, entry: entry.into() },
            Change::PlacementPurged { shard } => C::PlacementPurged { shard },
            Change::RebalanceQueued { shard } => C::RebalanceQueued { shard },
            Change::RebalanceUnqueued { shard } => C::RebalanceUnqueued { shard },
            Change::SignalSet { signal } => C::SignalSet { signal },
            Change::LoadsSaved { loads } => {
                C::LoadsSaved { loads: loads.into_iter().map(|(shard, load)| (shard, load.map(Into::into))).collect() }
            }
            Change::FreezeSet { freeze } => C::FreezeSet { freeze: freeze.into() },
            Change::DrainStarted { address, at } => C::DrainStarted { address, at },
            Change::FreezeLifted { scope, at, by, reason, expired } => {
                C::FreezeLifted { scope: scope.into(), at, by: by.into(), reason, expired }
            }
        }
    }
}

impl From<FreezeScope> for core::FreezeScope {
    fn from(s: FreezeScope) -> Self {
        match s {
            FreezeScope::Type => core::FreezeScope::Type,
            FreezeScope::Cluster => core::FreezeScope::Cluster,
            FreezeScope::Maintenance => core::FreezeScope::Maintenance,
        }
    }
}

impl From<ChangedBy> for core::ChangedBy {
    fn from(b: ChangedBy) -> Self {
        match b {
            ChangedBy::Operator => core::ChangedBy::Operator,
            ChangedBy::Automatic => core::ChangedBy::Automatic,
        }
    }
}

impl From<Freeze> for core::Freeze {
    fn from(f: Freeze) -> Self {
        core::Freeze { scope: f.scope.into(), reason: f.reason, since: f.since, until: f.until, strict: f.strict }
    }
}

impl From<Freezes> for core::Freezes {
    fn from(f: Freezes) -> Self {
        let action = |a: FreezeAction| match a {
            FreezeAction::Frozen => core::FreezeAction::Frozen,
            FreezeAction::Lifted => core::FreezeAction::Lifted,
            FreezeAction::Expired => core::FreezeAction::Expired,
        };
        core::Freezes {
            now: f.now.into_iter().map(|f| (f.scope.into(), f.into())).collect(),
            history: f
                .history
                .into_iter()
                .map(|r| core::FreezeRecord {
                    at: r.at,
                    action: action(r.action),
                    scope: r.scope.into(),
                    by: r.by.into(),
                    reason: r.reason,
                    until: r.until,
                    strict: r.strict,
                })
                .collect(),
        }
    }
}

impl From<Operations> for core::Operations {
    fn from(o: Operations) -> Self {
        core::Operations { freezes: o.freezes.into(), drains: o.drains.into_iter().collect() }
    }
}

/// `loaded` with a checkpoint's epochs put back into its types and homes.
pub fn with_epochs(mut loaded: Loaded, epochs: CheckpointEpochs) -> Loaded {
    for TypeEpochs { name, highest, homes } in epochs.types {
        if let Some(t) = loaded.types.get_mut(&name) {
            t.durable.epoch = t.durable.epoch.max(highest);
            for (shard, epoch) in homes {
                if let Some(home) = t.durable.homes.get_mut(&shard) {
                    home.epoch = epoch;
                }
            }
        }
    }
    loaded
}

/// `loaded` with a checkpoint's operations put back into its types.
pub fn with_operations(mut loaded: Loaded, operations: CheckpointOperations) -> Loaded {
    for (name, row) in operations.types {
        if let Some(t) = loaded.types.get_mut(&name) {
            t.durable.operations = row.into();
        }
    }
    loaded
}

impl From<Declaration> for TypeRecord {
    fn from(d: Declaration) -> Self {
        TypeRecord { strategy: StrategySource::parse_stored(&d.strategy), config: d.config }
    }
}

impl From<Cause> for ActivationCause {
    fn from(c: Cause) -> Self {
        match c {
            Cause::Initial => ActivationCause::Initial,
            Cause::Operator => ActivationCause::Operator,
            Cause::Rollback => ActivationCause::Rollback,
            Cause::AutoRollback => ActivationCause::AutoRollback,
        }
    }
}

impl From<Activation> for ActivationRecord {
    fn from(a: Activation) -> Self {
        ActivationRecord {
            strategy: StrategySource::parse_stored(&a.strategy),
            name: a.name,
            version: a.version,
            config: a.config,
            cause: a.cause.into(),
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

impl From<ShardLoad> for core::ShardLoad {
    fn from(l: ShardLoad) -> Self {
        core::ShardLoad { load: l.load, moved_at: l.moved_at }
    }
}

/// `loaded` with a checkpoint's loads put back into its types.
pub fn with_loads(mut loaded: Loaded, loads: CheckpointLoads) -> Loaded {
    for (name, shards) in loads.types {
        if let Some(t) = loaded.types.get_mut(&name) {
            t.durable.loads = shards.into_iter().map(|(s, l)| (s, l.into())).collect();
        }
    }
    loaded
}

impl From<Durable> for core::Durable {
    fn from(d: Durable) -> Self {
        let mut durable = core::Durable {
            regions: d.regions.into_iter().map(|r| (r.address.clone(), r.into())).collect(),
            handoffs: d.handoffs.into_iter().collect(),
            placements: d.placements.into_iter().map(|(s, p)| (s, p.into())).collect(),
            queued: d.queued.into_iter().collect(),
            next_join_order: d.next_join_order,
            signal: d.signal,
            ..core::Durable::default()
        };
        // Built in one go (full B-tree nodes), the homes sharing their
        // addresses and reasons.
        let interned = &mut durable.interned;
        durable.homes = d.homes.into_iter().map(|(shard, home)| (shard, interned.home(home.into()))).collect();
        durable
    }
}

impl From<Checkpoint> for Loaded {
    fn from(c: Checkpoint) -> Self {
        let types = c
            .types
            .into_iter()
            .map(|t| {
                let loaded = store::LoadedType {
                    record: t.record.map(Into::into),
                    durable: t.durable.into(),
                    activations: t.activations.into_iter().map(Into::into).collect(),
                };
                (t.name, loaded)
            })
            .collect();
        let components = c.components.into_iter().map(|c| (c.digest.clone(), c.into())).collect();
        Loaded { revision: c.revision, types, components }
    }
}
