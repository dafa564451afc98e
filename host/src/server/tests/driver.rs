//! The driver's turn with time as a value: [`Driver::step`] fed inputs,
//! asserting the exact messages each session's outbox gets, what the store
//! holds, and when admin answers are released.

use std::sync::Arc;

use shardalloc_proto::api::{ActivationCause, RegionStatus};
use shardalloc_proto::protocol::{NodeMessage, RegionMessage, Register};
use tokio::sync::{mpsc, oneshot};

use super::{engine, settings_with};
use crate::coordinator::{Config, Millis, Reply};
use crate::server::driver::request::{AdminRequest, Candidate, Operation};
use crate::server::driver::{Driver, DriverSettings, Flow, Input, TICK_MS};
use crate::server::events::{Delivery, EventHub, EventKind, Start};
use crate::server::metrics::Metrics;
use crate::store::{ComponentRecord, Loaded, LoadedType, MemoryStore, Revision, Store, StoreError, Turn};

const T0: Millis = 1_000_000;

fn load(store: Arc<dyn Store>) -> Driver {
    load_with_events(store, Arc::default())
}

fn load_with_events(store: Arc<dyn Store>, events: Arc<EventHub>) -> Driver {
    let settings = DriverSettings { events, ..settings_with(&["cart"]) };
    Driver::load(store, engine(), settings, Arc::new(Metrics::new()), T0).expect("load the driver")
}

/// Every event the hub kept: (seq, kind, shard or region).
fn published(events: &Arc<EventHub>) -> Vec<(u64, EventKind, String)> {
    let mut subscription = events.subscribe(Start::Oldest, usize::MAX, Default::default()).expect("no cap on streams");
    let mut all = Vec::new();
    while !subscription.caught_up() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        match runtime.block_on(subscription.next()) {
            Some(Delivery::Event(e)) => {
                all.push((e.seq, e.kind, e.shard_id.clone().or(e.region.clone()).unwrap_or_default()))
            }
            other => panic!("{other:?}"),
        }
    }
    all
}

/// Opens session `id` and registers `address` in it.
fn register(id: u64, address: &str) -> (Vec<Input>, mpsc::Receiver<NodeMessage>) {
    let (outbox, rx) = mpsc::channel(64);
    let register = Register { address: address.into(), incarnation: 1, sequence: 1, ..Register::default() };
    let inputs = vec![
        Input::SessionOpened { session: id, entity_type: "cart".into(), outbox },
        Input::Region { session: id, message: RegionMessage::Register(register) },
    ];
    (inputs, rx)
}

fn drain(rx: &mut mpsc::Receiver<NodeMessage>) -> Vec<NodeMessage> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[test]
fn a_registration_and_a_home_are_revealed_only_once_committed() {
    let store = MemoryStore::new();
    let events = Arc::new(EventHub::default());
    let mut driver = load_with_events(Arc::new(store.clone()), events.clone());
    let config = Config::default();
    let (inputs, mut rx) = register(1, "a");
    assert_eq!(driver.step(inputs, T0).unwrap(), Flow::Continue);
    assert_eq!(
        drain(&mut rx),
        [NodeMessage::Registered {
            incarnation: 1,
            sequence: 1,
            lease_ms: config.lease_ms,
            heartbeat_interval_ms: config.heartbeat_interval_ms,
        }]
    );
    assert!(store.load().unwrap().types["cart"].durable.regions.contains_key("a"));

    let ask = Input::Region { session: 1, message: RegionMessage::GetShardHome { shard: "s1".into() } };
    driver.step([ask], T0 + 1).unwrap();
    assert_eq!(drain(&mut rx), [NodeMessage::ShardHomeEpoch { shard: "s1".into(), home: "a".into(), epoch: 1 }]);
    assert_eq!(&*store.load().unwrap().types["cart"].durable.homes["s1"].region, "a");
    // The same decisions as events, numbered in order, once committed.
    assert_eq!(
        published(&events),
        [
            (1, EventKind::StrategyActivated, String::new()),
            (2, EventKind::RegionRegistered, "a".into()),
            (3, EventKind::ShardHomed, "s1".into()),
        ]
    );
}

