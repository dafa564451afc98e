//! The records of schema 3 from and to the core's types: one explicit
//! conversion each way. Writing takes the core's values by reference;
//! reading consumes the record. Homes read back are interned by
//! [`core::Durable`]'s `Interned` where a whole state is built.

use std::sync::Arc;

use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;

use super::{
    Activation, Attributes, Cause, Change, ChangedBy, Checkpoint, Component, Declaration, Durable, Fault, Freeze,
    FreezeAction, FreezeRecord, FreezeScope, Freezes, Home, HomeRef, HomeRow, HomeRowRef, LoadedType, Operations,
    Placement, Reason, ReasonRef, Region, ShardLoad, Stamp, Turn, TypeRow,
};
use crate::coordinator as core;
use crate::store::{self, ActivationRecord, ComponentRecord, Loaded, TypeRecord};
use crate::strategy::external::AllocationReason;
use crate::strategy::{ActivationCause, FaultKind, StrategyError, StrategySource};

impl From<&core::Stamp> for Stamp {
    fn from(s: &core::Stamp) -> Self {
        Stamp { timestamp: s.timestamp, origin: s.origin.clone() }
    }
}

impl From<Stamp> for core::Stamp {
    fn from(s: Stamp) -> Self {
        core::Stamp { timestamp: s.timestamp, origin: s.origin }
    }
}

impl From<&core::RegionRecord> for Region {
    fn from(r: &core::RegionRecord) -> Self {
        Region {
            address: r.address.clone(),
            incarnation: r.incarnation,
            roles: r.roles.clone(),
            app_version: r.app_version.clone(),
            join_order: r.join_order,
            labels: r.labels.clone(),
            proxy_only: r.proxy_only,
            draining: r.draining,
            leaving: r.leaving,
            shards: r.shards.clone(),
            registered_at: r.registered_at,
            capacity: r.capacity.as_map().clone(),
        }
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
            registered_at: r.registered_at,
            capacity: RegionCapacity::stored(r.capacity),
        }
    }
}

