//! Freezes and the maintenance mode, step by step (`freeze.rs`).

use super::*;
use crate::strategy::builtin;
use crate::strategy::guarded::Guarded;

fn least_shard() -> ExternalAllocation {
    ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()))
}

fn register(now: Millis, address: &str) -> Event {
    Event::Register {
        now,
        register: Register { address: address.into(), incarnation: 1, ..Default::default() },
        capacity: Default::default(),
    }
}

fn heartbeat(now: Millis, address: &str) -> Event {
    Event::Heartbeat { now, address: address.into(), incarnation: 1, metrics: Default::default(), sequence: now }
}

fn operator(now: Millis, op: OperatorRequest) -> Event {
    Event::Operator { now, request: now, op }
}

fn order(reason: &str, until: Option<Millis>, strict: bool) -> OperatorRequest {
    OperatorRequest::Freeze(FreezeOrder { scope: FreezeScope::Type, reason: reason.into(), until, strict })
}

/// Feeds an event and persists its batch; returns everything.
fn settle(c: &mut Coordinator, event: Event) -> Vec<Command> {
    let now = event.now();
    let mut out = c.handle(event);
    let batch = out.iter().find_map(|c| match c {
        Command::Persist { batch, .. } => Some(*batch),
        _ => None,
    });
    if let Some(batch) = batch {
        out.extend(c.handle(Event::Persisted { now, batch }));
    }
    out
}

fn hand_offs(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Persist { changes, .. } => Some(changes),
            _ => None,
        })
        .flatten()
        .filter_map(|change| match change {
            Change::HandOffStarted { shard, .. } => Some(shard.clone()),
            _ => None,
        })
        .collect()
}

/// Regions a and b; shards s0..s5 all on a (b joined after them).
fn lopsided() -> Coordinator {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    settle(&mut c, register(0, "a"));
    for i in 0..6 {
        let get = Event::GetShardHome { now: 1, requester: "a".into(), incarnation: 1, shard: format!("s{i}") };
        settle(&mut c, get);
    }
    settle(&mut c, register(2, "b"));
    c
}

/// Keeps a and b alive up to `now`.
fn alive(c: &mut Coordinator, now: Millis) {
    settle(c, heartbeat(now, "a"));
    settle(c, heartbeat(now, "b"));
}

#[test]
fn a_freeze_stops_the_strategy_but_not_placements_or_new_shards() {
    let mut c = lopsided();
    let out = settle(&mut c, operator(3, order("deploy", Some(100_000), false)));
    let freeze =
        Freeze { scope: FreezeScope::Type, reason: "deploy".into(), since: 3, until: Some(100_000), strict: false };
    let record = FreezeRecord {
        at: 3,
        action: FreezeAction::Frozen,
        scope: FreezeScope::Type,
        by: ChangedBy::Operator,
        reason: "deploy".into(),
        until: Some(100_000),
        strict: false,
    };
    assert_eq!(
        out,
        [
            Command::Observe(Observation::Freeze { record: record.clone() }),
            Command::Persist { batch: 9, changes: vec![Change::FreezeSet { freeze }] },
            Command::Reply { request: 3, reply: Reply::Done },
        ]
    );
    assert!(c.frozen());
    assert_eq!(c.freezes().history, [record]);

    // The strategy would move two shards to b; frozen, it is not asked.
    alive(&mut c, 10_000);
    assert_eq!(hand_offs(&settle(&mut c, Event::Tick { now: 10_000 })), Vec::<String>::new());
    // A new shard still gets a home (least-shard: b).
    let get = Event::GetShardHome { now: 10_001, requester: "a".into(), incarnation: 1, shard: "new".into() };
    settle(&mut c, get);
    assert_eq!(&*c.home("new").unwrap().region, "b");
    // An operator's placement still moves its shard.
    let stamp = Stamp::new(1, "test");
    let placement = OperatorRequest::SetPlacements { placements: vec![("s1".into(), "b".into())], stamp };
    settle(&mut c, operator(10_002, placement));
    alive(&mut c, 20_000);
    assert_eq!(hand_offs(&settle(&mut c, Event::Tick { now: 20_000 })), ["s1"]);

    // The hand-off ends (least-shard asks for nothing while one is in flight).
    for region in ["a", "b"] {
        let ack = Event::BeginHandOffAck { now: 20_001, region: region.into(), incarnation: 1, shard: "s1".into() };
        settle(&mut c, ack);
    }
    settle(&mut c, Event::ShardStopped { now: 20_001, region: "a".into(), incarnation: 1, shard: "s1".into() });
    assert_eq!(&*c.home("s1").unwrap().region, "b");
    // Still frozen at the next round; lifted, the strategy runs again.
    alive(&mut c, 21_000);
    assert_eq!(hand_offs(&settle(&mut c, Event::Tick { now: 21_000 })), Vec::<String>::new());
    let lift = OperatorRequest::Thaw { scopes: vec![FreezeScope::Type], reason: "done".into() };
    settle(&mut c, operator(21_001, lift));
    assert!(!c.frozen());
    alive(&mut c, 30_000);
    let moves = hand_offs(&settle(&mut c, Event::Tick { now: 30_000 }));
    assert!(!moves.is_empty() && !moves.contains(&"s1".to_owned()), "the strategy evens out again: {moves:?}");
    let actions: Vec<FreezeAction> = c.freezes().history.iter().map(|r| r.action).collect();
    assert_eq!(actions, [FreezeAction::Frozen, FreezeAction::Lifted]);
}

