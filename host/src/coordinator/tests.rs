//! Step-by-step tests asserting on the exact commands emitted.

use super::*;
use crate::strategy::builtin;
use crate::strategy::external::AllocationReason;
use crate::strategy::guarded::Guarded;
use shardalloc_proto::capacity::RegionCapacity;

pub(super) fn least_shard() -> ExternalAllocation {
    ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()))
}

fn strategy_reason() -> AllocationReason {
    AllocationReason::Strategy { name: "least-shard".into(), version: env!("CARGO_PKG_VERSION").into() }
}

pub(super) fn register(now: Millis, address: &str, incarnation: u64) -> Event {
    Event::Register {
        now,
        register: Register { address: address.into(), incarnation, ..Default::default() },
        capacity: Default::default(),
    }
}

/// A home request from incarnation 1.
pub(super) fn get(now: Millis, requester: &str, shard: &str) -> Event {
    get_from(now, requester, 1, shard)
}

fn get_from(now: Millis, requester: &str, incarnation: u64, shard: &str) -> Event {
    Event::GetShardHome { now, requester: requester.into(), incarnation, shard: shard.into() }
}

fn send(to: &str, message: NodeMessage) -> Command {
    Command::Send { to: to.into(), message }
}

fn home(shard: &str, region: &str, epoch: u64) -> Command {
    send(region_of(region), NodeMessage::ShardHomeEpoch { shard: shard.into(), home: region.into(), epoch })
}

fn region_of(r: &str) -> &str {
    r
}

fn home_to(to: &str, shard: &str, region: &str, epoch: u64) -> Command {
    send(to, NodeMessage::ShardHomeEpoch { shard: shard.into(), home: region.into(), epoch })
}

fn registered(to: &str, incarnation: u64) -> Command {
    send(to, NodeMessage::Registered { incarnation, sequence: 0, lease_ms: 10_000, heartbeat_interval_ms: 1_000 })
}

fn allocated(shard: &str, region: &str) -> Command {
    Command::Observe(Observation::Allocated {
        shard: shard.into(),
        region: region.into(),
        reason: strategy_reason(),
        warning: None,
    })
}

pub(super) fn home_set(shard: &str, region: &str, at: Millis, epoch: u64) -> Change {
    let home = Home { region: region.into(), reason: strategy_reason().into(), at, epoch };
    Change::HomeSet { shard: shard.into(), home }
}

/// The batch of the single Persist in `commands`.
fn batch_of(commands: &[Command]) -> u64 {
    let batches: Vec<u64> = commands
        .iter()
        .filter_map(|c| match c {
            Command::Persist { batch, .. } => Some(*batch),
            _ => None,
        })
        .collect();
    assert_eq!(batches.len(), 1, "{commands:#?}");
    batches[0]
}

fn reveals(commands: &[Command]) -> Vec<&Command> {
    commands.iter().filter(|c| matches!(c, Command::Send { .. } | Command::Reply { .. })).collect()
}

/// Feeds an event, persists its batch (if any) and returns everything.
pub(super) fn settle(c: &mut Coordinator, event: Event) -> Vec<Command> {
    let now = event.now();
    let mut out = c.handle(event);
    if out.iter().any(|c| matches!(c, Command::Persist { .. })) {
        let batch = batch_of(&out);
        out.extend(c.handle(Event::Persisted { now, batch }));
    }
    out
}

/// A coordinator with regions a and b (a older), shards s and t on a.
fn two_regions() -> Coordinator {
    two_regions_with(Config::default())
}

fn two_regions_with(config: Config) -> Coordinator {
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    settle(&mut c, get(1, "a", "s"));
    settle(&mut c, get(2, "a", "t"));
    settle(&mut c, register(3, "b", 1));
    c
}

#[test]
fn registration_and_allocation_are_revealed_only_after_persist() {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    let out = c.handle(register(0, "a", 7));
    let record = RegionRecord { address: "a".into(), incarnation: 7, registered_at: Some(0), ..Default::default() };
    assert_eq!(
        out,
        [
            Command::Observe(Observation::RegionRegistered { address: "a".into(), incarnation: 7, rehomed: 0 }),
            Command::Persist { batch: 1, changes: vec![Change::RegionRegistered(record)] },
        ]
    );
    // An unrelated reveal made while batch 1 is unpersisted waits for it too.
    let out = c.handle(get_from(1, "a", 7, "s"));
    assert_eq!(out, [allocated("s", "a"), Command::Persist { batch: 2, changes: vec![home_set("s", "a", 1, 1)] }]);
    assert_eq!(c.handle(get_from(2, "a", 7, "s")), []);
    assert_eq!(c.handle(Event::Persisted { now: 3, batch: 1 }), [registered("a", 7)]);
    assert_eq!(c.handle(Event::Persisted { now: 4, batch: 2 }), [home("s", "a", 1), home("s", "a", 1)]);
    // A known shard's home comes from the state, at once.
    assert_eq!(c.handle(get_from(5, "a", 7, "s")), [home("s", "a", 1)]);
    // A request from another incarnation is told to register.
    assert_eq!(c.handle(get_from(6, "a", 6, "s")), [send("a", NodeMessage::NotRegistered)]);
}

