//! # Durable state
//!
//! Everything the node must not lose — per entity type the coordinator's
//! [`Durable`] state (regions, homes, hand-offs in flight, placements with
//! their tombstones, the rebalance queue, the signal), the type's declared
//! strategy, the activation history, and the uploaded strategy components —
//! behind the [`Store`] trait.
//!
//! - `redb.rs`: [`RedbStore`], the embedded default (one file in the data
//!   directory, ACID, crash-safe; a second process on the same directory is
//!   refused).
//! - `memory.rs`: [`MemoryStore`], the same contract in memory (tests, and
//!   throw-away nodes).
//! - `etcd/`: [`EtcdStore`], shared by several nodes on etcd: a fenced log
//!   of turns and a checkpoint, component blobs in chunks.
//! - `records/`: the on-disk schema: the records each backend writes
//!   (CBOR with tagged fields, schema 3), and the frozen records of schemas
//!   1 and 2 it migrates.
//! - `conformance.rs`: the suite every backend passes ([`conformance::suite`]).
//! - [`open`]: the one place a backend is chosen, from a [`StoreConfig`].
//!
//! ## Writes
//!
//! The driver commits once per turn: one [`Turn`] (every type's coordinator
//! changes, type declarations, activations, component records) in one
//! transaction, and only then feeds `Persisted` back, so what a region or
//! operator was told is durable first. Every commit names the [`Revision`]
//! it was based on; a store whose revision moved on (another writer, a
//! deposed leader in a clustered backend) refuses it with
//! [`StoreError::Fenced`] and nothing is written.
//!
//! ## Blobs
//!
//! Component bytes (up to 32 MiB) never travel in a turn: they are
//! content-addressed blobs, written with [`Store::put_blob`] before the turn
//! that records the component, read with [`Store::blob`], and deleted with
//! [`Store::delete_blob`] after the turn that dropped the record. A blob
//! without a record (a crash between the two) is harmless and collected at
//! the next start ([`Store::blob_digests`]). A networked backend can chunk
//! blobs under its request limit without touching the turn's atomicity.
//!
//! ## Adding a backend
//!
//! Implement [`Store`], add a [`StoreConfig`] variant and its arm in
//! [`open`], and call [`conformance::suite`] from its tests.

pub mod conformance;
pub mod etcd;
pub mod memory;
pub mod records;
pub mod redb;
pub mod redb_file;
mod redb_layout;
mod redb_migrate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use self::etcd::{EtcdConfig, EtcdStore};
pub use self::memory::MemoryStore;
pub use self::redb::RedbStore;
use crate::coordinator::{Change, Durable, Home};
use crate::strategy::{ActivationCause, StrategySource};

/// The schema this build writes and reads: 3, the tagged CBOR records of
/// [`records`]. A store of schema 1 (JSON) or 2 (postcard) is migrated when
/// it opens, unless its backend's configuration says not to
/// (`--no-migrate`), and a copy of the older data is kept
/// (docs/operations.md, "Store format").
pub const SCHEMA_VERSION: u64 = records::SCHEMA_V3;

/// How many activations per type are kept (the strategy layer's limit).
pub use crate::strategy::ACTIVATION_HISTORY;

/// A store's revision: increases by one with every commit.
pub type Revision = u64;

/// A type as declared: its strategy and that strategy's configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeRecord {
    /// The active strategy: a built-in or an uploaded component's digest.
    pub strategy: StrategySource,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// One activation, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActivationRecord {
    /// A built-in or an uploaded component's digest.
    pub strategy: StrategySource,
    /// The name the strategy describes itself with.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
    /// Why it became active.
    pub cause: ActivationCause,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// An uploaded component's description.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComponentRecord {
    /// `sha256:…`.
    pub digest: String,
    /// The name it describes itself with.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was uploaded, in milliseconds since the Unix epoch (0 for
    /// records stored before this was kept: the node counts them from its
    /// start). Unused components older than the retention are collected.
    #[serde(default)]
    pub uploaded_at_ms: u64,
}

/// What one driver turn writes, atomically.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Turn {
    /// Coordinator changes per type, in order.
    pub changes: BTreeMap<String, Vec<Change>>,
    /// Types declared or re-declared (their strategy changed).
    pub types: BTreeMap<String, TypeRecord>,
    /// Activations to append to each type's history.
    pub activations: Vec<(String, ActivationRecord)>,
    /// Component records to store (their blobs are written before the turn).
    pub components: Vec<ComponentRecord>,
    /// Component records to delete, by digest (their blobs are deleted after).
    pub removed_components: Vec<String>,
    /// Types deleted with all their state; applied before everything else in
    /// the turn, so a type can be removed and declared anew in one turn.
    pub removed_types: Vec<String>,
}

impl Turn {
    /// True when the turn writes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.values().all(Vec::is_empty)
            && self.types.is_empty()
            && self.activations.is_empty()
            && self.components.is_empty()
            && self.removed_components.is_empty()
            && self.removed_types.is_empty()
    }
}

/// One type as loaded.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoadedType {
    /// Its declaration, if it was declared.
    pub record: Option<TypeRecord>,
    /// The coordinator's state.
    pub durable: Durable,
    /// Its activations, oldest first.
    pub activations: Vec<ActivationRecord>,
}

/// Everything loaded at start-up (component bytes are read on demand).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Loaded {
    /// The revision loaded.
    pub revision: Revision,
    /// Every type.
    pub types: BTreeMap<String, LoadedType>,
    /// Every uploaded component, by digest.
    pub components: BTreeMap<String, ComponentRecord>,
}

