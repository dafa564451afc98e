//! Placement writes in slices (`driver/writes.rs`): a large write takes
//! several turns, region inputs are answered between its slices, a write
//! refused as a whole changes nothing, and later writes wait their turn.

use std::sync::Arc;

use shardalloc_proto::protocol::{NodeMessage, RegionMessage, Register};
use tokio::sync::{mpsc, oneshot};

use super::{engine, settings_with};
use crate::coordinator::{Millis, PlacementError, Reply};
use crate::server::driver::SESSION_OUTBOX;
use crate::server::driver::request::{AdminRequest, Operated, Operation, Refusal};
use crate::server::driver::writes::{PLACEMENTS_PER_TURN, PUSH_DEPTH, PUSHES_PER_SECOND, PUSHES_PER_TURN, STALL_MS};
use crate::server::driver::{Driver, DriverSettings, Input};
use crate::server::metrics::Metrics;
use crate::store::{MemoryStore, Store};

const T0: Millis = 1_000_000;

type Answer = oneshot::Receiver<Result<Operated, Refusal>>;

fn load(store: &MemoryStore, settings: DriverSettings) -> Driver {
    Driver::load(Arc::new(store.clone()), engine(), settings, Arc::new(Metrics::new()), T0).expect("load the driver")
}

/// A request to write `count` placements `p0…` on `target`.
fn set(count: usize, target: &str) -> (Input, Answer) {
    let placements = (0..count).map(|i| (format!("p{i}"), target.to_owned())).collect();
    operate(Operation::SetPlacements(placements))
}

fn operate(operation: Operation) -> (Input, Answer) {
    let (reply, answer) = oneshot::channel();
    (Input::Admin(AdminRequest::Operate { name: "cart".into(), operation, reply }), answer)
}

fn stored(store: &MemoryStore) -> usize {
    store.load().unwrap().types["cart"].durable.live_placements().count()
}

fn written(answer: &mut Answer) -> Vec<String> {
    match answer.try_recv().expect("answered").expect("written").reply {
        Reply::PlacementsWritten { applied, .. } => applied,
        other => panic!("{other:?}"),
    }
}

/// Registers regions `r0…` on sessions `0…` of `cart` at T0; their
/// outboxes, emptied.
fn registered(driver: &mut Driver, regions: u64) -> Vec<mpsc::Receiver<NodeMessage>> {
    let mut inputs = Vec::new();
    let mut outboxes = Vec::new();
    for id in 0..regions {
        let (outbox, rx) = mpsc::channel(SESSION_OUTBOX);
        let register = Register { address: format!("r{id}"), incarnation: 1, sequence: 1, ..Register::default() };
        inputs.push(Input::SessionOpened { session: id, entity_type: "cart".into(), outbox });
        inputs.push(Input::Region { session: id, message: RegionMessage::Register(register) });
        outboxes.push(rx);
    }
    driver.step(inputs, T0).unwrap();
    outboxes.iter_mut().for_each(|rx| while rx.try_recv().is_ok() {});
    outboxes
}