#[test]
fn a_region_keeps_its_registration_time_until_a_new_incarnation_registers() {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    settle(&mut c, register(10, "a", 1));
    // A reconnect, even with new labels, is the same incarnation.
    let mut again = Register { address: "a".into(), incarnation: 1, ..Default::default() };
    again.labels.insert("zone".into(), "b".into());
    settle(&mut c, Event::Register { now: 20, register: again, capacity: Default::default() });
    let record = &c.durable().regions["a"];
    assert_eq!((record.labels["zone"].as_str(), record.registered_at), ("b", Some(10)));
    // A restart is a new incarnation: its time starts again.
    settle(&mut c, register(30, "a", 2));
    assert_eq!(c.durable().regions["a"].registered_at, Some(30));
}

#[test]
fn a_region_declares_its_capacity_with_each_registration() {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    let declared = RegionCapacity::new([("load", 800.0), ("memory-mb", 4096.0)]).unwrap();
    let register_a = |now, capacity: RegionCapacity| Event::Register {
        now,
        register: Register { address: "a".into(), incarnation: 1, ..Default::default() },
        capacity,
    };
    let out = c.handle(register_a(10, declared.clone()));
    let persisted: Vec<&RegionCapacity> = out
        .iter()
        .filter_map(|command| match command {
            Command::Persist { changes, .. } => Some(changes),
            _ => None,
        })
        .flatten()
        .filter_map(|change| match change {
            Change::RegionRegistered(record) => Some(&record.capacity),
            _ => None,
        })
        .collect();
    assert_eq!(persisted, [&declared], "the capacity is stored with the region");
    settle(&mut c, Event::Persisted { now: 11, batch: 1 });
    // Strategies see every quantity, and the `load` one as the capacity.
    let region = &c.snapshot().regions[0];
    assert_eq!(region.capacity, Some(800.0));
    assert_eq!(region.quantities, declared.as_map().clone());
    // A reconnect of the same incarnation declares it again: the latest wins.
    let smaller = RegionCapacity::new([("memory-mb", 2048.0)]).unwrap();
    settle(&mut c, register_a(20, smaller.clone()));
    assert_eq!(c.durable().regions["a"].capacity, smaller);
    let region = &c.snapshot().regions[0];
    assert_eq!((region.capacity, region.quantities.len()), (None, 1), "no `load` quantity: no load capacity");
    // A plain `Register` declares none.
    settle(&mut c, register(30, "a", 1));
    assert!(c.durable().regions["a"].capacity.is_empty());
    assert!(c.snapshot().regions[0].quantities.is_empty());
}

#[test]
fn allocation_waits_for_the_minimum_number_of_regions() {
    let config = Config { min_regions: 2, ..Config::default() };
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    assert_eq!(settle(&mut c, get(1, "a", "s")), []);
    let out = settle(&mut c, register(2, "b", 1));
    assert_eq!(reveals(&out), [&registered("b", 1), &home_to("a", "s", "a", 1)]);
}

#[test]
fn unknown_regions_are_told_to_register() {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    assert_eq!(c.handle(get(0, "x", "s")), [send("x", NodeMessage::NotRegistered)]);
    let hb = Event::Heartbeat { now: 0, address: "x".into(), incarnation: 1, metrics: Default::default(), sequence: 1 };
    assert_eq!(c.handle(hb), [send("x", NodeMessage::NotRegistered)]);
}

fn begin(shard: &str, from: &str) -> Command {
    Command::Observe(Observation::HandOff { shard: shard.into(), from: from.into(), step: Step::Begin })
}

fn stop(shard: &str, from: &str) -> Command {
    Command::Observe(Observation::HandOff { shard: shard.into(), from: from.into(), step: Step::Stop })
}

pub(super) fn rebalance_now(now: Millis, shards: &[&str]) -> Event {
    Event::Operator {
        now,
        request: 9,
        op: OperatorRequest::RebalanceNow { shards: shards.iter().map(|s| s.to_string()).collect(), immediate: true },
    }
}

pub(super) fn ack(now: Millis, region: &str, shard: &str) -> Event {
    Event::BeginHandOffAck { now, region: region.into(), incarnation: 1, shard: shard.into() }
}

pub(super) fn stopped(now: Millis, region: &str, shard: &str) -> Event {
    Event::ShardStopped { now, region: region.into(), incarnation: 1, shard: shard.into() }
}

#[test]
fn hand_off_step_by_step() {
    let mut c = two_regions();
    let out = c.handle(rebalance_now(10, &["s"]));
    assert_eq!(
        out,
        [
            begin("s", "a"),
            Command::Persist {
                batch: 5,
                changes: vec![Change::HandOffStarted { shard: "s".into(), from: "a".into() }]
            }
        ]
    );
    assert_eq!(
        c.handle(Event::Persisted { now: 11, batch: 5 }),
        [
            send("a", NodeMessage::BeginHandOff { shard: "s".into() }),
            send("b", NodeMessage::BeginHandOff { shard: "s".into() }),
            Command::Reply { request: 9, reply: Reply::Rebalance { accepted: vec!["s".into()], rejected: vec![] } },
        ]
    );
    // Requests while moving are held.
    assert_eq!(c.handle(get(12, "b", "s")), []);
    assert_eq!(c.handle(ack(13, "a", "s")), []);
    assert_eq!(c.handle(ack(14, "b", "s")), [stop("s", "a"), send("a", NodeMessage::HandOff { shard: "s".into() })]);
    // A stop from the wrong region is ignored.
    assert_eq!(
        c.handle(stopped(15, "b", "s")),
        [Command::Observe(Observation::Ignored { what: "ShardStopped for s from b".into() })]
    );
    let out = c.handle(stopped(16, "a", "s"));
    assert_eq!(
        out,
        [
            Command::Observe(Observation::HandOffCompleted { shard: "s".into(), from: "a".into() }),
            allocated("s", "b"),
            Command::Persist {
                batch: 6,
                changes: vec![
                    Change::HomeRemoved { shard: "s".into() },
                    Change::HandOffEnded { shard: "s".into() },
                    home_set("s", "b", 16, 3),
                ]
            }
        ]
    );
    assert_eq!(c.handle(Event::Persisted { now: 17, batch: 6 }), [home_to("b", "s", "b", 3)]);
    assert_eq!(c.moving().count(), 0);
}

