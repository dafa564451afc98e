//! The conformance suite every [`Store`] backend passes:
//! [`suite`]`(open)`, where each call of `open` opens the *same* storage
//! again (a fresh, empty one for the first call). It checks, in order:
//!
//! 1. an empty store loads empty, at revision 0, holding [`SCHEMA_VERSION`];
//! 2. a load gives back exactly what a coordinator built, over a seeded
//!    scenario of registrations, homes, hand-offs, placements, drains,
//!    signals, load reports and freezes (with their history) committed
//!    turn by turn (the shards' loads as of their last save), the homes'
//!    epochs and each type's highest epoch included;
//! 3. a write based on an old revision is fenced and writes nothing;
//! 4. blobs are stored, listed, read and deleted apart from turns, and
//!    component records come and go with turns;
//! 5. the activation history keeps the newest [`ACTIVATION_HISTORY`] per type;
//! 6. one type loads alone as it loads with the others, and its live
//!    placements come in pages, in shard order, tombstones skipped, and
//!    so do its homes;
//! 7. a removed type is gone with all its state, and one declared anew
//!    under its name starts empty;
//! 8. after a restart (dropping the store and opening it again) everything
//!    loads the same and commits continue from the same revision.
//!
//! It panics with a message naming the check that failed.

use super::{
    ACTIVATION_HISTORY, ActivationRecord, ComponentRecord, Revision, SCHEMA_VERSION, Store, StoreError, Turn,
    TypeRecord,
};
use crate::coordinator::{
    Change, Command, Config, Coordinator, Event, FreezeOrder, FreezeScope, Home, NodeMessage, OperatorRequest,
    Register, Stamp,
};
use crate::strategy::builtin;
use crate::strategy::external::ExternalAllocation;
use crate::strategy::guarded::Guarded;
use crate::strategy::{ActivationCause, StrategySource};
use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::protocol::{LoadReport, ShardLoad};

/// Opens the backend under test: the same storage on every call.
pub type Open<'a> = &'a dyn Fn() -> Result<Box<dyn Store>, StoreError>;

/// Runs every check against the backend `open` opens. See the module documentation.
pub fn suite(open: Open<'_>) {
    let store = open().expect("open the store");
    empty(&*store);
    let revision = coordinator_state(&*store, 0);
    let revision = fencing(&*store, revision);
    let revision = blobs_and_components(&*store, revision);
    let revision = activation_history(&*store, revision);
    reads_of_one_type(&*store);
    let revision = type_removal(&*store, revision);
    let before = store.load().expect("load before the restart");
    drop(store);
    let store = open().expect("open the store again");
    let after = store.load().expect("load after the restart");
    assert_eq!(after, before, "restart: the store loads differently after it was opened again");
    assert_eq!(after.revision, revision, "restart: the revision changed");
    let next = store.commit(revision, &declare("after-restart", "hash")).expect("restart: commit after reopening");
    assert_eq!(next, revision + 1, "restart: revisions do not continue");
}

fn declare(name: &str, strategy: &str) -> Turn {
    let record = TypeRecord { strategy: StrategySource::Builtin(strategy.into()), config: String::new() };
    Turn { types: [(name.to_owned(), record)].into(), ..Turn::default() }
}

fn empty(store: &dyn Store) {
    let loaded = store.load().expect("empty: load");
    assert_eq!(loaded.revision, 0, "empty: a new store is not at revision 0");
    assert!(loaded.types.is_empty() && loaded.components.is_empty(), "empty: a new store holds {loaded:?}");
    assert_eq!(store.schema_version().expect("empty: schema version"), SCHEMA_VERSION, "empty: schema version");
    assert!(store.blob_digests().expect("empty: blobs").is_empty(), "empty: a new store holds blobs");
}

fn coordinator_state(store: &dyn Store, revision: Revision) -> Revision {
    let mut s = Scenario { c: coordinator(), store, revision, now: 0, rng: 7, saved: Default::default() };
    for round in 0..20 {
        for _ in 0..100 {
            s.step();
        }
        let loaded = store.load().expect("coordinator state: load");
        assert_eq!(loaded.revision, s.revision, "coordinator state: revision after round {round}");
        let durable = loaded.types.get("cart").map(|t| t.durable.clone()).unwrap_or_default();
        // Loads change at every report and are stored at every save.
        let mut expected = s.c.durable().clone();
        expected.loads = s.saved.loads.clone();
        assert_eq!(durable, expected, "coordinator state: the load differs after round {round}");
    }
    let durable = s.c.durable();
    assert!(
        durable.homes.len() > 10
            && !durable.placements.is_empty()
            && durable.signal.is_some()
            && s.saved.loads.values().any(|l| l.load > 0.0)
            && s.saved.loads.values().any(|l| l.moved_at.is_some())
            && durable.attributes.len() > 5
            && durable.operations.freezes.history.len() > 5
            && durable.operations.freezes.history.iter().any(|r| r.action == crate::coordinator::FreezeAction::Expired)
            && durable.epoch > durable.homes.len() as u64
            && durable.homes.values().all(|h| h.epoch > 0),
        "coordinator state: the scenario did too little to check anything: {durable:?}"
    );
    s.revision
}

