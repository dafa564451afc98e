//! # The on-disk schema
//!
//! What the store writes, as types that exist only to be stored: plain data
//! (no `Arc`, no interning), encoded as CBOR with tagged fields
//! (`minicbor`'s derive: every field and variant carries an index number,
//! never a name), and converted from and to the core's types by explicit
//! functions (`convert.rs`). The core's in-memory types are never
//! serialised to the store: renaming a field of `coordinator::state`
//! changes no stored byte, and a change to a record below fails
//! `host/tests/contract_store.rs` against `contracts/store-v3/`.
//!
//! - this file: the records of schema 3 ([`SCHEMA_V3`]), the one this build
//!   writes, and their encoding ([`encode`], [`decode`]);
//! - `v2.rs`: the records of schema 2, frozen (postcard, positional), read
//!   only to migrate a schema-2 store;
//! - `v1.rs`: the records of schema 1, frozen: the JSON shapes the core's
//!   types had when schema 1 was written, read only to migrate a schema-1
//!   store ([`decode_as`] reads any of the three).
//!
//! ## Adding a field (no new schema)
//!
//! A record is a CBOR array of its fields by index; a reader skips indices
//! it does not know and reads a missing `Option` as `None` (and a missing
//! field marked `#[cbor(default)]` as its `Default`). So adding a field is
//! one field with the next free index, `Option` or `#[cbor(default)]`, its
//! two conversions in `convert.rs`, and the fixture (`store-v3.N`, from a
//! turn in `added_turns` of `host/tests/contract_store.rs`; `Region`'s
//! `registered_at` was the first): no new record, table
//! or checkpoint section, and a store written before reads on. A new
//! variant takes the next free index of its enum. Never renumber or reuse an
//! index, and never change a field's type: that (or removing a field a
//! reader needs) is a new schema: bump `SCHEMA_VERSION`, freeze these
//! records as `v3.rs`, and migrate.

mod convert;
pub mod v1;
pub mod v2;

use std::collections::BTreeMap;

use minicbor::{Decode, Encode};
use serde::de::DeserializeOwned;

pub use self::convert::{HomeRead, TypeValues, checkpoint, home_row, read_home_row, turn, type_row};

/// Schema 1: JSON rows, the etcd log of JSON turns and a JSON checkpoint.
pub const SCHEMA_V1: u64 = 1;

/// Schema 2: postcard records (positional), with side tables and checkpoint
/// sections for what it gained after it was first written.
pub const SCHEMA_V2: u64 = 2;

/// Schema 3: the records of this module, CBOR with tagged fields.
pub const SCHEMA_V3: u64 = 3;

/// A record's bytes.
pub fn encode<T: Encode<()>>(record: &T) -> Vec<u8> {
    minicbor::to_vec(record).expect("store records encode into memory")
}

/// A record from its bytes, all of them (bytes left over are an error); a
/// record that borrows its text borrows it from `bytes`.
pub fn decode<'a, T: Decode<'a, ()>>(bytes: &'a [u8]) -> Result<T, String> {
    let mut decoder = minicbor::Decoder::new(bytes);
    let record = decoder.decode::<T>().map_err(|error| error.to_string())?;
    match bytes.len() - decoder.position() {
        0 => Ok(record),
        rest => Err(format!("{rest} bytes after the record")),
    }
}

/// A stored value of `schema` as the core's `T`: schema 1 decoded as the
/// JSON record `V1`, schema 2 as the postcard record `V2`, schema 3 as the
/// record `V3` of this module.
pub fn decode_as<V1, V2, V3, T>(schema: u64, bytes: &[u8]) -> Result<T, String>
where
    V1: DeserializeOwned + Into<T>,
    V2: DeserializeOwned + Into<T>,
    V3: for<'b> Decode<'b, ()> + Into<T>,
{
    match schema {
        SCHEMA_V1 => serde_json::from_slice::<V1>(bytes).map(Into::into).map_err(|e| e.to_string()),
        SCHEMA_V2 => v2::decode::<V2>(bytes).map(Into::into),
        SCHEMA_V3 => decode::<V3>(bytes).map(Into::into),
        other => Err(format!("no records of schema {other}")),
    }
}

