//! A seeded simulation: regions on a lossy, delaying network (FIFO per
//! link, but now and then a message duplicated or overtaking the ones
//! before it) with network splits, crashes, restarts, leaves, drains,
//! placements, regions whose clocks run up to 1% fast or slow, a strategy
//! that faults or answers wrongly now and then, coordinator crashes between
//! Persist and Persisted, and store commits that fail (the coordinator
//! restarts from what the store holds). Checked after every step: no shard
//! runs on two live regions; homeless shards get a home in bounded time;
//! once the faults stop, every shard ever requested has a home.
//!
//! The node's wall clock steps now and then, both ways: forward by a second
//! to an hour (an NTP step, a clock that ran an hour ahead), back by a
//! second to ten minutes. The simulation takes the coordinator's time and
//! the placement stamps as the driver does, through the driver's own
//! `clock::coordinator_time` and `clock::StampSequence`, over
//! `clock::ManualClocks` (a restart anchors new clocks at the wall clock,
//! as a starting node does). What a wall step could break is checked too:
//! no region is removed for silence while the coordinator heard from it
//! within the removal timeout; a silent region is removed within that
//! timeout of the last time the coordinator heard from it (or restarted),
//! even after a step back; and every placement write wins over the ones
//! before it, even when the wall clock went back between them.
//!
//! A second scenario, a region storm on a clean network, checks the
//! maintenance mode: four of ten regions crash together, the type freezes
//! itself, nothing moves but the lost regions' shards (re-homed, no
//! hand-off), and the freeze is lifted once they are back.
//!
//! `cargo xtask soak-sim --seeds N` runs `simulation_seeds` over N seeds on
//! every core, resumably (see xtask's `soak_sim.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use shardalloc::clock::{self, Clocks, ManualClocks, StampSequence};
use shardalloc::coordinator::{
    Change, ChangedBy, Command, Config, Coordinator, Durable, Event, FreezeAction, FreezeScope, NodeMessage,
    Observation, OperatorRequest, Register, Reply, Stamp,
};
use shardalloc::strategy::external::ExternalAllocation;
use shardalloc::strategy::guarded::Guarded;
use shardalloc::strategy::{AllocationStrategy, ClusterView, FaultKind, Info, RebalanceMove, StrategyError, builtin};
use shardalloc_proto::protocol::{LoadReport, ShardLoad};

/// Least-shard that faults on a seeded share of its calls; the coordinator's
/// guard must fall back every time.
struct Flaky {
    inner: Box<dyn AllocationStrategy>,
    rng: Rng,
    per_mille: u64,
}

impl Flaky {
    fn fault(&mut self) -> Result<(), StrategyError> {
        if self.rng.chance(self.per_mille) {
            return Err(StrategyError::Fault { kind: FaultKind::Trap, detail: "simulated fault".into() });
        }
        Ok(())
    }

    /// Now and then a wrong answer instead of a fault: the guard must catch it.
    fn wrong(&mut self) -> bool {
        self.rng.chance(self.per_mille / 2)
    }
}

impl AllocationStrategy for Flaky {
    fn info(&self) -> &Info {
        self.inner.info()
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        self.fault()?;
        if self.wrong() {
            // A region that does not exist, or one that cannot take shards.
            let unfit = view.regions().iter().find(|r| !r.is_allocatable()).map(|r| r.address.to_string());
            return Ok(unfit.unwrap_or_else(|| "nowhere".into()));
        }
        self.inner.allocate(view, shard, requester)
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        self.fault()?;
        if self.wrong() {
            let nobody = RebalanceMove::anywhere("a shard nobody has");
            return Ok(vec![nobody.clone(), nobody]);
        }
        let mut moves = self.inner.rebalance(view)?;
        // Now and then a destination: the emptiest allocatable region (where
        // least-shard's allocate would send it), or one that cannot take
        // shards, which the coordinator must not honour on arrival.
        let regions = view.regions();
        let emptiest = (0..regions.len())
            .filter(|i| regions[*i].is_allocatable())
            .min_by_key(|i| (view.shard_counts()[*i], *i))
            .map(|i| regions[i].address.clone());
        let unfit: Vec<String> = regions.iter().filter(|r| !r.is_allocatable()).map(|r| r.address.clone()).collect();
        for m in &mut moves {
            if self.rng.chance(300) {
                m.to = if !unfit.is_empty() && self.rng.chance(500) {
                    Some(unfit[self.rng.below(unfit.len() as u64) as usize].clone())
                } else {
                    emptiest.clone()
                };
            }
        }
        Ok(moves)
    }
}