#[test]
fn a_strict_freeze_holds_placements_rebalance_now_and_drains() {
    let mut c = lopsided();
    settle(&mut c, operator(3, order("incident", Some(100_000), true)));
    let stamp = Stamp::new(1, "test");
    let placement = OperatorRequest::SetPlacements { placements: vec![("s1".into(), "b".into())], stamp };
    settle(&mut c, operator(4, placement));
    let now = OperatorRequest::RebalanceNow { shards: vec!["s2".into()], immediate: true };
    let out = settle(&mut c, operator(5, now));
    assert!(out.contains(&Command::Reply {
        request: 5,
        reply: Reply::Rebalance { accepted: vec![], rejected: vec![("s2".into(), NotAccepted::Frozen)] },
    }));
    let out = settle(&mut c, operator(6, OperatorRequest::Drain { address: "a".into() }));
    assert_eq!(hand_offs(&out), Vec::<String>::new());
    alive(&mut c, 10_000);
    assert_eq!(hand_offs(&settle(&mut c, Event::Tick { now: 10_000 })), Vec::<String>::new());
    // Lifted strictly: the drain and the placement go on.
    settle(&mut c, operator(10_001, OperatorRequest::Thaw { scopes: vec![FreezeScope::Type], reason: "ok".into() }));
    alive(&mut c, 20_000);
    assert!(!hand_offs(&settle(&mut c, Event::Tick { now: 20_000 })).is_empty());
}

#[test]
fn a_freeze_expires_by_the_drivers_clock_and_survives_a_recovery() {
    let mut c = lopsided();
    settle(&mut c, operator(3, order("deploy", Some(50_000), false)));
    // Recovered from its durable state (a failover), it is still frozen.
    let durable = c.durable().clone();
    let (mut c, _) = Coordinator::recover(Config::default(), least_shard(), durable, 40_000).unwrap();
    assert!(c.frozen());
    alive(&mut c, 49_999);
    settle(&mut c, Event::Tick { now: 49_999 });
    assert!(c.frozen());
    let out = settle(&mut c, Event::Tick { now: 50_000 });
    let record = FreezeRecord {
        at: 50_000,
        action: FreezeAction::Expired,
        scope: FreezeScope::Type,
        by: ChangedBy::Automatic,
        reason: "its time limit was reached".into(),
        until: None,
        strict: false,
    };
    assert!(out.contains(&Command::Observe(Observation::Freeze { record: record.clone() })), "{out:#?}");
    assert!(!c.frozen());
    assert_eq!(c.freezes().history.back(), Some(&record));
}