/// A placement's stamp.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Stamp {
    /// The writer's timestamp (milliseconds).
    #[n(0)]
    pub timestamp: u64,
    /// The writer.
    #[n(1)]
    pub origin: String,
}

/// A region. In redb's `regions` table without its shards (rebuilt from
/// the homes); in the etcd log and checkpoint with them.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct Region {
    /// Its address.
    #[n(0)]
    pub address: String,
    /// Its incarnation.
    #[n(1)]
    pub incarnation: u64,
    /// Cluster roles.
    #[n(2)]
    pub roles: Vec<String>,
    /// Application version.
    #[n(3)]
    pub app_version: String,
    /// Join order.
    #[n(4)]
    pub join_order: u64,
    /// Labels.
    #[n(5)]
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    #[n(6)]
    pub proxy_only: bool,
    /// Drained by an operator.
    #[n(7)]
    pub draining: bool,
    /// Leaving gracefully.
    #[n(8)]
    pub leaving: bool,
    /// Its shards, in allocation order.
    #[n(9)]
    pub shards: Vec<String>,
    /// When this incarnation first registered (the driver's clock); absent
    /// in regions written before it was kept.
    #[n(10)]
    pub registered_at: Option<u64>,
    /// The capacity it declared (named quantities); absent in regions
    /// written before it was kept, and when it declared none.
    #[n(11)]
    #[cbor(default)]
    pub capacity: BTreeMap<String, f64>,
}

/// What kind of fault stopped a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
#[cbor(index_only)]
pub enum Fault {
    /// A trap.
    #[n(0)]
    Trap,
    /// Its deadline.
    #[n(1)]
    Deadline,
    /// Its memory cap.
    #[n(2)]
    Memory,
}

/// Why a shard got its home.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Reason {
    /// An operator's placement.
    #[n(0)]
    Placement,
    /// The active strategy's answer.
    #[n(1)]
    Strategy {
        /// Its name.
        #[n(0)]
        name: String,
        /// Its version.
        #[n(1)]
        version: String,
    },
    /// The fallback: the strategy answered an error of its own.
    #[n(2)]
    Refused(#[n(0)] String),
    /// The fallback: the strategy answered something invalid.
    #[n(3)]
    Invalid(#[n(0)] String),
    /// The fallback: the strategy faulted.
    #[n(4)]
    Fault {
        /// What kind of fault.
        #[n(0)]
        kind: Fault,
        /// The runtime's description.
        #[n(1)]
        detail: String,
    },
}

/// A shard's home.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Home {
    /// The region's address.
    #[n(0)]
    pub region: String,
    /// Why.
    #[n(1)]
    pub reason: Reason,
    /// When (milliseconds).
    #[n(2)]
    pub at: u64,
    /// The shard's epoch with this home.
    #[n(3)]
    pub epoch: u64,
}

/// A placement or a tombstone (`target` `None`).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Placement {
    /// The target region.
    #[n(0)]
    pub target: Option<String>,
    /// The last write's stamp.
    #[n(1)]
    pub stamp: Stamp,
    /// When the coordinator applied it (milliseconds).
    #[n(2)]
    pub written_at: u64,
}

/// A shard's smoothed load and last move: redb's `loads` table, the etcd
/// log's `LoadsSaved` and the checkpoint's loads.
#[derive(Debug, Clone, Copy, PartialEq, Encode, Decode)]
pub struct ShardLoad {
    /// The smoothed load (units per second).
    #[n(0)]
    pub load: f64,
    /// When the shard last moved (milliseconds of the driver's clock).
    #[n(1)]
    pub moved_at: Option<u64>,
}