/// Why the store failed. Backend-neutral: a backend's own error is the
/// boxed source of [`StoreError::Backend`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data was written by a newer shardalloc.
    #[error(
        "the store holds schema version {found}; this shardalloc reads up to {supported}: upgrade shardalloc or use another store"
    )]
    NewerSchema {
        /// The stored schema version.
        found: u64,
        /// The newest this build reads.
        supported: u64,
    },
    /// The data was written by an older shardalloc and migrating it on open
    /// was turned off (`--no-migrate`). Nothing was written.
    #[error(
        "the store {what} holds schema version {found}; this shardalloc writes schema version {current}: \
         start it without --no-migrate to migrate the store to schema {current} (a copy of the schema-{found} data \
         is kept), or use a shardalloc that writes schema {found}"
    )]
    NotMigrated {
        /// Which store.
        what: String,
        /// The stored schema version.
        found: u64,
        /// The one this build writes.
        current: u64,
    },
    /// The write was based on a revision that is no longer current.
    #[error("write fenced: it was based on revision {based_on}, the store is at {current}")]
    Fenced {
        /// The revision the writer saw.
        based_on: Revision,
        /// The store's revision.
        current: Revision,
    },
    /// This node lost its leadership: its fencing key is gone or belongs to
    /// a newer leader. Nothing was written.
    #[error("write refused: this node is no longer the leader (its election key {key} is gone or a newer leader's)")]
    Deposed {
        /// The election key.
        key: String,
    },
    /// Another process has the store open.
    #[error("the store {what} is in use by another process")]
    InUse {
        /// Which store (a file, an endpoint).
        what: String,
    },
    /// The store file is damaged; nothing was opened or written.
    #[error(
        "the store file {path} is damaged ({problem}); nothing was written to it. Restore it from a backup; \
         `shardalloc store check --data DIR` reports what is wrong"
    )]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The store's revision is lower than one already seen: it was set
    /// back (a partial restore, tampering). Serving it would hide
    /// acknowledged writes and the next commit would overwrite newer ones.
    #[error(
        "the store {what} is at revision {found}, but revision {seen} was already {how}: it was set back (a partial \
         restore or tampering); refusing to serve an older state. Restore the whole store from one backup"
    )]
    WentBack {
        /// Which store.
        what: String,
        /// The revision it says now.
        found: Revision,
        /// The higher one seen.
        seen: Revision,
        /// Where that was seen ("seen by this node", "written to its log").
        how: &'static str,
    },
    /// A record could not be decoded.
    #[error("corrupt record in {what}: {detail}")]
    Corrupt {
        /// Where (a table, a key).
        what: String,
        /// What failed.
        detail: String,
    },
    /// A local file or directory could not be used.
    #[error("cannot use {path}: {error}")]
    Io {
        /// The file or directory.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The backend failed.
    #[error("store ({backend}): {source}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// Its error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Durable storage for the node. See the module documentation. Shared
/// between the driver (which commits) and the REST layer (which writes and
/// reads blobs off the driver thread).
pub trait Store: Send + Sync {
    /// Loads everything but the blobs.
    fn load(&self) -> Result<Loaded, StoreError>;

    /// Loads one type (`None` when the store has no such type): what the
    /// admin API shows of it is read here, off the driver thread.
    fn load_type(&self, entity_type: &str) -> Result<Option<LoadedType>, StoreError>;

    /// A page of a type's live placements (shard, target), in shard order,
    /// the first `limit` after shard `after` (tombstones skipped); `None`
    /// when the store has no such type.
    fn placements(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError>;

    /// A page of a type's homes (shard, home), in shard order, the first
    /// `limit` after shard `after`; `None` when the store has no such type.
    /// Only the page is read, never the whole type: `GET
    /// /v1/cluster/shards/{type}` serves its pages from here.
    fn homes(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, Home)>>, StoreError>;

    /// Writes a turn atomically, if the store is still at `based_on`;
    /// returns the new revision.
    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError>;

    /// Stores a component's bytes under its digest (idempotent).
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// A component's bytes.
    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Deletes a component's bytes (absent is fine).
    fn delete_blob(&self, digest: &str) -> Result<(), StoreError>;

    /// Every stored blob's digest.
    fn blob_digests(&self) -> Result<Vec<String>, StoreError>;

    /// The schema version the store holds.
    fn schema_version(&self) -> Result<u64, StoreError>;

    /// What and where this store is, for logs (`redb file /…`).
    fn describe(&self) -> String;
}

/// Which backend holds the node's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// The embedded store, in a data directory.
    Embedded {
        /// The data directory.
        dir: PathBuf,
        /// A store of an older schema is migrated when it opens; without,
        /// it is refused with [`StoreError::NotMigrated`] (`--no-migrate`).
        migrate: bool,
    },
    /// In memory: lost when the process ends.
    Memory,
    /// etcd, shared by several nodes with one leader.
    Etcd(EtcdConfig),
}

/// Opens the configured backend: the one place a backend is chosen.
pub fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match config {
        StoreConfig::Embedded { dir, migrate } => Arc::new(RedbStore::open_with(dir, *migrate)?),
        StoreConfig::Memory => Arc::new(MemoryStore::new()),
        StoreConfig::Etcd(config) => Arc::new(EtcdStore::open(config)?),
    })
}

#[cfg(test)]
mod tests;
