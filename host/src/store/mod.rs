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
//!
//! ## Writes
//!
//! The driver commits once per turn: one [`Turn`] (every type's coordinator
//! changes, activations, components) in one transaction, and only then feeds
//! `Persisted` back, so what a region or operator was told is on disk first.
//! Every commit names the [`Revision`] it was based on; a store whose revision
//! moved on (another writer, a deposed leader in a clustered backend) refuses
//! it with [`StoreError::Fenced`] and nothing is written.

pub mod redb;

use std::collections::BTreeMap;

pub use self::redb::RedbStore;
use crate::coordinator::{Change, Durable};

/// The schema this build writes and reads.
pub const SCHEMA_VERSION: u64 = 1;

/// How many activations per type are kept.
pub const ACTIVATION_HISTORY: usize = 100;

/// A store's revision: increases by one with every commit.
pub type Revision = u64;

/// A type as declared: its strategy and that strategy's configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeRecord {
    /// The active strategy: a built-in's name or `sha256:…`.
    pub strategy: String,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// One activation, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActivationRecord {
    /// A built-in's name or `sha256:…`.
    pub strategy: String,
    /// The name the strategy describes itself with.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
    /// `initial`, `operator`, `rollback` or `auto-rollback`.
    pub cause: String,
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
}

/// What one driver turn writes, atomically.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    /// Coordinator changes per type, in order.
    pub changes: BTreeMap<String, Vec<Change>>,
    /// Types declared or re-declared (their strategy changed).
    pub types: BTreeMap<String, TypeRecord>,
    /// Activations to append to each type's history.
    pub activations: Vec<(String, ActivationRecord)>,
    /// Components to store.
    pub components: Vec<(ComponentRecord, Vec<u8>)>,
    /// Components to delete, by digest.
    pub removed_components: Vec<String>,
}

impl Turn {
    /// True when the turn writes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.values().all(Vec::is_empty)
            && self.types.is_empty()
            && self.activations.is_empty()
            && self.components.is_empty()
            && self.removed_components.is_empty()
    }
}

/// One type as loaded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedType {
    /// Its declaration, if it was declared.
    pub record: Option<TypeRecord>,
    /// The coordinator's state.
    pub durable: Durable,
    /// Its activations, oldest first.
    pub activations: Vec<ActivationRecord>,
}

/// Everything loaded at start-up (component bytes are read on demand).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    /// The revision loaded.
    pub revision: Revision,
    /// Every type.
    pub types: BTreeMap<String, LoadedType>,
    /// Every uploaded component, by digest.
    pub components: BTreeMap<String, ComponentRecord>,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data was written by a newer shardalloc.
    #[error(
        "the data directory holds schema version {found}; this shardalloc reads up to {supported}: upgrade shardalloc or use another --data directory"
    )]
    NewerSchema {
        /// The stored schema version.
        found: u64,
        /// The newest this build reads.
        supported: u64,
    },
    /// The write was based on a revision that is no longer current.
    #[error("write fenced: it was based on revision {based_on}, the store is at {current}")]
    Fenced {
        /// The revision the writer saw.
        based_on: Revision,
        /// The store's revision.
        current: Revision,
    },
    /// Another process has the database open.
    #[error("the data file {path} is in use by another process")]
    InUse {
        /// The file.
        path: String,
    },
    /// A record could not be decoded.
    #[error("corrupt record in table {table}: {detail}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What failed.
        detail: String,
    },
    /// The database failed.
    #[error("store: {0}")]
    Database(#[from] ::redb::Error),
    /// The data directory could not be created.
    #[error("cannot create the data directory {path}: {error}")]
    Directory {
        /// The directory.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// Durable storage for the node. See the module documentation.
pub trait Store: Send {
    /// Loads everything.
    fn load(&self) -> Result<Loaded, StoreError>;

    /// Writes a turn atomically, if the store is still at `based_on`;
    /// returns the new revision.
    fn commit(&mut self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError>;

    /// An uploaded component's bytes.
    fn component(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

#[cfg(test)]
mod tests;
