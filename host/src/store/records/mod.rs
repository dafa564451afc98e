//! # The on-disk schema
//!
//! What the store writes, as types that exist only to be stored: plain data
//! (no `Arc`, no interning), encoded with postcard, and converted from and
//! to the core's types by explicit functions (`convert.rs`). The core's
//! in-memory types are never serialised to the store: renaming a field of
//! `coordinator::state` changes no stored byte, and a change to a record
//! below fails `host/tests/contract_store.rs` against `contracts/store-v2/`.
//!
//! - this file: the records of schema 2 ([`SCHEMA_V2`]), the one this build
//!   writes, and their encoding ([`encode`], [`decode`]);
//! - `v1.rs`: the records of schema 1, frozen: today's JSON shapes as the
//!   core's types serialised them when schema 1 was written, read only to
//!   migrate a schema-1 store ([`decode_as`]).
//!
//! **Compatibility.** Postcard is positional: a record carries no field
//! names. Adding, removing, reordering or retyping a field, or inserting a
//! variant anywhere but at the end of an enum, is a new schema: bump
//! `SCHEMA_VERSION`, freeze these records as `v2.rs`, and migrate.

mod convert;
pub mod v1;

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use self::convert::{
    HomeRead, checkpoint, checkpoint_epochs, checkpoint_loads, checkpoint_operations, home_row, read_home_row, turn,
    type_row, with_epochs, with_loads, with_operations,
};

/// Schema 1: JSON rows, the etcd log of JSON turns and a JSON checkpoint.
pub const SCHEMA_V1: u64 = 1;

/// Schema 2: the records of this module, in postcard.
pub const SCHEMA_V2: u64 = 2;

/// A record's bytes.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    postcard::to_stdvec(record).expect("store records serialize")
}

/// A record from its bytes, all of them (bytes left over are an error); a
/// record that borrows its text borrows it from `bytes`.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    match postcard::take_from_bytes(bytes) {
        Ok((record, [])) => Ok(record),
        Ok((_, rest)) => Err(format!("{} bytes after the record", rest.len())),
        Err(error) => Err(error.to_string()),
    }
}

/// A stored value of `schema` as the core's `T`: schema 1 decoded as the
/// JSON record `V1`, schema 2 as the postcard record `V2`.
pub fn decode_as<V1, V2, T>(schema: u64, bytes: &[u8]) -> Result<T, String>
where
    V1: DeserializeOwned + Into<T>,
    V2: DeserializeOwned + Into<T>,
{
    match schema {
        SCHEMA_V1 => serde_json::from_slice::<V1>(bytes).map(Into::into).map_err(|e| e.to_string()),
        SCHEMA_V2 => decode::<V2>(bytes).map(Into::into),
        other => Err(format!("no records of schema {other}")),
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
#[allow(missing_docs)]
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
#[allow(missing_docs)]
pub enum FreezeScope {
    Type,
    Cluster,
    Maintenance,
}

/// Who made a change: an operator or the node itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum ChangedBy {
    Operator,
    Automatic,
}

/// What happened to a freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
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
#[allow(missing_docs)]
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

/// [`HomeRow`] read in place: the same fields in the same order (postcard
/// is positional, so the bytes are the same), its text borrowed from the
/// row instead of copied. A start reads a million of these and shares their
/// address and reason ([`read_home_row`]); the copies the owned record
/// makes were most of its allocations. `records::tests` holds the two
/// decodings equal for every reason.
#[derive(Debug, Deserialize)]
pub struct HomeRowRef<'a> {
    /// The home.
    #[serde(borrow)]
    pub home: HomeRef<'a>,
    /// Its allocation order.
    pub order: u64,
}

/// [`Home`] read in place.
#[derive(Debug, Deserialize)]
pub struct HomeRef<'a> {
    /// The region's address.
    pub region: &'a str,
    /// Why.
    #[serde(borrow)]
    pub reason: ReasonRef<'a>,
    /// When (milliseconds).
    pub at: u64,
}

/// [`Reason`] read in place: the same variants in the same order.
#[derive(Debug, Deserialize)]
#[allow(missing_docs)]
pub enum ReasonRef<'a> {
    Placement,
    Strategy { name: &'a str, version: &'a str },
    Refused(&'a str),
    Invalid(&'a str),
    Fault { kind: Fault, detail: &'a str },
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

#[cfg(test)]
mod tests;