#[test]
fn a_large_write_is_applied_a_slice_per_turn_with_region_inputs_answered_between() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let (outbox, mut rx) = mpsc::channel(crate::server::driver::SESSION_OUTBOX);
    let register = Register { address: "a".into(), incarnation: 1, sequence: 1, ..Register::default() };
    driver
        .step(
            [
                Input::SessionOpened { session: 1, entity_type: "cart".into(), outbox },
                Input::Region { session: 1, message: RegionMessage::Register(register) },
            ],
            T0,
        )
        .unwrap();
    while rx.try_recv().is_ok() {}

    let (request, mut answer) = set(2 * PLACEMENTS_PER_TURN + 400, "a");
    driver.step([request], T0 + 1).unwrap();
    assert_eq!(stored(&store), PLACEMENTS_PER_TURN, "the first slice is committed alone");
    let early = answer.try_recv();
    assert!(early.is_err(), "answered before the whole write was applied: {early:?}");
    assert!(driver.until_tick(T0 + 1).is_zero(), "the driver would sleep with a write half done");

    // A home asked now is answered in the next turn, before the write ends
    // (the region read the first slice's pushes meanwhile).
    while rx.try_recv().is_ok() {}
    let ask = Input::Region { session: 1, message: RegionMessage::GetShardHome { shard: "s1".into() } };
    driver.step([ask], T0 + 2).unwrap();
    let homes: Vec<NodeMessage> =
        std::iter::from_fn(|| rx.try_recv().ok()).filter(|m| matches!(m, NodeMessage::ShardHomeEpoch { .. })).collect();
    assert_eq!(homes, [NodeMessage::ShardHomeEpoch { shard: "s1".into(), home: "a".into(), epoch: 1 }]);
    // The answer was committed and released before the slice, so it took
    // one place of the region's PUSH_DEPTH.
    assert_eq!(stored(&store), PLACEMENTS_PER_TURN + PUSH_DEPTH.min(PLACEMENTS_PER_TURN) - 1);
    assert!(answer.try_recv().is_err());

    while rx.try_recv().is_ok() {}
    driver.step([], T0 + 3).unwrap();
    assert_eq!(stored(&store), 2 * PLACEMENTS_PER_TURN + 400);
    assert_eq!(written(&mut answer).len(), 2 * PLACEMENTS_PER_TURN + 400);
    assert!(!driver.until_tick(T0 + 3).is_zero(), "nothing waits, yet the driver would spin");
}

#[test]
fn a_write_refused_as_a_whole_writes_no_slice() {
    let store = MemoryStore::new();
    let mut settings = settings_with(&["cart"]);
    settings.coordinator.max_placements = 2 * PLACEMENTS_PER_TURN;
    let mut driver = load(&store, settings);
    let (request, mut answer) = set(2 * PLACEMENTS_PER_TURN + 1, "a");
    driver.step([request], T0).unwrap();
    match answer.try_recv().expect("answered at once") {
        Err(Refusal::Placement(PlacementError::TooMany { limit })) => assert_eq!(limit, 2 * PLACEMENTS_PER_TURN),
        other => panic!("{other:?}"),
    }
    assert_eq!(stored(&store), 0, "a refused write was partly applied");
}

#[test]
fn later_writes_wait_behind_a_large_one_and_win_over_it() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let (large, mut large_answer) = set(PLACEMENTS_PER_TURN + 1, "a");
    let (small, mut small_answer) = operate(Operation::SetPlacements(vec![("p0".into(), "b".into())]));
    let (removal, mut removal_answer) = operate(Operation::RemovePlacement(format!("p{PLACEMENTS_PER_TURN}")));
    driver.step([large, small, removal], T0).unwrap();
    assert!(large_answer.try_recv().is_err() && small_answer.try_recv().is_err());
    driver.step([], T0 + 1).unwrap();
    assert_eq!(written(&mut large_answer).len(), PLACEMENTS_PER_TURN + 1);
    assert_eq!(written(&mut small_answer), ["p0"]);
    assert_eq!(written(&mut removal_answer), [format!("p{PLACEMENTS_PER_TURN}")]);
    let loaded = store.load().unwrap();
    let durable = &loaded.types["cart"].durable;
    assert_eq!(durable.placements["p0"].target.as_deref(), Some("b"), "the later write lost to the earlier one");
    assert_eq!(durable.placements[&format!("p{PLACEMENTS_PER_TURN}")].target, None);
}

