//! # The coordinator: a sans-I/O state machine per entity type
//!
//! Events go in ([`Event`], each carrying the time as a value), commands come
//! out ([`Command`]); no clock, no sockets, no threads, no randomness. The
//! driver (the server) owns one [`Coordinator`] per entity type, performs the
//! commands in order and feeds back what happens, including
//! [`Event::Persisted`] once a [`Command::Persist`] batch is durable.
//!
//! ```text
//!   driver ──Event{now}──▶ Coordinator::handle ──▶ Vec<Command>
//!     ▲                                              │
//!     └──── Persisted{batch} ◀── store ◀── Persist ──┤
//!                       regions ◀── Send ────────────┤
//!                       operators ◀── Reply ─────────┤
//!                       logs/metrics ◀── Observe ────┘
//! ```
//!
//! ## Persist before reveal
//!
//! Every state change is a [`Change`] applied to the [`Durable`] state and
//! emitted in one `Persist { batch, changes }` per `handle` call. Commands that
//! reveal a decision (a home, a hand-off, a placement broadcast, an
//! operator's "accepted") are held until `Persisted { batch }` arrives; a
//! reveal made while an earlier batch is still unpersisted waits for that batch.
//! Observations are never held.
//!
//! ```text
//!  handle(GetShardHome s)                      handle(Persisted 7)
//!  ├─ allocate s → HomeSet(s, r)               └─ release batch 7's reveals:
//!  ├─ emit Persist{7,[HomeSet]}                   Send(req, ShardHome s→r)
//!  └─ hold Send(req, ShardHome s→r) until 7
//! ```
//!
//! A crash between `Persist` and `Persisted` loses the batch and its
//! reveals together: nobody learnt anything the store does not hold.
//! [`Coordinator::recover`] rebuilds from the durable state.
//!
//! ## Hand-off (Akka's protocol)
//!
//! ```text
//!  coordinator                  every region & proxy             owner
//!  HandOffStarted ─persist─▶ BeginHandOff(s) ──────────────▶ (drop cached home, buffer)
//!       ◀──────────────────── BeginHandOffAck(s) ───────────  (dead region = acked)
//!  all acked ───────────────────────────── HandOff(s) ──────▶ stop s
//!       ◀───────────────────────────────── ShardStopped(s) ──
//!  HomeRemoved, HandOffEnded, HomeSet(s, new) ─persist─▶ ShardHome(s→new) to waiting requesters
//! ```
//!
//! Each step has a deadline (`handoff_timeout_ms`); on time-out the shard
//! keeps its old home ([`Observation::HandOffTimedOut`]). A hand-off in
//! flight at a crash is restarted from BeginHandOff by `recover`; the shard's
//! home only changes after ShardStopped, so no shard ever has two homes.
//!
//! ## Liveness and leases
//!
//! Regions heartbeat; each [`NodeMessage::HeartbeatAck`] renews a lease of
//! `lease_ms` counted from when the region *sent* the heartbeat. A region
//! that cannot renew stops all its shards when its lease runs out. A region
//! silent for `unreachable_after_ms` is unreachable (status in the strategy's
//! topology); after a further `remove_after_ms` it is removed and its shards
//! re-homed at once. `lease_ms < unreachable_after_ms + remove_after_ms`
//! ([`Config::validate`]) so the old home has stopped before the new one
//! starts (assuming clocks that run at the same rate).
//!
//! ## Limits
//!
//! Every collection is bounded by [`Config`]: regions (`max_regions`), homes
//! (`max_shards`), shards with attributes (`max_shards` too), placements and tombstones (`max_placements`, tombstones
//! also by `tombstone_retention_ms`), waiting shards and requesters
//! (`max_pending_shards`, `max_requesters_per_shard`), the operator's
//! rebalance queue (`max_queued_rebalance`), hand-offs in flight
//! (`max_handoffs_in_flight`), the last allocation reason per shard (one per
//! home). Held reveals are bounded by the batches the driver has not yet
//! acknowledged; a driver must acknowledge (or crash and recover).