fn fencing(store: &dyn Store, revision: Revision) -> Revision {
    let next = store.commit(revision, &declare("fenced-a", "hash")).expect("fencing: a current write");
    assert_eq!(next, revision + 1, "fencing: a commit does not advance the revision by one");
    let error = store.commit(revision, &declare("fenced-b", "hash")).expect_err("fencing: a stale write succeeded");
    assert!(
        matches!(error, StoreError::Fenced { based_on, current } if based_on == revision && current == next),
        "fencing: a stale write failed with {error}"
    );
    let loaded = store.load().expect("fencing: load");
    assert_eq!(loaded.revision, next, "fencing: a refused write moved the revision");
    assert!(loaded.types.contains_key("fenced-a") && !loaded.types.contains_key("fenced-b"), "fencing: {loaded:?}");
    next
}

fn blobs_and_components(store: &dyn Store, revision: Revision) -> Revision {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3 << 20).collect();
    let digest = &*crate::strategy::source::digest_of(&bytes);
    store.put_blob(digest, &bytes).expect("blobs: put");
    store.put_blob(digest, &bytes).expect("blobs: putting the same blob again");
    assert_eq!(store.blob(digest).expect("blobs: get").as_deref(), Some(&bytes[..]), "blobs: read back");
    assert_eq!(store.blob_digests().expect("blobs: list"), [digest], "blobs: listed");
    assert_eq!(store.blob("sha256:absent").expect("blobs: get absent"), None, "blobs: an absent blob");
    let record = ComponentRecord {
        digest: digest.into(),
        name: "x".into(),
        version: "1".into(),
        size: 3 << 20,
        uploaded_at_ms: 1,
    };
    let added = Turn { components: vec![record.clone()], ..Turn::default() };
    let revision = store.commit(revision, &added).expect("components: record");
    assert_eq!(store.load().expect("components: load").components[digest], record, "components: the record");
    let removed = Turn { removed_components: vec![digest.into()], ..Turn::default() };
    let revision = store.commit(revision, &removed).expect("components: remove the record");
    store.delete_blob(digest).expect("blobs: delete");
    store.delete_blob(digest).expect("blobs: deleting an absent blob");
    assert_eq!(store.blob(digest).expect("blobs: get deleted"), None, "blobs: a deleted blob");
    assert!(store.load().expect("components: load").components.is_empty(), "components: a removed record");
    assert!(store.blob_digests().expect("blobs: list").is_empty(), "blobs: a deleted blob is listed");
    revision
}

fn activation_history(store: &dyn Store, mut revision: Revision) -> Revision {
    for i in 0..(ACTIVATION_HISTORY + 5) {
        let activation = ActivationRecord {
            strategy: StrategySource::Builtin("hash".into()),
            name: "hash".into(),
            version: i.to_string(),
            config: String::new(),
            cause: ActivationCause::Operator,
            at_ms: i as u64,
        };
        let turn = Turn { activations: vec![("history".into(), activation)], ..Turn::default() };
        revision = store.commit(revision, &turn).expect("activation history: commit");
    }
    let loaded = store.load().expect("activation history: load");
    let history = &loaded.types["history"].activations;
    assert_eq!(history.len(), ACTIVATION_HISTORY, "activation history: not bounded");
    assert_eq!(history[0].version, "5", "activation history: the oldest kept");
    assert_eq!(history.last().unwrap().version, (ACTIVATION_HISTORY + 4).to_string(), "activation history: newest");
    revision
}

fn reads_of_one_type(store: &dyn Store) {
    let all = store.load().expect("one type: load");
    for (name, loaded) in &all.types {
        let alone = store.load_type(name).expect("one type: load_type");
        assert_eq!(alone.as_ref(), Some(loaded), "one type: {name} loads differently alone");
    }
    assert_eq!(store.load_type("no-such-type").expect("one type: load_type"), None);
    assert_eq!(store.placements("no-such-type", None, 10).expect("one type: placements"), None);
    let live: Vec<(String, String)> =
        all.types["cart"].durable.live_placements().map(|(s, t)| (s.clone(), t.clone())).collect();
    assert!(
        all.types["cart"].durable.placements.len() > live.len() && live.len() > 3,
        "one type: the scenario left no tombstones or too few placements to page"
    );
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.placements("cart", after.as_deref(), 3).expect("one type: placements").expect("cart");
        assert!(page.len() <= 3, "one type: a page larger than its limit");
        let Some((last, _)) = page.last().cloned() else { break };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, live, "one type: the pages are not the live placements in order");

    assert_eq!(store.homes("no-such-type", None, 10).expect("one type: homes"), None);
    let homes: Vec<(String, Home)> =
        all.types["cart"].durable.homes.iter().map(|(s, h)| (s.clone(), h.clone())).collect();
    assert!(homes.len() > 7, "one type: the scenario left too few homes to page");
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.homes("cart", after.as_deref(), 4).expect("one type: homes").expect("cart");
        assert!(page.len() <= 4, "one type: a page of homes larger than its limit");
        let Some((last, _)) = page.last().cloned() else { break };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, homes, "one type: the pages are not the homes in shard order");
    let none = store.homes("fenced-a", None, 10).expect("one type: homes");
    assert_eq!(none, Some(Vec::new()), "one type: a declared type without homes has an empty page");
}

