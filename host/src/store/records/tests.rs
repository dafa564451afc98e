//! Every record's round trip: the core's value → record → bytes → record →
//! the core's value again, equal.

use std::sync::Arc;

use super::{TypeValues, checkpoint, decode, decode_as, encode, home_row, read_home_row, turn, type_row};
use crate::coordinator::{
    Change, ChangedBy, Freeze, FreezeScope, Home, Interned, Operations, PlacementEntry, RegionRecord, ShardLoad, Stamp,
};
use crate::store::{ActivationRecord, ComponentRecord, Loaded, MemoryStore, Store, Turn, TypeRecord};
use crate::strategy::external::AllocationReason;
use crate::strategy::{ActivationCause, FaultKind, StrategyError, StrategySource};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn reasons() -> Vec<AllocationReason> {
    let fault = |kind, detail: &str| AllocationReason::Fallback(StrategyError::Fault { kind, detail: detail.into() });
    vec![
        AllocationReason::Placement,
        AllocationReason::Strategy { name: "zone".into(), version: "1.2.3".into() },
        AllocationReason::Fallback(StrategyError::Refused("no".into())),
        AllocationReason::Fallback(StrategyError::Invalid("index 9".into())),
        fault(FaultKind::Trap, "unreachable"),
        fault(FaultKind::Deadline, "50 ms"),
        fault(FaultKind::Memory, "64 MiB"),
    ]
}

fn region(address: &str) -> RegionRecord {
    RegionRecord {
        address: address.into(),
        incarnation: 7,
        roles: vec!["a".into(), "b".into()],
        app_version: "2.0".into(),
        join_order: 3,
        labels: [("zone".to_owned(), "a".to_owned())].into(),
        proxy_only: true,
        draining: true,
        leaving: true,
        shards: vec!["s1".into(), "s0".into()],
        registered_at: None,
        capacity: shardalloc_proto::capacity::RegionCapacity::new([("load", 12.5)]).unwrap(),
    }
}

fn home(region: &str, reason: AllocationReason) -> Home {
    Home { region: Arc::from(region), reason: Arc::new(reason), at: 42, epoch: 0 }
}

fn activation(strategy: StrategySource, cause: ActivationCause) -> ActivationRecord {
    ActivationRecord { strategy, name: "n".into(), version: "v".into(), config: "{}".into(), cause, at_ms: 9 }
}

fn freeze() -> Freeze {
    Freeze { scope: FreezeScope::Cluster, reason: "upgrade".into(), since: 10, until: Some(20), strict: true }
}