mod allocation;
mod attributes;
mod command;
mod config;
mod event;
mod freeze;
mod handoff;
mod placements;
mod regions;
mod shard_load;
mod state;
mod stoppable;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use shardalloc_guest::{Region, RegionStatus, Topology};

pub use attributes::MAX_ATTRIBUTE_WRITES;
pub use command::{Command, MAX_NAMED_CLIPS, NotAccepted, Observation, PlacementError, Reply, Step};
pub use config::{Config, ConfigError, TypeSettings};
pub use event::{Event, Millis, OperatorRequest, RequestId};
pub use freeze::{
    ChangedBy, FREEZE_HISTORY, Freeze, FreezeAction, FreezeError, FreezeOrder, FreezeRecord, FreezeScope, Freezes,
    MAX_FREEZE_MS, MAX_FREEZE_REASON_BYTES, MaintenanceRule,
};
pub use shard_load::{LOAD_SAMPLE_MS, LOADS_PER_SAVE};
/// The coordinator speaks the region protocol's own types: it takes a
/// region's [`Register`] as sent and answers with [`NodeMessage`]s, so the
/// wire and the core cannot drift apart (the driver maps nothing).
pub use shardalloc_proto::protocol::{NodeMessage, Register};
pub use state::{Change, Durable, Home, Interned, Operations, PlacementEntry, RegionRecord, ShardLoad, Stamp};
pub use stoppable::{StopBlocker, ZONE_LABEL};

use crate::strategy::external::ExternalAllocation;
use crate::strategy::table::ShardTable;
use crate::strategy::{AllocationCause, ClusterView};

/// The largest signal a type may have, in bytes: it is sent to the strategy
/// whenever the topology changes.
pub const MAX_SIGNAL_BYTES: usize = 1 << 20;

/// Most metrics a region's moving averages are kept for: twice what one
/// heartbeat carries, so a metric a region stops reporting keeps its
/// average a while; past it the stalest goes.
pub const MAX_SMOOTHED_METRICS: usize = 2 * regions::MAX_METRICS;

/// Folds one heartbeat's metrics into a region's moving averages at `now`:
/// each an exponential moving average with `half_life_ms` (the shard
/// loads' half-life) over the time since that metric last moved; a first
/// value is taken as it is. A metric not reported keeps its average.
fn smooth_metrics(
    smoothed: &mut BTreeMap<String, (f64, Millis)>,
    metrics: &BTreeMap<String, f64>,
    now: Millis,
    half_life_ms: u64,
) {
    for (name, value) in metrics {
        match smoothed.get_mut(name) {
            Some((average, at)) => {
                let keep = (-(now.saturating_sub(*at) as f64) / half_life_ms.max(1) as f64).exp2();
                *average = *value + (*average - *value) * keep;
                *at = now;
            }
            None => {
                smoothed.insert(name.clone(), (*value, now));
            }
        }
    }
    while smoothed.len() > MAX_SMOOTHED_METRICS {
        let stalest = smoothed.iter().min_by_key(|(_, (_, at))| *at).map(|(name, _)| name.clone());
        smoothed.remove(&stalest.expect("not empty"));
    }
}

/// What is known of a region but not persisted.
#[derive(Debug, Clone, Default)]
struct Liveness {
    last_heartbeat: Millis,
    unreachable: bool,
    metrics: BTreeMap<String, f64>,
    /// Each metric's moving average and when it last moved (at most
    /// [`MAX_SMOOTHED_METRICS`]): [`smooth_metrics`].
    smoothed: BTreeMap<String, (f64, Millis)>,
    /// Its shards' smoothed load together, as of its last load report.
    load: Option<f64>,
    /// When its load was last observed as a sample.
    load_sampled_at: Option<Millis>,
}

/// A hand-off's volatile progress, and what its shard's allocation will
/// be told when it has stopped. Not durable: a hand-off a new leader
/// resumes has no destination, and its cause is `drained` when its region
/// drains or leaves, else `rebalance`.
#[derive(Debug, Clone)]
struct Flight {
    step: Step,
    deadline: Millis,
    /// Until when the acknowledgements of `Step::Begin` are awaited.
    ack_deadline: Millis,
    waiting: BTreeSet<String>,
    /// Why the shard moves.
    cause: AllocationCause,
    /// Where the strategy's rebalance sent it, if it said.
    to: Option<String>,
}

