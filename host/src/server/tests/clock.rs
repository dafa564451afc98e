//! The wall clock stepping under a running driver (the attack's clock
//! cases): leases and timeouts follow the monotonic clock, and placements
//! are ordered by commit, never by a clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardalloc_proto::protocol::{NodeMessage, RegionMessage, Register};
use tokio::sync::{mpsc, oneshot};

use super::{engine, settings_with};
use crate::clock::SteppedClocks;
use crate::coordinator::{Config, Millis};
use crate::server::driver::request::{AdminRequest, Operation};
use crate::server::driver::{Driver, DriverHandle, DriverSettings, Input};
use crate::server::metrics::Metrics;
use crate::store::{MemoryStore, Store};

const T0: Millis = 1_000_000;
const HOUR: Millis = 3_600_000;

fn set_placement(driver: &mut Driver, shard: &str, region: &str, now: Millis) {
    let (reply, mut answer) = oneshot::channel();
    let operation = Operation::SetPlacements(vec![(shard.into(), region.into())]);
    driver.step([Input::Admin(AdminRequest::Operate { name: "cart".into(), operation, reply })], now).unwrap();
    answer.try_recv().expect("answered once committed").expect("placement written");
}

#[test]
fn a_placement_written_under_a_clock_an_hour_ahead_loses_to_a_later_write_after_a_restart() {
    let store = MemoryStore::new();
    let load = |now| {
        Driver::load(Arc::new(store.clone()), engine(), settings_with(&["cart"]), Arc::new(Metrics::new()), now)
            .expect("load the driver")
    };
    // A node whose clock ran an hour ahead writes a placement…
    let mut ahead = load(T0 + HOUR);
    set_placement(&mut ahead, "42", "a", T0 + HOUR);
    drop(ahead);
    // …then the clock is corrected (or a correct node takes over) and the
    // placement is written again: the later write wins.
    let mut corrected = load(T0);
    set_placement(&mut corrected, "42", "b", T0);
    let placements = store.load().unwrap().types.remove("cart").unwrap().durable.placements;
    assert_eq!(placements["42"].target.as_deref(), Some("b"), "the earlier write outranked the later one");
}

/// A driver thread over `clocks` with short timeouts, and one region `a`
/// registered in session 1; its outbox.
fn running(clocks: Arc<SteppedClocks>) -> (DriverHandle, mpsc::Receiver<NodeMessage>) {
    let coordinator = Config {
        heartbeat_interval_ms: 400,
        unreachable_after_ms: 1_000,
        remove_after_ms: 2_000,
        lease_ms: 2_000,
        ..Config::default()
    };
    let settings = DriverSettings { coordinator, clocks, ..settings_with(&["cart"]) };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (handle, _thread) =
        crate::server::driver::start(store, engine(), settings, Arc::new(Metrics::new())).expect("start the driver");
    let (outbox, mut rx) = mpsc::channel(1024);
    handle.try_send(Input::SessionOpened { session: 1, entity_type: "cart".into(), outbox }).unwrap();
    let register = Register { address: "a".into(), incarnation: 1, sequence: 1, ..Register::default() };
    handle.try_send(Input::Region { session: 1, message: RegionMessage::Register(register) }).unwrap();
    let registered = rx.blocking_recv().expect("an answer to Register");
    assert!(matches!(registered, NodeMessage::Registered { .. }), "{registered:?}");
    (handle, rx)
}

/// `count` heartbeats 400 ms apart (the driver ticks every 100 ms, so
/// ticks come between heartbeats), each answered before the next; the
/// answers. Counted, not timed: a busy machine answers them as surely.
fn heartbeats(handle: &DriverHandle, rx: &mut mpsc::Receiver<NodeMessage>, count: u64) -> Vec<NodeMessage> {
    let mut answers = Vec::new();
    for sequence in 2..2 + count {
        let heartbeat = RegionMessage::Heartbeat { sequence, metrics: Default::default() };
        handle.try_send(Input::Region { session: 1, message: heartbeat }).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        answers.push(rx.blocking_recv().expect("an answer to every heartbeat"));
    }
    answers
}

#[test]
fn a_wall_clock_step_forward_drops_no_region_that_keeps_heartbeating() {
    let clocks = Arc::new(SteppedClocks::new());
    let (handle, mut rx) = running(clocks.clone());
    heartbeats(&handle, &mut rx, 1);
    // NTP steps the node's clock 30 s forward: 15 removal timeouts.
    clocks.step_wall(30_000);
    // Ticks come before the next heartbeat, as they do between heartbeats.
    std::thread::sleep(Duration::from_millis(300));
    let answers = heartbeats(&handle, &mut rx, 5);
    assert!(
        answers.iter().all(|m| matches!(m, NodeMessage::HeartbeatAck { .. })),
        "a heartbeating region was dropped after the step: {answers:?}"
    );
}

#[test]
fn after_a_wall_clock_step_back_a_silent_region_is_still_removed_and_a_new_one_registers() {
    let clocks = Arc::new(SteppedClocks::new());
    let (handle, mut rx) = running(clocks.clone());
    heartbeats(&handle, &mut rx, 1);
    // The clock steps back 10 minutes, and the region falls silent.
    clocks.step_wall(-600_000);
    let started = Instant::now();
    // A new region registers at once after the step.
    let (outbox, mut other) = mpsc::channel(64);
    handle.try_send(Input::SessionOpened { session: 2, entity_type: "cart".into(), outbox }).unwrap();
    let register = Register { address: "b".into(), incarnation: 1, sequence: 1, ..Register::default() };
    handle.try_send(Input::Region { session: 2, message: RegionMessage::Register(register) }).unwrap();
    let answer = other.blocking_recv().expect("an answer to Register");
    assert!(matches!(answer, NodeMessage::Registered { .. }), "{answer:?}");
    // The silent region is removed after its timeout (2 s), not 10 minutes
    // later: its next heartbeat, well after that, is told to register again.
    // (A heartbeat before the removal would keep it alive: hence one probe.)
    std::thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
    while rx.try_recv().is_ok() {}
    let heartbeat = RegionMessage::Heartbeat { sequence: 99, metrics: Default::default() };
    handle.try_send(Input::Region { session: 1, message: heartbeat }).unwrap();
    let answer = rx.blocking_recv().expect("an answer to the heartbeat");
    assert!(
        matches!(answer, NodeMessage::NotRegistered),
        "the silent region was not removed after the step back: {answer:?}"
    );
}
