//! [`RedbStore`]: the embedded store, one redb file in the data directory.
//!
//! Tables (keys are `(type, id)` tuples; values are the postcard records
//! of [`records`](super::records), schema 2, unless noted; schema 1 wrote
//! the core's types as JSON, and `redb_migrate.rs` rewrites those):
//!
//! | table          | key                 | value                           |
//! |----------------|---------------------|---------------------------------|
//! | `meta`         | name                | u64 (`schema`, `revision`, `home-order`) |
//! | `types`        | type                | `records::TypeRow`: declaration + signal + next join order |
//! | `regions`      | (type, address)     | `records::Region` without its shard list |
//! | `homes`        | (type, shard)       | `records::HomeRow`: the home and its allocation order |
//! | `handoffs`     | (type, shard)       | owner address (text)            |
//! | `placements`   | (type, shard)       | `records::Placement` (tombstones too) |
//! | `queued`       | (type, shard)       | nothing                         |
//! | `loads`        | (type, shard)       | `records::ShardLoad` (added within schema 2: an older file gets the table empty when it opens) |
//! | `operations`   | type                | `records::Operations`: the freezes in force with their history, and when drains began (added within schema 2, as `loads`) |
//! | `home-epochs`  | (type, shard)       | the epoch of the shard's home (added within schema 2, as `loads`: an older home has none, epoch 0) |
//! | `epochs`       | type                | the highest epoch the type has given (as `home-epochs`) |
//! | `activations`  | (type, number)      | `records::Activation`           |
//! | `components`   | digest              | component bytes (the blobs)     |
//! | `component-info` | digest            | `records::Component`            |
//!
//! A region's shard list is not stored: it is rebuilt from `homes` in
//! allocation order, exactly as [`Durable::apply`] builds it.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::records::{self, v1};
use super::redb_file::{self, FileState};
use super::{
    ACTIVATION_HISTORY, ActivationRecord, ComponentRecord, Loaded, LoadedType, Revision, SCHEMA_VERSION, Store,
    StoreError, Turn, TypeRecord,
};
use crate::coordinator::{Change, Durable, Home, Interned, Operations, PlacementEntry, RegionRecord};
use crate::strategy::source::digest_of;

pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const TYPES: TableDefinition<&str, &[u8]> = TableDefinition::new("types");
pub(super) const REGIONS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("regions");
pub(super) const HOMES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("homes");
const HANDOFFS: TableDefinition<(&str, &str), &str> = TableDefinition::new("handoffs");
pub(super) const PLACEMENTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("placements");
const QUEUED: TableDefinition<(&str, &str), ()> = TableDefinition::new("queued");
const LOADS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("loads");
const OPERATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("operations");
const HOME_EPOCHS: TableDefinition<(&str, &str), u64> = TableDefinition::new("home-epochs");
const EPOCHS: TableDefinition<&str, u64> = TableDefinition::new("epochs");
pub(super) const ACTIVATIONS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("activations");
const COMPONENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("components");
pub(super) const COMPONENT_INFO: TableDefinition<&str, &[u8]> = TableDefinition::new("component-info");

/// The file name inside the data directory.
pub const FILE_NAME: &str = "shardalloc.redb";

/// The copy of a schema-1 store, in the data directory, that migrating it
/// keeps (delete it to drop it: docs/operations.md).
pub const V1_COPY: &str = "shardalloc.v1.redb";

/// What the `types` table keeps per type, as the core's values.
#[derive(Debug, Clone, Default)]
struct TypeRow {
    record: Option<TypeRecord>,
    signal: Option<String>,
    next_join_order: u64,
}