#[test]
fn orders_that_cannot_work_are_refused_and_the_history_is_bounded() {
    let mut c = lopsided();
    let refused = |c: &mut Coordinator, op| match settle(c, operator(10, op)).pop() {
        Some(Command::Reply { reply: Reply::FreezeRefused(error), .. }) => error,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(refused(&mut c, order(" ", Some(100), false)), FreezeError::NoReason);
    assert_eq!(refused(&mut c, order("x", Some(10), false)), FreezeError::EndsInThePast);
    assert_eq!(refused(&mut c, order("x", Some(11 + MAX_FREEZE_MS), false)), FreezeError::TooLong);
    assert_eq!(refused(&mut c, order(&"x".repeat(1025), None, false)), FreezeError::ReasonTooLong(1025));
    let maintenance = FreezeOrder { scope: FreezeScope::Maintenance, reason: "x".into(), until: None, strict: false };
    assert_eq!(refused(&mut c, OperatorRequest::Freeze(maintenance)), FreezeError::NotAnOperatorsScope);
    assert!(!c.frozen() && c.freezes().history.is_empty(), "nothing refused was kept");

    for i in 0..30 {
        settle(&mut c, operator(100 + i, order(&format!("freeze {i}"), Some(1_000_000), false)));
    }
    let history = &c.freezes().history;
    assert_eq!(history.len(), FREEZE_HISTORY);
    assert_eq!(history.back().unwrap().reason, "freeze 29");
    assert_eq!(history.front().unwrap().reason, "freeze 10");
}

/// Ten regions r0..r9 heartbeating up to `now`, except `silent`.
fn ten_regions() -> Coordinator {
    let mut c = Coordinator::new(Config::default(), least_shard()).unwrap();
    for i in 0..10 {
        settle(&mut c, register(0, &format!("r{i}")));
    }
    c
}

fn beat(c: &mut Coordinator, now: Millis, silent: &[usize]) {
    for i in (0..10).filter(|i| !silent.contains(i)) {
        settle(c, heartbeat(now, &format!("r{i}")));
    }
}

fn maintenance(c: &Coordinator) -> Option<&Freeze> {
    c.freezes().now.get(&FreezeScope::Maintenance)
}

#[test]
fn losing_three_of_ten_regions_freezes_the_type_until_they_are_back() {
    let mut c = ten_regions();
    // Two lost: under the thresholds (3, or 30%).
    let mut now = 0;
    while now < 6_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1]);
        settle(&mut c, Event::Tick { now });
    }
    assert_eq!(maintenance(&c), None);
    // A third one: frozen, and it says why.
    while now < 12_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1, 2]);
        settle(&mut c, Event::Tick { now });
    }
    let freeze = maintenance(&c).expect("frozen by the maintenance mode");
    assert_eq!(freeze.reason, "3 of 10 regions lost in 60 s");
    assert_eq!(c.freezes().history.back().unwrap().by, ChangedBy::Automatic);
    let frozen_at = freeze.since;
    // They come back (restarting: a new registration); the freeze is held
    // for a window after it began, then lifted by the rule.
    for i in 0..3 {
        settle(&mut c, register(now, &format!("r{i}")));
    }
    while now < frozen_at + 59_000 {
        now += 1_000;
        beat(&mut c, now, &[]);
        settle(&mut c, Event::Tick { now });
        assert!(maintenance(&c).is_some(), "held at {now}");
    }
    now += 2_000;
    beat(&mut c, now, &[]);
    settle(&mut c, Event::Tick { now });
    assert_eq!(maintenance(&c), None);
    let last = c.freezes().history.back().unwrap();
    assert_eq!((last.action, last.by), (FreezeAction::Lifted, ChangedBy::Automatic));
    assert_eq!(last.reason, "0 of 10 regions lost in the last 60 s: under the lift threshold");
}

#[test]
fn an_operator_lift_disarms_the_rule_until_the_losses_fall() {
    let mut c = ten_regions();
    let mut now = 0;
    while now < 12_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1, 2]);
        settle(&mut c, Event::Tick { now });
    }
    assert!(maintenance(&c).is_some());
    let lift = OperatorRequest::Thaw { scopes: vec![FreezeScope::Maintenance], reason: "we know".into() };
    settle(&mut c, operator(now, lift));
    // Still three lost: the rule does not freeze again.
    while now < 20_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1, 2]);
        settle(&mut c, Event::Tick { now });
        assert_eq!(maintenance(&c), None, "re-frozen at {now}");
    }
    // They are removed and age out of the window; a new storm freezes again.
    while now < 100_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1, 2]);
        settle(&mut c, Event::Tick { now });
    }
    assert_eq!(maintenance(&c), None);
    while now < 112_000 {
        now += 1_000;
        beat(&mut c, now, &[0, 1, 2, 3, 4, 5]);
        settle(&mut c, Event::Tick { now });
    }
    assert_eq!(maintenance(&c).map(|f| f.reason.as_str()), Some("3 of 7 regions lost in 60 s"));
}