fn flaky(seed: u64) -> ExternalAllocation {
    let inner = builtin::native("least-shard", "").unwrap().unwrap();
    ExternalAllocation::new(Guarded::new(Box::new(Flaky { inner, rng: Rng(seed | 1), per_mille: 50 })))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[derive(Default)]
struct Region {
    alive: bool,
    incarnation: u64,
    lease_until: u64,
    /// Send times of heartbeats (and registrations) not yet acknowledged, by sequence.
    outstanding: BTreeMap<u64, u64>,
    /// The last sequence number used.
    sequence: u64,
    /// The shards it runs, with the epoch each was started at.
    running: BTreeMap<String, u64>,
    last_heartbeat: u64,
    /// How fast its clock runs, in millionths off true time (±1%).
    drift_ppm: i64,
    /// Shards it asked for and has no answer for yet, with when it last
    /// asked: it asks again every `HOME_RETRY_MS`, as the region client does.
    asked: BTreeMap<String, u64>,
}

/// How long a region waits for a home answer before asking again.
const HOME_RETRY_MS: u64 = 2_000;
/// The node's wall clock when the simulation starts (2026-01-01T00:00:00Z).
const WALL_AT_START: u64 = 1_767_225_600_000;
/// One simulation step, and the coordinator's tick.
const STEP_MS: u64 = 100;

impl Region {
    /// Its own clock's reading at true time `now`.
    fn local(&self, now: u64) -> u64 {
        (now as i64 + now as i64 * self.drift_ppm / 1_000_000) as u64
    }

    /// Numbers a heartbeat or registration sent at `now` (its own clock); keeps the 20 latest.
    fn next_sequence(&mut self, now: u64) -> u64 {
        self.sequence += 1;
        self.outstanding.insert(self.sequence, now);
        while self.outstanding.len() > 20 {
            self.outstanding.pop_first();
        }
        self.sequence
    }
}

#[derive(Clone)]
enum Msg {
    NodeMessage(String, NodeMessage),
    /// A region's event; its `now` is the node's time when it is handled
    /// (`Sim::feed`), as the driver stamps region messages.
    ToCoordinator(String, Event),
}

/// `event` at the coordinator's time `now`.
fn at(mut event: Event, now: u64) -> Event {
    match &mut event {
        Event::Register { now: t, .. }
        | Event::Heartbeat { now: t, .. }
        | Event::Load { now: t, .. }
        | Event::Leave { now: t, .. }
        | Event::GetShardHome { now: t, .. }
        | Event::ShardAttributesOffered { now: t, .. }
        | Event::BeginHandOffAck { now: t, .. }
        | Event::ShardStopped { now: t, .. }
        | Event::Tick { now: t }
        | Event::Persisted { now: t, .. }
        | Event::Operator { now: t, .. } => *t = now,
    }
    event
}

struct Sim {
    rng: Rng,
    /// Checks made, to compare the shard table every 10th.
    checks: u64,
    /// True time: the network's, the regions' (each through its drift) and
    /// the checks'.
    now: u64,
    /// The node's clocks: the coordinator's time is read from them as the
    /// driver reads it (`clock::coordinator_time`); their wall clock steps.
    clocks: ManualClocks,
    /// The placement writes' stamps, as the driver makes them.
    stamps: StampSequence,
    /// The shard of the last placement write: the next one rewrites it half
    /// the time (an operator correcting a write), so writes to one shard
    /// often fall on both sides of a wall step.
    last_written: Option<String>,
    /// When (true time) the coordinator last renewed each region's
    /// liveness: a heartbeat of its registered incarnation, or a
    /// registration it accepted.
    contact: BTreeMap<String, u64>,
    /// When (true time) the coordinator last started.
    restarted: u64,
    config: Config,
    c: Coordinator,
    store: Durable,
    persists: VecDeque<(u64, u64, Vec<Change>)>,
    net: Vec<(u64, u64, Msg)>,
    link_last: BTreeMap<(String, bool), u64>,
    seq: u64,
    regions: BTreeMap<String, Region>,
    /// Each shard's last start: the region and the epoch.
    started: BTreeMap<String, (String, u64)>,
    homeless_since: BTreeMap<String, u64>,
    loss: u64,
    /// Per mille of messages delivered twice, and of messages overtaking.
    duplicate: u64,
    reorder: u64,
    /// Per mille of store commits that fail (the coordinator restarts).
    failed_commits: u64,
    /// Every shard a region asked for.
    requested: BTreeSet<String>,
    /// Messages sent, for the summary.
    events: u64,
    shards: u64,
    /// Regions cut off from the coordinator, and until when.
    split: (BTreeSet<String>, u64),
    /// Calm steps bring dead regions back (off during a storm).
    revive: bool,
    /// Hand-offs started while the type was frozen.
    frozen_moves: Vec<String>,
    /// Hand-offs started, in all.
    moves: usize,
}

impl Sim {
    fn new(seed: u64, loss: u64, regions: usize, shards: u64) -> Self {
        let config = Config::default();
        let clocks = ManualClocks::anchored_at(WALL_AT_START);
        let (c, _) =
            Coordinator::recover(config.clone(), flaky(seed), Durable::default(), clock::coordinator_time(&clocks))
                .unwrap();
        let mut drift = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let regions = (0..regions)
            .map(|i| (format!("r{i}"), Region { drift_ppm: drift.below(20_001) as i64 - 10_000, ..Region::default() }))
            .collect();
        Sim {
            rng: Rng(seed.max(1)),
            checks: 0,
            now: 0,
            clocks,
            stamps: StampSequence::default(),
            last_written: None,
            contact: BTreeMap::new(),
            restarted: 0,
            config,
            c,
            store: Durable::default(),
            persists: VecDeque::new(),
            net: Vec::new(),
            link_last: BTreeMap::new(),
            seq: 0,
            regions,
            started: BTreeMap::new(),
            homeless_since: BTreeMap::new(),
            loss,
            duplicate: 3,
            reorder: 3,
            failed_commits: 1,
            requested: BTreeSet::new(),
            events: 0,
            shards,
            split: (BTreeSet::new(), 0),
            revive: true,
            frozen_moves: Vec::new(),
            moves: 0,
        }
    }

    fn post(&mut self, region: &str, to_region: bool, msg: Msg) {
        if self.rng.chance(self.loss) || (self.now < self.split.1 && self.split.0.contains(region)) {
            return;
        }
        let delay = 1 + self.rng.below(300);
        let key = (region.to_owned(), to_region);
        let at = if self.rng.chance(self.reorder) {
            // Overtakes what the link still carries.
            self.now + delay
        } else {
            let at = (self.now + delay).max(*self.link_last.get(&key).unwrap_or(&0));
            self.link_last.insert(key.clone(), at);
            at
        };
        self.seq += 1;
        if self.rng.chance(self.duplicate) {
            let last = *self.link_last.get(&key).unwrap_or(&0);
            let again = (at + 1 + self.rng.below(300)).max(last);
            self.link_last.insert(key, again);
            self.net.push((again, self.seq, msg.clone()));
            self.seq += 1;
        }
        self.net.push((at, self.seq, msg));
        self.events += 1;
    }

    fn run(&mut self, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Persist { batch, changes } => {
                    for change in &changes {
                        if let Change::HandOffStarted { shard, .. } = change {
                            self.moves += 1;
                            if self.c.frozen() {
                                self.frozen_moves.push(shard.clone());
                            }
                        }
                    }
                    let at = self.now + 1 + self.rng.below(50);
                    self.persists.push_back((at, batch, changes));
                }
                Command::Send { to, message } => self.post(&to.clone(), true, Msg::NodeMessage(to, message)),
                Command::Observe(Observation::RegionRemoved { address, why: "heartbeat timeout", .. }) => {
                    // Removed for silence only when silent for the removal
                    // timeout, on the coordinator's clock as on true time.
                    let heard = self.heard_from(&address);
                    assert!(
                        self.now - heard >= self.config.removal_ms(),
                        "t={}: {address} removed for silence, but the coordinator heard from it at t={heard} \
                         (wall clock {} ms off)",
                        self.now,
                        self.clocks.wall() as i64 - clock::coordinator_time(&self.clocks) as i64
                    );
                }
                Command::Reply { reply: Reply::PlacementsWritten { stale, .. }, .. } => {
                    assert!(stale.is_empty(), "t={}: placement writes lost to earlier ones: {stale:?}", self.now);
                }
                Command::Reply { .. } | Command::Observe(_) => {}
            }
        }
    }

    /// When (true time) the coordinator last renewed `address`'s liveness,
    /// or started.
    fn heard_from(&self, address: &str) -> u64 {
        self.contact.get(address).copied().unwrap_or(0).max(self.restarted)
    }

    /// Hands `event` to the coordinator at the node's time, as the driver
    /// does, and runs what comes out.
    fn feed(&mut self, event: Event) {
        let event = at(event, clock::coordinator_time(&self.clocks));
        let registered = |address: &str| self.c.durable().regions.get(address).map(|r| r.incarnation);
        let renewed = match &event {
            Event::Heartbeat { address, incarnation, .. } => {
                (registered(address) == Some(*incarnation)).then(|| address.clone())
            }
            Event::Register { register: r, .. } => {
                registered(&r.address).is_none_or(|i| r.incarnation >= i).then(|| r.address.clone())
            }
            _ => None,
        };
        if let Some(address) = renewed {
            self.contact.insert(address, self.now);
        }
        let out = self.c.handle(event);
        self.run(out);
    }

    /// Writes a placement (`target`) or removes it (`None`) with the next
    /// stamp, as the driver does; the write must win.
    fn write_placement(&mut self, shard: String, target: Option<String>) {
        let stamp = Stamp::new(self.stamps.stamp(), "sim");
        let op = match &target {
            Some(target) => OperatorRequest::SetPlacements {
                placements: vec![(shard.clone(), target.clone())],
                stamp: stamp.clone(),
            },
            None => OperatorRequest::RemovePlacements { shards: vec![shard.clone()], stamp: stamp.clone() },
        };
        self.feed(Event::Operator { now: self.now, request: 0, op });
        let entry = &self.c.durable().placements[&shard];
        assert!(
            entry.target == target && entry.stamp == stamp,
            "t={}: the last placement write of {shard} ({target:?}, {stamp:?}) lost to {entry:?}",
            self.now
        );
        self.last_written = Some(shard);
    }

    /// The node's wall clock steps, as NTP or an operator steps it: forward
    /// by a second to an hour, or back by a second to ten minutes.
    fn step_wall(&mut self) {
        let (forward, most) = if self.rng.chance(500) {
            (true, [10_000, 60_000, 600_000, 3_600_000][self.rng.below(4) as usize])
        } else {
            (false, [10_000, 60_000, 600_000][self.rng.below(3) as usize])
        };
        let ms = (1_000 + self.rng.below(most - 999)) as i64;
        self.clocks.step_wall(if forward { ms } else { -ms });
    }

    fn region_send(&mut self, address: &str, event: Event) {
        if let Event::GetShardHome { shard, .. } = &event {
            self.requested.insert(shard.clone());
            if let Some(r) = self.regions.get_mut(address) {
                r.asked.insert(shard.clone(), self.now);
            }
        }
        self.post(address, false, Msg::ToCoordinator(address.to_owned(), event));
    }

    fn register(&mut self, address: &str) {
        let now = self.now;
        let r = self.regions.get_mut(address).unwrap();
        let sequence = r.next_sequence(r.local(now));
        let register = Register { address: address.into(), incarnation: r.incarnation, sequence, ..Default::default() };
        self.region_send(address, Event::Register { now, register, capacity: Default::default() });
    }

    fn on_region(&mut self, address: &str, message: NodeMessage) {
        let now = self.now;
        let lease = self.config.lease_ms;
        let r = self.regions.get_mut(address).unwrap();
        if !r.alive {
            return;
        }
        let mut reply = None;
        match message {
            NodeMessage::Registered { incarnation, sequence, .. }
            | NodeMessage::HeartbeatAck { incarnation, sequence, .. }
                if incarnation == r.incarnation =>
            {
                if let Some(sent) = r.outstanding.get(&sequence) {
                    r.lease_until = r.lease_until.max(sent + lease);
                }
                r.outstanding = r.outstanding.split_off(&(sequence + 1));
            }
            NodeMessage::NotRegistered => {
                self.register(address);
                return;
            }
            NodeMessage::ShardHomeEpoch { shard, home, epoch } => {
                r.asked.remove(&shard);
                // As the region client: a run with an older epoch is
                // stopped and the shard started again at the new one.
                let stale = r.running.get(&shard).is_none_or(|running| *running < epoch);
                if home == address && r.local(now) < r.lease_until && stale {
                    // Epochs never decrease, and a shard started on another
                    // region than its last start gets a greater one.
                    if let Some((last_region, last)) = self.started.get(&shard) {
                        assert!(epoch >= *last, "t={now}: {shard} started at epoch {epoch} after {last}");
                        assert!(
                            epoch > *last || last_region == address,
                            "t={now}: {shard} started on {address} at epoch {epoch}, as on {last_region}"
                        );
                    }
                    self.started.insert(shard.clone(), (address.to_owned(), epoch));
                    r.running.insert(shard, epoch);
                }
            }
            NodeMessage::BeginHandOff { shard } => {
                reply = Some(Event::BeginHandOffAck { now, region: address.into(), incarnation: r.incarnation, shard });
            }
            NodeMessage::HandOff { shard } => {
                r.running.remove(&shard);
                reply = Some(Event::ShardStopped { now, region: address.into(), incarnation: r.incarnation, shard });
            }
            NodeMessage::LeaveDone => {
                r.alive = false;
                r.running.clear();
                r.asked.clear();
            }
            _ => {}
        }
        if let Some(event) = reply {
            self.region_send(address, event);
        }
    }

    fn crash_region(&mut self, address: &str) {
        let r = self.regions.get_mut(address).unwrap();
        r.alive = false;
        r.running.clear();
        r.asked.clear();
        // Its sessions die with it.
        self.net.retain(|(_, _, m)| match m {
            Msg::NodeMessage(to, _) => to != address,
            Msg::ToCoordinator(from, _) => from != address,
        });
    }

    fn crash_coordinator(&mut self) {
        // Unfinished persists are lost; sessions break.
        self.persists.clear();
        self.net.clear();
        // The node starts again as the driver loads: new clocks anchored at
        // the wall clock (stepped or not), stamps past every stored one.
        self.clocks = ManualClocks::anchored_at(self.clocks.wall());
        self.stamps = StampSequence::after(self.store.placements.values().map(|e| e.stamp.timestamp));
        self.restarted = self.now;
        let now = clock::coordinator_time(&self.clocks);
        let (c, out) =
            Coordinator::recover(self.config.clone(), flaky(self.rng.next()), self.store.clone(), now).unwrap();
        self.c = c;
        self.run(out);
    }

    fn random_action(&mut self) {
        let names: Vec<String> = self.regions.keys().cloned().collect();
        let pick = names[self.rng.below(names.len() as u64) as usize].clone();
        let roll = self.rng.below(1000);
        let alive = self.regions[&pick].alive;
        if roll < 300 && alive {
            let shard = format!("s{}", self.rng.below(self.shards));
            let incarnation = self.regions[&pick].incarnation;
            self.region_send(&pick, Event::GetShardHome { now: self.now, requester: pick.clone(), incarnation, shard });
        } else if roll < 304 && alive {
            self.crash_region(&pick);
        } else if roll < 330 && !alive {
            let r = self.regions.get_mut(&pick).unwrap();
            r.alive = true;
            r.incarnation += 1;
            r.outstanding.clear();
            r.lease_until = 0;
            self.register(&pick);
        } else if roll < 331 && alive {
            let incarnation = self.regions[&pick].incarnation;
            self.region_send(&pick, Event::Leave { now: self.now, address: pick.clone(), incarnation });
        } else if roll < 334 {
            let op = if self.rng.chance(500) {
                OperatorRequest::Drain { address: pick.clone() }
            } else {
                OperatorRequest::Undrain { address: pick.clone() }
            };
            self.feed(Event::Operator { now: self.now, request: 0, op });
        } else if roll < 338 {
            let shard = match self.last_written.clone() {
                Some(shard) if self.rng.chance(500) => shard,
                _ => format!("s{}", self.rng.below(self.shards)),
            };
            let target = self.rng.chance(700).then_some(pick);
            self.write_placement(shard, target);
        } else if roll < 340 {
            let shard = format!("s{}", self.rng.below(self.shards));
            let op = OperatorRequest::RebalanceNow { shards: vec![shard], immediate: self.rng.chance(500) };
            self.feed(Event::Operator { now: self.now, request: 0, op });
        } else if roll < 342 {
            self.crash_coordinator();
        } else if roll < 344 && self.now >= self.split.1 {
            // A network split: a third of the regions lose the coordinator for 5–30 s.
            let cut: BTreeSet<String> = names.iter().filter(|_| self.rng.chance(333)).cloned().collect();
            self.split = (cut, self.now + 5_000 + self.rng.below(25_000));
        } else if roll < 346 {
            self.step_wall();
        }
    }

    fn step(&mut self, churn: bool) {
        self.now += STEP_MS;
        self.clocks.advance(STEP_MS);
        let now = self.now;
        // Leases first: a region that cannot renew stops its shards.
        for r in self.regions.values_mut() {
            if r.alive && r.local(now) >= r.lease_until {
                r.running.clear();
            }
        }
        // Durable persists, in order.
        while self.persists.front().is_some_and(|(at, _, _)| *at <= now) {
            if self.rng.chance(self.failed_commits) {
                // The store refuses the commit: the node stops, and the
                // coordinator restarts from what the store holds.
                self.crash_coordinator();
                break;
            }
            let (_, batch, changes) = self.persists.pop_front().unwrap();
            for change in &changes {
                self.store.apply(change);
            }
            self.feed(Event::Persisted { now, batch });
        }
        // Deliveries due.
        self.net.sort_by_key(|(at, seq, _)| (*at, *seq));
        let due: Vec<_> = {
            let split = self.net.partition_point(|(at, _, _)| *at <= now);
            self.net.drain(..split).collect()
        };
        for (_, _, msg) in due {
            match msg {
                Msg::NodeMessage(to, message) => self.on_region(&to, message),
                Msg::ToCoordinator(_, event) => self.feed(event),
            }
        }
        // Home requests without an answer are asked again.
        let retries: Vec<(String, u64, String)> = self
            .regions
            .iter()
            .filter(|(_, r)| r.alive)
            .flat_map(|(a, r)| {
                r.asked
                    .iter()
                    .filter(|(_, at)| now - **at >= HOME_RETRY_MS)
                    .map(|(s, _)| (a.clone(), r.incarnation, s.clone()))
            })
            .collect();
        for (address, incarnation, shard) in retries {
            self.region_send(&address, Event::GetShardHome { now, requester: address.clone(), incarnation, shard });
        }
        // Heartbeats.
        let names: Vec<String> = self.regions.keys().cloned().collect();
        for name in &names {
            let r = self.regions.get_mut(name).unwrap();
            if r.alive && now - r.last_heartbeat >= 1000 {
                r.last_heartbeat = now;
                let sequence = r.next_sequence(r.local(now));
                let event = Event::Heartbeat {
                    now,
                    address: name.clone(),
                    incarnation: r.incarnation,
                    metrics: BTreeMap::new(),
                    sequence,
                };
                self.region_send(name, event);
                // Its load: two of the shards it runs and one it may not.
                let running: Vec<String> = self.regions[name].running.keys().take(2).cloned().collect();
                let stranger = format!("s{}", self.rng.below(self.shards));
                let shards = running
                    .into_iter()
                    .chain([stranger])
                    .map(|shard| ShardLoad { shard, load: self.rng.below(1_000) as f64 })
                    .collect();
                let report = LoadReport { window_ms: 1_000, shards, rest: self.rng.below(100) as f64 };
                let incarnation = self.regions[name].incarnation;
                self.region_send(name, Event::Load { now, address: name.clone(), incarnation, report });
            }
        }
        if churn {
            self.random_action();
        } else if self.revive
            && let Some(name) = names.iter().find(|n| !self.regions[*n].alive)
        {
            // Calm: a region that finished leaving (its Leave was sent during
            // the churn) comes back as a new incarnation and stays.
            let r = self.regions.get_mut(name).unwrap();
            r.alive = true;
            r.incarnation += 1;
            r.outstanding.clear();
            r.lease_until = 0;
            let name = name.clone();
            self.register(&name);
        } else if self.rng.chance(300) {
            // Traffic without faults.
            let alive: Vec<String> = self.regions.iter().filter(|(_, r)| r.alive).map(|(a, _)| a.clone()).collect();
            if !alive.is_empty() {
                let pick = alive[self.rng.below(alive.len() as u64) as usize].clone();
                let shard = format!("s{}", self.rng.below(self.shards));
                let incarnation = self.regions[&pick].incarnation;
                self.region_send(&pick, Event::GetShardHome { now, requester: pick.clone(), incarnation, shard });
            }
        }
        self.feed(Event::Tick { now });
        self.check();
    }

    fn check(&mut self) {
        let mut seen: BTreeMap<&String, (&String, u64)> = BTreeMap::new();
        for (address, r) in &self.regions {
            if !r.alive {
                continue;
            }
            for (shard, epoch) in &r.running {
                if let Some((other, other_epoch)) = seen.insert(shard, (address, *epoch)) {
                    let same = if other_epoch == *epoch { ", with the same epoch" } else { "" };
                    panic!("t={}: shard {shard} runs on {other} and {address}{same}", self.now);
                }
            }
        }
        // A shard that had a home gets one again in bounded time while some region can take it.
        let now = self.now;
        let allocatable = self.c.view().regions().iter().any(|r| r.is_allocatable());
        // The shard table strategies of contract 0.2 follow, kept change by
        // change, is what the durable state says. Built afresh to compare,
        // so every 10th step: a drift stays until it is seen.
        self.checks += 1;
        if self.checks.is_multiple_of(10)
            && let Some(drift) = self.c.table_differs()
        {
            panic!("t={now}: the shard table drifted from the durable state: {drift}");
        }
        for (shard, load) in self.c.loads() {
            assert!(load.load.is_finite() && load.load >= 0.0, "t={now}: shard {shard} has load {}", load.load);
        }
        let homes: Vec<String> = self.c.durable().homes.keys().cloned().collect();
        for shard in homes {
            self.homeless_since.insert(shard, u64::MAX);
        }
        let bound = self.config.removal_ms() + 2 * self.config.handoff_timeout_ms + 20_000;
        for (shard, since) in self.homeless_since.iter_mut() {
            if self.c.home(shard).is_some() || !allocatable {
                *since = u64::MAX;
            } else if *since == u64::MAX {
                *since = now;
            } else {
                assert!(now - *since <= bound, "t={now}: shard {shard} homeless since {since}");
            }
        }
        // A silent region is removed within the removal timeout (and the
        // tick after it), whatever the wall clock did meanwhile.
        for address in self.c.durable().regions.keys() {
            let heard = self.heard_from(address);
            assert!(
                now - heard <= self.config.removal_ms() + STEP_MS,
                "t={now}: {address} still registered, silent since t={heard} (wall clock {} ms off)",
                self.clocks.wall() as i64 - clock::coordinator_time(&self.clocks) as i64
            );
        }
    }
}