#[test]
fn a_message_before_register_ends_the_session_with_the_rule() {
    let mut driver = load(Arc::new(MemoryStore::new()));
    let (outbox, mut rx) = mpsc::channel(8);
    let inputs = [
        Input::SessionOpened { session: 7, entity_type: "cart".into(), outbox },
        Input::Region { session: 7, message: RegionMessage::GetShardHome { shard: "s".into() } },
    ];
    driver.step(inputs, T0).unwrap();
    assert_eq!(drain(&mut rx), [NodeMessage::Refused { reason: "GetShardHome before Register".into() }]);
    assert!(driver.sessions().is_empty());
}

#[test]
fn time_given_as_a_value_drives_liveness() {
    let mut driver = load(Arc::new(MemoryStore::new()));
    let (inputs, _rx) = register(1, "a");
    driver.step(inputs, T0).unwrap();
    let status = |driver: &Driver| driver.catalog().get("cart").unwrap().region_status("a");
    assert_eq!(status(&driver), RegionStatus::Up);
    let silent = Config::default().unreachable_after_ms;
    driver.step([], T0 + silent - 1).unwrap();
    assert_eq!(status(&driver), RegionStatus::Up, "unreachable before its time");
    // Liveness is checked on the coordinators' tick, every TICK_MS of the given time.
    driver.step([], T0 + silent + TICK_MS).unwrap();
    assert_eq!(status(&driver), RegionStatus::Unreachable);
}

/// A store whose commits fail once `failing` is set.
#[derive(Clone, Default)]
struct FailingStore {
    inner: MemoryStore,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Store for FailingStore {
    fn load(&self) -> Result<Loaded, StoreError> {
        self.inner.load()
    }
    fn load_type(&self, entity_type: &str) -> Result<Option<LoadedType>, StoreError> {
        self.inner.load_type(entity_type)
    }
    fn placements(
        &self,
        t: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, String)>>, StoreError> {
        self.inner.placements(t, after, limit)
    }
    fn homes(
        &self,
        t: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<(String, crate::coordinator::Home)>>, StoreError> {
        self.inner.homes(t, after, limit)
    }
    fn commit(&self, based_on: Revision, turn: &Turn) -> Result<Revision, StoreError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Backend { backend: "test", source: "the disk is gone".into() });
        }
        self.inner.commit(based_on, turn)
    }
    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.inner.put_blob(digest, bytes)
    }
    fn blob(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.blob(digest)
    }
    fn delete_blob(&self, digest: &str) -> Result<(), StoreError> {
        self.inner.delete_blob(digest)
    }
    fn blob_digests(&self) -> Result<Vec<String>, StoreError> {
        self.inner.blob_digests()
    }
    fn schema_version(&self) -> Result<u64, StoreError> {
        self.inner.schema_version()
    }
    fn describe(&self) -> String {
        "failing test store".into()
    }
}

#[test]
fn an_answer_whose_turn_is_not_committed_is_never_released() {
    let store = FailingStore::default();
    let events = Arc::new(EventHub::default());
    let mut driver = load_with_events(Arc::new(store.clone()), events.clone());
    let at_start = published(&events);
    let (reply, mut answer) = oneshot::channel();
    let operation = Operation::SetPlacements(vec![("42".into(), "b".into())]);
    let request = Input::Admin(AdminRequest::Operate { name: "cart".into(), operation, reply });
    store.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(driver.step([request], T0).is_err(), "a failed commit must stop the driver");
    assert!(answer.try_recv().is_err(), "the placement was acknowledged without being stored");
    assert_eq!(published(&events), at_start, "an event of a turn that was not committed was published");
    assert!(store.inner.load().unwrap().types["cart"].durable.placements.is_empty());

    // With a working store the same request is answered once it is stored.
    let store = MemoryStore::new();
    let mut driver = load(Arc::new(store.clone()));
    let (reply, mut answer) = oneshot::channel();
    let operation = Operation::SetPlacements(vec![("42".into(), "b".into())]);
    driver.step([Input::Admin(AdminRequest::Operate { name: "cart".into(), operation, reply })], T0).unwrap();
    let operated = answer.try_recv().unwrap().unwrap();
    assert!(matches!(operated.reply, Reply::PlacementsWritten { .. }), "{operated:?}");
    assert_eq!(operated.live_placements, 1);
    assert!(store.load().unwrap().types["cart"].durable.placements.contains_key("42"));
}