#[test]
fn hand_off_time_outs_keep_the_old_home() {
    // (acks before the deadline, step that times out, regions missing)
    let cases: [(&[&str], Step, &[&str]); 2] = [(&["a"], Step::Begin, &["b"]), (&["a", "b"], Step::Stop, &[])];
    for (acks, step, missing) in cases {
        // Deadlines shorter than the heartbeat time-outs (no heartbeats here).
        let mut c = two_regions_with(Config { handoff_timeout_ms: 3_000, ..Config::default() });
        settle(&mut c, rebalance_now(10, &["s"]));
        settle(&mut c, get(11, "b", "s"));
        for region in acks {
            c.handle(ack(12, region, "s"));
        }
        let deadline = if step == Step::Begin { 10 } else { 12 } + 3_000;
        let out = c.handle(Event::Tick { now: deadline - 1 });
        assert!(!out.iter().any(|c| matches!(c, Command::Observe(Observation::HandOffTimedOut { .. }))), "{out:?}");
        let out = c.handle(Event::Tick { now: deadline });
        let timed_out = Command::Observe(Observation::HandOffTimedOut {
            shard: "s".into(),
            from: "a".into(),
            step,
            missing: missing.iter().map(|s| s.to_string()).collect(),
        });
        assert!(out.contains(&timed_out), "{out:#?}");
        let batch = batch_of(&out);
        assert!(out.contains(&Command::Persist { batch, changes: vec![Change::HandOffEnded { shard: "s".into() }] }));
        assert_eq!(reveals(&out), Vec::<&Command>::new());
        assert_eq!(c.handle(Event::Persisted { now: deadline, batch }), [home_to("b", "s", "a", 1)]);
        assert_eq!(&*c.home("s").unwrap().region, "a");
    }
}

#[test]
fn a_dead_region_counts_as_acknowledged() {
    // No acknowledgement deadline before the removal: only the removal acknowledges.
    let mut c = two_regions_with(Config { handoff_ack_timeout_ms: 60_000, ..Config::default() });
    settle(&mut c, rebalance_now(10, &["s"]));
    c.handle(ack(11, "a", "s"));
    // a keeps heartbeating; b goes silent and is removed at 3 + 15 000.
    let hb =
        Event::Heartbeat { now: 10_000, address: "a".into(), incarnation: 1, metrics: Default::default(), sequence: 1 };
    c.handle(hb);
    c.handle(Event::Tick { now: 8_003 });
    let out = c.handle(Event::Tick { now: 15_003 });
    assert!(
        out.contains(&send("a", NodeMessage::HandOff { shard: "s".into() })) || {
            // Held behind the removal's batch.
            let batch = batch_of(&out);
            c.handle(Event::Persisted { now: 15_003, batch })
                .contains(&send("a", NodeMessage::HandOff { shard: "s".into() }))
        }
    );
}

#[test]
fn owner_death_mid_hand_off_re_homes_the_shard_once() {
    let mut c = two_regions();
    settle(&mut c, rebalance_now(10, &["s"]));
    c.handle(ack(11, "a", "s"));
    c.handle(ack(11, "b", "s"));
    let hb =
        Event::Heartbeat { now: 14_000, address: "b".into(), incarnation: 1, metrics: Default::default(), sequence: 1 };
    c.handle(hb);
    let out = c.handle(Event::Tick { now: 15_000 });
    let batch = batch_of(&out);
    let Some(Command::Persist { changes, .. }) = out.iter().find(|c| matches!(c, Command::Persist { .. })) else {
        unreachable!()
    };
    assert_eq!(
        changes,
        &vec![
            Change::HandOffEnded { shard: "s".into() },
            Change::HomeRemoved { shard: "s".into() },
            Change::HomeRemoved { shard: "t".into() },
            Change::RegionRemoved { address: "a".into() },
            home_set("s", "b", 15_000, 3),
            home_set("t", "b", 15_000, 4),
        ]
    );
    c.handle(Event::Persisted { now: 15_000, batch });
    assert_eq!(&*c.home("s").unwrap().region, "b");
    assert_eq!(c.moving().count(), 0);
}

/// The `RegionRemoved` messages among `commands`.
fn removals(commands: &[Command]) -> Vec<&Command> {
    commands.iter().filter(|c| matches!(c, Command::Send { message: NodeMessage::RegionRemoved { .. }, .. })).collect()
}

fn removed(to: &str, address: &str) -> Command {
    send(to, NodeMessage::RegionRemoved { address: address.into() })
}