impl From<&AllocationReason> for Reason {
    fn from(r: &AllocationReason) -> Self {
        match r {
            AllocationReason::Placement => Reason::Placement,
            AllocationReason::Strategy { name, version } => {
                Reason::Strategy { name: name.clone(), version: version.clone() }
            }
            AllocationReason::Fallback(StrategyError::Refused(text)) => Reason::Refused(text.clone()),
            AllocationReason::Fallback(StrategyError::Invalid(text)) => Reason::Invalid(text.clone()),
            AllocationReason::Fallback(StrategyError::Fault { kind, detail }) => {
                let kind = match kind {
                    FaultKind::Trap => Fault::Trap,
                    FaultKind::Deadline => Fault::Deadline,
                    FaultKind::Memory => Fault::Memory,
                };
                Reason::Fault { kind, detail: detail.clone() }
            }
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

impl ReasonRef<'_> {
    /// Whether it reads as `reason`, compared without copying.
    fn is(&self, reason: &AllocationReason) -> bool {
        match (self, reason) {
            (ReasonRef::Placement, AllocationReason::Placement) => true,
            (ReasonRef::Strategy { name, version }, AllocationReason::Strategy { name: n, version: v }) => {
                name == n && version == v
            }
            (ReasonRef::Refused(text), AllocationReason::Fallback(StrategyError::Refused(t)))
            | (ReasonRef::Invalid(text), AllocationReason::Fallback(StrategyError::Invalid(t))) => text == t,
            (
                ReasonRef::Fault { kind, detail },
                AllocationReason::Fallback(StrategyError::Fault { kind: k, detail: d }),
            ) => FaultKind::from(*kind) == *k && detail == d,
            _ => false,
        }
    }

    /// The core's reason, copied.
    fn to_core(&self) -> AllocationReason {
        match *self {
            ReasonRef::Placement => AllocationReason::Placement,
            ReasonRef::Strategy { name, version } => {
                AllocationReason::Strategy { name: name.to_owned(), version: version.to_owned() }
            }
            ReasonRef::Refused(text) => AllocationReason::Fallback(StrategyError::Refused(text.to_owned())),
            ReasonRef::Invalid(text) => AllocationReason::Fallback(StrategyError::Invalid(text.to_owned())),
            ReasonRef::Fault { kind, detail } => {
                AllocationReason::Fallback(StrategyError::Fault { kind: kind.into(), detail: detail.to_owned() })
            }
        }
    }
}

impl From<&core::Home> for Home {
    fn from(h: &core::Home) -> Self {
        Home { region: h.region.to_string(), reason: (&*h.reason).into(), at: h.at, epoch: h.epoch }
    }
}

impl From<Home> for core::Home {
    fn from(h: Home) -> Self {
        core::Home { region: Arc::from(h.region), reason: Arc::new(h.reason.into()), at: h.at, epoch: h.epoch }
    }
}

impl From<&core::PlacementEntry> for Placement {
    fn from(p: &core::PlacementEntry) -> Self {
        Placement { target: p.target.clone(), stamp: (&p.stamp).into(), written_at: p.written_at }
    }
}

impl From<Placement> for core::PlacementEntry {
    fn from(p: Placement) -> Self {
        core::PlacementEntry { target: p.target, stamp: p.stamp.into(), written_at: p.written_at }
    }
}

impl From<&core::Change> for Change {
    fn from(c: &core::Change) -> Self {
        use core::Change as C;
        match c {
            C::RegionRegistered(record) => Change::RegionRegistered(record.into()),
            C::RegionRemoved { address } => Change::RegionRemoved { address: address.clone() },
            C::RegionDraining { address, draining } => {
                Change::RegionDraining { address: address.clone(), draining: *draining }
            }
            C::RegionLeaving { address } => Change::RegionLeaving { address: address.clone() },
            C::HomeSet { shard, home } => Change::HomeSet { shard: shard.clone(), home: home.into() },
            C::HomeRemoved { shard } => Change::HomeRemoved { shard: shard.clone() },
            C::HandOffStarted { shard, from } => Change::HandOffStarted { shard: shard.clone(), from: from.clone() },
            C::HandOffEnded { shard } => Change::HandOffEnded { shard: shard.clone() },
            C::PlacementWritten { shard, entry } => {
                Change::PlacementWritten { shard: shard.clone(), entry: entry.into() }
            }
            C::PlacementPurged { shard } => Change::PlacementPurged { shard: shard.clone() },
            C::RebalanceQueued { shard } => Change::RebalanceQueued { shard: shard.clone() },
            C::RebalanceUnqueued { shard } => Change::RebalanceUnqueued { shard: shard.clone() },
            C::SignalSet { signal } => Change::SignalSet { signal: signal.clone() },
            C::LoadsSaved { loads } => Change::LoadsSaved {
                loads: loads.iter().map(|(shard, load)| (shard.clone(), load.map(Into::into))).collect(),
            },
            C::FreezeSet { freeze } => Change::FreezeSet { freeze: freeze.into() },
            C::DrainStarted { address, at } => Change::DrainStarted { address: address.clone(), at: *at },
            C::AttributesSet { shard, attributes } => {
                Change::AttributesSet { shard: shard.clone(), attributes: attributes.into() }
            }
            C::FreezeLifted { scope, at, by, reason, expired } => Change::FreezeLifted {
                scope: (*scope).into(),
                at: *at,
                by: (*by).into(),
                reason: reason.clone(),
                expired: *expired,
            },
        }
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
            Change::LoadsSaved { loads } => {
                C::LoadsSaved { loads: loads.into_iter().map(|(shard, load)| (shard, load.map(Into::into))).collect() }
            }
            Change::FreezeSet { freeze } => C::FreezeSet { freeze: freeze.into() },
            Change::DrainStarted { address, at } => C::DrainStarted { address, at },
            Change::AttributesSet { shard, attributes } => C::AttributesSet { shard, attributes: attributes.into() },
            Change::FreezeLifted { scope, at, by, reason, expired } => {
                C::FreezeLifted { scope: scope.into(), at, by: by.into(), reason, expired }
            }
        }
    }
}

impl From<core::FreezeScope> for FreezeScope {
    fn from(s: core::FreezeScope) -> Self {
        match s {
            core::FreezeScope::Type => FreezeScope::Type,
            core::FreezeScope::Cluster => FreezeScope::Cluster,
            core::FreezeScope::Maintenance => FreezeScope::Maintenance,
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

impl From<core::ChangedBy> for ChangedBy {
    fn from(b: core::ChangedBy) -> Self {
        match b {
            core::ChangedBy::Operator => ChangedBy::Operator,
            core::ChangedBy::Automatic => ChangedBy::Automatic,
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

impl From<&core::Freeze> for Freeze {
    fn from(f: &core::Freeze) -> Self {
        Freeze { scope: f.scope.into(), reason: f.reason.clone(), since: f.since, until: f.until, strict: f.strict }
    }
}

impl From<Freeze> for core::Freeze {
    fn from(f: Freeze) -> Self {
        core::Freeze { scope: f.scope.into(), reason: f.reason, since: f.since, until: f.until, strict: f.strict }
    }
}

impl From<&core::Freezes> for Freezes {
    fn from(f: &core::Freezes) -> Self {
        let action = |a: core::FreezeAction| match a {
            core::FreezeAction::Frozen => FreezeAction::Frozen,
            core::FreezeAction::Lifted => FreezeAction::Lifted,
            core::FreezeAction::Expired => FreezeAction::Expired,
        };
        Freezes {
            now: f.now.values().map(Into::into).collect(),
            history: f
                .history
                .iter()
                .map(|r| FreezeRecord {
                    at: r.at,
                    action: action(r.action),
                    scope: r.scope.into(),
                    by: r.by.into(),
                    reason: r.reason.clone(),
                    until: r.until,
                    strict: r.strict,
                })
                .collect(),
        }
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

impl From<&core::Operations> for Operations {
    fn from(o: &core::Operations) -> Self {
        Operations {
            freezes: (&o.freezes).into(),
            drains: o.drains.iter().map(|(address, at)| (address.clone(), *at)).collect(),
        }
    }
}

impl From<Operations> for core::Operations {
    fn from(o: Operations) -> Self {
        core::Operations { freezes: o.freezes.into(), drains: o.drains.into_iter().collect() }
    }
}

impl From<&TypeRecord> for Declaration {
    fn from(t: &TypeRecord) -> Self {
        Declaration { strategy: t.strategy.to_string(), config: t.config.clone() }
    }
}

impl From<Declaration> for TypeRecord {
    fn from(d: Declaration) -> Self {
        TypeRecord { strategy: StrategySource::parse_stored(&d.strategy), config: d.config }
    }
}

impl From<ActivationCause> for Cause {
    fn from(c: ActivationCause) -> Self {
        match c {
            ActivationCause::Initial => Cause::Initial,
            ActivationCause::Operator => Cause::Operator,
            ActivationCause::Rollback => Cause::Rollback,
            ActivationCause::AutoRollback => Cause::AutoRollback,
        }
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

impl From<&ActivationRecord> for Activation {
    fn from(a: &ActivationRecord) -> Self {
        Activation {
            strategy: a.strategy.to_string(),
            name: a.name.clone(),
            version: a.version.clone(),
            config: a.config.clone(),
            cause: a.cause.into(),
            at_ms: a.at_ms,
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

impl From<&ComponentRecord> for Component {
    fn from(c: &ComponentRecord) -> Self {
        Component {
            digest: c.digest.clone(),
            name: c.name.clone(),
            version: c.version.clone(),
            size: c.size,
            uploaded_at_ms: c.uploaded_at_ms,
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

/// A type's `types` row (redb) as the core's values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TypeValues {
    /// Its declaration, if declared.
    pub record: Option<TypeRecord>,
    /// Its signal.
    pub signal: Option<String>,
    /// The next join order.
    pub next_join_order: u64,
    /// The highest epoch it gave a home.
    pub epoch: u64,
    /// Its freezes and drains.
    pub operations: core::Operations,
}

/// redb's `types` row of a type.
pub fn type_row(values: &TypeValues) -> TypeRow {
    TypeRow {
        record: values.record.as_ref().map(Into::into),
        signal: values.signal.clone(),
        next_join_order: values.next_join_order,
        epoch: values.epoch,
        operations: (&values.operations).into(),
    }
}

impl From<TypeRow> for TypeValues {
    fn from(row: TypeRow) -> Self {
        TypeValues {
            record: row.record.map(Into::into),
            signal: row.signal,
            next_join_order: row.next_join_order,
            epoch: row.epoch,
            operations: row.operations.into(),
        }
    }
}

/// A `homes` row read in place: its region's address (borrowed
/// from `bytes`, for the caller to resolve against the regions it holds),
/// its reason shared through `interned`, its time and allocation order.
/// Nothing is copied but a reason met for the first time: the same values
/// as decoding a [`HomeRow`], without its allocations.
pub fn read_home_row<'a>(bytes: &'a [u8], interned: &mut core::Interned) -> Result<(&'a str, HomeRead), String> {
    let HomeRowRef { home: HomeRef { region, reason, at, epoch }, order } = super::decode(bytes)?;
    let reason = interned.reason_by(|kept| reason.is(kept), || Arc::new(reason.to_core()));
    Ok((region, HomeRead { reason, at, epoch, order }))
}

/// What [`read_home_row`] reads besides the region.
#[derive(Debug, Clone, PartialEq)]
pub struct HomeRead {
    /// Why, shared.
    pub reason: Arc<AllocationReason>,
    /// When (milliseconds).
    pub at: u64,
    /// The shard's epoch.
    pub epoch: u64,
    /// Its allocation order.
    pub order: u64,
}

/// redb's `homes` row of a home.
pub fn home_row(home: &core::Home, order: u64) -> HomeRow {
    HomeRow { home: home.into(), order }
}

impl From<HomeRow> for (core::Home, u64) {
    fn from(row: HomeRow) -> Self {
        (row.home.into(), row.order)
    }
}

/// The log entry of a turn.
pub fn turn(turn: &store::Turn) -> Turn {
    Turn {
        changes: turn
            .changes
            .iter()
            .map(|(t, changes)| (t.clone(), changes.iter().map(Into::into).collect()))
            .collect(),
        types: turn.types.iter().map(|(t, record)| (t.clone(), record.into())).collect(),
        activations: turn.activations.iter().map(|(t, a)| (t.clone(), a.into())).collect(),
        components: turn.components.iter().map(Into::into).collect(),
        removed_components: turn.removed_components.clone(),
        removed_types: turn.removed_types.clone(),
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

/// The checkpoint of a whole state.
pub fn checkpoint(loaded: &Loaded) -> Checkpoint {
    let types = loaded
        .types
        .iter()
        .map(|(name, t)| {
            let d = &t.durable;
            LoadedType {
                name: name.clone(),
                record: t.record.as_ref().map(Into::into),
                durable: Durable {
                    regions: d.regions.values().map(Into::into).collect(),
                    homes: d.homes.iter().map(|(shard, home)| (shard.clone(), home.into())).collect(),
                    handoffs: d.handoffs.iter().map(|(s, from)| (s.clone(), from.clone())).collect(),
                    placements: d.placements.iter().map(|(s, p)| (s.clone(), p.into())).collect(),
                    queued: d.queued.iter().cloned().collect(),
                    next_join_order: d.next_join_order,
                    signal: d.signal.clone(),
                    epoch: d.epoch,
                    loads: d.loads.iter().map(|(s, l)| (s.clone(), (*l).into())).collect(),
                    operations: (&d.operations).into(),
                    attributes: d.attributes.iter().map(|(s, a)| (s.clone(), a.into())).collect(),
                },
                activations: t.activations.iter().map(Into::into).collect(),
            }
        })
        .collect();
    Checkpoint { revision: loaded.revision, types, components: loaded.components.values().map(Into::into).collect() }
}

impl From<&ShardAttributes> for Attributes {
    fn from(a: &ShardAttributes) -> Self {
        Attributes { pairs: a.to_map() }
    }
}

impl From<Attributes> for ShardAttributes {
    fn from(a: Attributes) -> Self {
        ShardAttributes::stored(a.pairs)
    }
}

impl From<core::ShardLoad> for ShardLoad {
    fn from(l: core::ShardLoad) -> Self {
        ShardLoad { load: l.load, moved_at: l.moved_at }
    }
}

impl From<ShardLoad> for core::ShardLoad {
    fn from(l: ShardLoad) -> Self {
        core::ShardLoad { load: l.load, moved_at: l.moved_at }
    }
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
            epoch: d.epoch,
            loads: d.loads.into_iter().map(|(s, l)| (s, l.into())).collect(),
            operations: d.operations.into(),
            attributes: d.attributes.into_iter().map(|(s, a)| (s, a.into())).collect(),
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