/// A row of `table` stored with `schema`: schema 1 read as the JSON record
/// `V1`, schema 2 as the postcard record `V2`.
pub(super) fn row<V1, V2, T>(schema: u64, table: &'static str, bytes: &[u8]) -> Result<T, StoreError>
where
    V1: serde::de::DeserializeOwned + Into<T>,
    V2: serde::de::DeserializeOwned + Into<T>,
{
    records::decode_as::<V1, V2, T>(schema, bytes)
        .map_err(|detail| StoreError::Corrupt { what: format!("table {table}"), detail })
}

fn type_row(schema: u64, bytes: &[u8]) -> Result<TypeRow, StoreError> {
    let (record, signal, next_join_order) = row::<v1::TypeRow, records::TypeRow, _>(schema, "types", bytes)?;
    Ok(TypeRow { record, signal, next_join_order })
}

fn encode_type_row(row: &TypeRow) -> Vec<u8> {
    records::encode(&records::type_row(row.record.as_ref(), row.signal.as_deref(), row.next_join_order))
}

fn home_row(schema: u64, bytes: &[u8]) -> Result<(Home, u64), StoreError> {
    row::<v1::HomeRow, records::HomeRow, _>(schema, "homes", bytes)
}

fn placement(schema: u64, bytes: &[u8]) -> Result<PlacementEntry, StoreError> {
    row::<v1::PlacementEntry, records::Placement, _>(schema, "placements", bytes)
}

fn db<E: Into<redb::Error>>(error: E) -> StoreError {
    StoreError::Backend { backend: "redb", source: Box::new(error.into()) }
}

/// The embedded store. See the module documentation.
pub struct RedbStore {
    db: Database,
    path: PathBuf,
    /// What opening read (every row, to check the file before writing to
    /// it), kept for the first [`Store::load`] so a start reads the file
    /// once; dropped by the first commit.
    preloaded: std::sync::Mutex<Option<Loaded>>,
}

impl RedbStore {
    /// Opens (creating when absent) the store in `dir`.
    ///
    /// The file is checked first ([`redb_file`](super::redb_file)): a
    /// damaged, truncated, emptied, missing or foreign file is refused with
    /// [`StoreError::Damaged`], never opened, repaired or started afresh;
    /// then it is read without writing, and only then opened for writing (a
    /// file not closed cleanly, after a crash, is recovered there). New
    /// directories and files are created owner-only.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, true)
    }

    /// Opens the store in `dir`, as [`RedbStore::open`]; a store of an
    /// older schema is migrated when `migrate` (a copy of the file kept as
    /// [`V1_COPY`] first), else refused with [`StoreError::NotMigrated`]
    /// before anything is written.
    pub fn open_with(dir: &Path, migrate: bool) -> Result<Self, StoreError> {
        let io = |error| StoreError::Io { path: dir.display().to_string(), error };
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        }
        let path = dir.join(FILE_NAME);
        let marker = dir.join(redb_file::MARKER);
        let damaged = |problem: String| StoreError::Damaged { path: path.display().to_string(), problem };
        let started = std::time::Instant::now();
        let state = redb_file::check(&path, &marker).map_err(damaged)?;
        let mut preloaded = None;
        match state {
            FileState::New => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(&path)
                    .map_err(io)?;
                owner_only(&path, 0o600).map_err(io)?;
            }
            // A start reads the rows, not the component bytes: those are
            // hashed when read (`blob`), so a start takes as long with 100
            // stored components as with none.
            FileState::Intact => {
                let (checked, loaded) = read_back(&path, false)?;
                // Refused before redb opens the file for writing, which
                // writes to it even when nothing is committed.
                if let Checked::Sound(Contents { schema, .. }) = checked
                    && schema < SCHEMA_VERSION
                    && !migrate
                {
                    let what = path.display().to_string();
                    return Err(StoreError::NotMigrated { what, found: schema, current: SCHEMA_VERSION });
                }
                preloaded = loaded;
            }
        }
        let opened =
            redb_file::quietly(|| waiting_out_locks(|| Database::builder().set_cache_size(CACHE_BYTES).create(&path)))
                .map_err(damaged)?;
        let db = opened.map_err(|error| match error {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse { what: path.display().to_string() },
            other => damaged(other.to_string()),
        })?;
        let mut store = RedbStore { db, path: path.clone(), preloaded: std::sync::Mutex::new(None) };
        let migrated = redb_file::quietly(|| store.init(migrate)).map_err(damaged)??;
        if migrated {
            // The migration rewrote every row in one transaction, which
            // leaves the file about twice its size: give the space back.
            match redb_file::quietly(|| store.db.compact()).map_err(damaged)? {
                Ok(_) => tracing::info!(path = %path.display(), "the migrated store is compacted"),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "the migrated store could not be compacted")
                }
            }
        }
        // A new file, or one recovered from a crash, is read once here too.
        let loaded = match preloaded {
            Some(loaded) => loaded,
            None => redb_file::quietly(|| store.read_all()).map_err(damaged)??,
        };
        *store.preloaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(loaded);
        tracing::info!(path = %path.display(), ms = started.elapsed().as_millis() as u64, "the store is checked, read and open");
        if !marker.exists() {
            std::fs::write(&marker, b"a shardalloc data directory: its store is shardalloc.redb\n").map_err(io)?;
            owner_only(&marker, 0o600).map_err(io)?;
        }
        Ok(store)
    }

    /// Reads everything, as [`Store::load`] answers it.
    fn read_all(&self) -> Result<Loaded, StoreError> {
        read_loaded(&self.db.begin_read().map_err(db)?)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates or checks the schema, migrating an older one when `migrate`;
    /// true when it migrated.
    fn init(&self, migrate: bool) -> Result<bool, StoreError> {
        let mut migrated = false;
        match self.stored_schema()? {
            Some(found) if found > SCHEMA_VERSION => {
                return Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION });
            }
            Some(found) if found < SCHEMA_VERSION && !migrate => {
                let what = self.path.display().to_string();
                return Err(StoreError::NotMigrated { what, found, current: SCHEMA_VERSION });
            }
            Some(found) if found < SCHEMA_VERSION => {
                super::redb_migrate::migrate(&self.db, &self.path, found)?;
                migrated = true;
            }
            _ => {}
        }
        let txn = self.db.begin_write().map_err(db)?;
        {
            let mut meta = txn.open_table(META).map_err(db)?;
            let schema = meta.get("schema").map_err(db)?.map(|v| v.value());
            match schema {
                Some(found) if found > SCHEMA_VERSION => {
                    return Err(StoreError::NewerSchema { found, supported: SCHEMA_VERSION });
                }
                Some(_) => {}
                None => {
                    meta.insert("schema", SCHEMA_VERSION).map_err(db)?;
                    meta.insert("revision", 0).map_err(db)?;
                }
            }
            // Every table exists, so readers never meet a missing one.
            txn.open_table(TYPES).map_err(db)?;
            txn.open_table(REGIONS).map_err(db)?;
            txn.open_table(HOMES).map_err(db)?;
            txn.open_table(HANDOFFS).map_err(db)?;
            txn.open_table(PLACEMENTS).map_err(db)?;
            txn.open_table(QUEUED).map_err(db)?;
            txn.open_table(LOADS).map_err(db)?;
            txn.open_table(OPERATIONS).map_err(db)?;
            txn.open_table(HOME_EPOCHS).map_err(db)?;
            txn.open_table(EPOCHS).map_err(db)?;
            txn.open_table(ACTIVATIONS).map_err(db)?;
            txn.open_table(COMPONENTS).map_err(db)?;
            txn.open_table(COMPONENT_INFO).map_err(db)?;
        }
        txn.commit().map_err(db)?;
        Ok(migrated)
    }

    /// The schema in the `meta` table; `None` for a new file.
    fn stored_schema(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(db(error)),
        };
        Ok(meta.get("schema").map_err(db)?.map(|v| v.value()))
    }

    /// The current revision.
    pub fn revision(&self) -> Result<Revision, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let meta = txn.open_table(META).map_err(db)?;
        Ok(meta.get("revision").map_err(db)?.map_or(0, |v| v.value()))
    }
}