#[test]
fn every_other_region_hears_that_a_region_was_removed_after_the_persist() {
    let mut c = two_regions();
    settle(&mut c, register(4, "c", 1));
    // a restarts with a new incarnation: its old shards are homed again.
    let out = settle(&mut c, register(5, "a", 2));
    assert_eq!(removals(&out), [&removed("b", "a"), &removed("c", "a")]);
    // A reconnect of the same incarnation removes nothing.
    assert_eq!(removals(&settle(&mut c, register(6, "a", 2))), Vec::<&Command>::new());
    // b falls silent: a and c hear of it, once the removal is persisted.
    for now in [5_000, 10_000, 14_000] {
        for address in ["a", "c"] {
            c.handle(Event::Heartbeat {
                now,
                address: address.into(),
                incarnation: if address == "a" { 2 } else { 1 },
                metrics: Default::default(),
                sequence: now,
            });
        }
    }
    // b's last word was its registration at 3: the removal timeout (15 s) passes at 15,003.
    let out = c.handle(Event::Tick { now: 15_003 });
    assert!(out.iter().any(|c| matches!(c, Command::Persist { .. })), "{out:#?}");
    assert_eq!(removals(&out), Vec::<&Command>::new(), "not before the persist");
    let out = c.handle(Event::Persisted { now: 15_003, batch: batch_of(&out) });
    assert_eq!(removals(&out), [&removed("a", "b"), &removed("c", "b")]);
    // c leaves: its shards are handed off, then a hears of it and c is told it may go.
    let held = c.durable().regions["c"].shards.clone();
    let mut out = settle(&mut c, Event::Leave { now: 15_004, address: "c".into(), incarnation: 1 });
    for shard in &held {
        assert_eq!(removals(&out), Vec::<&Command>::new(), "not while c holds {shard}");
        c.handle(Event::BeginHandOffAck { now: 15_005, region: "a".into(), incarnation: 2, shard: shard.clone() });
        c.handle(ack(15_005, "c", shard));
        out = settle(&mut c, stopped(15_006, "c", shard));
    }
    assert!(out.contains(&send("c", NodeMessage::LeaveDone)), "{out:#?}");
    assert_eq!(removals(&out), [&removed("a", "c")]);
}

#[test]
fn incarnation_change_re_homes_and_reconnect_keeps() {
    let mut c = two_regions();
    // Same incarnation: nothing changes, nothing to persist.
    let out = c.handle(register(20, "a", 1));
    assert_eq!(
        out,
        [
            Command::Observe(Observation::RegionRegistered { address: "a".into(), incarnation: 1, rehomed: 0 }),
            registered("a", 1),
        ]
    );
    assert_eq!(c.durable().regions["a"].shards, ["s", "t"]);
    // New incarnation: the old one's shards are re-homed.
    let out = c.handle(register(21, "a", 2));
    let record = RegionRecord {
        address: "a".into(),
        incarnation: 2,
        join_order: 2,
        registered_at: Some(21),
        ..Default::default()
    };
    let Some(Command::Persist { changes, .. }) = out.iter().find(|c| matches!(c, Command::Persist { .. })) else {
        unreachable!()
    };
    assert_eq!(
        changes,
        &vec![
            Change::HomeRemoved { shard: "s".into() },
            Change::HomeRemoved { shard: "t".into() },
            Change::RegionRegistered(record),
            home_set("s", "b", 21, 3),
            home_set("t", "a", 21, 4),
        ]
    );
    assert_eq!(reveals(&out), Vec::<&Command>::new());
}

#[test]
fn recovery_restarts_hand_offs_from_begin() {
    let mut c = two_regions();
    settle(&mut c, rebalance_now(10, &["s"]));
    c.handle(ack(11, "a", "s"));
    c.handle(ack(11, "b", "s"));
    // Crash: only the durable state survives.
    let durable = c.durable().clone();
    let (mut c, out) = Coordinator::recover(Config::default(), least_shard(), durable, 100).unwrap();
    assert_eq!(
        out,
        [
            begin("s", "a"),
            send("a", NodeMessage::BeginHandOff { shard: "s".into() }),
            send("b", NodeMessage::BeginHandOff { shard: "s".into() }),
        ]
    );
    assert_eq!(&*c.home("s").unwrap().region, "a");
    c.handle(ack(101, "a", "s"));
    c.handle(ack(101, "b", "s"));
    let out = settle(&mut c, stopped(102, "a", "s"));
    assert_eq!(&*c.home("s").unwrap().region, "b");
    assert!(out.contains(&allocated("s", "b")));
}

#[test]
fn leaving_region_is_drained_and_told() {
    let mut c = two_regions();
    let out = settle(&mut c, Event::Leave { now: 10, address: "a".into(), incarnation: 1 });
    assert_eq!(c.moving().cloned().collect::<Vec<_>>(), ["s", "t"]);
    assert!(out.contains(&send("b", NodeMessage::BeginHandOff { shard: "t".into() })));
    for shard in ["s", "t"] {
        c.handle(ack(11, "a", shard));
        c.handle(ack(11, "b", shard));
    }
    settle(&mut c, stopped(12, "a", "s"));
    let out = settle(&mut c, stopped(13, "a", "t"));
    assert!(out.contains(&send("a", NodeMessage::LeaveDone)), "{out:#?}");
    assert!(!c.durable().regions.contains_key("a"));
    assert_eq!(c.durable().regions["b"].shards, ["s", "t"]);
}

