//! The store holds exactly what the coordinator's changes build.

use super::*;
use crate::coordinator::{Command, Config, Coordinator, Event, OperatorRequest, Registration, Stamp, ToRegion};
use crate::strategy::builtin;
use crate::strategy::external::ExternalAllocation;
use crate::strategy::guarded::Guarded;

fn coordinator() -> Coordinator {
    let strategy = ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()));
    Coordinator::new(Config::default(), strategy).unwrap()
}

/// Drives a coordinator with a seeded mix of events, committing every
/// persist to the store and playing the regions' part of hand-offs.
struct Scenario {
    c: Coordinator,
    store: RedbStore,
    revision: Revision,
    now: u64,
    rng: u64,
}

impl Scenario {
    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn feed(&mut self, event: Event) {
        let mut queue = vec![event];
        while let Some(event) = queue.pop() {
            for command in self.c.handle(event) {
                match command {
                    Command::Persist { batch, changes } => {
                        let turn = Turn { changes: [("cart".to_string(), changes)].into(), ..Turn::default() };
                        self.revision = self.store.commit(self.revision, &turn).unwrap();
                        queue.push(Event::Persisted { now: self.now, batch });
                    }
                    Command::Send { to, message: ToRegion::BeginHandOff { shard } } => {
                        let incarnation = self.c.durable().regions.get(&to).map_or(0, |r| r.incarnation);
                        queue.push(Event::BeginHandOffAck { now: self.now, region: to, incarnation, shard });
                    }
                    Command::Send { to, message: ToRegion::HandOff { shard } } if self.rand(4) > 0 => {
                        let incarnation = self.c.durable().regions.get(&to).map_or(0, |r| r.incarnation);
                        queue.push(Event::ShardStopped { now: self.now, region: to, incarnation, shard });
                    }
                    _ => {}
                }
            }
        }
    }

    fn step(&mut self) {
        self.now += 500;
        let region = format!("r{}", self.rand(6));
        let incarnation = self.c.durable().regions.get(&region).map_or(1, |r| r.incarnation);
        let now = self.now;
        let event = match self.rand(100) {
            0..40 => Event::GetShardHome { now, requester: region, incarnation, shard: format!("s{}", self.rand(60)) },
            40..50 => {
                let incarnation = incarnation + self.rand(2);
                let labels = [("zone".to_string(), format!("z{}", self.rand(2)))].into();
                Event::Register {
                    now,
                    registration: Registration { address: region, incarnation, labels, ..Default::default() },
                    sequence: 0,
                }
            }
            50..53 => Event::Leave { now, address: region, incarnation },
            53..60 => {
                let op = if self.rand(2) == 0 {
                    OperatorRequest::Drain { address: region }
                } else {
                    OperatorRequest::Undrain { address: region }
                };
                Event::Operator { now, request: 1, op }
            }
            60..70 => {
                let shard = format!("s{}", self.rand(60));
                let stamp = Stamp::new(now, "test");
                let op = if self.rand(3) > 0 {
                    OperatorRequest::SetPlacements { placements: vec![(shard, region)], stamp }
                } else {
                    OperatorRequest::RemovePlacements { shards: vec![shard], stamp }
                };
                Event::Operator { now, request: 2, op }
            }
            70..75 => {
                let shards = vec![format!("s{}", self.rand(60))];
                let immediate = self.rand(2) == 0;
                Event::Operator { now, request: 3, op: OperatorRequest::RebalanceNow { shards, immediate } }
            }
            75..77 => {
                let signal = Some(format!("{{\"n\":{}}}", self.rand(9)));
                Event::Operator { now, request: 4, op: OperatorRequest::SetSignal { signal } }
            }
            77..85 => Event::Heartbeat { now, address: region, incarnation, metrics: Default::default(), sequence: 1 },
            _ => Event::Tick { now },
        };
        self.feed(event);
    }
}

#[test]
fn loading_gives_back_what_the_coordinator_built() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Scenario { c: coordinator(), store: RedbStore::open(dir.path()).unwrap(), revision: 0, now: 0, rng: 7 };
    for round in 0..20 {
        for _ in 0..100 {
            s.step();
        }
        let loaded = s.store.load().unwrap();
        assert_eq!(loaded.revision, s.revision);
        let durable = loaded.types.get("cart").map(|t| t.durable.clone()).unwrap_or_default();
        assert_eq!(&durable, s.c.durable(), "round {round}");
    }
    let durable = s.c.durable();
    assert!(durable.homes.len() > 10 && !durable.placements.is_empty(), "the scenario did something: {durable:?}");
    // And after reopening the file.
    drop(s.store);
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(&store.load().unwrap().types["cart"].durable, durable);
}

#[test]
fn a_write_based_on_an_old_revision_is_fenced_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RedbStore::open(dir.path()).unwrap();
    let record = TypeRecord { strategy: "hash".into(), config: String::new() };
    let turn = Turn { types: [("cart".to_string(), record.clone())].into(), ..Turn::default() };
    assert_eq!(store.commit(0, &turn).unwrap(), 1);
    let other = Turn { types: [("other".to_string(), record)].into(), ..Turn::default() };
    let error = store.commit(0, &other).unwrap_err();
    assert!(matches!(error, StoreError::Fenced { based_on: 0, current: 1 }), "{error}");
    let loaded = store.load().unwrap();
    assert_eq!(loaded.revision, 1);
    assert_eq!(loaded.types.keys().collect::<Vec<_>>(), ["cart"]);
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open(dir.path()).unwrap());
    {
        let db = ::redb::Database::create(dir.path().join(redb::FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(::redb::TableDefinition::<&str, u64>::new("meta")).unwrap().insert("schema", 99).unwrap();
        txn.commit().unwrap();
    }
    let error = RedbStore::open(dir.path()).err().unwrap();
    assert!(error.to_string().contains("schema version 99"), "{error}");
}

#[test]
fn a_second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = RedbStore::open(dir.path()).unwrap();
    let error = RedbStore::open(dir.path()).err().unwrap();
    assert!(matches!(error, StoreError::InUse { .. }), "{error}");
}

#[test]
fn components_and_the_bounded_activation_history_persist() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = RedbStore::open(dir.path()).unwrap();
    let record = ComponentRecord { digest: "sha256:ab".into(), name: "x".into(), version: "1".into(), size: 3 };
    let mut revision =
        store.commit(0, &Turn { components: vec![(record.clone(), vec![1, 2, 3])], ..Turn::default() }).unwrap();
    for i in 0..(ACTIVATION_HISTORY + 5) {
        let activation = ActivationRecord {
            strategy: "hash".into(),
            name: "hash".into(),
            version: i.to_string(),
            config: String::new(),
            cause: "operator".into(),
            at_ms: i as u64,
        };
        revision = store
            .commit(revision, &Turn { activations: vec![("cart".into(), activation)], ..Turn::default() })
            .unwrap();
    }
    let loaded = store.load().unwrap();
    let history = &loaded.types["cart"].activations;
    assert_eq!(history.len(), ACTIVATION_HISTORY);
    assert_eq!(history[0].version, "5");
    assert_eq!(history.last().unwrap().version, (ACTIVATION_HISTORY + 4).to_string());
    assert_eq!(loaded.components["sha256:ab"], record);
    assert_eq!(store.component("sha256:ab").unwrap(), Some(vec![1, 2, 3]));
    store.commit(revision, &Turn { removed_components: vec!["sha256:ab".into()], ..Turn::default() }).unwrap();
    assert_eq!(store.component("sha256:ab").unwrap(), None);
    assert!(store.load().unwrap().components.is_empty());
}