/// One change of a type's durable state (the etcd log).
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
#[allow(missing_docs, reason = "The core's `coordinator::Change`, variant by variant")]
pub enum Change {
    #[n(0)]
    RegionRegistered(#[n(0)] Region),
    #[n(1)]
    RegionRemoved {
        #[n(0)]
        address: String,
    },
    #[n(2)]
    RegionDraining {
        #[n(0)]
        address: String,
        #[n(1)]
        draining: bool,
    },
    #[n(3)]
    RegionLeaving {
        #[n(0)]
        address: String,
    },
    #[n(4)]
    HomeSet {
        #[n(0)]
        shard: String,
        #[n(1)]
        home: Home,
    },
    #[n(5)]
    HomeRemoved {
        #[n(0)]
        shard: String,
    },
    #[n(6)]
    HandOffStarted {
        #[n(0)]
        shard: String,
        #[n(1)]
        from: String,
    },
    #[n(7)]
    HandOffEnded {
        #[n(0)]
        shard: String,
    },
    #[n(8)]
    PlacementWritten {
        #[n(0)]
        shard: String,
        #[n(1)]
        entry: Placement,
    },
    #[n(9)]
    PlacementPurged {
        #[n(0)]
        shard: String,
    },
    #[n(10)]
    RebalanceQueued {
        #[n(0)]
        shard: String,
    },
    #[n(11)]
    RebalanceUnqueued {
        #[n(0)]
        shard: String,
    },
    #[n(12)]
    SignalSet {
        #[n(0)]
        signal: Option<String>,
    },
    #[n(13)]
    LoadsSaved {
        #[n(0)]
        loads: Vec<(String, Option<ShardLoad>)>,
    },
    #[n(14)]
    FreezeSet {
        #[n(0)]
        freeze: Freeze,
    },
    #[n(15)]
    FreezeLifted {
        #[n(0)]
        scope: FreezeScope,
        #[n(1)]
        at: u64,
        #[n(2)]
        by: ChangedBy,
        #[n(3)]
        reason: String,
        #[n(4)]
        expired: bool,
    },
    #[n(16)]
    DrainStarted {
        #[n(0)]
        address: String,
        #[n(1)]
        at: u64,
    },
    #[n(17)]
    AttributesSet {
        #[n(0)]
        shard: String,
        #[n(1)]
        attributes: Attributes,
    },
}

/// A shard's attributes: redb's `attributes` table, the etcd log's
/// `AttributesSet` (empty: cleared) and the checkpoint's attributes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct Attributes {
    /// Key → value.
    #[n(0)]
    pub pairs: BTreeMap<String, String>,
}

/// Whose freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
#[cbor(index_only)]
#[allow(missing_docs, reason = "The core's `FreezeScope`")]
pub enum FreezeScope {
    #[n(0)]
    Type,
    #[n(1)]
    Cluster,
    #[n(2)]
    Maintenance,
}

/// Who made a change: an operator or the node itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
#[cbor(index_only)]
#[allow(missing_docs, reason = "The core's `ChangedBy`")]
pub enum ChangedBy {
    #[n(0)]
    Operator,
    #[n(1)]
    Automatic,
}

/// What happened to a freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
#[cbor(index_only)]
#[allow(missing_docs, reason = "The core's `FreezeAction`")]
pub enum FreezeAction {
    #[n(0)]
    Frozen,
    #[n(1)]
    Lifted,
    #[n(2)]
    Expired,
}

/// A freeze in force.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Freeze {
    /// Whose.
    #[n(0)]
    pub scope: FreezeScope,
    /// Why.
    #[n(1)]
    pub reason: String,
    /// When it began (the driver's clock).
    #[n(2)]
    pub since: u64,
    /// When it ends (the driver's clock).
    #[n(3)]
    pub until: Option<u64>,
    /// Operators' moves wait too.
    #[n(4)]
    pub strict: bool,
}