/// What one seed's run did.
struct Stats {
    steps: usize,
    messages: u64,
}

/// One seed's run: its figures, or the invariant it broke.
fn simulate(seed: u64, regions: usize, shards: u64, churn_steps: usize, calm_steps: usize) -> Result<Stats, String> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed, 20, regions, shards);
        let names: Vec<String> = sim.regions.keys().cloned().collect();
        for name in &names {
            let r = sim.regions.get_mut(name).unwrap();
            r.alive = true;
            r.incarnation = 1;
            sim.register(name);
        }
        // Traffic reaches every shard early on.
        for shard in 0..shards {
            let requester = names[sim.rng.below(names.len() as u64) as usize].clone();
            let shard = format!("s{shard}");
            let event = Event::GetShardHome { now: sim.now, requester: requester.clone(), incarnation: 1, shard };
            sim.region_send(&requester, event);
        }
        for _ in 0..churn_steps {
            sim.step(true);
        }
        // Churn stops: every region comes back and stays; the network is clean.
        sim.loss = 0;
        sim.duplicate = 0;
        sim.reorder = 0;
        sim.failed_commits = 0;
        sim.split = (BTreeSet::new(), 0);
        for name in &names {
            let op = OperatorRequest::Undrain { address: name.clone() };
            sim.feed(Event::Operator { now: sim.now, request: 0, op });
            if !sim.regions[name].alive {
                let r = sim.regions.get_mut(name).unwrap();
                r.alive = true;
                r.incarnation += 1;
                r.outstanding.clear();
                sim.register(name);
            }
        }
        for _ in 0..calm_steps / 2 {
            sim.step(false);
        }
        // Requests lost to the faults are asked again, as regions retry.
        let requested: Vec<String> = sim.requested.iter().cloned().collect();
        for (i, shard) in requested.iter().enumerate() {
            if sim.c.home(shard).is_none() {
                let requester = names[i % names.len()].clone();
                let incarnation = sim.regions[&requester].incarnation;
                let event = Event::GetShardHome {
                    now: sim.now,
                    requester: requester.clone(),
                    incarnation,
                    shard: shard.clone(),
                };
                sim.region_send(&requester, event);
            }
        }
        for _ in 0..calm_steps - calm_steps / 2 {
            sim.step(false);
        }
        // Liveness: once the faults stop, every shard ever requested has a home.
        let homeless: Vec<&String> = sim.requested.iter().filter(|s| sim.c.home(s).is_none()).collect();
        assert!(homeless.is_empty(), "requested shards without a home after the calm: {homeless:?}");
        // The run did something: shards have homes and run.
        let running: usize = sim.regions.values().map(|r| r.running.len()).sum();
        assert!(
            sim.c.durable().homes.len() > shards as usize / 2 && running > 0,
            "idle simulation: {} homes, {running} running, regions {:?}, alive {:?}",
            sim.c.durable().homes.len(),
            sim.c
                .durable()
                .regions
                .values()
                .map(|r| (&r.address, r.leaving, r.draining, r.shards.len()))
                .collect::<Vec<_>>(),
            sim.regions.iter().map(|(a, r)| (a, r.alive, r.lease_until, r.running.len())).collect::<Vec<_>>()
        );
        // Placements whose target is up are honoured.
        for (shard, entry) in &sim.store.placements {
            let (Some(target), Some(home)) = (&entry.target, sim.c.home(shard)) else { continue };
            if sim.c.is_reachable(target) && {
                let r = &sim.c.durable().regions[target];
                !r.draining && !r.leaving
            } {
                assert_eq!(&*home.region, target.as_str(), "placement of {shard} not honoured");
            }
        }
        // Balanced: shard counts of unpinned regions differ by little.
        let counts: Vec<usize> = sim.c.durable().regions.values().map(|r| r.shards.len()).collect();
        let pinned = sim.store.placements.values().filter(|e| e.target.is_some()).count();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 2 + pinned, "unbalanced after calm: {counts:?} with {pinned} placements");
        Stats { steps: churn_steps + calm_steps, messages: sim.events }
    }));
    result.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// A region storm on a clean network: ten regions, four crash at once. The
