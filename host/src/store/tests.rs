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
        let db = redb::waiting_out_locks(|| ::redb::Database::create(dir.path().join(redb::FILE_NAME))).unwrap();
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
fn an_open_waits_out_a_lock_released_soon_and_no_longer() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open(dir.path()).unwrap());
    // A handle closed a moment after the open begins, as the copy a child
    // process holds from its fork until its exec: waited out.
    let held = ::redb::Database::create(dir.path().join(redb::FILE_NAME)).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(redb::LOCK_WAIT / 10);
        drop(held);
    });
    let store = RedbStore::open(dir.path()).expect("a lock released within the wait was not waited out");
    closer.join().unwrap();
    // Held for good (another node on the directory): refused after the wait.
    let started = std::time::Instant::now();
    let error = RedbStore::open(dir.path()).err().unwrap();
    assert!(matches!(error, StoreError::InUse { .. }), "{error}");
    assert!(started.elapsed() >= redb::LOCK_WAIT, "refused before the wait was over");
    drop(store);
}

#[test]
fn the_configured_backend_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&StoreConfig::Embedded { dir: dir.path().to_owned(), migrate: true }).unwrap();
    assert!(store.describe().contains(redb::FILE_NAME), "{}", store.describe());
    assert!(open(&StoreConfig::Memory).unwrap().describe().starts_with("memory"));
}

/// A store with some of everything, closed cleanly; its file's bytes.
fn a_store(dir: &std::path::Path) -> Vec<u8> {
    conformance::suite(&|| Ok(Box::new(RedbStore::open(dir)?)));
    std::fs::read(dir.join(redb::FILE_NAME)).unwrap()
}

/// Opens a damaged copy: never a panic; a clear error, the file unchanged.
#[track_caller]
fn refused(damage: &str, bytes: &[u8], expect_refusal: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(redb::FILE_NAME);
    std::fs::write(&path, bytes).unwrap();
    std::fs::write(dir.path().join(redb_file::MARKER), "").unwrap();
    let opened = std::panic::catch_unwind(|| RedbStore::open(dir.path()))
        .unwrap_or_else(|_| panic!("{damage}: opening panicked"));
    match opened {
        Err(error @ StoreError::Damaged { .. }) => {
            let message = error.to_string();
            assert!(message.contains("store check") && message.contains("backup"), "{damage}: {message}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{damage}: the damaged file was written to");
        }
        Err(other) => panic!("{damage}: not reported as damage: {other}"),
        Ok(store) => {
            assert!(!expect_refusal, "{damage}: a damaged store was opened");
            // Damage in free space is harmless; the store must still work.
            store.load().unwrap_or_else(|e| panic!("{damage}: opened, then failed: {e}"));
        }
    }
}

#[test]
fn a_damaged_file_is_refused_without_a_panic_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let good = a_store(dir.path());
    let len = good.len();
    assert!(len > 8192, "{len}");
    for cut in [1, 100, redb_file::HEADER_BYTES - 1, redb_file::HEADER_BYTES, 4096, len / 2, len - 1] {
        refused(&format!("truncated to {cut} bytes"), &good[..cut], true);
    }
    refused("zeroed", &vec![0; len], true);
    let mut foreign = b"\x89PNG\r\n\x1a\n".to_vec();
    foreign.extend((0..10_000u32).map(|i| (i * 7919 % 251) as u8));
    refused("a foreign file", &foreign, true);
    // Random bytes in the settings or the current commit slot are always
    // found; the other slot is only a crash's fallback (redb ignores it in a
    // file closed cleanly); deeper, where they land decides.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    // redb's god byte (offset 9) names the current slot of the two (at 64
    // and 192): which one it is follows the number of commits the scenario
    // made, so the test reads it rather than assume it.
    let (current, other) = if good[9] & 1 == 0 { (70, 200) } else { (200, 70) };
    let cases = [
        (0, 8, true),
        (12, 8, true),
        (current, 8, true),
        (other, 8, false),
        (4096, 4096, false),
        (len / 2, 4096, false),
    ];
    for (offset, count, must_refuse) in cases {
        let mut damaged = good.clone();
        for byte in damaged.iter_mut().skip(offset).take(count) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *byte = seed as u8;
        }
        refused(&format!("random bytes at {offset}"), &damaged, must_refuse);
    }
}