/// One entity type's coordinator. See the module documentation.
pub struct Coordinator {
    config: Config,
    durable: Durable,
    external: ExternalAllocation,
    live: BTreeMap<String, Liveness>,
    flights: BTreeMap<String, Flight>,
    /// Shards without a home → regions waiting for the answer.
    pending: BTreeMap<String, Vec<String>>,
    /// Why a waiting shard needs a home, when not a new shard's (a subset
    /// of `pending`'s keys).
    causes: BTreeMap<String, AllocationCause>,
    /// Reveals waiting for their batch.
    held: VecDeque<(u64, Vec<Command>)>,
    next_batch: u64,
    last_rebalance: Option<Millis>,
    /// When a round last started a strategy move (the churn limits' round interval).
    last_moving_round: Option<Millis>,
    topology: Option<Arc<Topology>>,
    /// Every shard strategies see, by handle, with the journal a contract
    /// 0.2 component's copy follows; built at the first view and kept in
    /// step with every change after.
    table: Option<Arc<ShardTable>>,
    /// The topology and [`Coordinator::metrics_revision`] the table's
    /// topology and metric matrices were last given: while both hold, a
    /// view does not build the smoothed matrix again or compare the table's.
    table_inputs: Option<(Arc<Topology>, u64)>,
    /// Counts the heartbeats, the one place a region's metrics (raw and
    /// smoothed) change without the topology changing.
    metrics_revision: u64,
    /// The tombstones by when they were written: the tick purges the
    /// expired ones without walking every placement.
    tombstones: BTreeSet<(Millis, String)>,
    /// Which loads the store and the shard table have yet to see.
    loads: shard_load::LoadBook,
    /// The regions the maintenance rule counts as lost.
    losses: freeze::Losses,
    now: Millis,
    changes: Vec<Change>,
    reveals: Vec<Command>,
    out: Vec<Command>,
}

impl Coordinator {
    /// A coordinator with no state, calling `strategy`.
    pub fn new(config: Config, strategy: ExternalAllocation) -> Result<Self, ConfigError> {
        Ok(Self::recover(config, strategy, Durable::default(), 0)?.0)
    }

    /// A coordinator rebuilt from the durable state, at time `now`: every
    /// region gets a fresh heartbeat clock, hand-offs in flight restart from
    /// BeginHandOff (the returned commands). `strategy`'s placements are
    /// replaced by the durable ones.
    pub fn recover(
        config: Config,
        mut strategy: ExternalAllocation,
        durable: Durable,
        now: Millis,
    ) -> Result<(Self, Vec<Command>), ConfigError> {
        config.validate()?;
        let stale: Vec<String> = strategy.placements().keys().cloned().collect();
        for shard in stale {
            strategy.remove_placement(&shard);
        }
        for (shard, target) in durable.live_placements() {
            strategy.set_placement(shard.clone(), target.clone());
        }
        let live = durable
            .regions
            .keys()
            .map(|a| (a.clone(), Liveness { last_heartbeat: now, ..Liveness::default() }))
            .collect();
        let tombstones = durable
            .placements
            .iter()
            .filter(|(_, e)| e.target.is_none())
            .map(|(shard, e)| (e.written_at, shard.clone()))
            .collect();
        let mut coordinator = Coordinator {
            config,
            durable,
            external: strategy,
            live,
            flights: BTreeMap::new(),
            pending: BTreeMap::new(),
            causes: BTreeMap::new(),
            held: VecDeque::new(),
            next_batch: 1,
            last_rebalance: Some(now),
            last_moving_round: None,
            topology: None,
            table: None,
            table_inputs: None,
            metrics_revision: 0,
            tombstones,
            loads: shard_load::LoadBook::default(),
            losses: freeze::Losses::default(),
            now,
            changes: Vec::new(),
            reveals: Vec::new(),
            out: Vec::new(),
        };
        coordinator.loads = shard_load::LoadBook::new(now, &coordinator.durable);
        coordinator.losses = freeze::Losses::recovered(now, coordinator.config.maintenance.window_ms);
        let handoffs: Vec<(String, String)> =
            coordinator.durable.handoffs.iter().map(|(s, f)| (s.clone(), f.clone())).collect();
        for (shard, from) in handoffs {
            let draining = coordinator.durable.regions.get(&from).is_some_and(|r| r.draining || r.leaving);
            let cause = if draining { AllocationCause::Drained } else { AllocationCause::Rebalance };
            coordinator.begin_flight(&shard, &from, cause, None);
        }
        let commands = coordinator.finish_turn();
        Ok((coordinator, commands))
    }