/// maintenance mode must freeze the type ("4 of 10 regions lost"), no
/// shard may move during the storm except to give the lost regions'
/// shards a home (which is no hand-off), and the freeze must be lifted
/// once the regions are back, after which the strategy evens out again.
fn storm(seed: u64) -> Result<(), String> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed, 0, 10, 200);
        sim.duplicate = 0;
        sim.reorder = 0;
        sim.failed_commits = 0;
        let names: Vec<String> = sim.regions.keys().cloned().collect();
        for name in &names {
            let r = sim.regions.get_mut(name).unwrap();
            r.alive = true;
            r.incarnation = 1;
            sim.register(name);
        }
        for shard in 0..sim.shards {
            let requester = names[sim.rng.below(names.len() as u64) as usize].clone();
            let event = Event::GetShardHome {
                now: sim.now,
                requester: requester.clone(),
                incarnation: 1,
                shard: format!("s{shard}"),
            };
            sim.region_send(&requester, event);
        }
        for _ in 0..600 {
            sim.step(false);
        }
        assert!(!sim.c.frozen(), "frozen before the storm: {:?}", sim.c.freezes());
        // The storm: four regions crash together and stay down for 30 s.
        sim.revive = false;
        let lost: Vec<String> = names.iter().take(4).cloned().collect();
        for name in &lost {
            sim.crash_region(name);
        }
        let started = sim.now;
        let mut frozen_at = None;
        while sim.now < started + 30_000 {
            sim.step(false);
            if frozen_at.is_none() && sim.c.frozen() {
                frozen_at = Some(sim.now);
            }
        }
        let frozen_at = frozen_at.expect("the storm froze the type");
        assert!(
            frozen_at - started <= 10 * sim.config.unreachable_after_ms,
            "froze {} ms into the storm",
            frozen_at - started
        );
        let freeze = sim.c.freezes().now.get(&FreezeScope::Maintenance).expect("the maintenance mode's freeze");
        // Frozen as soon as the third is found silent (heartbeats are staggered).
        assert!(
            ["3 of 10 regions lost in 60 s", "4 of 10 regions lost in 60 s"].contains(&freeze.reason.as_str()),
            "{}",
            freeze.reason
        );
        // Every shard of the lost regions has a home again, with no hand-off.
        let homed = sim.c.durable().homes.len();
        assert_eq!(homed as u64, sim.shards, "shards homeless in the storm");
        // The regions come back (restarted: new incarnations).
        for name in &lost {
            let r = sim.regions.get_mut(name).unwrap();
            r.alive = true;
            r.incarnation += 1;
            r.outstanding.clear();
            r.lease_until = 0;
            sim.register(name);
        }
        let mut lifted_at = None;
        while sim.now < frozen_at + 10 * sim.config.maintenance.window_ms && lifted_at.is_none() {
            sim.step(false);
            if !sim.c.frozen() {
                lifted_at = Some(sim.now);
            }
        }
        let lifted_at = lifted_at.expect("the freeze was lifted after the storm");
        assert!(lifted_at - frozen_at >= sim.config.maintenance.window_ms, "lifted after {} ms", lifted_at - frozen_at);
        assert!(sim.frozen_moves.is_empty(), "shards moved while frozen: {:?}", sim.frozen_moves);
        let last = sim.c.freezes().history.back().unwrap();
        assert_eq!((last.action, last.by), (FreezeAction::Lifted, ChangedBy::Automatic));
        // The strategy runs again: the restarted regions get shards.
        let before = sim.moves;
        for _ in 0..1_200 {
            sim.step(false);
        }
        assert!(sim.moves > before, "nothing moved after the freeze was lifted");
        let counts: Vec<usize> = sim.c.durable().regions.values().map(|r| r.shards.len()).collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 2, "unbalanced after the storm: {counts:?}");
    }));
    result.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

