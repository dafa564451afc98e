//! Migrating a redb store of an older schema to [`SCHEMA_VERSION`], when it
//! opens: the file is copied to [`kept_copy`] first (kept until an
//! operator deletes it), then the whole state is read as the older schema
//! wrote it and written anew as the current one (every table emptied, the
//! older schema's own tables dropped, the schema moved) in one write
//! transaction, so a crash midway leaves the old schema, which the next
//! start migrates again. Any older schema migrates the same way: reading
//! it is `redb_layout.rs`'s job (`read_loaded`), writing the current one
//! its `Writer`'s.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use redb::{Database, ReadableDatabase};

use super::records::TypeValues;
use super::redb_layout::{
    ACTIVATIONS, COMPONENT_INFO, HANDOFFS, HOMES, LOADS, META, PLACEMENTS, QUEUED, REGIONS, TYPES, V2_EPOCHS,
    V2_HOME_EPOCHS, V2_OPERATIONS, Writer, kept_copy, read_loaded,
};
use super::{Loaded, SCHEMA_VERSION, StoreError, records};

fn db<E: Into<redb::Error>>(error: E) -> StoreError {
    StoreError::Backend { backend: "redb", source: Box::new(error.into()) }
}

/// Copies `path` (the open store, nothing written to it since it opened)
/// to [`kept_copy`] of `found` beside it, through a temporary file renamed
/// into place.
fn keep_copy(path: &Path, found: u64) -> Result<std::path::PathBuf, StoreError> {
    let copy = path.with_file_name(kept_copy(found));
    let partial = path.with_file_name(format!("{}.partial", kept_copy(found)));
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |error| StoreError::Io { path, error }
    };
    std::fs::copy(path, &partial).map_err(io(&partial))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600)).map_err(io(&partial))?;
    std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(io(&partial))?;
    std::fs::rename(&partial, &copy).map_err(io(&copy))?;
    Ok(copy)
}

/// Migrates the store `db` (the file `path`) from schema `found`.
pub(super) fn migrate(db_: &Database, path: &Path, found: u64) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let copy = keep_copy(path, found)?;
    let loaded = read_loaded(&db_.begin_read().map_err(db)?)?;
    let txn = db_.begin_write().map_err(db)?;
    empty(&txn)?;
    let home_order = write(&txn, &loaded)?;
    {
        let mut meta = txn.open_table(META).map_err(db)?;
        meta.insert("schema", SCHEMA_VERSION).map_err(db)?;
        meta.insert("home-order", home_order).map_err(db)?;
    }
    txn.commit().map_err(db)?;
    let (homes, placements) = (loaded.types.values())
        .fold((0, 0), |(h, p), one| (h + one.durable.homes.len(), p + one.durable.placements.len()));
    tracing::warn!(
        path = %path.display(),
        from = found,
        to = SCHEMA_VERSION,
        revision = loaded.revision,
        types = loaded.types.len(),
        homes,
        placements,
        ms = started.elapsed().as_millis() as u64,
        copy = %copy.display(),
        "migrated the store to the current schema; the old file is kept as the copy until you delete it"
    );
    Ok(())
}

/// Empties every table of state (the blobs stay: every schema stores them
/// alike) and drops the tables only schema 2 had.
fn empty(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    txn.open_table(TYPES).map_err(db)?.retain(|_, _| false).map_err(db)?;
    txn.open_table(COMPONENT_INFO).map_err(db)?.retain(|_, _| false).map_err(db)?;
    txn.open_table(ACTIVATIONS).map_err(db)?.retain(|_, _| false).map_err(db)?;
    for table in [REGIONS, HOMES, PLACEMENTS, LOADS] {
        txn.open_table(table).map_err(db)?.retain(|_, _| false).map_err(db)?;
    }
    txn.open_table(HANDOFFS).map_err(db)?.retain(|_, _| false).map_err(db)?;
    txn.open_table(QUEUED).map_err(db)?.retain(|_, _| false).map_err(db)?;
    txn.delete_table(V2_OPERATIONS).map_err(db)?;
    txn.delete_table(V2_HOME_EPOCHS).map_err(db)?;
    txn.delete_table(V2_EPOCHS).map_err(db)?;
    Ok(())
}

/// Writes `loaded` into emptied tables; answers the last home order given.
/// Each region's homes are written in its shard list's order, which is
/// their allocation order, so a start rebuilds the same lists.
fn write(txn: &redb::WriteTransaction, loaded: &Loaded) -> Result<u64, StoreError> {
    let mut writer = Writer::open(txn, 0)?;
    for (name, one) in &loaded.types {
        let d = &one.durable;
        *writer.type_row(name)? = TypeValues {
            record: one.record.clone(),
            signal: d.signal.clone(),
            next_join_order: d.next_join_order,
            epoch: d.epoch,
            operations: d.operations.clone(),
        };
        for region in d.regions.values() {
            writer.put_region(name, region)?;
            for shard in &region.shards {
                if let Some(home) = d.homes.get(shard) {
                    writer.put_home(name, shard, home)?;
                }
            }
        }
        for (shard, from) in &d.handoffs {
            writer.handoffs.insert((name.as_str(), shard.as_str()), from.as_str()).map_err(db)?;
        }
        for (shard, entry) in &d.placements {
            let row = records::encode(&records::Placement::from(entry));
            writer.placements.insert((name.as_str(), shard.as_str()), row.as_slice()).map_err(db)?;
        }
        for shard in &d.queued {
            writer.queued.insert((name.as_str(), shard.as_str()), ()).map_err(db)?;
        }
        for (shard, load) in &d.loads {
            writer.put_load(name, shard, Some(*load))?;
        }
    }
    let home_order = writer.finish()?;
    let mut activations = txn.open_table(ACTIVATIONS).map_err(db)?;
    for (name, one) in &loaded.types {
        for (number, activation) in (1..).zip(&one.activations) {
            let row = records::encode(&records::Activation::from(activation));
            activations.insert((name.as_str(), number), row.as_slice()).map_err(db)?;
        }
    }
    let mut info = txn.open_table(COMPONENT_INFO).map_err(db)?;
    for record in loaded.components.values() {
        let row = records::encode(&records::Component::from(record));
        info.insert(record.digest.as_str(), row.as_slice()).map_err(db)?;
    }
    Ok(home_order)
}
