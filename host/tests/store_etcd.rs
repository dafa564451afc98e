//! The etcd store against a real etcd on 127.0.0.1: the conformance suite
//! (with checkpoints folding the log while it runs), fencing of a deposed
//! leader, turns over one request's size, left-over parts, damaged
//! checkpoints and blobs, a newer schema.

use crate::etcd;

use etcd::Etcd;
use shardalloc::coordinator::{Change, PlacementEntry, Stamp};
use shardalloc::store::etcd::Fence;
use shardalloc::store::etcd::keys::{Keys, PART_BYTES};
use shardalloc::store::{EtcdConfig, EtcdStore, Store, StoreError, Turn, TypeRecord, conformance};
use shardalloc::strategy::StrategySource;
use shardalloc_etcd::{Client, ConnectOptions, ops, pb};

fn config(etcd: &Etcd, prefix: &str) -> EtcdConfig {
    EtcdConfig { prefix: prefix.to_owned(), ..EtcdConfig::new(vec![etcd.url.clone()]) }
}

fn open(etcd: &Etcd, prefix: &str) -> EtcdStore {
    EtcdStore::open(&config(etcd, prefix)).unwrap()
}

/// A plain client for looking at and tampering with keys.
struct Raw {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl Raw {
    fn new(etcd: &Etcd) -> Raw {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client =
            runtime.block_on(Client::connect(std::slice::from_ref(&etcd.url), ConnectOptions::default())).unwrap();
        Raw { runtime, client }
    }

    /// Puts `value` under `key`; the etcd revision it made.
    fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> i64 {
        let txn = ops::txn(Vec::new(), vec![ops::put(key, value)], Vec::new());
        let answer = self.runtime.block_on(self.client.txn(txn)).unwrap();
        ops::revision_of(answer.header.as_ref())
    }

    fn delete(&self, key: impl Into<Vec<u8>>) {
        let request = pb::DeleteRangeRequest { key: key.into(), ..Default::default() };
        self.runtime.block_on(self.client.delete_range(request)).unwrap();
    }

    /// Whether `key` exists.
    fn exists(&self, key: &str) -> bool {
        let request = pb::RangeRequest { count_only: true, ..ops::range(key) };
        self.runtime.block_on(self.client.range(request)).unwrap().count == 1
    }