/// A turn with every change, every reason, every cause.
fn every_change() -> Turn {
    let mut changes = vec![
        Change::RegionRegistered(region("r1")),
        Change::RegionDraining { address: "r1".into(), draining: false },
        Change::RegionLeaving { address: "r1".into() },
        Change::HomeRemoved { shard: "s0".into() },
        Change::HandOffStarted { shard: "s0".into(), from: "r1".into() },
        Change::HandOffEnded { shard: "s0".into() },
        Change::PlacementWritten {
            shard: "p".into(),
            entry: PlacementEntry { target: Some("r1".into()), stamp: Stamp::new(5, "op"), written_at: 6 },
        },
        Change::PlacementWritten {
            shard: "t".into(),
            entry: PlacementEntry { target: None, stamp: Stamp::new(7, "node"), written_at: 8 },
        },
        Change::PlacementPurged { shard: "t".into() },
        Change::RebalanceQueued { shard: "s1".into() },
        Change::RebalanceUnqueued { shard: "s1".into() },
        Change::SignalSet { signal: Some("{}".into()) },
        Change::SignalSet { signal: None },
        Change::LoadsSaved {
            loads: vec![("s1".into(), Some(ShardLoad { load: 2.5, moved_at: Some(3) })), ("s2".into(), None)],
        },
        Change::FreezeSet { freeze: freeze() },
        Change::FreezeLifted {
            scope: FreezeScope::Cluster,
            at: 12,
            by: ChangedBy::Automatic,
            reason: "expired".into(),
            expired: true,
        },
        Change::DrainStarted { address: "r1".into(), at: 13 },
        Change::RegionRemoved { address: "r1".into() },
    ];
    for (i, reason) in reasons().into_iter().enumerate() {
        let epoch = if i == 0 { 0 } else { 40 + i as u64 };
        changes.push(Change::HomeSet { shard: format!("s{i}"), home: Home { epoch, ..home("r1", reason) } });
    }
    let causes = [ActivationCause::Initial, ActivationCause::Operator, ActivationCause::Rollback];
    let mut activations: Vec<_> =
        causes.into_iter().map(|c| ("a".to_owned(), activation(StrategySource::Builtin("hash".into()), c))).collect();
    let uploaded = StrategySource::Digest(DIGEST.into());
    activations.push(("b".into(), activation(uploaded.clone(), ActivationCause::AutoRollback)));
    let component =
        ComponentRecord { digest: DIGEST.into(), name: "c".into(), version: "1".into(), size: 3, uploaded_at_ms: 4 };
    Turn {
        changes: [("a".to_owned(), changes), ("empty".to_owned(), vec![])].into(),
        types: [("a".to_owned(), TypeRecord { strategy: uploaded, config: r#"{"x":1}"#.into() })].into(),
        activations,
        components: vec![component],
        removed_components: vec!["sha256:gone".into()],
        removed_types: vec!["old".into()],
    }
}

#[test]
fn a_turn_round_trips() {
    let want = every_change();
    let bytes = encode(&turn(&want));
    let back: Turn = decode::<super::Turn>(&bytes).unwrap().into();
    assert_eq!(format!("{back:?}"), format!("{want:?}"));
    for (t, changes) in &want.changes {
        assert_eq!(&back.changes[t], changes, "type {t}");
    }
    assert_eq!(back.types, want.types);
    assert_eq!(back.activations, want.activations);
    assert_eq!(back.components, want.components);
    assert_eq!((back.removed_components, back.removed_types), (want.removed_components, want.removed_types));
}

#[test]
fn a_whole_state_round_trips() {
    let mut changes = vec![Change::RegionRegistered(RegionRecord { shards: vec![], ..region("r1") })];
    changes.push(Change::RegionRegistered(RegionRecord { shards: vec![], ..region("r2") }));
    for (i, reason) in reasons().into_iter().enumerate() {
        let home = Home { epoch: 10 + i as u64, ..home(if i % 2 == 0 { "r1" } else { "r2" }, reason) };
        changes.push(Change::HomeSet { shard: format!("s{i}"), home });
    }
    changes
        .extend(every_change().changes["a"].iter().filter(|c| matches!(c, Change::PlacementWritten { .. })).cloned());
    changes.push(Change::HandOffStarted { shard: "s1".into(), from: "r2".into() });
    changes.push(Change::RebalanceQueued { shard: "s2".into() });
    changes.push(Change::SignalSet { signal: Some("{}".into()) });
    changes.push(Change::LoadsSaved { loads: vec![("s1".into(), Some(ShardLoad { load: 1.5, moved_at: Some(4) }))] });
    changes.push(Change::FreezeSet { freeze: freeze() });
    changes.push(Change::RegionDraining { address: "r2".into(), draining: true });
    changes.push(Change::DrainStarted { address: "r2".into(), at: 14 });
    let memory = MemoryStore::new();
    let turn = Turn { changes: [("a".to_owned(), changes)].into(), ..every_change() };
    memory.commit(0, &Turn { removed_types: vec![], ..turn }).unwrap();
    let want = memory.load().unwrap();
    assert_eq!(want.types["a"].durable.homes.len(), reasons().len());
    assert_eq!(want.types["a"].durable.epoch, 10 + reasons().len() as u64 - 1);
    assert!(!want.types["a"].durable.loads.is_empty() && !want.types["a"].durable.operations.drains.is_empty());
    // The whole state in one record, as etcd's checkpoint keeps it.
    let back: Loaded = decode::<super::Checkpoint>(&encode(&checkpoint(&want))).unwrap().into();
    assert_eq!(back, want);
    // The homes are interned as they load: one address shared.
    let on_r1: Vec<&Home> = back.types["a"].durable.homes.values().filter(|h| &*h.region == "r1").collect();
    assert!(on_r1.len() > 1 && on_r1.windows(2).all(|w| Arc::ptr_eq(&w[0].region, &w[1].region)));
}

#[test]
fn redb_rows_round_trip() {
    for (i, reason) in reasons().into_iter().enumerate() {
        let want = Home { epoch: i as u64 * 1_000, ..home("r9", reason) };
        let bytes = encode(&home_row(&want, 77));
        let (back, order): (Home, u64) =
            decode_as::<super::v1::HomeRow, super::v2::HomeRow, super::HomeRow, _>(3, &bytes).unwrap();
        assert_eq!((&back, order), (&want, 77));
        // Read in place, as a start reads it: the same values.
        let mut interned = Interned::default();
        let (region, read) = read_home_row(&bytes, &mut interned).unwrap();
        assert_eq!(
            (region, &*read.reason, read.at, read.epoch, read.order),
            (&*want.region, &*want.reason, want.at, want.epoch, 77)
        );
        // A second row with the same reason shares it.
        let again = read_home_row(&bytes, &mut interned).unwrap().1;
        assert!(Arc::ptr_eq(&read.reason, &again.reason), "{want:?}");
    }
    let record = TypeRecord { strategy: StrategySource::Builtin("least-shard".into()), config: String::new() };
    let mut operations = Operations::default();
    operations.apply(&Change::FreezeSet { freeze: freeze() });
    operations.apply(&Change::DrainStarted { address: "r1".into(), at: 15 });
    let full = TypeValues {
        record: Some(record),
        signal: Some("{}".into()),
        next_join_order: 12,
        epoch: 99,
        operations: operations.clone(),
    };
    for want in [full, TypeValues::default()] {
        let bytes = encode(&type_row(&want));
        let back: TypeValues =
            decode_as::<super::v1::TypeRow, super::v2::TypeRow, super::TypeRow, _>(3, &bytes).unwrap();
        assert_eq!(back, want);
    }
    let region = region("r2");
    let back: RegionRecord =
        decode_as::<super::v1::Region, super::v2::Region, super::Region, _>(3, &encode(&super::Region::from(&region)))
            .unwrap();
    assert_eq!(back, region);
}

#[test]
fn schema_one_rows_read_as_json() {
    let json = br#"{"home":{"region":"r1","reason":{"fallback":{"fault":{"kind":"deadline","detail":"d"}}},"at":5},"order":3}"#;
    let (home, order): (Home, u64) =
        decode_as::<super::v1::HomeRow, super::v2::HomeRow, super::HomeRow, _>(1, json).unwrap();
    assert_eq!(order, 3);
    assert_eq!(
        *home.reason,
        AllocationReason::Fallback(StrategyError::Fault { kind: FaultKind::Deadline, detail: "d".into() })
    );
    let turn = br#"{"changes":{"t":[{"change":"hand-off-started","shard":"s","from":"r"},{"change":"region-registered","address":"r","incarnation":1,"roles":[],"app_version":"","join_order":0,"labels":{},"proxy_only":false,"draining":false,"leaving":false,"shards":[]}]},"types":{},"activations":[["t",{"strategy":"hash","name":"hash","version":"1","config":"","cause":"auto-rollback","at_ms":1}]],"components":[],"removed_components":[],"removed_types":[]}"#;
    let turn: Turn = decode_as::<super::v1::Turn, super::v2::Turn, super::Turn, _>(1, turn).unwrap();
    assert_eq!(turn.changes["t"][0], Change::HandOffStarted { shard: "s".into(), from: "r".into() });
    assert_eq!(turn.activations[0].1.cause, ActivationCause::AutoRollback);
}

#[test]
fn damage_is_an_error() {
    let bytes = encode(&home_row(&home("r", AllocationReason::Placement), 1));
    assert!(decode::<super::HomeRow>(&bytes[..bytes.len() - 1]).is_err(), "a short record");
    let mut long = bytes.clone();
    long.push(0);
    assert!(decode::<super::HomeRow>(&long).is_err(), "bytes after the record");
    let mut interned = Interned::default();
    assert!(read_home_row(&bytes[..bytes.len() - 1], &mut interned).is_err(), "a short record, in place");
    assert!(read_home_row(&long, &mut interned).is_err(), "bytes after the record, in place");
    let other = decode_as::<super::v1::HomeRow, super::v2::HomeRow, super::HomeRow, (Home, u64)>(4, &bytes);
    assert!(other.is_err(), "another schema");
}

/// A `HomeRow` as a later build might grow it: one more field, under the
/// next free index.
#[derive(Debug, PartialEq, minicbor::Encode, minicbor::Decode)]
struct GrownHomeRow {
    #[n(0)]
    home: super::Home,
    #[n(1)]
    order: u64,
    #[n(2)]
    attributes: Option<std::collections::BTreeMap<String, String>>,
}

/// What "Adding a field" in `records/mod.rs` promises: a row written
/// before the field reads with it absent, and a row written with it reads
/// in a build without it (the field skipped), both as the same values.
#[test]
fn an_added_field_needs_no_new_record() {
    let want = Home { epoch: 7, ..home("r1", AllocationReason::Placement) };
    let before = encode(&home_row(&want, 5));
    let grown: GrownHomeRow = decode(&before).unwrap();
    assert_eq!((grown.order, grown.attributes), (5, None));
    let after = encode(&GrownHomeRow {
        home: super::Home::from(&want),
        order: 6,
        attributes: Some([("tenant".to_owned(), "acme".to_owned())].into()),
    });
    let (back, order): (Home, u64) = decode::<super::HomeRow>(&after).unwrap().into();
    assert_eq!((back, order), (want.clone(), 6));
    let mut interned = Interned::default();
    let (region, read) = read_home_row(&after, &mut interned).unwrap();
    assert_eq!((region, read.epoch, read.order), ("r1", 7, 6));
}