/// One entry of a freeze history.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct FreezeRecord {
    /// When (the driver's clock).
    #[n(0)]
    pub at: u64,
    /// What.
    #[n(1)]
    pub action: FreezeAction,
    /// Which freeze.
    #[n(2)]
    pub scope: FreezeScope,
    /// Who.
    #[n(3)]
    pub by: ChangedBy,
    /// Why.
    #[n(4)]
    pub reason: String,
    /// The freeze's end.
    #[n(5)]
    pub until: Option<u64>,
    /// Whether it was strict.
    #[n(6)]
    pub strict: bool,
}

/// A type's freezes and their history.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct Freezes {
    /// In force, by scope.
    #[n(0)]
    pub now: Vec<Freeze>,
    /// The history, oldest first.
    #[n(1)]
    pub history: Vec<FreezeRecord>,
}

/// A type's operations in progress (in its `types` row and its checkpoint
/// entry).
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct Operations {
    /// Its freezes.
    #[n(0)]
    pub freezes: Freezes,
    /// Draining region → when its drain began (the driver's clock).
    #[n(1)]
    pub drains: Vec<(String, u64)>,
}

/// A type's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Declaration {
    /// A built-in's name or a component's `sha256:…` digest.
    #[n(0)]
    pub strategy: String,
    /// Its configuration (JSON text, empty for none).
    #[n(1)]
    pub config: String,
}

/// Why a strategy became active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
#[cbor(index_only)]
#[allow(missing_docs, reason = "The core's `ActivationCause`")]
pub enum Cause {
    #[n(0)]
    Initial,
    #[n(1)]
    Operator,
    #[n(2)]
    Rollback,
    #[n(3)]
    AutoRollback,
}

/// One activation of a type's history.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Activation {
    /// A built-in's name or a component's digest.
    #[n(0)]
    pub strategy: String,
    /// The name the strategy describes itself with.
    #[n(1)]
    pub name: String,
    /// Its version.
    #[n(2)]
    pub version: String,
    /// Its configuration.
    #[n(3)]
    pub config: String,
    /// Why.
    #[n(4)]
    pub cause: Cause,
    /// When (milliseconds since the Unix epoch).
    #[n(5)]
    pub at_ms: u64,
}

/// An uploaded component's description.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Component {
    /// `sha256:…`.
    #[n(0)]
    pub digest: String,
    /// Its name.
    #[n(1)]
    pub name: String,
    /// Its version.
    #[n(2)]
    pub version: String,
    /// Its size in bytes.
    #[n(3)]
    pub size: u64,
    /// When it was uploaded (milliseconds since the Unix epoch).
    #[n(4)]
    pub uploaded_at_ms: u64,
}

/// redb's `types` row: everything a type keeps once, not per shard.
#[derive(Debug, Clone, PartialEq, Eq, Default, Encode, Decode)]
pub struct TypeRow {
    /// The declaration, if declared.
    #[n(0)]
    pub record: Option<Declaration>,
    /// The signal.
    #[n(1)]
    pub signal: Option<String>,
    /// The next join order.
    #[n(2)]
    pub next_join_order: u64,
    /// The highest epoch it gave a home.
    #[n(3)]
    pub epoch: u64,
    /// Its freezes and drains.
    #[n(4)]
    pub operations: Operations,
}

/// redb's `homes` row: the home and its allocation order.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct HomeRow {
    /// The home.
    #[n(0)]
    pub home: Home,
    /// Its allocation order (across the store).
    #[n(1)]
    pub order: u64,
}

/// [`HomeRow`] read in place: the same fields under the same indices, its
/// text borrowed from the row instead of copied. A start reads a million of
/// these and shares their address and reason ([`read_home_row`]); the
/// copies the owned record makes were most of its allocations.
/// `records::tests` holds the two decodings equal for every reason.
#[derive(Debug, Decode)]
pub struct HomeRowRef<'a> {
    /// The home.
    #[b(0)]
    pub home: HomeRef<'a>,
    /// Its allocation order.
    #[n(1)]
    pub order: u64,
}