#[test]
fn a_removal_of_a_shard_without_a_placement_is_refused_with_its_name() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let (removal, mut answer) = operate(Operation::RemovePlacement("p9".into()));
    driver.step([removal], T0).unwrap();
    match answer.try_recv().expect("answered") {
        Err(Refusal::NoPlacement { entity_type, shard }) => {
            assert_eq!((entity_type.as_str(), shard.as_str()), ("cart", "p9"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_slow_region_holds_writes_back_so_its_answers_never_wait_behind_more_than_a_slice() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let (outbox, mut rx) = mpsc::channel(SESSION_OUTBOX);
    let register = Register { address: "a".into(), incarnation: 1, sequence: 1, ..Register::default() };
    let opened = Input::SessionOpened { session: 1, entity_type: "cart".into(), outbox };
    driver.step([opened, Input::Region { session: 1, message: RegionMessage::Register(register) }], T0).unwrap();
    while rx.try_recv().is_ok() {}
    let unread = |rx: &mut mpsc::Receiver<NodeMessage>, take: usize| {
        (0..take).filter(|_| rx.try_recv().is_ok()).count();
    };

    let (request, mut answer) = set(3 * PUSH_DEPTH, "a");
    driver.step([request], T0 + 1).unwrap();
    assert_eq!(stored(&store), PUSH_DEPTH);
    // The region has read less than half: nothing more is queued for it.
    unread(&mut rx, PUSH_DEPTH / 2 - 1);
    driver.step([], T0 + 2).unwrap();
    assert_eq!(stored(&store), PUSH_DEPTH, "pushes queued past the depth of a region that reads slowly");
    assert!(!driver.until_tick(T0 + 2).is_zero(), "a stalled write spins the driver");
    // Half read: the next slice fills its queue to the depth again, no more.
    unread(&mut rx, 1);
    driver.step([], T0 + 3).unwrap();
    assert_eq!(stored(&store), PUSH_DEPTH + PUSH_DEPTH / 2);
    assert_eq!(rx.len(), PUSH_DEPTH, "the region's queue is deeper than PUSH_DEPTH");

    // A region that stops reading holds the write for STALL_MS at most.
    driver.step([], T0 + 4).unwrap();
    assert_eq!(stored(&store), PUSH_DEPTH + PUSH_DEPTH / 2);
    driver.step([], T0 + 4 + STALL_MS).unwrap();
    driver.step([], T0 + 5 + STALL_MS).unwrap();
    driver.step([], T0 + 5 + 2 * STALL_MS).unwrap();
    assert_eq!(stored(&store), 3 * PUSH_DEPTH);
    assert_eq!(written(&mut answer).len(), 3 * PUSH_DEPTH);
    assert!(!driver.sessions().is_empty(), "a slow region lost its session to a write");
}

#[test]
fn a_type_with_many_regions_gets_smaller_slices() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let regions = 40;
    let outboxes = registered(&mut driver, regions);
    let (request, _answer) = set(PLACEMENTS_PER_TURN, "r0");
    driver.step([request], T0 + 1).unwrap();
    let slice = PUSHES_PER_TURN / regions as usize;
    assert!(slice < PLACEMENTS_PER_TURN);
    assert_eq!(stored(&store), slice, "a slice pushed more than PUSHES_PER_TURN messages");
    assert!(outboxes.iter().all(|rx| rx.len() == slice));
}

#[test]
fn slices_are_paced_by_the_time_the_last_one_took() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    // 500 placements, no region: the time the turn took is the pace.
    let (request, _answer) = set(3 * PLACEMENTS_PER_TURN, "a");
    driver.step([request], T0).unwrap();
    driver.pace_slices(std::time::Duration::from_millis(40));
    assert_eq!(stored(&store), PLACEMENTS_PER_TURN);
    assert_eq!(driver.until_tick(T0), std::time::Duration::from_millis(40));
    driver.step([], T0 + 39).unwrap();
    assert_eq!(stored(&store), PLACEMENTS_PER_TURN, "a slice before its pace allowed");
    driver.pace_slices(std::time::Duration::from_millis(40));
    driver.step([], T0 + 40).unwrap();
    assert_eq!(stored(&store), 2 * PLACEMENTS_PER_TURN);
}

#[test]
fn slices_keep_the_nodes_pushes_under_their_rate() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let mut outboxes = registered(&mut driver, 20);
    let (request, _answer) = set(3 * PLACEMENTS_PER_TURN, "r0");
    driver.step([request], T0 + 1).unwrap();
    driver.pace_slices(std::time::Duration::from_millis(1));
    // A slice to 20 regions: PUSHES_PER_TURN pushes, then a pause of
    // what they take at PUSHES_PER_SECOND.
    let slice = PLACEMENTS_PER_TURN.min(PUSHES_PER_TURN / 20);
    let pushed = slice * 20;
    let pause = (pushed * 1_000 / PUSHES_PER_SECOND) as u64;
    assert!(pause > 1, "the test needs a pause longer than the turn's");
    assert_eq!(driver.until_tick(T0 + 1), std::time::Duration::from_millis(pause.min(crate::server::driver::TICK_MS)));
    outboxes.iter_mut().for_each(|rx| while rx.try_recv().is_ok() {});
    driver.step([], T0 + pause).unwrap();
    assert_eq!(stored(&store), slice, "a slice before the push rate allowed");
    driver.step([], T0 + 1 + pause).unwrap();
    assert_eq!(stored(&store), 2 * slice);
}