#[test]
fn simulation_region_storm_freezes_the_type() {
    for seed in [1, 2, 3] {
        if let Err(broken) = storm(seed) {
            panic!("storm simulation failed with seed {seed}: {broken}");
        }
    }
}

/// One seed's run; panics naming the seed when it breaks an invariant.
fn run(seed: u64, regions: usize, shards: u64, churn_steps: usize, calm_steps: usize) {
    if let Err(broken) = simulate(seed, regions, shards, churn_steps, calm_steps) {
        panic!("simulation failed with seed {seed}: {broken}");
    }
}

#[test]
fn simulation_few_seeds() {
    for seed in [1, 2, 3, 42] {
        run(seed, 5, 30, 3_000, 3_000);
    }
}

#[test]
fn simulation_at_scale() {
    run(7, 100, 1_000, 1_500, 3_000);
}

/// `cargo test -p shardalloc --test in_process -- coordinator_sim:: --ignored`
#[test]
#[ignore]
fn simulation_long() {
    for seed in 1..40 {
        run(seed, 5, 30, 20_000, 5_000);
    }
    for seed in 100..104 {
        run(seed, 200, 2_000, 5_000, 5_000);
    }
}

/// The seeds named by `SHARDALLOC_SIM_SEEDS` (`FROM..TO`), one line each on
/// stdout: `seed N ok steps S messages M ms T`, or `seed N broken: WHY`.
/// Run by `cargo xtask soak-sim`, which spreads the seeds over the cores,
/// records each line and resumes where it stopped.
#[test]
#[ignore]
fn simulation_seeds() {
    let range = std::env::var("SHARDALLOC_SIM_SEEDS").expect("SHARDALLOC_SIM_SEEDS=FROM..TO");
    let (from, to) = range.split_once("..").expect("FROM..TO");
    let (from, to): (u64, u64) = (from.parse().expect("FROM"), to.parse().expect("TO"));
    std::panic::set_hook(Box::new(|_| {}));
    for seed in from..to {
        let started = std::time::Instant::now();
        match simulate(seed, 5, 30, 6_000, 3_000) {
            Ok(stats) => println!(
                "seed {seed} ok steps {} messages {} ms {}",
                stats.steps,
                stats.messages,
                started.elapsed().as_millis()
            ),
            Err(broken) => println!("seed {seed} broken: {}", broken.replace('\n', " ")),
        }
    }
}