#[test]
fn rebalance_now_explains_refusals() {
    let mut c = two_regions();
    let event = Event::Operator {
        now: 10,
        request: 4,
        op: OperatorRequest::RebalanceNow { shards: vec!["s".into(), "zz".into(), "s".into()], immediate: false },
    };
    let out = settle(&mut c, event);
    let reply = Reply::Rebalance { accepted: vec!["s".into()], rejected: vec![("zz".into(), NotAccepted::Unknown)] };
    assert_eq!(reveals(&out), [&Command::Reply { request: 4, reply }]);
    assert_eq!(c.durable().queued.iter().collect::<Vec<_>>(), ["s"]);
    let event = Event::Operator {
        now: 11,
        request: 5,
        op: OperatorRequest::RebalanceNow { shards: vec!["s".into()], immediate: true },
    };
    let out = settle(&mut c, event);
    let reply = Reply::Rebalance { accepted: vec![], rejected: vec![("s".into(), NotAccepted::AlreadyMoving)] };
    assert_eq!(reveals(&out), [&Command::Reply { request: 5, reply }]);
    // The next tick moves it.
    let out = settle(&mut c, Event::Tick { now: 10_011 });
    assert!(out.contains(&send("a", NodeMessage::BeginHandOff { shard: "s".into() })), "{out:#?}");
}

#[test]
fn late_messages_of_an_old_incarnation_are_ignored() {
    let mut c = two_regions();
    settle(&mut c, register(20, "a", 2));
    let homes_before = c.durable().homes.clone();
    // A Leave the first incarnation sent before it died must not drain the second.
    let out = c.handle(Event::Leave { now: 21, address: "a".into(), incarnation: 1 });
    assert_eq!(
        out,
        [Command::Observe(Observation::Ignored { what: "Leave from a: incarnation 1 is not the registered 2".into() })]
    );
    assert!(!c.durable().regions["a"].leaving);
    // Nor may its ShardStopped end a hand-off of the second.
    let shard = c.durable().regions["a"].shards[0].clone();
    settle(&mut c, rebalance_now(22, &[&shard]));
    let ack2 = |now, region: &str, incarnation| Event::BeginHandOffAck {
        now,
        region: region.into(),
        incarnation,
        shard: shard.clone(),
    };
    c.handle(ack2(23, "a", 2));
    c.handle(ack2(23, "b", 1));
    let out = c.handle(Event::ShardStopped { now: 24, region: "a".into(), incarnation: 1, shard: shard.clone() });
    assert!(matches!(&out[..], [Command::Observe(Observation::Ignored { .. })]), "{out:#?}");
    assert_eq!(&*c.home(&shard).unwrap().region, "a");
    assert_eq!(c.durable().homes.len(), homes_before.len());
}

#[test]
fn heartbeat_ack_names_the_heartbeat() {
    let mut c = two_regions();
    let hb = |sequence| Event::Heartbeat {
        now: 100,
        address: "b".into(),
        incarnation: 1,
        metrics: Default::default(),
        sequence,
    };
    assert_eq!(
        c.handle(hb(41)),
        [send("b", NodeMessage::HeartbeatAck { incarnation: 1, sequence: 41, lease_ms: 10_000 })]
    );
    assert_eq!(
        c.handle(hb(40)),
        [send("b", NodeMessage::HeartbeatAck { incarnation: 1, sequence: 40, lease_ms: 10_000 })]
    );
}

#[test]
fn a_reconnecting_region_is_told_again_what_a_hand_off_waits_for() {
    let mut c = two_regions();
    settle(&mut c, rebalance_now(10, &["s"]));
    // a acknowledged, b's acknowledgement was lost with its session.
    c.handle(ack(11, "a", "s"));
    let out = settle(&mut c, register(12, "b", 1));
    assert!(out.contains(&send("b", NodeMessage::BeginHandOff { shard: "s".into() })), "{out:#?}");
    c.handle(ack(13, "b", "s"));
    // Now the owner's HandOff is lost: a reconnects and hears it again.
    let out = settle(&mut c, register(14, "a", 1));
    assert!(out.contains(&send("a", NodeMessage::HandOff { shard: "s".into() })), "{out:#?}");
    assert!(!out.contains(&send("a", NodeMessage::BeginHandOff { shard: "s".into() })), "{out:#?}");
}

#[test]
fn the_last_region_leaving_hands_its_shards_off_to_nowhere() {
    let mut c = two_regions();
    settle(&mut c, Event::Leave { now: 10, address: "b".into(), incarnation: 1 });
    let out = settle(&mut c, Event::Leave { now: 11, address: "a".into(), incarnation: 1 });
    // b had no shards and left at once; a's shards go through the hand-off.
    assert!(out.contains(&send("a", NodeMessage::BeginHandOff { shard: "s".into() })), "{out:#?}");
    for shard in ["s", "t"] {
        c.handle(ack(12, "a", shard));
        settle(&mut c, stopped(13, "a", shard));
    }
    assert!(c.durable().regions.is_empty(), "a left once its shards stopped");
    assert!(c.durable().homes.is_empty(), "the shards wait for the next region");
}