    /// Handles one event and returns the commands to perform, in order.
    pub fn handle(&mut self, event: Event) -> Vec<Command> {
        self.now = self.now.max(event.now());
        match event {
            Event::Register { register, capacity, .. } => self.on_register(register, capacity),
            Event::Heartbeat { address, incarnation, metrics, sequence, .. } => {
                self.on_heartbeat(address, incarnation, metrics, sequence)
            }
            Event::Load { address, incarnation, report, .. } => self.on_load(address, incarnation, report),
            Event::Leave { address, incarnation, .. } => {
                if self.is_current(&address, incarnation, "Leave") {
                    self.on_leave(&address)
                }
            }
            Event::ShardAttributesOffered { region, incarnation, shard, attributes, .. } => {
                if self.durable.regions.get(&region).is_some_and(|r| r.incarnation == incarnation) {
                    self.offer_attributes(&region, shard, attributes)
                }
            }
            Event::GetShardHome { requester, incarnation, shard, .. } => {
                if self.durable.regions.get(&requester).is_some_and(|r| r.incarnation == incarnation) {
                    self.on_get_home(requester, shard)
                } else {
                    self.send_now(&requester, NodeMessage::NotRegistered)
                }
            }
            Event::BeginHandOffAck { region, incarnation, shard, .. } => {
                if self.is_current(&region, incarnation, "BeginHandOffAck") {
                    self.on_ack(&region, &shard)
                }
            }
            Event::ShardStopped { region, incarnation, shard, .. } => {
                if self.is_current(&region, incarnation, "ShardStopped") {
                    self.on_stopped(&region, &shard)
                }
            }
            Event::Tick { .. } => self.on_tick(),
            Event::Persisted { batch, .. } => self.on_persisted(batch),
            Event::Operator { request, op, .. } => self.on_operator(request, op),
        }
        self.finish_turn()
    }

