//! Placements through the coordinator: all-or-nothing validation,
//! last-writer-wins on (timestamp, origin), tombstones that stop a late
//! stale write from resurrecting a removed placement, and proxy-only
//! regions that take part in hand-offs but never get shards.

use crate::coordinator;

use coordinator::{Harness, least_shard, sends};
use shardalloc::coordinator::{
    Command, Config, Coordinator, Event, NodeMessage, OperatorRequest, PlacementError, Register, Reply, Stamp,
};

fn reply(commands: &[Command]) -> Reply {
    commands
        .iter()
        .find_map(|c| match c {
            Command::Reply { reply, .. } => Some(reply.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no reply in {commands:#?}"))
}

fn set(h: &mut Harness, placements: &[(&str, &str)], at: u64, origin: &str) -> Reply {
    let placements = placements.iter().map(|(s, t)| (s.to_string(), t.to_string())).collect();
    reply(&h.operator(OperatorRequest::SetPlacements { placements, stamp: Stamp::new(at, origin) }))
}

fn remove(h: &mut Harness, shards: &[&str], at: u64, origin: &str) -> Reply {
    let shards = shards.iter().map(|s| s.to_string()).collect();
    reply(&h.operator(OperatorRequest::RemovePlacements { shards, stamp: Stamp::new(at, origin) }))
}

fn target(h: &Harness, shard: &str) -> Option<String> {
    h.c.durable().placements.get(shard).and_then(|e| e.target.clone())
}

fn two() -> Harness {
    let mut h = Harness::new(Config::default());
    h.register("a");
    h.register("b");
    h
}

#[test]
fn invalid_placements_are_refused_as_a_whole() {
    let mut h = two();
    let long = "x".repeat(257);
    let cases: Vec<(Vec<(&str, &str)>, PlacementError)> = vec![
        (vec![], PlacementError::Empty),
        (vec![("1", "a"), ("", "b")], PlacementError::EmptyShard { index: 1 }),
        (vec![("1", "a"), (long.as_str(), "b")], PlacementError::ShardTooLong { index: 1, len: 257 }),
        (vec![("1", "a"), ("2", "")], PlacementError::EmptyTarget { index: 1, shard: "2".into() }),
        (vec![("1", "a"), ("1", "b")], PlacementError::Duplicate { index: 1, shard: "1".into() }),
    ];
    for (placements, error) in cases {
        assert_eq!(set(&mut h, &placements, 10, "op"), Reply::PlacementRefused(error.clone()), "{placements:?}");
        assert!(h.c.durable().placements.is_empty(), "{error}: nothing half-applied");
    }
    let ok = "y".repeat(256);
    assert_eq!(
        set(&mut h, &[(ok.as_str(), "a")], 10, "op"),
        Reply::PlacementsWritten { applied: vec![ok.clone()], stale: vec![] }
    );
}

#[test]
fn the_last_writer_wins_by_timestamp_then_origin() {
    let mut h = two();
    assert_eq!(
        set(&mut h, &[("42", "b")], 100, "x"),
        Reply::PlacementsWritten { applied: vec!["42".into()], stale: vec![] }
    );
    assert_eq!(
        set(&mut h, &[("42", "a")], 50, "y"),
        Reply::PlacementsWritten { applied: vec![], stale: vec!["42".into()] }
    );
    assert_eq!(target(&h, "42").as_deref(), Some("b"));
    // Same timestamp: the origin breaks the tie, the same way on every node.
    assert_eq!(
        set(&mut h, &[("42", "a")], 100, "w"),
        Reply::PlacementsWritten { applied: vec![], stale: vec!["42".into()] }
    );
    assert_eq!(
        set(&mut h, &[("42", "a")], 100, "z"),
        Reply::PlacementsWritten { applied: vec!["42".into()], stale: vec![] }
    );
    assert_eq!(target(&h, "42").as_deref(), Some("a"));
    let listed = reply(&h.operator(OperatorRequest::ListPlacements));
    assert_eq!(listed, Reply::Placements(vec![("42".into(), "a".into(), Stamp::new(100, "z"))]));
}

#[test]
fn a_tombstone_stops_a_late_stale_write_until_it_expires() {
    let config = Config { tombstone_retention_ms: 60_000, ..Config::default() };
    let mut h = Harness::new(config);
    h.register("a");
    h.register("b");
    set(&mut h, &[("42", "b")], 100, "op");
    assert_eq!(
        remove(&mut h, &["42"], 200, "op"),
        Reply::PlacementsWritten { applied: vec!["42".into()], stale: vec![] }
    );
    assert_eq!(target(&h, "42"), None);
    assert!(h.c.durable().placements.contains_key("42"), "a tombstone is kept");
    // A write stamped before the removal arrives late: it must not resurrect the placement.
    assert_eq!(
        set(&mut h, &[("42", "b")], 150, "op"),
        Reply::PlacementsWritten { applied: vec![], stale: vec!["42".into()] }
    );
    assert_eq!(target(&h, "42"), None);
    // Once the retention period has passed, ticks purge the tombstone.
    h.tick(30_000);
    assert!(h.c.durable().placements.contains_key("42"));
    h.tick(31_000);
    assert!(!h.c.durable().placements.contains_key("42"), "purged after the retention period");
    assert_eq!(h.store.placements.get("42"), None, "and the purge was persisted");
}

#[test]
fn tombstones_expire_in_the_order_written_and_across_a_restart() {
    let config = Config { tombstone_retention_ms: 60_000, ..Config::default() };
    let mut h = Harness::new(config.clone());
    h.register("a");
    set(&mut h, &[("1", "a"), ("2", "a"), ("3", "a")], 100, "op");
    h.tick(1_000);
    remove(&mut h, &["2"], 200, "op");
    h.tick(10_000);
    remove(&mut h, &["1"], 300, "op");
    // A tombstone written again (a newer removal) counts from its new write.
    h.tick(10_000);
    set(&mut h, &[("2", "a")], 400, "op");
    remove(&mut h, &["2"], 500, "op");
    let (mut recovered, _) = Coordinator::recover(config, least_shard(), h.store.clone(), h.now).unwrap();
    let kept = |c: &Coordinator| c.durable().placements.keys().cloned().collect::<Vec<_>>();
    assert_eq!(kept(&recovered), ["1", "2", "3"]);
    let at = |ms| Event::Tick { now: ms };
    let removed_1 = h.now - 10_000;
    recovered.handle(at(removed_1 + 59_999));
    assert_eq!(kept(&recovered), ["1", "2", "3"]);
    recovered.handle(at(removed_1 + 60_000));
    assert_eq!(kept(&recovered), ["2", "3"], "the first tombstone to expire is 1's");
    recovered.handle(at(h.now + 60_000));
    assert_eq!(kept(&recovered), ["3"]);
}

#[test]
fn placement_changes_reach_every_region_after_they_are_persisted() {
    let mut h = two();
    h.auto_persist = false;
    let placements = vec![("42".to_string(), "b".to_string())];
    let out = h.operator(OperatorRequest::SetPlacements { placements, stamp: Stamp::new(5, "op") });
    assert!(sends(&out).is_empty(), "nothing revealed before Persisted: {out:#?}");
    let batch = out
        .iter()
        .find_map(|c| match c {
            Command::Persist { batch, .. } => Some(*batch),
            _ => None,
        })
        .expect("a persist");
    let out = h.c.handle(Event::Persisted { now: h.now, batch });
    let mut told: Vec<String> = sends(&out)
        .into_iter()
        .filter(|(_, m)| matches!(m, NodeMessage::PlacementChanged { shard, target } if shard == "42" && target.as_deref() == Some("b")))
        .map(|(to, _)| to)
        .collect();
    told.sort();
    assert_eq!(told, ["a", "b"]);
}

#[test]
fn proxy_only_regions_join_hand_offs_but_never_get_shards() {
    let mut h = Harness::new(Config::default());
    h.register("a");
    let register = Register { address: "p".into(), incarnation: 1, proxy_only: true, ..Default::default() };
    h.step(Event::Register { now: h.now, register, capacity: Default::default() });
    for i in 0..20 {
        h.get("p", &format!("s{i}"));
    }
    assert!(h.c.durable().regions["p"].shards.is_empty(), "a proxy never hosts shards");
    assert_eq!(h.c.durable().regions["a"].shards.len(), 20);
    h.register("b");
    let out = h.tick(10_000);
    let begins: Vec<String> = sends(&out)
        .into_iter()
        .filter(|(_, m)| matches!(m, NodeMessage::BeginHandOff { .. }))
        .map(|(to, _)| to)
        .collect();
    assert!(begins.contains(&"p".to_string()), "the proxy is told to stop routing: {begins:?}");
    let out = h.cooperate(out);
    assert!(!out.is_empty());
    assert!(h.c.durable().regions["p"].shards.is_empty());
    assert!(!h.c.durable().regions["b"].shards.is_empty(), "shards moved to the new region");
}

#[test]
fn the_signal_reaches_the_strategy_and_survives_a_restart() {
    use shardalloc::coordinator::Coordinator;
    use shardalloc::strategy::external::ExternalAllocation;
    use shardalloc::strategy::guarded::Guarded;

    let zone =
        || ExternalAllocation::new(Guarded::new(shardalloc::strategy::builtin::native("zone", "").unwrap().unwrap()));
    let mut h = Harness::new(Config::default());
    h.c = Coordinator::new(Config::default(), zone()).unwrap();
    for (address, zone) in [("eu-1", "eu"), ("us-1", "us")] {
        let labels = [("zone".to_string(), zone.to_string())].into_iter().collect();
        let register = Register { address: address.into(), incarnation: 1, labels, ..Default::default() };
        h.step(Event::Register { now: h.now, register, capacity: Default::default() });
    }
    let refused = reply(&h.operator(OperatorRequest::SetSignal { signal: Some("{not json".into()) }));
    assert!(matches!(&refused, Reply::SignalRefused(m) if m.contains("not JSON")), "{refused:?}");
    let signal = r#"{"prefixes":{"eu/":"eu","us/":"us"}}"#.to_string();
    assert_eq!(reply(&h.operator(OperatorRequest::SetSignal { signal: Some(signal.clone()) })), Reply::Done);
    h.get("eu-1", "us/42");
    assert_eq!(&*h.c.durable().homes["us/42"].region, "us-1", "the zone strategy read the signal");
    // What was persisted brings the signal back after a restart.
    let (recovered, _) = Coordinator::recover(Config::default(), zone(), h.store.clone(), h.now).unwrap();
    assert_eq!(recovered.durable().signal.as_deref(), Some(signal.as_str()));
}

#[test]
fn a_stale_or_malformed_registration_is_refused_and_changes_nothing() {
    let mut h = Harness::new(Config::default());
    let register = |h: &mut Harness, incarnation: u64, address: &str| {
        let register = Register { address: address.into(), incarnation, ..Default::default() };
        h.step(Event::Register { now: h.now, register, capacity: Default::default() })
    };
    register(&mut h, 2, "a");
    register(&mut h, 1, "b");
    h.get("a", "s1");
    assert_eq!(&*h.c.durable().homes["s1"].region, "a");
    let before = h.c.durable().clone();
    let out = register(&mut h, 1, "a");
    assert!(
        sends(&out).iter().any(
            |(to, m)| to == "a" && matches!(m, NodeMessage::RegisterRefused { reason } if reason.contains("older"))
        ),
        "{out:#?}"
    );
    assert_eq!(h.c.durable(), &before, "the live incarnation keeps its shards");
    let long = "x".repeat(300);
    let out = register(&mut h, 1, &long);
    assert!(
        sends(&out)
            .iter()
            .any(|(_, m)| matches!(m, NodeMessage::RegisterRefused { reason } if reason.contains("300 bytes")))
    );
    assert_eq!(h.c.durable(), &before);
}
