//! Migrating a redb store of an older schema to [`SCHEMA_VERSION`], when it
//! opens: the file is copied to [`V1_COPY`] first (kept until an operator
//! deletes it), then every row is rewritten and the schema moved in one
//! write transaction, so a crash midway leaves the old schema, which the
//! next start migrates again.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use redb::{Database, ReadableTable};

use super::records::{self, v1};
use super::redb::{ACTIVATIONS, COMPONENT_INFO, HOMES, META, PLACEMENTS, REGIONS, TYPES, V1_COPY, row};
use super::{ActivationRecord, ComponentRecord, SCHEMA_VERSION, StoreError, TypeRecord};
use crate::coordinator::{Home, PlacementEntry, RegionRecord};

fn db<E: Into<redb::Error>>(error: E) -> StoreError {
    StoreError::Backend { backend: "redb", source: Box::new(error.into()) }
}

/// Rewrites every value of one table from schema `found` to the current
/// one with `convert`; `own` and `borrow` turn its keys into owned values
/// and back. Evaluates to the number of rows.
macro_rules! rewrite {
    ($txn:expr, $table:expr, $found:expr, $convert:expr, $own:expr, $borrow:expr) => {{
        let mut table = $txn.open_table($table).map_err(db)?;
        let mut rows = Vec::new();
        for entry in table.iter().map_err(db)? {
            let (key, value) = entry.map_err(db)?;
            rows.push(($own(key.value()), $convert($found, value.value())?));
        }
        for (key, value) in &rows {
            table.insert($borrow(key), value.as_slice()).map_err(db)?;
        }
        rows.len()
    }};
}

fn own_name(key: &str) -> String {
    key.to_owned()
}

#[allow(clippy::ptr_arg)] // The owned keys are `String`s.
fn name(key: &String) -> &str {
    key.as_str()
}

fn own_pair((t, id): (&str, &str)) -> (String, String) {
    (t.to_owned(), id.to_owned())
}

fn pair((t, id): &(String, String)) -> (&str, &str) {
    (t.as_str(), id.as_str())
}

fn own_numbered((t, n): (&str, u64)) -> (String, u64) {
    (t.to_owned(), n)
}

fn numbered((t, n): &(String, u64)) -> (&str, u64) {
    (t.as_str(), *n)
}

fn type_row(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let (record, signal, next): (Option<TypeRecord>, Option<String>, u64) =
        row::<v1::TypeRow, records::TypeRow, _>(found, "types", bytes)?;
    Ok(records::encode(&records::type_row(record.as_ref(), signal.as_deref(), next)))
}

fn region(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let region: RegionRecord = row::<v1::Region, records::Region, _>(found, "regions", bytes)?;
    Ok(records::encode(&records::Region::from(&region)))
}

fn home(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let (home, order): (Home, u64) = row::<v1::HomeRow, records::HomeRow, _>(found, "homes", bytes)?;
    Ok(records::encode(&records::home_row(&home, order)))
}

fn placement(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let entry: PlacementEntry = row::<v1::PlacementEntry, records::Placement, _>(found, "placements", bytes)?;
    Ok(records::encode(&records::Placement::from(&entry)))
}

fn activation(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let record: ActivationRecord = row::<v1::Activation, records::Activation, _>(found, "activations", bytes)?;
    Ok(records::encode(&records::Activation::from(&record)))
}

fn component(found: u64, bytes: &[u8]) -> Result<Vec<u8>, StoreError> {
    let record: ComponentRecord = row::<v1::Component, records::Component, _>(found, "component-info", bytes)?;
    Ok(records::encode(&records::Component::from(&record)))
}

/// Copies `path` (the open store, nothing written to it since it opened)
/// to [`V1_COPY`] beside it, through a temporary file renamed into place.
fn keep_copy(path: &Path) -> Result<std::path::PathBuf, StoreError> {
    let copy = path.with_file_name(V1_COPY);
    let partial = path.with_file_name(format!("{V1_COPY}.partial"));
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
    let copy = keep_copy(path)?;
    let txn = db_.begin_write().map_err(db)?;
    let mut rows = 0;
    rows += rewrite!(txn, TYPES, found, type_row, own_name, name);
    rows += rewrite!(txn, REGIONS, found, region, own_pair, pair);
    let homes = rewrite!(txn, HOMES, found, home, own_pair, pair);
    let placements = rewrite!(txn, PLACEMENTS, found, placement, own_pair, pair);
    rows += rewrite!(txn, ACTIVATIONS, found, activation, own_numbered, numbered);
    rows += rewrite!(txn, COMPONENT_INFO, found, component, own_name, name);
    txn.open_table(META).map_err(db)?.insert("schema", SCHEMA_VERSION).map_err(db)?;
    txn.commit().map_err(db)?;
    tracing::warn!(
        path = %path.display(),
        from = found,
        to = SCHEMA_VERSION,
        rows = rows + homes + placements,
        homes,
        placements,
        ms = started.elapsed().as_millis() as u64,
        copy = %copy.display(),
        "migrated the store to the current schema; the old file is kept as the copy until you delete it"
    );
    Ok(())
}