/// Deletes the copy of the schema-1 file a migration kept in `dir`
/// ([`V1_COPY`], `shardalloc store drop-v1`); answers its size, `None`
/// when there is none. Safe while a node runs (it never reads the copy)
/// and after a migration that did not finish (the store is then still the
/// whole schema-1 file, and the next migration copies it again).
pub fn drop_v1_copy(dir: &Path) -> Result<Option<u64>, StoreError> {
    let copy = dir.join(V1_COPY);
    let io = |error| StoreError::Io { path: copy.display().to_string(), error };
    let bytes = match std::fs::metadata(&copy) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io(error)),
    };
    std::fs::remove_file(&copy).map_err(io)?;
    Ok(Some(bytes))
}

/// Sets a file's or directory's mode.
fn owner_only(path: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// What [`RedbStore::check`] found in a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// No store yet: the node starts one there.
    Empty,
    /// Read in full: every row decodes, every component matches its digest.
    Sound(Contents),
    /// Not closed cleanly (the node was killed or the machine stopped): the
    /// node recovers it when it next starts, which writes, so it cannot be
    /// read in full before.
    NeedsRecovery,
}

/// What a sound store holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contents {
    /// Its schema version.
    pub schema: u64,
    /// The revision of its last commit.
    pub revision: Revision,
    /// Entity types.
    pub types: usize,
    /// Registered regions, over all types.
    pub regions: usize,
    /// Homed shards, over all types.
    pub homes: usize,
    /// Placements (tombstones too), over all types.
    pub placements: usize,
    /// Uploaded components.
    pub components: usize,
    /// The file's size in bytes.
    pub file_bytes: u64,
    /// The copy of the schema-1 file a migration kept ([`V1_COPY`]) is
    /// still in the directory.
    pub v1_copy: bool,
}

impl RedbStore {
    /// Checks the store in `dir` without writing a byte: the file checks
    /// ([`redb_file`](super::redb_file)), then a read of every row and
    /// every component. A damaged store is [`StoreError::Damaged`]; one a
    /// running node holds is [`StoreError::InUse`].
    pub fn check(dir: &Path) -> Result<Checked, StoreError> {
        let path = dir.join(FILE_NAME);
        let damaged = |problem: String| StoreError::Damaged { path: path.display().to_string(), problem };
        match redb_file::check(&path, &dir.join(redb_file::MARKER)).map_err(damaged)? {
            FileState::New => Ok(Checked::Empty),
            FileState::Intact => {
                let mut checked = read_back(&path, true)?.0;
                if let Checked::Sound(contents) = &mut checked {
                    integrity(&path)?;
                    contents.v1_copy = dir.join(V1_COPY).exists();
                }
                Ok(checked)
            }
        }
    }
}

/// Runs redb's own integrity check (`Database::check_integrity`: every
/// tree walked, the allocator's state rebuilt from the pages and compared
/// with the stored one) on a copy of `path` in the temporary directory,
/// removed after: the check repairs what it finds in place, and the store
/// itself is never written. A file whose allocator state is damaged reads
/// fine and makes redb panic later (at the next shutdown); this finds it.
fn integrity(path: &Path) -> Result<(), StoreError> {
    struct Copy(PathBuf);
    impl Drop for Copy {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let damaged = |problem: String| StoreError::Damaged { path: path.display().to_string(), problem };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let copy = Copy(std::env::temp_dir().join(format!("shardalloc-check-{}-{nanos}.redb", std::process::id())));
    std::fs::copy(path, &copy.0).map_err(|error| StoreError::Io { path: copy.0.display().to_string(), error })?;
    let checked = redb_file::quietly(|| -> Result<bool, redb::DatabaseError> {
        let mut database = Database::builder().set_cache_size(CACHE_BYTES).create(&copy.0)?;
        database.check_integrity()
    })
    .map_err(|panic| damaged(format!("redb's integrity check stopped on damage: {panic}")))?;
    match checked {
        // `false`: redb rebuilt its allocator's state and it differed, which
        // it also reports for a sound file with free pages to reclaim (a
        // clean file after deletes); damage shows as an error or a panic.
        Ok(_) => Ok(()),
        Err(error) => Err(damaged(format!("redb's integrity check failed: {error}"))),
    }
}

/// How long opening the file waits out a lock on it before answering that
/// the store is in use. redb locks the file (`flock`) for as long as a
/// descriptor of it is open, and a child process this one starts (the
/// etcd a test starts, or any `Command`) holds a copy of every descriptor
/// from its fork until its `exec`: a handle this process closed a moment
/// ago can still hold the lock for that long. Another node on the same
/// directory holds it for good, and is still refused after this wait.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs `open` until it stops answering that the file is locked, or
/// [`LOCK_WAIT`] has passed.
pub(super) fn waiting_out_locks<T>(
    mut open: impl FnMut() -> Result<T, redb::DatabaseError>,
) -> Result<T, redb::DatabaseError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match open() {
            Err(redb::DatabaseError::DatabaseAlreadyOpen) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// redb's page cache, for reads and writes together. The node reads every
/// row once at start (then serves from the coordinators' memory) and writes
/// small turns, so a large cache only holds pages it will not read again;
/// redb's own default (1 GiB) made a node with 1,000,000 shards hundreds of
/// MiB larger.
pub const CACHE_BYTES: usize = 16 << 20;

/// Opens an intact file read-only (no byte written) and reads all of it:
/// what it holds, and (unless it needs recovery) its contents; with
/// `hash_components`, every component's bytes against its digest too.
fn read_back(path: &Path, hash_components: bool) -> Result<(Checked, Option<Loaded>), StoreError> {
    let damaged = |problem: String| StoreError::Damaged { path: path.display().to_string(), problem };
    let read = redb_file::quietly(|| {
        let database = match waiting_out_locks(|| Database::builder().set_cache_size(CACHE_BYTES).open_read_only(path))
        {
            Ok(database) => database,
            Err(redb::DatabaseError::RepairAborted) => return Ok((Checked::NeedsRecovery, None)),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse { what: path.display().to_string() });
            }
            Err(other) => return Err(damaged(other.to_string())),
        };
        let txn = database.begin_read().map_err(db)?;
        let (loaded, contents) = read_contents(&txn, hash_components)?;
        Ok((Checked::Sound(contents), Some(loaded)))
    })
    .map_err(damaged)?;
    let (mut checked, loaded) = read.map_err(|error| match error {
        StoreError::Backend { source, .. } => damaged(source.to_string()),
        StoreError::Corrupt { what, detail } => damaged(format!("{what}: {detail}")),
        other => other,
    })?;
    if let Checked::Sound(contents) = &mut checked {
        contents.file_bytes =
            std::fs::metadata(path).map_err(|error| StoreError::Io { path: path.display().to_string(), error })?.len();
    }
    Ok((checked, loaded))
}