#[test]
fn an_automatic_rollback_is_recorded_in_the_history_and_the_store() {
    let store = MemoryStore::new();
    let mut driver = load(Arc::new(store.clone()));
    let (inputs, mut rx) = register(1, "a");
    driver.step(inputs, T0).unwrap();
    assert!(matches!(drain(&mut rx)[..], [NodeMessage::Registered { .. }]));
    // The misbehaving fixture, uploaded, then activated to trap on every allocate.
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let compiled = engine().compile(bytes).unwrap();
    store.put_blob(&compiled.digest, bytes).unwrap();
    let record = ComponentRecord {
        digest: compiled.digest.clone(),
        name: compiled.info.name.clone(),
        version: compiled.info.version.clone(),
        size: bytes.len() as u64,
        uploaded_at_ms: 0,
    };
    let (reply, _) = oneshot::channel();
    let candidate = Candidate { compiled, config: r#"{"allocate":"panic"}"#.into() };
    let (activated, mut state) = oneshot::channel();
    let inputs = [
        Input::Admin(AdminRequest::AddComponent { record, reply }),
        Input::Admin(AdminRequest::Activate { name: "cart".into(), candidate, reply: activated }),
    ];
    driver.step(inputs, T0 + 1).unwrap();
    assert_eq!(state.try_recv().unwrap().unwrap().active.cause, ActivationCause::Operator);
    // Every allocation traps and falls back; past the limit the slot rolls back on its own.
    let asks: Vec<Input> = (0..10)
        .map(|i| Input::Region { session: 1, message: RegionMessage::GetShardHome { shard: format!("s{i}") } })
        .collect();
    driver.step(asks, T0 + 2).unwrap();
    assert_eq!(drain(&mut rx).len(), 10, "every home request is answered, by the fallback or not");
    let causes: Vec<ActivationCause> =
        driver.catalog().get("cart").unwrap().activations.iter().map(|a| a.cause).collect();
    assert_eq!(causes, [ActivationCause::Initial, ActivationCause::Operator, ActivationCause::AutoRollback]);
    let stored: Vec<ActivationCause> =
        store.load().unwrap().types["cart"].activations.iter().map(|a| a.cause).collect();
    assert_eq!(stored, causes, "the automatic rollback is not in the store");
    assert_eq!(driver.catalog().get("cart").unwrap().record.strategy.to_string(), "least-shard");
}

#[test]
fn bytes_no_component_records_are_collected_at_start() {
    let store = MemoryStore::new();
    store.put_blob("sha256:orphan", b"left by a crash").unwrap();
    let _driver = load(Arc::new(store.clone()));
    assert_eq!(store.blob("sha256:orphan").unwrap(), None);
}

#[test]
fn a_stale_incarnation_is_fenced_by_the_coordinator_and_the_live_session_keeps_its_route() {
    let events = Arc::new(EventHub::default());
    let mut driver = load_with_events(Arc::new(MemoryStore::new()), events.clone());
    let register = |incarnation| {
        RegionMessage::Register(Register { address: "a".into(), incarnation, sequence: 1, ..Register::default() })
    };
    let (outbox, mut live) = mpsc::channel(64);
    let opened = Input::SessionOpened { session: 1, entity_type: "cart".into(), outbox };
    driver.step([opened, Input::Region { session: 1, message: register(2) }], T0).unwrap();
    drain(&mut live);

    // A late session of the older incarnation.
    let (outbox, mut stale) = mpsc::channel(64);
    let opened = Input::SessionOpened { session: 2, entity_type: "cart".into(), outbox };
    driver.step([opened, Input::Region { session: 2, message: register(1) }], T0 + 1).unwrap();
    let reason = "incarnation 1 is older than the registered incarnation 2";
    assert_eq!(drain(&mut stale), [NodeMessage::RegisterRefused { reason: reason.into() }]);
    assert!(drain(&mut live).is_empty(), "the live incarnation's session heard of the stale one");

    // The live session keeps its route; the stale one has none.
    let ask = |session| Input::Region { session, message: RegionMessage::GetShardHome { shard: "s1".into() } };
    driver.step([ask(1)], T0 + 2).unwrap();
    assert_eq!(drain(&mut live), [NodeMessage::ShardHomeEpoch { shard: "s1".into(), home: "a".into(), epoch: 1 }]);
    driver.step([ask(2)], T0 + 3).unwrap();
    assert_eq!(drain(&mut stale), [NodeMessage::Refused { reason: "GetShardHome before Register".into() }]);
    // The coordinator's rule fired: `region-fenced` is published.
    let fenced: Vec<_> =
        published(&events).into_iter().filter(|(_, kind, _)| *kind == EventKind::RegionFenced).collect();
    assert_eq!(fenced.len(), 1, "region-fenced was not published once: {fenced:?}");
    assert_eq!(fenced[0].2, "a");
}

#[test]
fn a_failing_rebalance_moves_nothing_and_is_evented() {
    let events = Arc::new(EventHub::default());
    let store = MemoryStore::new();
    let mut driver = load_with_events(Arc::new(store.clone()), events.clone());
    let (inputs, mut a) = register(1, "a");
    driver.step(inputs, T0).unwrap();
    let asks: Vec<Input> = (0..8)
        .map(|i| Input::Region { session: 1, message: RegionMessage::GetShardHome { shard: format!("s{i}") } })
        .collect();
    driver.step(asks, T0 + 1).unwrap();
    let (inputs, mut b) = register(2, "b");
    driver.step(inputs, T0 + 2).unwrap();
    // The misbehaving fixture, whose rebalance fails and whose allocate is
    // least-shard's: the built-in fallback would move four shards to b.
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let compiled = engine().compile(bytes).unwrap();
    store.put_blob(&compiled.digest, bytes).unwrap();
    let record = ComponentRecord {
        digest: compiled.digest.clone(),
        name: compiled.info.name.clone(),
        version: compiled.info.version.clone(),
        size: bytes.len() as u64,
        uploaded_at_ms: 0,
    };
    let (reply, _) = oneshot::channel();
    let candidate = Candidate { compiled, config: r#"{"rebalance":"error"}"#.into() };
    let (activated, mut state) = oneshot::channel();
    let inputs = [
        Input::Admin(AdminRequest::AddComponent { record, reply }),
        Input::Admin(AdminRequest::Activate { name: "cart".into(), candidate, reply: activated }),
    ];
    driver.step(inputs, T0 + 3).unwrap();
    assert!(state.try_recv().unwrap().is_ok(), "activated");
    drain(&mut a);
    drain(&mut b);
    // Three rebalance rounds, both regions heartbeating.
    let interval = Config::default().rebalance_interval_ms;
    for round in 1..=3u64 {
        let beats = [(1, round), (2, round)].map(|(session, sequence)| Input::Region {
            session,
            message: RegionMessage::Heartbeat { sequence: sequence + 1, metrics: Default::default() },
        });
        driver.step(beats, T0 + 3 + round * interval).unwrap();
    }
    let moves = |rx: &mut mpsc::Receiver<NodeMessage>| {
        drain(rx).into_iter().filter(|m| matches!(m, NodeMessage::BeginHandOff { .. })).count()
    };
    assert_eq!(moves(&mut a) + moves(&mut b), 0, "a failed rebalance moved shards");
    let fallbacks = published(&events).into_iter().filter(|(_, kind, _)| *kind == EventKind::Fallback).count();
    assert!(fallbacks >= 3, "each failed round is evented ({fallbacks} fallback events)");
    let homes = &store.load().unwrap().types["cart"].durable.homes;
    assert!(homes.values().all(|home| &*home.region == "a"), "{homes:?}");
}

#[test]
fn a_strategy_reading_every_shard_id_activates_on_100_000_shards_within_the_defaults() {
    // One host call per id (as a 0.2 strategy must), under the view-load
    // budget.
    activates_reading_every_id(r#"{"rebalance":"read-ids"}"#);
}

#[test]
fn a_strategy_reading_every_shard_id_in_bulk_activates_on_100_000_shards_within_the_defaults() {
    // Contract 0.3: every id with the view, no host call.
    activates_reading_every_id(r#"{"rebalance":"read-ids","needs_ids":true}"#);
}

/// The misbehaving fixture configured with `config` (reading every id on
/// its first rebalance) activates on 100,000 shards, and its rebalances
/// never fall back.
fn activates_reading_every_id(config: &str) {
    let events = Arc::new(EventHub::default());
    let store = MemoryStore::new();
    let mut driver = load_with_events(Arc::new(store.clone()), events.clone());
    const SHARDS: usize = 100_000;
    let mut sessions = Vec::new();
    for (session, address) in [(1, "a"), (2, "b")] {
        let (outbox, rx) = mpsc::channel(SHARDS + 64);
        let register = Register { address: address.into(), incarnation: 1, sequence: 1, ..Register::default() };
        let inputs = [
            Input::SessionOpened { session, entity_type: "cart".into(), outbox },
            Input::Region { session, message: RegionMessage::Register(register) },
        ];
        driver.step(inputs, T0).unwrap();
        sessions.push(rx);
    }
    let asks: Vec<Input> = (0..SHARDS)
        .map(|i| Input::Region { session: 1, message: RegionMessage::GetShardHome { shard: format!("tenant-{i}") } })
        .collect();
    driver.step(asks, T0 + 1).unwrap();
    assert_eq!(store.load().unwrap().types["cart"].durable.homes.len(), SHARDS);
    // The misbehaving fixture reading every shard's id on its first
    // rebalance, one host call each: past the 50 ms call deadline here,
    // within the view-load budget.
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let compiled = engine().compile(bytes).unwrap();
    store.put_blob(&compiled.digest, bytes).unwrap();
    let record = ComponentRecord {
        digest: compiled.digest.clone(),
        name: compiled.info.name.clone(),
        version: compiled.info.version.clone(),
        size: bytes.len() as u64,
        uploaded_at_ms: 0,
    };
    let (reply, _) = oneshot::channel();
    let candidate = Candidate { compiled, config: config.into() };
    let (activated, mut state) = oneshot::channel();
    let inputs = [
        Input::Admin(AdminRequest::AddComponent { record, reply }),
        Input::Admin(AdminRequest::Activate { name: "cart".into(), candidate, reply: activated }),
    ];
    driver.step(inputs, T0 + 2).unwrap();
    let activated = state.try_recv().expect("answered");
    assert!(activated.is_ok(), "refused after its dry run: {activated:?}");
    // Its rebalances, on the instance the activation warmed, fall back never.
    let interval = Config::default().rebalance_interval_ms;
    for round in 1..=2u64 {
        let beats = [1, 2].map(|session| Input::Region {
            session,
            message: RegionMessage::Heartbeat { sequence: round + 1, metrics: Default::default() },
        });
        driver.step(beats, T0 + 2 + round * interval).unwrap();
    }
    let fallbacks: Vec<_> =
        published(&events).into_iter().filter(|(_, kind, _)| *kind == EventKind::Fallback).collect();
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
}
