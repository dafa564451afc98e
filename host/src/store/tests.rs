//! Both backends pass the conformance suite; redb's own refusals.

use super::*;

#[test]
fn redb_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    conformance::suite(&|| Ok(Box::new(RedbStore::open(dir.path())?)));
}

#[test]
fn memory_passes_the_conformance_suite() {
    let store = MemoryStore::new();
    conformance::suite(&|| Ok(Box::new(store.clone())));
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open(dir.path()).unwrap());
    {
        let db = ::redb::Database::create(dir.path().join(redb::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(::redb::TableDefinition::<&str, u64>::new("meta")).unwrap().insert("schema", 99).unwrap();
        txn.commit().unwrap();
    }
    let error = RedbStore::open(dir.path()).err().unwrap();
    assert!(error.to_string().contains("schema version 99"), "{error}");
}

#[test]
fn a_second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = RedbStore::open(dir.path()).unwrap();
    let error = RedbStore::open(dir.path()).err().unwrap();
    assert!(matches!(error, StoreError::InUse { .. }), "{error}");
}

#[test]
fn the_configured_backend_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&StoreConfig::Embedded { dir: dir.path().to_owned() }).unwrap();
    assert!(store.describe().contains(redb::FILE_NAME), "{}", store.describe());
    assert!(open(&StoreConfig::Memory).unwrap().describe().starts_with("memory"));
}