fn type_removal(store: &dyn Store, revision: Revision) -> Revision {
    let before = store.load().expect("type removal: load");
    assert!(!before.types["cart"].durable.homes.is_empty(), "type removal: the scenario left no state to remove");
    let removed = Turn { removed_types: vec!["cart".into(), "history".into()], ..Turn::default() };
    let revision = store.commit(revision, &removed).expect("type removal: commit");
    let after = store.load().expect("type removal: load");
    assert!(!after.types.contains_key("cart") && !after.types.contains_key("history"), "type removal: {after:?}");
    assert_eq!(after.types.get("fenced-a"), before.types.get("fenced-a"), "type removal: another type changed");
    // Declared anew, it starts empty.
    let revision = store.commit(revision, &declare("cart", "zone")).expect("type removal: declare again");
    let again = &store.load().expect("type removal: load").types["cart"];
    assert_eq!(again.durable, crate::coordinator::Durable::default(), "type removal: old state came back");
    assert!(again.activations.is_empty(), "type removal: old activations came back");
    revision
}

fn coordinator() -> Coordinator {
    let strategy = ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()));
    Coordinator::new(Config::default(), strategy).unwrap()
}

/// Drives a coordinator with a seeded mix of events, committing every
/// persist to the store and playing the regions' part of hand-offs.
struct Scenario<'s> {
    c: Coordinator,
    store: &'s dyn Store,
    revision: Revision,
    now: u64,
    rng: u64,
    /// The loads as the store should hold them: as of their last save.
    saved: crate::coordinator::Durable,
}

impl Scenario<'_> {
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
                        for change in changes.iter().filter(|c| matches!(c, Change::LoadsSaved { .. })) {
                            self.saved.apply(change);
                        }
                        let turn = Turn { changes: [("cart".to_string(), changes)].into(), ..Turn::default() };
                        self.revision = self.store.commit(self.revision, &turn).expect("coordinator state: commit");
                        queue.push(Event::Persisted { now: self.now, batch });
                    }
                    Command::Send { to, message: NodeMessage::BeginHandOff { shard } } => {
                        let incarnation = self.c.durable().regions.get(&to).map_or(0, |r| r.incarnation);
                        queue.push(Event::BeginHandOffAck { now: self.now, region: to, incarnation, shard });
                    }
                    Command::Send { to, message: NodeMessage::HandOff { shard } } if self.rand(4) > 0 => {
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
                    register: Register { address: region, incarnation, labels, ..Default::default() },
                    capacity: Default::default(),
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
            77..83 => Event::Heartbeat { now, address: region, incarnation, metrics: Default::default(), sequence: 1 },
            83..85 => {
                let shard = format!("s{}", self.rand(60));
                let attributes = match self.rand(3) {
                    0 => ShardAttributes::default(),
                    n => ShardAttributes::new([("tenant", format!("t{n}")), ("tier", "gold".to_owned())])
                        .expect("within the limits"),
                };
                Event::Operator {
                    now,
                    request: 7,
                    op: OperatorRequest::SetAttributes { writes: vec![(shard, attributes)] },
                }
            }
            85..92 => {
                let shard = format!("s{}", self.rand(60));
                let load = self.rand(1_000) as f64;
                let report = LoadReport { window_ms: 1_000, shards: vec![ShardLoad { shard, load }], rest: 1.0 };
                Event::Load { now, address: region, incarnation, report }
            }
            92..95 => {
                let scope = if self.rand(2) == 0 { FreezeScope::Type } else { FreezeScope::Cluster };
                let until = Some(now + 1 + self.rand(20_000));
                let reason = format!("freeze {}", self.rand(100));
                let order = FreezeOrder { scope, reason, until, strict: self.rand(2) == 0 };
                Event::Operator { now, request: 5, op: OperatorRequest::Freeze(order) }
            }
            95..96 => {
                let scopes = vec![FreezeScope::Type, FreezeScope::Cluster];
                Event::Operator { now, request: 6, op: OperatorRequest::Thaw { scopes, reason: "lifted".into() } }
            }
            _ => Event::Tick { now },
        };
        self.feed(event);
    }
}
