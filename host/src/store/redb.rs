//! [`RedbStore`]: the embedded store, one redb file in the data directory.
//!
//! Opening (the file checked first, a migration when the schema is older),
//! `store check`, and every read and commit, through the file's layout
//! (`redb_layout.rs`: the tables, their rows, the
//! writer).

use std::ops::Bound;
use std::path::{Path, PathBuf};

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

use redb::{Database, ReadableDatabase, ReadableTable};

use super::records;
use super::redb_file::{self, FileState};
use super::redb_layout::{
    ACTIVATIONS, COMPONENT_INFO, COMPONENTS, HANDOFFS, HOMES, LOADS, META, PLACEMENTS, QUEUED, REGIONS, TYPES, Writer,
    db, home_row, placement, read_loaded, read_types,
};
pub use super::redb_layout::{FILE_NAME, kept_copy};
use super::{ACTIVATION_HISTORY, Loaded, LoadedType, Revision, SCHEMA_VERSION, Store, StoreError, Turn};
use crate::coordinator::Home;
use crate::strategy::source::digest_of;

/// The embedded store. See the module documentation.
pub struct RedbStore {
    /// Closed by [`Drop`] without a panic: redb panics closing a file whose
    /// allocator state is damaged (which reads fine until then). Always
    /// `Some` until then.
    db: Option<Database>,
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
    /// [`kept_copy`] first), else refused with [`StoreError::NotMigrated`]
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
        let db = Some(db);
        let mut store = RedbStore { db, path: path.clone(), preloaded: std::sync::Mutex::new(None) };
        let migrated = redb_file::quietly(|| store.init(migrate)).map_err(damaged)??;
        if migrated {
            // The migration rewrote every row in one transaction, which
            // leaves the file about twice its size: give the space back.
            match redb_file::quietly(|| store.db.as_mut().expect("just opened").compact()).map_err(damaged)? {
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
        read_loaded(&self.database().begin_read().map_err(db)?)
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
                super::redb_migrate::migrate(self.database(), &self.path, found)?;
                migrated = true;
            }
            _ => {}
        }
        let txn = self.database().begin_write().map_err(db)?;
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
            txn.open_table(ACTIVATIONS).map_err(db)?;
            txn.open_table(COMPONENTS).map_err(db)?;
            txn.open_table(COMPONENT_INFO).map_err(db)?;
        }
        txn.commit().map_err(db)?;
        Ok(migrated)
    }

    /// The schema in the `meta` table; `None` for a new file.
    fn stored_schema(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(db(error)),
        };
        Ok(meta.get("schema").map_err(db)?.map(|v| v.value()))
    }

    /// The current revision.
    pub fn revision(&self) -> Result<Revision, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
        let meta = txn.open_table(META).map_err(db)?;
        Ok(meta.get("revision").map_err(db)?.map_or(0, |v| v.value()))
    }
}