/// [`Home`] read in place.
#[derive(Debug, Decode)]
pub struct HomeRef<'a> {
    /// The region's address.
    #[b(0)]
    pub region: &'a str,
    /// Why.
    #[b(1)]
    pub reason: ReasonRef<'a>,
    /// When (milliseconds).
    #[n(2)]
    pub at: u64,
    /// The shard's epoch.
    #[n(3)]
    pub epoch: u64,
}

/// [`Reason`] read in place: the same variants under the same indices.
#[derive(Debug, Decode)]
#[allow(missing_docs, reason = "As [`Reason`]")]
pub enum ReasonRef<'a> {
    #[n(0)]
    Placement,
    #[n(1)]
    Strategy {
        #[b(0)]
        name: &'a str,
        #[b(1)]
        version: &'a str,
    },
    #[n(2)]
    Refused(#[b(0)] &'a str),
    #[n(3)]
    Invalid(#[b(0)] &'a str),
    #[n(4)]
    Fault {
        #[n(0)]
        kind: Fault,
        #[b(1)]
        detail: &'a str,
    },
}

/// One driver turn (an etcd log entry).
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct Turn {
    /// Changes per type, in order.
    #[n(0)]
    pub changes: Vec<(String, Vec<Change>)>,
    /// Types declared.
    #[n(1)]
    pub types: Vec<(String, Declaration)>,
    /// Activations appended.
    #[n(2)]
    pub activations: Vec<(String, Activation)>,
    /// Component records stored.
    #[n(3)]
    pub components: Vec<Component>,
    /// Component records deleted, by digest.
    #[n(4)]
    pub removed_components: Vec<String>,
    /// Types deleted (applied first).
    #[n(5)]
    pub removed_types: Vec<String>,
}

/// A type's durable state (the etcd checkpoint).
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct Durable {
    /// Regions, with their shards.
    #[n(0)]
    pub regions: Vec<Region>,
    /// Shard → home.
    #[n(1)]
    pub homes: Vec<(String, Home)>,
    /// Hand-offs in flight: shard → owner.
    #[n(2)]
    pub handoffs: Vec<(String, String)>,
    /// Placements and tombstones.
    #[n(3)]
    pub placements: Vec<(String, Placement)>,
    /// The rebalance queue.
    #[n(4)]
    pub queued: Vec<String>,
    /// The next join order.
    #[n(5)]
    pub next_join_order: u64,
    /// The signal.
    #[n(6)]
    pub signal: Option<String>,
    /// The highest epoch the type gave a home.
    #[n(7)]
    pub epoch: u64,
    /// The shards' loads, by shard.
    #[n(8)]
    pub loads: Vec<(String, ShardLoad)>,
    /// Its freezes and drains.
    #[n(9)]
    pub operations: Operations,
    /// The shards' attributes, by shard (absent in checkpoints written
    /// before attributes were kept).
    #[n(10)]
    #[cbor(default)]
    pub attributes: Vec<(String, Attributes)>,
}

/// One type of a checkpoint.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct LoadedType {
    /// Its name.
    #[n(0)]
    pub name: String,
    /// Its declaration.
    #[n(1)]
    pub record: Option<Declaration>,
    /// Its coordinator's state.
    #[n(2)]
    pub durable: Durable,
    /// Its activations, oldest first.
    #[n(3)]
    pub activations: Vec<Activation>,
}

/// The whole state at a revision (the etcd checkpoint's data).
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub struct Checkpoint {
    /// The revision.
    #[n(0)]
    pub revision: u64,
    /// Every type.
    #[n(1)]
    pub types: Vec<LoadedType>,
    /// Every component record.
    #[n(2)]
    pub components: Vec<Component>,
}

#[cfg(test)]
mod tests;