    /// True when `incarnation` is the region's registered one; otherwise the
    /// message is a late one from a previous life and is ignored.
    fn is_current(&mut self, address: &str, incarnation: u64, what: &str) -> bool {
        let current = self.durable.regions.get(address).map(|r| r.incarnation);
        if current == Some(incarnation) {
            return true;
        }
        let why = match current {
            Some(current) => format!("incarnation {incarnation} is not the registered {current}"),
            None => "not registered".to_owned(),
        };
        self.observe(Observation::Ignored { what: format!("{what} from {address}: {why}") });
        false
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many placements are live (tombstones not counted), without
    /// walking them.
    pub fn live_placement_count(&self) -> usize {
        self.external.placements().len()
    }

    /// The durable state, including changes not yet persisted.
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// A shard's home, if it has one.
    pub fn home(&self, shard: &str) -> Option<&Home> {
        self.durable.homes.get(shard)
    }

    /// The shards whose hand-off is in flight.
    pub fn moving(&self) -> impl Iterator<Item = &String> {
        self.durable.handoffs.keys()
    }

    /// A region's shards' smoothed load together, as of its last load
    /// report (`None`: it never sent one since the coordinator started).
    pub fn region_load(&self, address: &str) -> Option<f64> {
        self.live.get(address).and_then(|l| l.load)
    }

    /// The type's churn limits over rounds from now on, as a dry run
    /// applies them: rounds `rebalance_interval_ms` apart, the round
    /// interval counted from this coordinator's last moving round (each
    /// shard's last move is in the durable state's loads).
    pub fn paced(&self) -> crate::strategy::churn::Paced {
        crate::strategy::churn::Paced {
            limits: self.config.churn,
            round_ms: self.config.rebalance_interval_ms,
            start: self.now,
            moved_at: Default::default(),
            last_moving_round: self.last_moving_round,
        }
    }

    /// True when the region is registered and reachable.
    pub fn is_reachable(&self, address: &str) -> bool {
        self.live.get(address).is_some_and(|l| !l.unreachable)
    }

    /// A registered region's status: the one rule behind both the
    /// strategy's topology and the status the REST API reports.
    /// Unreachable once it missed its lease, leaving while it leaves, up
    /// otherwise (`joining` is the contract's, never given today).
    pub fn region_status(&self, region: &RegionRecord) -> RegionStatus {
        if !self.is_reachable(&region.address) {
            RegionStatus::Unreachable
        } else if region.leaving {
            RegionStatus::Leaving
        } else {
            RegionStatus::Up
        }
    }

    /// The strategy with its placements.
    pub fn strategy(&self) -> &ExternalAllocation {
        &self.external
    }

    /// Replaces the wrapped strategy (placements kept).
    pub fn strategy_mut(&mut self) -> &mut ExternalAllocation {
        &mut self.external
    }

    /// The view `allocate` needs: shard counts only, so an allocation
    /// costs nothing per shard in the cluster. It lends the shard table:
    /// drop it before the coordinator's next change. The node's driver also
    /// warms new strategy instances on it (`Slot::activate_on`).
    pub fn allocation_view(&mut self) -> ClusterView {
        let topology = self.topology();
        let metrics = self.metric_matrix(&topology);
        let counts = topology
            .regions()
            .iter()
            .map(|region| self.durable.regions.get(&region.address).map_or(0, |r| r.shards.len() as u32))
            .collect();
        let table = self.table_at(&topology, &metrics, false);
        ClusterView::for_allocation(topology, metrics, counts)
            .expect("the view is consistent by construction")
            .with_table(table)
    }

    /// The shard table at the current topology and metrics, built from the
    /// durable state the first time; with every region's rest share when
    /// `fold` (else at most once in [`shard_load::SHARE_FOLD_MS`]).
    fn table_at(&mut self, topology: &Arc<Topology>, metrics: &[f64], fold: bool) -> Arc<ShardTable> {
        let unchanged = self.table.is_some()
            && self.table_inputs.as_ref().is_some_and(|(t, r)| Arc::ptr_eq(t, topology) && *r == self.metrics_revision);
        let smoothed = (!unchanged).then(|| self.smoothed_matrix(topology));
        let loads = if self.table.is_some() { self.loads_for_table(fold) } else { Vec::new() };
        let table = match &mut self.table {
            Some(table) => table,
            None => {
                let built = self.durable.shard_table(topology, metrics.to_vec(), self.every_load());
                // Built with every load: none is left unseen.
                self.loads_all_seen();
                self.table.insert(Arc::new(built))
            }
        };
        debug_assert_eq!(Arc::strong_count(table), 1, "a view still holds the shard table: a new view copies it");
        let kept = Arc::make_mut(table);
        if let Some(smoothed) = smoothed {
            kept.set_topology(topology, metrics, &smoothed);
            self.table_inputs = Some((topology.clone(), self.metrics_revision));
        }
        if !loads.is_empty() {
            kept.set_loads(loads.iter().map(|(shard, load)| (shard.as_str(), *load)));
        }
        table.clone()
    }

    /// Where the shard table kept change by change differs from one built
    /// afresh from the durable state, if it does: a check for tests and
    /// simulations (it builds a whole table).
    pub fn table_differs(&mut self) -> Option<String> {
        self.table.as_ref()?;
        let topology = self.topology();
        let metrics = self.metric_matrix(&topology);
        let kept = self.table_at(&topology, &metrics, true);
        let fresh = self.durable.shard_table(&topology, metrics, self.every_load());
        kept.differs_from(&fresh)
    }

    /// Keeps the shard table (when built) in step with a change just applied.
    fn change_table(&mut self, change: &Change) {
        let Some(table) = &mut self.table else { return };
        debug_assert_eq!(
            Arc::strong_count(table),
            1,
            "a view still holds the shard table as it changes: the change copies the whole table"
        );
        let pinned_at = |durable: &Durable, shard: &str| {
            durable
                .placements
                .get(shard)
                .and_then(|p| p.target.as_deref())
                .zip(durable.homes.get(shard))
                .is_some_and(|(target, home)| *target == *home.region)
        };
        match change {
            Change::HomeSet { shard, home } => {
                let table = Arc::make_mut(table);
                if table.home(shard, &home.region, home.at).is_err() {
                    // A region registered this turn: the table learns the
                    // topology first.
                    self.table_now();
                    let table = Arc::make_mut(self.table.as_mut().expect("built"));
                    table.home(shard, &home.region, home.at).expect("the region is in the topology it was just given");
                }
                let pinned = pinned_at(&self.durable, shard);
                let table = Arc::make_mut(self.table.as_mut().expect("built"));
                table.set_pinned(shard, pinned);
                // A shard entering the view brings its attributes.
                if let Some(attributes) = self.durable.attributes.get(shard) {
                    table.set_attributes(shard, &state::strategy_attributes(attributes));
                }
                if self.loads.current.get(shard).is_some_and(|l| l.load != 0.0) {
                    self.loads.show(shard);
                }
            }
            Change::HomeRemoved { shard } => Arc::make_mut(table).unhome(shard),
            Change::AttributesSet { shard, attributes } => {
                Arc::make_mut(table).set_attributes(shard, &state::strategy_attributes(attributes))
            }
            Change::HandOffStarted { shard, .. } => Arc::make_mut(table).set_moving(shard, true),
            Change::HandOffEnded { shard } => Arc::make_mut(table).set_moving(shard, false),
            Change::PlacementWritten { shard, .. } | Change::PlacementPurged { shard } => {
                let pinned = pinned_at(&self.durable, shard);
                Arc::make_mut(table).set_pinned(shard, pinned);
            }
            _ => {}
        }
    }

    /// Brings the shard table's topology and metrics up to date.
    fn table_now(&mut self) {
        let topology = self.topology();
        let metrics = self.metric_matrix(&topology);
        self.table_at(&topology, &metrics, false);
    }

    fn metric_matrix(&self, topology: &Topology) -> Vec<f64> {
        self.matrix(topology, |live, name| live.metrics.get(name).copied())
    }

    /// The metric matrix of the regions' moving averages.
    fn smoothed_matrix(&self, topology: &Topology) -> Vec<f64> {
        self.matrix(topology, |live, name| live.smoothed.get(name).map(|(average, _)| *average))
    }

    /// A matrix over the topology's regions and metric names (NaN where
    /// `value` has none).
    fn matrix(&self, topology: &Topology, value: impl Fn(&Liveness, &str) -> Option<f64>) -> Vec<f64> {
        let names = topology.metric_names();
        let mut matrix = Vec::with_capacity(topology.regions().len() * names.len());
        for region in topology.regions() {
            let live = self.live.get(&region.address);
            for name in names {
                matrix.push(live.and_then(|l| value(l, name)).unwrap_or(f64::NAN));
            }
        }
        matrix
    }

    /// The view strategies see now.
    pub fn view(&mut self) -> ClusterView {
        let topology = self.topology();
        let metrics = self.metric_matrix(&topology);
        let homes = topology
            .regions()
            .iter()
            .map(|region| self.durable.regions.get(&region.address).map(|r| r.shards.clone()).unwrap_or_default())
            .collect();
        let in_progress = self.durable.handoffs.keys().cloned().collect();
        // The whole view walks every shard already: the rest shares come too.
        let table = self.table_at(&topology, &metrics, true);
        ClusterView::new(topology, metrics, homes, in_progress)
            .expect("the view is consistent by construction")
            .with_table(table)
    }

    /// The state in the snapshot format `shardalloc strategy eval` reads:
    /// regions in join order with their shards and latest metrics, hand-offs
    /// in flight, live placements and the signal.
    pub fn snapshot(&mut self) -> shardalloc_guest::Snapshot {
        complete_snapshot(self.snapshot_regions(), &self.durable)
    }

    /// The regions of [`Coordinator::snapshot`] without their shards: what
    /// only the live coordinator knows (status, metrics), at a cost per
    /// region, not per shard. [`complete_snapshot`] adds the rest from a
    /// [`Durable`] (the store's, off the driver's thread).
    pub fn snapshot_regions(&mut self) -> Vec<shardalloc_guest::SnapshotRegion> {
        let topology = self.topology();
        topology
            .regions()
            .iter()
            .map(|region| shardalloc_guest::SnapshotRegion {
                address: region.address.clone(),
                shards: Vec::new(),
                status: region.status,
                app_version: region.app_version.clone(),
                join_order: Some(region.join_order),
                labels: region.labels.clone(),
                metrics: self.live.get(&region.address).map(|l| l.metrics.clone()).unwrap_or_default(),
                proxy_only: region.proxy_only,
                draining: region.draining,
                capacity: region.capacity,
                quantities: region.quantities.clone(),
            })
            .collect()
    }

    /// The shared topology, rebuilt only after a region, label, status or
    /// metric name changed.
    fn topology(&mut self) -> Arc<Topology> {
        if let Some(t) = &self.topology {
            return t.clone();
        }
        let mut records: Vec<&RegionRecord> = self.durable.regions.values().collect();
        records.sort_by_key(|r| r.join_order);
        let mut names = BTreeSet::new();
        for l in self.live.values() {
            names.extend(l.metrics.keys().cloned());
        }
        let regions = records
            .into_iter()
            .map(|r| Region {
                address: r.address.clone(),
                status: self.region_status(r),
                app_version: r.app_version.clone(),
                join_order: r.join_order,
                labels: r.labels.clone(),
                proxy_only: r.proxy_only,
                draining: r.draining,
                capacity: r.capacity.load(),
                quantities: r.capacity.as_map().clone(),
            })
            .collect();
        let topology = Arc::new(Topology::new(regions, names.into_iter().collect(), self.durable.signal.clone()));
        self.topology = Some(topology.clone());
        topology
    }

    fn topology_changed(&mut self) {
        self.topology = None;
    }

    /// Applies a change and records it for this turn's persist.
    fn change(&mut self, change: Change) {
        if let Change::PlacementWritten { shard, .. } | Change::PlacementPurged { shard } = &change
            && let Some(old) = self.durable.placements.get(shard)
            && old.target.is_none()
        {
            self.tombstones.remove(&(old.written_at, shard.clone()));
        }
        if let Change::PlacementWritten { shard, entry } = &change
            && entry.target.is_none()
        {
            self.tombstones.insert((entry.written_at, shard.clone()));
        }
        self.follow_homes(&change, false);
        self.durable.apply(&change);
        self.follow_homes(&change, true);
        self.change_table(&change);
        match &change {
            Change::RegionRegistered(_)
            | Change::RegionRemoved { .. }
            | Change::RegionDraining { .. }
            | Change::RegionLeaving { .. }
            | Change::SignalSet { .. } => self.topology_changed(),
            _ => {}
        }
        self.changes.push(change);
    }

    /// A command revealing a decision: released after the persist.
    fn reveal(&mut self, to: &str, message: NodeMessage) {
        self.reveals.push(Command::Send { to: to.to_owned(), message });
    }

    /// Sets the type's signal after checking that it is JSON and not too large.
    fn set_signal(&mut self, request: RequestId, signal: Option<String>) {
        if let Some(text) = &signal {
            if text.len() > MAX_SIGNAL_BYTES {
                let message = format!("the signal is {} bytes; the limit is {MAX_SIGNAL_BYTES}", text.len());
                return self.reply(request, Reply::SignalRefused(message));
            }
            if let Err(error) = serde_json::from_str::<serde_json::Value>(text) {
                return self.reply(request, Reply::SignalRefused(format!("the signal is not JSON: {error}")));
            }
        }
        if self.durable.signal != signal {
            self.change(Change::SignalSet { signal });
        }
        self.reply(request, Reply::Done);
    }

    fn reply(&mut self, request: RequestId, reply: Reply) {
        self.reveals.push(Command::Reply { request, reply });
    }

    fn observe(&mut self, observation: Observation) {
        self.out.push(Command::Observe(observation));
    }

    /// A command that reveals nothing and may go at once.
    fn send_now(&mut self, to: &str, message: NodeMessage) {
        self.out.push(Command::Send { to: to.to_owned(), message });
    }

    fn finish_turn(&mut self) -> Vec<Command> {
        let mut out = std::mem::take(&mut self.out);
        let reveals = std::mem::take(&mut self.reveals);
        if !self.changes.is_empty() {
            let batch = self.next_batch;
            self.next_batch += 1;
            out.push(Command::Persist { batch, changes: std::mem::take(&mut self.changes) });
            self.held.push_back((batch, reveals));
        } else if let Some((_, last)) = self.held.back_mut() {
            last.extend(reveals);
        } else {
            out.extend(reveals);
        }
        out
    }

    fn on_persisted(&mut self, batch: u64) {
        while self.held.front().is_some_and(|(b, _)| *b <= batch) {
            let (_, reveals) = self.held.pop_front().expect("checked");
            for command in reveals {
                // A home answer overtaken by a later change (the region
                // restarted, the shard moved) is dropped: the region asks again.
                if let Command::Send { message: NodeMessage::ShardHomeEpoch { shard, home, epoch }, .. } = &command
                    && self.durable.homes.get(shard).is_none_or(|h| *h.region != **home || h.epoch != *epoch)
                {
                    continue;
                }
                self.out.push(command);
            }
        }
    }

    fn on_tick(&mut self) {
        self.check_liveness();
        self.check_freezes();
        self.check_deadlines();
        self.purge_tombstones();
        self.retry_pending();
        self.finish_leaves();
        let due = match self.last_rebalance {
            Some(last) => self.now.saturating_sub(last) >= self.config.rebalance_interval_ms,
            None => true,
        };
        if due {
            self.last_rebalance = Some(self.now);
            self.rebalance();
        }
        self.drain();
        self.save_loads();
    }

    fn on_operator(&mut self, request: RequestId, op: OperatorRequest) {
        match op {
            OperatorRequest::SetPlacements { placements, stamp } => self.set_placements(request, placements, stamp),
            OperatorRequest::RemovePlacements { shards, stamp } => self.remove_placements(request, shards, stamp),
            OperatorRequest::ListPlacements => {
                let list = self
                    .durable
                    .placements
                    .iter()
                    .filter_map(|(s, e)| e.target.as_ref().map(|t| (s.clone(), t.clone(), e.stamp.clone())))
                    .collect();
                self.reply(request, Reply::Placements(list));
            }
            OperatorRequest::RebalanceNow { shards, immediate } => self.rebalance_now(request, shards, immediate),
            OperatorRequest::Drain { address } => self.set_draining(request, &address, true),
            OperatorRequest::Undrain { address } => self.set_draining(request, &address, false),
            OperatorRequest::SetSignal { signal } => self.set_signal(request, signal),
            OperatorRequest::Retire => self.retire(request),
            OperatorRequest::Freeze(order) => self.freeze(request, order),
            OperatorRequest::Thaw { scopes, reason } => self.thaw(request, scopes, reason),
            OperatorRequest::SetAttributes { writes } => self.set_attributes(request, writes),
        }
    }
}

/// A snapshot from the live regions' part ([`Coordinator::snapshot_regions`])
/// and the durable state: each region's shards, hand-offs in flight, live
/// placements and the signal. Regions the durable state lacks keep no shards.
pub fn complete_snapshot(
    mut regions: Vec<shardalloc_guest::SnapshotRegion>,
    durable: &Durable,
) -> shardalloc_guest::Snapshot {
    for region in &mut regions {
        region.shards = durable.regions.get(&region.address).map(|r| r.shards.clone()).unwrap_or_default();
    }
    shardalloc_guest::Snapshot {
        regions,
        in_progress: durable.handoffs.keys().cloned().collect(),
        placements: durable.live_placements().map(|(s, t)| (s.clone(), t.clone())).collect(),
        signal: durable.signal.as_deref().and_then(|s| serde_json::from_str(s).ok()),
    }
}

#[cfg(test)]
mod attributes_tests;
#[cfg(test)]
mod freeze_tests;
#[cfg(test)]
mod shard_load_tests;
#[cfg(test)]
mod tests;