#[test]
fn a_region_that_does_not_acknowledge_in_time_no_longer_holds_the_hand_off() {
    let config = Config { handoff_ack_timeout_ms: 2_000, ..Config::default() };
    let mut c = two_regions_with(config);
    settle(&mut c, rebalance_now(10, &["s"]));
    // The owner acknowledges; b stays silent (but keeps heartbeating).
    assert_eq!(c.handle(ack(11, "a", "s")), []);
    let hb =
        Event::Heartbeat { now: 1_000, address: "b".into(), incarnation: 1, metrics: Default::default(), sequence: 1 };
    c.handle(hb);
    assert!(c.handle(Event::Tick { now: 2_009 }).iter().all(|c| !matches!(c, Command::Send { .. })));
    assert_eq!(
        c.handle(Event::Tick { now: 2_010 }),
        [
            Command::Observe(Observation::HandOffAckTimedOut { shard: "s".into(), missing: vec!["b".into()] }),
            stop("s", "a"),
            send("a", NodeMessage::HandOff { shard: "s".into() }),
        ]
    );
    // b's late acknowledgement is ignored; the owner's stop moves the shard.
    assert_eq!(
        c.handle(ack(2_011, "b", "s")),
        [Command::Observe(Observation::Ignored { what: "BeginHandOffAck for s from b".into() })]
    );
    settle(&mut c, stopped(2_012, "a", "s"));
    assert_eq!(&*c.home("s").unwrap().region, "b");
}

#[test]
fn a_silent_owner_still_keeps_its_shard() {
    let config = Config { handoff_ack_timeout_ms: 2_000, handoff_timeout_ms: 5_000, ..Config::default() };
    let mut c = two_regions_with(config);
    settle(&mut c, rebalance_now(10, &["s"]));
    c.handle(ack(11, "b", "s"));
    // The owner did not acknowledge: the hand-off goes on to HandOff, which
    // it must still answer; it does not, and the step times out.
    let out = c.handle(Event::Tick { now: 2_010 });
    assert!(out.contains(&send("a", NodeMessage::HandOff { shard: "s".into() })), "{out:#?}");
    let out = c.handle(Event::Tick { now: 7_010 });
    assert!(
        out.iter().any(|c| matches!(c, Command::Observe(Observation::HandOffTimedOut { step: Step::Stop, .. }))),
        "{out:#?}"
    );
    assert_eq!(&*c.home("s").unwrap().region, "a");
}

#[test]
fn retiring_hands_every_shard_off_to_nowhere_and_lets_every_region_go() {
    let mut c = two_regions();
    let retire = Event::Operator { now: 10, request: 3, op: OperatorRequest::Retire };
    let out = settle(&mut c, retire);
    assert!(out.contains(&Command::Reply { request: 3, reply: Reply::Done }), "{out:#?}");
    // b holds nothing and goes at once; a's shards stop through the hand-off.
    assert!(out.contains(&send("b", NodeMessage::LeaveDone)), "{out:#?}");
    assert_eq!(c.moving().cloned().collect::<Vec<_>>(), ["s", "t"]);
    for shard in ["s", "t"] {
        c.handle(ack(11, "a", shard));
        settle(&mut c, stopped(12, "a", shard));
    }
    assert!(c.durable().regions.is_empty() && c.durable().homes.is_empty(), "{:?}", c.durable());
    assert_eq!(c.live_placement_count(), 0);
}

#[test]
fn the_live_placement_count_follows_writes_and_tombstones() {
    let mut c = two_regions();
    let stamp = |t| Stamp::new(t, "op");
    let set = |now, shards: &[&str]| Event::Operator {
        now,
        request: 1,
        op: OperatorRequest::SetPlacements {
            placements: shards.iter().map(|s| (s.to_string(), "b".to_string())).collect(),
            stamp: stamp(now),
        },
    };
    settle(&mut c, set(10, &["x", "y", "z"]));
    assert_eq!(c.live_placement_count(), 3);
    settle(&mut c, set(11, &["x"]));
    assert_eq!(c.live_placement_count(), 3, "overwriting keeps the count");
    let remove = Event::Operator {
        now: 12,
        request: 2,
        op: OperatorRequest::RemovePlacements { shards: vec!["y".into()], stamp: stamp(12) },
    };
    settle(&mut c, remove);
    assert_eq!(c.live_placement_count(), 2);
    assert_eq!(c.durable().placements.len(), 3, "the tombstone is kept");
}