/// Every row of a store, decoded; with `hash_components`, every component
/// hashed against its digest.
fn read_contents(txn: &redb::ReadTransaction, hash_components: bool) -> Result<(Loaded, Contents), StoreError> {
    let loaded = read_loaded(txn)?;
    let meta = txn.open_table(META).map_err(db)?;
    let schema = meta.get("schema").map_err(db)?.map_or(0, |v| v.value());
    let mut contents = Contents {
        schema,
        revision: loaded.revision,
        types: loaded.types.len(),
        components: loaded.components.len(),
        ..Contents::default()
    };
    for one in loaded.types.values() {
        contents.regions += one.durable.regions.len();
        contents.homes += one.durable.homes.len();
        contents.placements += one.durable.placements.len();
    }
    let blobs = txn.open_table(COMPONENTS).map_err(db)?;
    for digest in loaded.components.keys().filter(|_| hash_components) {
        let what = || format!("component {digest}");
        let Some(bytes) = blobs.get(digest.as_str()).map_err(db)? else {
            return Err(StoreError::Corrupt { what: what(), detail: "its bytes are missing".into() });
        };
        let found = digest_of(bytes.value());
        if found != *digest {
            return Err(StoreError::Corrupt { what: what(), detail: format!("its bytes hash to {found}") });
        }
    }
    Ok((loaded, contents))
}

/// Everything [`Store::load`] answers, read in one transaction; a store of
/// a newer schema is refused first.
fn read_loaded(txn: &redb::ReadTransaction) -> Result<Loaded, StoreError> {
    let meta = txn.open_table(META).map_err(db)?;
    let schema = meta.get("schema").map_err(db)?.map_or(0, |v| v.value());
    if schema > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema { found: schema, supported: SCHEMA_VERSION });
    }
    let revision = meta.get("revision").map_err(db)?.map_or(0, |v| v.value());
    let types = read_types(txn, None, schema)?;
    let mut components = BTreeMap::new();
    for entry in txn.open_table(COMPONENT_INFO).map_err(db)?.iter().map_err(db)? {
        let (key, value) = entry.map_err(db)?;
        let record: ComponentRecord =
            row::<v1::Component, records::Component, _>(schema, "component-info", value.value())?;
        components.insert(key.value().to_owned(), record);
    }
    Ok(Loaded { revision, types, components })
}

/// The rows of a table keyed by (type, …): all of them, or one type's.
fn rows<V: redb::Value + 'static>(
    table: &redb::ReadOnlyTable<(&'static str, &'static str), V>,
    only: Option<&str>,
) -> Result<redb::Range<'static, (&'static str, &'static str), V>, StoreError> {
    match only {
        None => table.range::<(&str, &str)>(..).map_err(db),
        Some(t) => {
            let next = format!("{t}\0");
            table.range((t, "")..(next.as_str(), "")).map_err(db)
        }
    }
}

/// The rows of a table keyed by type name: every row, or the one of type
/// `only`.
fn named_rows<V: redb::Value + 'static>(
    table: &redb::ReadOnlyTable<&'static str, V>,
    only: Option<&str>,
) -> Result<redb::Range<'static, &'static str, V>, StoreError> {
    match only {
        None => table.range::<&str>(..).map_err(db),
        Some(t) => table.range(t..=t).map_err(db),
    }
}

