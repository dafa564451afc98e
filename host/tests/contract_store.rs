//! The store format is a contract with every store already written: a node
//! must load what an earlier version wrote. `contracts/store-v1/` holds a
//! redb data directory and an etcd dump written by the code of schema 1
//! (JSON rows; the etcd log of whole turns and a checkpoint),
//! `contracts/store-v2/` and `store-v2-late/` the same written by the code
//! of schema 2 (postcard records; the second with what schema 2 gained
//! later), and `contracts/store-v3/` by the code of schema 3 (the tagged
//! CBOR records of `store/records/`), from the turns
//! below: placements and a tombstone, homes with every allocation reason
//! (the fallbacks' every kind included), built-in and uploaded strategies
//! with a component's bytes, the activation history with every cause, a
//! signal, a drain, a leaving region, a hand-off, the rebalance queue, a
//! removed type. Each test opens its fixture with this code and checks that
//! it loads to exactly the state those turns make in memory, value by value.
//! A fixture of an older schema is migrated as it opens: the tests check
//! the schema after, the values again after a reopen, the copy of the older
//! data kept, and the refusal under `--no-migrate`.
//!
//! A failure here means this build cannot read stores that exist: keep
//! reading (or migrating) every schema, never bless a fixture again.
//! `SHARDALLOC_BLESS=1` writes the fixtures of the current schema (never
//! under `CI`) into `contracts/store-v{SCHEMA_VERSION}/`: only for a new
//! schema version; the older directories are never written.

use crate::bless;
use crate::etcd;

use std::path::{Path, PathBuf};

use etcd::Etcd;
use shardalloc::coordinator::{
    Change, ChangedBy, Freeze, FreezeScope, Home, PlacementEntry, RegionRecord, ShardLoad, Stamp,
};
use shardalloc::store::redb::kept_copy;
use shardalloc::store::{
    ActivationRecord, ComponentRecord, EtcdConfig, EtcdStore, Loaded, MemoryStore, RedbStore, SCHEMA_VERSION, Store,
    StoreError, Turn, TypeRecord,
};
use shardalloc::strategy::external::AllocationReason;
use shardalloc::strategy::{ActivationCause, FaultKind, StrategyError, StrategySource};
use shardalloc_etcd::{Client, ConnectOptions, ops, pb};
use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;

/// The prefix the etcd dump was written under (any prefix loads it).
const ETCD_PREFIX: &str = "/fixture/";

/// The directory of `fixture`.
fn fixtures(fixture: Fixture) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts").join(fixture.dir)
}

/// Writing the fixtures was asked for: only ever the newest of the current
/// schema (the one that holds every turn).
fn bless(fixture: Fixture) -> bool {
    let newest = V3[V3.len() - 1];
    fixture.schema == SCHEMA_VERSION && fixture.added == newest.added && bless::blessing()
}