#[test]
fn a_marked_directory_whose_store_went_missing_or_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open(dir.path()).unwrap());
    let path = dir.path().join(redb::FILE_NAME);
    std::fs::write(&path, b"").unwrap();
    let error = RedbStore::open(dir.path()).err().expect("an emptied store was opened");
    assert!(error.to_string().contains("empty"), "{error}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "the emptied file was initialised again");
    std::fs::remove_file(&path).unwrap();
    let error = RedbStore::open(dir.path()).err().expect("a missing store was started afresh");
    assert!(error.to_string().contains("missing"), "{error}");
}

#[test]
fn new_directories_and_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    drop(RedbStore::open(&dir).unwrap());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(redb::FILE_NAME)), 0o600);
    assert_eq!(mode(&dir.join(redb_file::MARKER)), 0o600);
}

#[test]
fn check_reports_what_a_store_holds_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(RedbStore::check(dir.path()).unwrap(), redb::Checked::Empty);
    let bytes = a_store(dir.path());
    let redb::Checked::Sound(contents) = RedbStore::check(dir.path()).unwrap() else { panic!("not sound") };
    assert_eq!(contents.schema, SCHEMA_VERSION);
    assert!(contents.types > 0 && contents.revision > 0, "{contents:?}");
    assert_eq!(contents.file_bytes, bytes.len() as u64);
    assert_eq!(std::fs::read(dir.path().join(redb::FILE_NAME)).unwrap(), bytes, "check wrote to the file");

    let _open = RedbStore::open(dir.path()).unwrap();
    let error = RedbStore::check(dir.path()).unwrap_err();
    assert!(matches!(error, StoreError::InUse { .. }), "{error}");
}

#[test]
fn check_finds_damage_and_a_store_left_by_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = a_store(dir.path());
    let copy = |bytes: &[u8]| {
        let copy = tempfile::tempdir().unwrap();
        std::fs::write(copy.path().join(redb::FILE_NAME), bytes).unwrap();
        std::fs::write(copy.path().join(redb_file::MARKER), "").unwrap();
        copy
    };
    let truncated = copy(&bytes[..bytes.len() / 2]);
    let error = RedbStore::check(truncated.path()).unwrap_err();
    assert!(error.to_string().contains("truncated"), "{error}");

    // The file of a store still open is what a crash leaves behind.
    let store = RedbStore::open(dir.path()).unwrap();
    let crashed = copy(&std::fs::read(dir.path().join(redb::FILE_NAME)).unwrap());
    drop(store);
    assert_eq!(RedbStore::check(crashed.path()).unwrap(), redb::Checked::NeedsRecovery);
    let recovered = RedbStore::open(crashed.path()).unwrap().load().unwrap();
    assert_eq!(recovered, RedbStore::open(dir.path()).unwrap().load().unwrap());
    drop(recovered);
    assert!(matches!(RedbStore::check(crashed.path()).unwrap(), redb::Checked::Sound(_)));
}

#[test]
fn check_finds_a_component_whose_bytes_changed() {
    let dir = tempfile::tempdir().unwrap();
    let digest = {
        let store = RedbStore::open(dir.path()).unwrap();
        let bytes = b"\0asm a component".to_vec();
        let digest = crate::strategy::source::digest_of(&bytes);
        store.put_blob(&digest, &bytes).unwrap();
        let record = ComponentRecord {
            digest: digest.clone(),
            name: "a".into(),
            version: "1".into(),
            size: bytes.len() as u64,
            uploaded_at_ms: 0,
        };
        store.commit(store.revision().unwrap(), &Turn { components: vec![record], ..Turn::default() }).unwrap();
        digest
    };
    assert!(matches!(RedbStore::check(dir.path()).unwrap(), redb::Checked::Sound(c) if c.components == 1));
    {
        let db = redb::waiting_out_locks(|| ::redb::Database::create(dir.path().join(redb::FILE_NAME))).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(::redb::TableDefinition::<&str, &[u8]>::new("components"))
            .unwrap()
            .insert(digest.as_str(), b"\0asm another".as_slice())
            .unwrap();
        txn.commit().unwrap();
    }
    let error = RedbStore::check(dir.path()).unwrap_err();
    assert!(error.to_string().contains(&format!("component {digest}")), "{error}");
    // A start does not read the component bytes (so it is as fast with 100
    // stored components as with none); they are checked when read.
    let store = RedbStore::open(dir.path()).expect("a start reads no component bytes");
    let error = store.blob(&digest).unwrap_err();
    assert!(error.to_string().contains(&format!("component {digest}")), "{error}");
}