#[test]
fn regions_silent_past_the_removal_timeout_never_take_each_others_shards() {
    // a holds s and t; b registered later; both go silent and are removed in
    // the same tick: s and t must not be re-homed on b on their way out.
    let mut c = two_regions();
    let removal = Config::default().removal_ms();
    let out = c.handle(Event::Tick { now: 3 + removal + 1 });
    let homed_on: Vec<&str> = out
        .iter()
        .filter_map(|command| match command {
            Command::Observe(Observation::Allocated { region, .. }) => Some(region.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(homed_on, Vec::<&str>::new(), "shards were homed on a region being removed: {out:?}");
    assert!(c.durable().regions.is_empty() && c.durable().homes.is_empty());
}

#[test]
fn churn_limits_clip_the_strategys_answer_and_say_what_they_clipped() {
    use crate::strategy::churn::{ChurnLimits, ClipReason};
    let churn = ChurnLimits { max_moves_per_round: Some(1), min_round_interval_ms: 60_000, ..ChurnLimits::default() };
    let config = Config { churn, unreachable_after_ms: 1 << 40, remove_after_ms: 1 << 40, ..Config::default() };
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    // 40 shards: least-shard moves at most a tenth of them a round.
    for i in 0..40 {
        settle(&mut c, get(1, "a", &format!("s{i}")));
    }
    settle(&mut c, get(1, "a", "x"));
    settle(&mut c, register(10, "b", 1));
    let clipped = |out: &[Command]| {
        out.iter()
            .find_map(|c| match c {
                Command::Observe(Observation::MovesClipped { asked, by_limit, shards }) => {
                    Some((*asked, by_limit.clone(), shards.clone()))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("the clipping is observed: {out:#?}"))
    };
    let started = |out: &[Command]| {
        out.iter().filter(|c| matches!(c, Command::Observe(Observation::HandOff { step: Step::Begin, .. }))).count()
    };
    let out = settle(&mut c, Event::Tick { now: 10_000 });
    let (asked, by_limit, shards) = clipped(&out);
    assert!(asked >= 2, "least-shard asks for more than one move from 41 against 0: {asked}");
    assert_eq!(by_limit, [(ClipReason::MovesPerRound, asked - 1)]);
    assert_eq!(shards.len(), asked - 1);
    assert_eq!(started(&out), 1, "one move: the budget");
    let moved = out
        .iter()
        .find_map(|c| match c {
            Command::Observe(Observation::HandOff { shard, step: Step::Begin, .. }) => Some(shard.clone()),
            _ => None,
        })
        .unwrap();
    assert!(!shards.contains(&moved));
    c.handle(ack(10_001, "a", &moved));
    c.handle(ack(10_002, "b", &moved));
    settle(&mut c, stopped(10_003, "a", &moved));
    // The next round comes before the interval: the strategy moves nothing.
    let out = settle(&mut c, Event::Tick { now: 20_000 });
    let (asked, by_limit, _) = clipped(&out);
    assert_eq!(by_limit, [(ClipReason::Interval, asked)]);
    assert_eq!(started(&out), 0);
    // An operator's rebalance is not the strategy's: it is never clipped.
    let out = settle(&mut c, rebalance_now(20_001, &["x"]));
    assert_eq!(started(&out), 1, "{out:?}");
}

/// A strategy that records why each shard was allocated and answers
/// rebalance with the moves a test scripts, once each.
#[derive(Clone, Default)]
struct Scripted {
    asked: Arc<std::sync::Mutex<Vec<(String, crate::strategy::AllocationCause)>>>,
    moves: Arc<std::sync::Mutex<Vec<crate::strategy::RebalanceMove>>>,
}

impl crate::strategy::AllocationStrategy for Scripted {
    fn info(&self) -> &crate::strategy::Info {
        static INFO: std::sync::OnceLock<crate::strategy::Info> = std::sync::OnceLock::new();
        INFO.get_or_init(|| crate::strategy::Info {
            name: "scripted".into(),
            version: "1".into(),
            description: String::new(),
            config_schema: "{}".into(),
            needs_shard_names: false,
            needs_shard_attributes: false,
        })
    }

    fn allocate(
        &mut self,
        view: &ClusterView,
        shard: &str,
        _requester: Option<&str>,
    ) -> Result<String, crate::strategy::StrategyError> {
        self.asked.lock().unwrap().push((shard.to_owned(), view.cause()));
        let first = view.regions().iter().find(|r| r.is_allocatable()).expect("an allocatable region");
        Ok(first.address.clone())
    }

    fn rebalance(
        &mut self,
        _view: &ClusterView,
    ) -> Result<Vec<crate::strategy::RebalanceMove>, crate::strategy::StrategyError> {
        Ok(std::mem::take(&mut *self.moves.lock().unwrap()))
    }
}

/// Regions a, b and c (oldest first) over `strategy`, shard s on a.
fn three_regions(strategy: &Scripted) -> Coordinator {
    let external = ExternalAllocation::new(Guarded::new(Box::new(strategy.clone())));
    // No heartbeats here: no region becomes unreachable.
    let config = Config { unreachable_after_ms: 1 << 40, remove_after_ms: 1 << 40, ..Config::default() };
    let mut c = Coordinator::new(config, external).unwrap();
    for (now, region) in ["a", "b", "c"].into_iter().enumerate() {
        settle(&mut c, register(now as Millis, region, 1));
    }
    settle(&mut c, get(5, "a", "s"));
    c
}

/// Runs `s`'s hand-off from `from` to its end at `now`: every region
/// acknowledges, the owner stops it.
fn hand_over(c: &mut Coordinator, now: Millis, shard: &str, from: &str) -> Vec<Command> {
    for region in ["a", "b", "c"] {
        settle(c, ack(now, region, shard));
    }
    settle(c, stopped(now + 1, from, shard))
}

fn home_of(c: &Coordinator, shard: &str) -> Option<String> {
    c.durable().homes.get(shard).map(|h| h.region.to_string())
}

#[test]
fn a_rebalance_destination_is_honoured_without_asking_allocate() {
    use crate::strategy::{AllocationCause, RebalanceMove};
    let strategy = Scripted::default();
    let mut c = three_regions(&strategy);
    assert_eq!(home_of(&c, "s").as_deref(), Some("a"));
    *strategy.moves.lock().unwrap() = vec![RebalanceMove { shard: "s".into(), to: Some("c".into()) }];
    settle(&mut c, Event::Tick { now: 10_010 });
    assert_eq!(c.moving().collect::<Vec<_>>(), ["s"], "the strategy's move started");
    hand_over(&mut c, 10_020, "s", "a");
    assert_eq!(home_of(&c, "s").as_deref(), Some("c"), "where the strategy said, not allocate's first region");
    assert_eq!(c.durable().homes["s"].at, 10_021, "the home's time is the arrival's");
    let asked = strategy.asked.lock().unwrap().clone();
    assert_eq!(asked, [("s".to_owned(), AllocationCause::NewShard)], "allocate was asked only for the new shard");
}

#[test]
fn a_destination_that_cannot_take_the_shard_on_arrival_leaves_it_to_allocate() {
    use crate::strategy::{AllocationCause, RebalanceMove};
    let strategy = Scripted::default();
    let mut c = three_regions(&strategy);
    *strategy.moves.lock().unwrap() = vec![RebalanceMove { shard: "s".into(), to: Some("c".into()) }];
    settle(&mut c, Event::Tick { now: 10_010 });
    // c drains while s is on its way.
    let drain = Event::Operator { now: 10_015, request: 3, op: OperatorRequest::Drain { address: "c".into() } };
    settle(&mut c, drain);
    hand_over(&mut c, 10_020, "s", "a");
    assert_eq!(home_of(&c, "s").as_deref(), Some("a"), "allocate's answer: the first allocatable region");
    let asked = strategy.asked.lock().unwrap().clone();
    assert_eq!(asked.last(), Some(&("s".to_owned(), AllocationCause::Rebalance)));
}

#[test]
fn every_allocation_says_its_cause() {
    use crate::strategy::AllocationCause;
    let strategy = Scripted::default();
    let mut c = three_regions(&strategy);
    // An operator's move.
    settle(&mut c, rebalance_now(10, &["s"]));
    hand_over(&mut c, 20, "s", "a");
    // Off a draining region (a, where allocate sent s back).
    assert_eq!(home_of(&c, "s").as_deref(), Some("a"));
    let drain = Event::Operator { now: 30, request: 4, op: OperatorRequest::Drain { address: "a".into() } };
    settle(&mut c, drain);
    settle(&mut c, Event::Tick { now: 10_030 });
    hand_over(&mut c, 10_040, "s", "a");
    // Its region removed: b took it (a drains) and restarts as a new
    // incarnation, so its old incarnation's shards are homed again.
    assert_eq!(home_of(&c, "s").as_deref(), Some("b"));
    settle(&mut c, register(10_050, "b", 2));
    let asked: Vec<(String, AllocationCause)> = strategy.asked.lock().unwrap().clone();
    let causes: Vec<AllocationCause> = asked.iter().filter(|(s, _)| s == "s").map(|(_, c)| *c).collect();
    assert_eq!(
        causes,
        [
            AllocationCause::NewShard,
            AllocationCause::Operator,
            AllocationCause::Drained,
            AllocationCause::RegionRemoved
        ]
    );
}

#[test]
fn metrics_are_smoothed_with_the_load_half_life_beside_the_raw_ones() {
    let config = Config { load_half_life_ms: 1_000, unreachable_after_ms: 1 << 40, ..Config::default() };
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    let beat = |now: Millis, sequence: u64, cpu: Option<f64>| Event::Heartbeat {
        now,
        address: "a".into(),
        incarnation: 1,
        metrics: cpu.map(|v| [("cpu".to_owned(), v)].into()).unwrap_or_default(),
        sequence,
    };
    let read = |c: &mut Coordinator| {
        let view = c.view();
        let (v, a) = (view.strategy_view(), shardalloc_guest::RegionId(0));
        (v.metric(a, "cpu"), v.smoothed_metric(a, "cpu"))
    };
    settle(&mut c, beat(100, 1, Some(1.0)));
    assert_eq!(read(&mut c), (Some(1.0), Some(1.0)), "a first value is taken as it is");
    // One half-life later, 0: halfway there.
    settle(&mut c, beat(1_100, 2, Some(0.0)));
    assert_eq!(read(&mut c), (Some(0.0), Some(0.5)));
    // Two more half-lives of 0: a quarter of the way left.
    settle(&mut c, beat(3_100, 3, Some(0.0)));
    assert_eq!(read(&mut c), (Some(0.0), Some(0.125)));
    // The table a component's copy follows carries the same matrix.
    let table = c.view().table().cloned().expect("a table");
    assert_eq!(table.view().smoothed_metrics(), [0.125]);
    assert_eq!(table.view().metrics(), [0.0]);
}

#[test]
fn a_regions_moving_averages_are_bounded() {
    let mut smoothed = BTreeMap::new();
    for round in 0..10u64 {
        let metrics: BTreeMap<String, f64> =
            (0..regions::MAX_METRICS).map(|i| (format!("m{round}-{i}"), 1.0)).collect();
        smooth_metrics(&mut smoothed, &metrics, round * 1_000, 1_000);
        assert!(smoothed.len() <= MAX_SMOOTHED_METRICS, "{}", smoothed.len());
    }
    // The stalest went first: the last two rounds' names are kept.
    assert!(smoothed.keys().all(|name| name.starts_with("m8-") || name.starts_with("m9-")), "{smoothed:?}");
}