/// One type's homes as a start reads them, row by row in shard order, into
/// the map and the regions' shard lists (in allocation order) that
/// [`Durable::apply`] would have built. The map is built in one go from
/// the sorted rows, which fills every B-tree node (inserting the homes one
/// by one in allocation order left the nodes about two thirds full); each
/// row is read in place, and only its shard id is copied.
struct TypeHomes {
    /// The type's regions: each address (shared) and its index.
    regions: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    interned: Interned,
    /// The homes, in shard order.
    kept: Vec<(String, Home)>,
    /// Per region, its homes' (allocation order, index in `kept`).
    placed: Vec<Vec<(u64, usize)>>,
}

impl TypeHomes {
    fn new(durable: &Durable, capacity: usize) -> Self {
        let mut interned = Interned::default();
        let regions: HashMap<_, _, _> =
            durable.regions.keys().enumerate().map(|(i, address)| (interned.address(address), i)).collect();
        let placed = vec![Vec::new(); regions.len()];
        TypeHomes { regions, interned, kept: Vec::with_capacity(capacity), placed }
    }

    /// Reads the row of `shard`; a home whose region is gone went with it
    /// (as in `Durable::apply`).
    fn read(&mut self, schema: u64, shard: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let (home, order, index) = if schema == records::SCHEMA_V2 {
            let (address, read) = records::read_home_row(bytes, &mut self.interned)
                .map_err(|detail| StoreError::Corrupt { what: "table homes".into(), detail })?;
            let Some((region, &index)) = self.regions.get_key_value(address) else { return Ok(()) };
            (Home { region: region.clone(), reason: read.reason, at: read.at, epoch: 0 }, read.order, index)
        } else {
            let (home, order) = home_row(schema, bytes)?;
            let Some(&index) = self.regions.get(&*home.region) else { return Ok(()) };
            (self.interned.home(home), order, index)
        };
        self.placed[index].push((order, self.kept.len()));
        self.kept.push((shard.to_owned(), home));
        Ok(())
    }

    fn finish(self, durable: &mut Durable) {
        let TypeHomes { interned, kept, placed, .. } = self;
        // Sorting a thousand short lists is about twice as fast as one long one.
        for (region, mut placed) in durable.regions.values_mut().zip(placed) {
            placed.sort_unstable();
            region.shards = placed.into_iter().map(|(_, at)| kept[at].0.clone()).collect();
        }
        durable.interned = interned;
        durable.homes = kept.into_iter().collect();
    }
}

/// The loaded type `name`, empty when first met: its name is copied once,
/// not once per row (a start reads a million rows of one type).
fn of<'m>(types: &'m mut BTreeMap<String, LoadedType>, name: &str) -> &'m mut LoadedType {
    if !types.contains_key(name) {
        types.insert(name.to_owned(), LoadedType::default());
    }
    types.get_mut(name).expect("inserted above")
}