#[test]
fn after_a_stall_slices_still_keep_to_the_pushes_per_turn() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let regions = 30;
    let _outboxes = registered(&mut driver, regions);
    let slice = PUSHES_PER_TURN / regions as usize;
    let (request, _answer) = set(3 * PLACEMENTS_PER_TURN, "r0");
    driver.step([request], T0 + 1).unwrap();
    // Nobody reads: the first slice fills each queue past half the depth,
    // so the write stalls, then goes on after STALL_MS.
    assert!(slice > PUSH_DEPTH / 2, "the test needs a stall after one slice");
    driver.step([], T0 + 2).unwrap();
    assert_eq!(stored(&store), slice);
    driver.step([], T0 + 2 + STALL_MS).unwrap();
    driver.step([], T0 + 3 + STALL_MS).unwrap();
    assert_eq!(stored(&store), 2 * slice, "the slice after a stall pushed more than PUSHES_PER_TURN messages");
}

#[test]
fn a_write_whose_client_left_before_it_began_writes_nothing() {
    let store = MemoryStore::new();
    let mut driver = load(&store, settings_with(&["cart"]));
    let (first, mut first_answer) = set(PLACEMENTS_PER_TURN + 1, "a");
    let (gone, gone_answer) = operate(Operation::SetPlacements(vec![("q0".into(), "b".into())]));
    let (last, mut last_answer) = operate(Operation::SetPlacements(vec![("q1".into(), "b".into())]));
    driver.step([first, gone, last], T0).unwrap();
    drop(gone_answer);
    driver.step([], T0 + 1).unwrap();
    assert_eq!(written(&mut first_answer).len(), PLACEMENTS_PER_TURN + 1);
    assert_eq!(written(&mut last_answer), ["q1"]);
    let loaded = store.load().unwrap();
    assert!(!loaded.types["cart"].durable.placements.contains_key("q0"), "a write nobody waits for was written");
}

/// Through the router: a forwarded write is applied even when the follower
/// that forwarded it stops waiting before it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_is_applied_after_its_follower_stopped_waiting() {
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};

    use crate::server::tests::TestNode;

    let node = std::sync::Arc::new(TestNode::start());
    let post = |body: String, forwarded: bool| {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/v1/cluster/shards/cart/placements")
            .header("content-type", "application/json");
        if forwarded {
            request = request.header(crate::server::forward::HOP, "follower-1");
        }
        request.body(Body::from(body)).unwrap()
    };
    // Many writes first, each under the low-priority parse's threshold so
    // they queue in order at once; the forwarded one waits behind them.
    let mut large = Vec::new();
    for round in 0..30 {
        let placements: Vec<_> =
            (0..1_200).map(|i| serde_json::json!({"shardId": format!("p{round}-{i}"), "target": "a"})).collect();
        let body = serde_json::json!({ "placements": placements }).to_string();
        assert!(body.len() <= crate::server::body::LOW_PRIORITY_BODY, "the test's bodies must be parsed at once");
        let (node, request) = (node.clone(), post(body, false));
        large.push(tokio::spawn(async move { node.send(request).await }));
    }
    // Until the first slice is written: the queue is busy.
    let store = node.node().state.store.clone();
    let busy = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.placements("cart", None, 1).unwrap().unwrap_or_default().is_empty() {
        assert!(std::time::Instant::now() < busy, "no write began within 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // The follower gives up at once; the write is not dropped.
    let forwarded = post(r#"{"shardId":"late","target":"b"}"#.to_owned(), true);
    let gave_up = tokio::time::timeout(std::time::Duration::from_millis(1), node.send(forwarded)).await;
    assert!(gave_up.is_err(), "the forwarded write was answered at once ({gave_up:?}): the test needs it to wait");
    for write in large {
        let (status, answer) = write.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let page = node.node().state.store.placements("cart", Some("las"), 1).unwrap().unwrap_or_default();
        if page.first().is_some_and(|(shard, target)| shard == "late" && target == "b") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the forwarded write was dropped: {page:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
