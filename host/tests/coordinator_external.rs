//! The external-allocation test plan, through the coordinator.

use crate::coordinator;

use coordinator::{Harness, least_shard, sends};
use shardalloc::coordinator::{Command, Config, Coordinator, Event, NodeMessage, Observation, OperatorRequest, Stamp};
use shardalloc::strategy::external::AllocationReason;

fn allocation(commands: &[Command], shard: &str) -> (String, AllocationReason, Option<String>) {
    commands
        .iter()
        .find_map(|c| match c {
            Command::Observe(Observation::Allocated { shard: s, region, reason, warning }) if s == shard => {
                Some((region.clone(), reason.clone(), warning.clone()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("{shard} not allocated in {commands:#?}"))
}

fn three() -> Harness {
    let mut h = Harness::new(Config::default());
    for r in ["a", "b", "c"] {
        h.register(r);
    }
    h
}

#[test]
fn placement_honoured() {
    let mut h = three();
    h.place(&[("42", "b")]);
    let out = h.get("a", "42");
    assert_eq!(allocation(&out, "42"), ("b".into(), AllocationReason::Placement, None));
    assert!(
        sends(&out)
            .contains(&("a".into(), NodeMessage::ShardHomeEpoch { shard: "42".into(), home: "b".into(), epoch: 1 }))
    );
}

#[test]
fn fallback_when_unplaced() {
    let mut h = three();
    h.place(&[("42", "b")]);
    let out = h.get("a", "7");
    let (_, reason, warning) = allocation(&out, "7");
    assert!(matches!(reason, AllocationReason::Strategy { ref name, .. } if name == "least-shard"), "{reason:?}");
    assert_eq!(warning, None);
}

#[test]
fn placement_removed_then_strategy_on_next_rebalance() {
    let mut h = Harness::new(Config::default());
    h.register("a");
    h.register("b");
    let shards: Vec<String> = (1..=6).map(|i| format!("x{i}")).collect();
    let pairs: Vec<(&str, &str)> = shards.iter().map(|s| (s.as_str(), "b")).collect();
    h.place(&pairs);
    for s in &shards {
        h.get("a", s);
    }
    assert_eq!(h.c.durable().regions["b"].shards.len(), 6);
    // Pinned: the strategy's wish to even out is ignored.
    let out = h.tick(10_000);
    assert!(!sends(&out).iter().any(|(_, m)| matches!(m, NodeMessage::BeginHandOff { .. })), "{out:#?}");
    h.heartbeat(&["a", "b"]);
    let stamp = Stamp::new(h.now, "test");
    h.operator(OperatorRequest::RemovePlacements { shards: shards.clone(), stamp });
    let out = h.tick(10_000);
    let moving: Vec<_> = h.c.moving().cloned().collect();
    assert!(!moving.is_empty(), "{out:#?}");
    let out = h.cooperate(out);
    let moved: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Observe(Observation::Allocated { region, reason: AllocationReason::Strategy { .. }, .. }) => {
                Some(region.clone())
            }
            _ => None,
        })
        .collect();
    assert!(moved.iter().all(|r| r == "a") && !moved.is_empty(), "{moved:?}");
}

#[test]
fn target_unreachable_strategy_plus_warning() {
    let mut h = three();
    h.now = 6_000;
    h.heartbeat(&["a", "c"]);
    h.step(Event::Tick { now: h.now });
    assert!(!h.c.is_reachable("b"));
    h.place(&[("42", "b")]);
    let out = h.get("a", "42");
    let (region, reason, warning) = allocation(&out, "42");
    assert_ne!(region, "b");
    assert!(matches!(reason, AllocationReason::Strategy { .. }));
    let warning = warning.expect("a warning");
    assert!(warning.contains("42") && warning.contains("unreachable"), "{warning}");
}

#[test]
fn manual_rebalance_hand_off_and_reallocation_within_one_tick() {
    let mut h = Harness::new(Config::default());
    h.register("a");
    h.get("a", "s");
    h.get("a", "t");
    h.register("b");
    let out = h.operator(OperatorRequest::RebalanceNow { shards: vec!["s".into()], immediate: false });
    assert!(sends(&out).is_empty());
    let out = h.tick(10_000);
    let out = h.cooperate(out);
    let (region, _, _) = allocation(&out, "s");
    assert_eq!(region, "b");
    assert_eq!(&*h.c.home("s").unwrap().region, "b");
    assert_eq!(h.c.moving().count(), 0);
}

#[test]
fn placement_change_pushed_to_all_regions_within_one_tick() {
    let mut h = three();
    h.auto_persist = false;
    let out = h.place(&[("42", "c")]);
    assert!(sends(&out).is_empty(), "nothing before the persist: {out:#?}");
    let batch = out
        .iter()
        .find_map(|c| match c {
            Command::Persist { batch, .. } => Some(*batch),
            _ => None,
        })
        .unwrap();
    let out = h.step(Event::Persisted { now: 0, batch });
    let pushed: Vec<String> = sends(&out)
        .into_iter()
        .filter(|(_, m)| *m == NodeMessage::PlacementChanged { shard: "42".into(), target: Some("c".into()) })
        .map(|(to, _)| to)
        .collect();
    assert_eq!(pushed, ["a", "b", "c"]);
}

#[test]
fn coordinator_restart_recovers_placements_homes_and_hand_offs() {
    let mut h = three();
    h.place(&[("p", "c")]);
    h.get("a", "p");
    h.get("a", "s");
    h.get("a", "t");
    let moving = h.c.home("s").unwrap().region.clone();
    h.operator(OperatorRequest::RebalanceNow { shards: vec!["s".into()], immediate: true });
    // A batch that never becomes durable: lost with its reveals.
    h.auto_persist = false;
    let out = h.place(&[("q", "a")]);
    assert!(sends(&out).is_empty());
    let store = h.store.clone();
    let (mut c, out) = Coordinator::recover(Config::default(), least_shard(), store, h.now + 5).unwrap();
    assert_eq!(c.strategy().placements().get("p").map(String::as_str), Some("c"));
    assert_eq!(c.strategy().placements().get("q"), None);
    assert_eq!(&*c.home("p").unwrap().region, "c");
    assert_eq!(c.home("s").unwrap().region, moving);
    assert_eq!(c.moving().cloned().collect::<Vec<_>>(), ["s"]);
    let begin: Vec<_> = sends(&out).into_iter().map(|(to, _)| to).collect();
    assert_eq!(begin, ["a", "b", "c"]);
    let out =
        c.handle(Event::GetShardHome { now: h.now + 6, requester: "b".into(), incarnation: 1, shard: "t".into() });
    assert_eq!(sends(&out).len(), 1);
}