/// Every type's state (or only `only`'s) as one read transaction sees it,
/// its rows of `schema`.
fn read_types(
    txn: &redb::ReadTransaction,
    only: Option<&str>,
    schema: u64,
) -> Result<BTreeMap<String, LoadedType>, StoreError> {
    let mut types: BTreeMap<String, LoadedType> = BTreeMap::new();
    for entry in named_rows(&txn.open_table(TYPES).map_err(db)?, only)? {
        let (name, value) = entry.map_err(db)?;
        let row = type_row(schema, value.value())?;
        let loaded = of(&mut types, name.value());
        loaded.record = row.record;
        loaded.durable.signal = row.signal;
        loaded.durable.next_join_order = row.next_join_order;
    }
    for entry in rows(&txn.open_table(REGIONS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, address) = key.value();
        let record: RegionRecord = row::<v1::Region, records::Region, _>(schema, "regions", value.value())?;
        of(&mut types, t).durable.regions.insert(address.to_owned(), record);
    }
    let homes_table = txn.open_table(HOMES).map_err(db)?;
    // Every row is read when reading every type; for one type, the table's
    // length would overstate its share.
    let mut unread = match only {
        None => usize::try_from(homes_table.len().map_err(db)?).unwrap_or(0),
        Some(_) => 0,
    };
    // The rows come sorted by type: only a row of a new type starts one.
    let mut homes: Vec<(String, TypeHomes)> = Vec::new();
    for entry in rows(&homes_table, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        if homes.last().is_none_or(|(last, _)| last != t) {
            // Sized for all the rows left, so a million homes of one type
            // are not copied as its list grows.
            homes.push((t.to_owned(), TypeHomes::new(&of(&mut types, t).durable, unread)));
        }
        let (_, read) = homes.last_mut().expect("pushed above");
        read.read(schema, shard, value.value())?;
        unread = unread.saturating_sub(1);
    }
    for (t, read) in homes {
        read.finish(&mut of(&mut types, &t).durable);
    }
    for entry in rows(&txn.open_table(HANDOFFS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        of(&mut types, t).durable.handoffs.insert(shard.to_owned(), value.value().to_owned());
    }
    for entry in rows(&txn.open_table(PLACEMENTS).map_err(db)?, only)? {
        let (key, value) = entry.map_err(db)?;
        let (t, shard) = key.value();
        let placement = placement(schema, value.value())?;
        of(&mut types, t).durable.placements.insert(shard.to_owned(), placement);
    }
    for entry in rows(&txn.open_table(QUEUED).map_err(db)?, only)? {
        let (key, _) = entry.map_err(db)?;
        let (t, shard) = key.value();
        of(&mut types, t).durable.queued.insert(shard.to_owned());
    }
    // A file checked without being opened for writing may predate the table.
    match txn.open_table(LOADS) {
        Ok(table) => {
            for entry in rows(&table, only)? {
                let (key, value) = entry.map_err(db)?;
                let (t, shard) = key.value();
                let load: records::ShardLoad = records::decode(value.value())
                    .map_err(|detail| StoreError::Corrupt { what: "table loads".to_owned(), detail })?;
                of(&mut types, t).durable.loads.insert(shard.to_owned(), load.into());
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(db(error)),
    }
    match txn.open_table(OPERATIONS) {
        Ok(table) => {
            for entry in named_rows(&table, only)? {
                let (name, value) = entry.map_err(db)?;
                let row: records::Operations = records::decode(value.value())
                    .map_err(|detail| StoreError::Corrupt { what: "table operations".to_owned(), detail })?;
                of(&mut types, name.value()).durable.operations = row.into();
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(error) => return Err(db(error)),
    }
    read_epochs(txn, only, &mut types)?;
    let activations = txn.open_table(ACTIVATIONS).map_err(db)?;
    let activation_rows = match only {
        None => activations.iter().map_err(db)?,
        Some(t) => activations.range((t, 0)..=(t, u64::MAX)).map_err(db)?,
    };
    for entry in activation_rows {
        let (key, value) = entry.map_err(db)?;
        let (t, _) = key.value();
        let activation: ActivationRecord =
            row::<v1::Activation, records::Activation, _>(schema, "activations", value.value())?;
        of(&mut types, t).activations.push(activation);
    }
    Ok(types)
}

/// The types' highest epochs and their homes' epochs (after the homes).
fn read_epochs(
    txn: &redb::ReadTransaction,
    only: Option<&str>,
    types: &mut BTreeMap<String, LoadedType>,
) -> Result<(), StoreError> {
    match txn.open_table(EPOCHS) {
        Ok(table) => {
            for entry in named_rows(&table, only)? {
                let (name, epoch) = entry.map_err(db)?;
                of(types, name.value()).durable.epoch = epoch.value();
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(error) => return Err(db(error)),
    }
    let table = match txn.open_table(HOME_EPOCHS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(error) => return Err(db(error)),
    };
    for entry in rows(&table, only)? {
        let (key, epoch) = entry.map_err(db)?;
        let (t, shard) = key.value();
        if let Some(home) = types.get_mut(t).and_then(|loaded| loaded.durable.homes.get_mut(shard)) {
            home.epoch = epoch.value();
        }
    }
    Ok(())
}

/// Applies one coordinator change to the tables.
struct Writer<'t> {
    types: redb::Table<'t, &'static str, &'static [u8]>,
    regions: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    homes: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    handoffs: redb::Table<'t, (&'static str, &'static str), &'static str>,
    placements: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    queued: redb::Table<'t, (&'static str, &'static str), ()>,
    loads: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    operations: redb::Table<'t, &'static str, &'static [u8]>,
    home_epochs: redb::Table<'t, (&'static str, &'static str), u64>,
    epochs: redb::Table<'t, &'static str, u64>,
    home_order: u64,
}

impl Writer<'_> {
    fn type_row(&self, name: &str) -> Result<TypeRow, StoreError> {
        match self.types.get(name).map_err(db)? {
            Some(v) => type_row(SCHEMA_VERSION, v.value()),
            None => Ok(TypeRow::default()),
        }
    }

    fn put_type_row(&mut self, name: &str, row: &TypeRow) -> Result<(), StoreError> {
        self.types.insert(name, encode_type_row(row).as_slice()).map_err(db)?;
        Ok(())
    }

    fn region(&self, t: &str, address: &str) -> Result<Option<RegionRecord>, StoreError> {
        let region = |v: redb::AccessGuard<'_, &[u8]>| {
            row::<v1::Region, records::Region, RegionRecord>(SCHEMA_VERSION, "regions", v.value())
        };
        self.regions.get((t, address)).map_err(db)?.map(region).transpose()
    }

    fn put_region(&mut self, t: &str, record: &RegionRecord) -> Result<(), StoreError> {
        let mut row = records::Region::from(record);
        row.shards.clear();
        self.regions.insert((t, record.address.as_str()), records::encode(&row).as_slice()).map_err(db)?;
        Ok(())
    }

    /// Deletes every row of type `t`.
    fn remove_type(&mut self, t: &str) -> Result<(), StoreError> {
        // Every (t, …) key sorts before (t + "\0", ""), and after (t, "").
        let next = format!("{t}\0");
        let range = || (t, "")..(next.as_str(), "");
        self.types.remove(t).map_err(db)?;
        self.regions.retain_in(range(), |_, _| false).map_err(db)?;
        self.homes.retain_in(range(), |_, _| false).map_err(db)?;
        self.handoffs.retain_in(range(), |_, _| false).map_err(db)?;
        self.placements.retain_in(range(), |_, _| false).map_err(db)?;
        self.queued.retain_in(range(), |_, _| false).map_err(db)?;
        self.loads.retain_in(range(), |_, _| false).map_err(db)?;
        self.operations.remove(t).map_err(db)?;
        self.home_epochs.retain_in(range(), |_, _| false).map_err(db)?;
        self.epochs.remove(t).map_err(db)?;
        Ok(())
    }

    /// Applies `change` to the type's operations row, written only when it
    /// changed them.
    fn apply_operations(&mut self, t: &str, change: &Change) -> Result<(), StoreError> {
        let mut operations: Operations = match self.operations.get(t).map_err(db)? {
            Some(v) => records::decode::<records::Operations>(v.value())
                .map_err(|detail| StoreError::Corrupt { what: "table operations".to_owned(), detail })?
                .into(),
            None => Operations::default(),
        };
        if operations.apply(change) {
            let row = records::encode(&records::Operations::from(&operations));
            self.operations.insert(t, row.as_slice()).map_err(db)?;
        }
        Ok(())
    }

    fn apply(&mut self, t: &str, change: &Change) -> Result<(), StoreError> {
        match change {
            Change::RegionRegistered(record) => {
                self.put_region(t, record)?;
                let mut row = self.type_row(t)?;
                row.next_join_order = row.next_join_order.max(record.join_order + 1);
                self.put_type_row(t, &row)?;
            }
            Change::RegionRemoved { address } => {
                self.regions.remove((t, address.as_str())).map_err(db)?;
                self.apply_operations(t, change)?;
            }
            Change::RegionDraining { address, draining } => {
                self.apply_operations(t, change)?;
                if let Some(mut record) = self.region(t, address)? {
                    record.draining = *draining;
                    self.put_region(t, &record)?;
                }
            }
            Change::RegionLeaving { address } => {
                if let Some(mut record) = self.region(t, address)? {
                    record.leaving = true;
                    self.put_region(t, &record)?;
                }
            }
            Change::HomeSet { shard, home } => {
                self.home_order += 1;
                let row = records::encode(&records::home_row(home, self.home_order));
                self.homes.insert((t, shard.as_str()), row.as_slice()).map_err(db)?;
                if home.epoch > 0 {
                    self.home_epochs.insert((t, shard.as_str()), home.epoch).map_err(db)?;
                    let highest = self.epochs.get(t).map_err(db)?.map_or(0, |v| v.value());
                    self.epochs.insert(t, highest.max(home.epoch)).map_err(db)?;
                } else {
                    self.home_epochs.remove((t, shard.as_str())).map_err(db)?;
                }
            }
            Change::HomeRemoved { shard } => {
                self.homes.remove((t, shard.as_str())).map_err(db)?;
                self.home_epochs.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::HandOffStarted { shard, from } => {
                self.queued.remove((t, shard.as_str())).map_err(db)?;
                self.handoffs.insert((t, shard.as_str()), from.as_str()).map_err(db)?;
            }
            Change::HandOffEnded { shard } => {
                self.handoffs.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::PlacementWritten { shard, entry } => {
                let row = records::encode(&records::Placement::from(entry));
                self.placements.insert((t, shard.as_str()), row.as_slice()).map_err(db)?;
            }
            Change::PlacementPurged { shard } => {
                self.placements.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::RebalanceQueued { shard } => {
                self.queued.insert((t, shard.as_str()), ()).map_err(db)?;
            }
            Change::RebalanceUnqueued { shard } => {
                self.queued.remove((t, shard.as_str())).map_err(db)?;
            }
            Change::SignalSet { signal } => {
                let mut row = self.type_row(t)?;
                row.signal = signal.clone();
                self.put_type_row(t, &row)?;
            }
            Change::FreezeSet { .. } | Change::FreezeLifted { .. } | Change::DrainStarted { .. } => {
                self.apply_operations(t, change)?;
            }
            Change::LoadsSaved { loads } => {
                for (shard, load) in loads {
                    match load.filter(|l| !l.is_empty()) {
                        Some(load) => {
                            let row = records::encode(&records::ShardLoad::from(load));
                            self.loads.insert((t, shard.as_str()), row.as_slice()).map_err(db)?;
                        }
                        None => {
                            self.loads.remove((t, shard.as_str())).map_err(db)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Store for RedbStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        if let Some(loaded) = self.preloaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            return Ok(loaded);
        }
        self.read_all()
    }

    fn load_type(&self, entity_type: &str) -> Result<Option<LoadedType>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        Ok(read_types(&txn, Some(entity_type), SCHEMA_VERSION)?.remove(entity_type))
    }

    fn placements(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        if txn.open_table(TYPES).map_err(db)?.get(entity_type).map_err(db)?.is_none() {
            return Ok(None);
        }
        let table = txn.open_table(PLACEMENTS).map_err(db)?;
        let next = format!("{entity_type}\0");
        let start = match after {
            Some(after) => Bound::Excluded((entity_type, after)),
            None => Bound::Included((entity_type, "")),
        };
        let mut page = Vec::new();
        for entry in table.range::<(&str, &str)>((start, Bound::Excluded((next.as_str(), "")))).map_err(db)? {
            if page.len() >= limit {
                break;
            }
            let (key, value) = entry.map_err(db)?;
            let placement = placement(SCHEMA_VERSION, value.value())?;
            if let Some(target) = placement.target {
                page.push((key.value().1.to_owned(), target));
            }
        }
        Ok(Some(page))
    }

    fn homes(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, Home)>>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        if txn.open_table(TYPES).map_err(db)?.get(entity_type).map_err(db)?.is_none() {
            return Ok(None);
        }
        let next = format!("{entity_type}\0");
        let end = Bound::Excluded((next.as_str(), ""));
        // A home whose region is gone went with it (as in `read_types`).
        let mut regions = std::collections::BTreeSet::new();
        let region_rows = txn.open_table(REGIONS).map_err(db)?;
        for entry in region_rows.range::<(&str, &str)>((Bound::Included((entity_type, "")), end)).map_err(db)? {
            regions.insert(entry.map_err(db)?.0.value().1.to_owned());
        }
        let table = txn.open_table(HOMES).map_err(db)?;
        let epochs = txn.open_table(HOME_EPOCHS).map_err(db)?;
        let start = match after {
            Some(after) => Bound::Excluded((entity_type, after)),
            None => Bound::Included((entity_type, "")),
        };
        let mut page = Vec::new();
        for entry in table.range::<(&str, &str)>((start, end)).map_err(db)? {
            if page.len() >= limit {
                break;
            }
            let (key, value) = entry.map_err(db)?;
            let (mut home, _) = home_row(SCHEMA_VERSION, value.value())?;
            if regions.contains(&*home.region) {
                let shard = key.value().1;
                home.epoch = epochs.get((entity_type, shard)).map_err(db)?.map_or(0, |e| e.value());
                page.push((shard.to_owned(), home));
            }
        }
        Ok(Some(page))
    }

    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        self.preloaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let txn = self.db.begin_write().map_err(db)?;
        let revision;
        {
            let mut meta = txn.open_table(META).map_err(db)?;
            let current = meta.get("revision").map_err(db)?.map_or(0, |v| v.value());
            if current != based_on {
                return Err(StoreError::Fenced { based_on, current });
            }
            revision = current + 1;
            meta.insert("revision", revision).map_err(db)?;
            let home_order = meta.get("home-order").map_err(db)?.map_or(0, |v| v.value());
            let mut writer = Writer {
                types: txn.open_table(TYPES).map_err(db)?,
                regions: txn.open_table(REGIONS).map_err(db)?,
                homes: txn.open_table(HOMES).map_err(db)?,
                handoffs: txn.open_table(HANDOFFS).map_err(db)?,
                placements: txn.open_table(PLACEMENTS).map_err(db)?,
                queued: txn.open_table(QUEUED).map_err(db)?,
                loads: txn.open_table(LOADS).map_err(db)?,
                operations: txn.open_table(OPERATIONS).map_err(db)?,
                home_epochs: txn.open_table(HOME_EPOCHS).map_err(db)?,
                epochs: txn.open_table(EPOCHS).map_err(db)?,
                home_order,
            };
            for t in &turn.removed_types {
                writer.remove_type(t)?;
            }
            for (t, record) in &turn.types {
                let mut row = writer.type_row(t)?;
                row.record = Some(record.clone());
                writer.put_type_row(t, &row)?;
            }
            for (t, changes) in &turn.changes {
                if !changes.is_empty() && writer.types.get(t.as_str()).map_err(db)?.is_none() {
                    writer.put_type_row(t, &TypeRow::default())?;
                }
                for change in changes {
                    writer.apply(t, change)?;
                }
            }
            meta.insert("home-order", writer.home_order).map_err(db)?;
            let mut activations = txn.open_table(ACTIVATIONS).map_err(db)?;
            for t in &turn.removed_types {
                activations.retain_in((t.as_str(), 0)..=(t.as_str(), u64::MAX), |_, _| false).map_err(db)?;
            }
            for (t, activation) in &turn.activations {
                let last = activations
                    .range((t.as_str(), 0)..=(t.as_str(), u64::MAX))
                    .map_err(db)?
                    .next_back()
                    .transpose()
                    .map_err(db)?
                    .map_or(0, |(k, _)| k.value().1);
                let row = records::encode(&records::Activation::from(activation));
                activations.insert((t.as_str(), last + 1), row.as_slice()).map_err(db)?;
                let numbers: Vec<u64> = activations
                    .range((t.as_str(), 0)..=(t.as_str(), u64::MAX))
                    .map_err(db)?
                    .map(|entry| entry.map(|(k, _)| k.value().1))
                    .collect::<Result<_, _>>()
                    .map_err(db)?;
                for n in numbers.iter().take(numbers.len().saturating_sub(ACTIVATION_HISTORY)) {
                    activations.remove((t.as_str(), *n)).map_err(db)?;
                }
            }
            let mut info = txn.open_table(COMPONENT_INFO).map_err(db)?;
            for record in &turn.components {
                let row = records::encode(&records::Component::from(record));
                info.insert(record.digest.as_str(), row.as_slice()).map_err(db)?;
            }
            for digest in &turn.removed_components {
                info.remove(digest.as_str()).map_err(db)?;
            }
        }
        txn.commit().map_err(db)?;
        Ok(revision)
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db)?;
        txn.open_table(COMPONENTS).map_err(db)?.insert(digest, bytes).map_err(db)?;
        txn.commit().map_err(db)
    }

    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let table = txn.open_table(COMPONENTS).map_err(db)?;
        let Some(bytes) = table.get(digest).map_err(db)?.map(|v| v.value().to_vec()) else { return Ok(None) };
        // Checked here, when a component is about to be compiled, rather
        // than every component at every start.
        let found = digest_of(&bytes);
        if found != digest {
            let what = format!("component {digest}");
            return Err(StoreError::Corrupt { what, detail: format!("its bytes hash to {found}") });
        }
        Ok(Some(bytes))
    }

    fn delete_blob(&self, digest: &str) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(db)?;
        txn.open_table(COMPONENTS).map_err(db)?.remove(digest).map_err(db)?;
        txn.commit().map_err(db)
    }

    fn blob_digests(&self) -> Result<Vec<String>, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let table = txn.open_table(COMPONENTS).map_err(db)?;
        table.iter().map_err(db)?.map(|entry| entry.map(|(k, _)| k.value().to_owned()).map_err(db)).collect()
    }

    fn schema_version(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read().map_err(db)?;
        let meta = txn.open_table(META).map_err(db)?;
        Ok(meta.get("schema").map_err(db)?.map_or(0, |v| v.value()))
    }

    fn describe(&self) -> String {
        format!("redb file {}", self.path.display())
    }
}