    /// How many keys start with `prefix`.
    fn count(&self, prefix: &str) -> i64 {
        let request =
            pb::RangeRequest { range_end: ops::prefix_end(prefix.as_bytes()), count_only: true, ..ops::range(prefix) };
        self.runtime.block_on(self.client.range(request)).unwrap().count
    }
}

fn declare(name: &str) -> Turn {
    let record = TypeRecord { strategy: StrategySource::Builtin("hash".into()), config: String::new() };
    Turn { types: [(name.to_owned(), record)].into(), ..Turn::default() }
}

fn placements(n: usize) -> Turn {
    let changes = (0..n)
        .map(|i| Change::PlacementWritten {
            shard: format!("shard-{i:06}"),
            entry: PlacementEntry {
                target: Some(format!("region-{}", i % 7)),
                stamp: Stamp::new(i as u64, "test"),
                written_at: 1,
            },
        })
        .collect();
    Turn { changes: [("cart".to_owned(), changes)].into(), ..declare("cart") }
}

#[test]
fn etcd_passes_the_conformance_suite_with_checkpoints_on_the_way() {
    let etcd = Etcd::start();
    let config = EtcdConfig { checkpoint_every: 150, ..config(&etcd, "/conformance/") };
    conformance::suite(&|| Ok(Box::new(EtcdStore::open(&config)?)));
    let raw = Raw::new(&etcd);
    assert!(raw.exists("/conformance/checkpoint"), "the suite's 2,000+ commits made no checkpoint");
}

#[test]
fn a_deposed_leaders_write_is_refused_and_writes_nothing() {
    let etcd = Etcd::start();
    let raw = Raw::new(&etcd);
    let store = open(&etcd, "/fenced/");
    store.load().unwrap();
    let key = store.keys().leader();
    let create_revision = raw.put(key.clone(), "node-a");
    store.set_fence(Some(Fence { key: key.clone(), create_revision }));
    let revision = store.commit(0, &declare("before")).unwrap();

    // Another node takes over: the key is deleted and created anew.
    raw.delete(key.clone());
    raw.put(key.clone(), "node-b");
    let error = store.commit(revision, &declare("after")).unwrap_err();
    assert!(matches!(&error, StoreError::Deposed { key: k } if *k == key), "{error}");
    assert!(error.to_string().contains("no longer the leader"), "{error}");

    let reader = open(&etcd, "/fenced/");
    let loaded = reader.load().unwrap();
    assert_eq!(loaded.revision, revision, "the refused write moved the revision");
    assert!(!loaded.types.contains_key("after"), "the refused write was applied");

    // A large turn is refused whole, not a part of it.
    let error = store.commit(revision, &placements(20_000)).unwrap_err();
    assert!(matches!(error, StoreError::Deposed { .. }), "{error}");
    assert_eq!(reader.load().unwrap().revision, revision);
}

#[test]
fn a_turn_over_one_request_is_written_in_parts_and_left_overs_are_ignored() {
    let etcd = Etcd::start();
    let store = open(&etcd, "/big/");
    store.load().unwrap();
    let turn = placements(20_000);
    assert!(serde_json::to_vec(&turn).unwrap().len() > 2 * PART_BYTES, "the turn must need several parts");
    let revision = store.commit(0, &turn).unwrap();
    let before = store.load().unwrap();
    assert_eq!(before.types["cart"].durable.placements.len(), 20_000);

    // Parts of a commit that never moved the revision (its writer died).
    let raw = Raw::new(&etcd);
    let keys = Keys::new("/big/");
    for part in 0..3 {
        raw.put(keys.log_part(revision + 1, part), vec![9u8; 40]);
    }
    let again = open(&etcd, "/big/");
    assert_eq!(again.load().unwrap(), before, "left-over parts changed the load");
    let next = again.commit(revision, &declare("next")).unwrap();
    let loaded = open(&etcd, "/big/").load().unwrap();
    assert_eq!(loaded.revision, next);
    assert!(loaded.types.contains_key("next"));
    assert_eq!(loaded.types["cart"], before.types["cart"]);
}

#[test]
fn a_checkpoint_replaces_the_log_and_a_damaged_one_is_named() {
    let etcd = Etcd::start();
    let store = open(&etcd, "/ckpt/");
    store.load().unwrap();
    let mut revision = store.commit(0, &placements(3_000)).unwrap();
    for i in 0..10 {
        revision = store.commit(revision, &declare(&format!("t{i}"))).unwrap();
    }
    store.checkpoint_now().unwrap();
    let raw = Raw::new(&etcd);
    assert_eq!(raw.count("/ckpt/log/"), 0, "the checkpoint left the log it covers");
    revision = store.commit(revision, &declare("after-checkpoint")).unwrap();
    let loaded = open(&etcd, "/ckpt/").load().unwrap();
    assert_eq!(loaded, store.load().unwrap());
    assert_eq!(loaded.revision, revision);
    assert!(loaded.types.contains_key("after-checkpoint") && loaded.types.contains_key("t9"));

    let chunk = Keys::new("/ckpt/").checkpoint_chunk(revision - 1, 0);
    raw.put(chunk, b"{not the state".to_vec());
    let error = open(&etcd, "/ckpt/").load().unwrap_err();
    assert!(matches!(error, StoreError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains("/ckpt/checkpoint"), "{error}");
}

#[test]
fn a_damaged_blob_and_a_newer_schema_are_refused() {
    let etcd = Etcd::start();
    let store = open(&etcd, "/blobs/");
    let bytes = vec![7u8; 1_500_000];
    let digest = shardalloc::strategy::source::digest_of(&bytes);
    store.put_blob(&digest, &bytes).unwrap();
    assert_eq!(store.blob(&digest).unwrap().unwrap(), bytes);
    let raw = Raw::new(&etcd);
    let chunk = Keys::new("/blobs/").blob_chunk(&digest, 1);
    raw.put(chunk, vec![8u8; 10]);
    let error = store.blob(&digest).unwrap_err();
    assert!(error.to_string().contains("do not match its digest"), "{error}");

    raw.put("/newer/schema", "99");
    let error = EtcdStore::open(&config(&etcd, "/newer/")).err().unwrap();
    assert!(matches!(error, StoreError::NewerSchema { found: 99, .. }), "{error}");
}

#[test]
fn an_unreachable_etcd_is_an_error_naming_it_not_a_hang() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = EtcdConfig::new(vec![format!("http://127.0.0.1:{port}")]);
    let started = std::time::Instant::now();
    let error = EtcdStore::open(&config).err().expect("nothing listens there");
    assert!(error.to_string().contains("etcd"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
}

#[test]
fn store_copy_moves_an_embedded_store_into_an_empty_prefix_only() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let bytes = vec![3u8; 2_500_000];
    let digest = shardalloc::strategy::source::digest_of(&bytes);
    let before = {
        let redb = shardalloc::store::RedbStore::open(dir.path()).unwrap();
        redb.load().unwrap();
        let revision = redb.commit(0, &placements(500)).unwrap();
        redb.commit(revision, &declare("other")).unwrap();
        redb.put_blob(&digest, &bytes).unwrap();
        redb.load().unwrap()
    };
    let copy = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_shardalloc"))
            .args(["store", "copy", "--from"])
            .arg(dir.path())
            .args(["--to-etcd", &etcd.url, "--etcd-prefix", "/copied/"])
            .output()
            .unwrap()
    };
    let output = copy();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("revision 2: 2 types") && stdout.contains("500 placements"), "{stdout}");
    let store = open(&etcd, "/copied/");
    assert_eq!(store.load().unwrap(), before, "the copy loads differently");
    assert_eq!(store.blob(&digest).unwrap().unwrap(), bytes);
    assert_eq!(store.commit(2, &declare("next")).unwrap(), 3, "commits continue after the copy");