/// Deletes the copies of older schemas' files that migrations kept in
/// `dir` ([`kept_copy`], `shardalloc store drop-copies`); answers each
/// copy dropped with its size (none when there was none). Safe while a
/// node runs (it never reads a copy) and after a migration that did not
/// finish (the store is then still the whole older file, and the next
/// migration copies it again).
pub fn drop_kept_copies(dir: &Path) -> Result<Vec<(PathBuf, u64)>, StoreError> {
    let mut dropped = Vec::new();
    for schema in 1..SCHEMA_VERSION {
        let copy = dir.join(kept_copy(schema));
        let io = |error| StoreError::Io { path: copy.display().to_string(), error };
        let bytes = match std::fs::metadata(&copy) {
            Ok(metadata) => metadata.len(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io(error)),
        };
        std::fs::remove_file(&copy).map_err(io)?;
        dropped.push((copy, bytes));
    }
    Ok(dropped)
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
    /// The copies of older schemas' files that migrations kept
    /// ([`kept_copy`]) and are still in the directory.
    pub kept_copies: Vec<PathBuf>,
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
                    contents.kept_copies =
                        (1..SCHEMA_VERSION).map(|n| dir.join(kept_copy(n))).filter(|copy| copy.exists()).collect();
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

impl RedbStore {
    /// [`Store::commit`]'s work, which redb may panic in on a damaged file.
    fn commit_turn(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        self.preloaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let txn = self.database().begin_write().map_err(db)?;
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
            let mut writer = Writer::open(&txn, home_order)?;
            for t in &turn.removed_types {
                writer.remove_type(t)?;
            }
            for (t, record) in &turn.types {
                writer.type_row(t)?.record = Some(record.clone());
            }
            for (t, changes) in turn.changes.iter().filter(|(_, changes)| !changes.is_empty()) {
                // A type's row exists as soon as it has state.
                writer.type_row(t)?;
                for change in changes {
                    writer.apply(t, change)?;
                }
            }
            let home_order = writer.finish()?;
            meta.insert("home-order", home_order).map_err(db)?;
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

    /// The open database (taken only when the store is dropped).
    fn database(&self) -> &Database {
        self.db.as_ref().expect("open until dropped")
    }

    /// The error of a write redb stopped on damage in the file.
    fn damaged_on_write(&self, problem: &str) -> StoreError {
        tracing::error!(path = %self.path.display(), "redb stopped on damage while writing: {problem}");
        StoreError::Damaged {
            path: self.path.display().to_string(),
            problem: format!(
                "redb stopped on damage while writing ({problem}): stop the node and run `shardalloc store check`"
            ),
        }
    }
}

impl Drop for RedbStore {
    /// Closes the file. redb panics closing a file whose allocator state is
    /// damaged (it reads and even writes fine until then): that is logged,
    /// naming `shardalloc store check`, instead of ending the process with
    /// a panic at its shutdown.
    fn drop(&mut self) {
        let database = self.db.take();
        if let Err(panic) = redb_file::quietly(move || drop(database)) {
            tracing::error!(
                path = %self.path.display(),
                "the store's file is damaged: redb stopped closing it ({panic}); run `shardalloc store check` before \
                 the next start"
            );
        }
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
        let txn = self.database().begin_read().map_err(db)?;
        Ok(read_types(&txn, Some(entity_type), SCHEMA_VERSION)?.remove(entity_type))
    }

    fn placements(
        &self,
        entity_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
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
        let txn = self.database().begin_read().map_err(db)?;
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
            let (home, _) = home_row(SCHEMA_VERSION, value.value())?;
            if regions.contains(&*home.region) {
                page.push((key.value().1.to_owned(), home));
            }
        }
        Ok(Some(page))
    }

    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        // redb panics on some damage it finds while writing (its allocator
        // state): the node sees a damaged store, not a dead driver thread.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.commit_turn(based_on, turn))).unwrap_or_else(
            |panic| {
                let problem = redb_file::panic_text(panic.as_ref());
                Err(self.damaged_on_write(&problem))
            },
        )
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let txn = self.database().begin_write().map_err(db)?;
        txn.open_table(COMPONENTS).map_err(db)?.insert(digest, bytes).map_err(db)?;
        txn.commit().map_err(db)
    }

    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
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
        let txn = self.database().begin_write().map_err(db)?;
        txn.open_table(COMPONENTS).map_err(db)?.remove(digest).map_err(db)?;
        txn.commit().map_err(db)
    }

    fn blob_digests(&self) -> Result<Vec<String>, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
        let table = txn.open_table(COMPONENTS).map_err(db)?;
        table.iter().map_err(db)?.map(|entry| entry.map(|(k, _)| k.value().to_owned()).map_err(db)).collect()
    }

    fn schema_version(&self) -> Result<u64, StoreError> {
        let txn = self.database().begin_read().map_err(db)?;
        let meta = txn.open_table(META).map_err(db)?;
        Ok(meta.get("schema").map_err(db)?.map_or(0, |v| v.value()))
    }

    fn describe(&self) -> String {
        format!("redb file {}", self.path.display())
    }
}