/// The uploaded component's bytes (the store does not look inside).
fn component() -> Vec<u8> {
    (0..3_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn region(address: &str, join_order: u64, labels: &[(&str, &str)], proxy_only: bool) -> Change {
    Change::RegionRegistered(RegionRecord {
        address: address.into(),
        incarnation: 1_700_000_000_000 + join_order,
        roles: vec!["backend".into(), format!("role-{join_order}")],
        app_version: format!("2.{join_order}.0"),
        join_order,
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        proxy_only,
        draining: false,
        leaving: false,
        shards: vec![],
        registered_at: None,
        capacity: RegionCapacity::default(),
    })
}

fn attributes(pairs: &[(&str, &str)]) -> ShardAttributes {
    ShardAttributes::new(pairs.iter().copied()).expect("within the limits")
}

fn home(shard: &str, region: &str, reason: AllocationReason, at: u64) -> Change {
    Change::HomeSet { shard: shard.into(), home: Home { region: region.into(), reason: reason.into(), at, epoch: 0 } }
}

fn fault(kind: FaultKind, detail: &str) -> AllocationReason {
    AllocationReason::Fallback(StrategyError::Fault { kind, detail: detail.into() })
}

fn activation(strategy: StrategySource, name: &str, cause: ActivationCause, at_ms: u64) -> ActivationRecord {
    ActivationRecord { strategy, name: name.into(), version: "1.0.0".into(), config: String::new(), cause, at_ms }
}

/// The turns every fixture holds.
fn base_turns() -> Vec<Turn> {
    let digest = shardalloc::strategy::source::digest_of(&component());
    let uploaded = StrategySource::Digest(digest.clone());
    let least = StrategySource::Builtin("least-shard".into());
    let strategy = AllocationReason::Strategy { name: "least-shard".into(), version: "1.0.0".into() };
    let placed = |target: Option<&str>, timestamp, written_at| PlacementEntry {
        target: target.map(Into::into),
        stamp: Stamp::new(timestamp, "node-a"),
        written_at,
    };
    let declare =
        |strategy: &StrategySource, config: &str| TypeRecord { strategy: strategy.clone(), config: config.into() };
    vec![
        Turn {
            types: [("cart".into(), declare(&least, "")), ("orders".into(), declare(&uploaded, r#"{"spread":2}"#))]
                .into(),
            components: vec![ComponentRecord {
                digest: digest.clone(),
                name: "orders-strategy".into(),
                version: "1.2.0".into(),
                size: component().len() as u64,
                uploaded_at_ms: 1_764_633_600_000,
            }],
            activations: vec![
                ("cart".into(), activation(least.clone(), "least-shard", ActivationCause::Initial, 1_764_633_600_001)),
                (
                    "orders".into(),
                    activation(uploaded.clone(), "orders-strategy", ActivationCause::Initial, 1_764_633_600_002),
                ),
            ],
            ..Turn::default()
        },
        Turn {
            changes: [(
                "cart".into(),
                vec![
                    region("10.0.0.1:2552", 0, &[("zone", "a"), ("rack", "r1")], false),
                    region("10.0.0.2:2552", 1, &[("zone", "b")], false),
                    region("10.0.0.3:2552", 2, &[], true),
                    region("10.0.0.4:2552", 3, &[("zone", "c")], false),
                    home("s-strategy", "10.0.0.1:2552", strategy.clone(), 5_000),
                    home("s-placement", "10.0.0.2:2552", AllocationReason::Placement, 5_001),
                    home(
                        "s-refused",
                        "10.0.0.1:2552",
                        AllocationReason::Fallback(StrategyError::Refused("no region fits".into())),
                        5_002,
                    ),
                    home(
                        "s-invalid",
                        "10.0.0.2:2552",
                        AllocationReason::Fallback(StrategyError::Invalid("index 9 of 3 regions".into())),
                        5_003,
                    ),
                    home("s-trap", "10.0.0.1:2552", fault(FaultKind::Trap, "wasm trap: unreachable"), 5_004),
                    home("s-deadline", "10.0.0.2:2552", fault(FaultKind::Deadline, "interrupted after 50 ms"), 5_005),
                    home("s-memory", "10.0.0.4:2552", fault(FaultKind::Memory, "memory cap 64 MiB"), 5_006),
                    Change::PlacementWritten {
                        shard: "s-placement".into(),
                        entry: placed(Some("10.0.0.2:2552"), 7, 5_001),
                    },
                    Change::PlacementWritten {
                        shard: "s-pinned".into(),
                        entry: placed(Some("10.0.0.4:2552"), 8, 5_007),
                    },
                    Change::PlacementWritten { shard: "s-unpinned".into(), entry: placed(None, 9, 5_008) },
                    Change::PlacementWritten { shard: "s-purged".into(), entry: placed(None, 10, 5_009) },
                    Change::SignalSet { signal: Some(r#"{"prefer":"zone-a","weight":0.5}"#.into()) },
                ],
            )]
            .into(),
            ..Turn::default()
        },
        Turn {
            changes: [(
                "cart".into(),
                vec![
                    Change::RebalanceQueued { shard: "s-strategy".into() },
                    Change::RebalanceQueued { shard: "s-trap".into() },
                    Change::HandOffStarted { shard: "s-deadline".into(), from: "10.0.0.2:2552".into() },
                    Change::RegionDraining { address: "10.0.0.2:2552".into(), draining: true },
                    Change::RegionLeaving { address: "10.0.0.4:2552".into() },
                    Change::PlacementPurged { shard: "s-purged".into() },
                ],
            )]
            .into(),
            types: [("gone".into(), declare(&StrategySource::Builtin("hash".into()), ""))].into(),
            activations: vec![
                (
                    "cart".into(),
                    activation(
                        StrategySource::Builtin("hash".into()),
                        "hash",
                        ActivationCause::Operator,
                        1_764_633_700_000,
                    ),
                ),
                ("cart".into(), activation(least.clone(), "least-shard", ActivationCause::Rollback, 1_764_633_800_000)),
                (
                    "orders".into(),
                    activation(uploaded.clone(), "orders-strategy", ActivationCause::AutoRollback, 1_764_633_900_000),
                ),
            ],
            ..Turn::default()
        },
        Turn {
            changes: [
                (
                    "cart".into(),
                    vec![
                        Change::RebalanceUnqueued { shard: "s-trap".into() },
                        Change::HandOffStarted { shard: "s-trap".into(), from: "10.0.0.1:2552".into() },
                        Change::HandOffEnded { shard: "s-trap".into() },
                        Change::HomeRemoved { shard: "s-trap".into() },
                        home("s-trap", "10.0.0.1:2552", strategy.clone(), 6_000),
                        Change::RegionRegistered(RegionRecord {
                            address: "10.0.0.5:2552".into(),
                            incarnation: 7,
                            join_order: 4,
                            ..RegionRecord::default()
                        }),
                        Change::RegionRemoved { address: "10.0.0.5:2552".into() },
                    ],
                ),
                (
                    "orders".into(),
                    vec![
                        region("10.0.1.1:2552", 0, &[("zone", "a")], false),
                        home(
                            "o-1",
                            "10.0.1.1:2552",
                            AllocationReason::Strategy { name: "orders-strategy".into(), version: "1.2.0".into() },
                            7_000,
                        ),
                    ],
                ),
            ]
            .into(),
            removed_types: vec!["gone".into()],
            ..Turn::default()
        },
        Turn {
            changes: [(
                "cart".into(),
                vec![
                    Change::SignalSet { signal: None },
                    Change::SignalSet { signal: Some(r#"{"prefer":"zone-b"}"#.into()) },
                ],
            )]
            .into(),
            ..Turn::default()
        },
    ]
}

/// What schema 2 gained after its first fixture was written (loads,
/// freezes and drains, the shards' epochs), in two turns: the first goes
/// before [`base_turns`]' third (so an etcd checkpoint holds it), the
/// second after them all (so the etcd log does), in the fixtures that hold
/// them (`store-v2-late/`, and every schema's since).
fn late_turns() -> [Turn; 2] {
    let at = |shard: &str, region: &str, epoch: u64| Change::HomeSet {
        shard: shard.into(),
        home: Home {
            region: region.into(),
            reason: AllocationReason::Strategy { name: "least-shard".into(), version: "1.0.0".into() }.into(),
            at: 8_000 + epoch,
            epoch,
        },
    };
    let cart = |changes: Vec<Change>| Turn { changes: [("cart".into(), changes)].into(), ..Turn::default() };
    [
        cart(vec![
            at("s-epoch", "10.0.0.1:2552", 3),
            Change::LoadsSaved {
                loads: vec![
                    ("s-strategy".into(), Some(ShardLoad { load: 12.5, moved_at: Some(6_500) })),
                    ("s-placement".into(), Some(ShardLoad { load: 0.25, moved_at: None })),
                    ("s-refused".into(), Some(ShardLoad { load: 3.0, moved_at: Some(6_600) })),
                ],
            },
            Change::FreezeSet {
                freeze: Freeze {
                    scope: FreezeScope::Type,
                    reason: "deploy of cart 2.1".into(),
                    since: 8_100,
                    until: Some(9_100),
                    strict: true,
                },
            },
            Change::FreezeSet {
                freeze: Freeze {
                    scope: FreezeScope::Maintenance,
                    reason: "rack r1 power work".into(),
                    since: 8_200,
                    until: None,
                    strict: false,
                },
            },
        ]),
        cart(vec![
            at("s-epoch-later", "10.0.0.3:2552", 5),
            Change::LoadsSaved { loads: vec![("s-refused".into(), None)] },
            Change::FreezeLifted {
                scope: FreezeScope::Maintenance,
                at: 8_300,
                by: ChangedBy::Operator,
                reason: "done early".into(),
                expired: false,
            },
            Change::RegionDraining { address: "10.0.0.1:2552".into(), draining: true },
            Change::DrainStarted { address: "10.0.0.1:2552".into(), at: 8_400 },
        ]),
    ]
}

/// A fixture: a redb data directory and an etcd dump, written by the code
/// of `schema` from [`base_turns`], with [`late_turns`] among them when
/// `late`, and the first `added` of [`added_turns`] after them.
#[derive(Debug, Clone, Copy)]
struct Fixture {
    schema: u64,
    dir: &'static str,
    late: bool,
    added: usize,
}

/// Schema 1, written before anything below.
const V1: Fixture = Fixture { schema: 1, dir: "store-v1", late: false, added: 0 };
/// Schema 2 as first written.
const V2: Fixture = Fixture { schema: 2, dir: "store-v2", late: false, added: 0 };
/// Schema 2 with what it gained later (written by its last code).
const V2_LATE: Fixture = Fixture { schema: 2, dir: "store-v2-late", late: true, added: 0 };
/// Every fixture of schema 3, the current one: as first written, then one
/// more for each field added to it (the last is the one blessing writes).
const V3: [Fixture; 4] = [
    Fixture { schema: 3, dir: "store-v3", late: true, added: 0 },
    Fixture { schema: 3, dir: "store-v3.1", late: true, added: 1 },
    Fixture { schema: 3, dir: "store-v3.2", late: true, added: 2 },
    Fixture { schema: 3, dir: "store-v3.3", late: true, added: 3 },
];

/// The fields added to schema 3 after its first fixture, one turn each,
/// in order: fixture `store-v3.N` holds the first N. Adding a field to a
/// record adds its turn here and its fixture to [`V3`].
fn added_turns() -> Vec<Turn> {
    let cart = |changes: Vec<Change>| Turn { changes: [("cart".into(), changes)].into(), ..Turn::default() };
    vec![
        // 3.1: a region's registration time.
        cart(vec![Change::RegionRegistered(RegionRecord {
            address: "10.0.0.6:2552".into(),
            incarnation: 11,
            join_order: 9,
            registered_at: Some(9_000),
            ..RegionRecord::default()
        })]),
        // 3.2: shard attributes (a table of their own in redb, a change in
        // the etcd log): two shards get some, one of them loses them again.
        cart(vec![
            Change::AttributesSet { shard: "s-strategy".into(), attributes: attributes(&[("tenant", "acme")]) },
            Change::AttributesSet {
                shard: "s-homeless".into(),
                attributes: attributes(&[("tenant", "globex"), ("tier", "gold")]),
            },
            Change::AttributesSet { shard: "s-strategy".into(), attributes: attributes(&[]) },
            Change::AttributesSet { shard: "s-placement".into(), attributes: attributes(&[("tier", "")]) },
        ]),
        // 3.3: a region's declared capacity.
        cart(vec![Change::RegionRegistered(RegionRecord {
            address: "10.0.0.7:2552".into(),
            incarnation: 12,
            join_order: 10,
            capacity: RegionCapacity::new([("load", 800.5), ("memory-mb", 4096.0)]).unwrap(),
            ..RegionRecord::default()
        })]),
    ]
}

impl Fixture {
    fn turns(self) -> Vec<Turn> {
        let mut turns = base_turns();
        if self.late {
            let [before_third, last] = late_turns();
            turns.insert(2, before_third);
            turns.push(last);
        }
        turns.extend(added_turns().into_iter().take(self.added));
        turns
    }
}

/// Commits `fixture`'s turns (and the component's blob first) to `store`, calling
/// `committed` with each revision.
fn write_with(store: &dyn Store, fixture: Fixture, committed: impl Fn(u64)) {
    store.put_blob(&shardalloc::strategy::source::digest_of(&component()), &component()).expect("put the blob");
    for (revision, turn) in fixture.turns().iter().enumerate() {
        committed(store.commit(revision as u64, turn).expect("commit a fixture turn"));
    }
}

fn write(store: &dyn Store, fixture: Fixture) {
    write_with(store, fixture, |_| {});
}

/// What the turns make, in memory.
fn expected(fixture: Fixture) -> Loaded {
    let memory = MemoryStore::new();
    write(&memory, fixture);
    memory.load().expect("load the memory store")
}

/// Checks that `store`, opened from the fixture `what` of `schema`, holds
/// exactly what [`turns`] wrote, and is of the current schema now, naming
/// the contract and the value at fault.
fn check(store: &dyn Store, fixture: Fixture, what: &str) {
    let Fixture { schema, dir, .. } = fixture;
    let contract = format!("the store format (schema {schema}, contracts/{dir}/{what})");
    let loaded = store.load().unwrap_or_else(|e| panic!("{contract} no longer loads: {e}"));
    let expected = expected(fixture);
    assert_eq!(loaded.revision, expected.revision, "{contract}: the revision");
    assert_eq!(loaded.components, expected.components, "{contract}: the component records");
    assert_eq!(
        loaded.types.keys().collect::<Vec<_>>(),
        expected.types.keys().collect::<Vec<_>>(),
        "{contract}: the types"
    );
    for (name, want) in &expected.types {
        let got = &loaded.types[name];
        assert_eq!(got.record, want.record, "{contract}: type {name}'s declaration");
        assert_eq!(got.activations, want.activations, "{contract}: type {name}'s activation history");
        let (got, want) = (&got.durable, &want.durable);
        assert_eq!(got.regions, want.regions, "{contract}: type {name}'s regions");
        assert_eq!(got.homes, want.homes, "{contract}: type {name}'s homes");
        assert_eq!(got.handoffs, want.handoffs, "{contract}: type {name}'s hand-offs");
        assert_eq!(got.placements, want.placements, "{contract}: type {name}'s placements");
        assert_eq!(got.queued, want.queued, "{contract}: type {name}'s rebalance queue");
        assert_eq!(got.next_join_order, want.next_join_order, "{contract}: type {name}'s next join order");
        assert_eq!(got.signal, want.signal, "{contract}: type {name}'s signal");
    }
    assert_eq!(loaded, expected, "{contract}: the whole load");
    // A few values spelled out, so a reader sees what the fixture holds.
    let cart = &loaded.types["cart"].durable;
    assert_eq!(*cart.homes["s-memory"].reason, fault(FaultKind::Memory, "memory cap 64 MiB"), "{contract}");
    assert!(cart.regions["10.0.0.2:2552"].draining && cart.regions["10.0.0.4:2552"].leaving, "{contract}");
    assert_eq!(cart.signal.as_deref(), Some(r#"{"prefer":"zone-b"}"#), "{contract}");
    assert_eq!(cart.placements["s-unpinned"].target, None, "{contract}: the tombstone");
    assert!(!loaded.types.contains_key("gone"), "{contract}: a removed type came back");
    if fixture.late {
        assert_eq!((cart.homes["s-epoch-later"].epoch, cart.epoch), (5, 5), "{contract}: the epochs");
        assert_eq!(cart.loads["s-strategy"], ShardLoad { load: 12.5, moved_at: Some(6_500) }, "{contract}: a load");
        assert!(!cart.loads.contains_key("s-refused"), "{contract}: a forgotten load came back");
        assert!(cart.operations.freezes.now.contains_key(&FreezeScope::Type), "{contract}: the freeze");
        assert_eq!(cart.operations.freezes.history.len(), 3, "{contract}: the freeze history");
        assert_eq!(cart.operations.drains.get("10.0.0.1:2552"), Some(&8_400), "{contract}: the drain");
    }
    // A field added to schema 3 reads as absent from the stores written
    // before it, and as written from those after.
    let registered_at = cart.regions.get("10.0.0.6:2552").map(|r| r.registered_at);
    let want = if fixture.added >= 1 { Some(Some(9_000)) } else { None };
    assert_eq!(registered_at, want, "{contract}: a region's registration time (3.1)");
    assert!(cart.regions.values().filter(|r| r.address != "10.0.0.6:2552").all(|r| r.registered_at.is_none()));
    let attributed: Vec<(&str, Vec<(&str, &str)>)> =
        cart.attributes.iter().map(|(shard, a)| (shard.as_str(), a.iter().collect())).collect();
    let want = match fixture.added >= 2 {
        true => vec![("s-homeless", vec![("tenant", "globex"), ("tier", "gold")]), ("s-placement", vec![("tier", "")])],
        false => vec![],
    };
    assert_eq!(attributed, want, "{contract}: the shards' attributes (3.2)");
    let capacity = cart.regions.get("10.0.0.7:2552").map(|r| r.capacity.iter().collect::<Vec<_>>());
    let want = (fixture.added >= 3).then(|| vec![("load", 800.5), ("memory-mb", 4096.0)]);
    assert_eq!(capacity, want, "{contract}: a region's declared capacity (3.3)");
    assert!(cart.regions.values().filter(|r| r.address != "10.0.0.7:2552").all(|r| r.capacity.is_empty()));
    let digest = shardalloc::strategy::source::digest_of(&component());
    assert_eq!(store.blob(&digest).expect("read the blob").as_deref(), Some(&component()[..]), "{contract}: the blob");
    assert_eq!(store.blob_digests().expect("list the blobs"), [digest], "{contract}: the blobs");
    let page = store.placements("cart", None, 10).expect("a page of placements").expect("the type");
    let want: Vec<(String, String)> =
        [("s-pinned", "10.0.0.4:2552"), ("s-placement", "10.0.0.2:2552")].map(|(s, t)| (s.into(), t.into())).into();
    assert_eq!(page, want, "{contract}: the placements page");
    let homes = store.homes("cart", Some("s-memory"), 2).expect("a page of homes").expect("the type");
    let want: Vec<&str> = homes.iter().map(|(shard, _)| shard.as_str()).collect();
    assert_eq!(want, ["s-placement", "s-refused"], "{contract}: the homes page");
    assert_eq!(
        store.schema_version().expect("the schema version"),
        SCHEMA_VERSION,
        "{contract}: the schema version once open (migrated)"
    );
}

/// Copies directory `from` into a fresh temporary directory.
fn copied(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// Runs `open` until the file's lock is free: a store this test dropped a
/// moment ago can stay locked while another test's child process (etcd)
/// holds a copy of its descriptor between fork and exec.
fn unlocked<T>(mut open: impl FnMut() -> Result<T, redb::DatabaseError>) -> Result<T, redb::DatabaseError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match open() {
            Err(redb::DatabaseError::DatabaseAlreadyOpen) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Opens the redb fixture of `schema` (a copy), as it opens in production.
fn open_redb(fixture: Fixture) -> (tempfile::TempDir, RedbStore) {
    let Fixture { schema, dir, .. } = fixture;
    let path = fixtures(fixture).join("redb");
    if bless(fixture) {
        let _ = std::fs::remove_dir_all(&path);
        write(&RedbStore::open(&path).expect("create the fixture"), fixture);
    }
    let copy = copied(&path);
    let store = RedbStore::open(copy.path())
        .unwrap_or_else(|e| panic!("the store format (schema {schema}, contracts/{dir}/redb) no longer opens: {e}"));
    let dir = copy;
    (dir, store)
}

#[test]
fn a_v1_redb_store_migrates_and_loads_every_value() {
    migrates_redb(V1);
}

#[test]
fn a_v1_redb_store_is_refused_without_migrating() {
    let fixture = fixtures(V1).join("redb");
    let dir = copied(&fixture);
    let error = RedbStore::open_with(dir.path(), false).err().expect("a schema-1 store opened under --no-migrate");
    let message = error.to_string();
    assert!(matches!(error, StoreError::NotMigrated { found: 1, current: 3, .. }), "{message}");
    for words in ["schema version 1", "schema version 3", "without --no-migrate"] {
        assert!(message.contains(words), "the refusal does not say {words:?}: {message}");
    }
    let original = std::fs::read(fixture.join("shardalloc.redb")).unwrap();
    assert!(std::fs::read(dir.path().join("shardalloc.redb")).unwrap() == original, "the refusal wrote to the store");
    assert!(!dir.path().join(kept_copy(1)).exists(), "the refusal made a copy");
}

/// Opens the redb fixture of an older schema, migrating it, and checks it
/// before and after a reopen, and the copy it kept: refused as its schema
/// without migrating, and migrated to the same values.
fn migrates_redb(fixture: Fixture) {
    let (dir, store) = open_redb(fixture);
    check(&store, fixture, "redb");
    drop(store);
    // The migration rewrote every row in one transaction, then compacted:
    // nothing is left to compact.
    let mut db = unlocked(|| redb::Database::open(dir.path().join("shardalloc.redb"))).expect("open the migrated file");
    assert!(!db.compact().expect("compact"), "the migrated store was left uncompacted");
    // Schema 2's side tables are folded into the rows and gone.
    let tables: Vec<String> = {
        use redb::{ReadableDatabase, TableHandle};
        let txn = db.begin_read().unwrap();
        txn.list_tables().unwrap().map(|t| t.name().to_owned()).collect()
    };
    for gone in ["operations", "home-epochs", "epochs"] {
        assert!(!tables.iter().any(|t| t == gone), "schema 2's table {gone} is still there: {tables:?}");
    }
    drop(db);
    check(&RedbStore::open(dir.path()).expect("the migrated fixture opens again"), fixture, "redb (reopened)");
    let copy = dir.path().join(kept_copy(fixture.schema));
    assert!(copy.exists(), "the migration kept no copy of the older file ({})", copy.display());
    let restored = tempfile::tempdir().unwrap();
    std::fs::copy(&copy, restored.path().join("shardalloc.redb")).unwrap();
    std::fs::copy(dir.path().join("shardalloc-data"), restored.path().join("shardalloc-data")).unwrap();
    match RedbStore::open_with(restored.path(), false) {
        Err(StoreError::NotMigrated { found, current, .. }) if found == fixture.schema && current == SCHEMA_VERSION => {
        }
        other => panic!("the kept copy is not a schema-{} store: {:?}", fixture.schema, other.map(|_| ())),
    }
    check(&RedbStore::open(restored.path()).expect("the kept copy opens"), fixture, "redb (its kept copy)");
}

#[test]
fn a_v2_redb_store_migrates_and_loads_every_value() {
    migrates_redb(V2);
}

#[test]
fn a_late_v2_redb_store_migrates_and_loads_every_value() {
    migrates_redb(V2_LATE);
}

#[test]
fn a_v3_redb_store_loads_every_value() {
    for fixture in V3 {
        let (dir, store) = open_redb(fixture);
        check(&store, fixture, "redb");
        drop(store);
        check(&RedbStore::open(dir.path()).expect("the fixture opens again"), fixture, "redb");
        for schema in 1..SCHEMA_VERSION {
            assert!(!dir.path().join(kept_copy(schema)).exists(), "a schema-3 store was copied as if migrated");
        }
    }
}

#[test]
fn a_redb_store_of_a_newer_schema_is_refused() {
    let (dir, store) = open_redb(V2);
    drop(store);
    {
        let db = unlocked(|| redb::Database::create(dir.path().join("shardalloc.redb"))).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("meta")).unwrap().insert("schema", 4).unwrap();
        txn.commit().unwrap();
    }
    let error = RedbStore::open(dir.path()).err().expect("a schema-4 store opened");
    assert!(matches!(error, StoreError::NewerSchema { found: 4, supported: 3 }), "{error}");
    let message = error.to_string();
    assert!(message.contains("schema version 4") && message.contains("up to 3"), "{message}");
}

/// One key of the etcd dump: its name under the prefix, and its value as
/// text when it is UTF-8, else as hex.
#[derive(serde::Serialize, serde::Deserialize)]
struct DumpedKey {
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

fn client(etcd: &Etcd) -> (tokio::runtime::Runtime, Client) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = runtime.block_on(Client::connect(std::slice::from_ref(&etcd.url), ConnectOptions::default())).unwrap();
    (runtime, client)
}

fn etcd_config(etcd: &Etcd, prefix: &str) -> EtcdConfig {
    // A checkpoint every 3 commits: the dump holds a checkpoint and the
    // log after it.
    EtcdConfig { prefix: prefix.to_owned(), checkpoint_every: 3, ..EtcdConfig::new(vec![etcd.url.clone()]) }
}

/// Writes the fixture turns to etcd under [`ETCD_PREFIX`] and dumps every key.
fn dump_etcd(etcd: &Etcd, fixture: Fixture, to: &Path) {
    let (runtime, client) = client(etcd);
    // The checkpoint of revision 3 is written then, and no other: the dump
    // holds it and the log after it.
    let config = EtcdConfig { checkpoint_every: u64::MAX, ..etcd_config(etcd, ETCD_PREFIX) };
    let store = EtcdStore::open(&config).expect("open etcd");
    write_with(&store, fixture, |revision| {
        if revision == 3 {
            store.checkpoint_now().expect("write the checkpoint");
        }
    });
    drop(store);
    let range = pb::RangeRequest { range_end: ops::prefix_end(ETCD_PREFIX.as_bytes()), ..ops::range(ETCD_PREFIX) };
    let answer = runtime.block_on(client.range(range)).unwrap();
    let keys: Vec<DumpedKey> = answer
        .kvs
        .iter()
        .map(|kv| {
            let key = String::from_utf8(kv.key[ETCD_PREFIX.len()..].to_vec()).unwrap();
            match String::from_utf8(kv.value.clone()) {
                Ok(text) => DumpedKey { key, text: Some(text), hex: None },
                Err(_) => DumpedKey { key, text: None, hex: Some(hex(&kv.value)) },
            }
        })
        .collect();
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::write(to, serde_json::to_string_pretty(&keys).unwrap() + "\n").unwrap();
}

/// The etcd dump of `schema`'s fixture, written first when blessing.
fn dumped(etcd: &Etcd, fixture: Fixture) -> Vec<DumpedKey> {
    let dump = fixtures(fixture).join("etcd.json");
    if bless(fixture) {
        dump_etcd(etcd, fixture, &dump);
    }
    let keys: Vec<DumpedKey> = serde_json::from_str(&std::fs::read_to_string(&dump).expect("read the etcd dump"))
        .expect("parse the etcd dump");
    assert!(keys.iter().any(|k| k.key == "checkpoint"), "the dump holds no checkpoint");
    assert!(keys.iter().any(|k| k.key.starts_with("log/")), "the dump holds no log after its checkpoint");
    keys
}

fn value(key: &DumpedKey) -> Vec<u8> {
    match (&key.text, &key.hex) {
        (Some(text), None) => text.clone().into_bytes(),
        (None, Some(hex)) => unhex(hex),
        _ => panic!("key {} has no value, or two", key.key),
    }
}

/// Puts every dumped key under `prefix`.
fn restore(etcd: &Etcd, keys: &[DumpedKey], prefix: &str) {
    let (runtime, client) = client(etcd);
    for key in keys {
        let txn = ops::txn(Vec::new(), vec![ops::put(format!("{prefix}{}", key.key), value(key))], Vec::new());
        runtime.block_on(client.txn(txn)).unwrap();
    }
}

/// The value of `key`, if any.
fn get(etcd: &Etcd, key: &str) -> Option<Vec<u8>> {
    let (runtime, client) = client(etcd);
    runtime.block_on(client.range(ops::range(key))).unwrap().kvs.into_iter().next().map(|kv| kv.value)
}

fn open_etcd(etcd: &Etcd, fixture: Fixture, prefix: &str) -> EtcdStore {
    let Fixture { schema, dir, .. } = fixture;
    EtcdStore::open(&etcd_config(etcd, prefix)).unwrap_or_else(|e| {
        panic!("the store format (schema {schema}, contracts/{dir}/etcd.json) no longer opens: {e}")
    })
}

#[test]
fn a_v1_etcd_store_migrates_and_loads_every_value() {
    migrates_etcd(V1);
}

#[test]
fn nodes_that_migrate_one_v1_etcd_store_at_once_all_open_it_and_keep_its_copy() {
    let etcd = Etcd::start();
    let keys = dumped(&etcd, V1);
    for round in 0..5 {
        // Several nodes of this version start together on a schema-1 store.
        let prefix = format!("/together-{round}/");
        restore(&etcd, &keys, &prefix);
        let opened: Vec<Result<EtcdStore, String>> = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..3)
                .map(|_| scope.spawn(|| EtcdStore::open(&etcd_config(&etcd, &prefix)).map_err(|e| e.to_string())))
                .collect();
            starts.into_iter().map(|start| start.join().unwrap()).collect()
        });
        for store in opened {
            let store = store.unwrap_or_else(|e| panic!("round {round}: a node migrating beside another failed: {e}"));
            check(&store, V1, "etcd.json (migrated by several nodes at once)");
        }
        for key in keys.iter().filter(|k| !k.key.starts_with("blobs/")) {
            let kept = get(&etcd, &format!("{prefix}v1/{}", key.key));
            assert_eq!(kept, Some(value(key)), "round {round}: the schema-1 key {} was not kept", key.key);
        }
    }
}

#[test]
fn a_v1_etcd_store_is_refused_without_migrating_or_while_led() {
    let etcd = Etcd::start();
    let keys = dumped(&etcd, V1);
    let prefix = "/refused/";
    restore(&etcd, &keys, prefix);
    let config = EtcdConfig { migrate: false, ..etcd_config(&etcd, prefix) };
    let error = EtcdStore::open(&config).err().expect("a schema-1 store opened under --no-migrate");
    let message = error.to_string();
    assert!(matches!(error, StoreError::NotMigrated { found: 1, current: 3, .. }), "{message}");
    for words in ["schema version 1", "schema version 3", "without --no-migrate"] {
        assert!(message.contains(words), "the refusal does not say {words:?}: {message}");
    }
    // A node of schema 1 may lead it: no migration, nothing written.
    let leader = format!("{prefix}leader");
    restore(&etcd, &[DumpedKey { key: "leader".into(), text: Some("an older node".into()), hex: None }], prefix);
    let error = EtcdStore::open(&etcd_config(&etcd, prefix)).err().expect("migrated under a leader");
    assert!(error.to_string().contains("leads it"), "{error}");
    assert_eq!(get(&etcd, &format!("{prefix}schema")).as_deref(), Some(&b"1"[..]), "the schema moved");
    for key in &keys {
        assert_eq!(get(&etcd, &format!("{prefix}{}", key.key)), Some(value(key)), "{} changed", key.key);
    }
    assert_eq!(get(&etcd, &format!("{prefix}v1/schema")), None, "a refused migration copied keys");
    // Once the old leader is gone, it migrates.
    let (runtime, client) = client(&etcd);
    runtime.block_on(client.txn(ops::txn(Vec::new(), vec![ops::delete(leader)], Vec::new()))).unwrap();
    check(&open_etcd(&etcd, V1, prefix), V1, "etcd.json");
}

/// Opens the etcd dump of an older schema, migrating it, and checks it
/// before and after a reopen; every key but the blobs is kept under
/// `v{schema}/`, as it was, and the kept keys migrate to the same values.
fn migrates_etcd(fixture: Fixture) {
    let etcd = Etcd::start();
    let keys = dumped(&etcd, fixture);
    // Loaded under another prefix than it was written with.
    let prefix = "/restored/";
    restore(&etcd, &keys, prefix);
    check(&open_etcd(&etcd, fixture, prefix), fixture, "etcd.json");
    check(&open_etcd(&etcd, fixture, prefix), fixture, "etcd.json (reopened)");
    let copy = format!("{prefix}v{}/", fixture.schema);
    for key in keys.iter().filter(|k| !k.key.starts_with("blobs/")) {
        let kept = get(&etcd, &format!("{copy}{}", key.key));
        assert_eq!(kept, Some(value(key)), "the older key {} was not kept under {copy}", key.key);
    }
    let current = SCHEMA_VERSION.to_string();
    assert_eq!(get(&etcd, &format!("{prefix}schema")).as_deref(), Some(current.as_bytes()), "the schema key");
    let kept: Vec<DumpedKey> = keys
        .iter()
        .map(|k| {
            let kept =
                if k.key.starts_with("blobs/") { value(k) } else { get(&etcd, &format!("{copy}{}", k.key)).unwrap() };
            DumpedKey { key: k.key.clone(), text: None, hex: Some(hex(&kept)) }
        })
        .collect();
    restore(&etcd, &kept, "/from-the-copy/");
    check(&open_etcd(&etcd, fixture, "/from-the-copy/"), fixture, "etcd.json (its kept copy)");
}

#[test]
fn a_v2_etcd_store_migrates_and_loads_every_value() {
    migrates_etcd(V2);
}

#[test]
fn a_late_v2_etcd_store_migrates_and_loads_every_value() {
    migrates_etcd(V2_LATE);
}

#[test]
fn a_v3_etcd_store_loads_every_value() {
    let etcd = Etcd::start();
    for fixture in V3 {
        let keys = dumped(&etcd, fixture);
        let prefix = format!("/restored-{}/", fixture.added);
        restore(&etcd, &keys, &prefix);
        check(&open_etcd(&etcd, fixture, &prefix), fixture, "etcd.json");
        for schema in 1..SCHEMA_VERSION {
            assert_eq!(get(&etcd, &format!("{prefix}v{schema}/schema")), None, "a schema-3 store was copied");
        }
    }
}

#[test]
fn an_etcd_store_of_a_newer_schema_is_refused() {
    let etcd = Etcd::start();
    let prefix = "/newer/";
    restore(&etcd, &[DumpedKey { key: "schema".into(), text: Some("4".into()), hex: None }], prefix);
    let error = EtcdStore::open(&etcd_config(&etcd, prefix)).err().expect("a schema-4 store opened");
    assert!(matches!(error, StoreError::NewerSchema { found: 4, supported: 3 }), "{error}");
    let message = error.to_string();
    assert!(message.contains("schema version 4") && message.contains("up to 3"), "{message}");
}

/// `shardalloc store drop-v1 …` (`drop-copies`' older name, still
/// taken): (exit code, stdout, stderr).
fn drop_v1(args: &[&str]) -> (i32, String, String) {
    store_command("drop-v1", args)
}

/// `shardalloc store COMMAND …`: (exit code, stdout, stderr).
fn store_command(command: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shardalloc"))
        .args(["store", command])
        .args(args)
        .env("SHARDALLOC_CACHE_DIR", "off")
        .output()
        .expect("run shardalloc");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

#[test]
fn store_drop_copies_drops_the_copy_a_v2_migration_kept_and_check_names_it() {
    let (dir, store) = open_redb(V2_LATE);
    drop(store);
    let copy = dir.path().join(kept_copy(2));
    let size = std::fs::metadata(&copy).expect("the migration kept a copy").len();
    let data = dir.path().to_str().unwrap();
    let (status, out, err) = store_command("check", &["--data", data]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("schema 3: current") && out.contains("shardalloc.v2.redb"), "{out}");
    let (status, out, err) = store_command("drop-copies", &["--data", data]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("dropped") && out.contains(&format!("({size} bytes)")), "{out}");
    assert!(!copy.exists(), "the copy is still there");
    check(&RedbStore::open(dir.path()).expect("the store opens without its copy"), V2_LATE, "redb (copy dropped)");
}

#[test]
fn store_drop_v1_drops_the_copy_a_redb_migration_kept() {
    let (dir, store) = open_redb(V1);
    drop(store);
    let copy = dir.path().join(kept_copy(1));
    let size = std::fs::metadata(&copy).expect("the migration kept a copy").len();
    let data = dir.path().to_str().unwrap();
    let (status, out, err) = drop_v1(&["--data", data]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("dropped") && out.contains(&format!("({size} bytes)")), "{out}");
    assert!(!copy.exists(), "the copy is still there");
    check(&RedbStore::open(dir.path()).expect("the store opens without its copy"), V1, "redb (its copy dropped)");
    let (status, out, err) = drop_v1(&["--data", data]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("nothing to drop"), "{out}");
}

#[test]
fn store_drop_v1_drops_the_keys_an_etcd_migration_kept() {
    let etcd = Etcd::start();
    let keys = dumped(&etcd, V1);
    let prefix = "/dropped/";
    restore(&etcd, &keys, prefix);
    let args = ["--etcd", etcd.url.as_str(), "--etcd-prefix", prefix];
    // Not migrated yet: its schema-1 keys are the store, not a copy.
    let (status, _, err) = drop_v1(&args);
    assert_eq!(status, 1, "a schema-1 store's keys were dropped");
    assert!(err.contains("schema 1") && err.contains("schema 3"), "{err}");
    assert_eq!(get(&etcd, &format!("{prefix}schema")).as_deref(), Some(&b"1"[..]), "the refusal wrote");
    // Migrated, with its copy kept.
    let store = open_etcd(&etcd, V1, prefix);
    let kept: Vec<&DumpedKey> = keys.iter().filter(|k| !k.key.starts_with("blobs/")).collect();
    // Refused while a node migrates it (its token in `migrating`).
    let (runtime, client) = client(&etcd);
    let put = ops::txn(Vec::new(), vec![ops::put(format!("{prefix}migrating"), "token")], Vec::new());
    runtime.block_on(client.txn(put)).unwrap();
    let refused = store.drop_kept_copies().expect_err("dropped during a migration");
    assert!(refused.to_string().contains("being migrated"), "{refused}");
    let delete = ops::txn(Vec::new(), vec![ops::delete(format!("{prefix}migrating"))], Vec::new());
    runtime.block_on(client.txn(delete)).unwrap();
    assert!(get(&etcd, &format!("{prefix}v1/{}", kept[0].key)).is_some(), "the refusal dropped keys");

    let (status, out, err) = drop_v1(&args);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains(&format!("dropped {} keys under {prefix}v1/", kept.len())), "{out}");
    for key in &kept {
        assert_eq!(get(&etcd, &format!("{prefix}v1/{}", key.key)), None, "{} is still kept", key.key);
    }
    check(&open_etcd(&etcd, V2, prefix), V1, "etcd.json (its copy dropped)");
    let (status, out, err) = drop_v1(&args);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("nothing to drop"), "{out}");
}