/// Opens a copy of `bytes` with redb, commits once and closes it: true
/// when redb panics (a node would, at the latest at its next shutdown).
fn redb_panics_on(bytes: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(redb::FILE_NAME);
    std::fs::write(&path, bytes).unwrap();
    let outcome = redb_file::quietly(|| {
        if let Ok(database) = ::redb::Database::create(&path) {
            if let Ok(txn) = database.begin_write() {
                let _ = txn.commit();
            }
            drop(database);
        }
    });
    outcome.is_err()
}

#[test]
fn check_runs_redbs_integrity_check_and_finds_what_would_panic_later() {
    let dir = tempfile::tempdir().unwrap();
    let good = a_store(dir.path());
    assert!(matches!(RedbStore::check(dir.path()), Ok(redb::Checked::Sound(_))), "the good store is sound");
    let page = 4096;
    let mut panicking = 0;
    // Eight flipped bytes in a page past the header's, one page at a time:
    // wherever redb would panic on the file, `store check` says damaged.
    // Each case repairs and commits (fsyncs) a whole database, so not every
    // page of the file (~2,000, most of them blob bytes and free space) is
    // tried: every one of the first 64, where redb keeps its trees and
    // allocator state (measured: the panicking flips are all in pages 1–15),
    // then every 64th.
    let pages = good.len() / page;
    let tried = (1..pages.min(64)).chain((64..pages).step_by(64));
    for start in tried.map(|index| index * page) {
        for at in [64, page / 2] {
            let mut damaged = good.clone();
            for byte in damaged.iter_mut().skip(start + at).take(8) {
                *byte = !*byte;
            }
            if !redb_panics_on(&damaged) {
                continue;
            }
            panicking += 1;
            let case = tempfile::tempdir().unwrap();
            std::fs::write(case.path().join(redb::FILE_NAME), &damaged).unwrap();
            std::fs::write(case.path().join(redb_file::MARKER), "").unwrap();
            let checked = RedbStore::check(case.path());
            assert!(
                matches!(checked, Err(StoreError::Damaged { .. })),
                "flipped at {}: redb panics on the file, but store check says {checked:?}",
                start + at
            );
            assert_eq!(std::fs::read(case.path().join(redb::FILE_NAME)).unwrap(), damaged, "the check wrote");
        }
    }
    assert!(panicking > 0, "no flip made redb panic: the test proves nothing");
}

#[test]
fn a_store_whose_allocator_state_is_damaged_never_panics_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let good = a_store(dir.path());
    let page = 4096;
    let mut tried = 0;
    // The flips that make redb panic (issue 41: one at an allocator page
    // started, took a write and panicked at SIGTERM, exit 101).
    for start in (1..(good.len() / page).min(16)).map(|index| index * page) {
        for at in [64, page / 2] {
            let mut damaged = good.clone();
            for byte in damaged.iter_mut().skip(start + at).take(8) {
                *byte = !*byte;
            }
            if !redb_panics_on(&damaged) {
                continue;
            }
            tried += 1;
            let case = tempfile::tempdir().unwrap();
            std::fs::write(case.path().join(redb::FILE_NAME), &damaged).unwrap();
            std::fs::write(case.path().join(redb_file::MARKER), "").unwrap();
            // Opened, written to and closed as a node would: an open refused
            // as damaged, a write refused as damaged, or a close that logs;
            // never a panic.
            let outcome = std::panic::catch_unwind(|| {
                let Ok(store) = RedbStore::open(case.path()) else { return };
                let record = ComponentRecord {
                    digest: "sha256:00".into(),
                    name: "written".into(),
                    version: "1".into(),
                    size: 1,
                    uploaded_at_ms: 0,
                };
                let turn = Turn { components: vec![record], ..Turn::default() };
                match store.revision().map(|revision| store.commit(revision, &turn)) {
                    Ok(Ok(_)) | Ok(Err(StoreError::Damaged { .. })) | Err(_) => {}
                    Ok(Err(other)) => panic!("a write on a damaged store failed with {other:?}"),
                }
                drop(store);
            });
            assert!(outcome.is_ok(), "flipped at {}: the node would have panicked", start + at);
        }
    }
    assert!(tried > 0, "no flip made redb panic: the test proves nothing");
}