    let output = copy();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a second copy into the same prefix succeeded");
    assert!(stderr.contains("already holds a store"), "{stderr}");
}

#[test]
fn a_revision_key_set_back_is_refused_not_served() {
    let etcd = Etcd::start();
    let store = open(&etcd, "/back/");
    store.load().unwrap();
    let mut revision = 0;
    for i in 0..5 {
        revision = store.commit(revision, &declare(&format!("t{i}"))).unwrap();
    }
    // The revision key is set back by 3 (tampering, or a restore of the key alone).
    let raw = Raw::new(&etcd);
    raw.put(Keys::new("/back/").revision(), (revision - 3).to_string());
    // A node that never saw the newer state finds the newer entries in the log…
    let error = open(&etcd, "/back/").load().unwrap_err();
    assert!(
        matches!(error, StoreError::WentBack { found, seen, .. } if found == revision - 3 && seen == revision),
        "{error}"
    );
    assert!(error.to_string().contains("set back"), "{error}");
    // …and the node that committed them refuses to go back too.
    let error = store.load().unwrap_err();
    assert!(matches!(error, StoreError::WentBack { .. }), "{error}");
    // Nothing was overwritten: the key restored, the whole state loads.
    raw.put(Keys::new("/back/").revision(), revision.to_string());
    let loaded = open(&etcd, "/back/").load().unwrap();
    assert_eq!(loaded.revision, revision);
    assert!(loaded.types.contains_key("t4"));
}
