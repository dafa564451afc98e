//! Region lifecycle: registration, heartbeats, unreachability, removal,
//! graceful leave, drain and undrain.

use std::collections::BTreeMap;

use shardalloc_proto::capacity::RegionCapacity;

use super::{Change, Coordinator, NodeMessage, Observation, RegionRecord, Register, Reply, RequestId};
use crate::strategy::AllocationCause;

/// Most labels a region may register with.
pub const MAX_LABELS: usize = 64;
/// Most metrics kept from one heartbeat (the first by name); the union of
/// metric names becomes columns of every strategy view.
pub const MAX_METRICS: usize = 64;
/// Longest address, label key or value, role, metric name or version.
pub const MAX_FIELD_BYTES: usize = 256;

/// Why a registration is malformed, if it is.
fn malformed(registration: &Register) -> Option<String> {
    let too_long = |what: &str, text: &str| {
        (text.len() > MAX_FIELD_BYTES).then(|| format!("{what} is {} bytes; at most {MAX_FIELD_BYTES}", text.len()))
    };
    if registration.address.is_empty() {
        return Some("empty address".into());
    }
    if registration.labels.len() > MAX_LABELS {
        return Some(format!("{} labels; at most {MAX_LABELS}", registration.labels.len()));
    }
    if registration.roles.len() > MAX_LABELS {
        return Some(format!("{} roles; at most {MAX_LABELS}", registration.roles.len()));
    }
    too_long("the address", &registration.address)
        .or_else(|| too_long("the application version", &registration.app_version))
        .or_else(|| {
            registration
                .labels
                .iter()
                .find_map(|(k, v)| too_long("a label key", k).or_else(|| too_long("a label value", v)))
        })
        .or_else(|| registration.roles.iter().find_map(|r| too_long("a role", r)))
}

impl Coordinator {
    pub(super) fn on_register(&mut self, registration: Register, capacity: RegionCapacity) {
        let sequence = registration.sequence;
        let address = registration.address.clone();
        if let Some(reason) = malformed(&registration) {
            self.send_now(&address, NodeMessage::RegisterRefused { reason });
            return;
        }
        let existing = self.durable.regions.get(&address).cloned();
        if let Some(old) = &existing
            && registration.incarnation < old.incarnation
        {
            // A late registration of an older incarnation must not re-home
            // the live incarnation's shards.
            let reason = format!(
                "incarnation {} is older than the registered incarnation {}",
                registration.incarnation, old.incarnation
            );
            self.observe(Observation::RegionFenced { address: address.clone(), reason: reason.clone() });
            self.send_now(&address, NodeMessage::RegisterRefused { reason });
            return;
        }
        if existing.is_none() && self.durable.regions.len() >= self.config.max_regions {
            self.observe(Observation::Limit { what: "max_regions" });
            let reason = format!("{} regions registered, the most allowed", self.config.max_regions);
            self.send_now(&address, NodeMessage::RegisterRefused { reason });
            return;
        }
        let mut rehomed = Vec::new();
        let (join_order, draining, leaving, registered_at) = match &existing {
            Some(old) if old.incarnation == registration.incarnation => {
                // A reconnect: what it may have missed while away is said again.
                self.resend_hand_offs(&address);
                (old.join_order, old.draining, old.leaving, old.registered_at)
            }
            Some(old) => {
                // A restart: the old incarnation's shards died with it.
                self.forget_in_flights(&address);
                rehomed = old.shards.clone();
                for shard in &rehomed {
                    self.change(Change::HomeRemoved { shard: shard.clone() });
                }
                (self.durable.next_join_order, old.draining, false, Some(self.now))
            }
            None => (self.durable.next_join_order, false, false, Some(self.now)),
        };
        let record = RegionRecord {
            address: address.clone(),
            incarnation: registration.incarnation,
            roles: registration.roles,
            app_version: registration.app_version,
            join_order,
            labels: registration.labels,
            proxy_only: registration.proxy_only,
            draining,
            leaving,
            shards: Vec::new(),
            registered_at,
            capacity,
        };
        if existing.as_ref().is_none_or(|old| {
            let mut same = record.clone();
            same.shards = old.shards.clone();
            *old != same
        }) {
            self.change(Change::RegionRegistered(record));
        }
        self.losses.back(&address);
        let live = self.live.entry(address.clone()).or_default();
        live.last_heartbeat = self.now;
        if live.unreachable {
            live.unreachable = false;
            self.topology_changed();
        }
        self.reveal(
            &address,
            NodeMessage::Registered {
                incarnation: registration.incarnation,
                sequence,
                lease_ms: self.config.lease_ms,
                heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            },
        );
        if !rehomed.is_empty() {
            // The old incarnation's shards are homed again: the others'
            // cached homes on this address are stale.
            self.tell_removed(&address);
        }
        self.observe(Observation::RegionRegistered {
            address,
            incarnation: registration.incarnation,
            rehomed: rehomed.len(),
        });
        for shard in rehomed {
            self.allocate(&shard, None, AllocationCause::RegionRemoved, None);
        }
        self.retry_pending();
    }

    pub(super) fn on_heartbeat(
        &mut self,
        address: String,
        incarnation: u64,
        metrics: BTreeMap<String, f64>,
        sequence: u64,
    ) {
        if self.durable.regions.get(&address).is_none_or(|r| r.incarnation != incarnation) {
            self.send_now(&address, NodeMessage::NotRegistered);
            return;
        }
        let now = self.now;
        let metrics: BTreeMap<String, f64> = metrics
            .into_iter()
            .filter(|(name, value)| name.len() <= MAX_FIELD_BYTES && value.is_finite())
            .take(MAX_METRICS)
            .collect();
        let live = self.live.entry(address.clone()).or_default();
        live.last_heartbeat = now;
        let mut changed = !live.metrics.keys().eq(metrics.keys());
        super::smooth_metrics(&mut live.smoothed, &metrics, now, self.config.load_half_life_ms);
        self.metrics_revision += 1;
        live.metrics = metrics;
        if live.unreachable {
            live.unreachable = false;
            changed = true;
            self.losses.back(&address);
            self.observe(Observation::RegionReachable { address: address.clone() });
        }
        if changed {
            self.topology_changed();
        }
        self.send_now(&address, NodeMessage::HeartbeatAck { incarnation, sequence, lease_ms: self.config.lease_ms });
    }

    pub(super) fn on_leave(&mut self, address: &str) {
        match self.durable.regions.get(address) {
            None => self.observe(Observation::Ignored { what: format!("leave from unknown region {address}") }),
            Some(r) if r.leaving => {}
            Some(_) => self.change(Change::RegionLeaving { address: address.to_owned() }),
        }
        self.finish_leaves();
        self.drain();
    }

    pub(super) fn retire(&mut self, request: RequestId) {
        let staying: Vec<String> =
            self.durable.regions.values().filter(|r| !r.leaving).map(|r| r.address.clone()).collect();
        for address in staying {
            self.change(Change::RegionLeaving { address });
        }
        self.reply(request, Reply::Done);
        self.finish_leaves();
        self.drain();
    }

    pub(super) fn set_draining(&mut self, request: RequestId, address: &str, draining: bool) {
        match self.durable.regions.get(address) {
            None => self.reply(request, Reply::UnknownRegion(address.to_owned())),
            Some(r) => {
                if r.draining != draining {
                    self.change(Change::RegionDraining { address: address.to_owned(), draining });
                    if draining {
                        self.change(Change::DrainStarted { address: address.to_owned(), at: self.now });
                    }
                    self.observe(Observation::RegionDraining { address: address.to_owned(), draining });
                }
                self.reply(request, Reply::Done);
                self.drain();
            }
        }
    }

    /// Marks silent regions unreachable and removes those silent past the removal timeout.
    pub(super) fn check_liveness(&mut self) {
        let now = self.now;
        let mut remove = Vec::new();
        let mut unreachable = Vec::new();
        for (address, live) in &self.live {
            let silent = now.saturating_sub(live.last_heartbeat);
            if silent >= self.config.removal_ms() {
                remove.push(address.clone());
            } else if silent >= self.config.unreachable_after_ms && !live.unreachable {
                unreachable.push(address.clone());
            }
        }
        for address in unreachable {
            if let Some(live) = self.live.get_mut(&address) {
                live.unreachable = true;
            }
            self.topology_changed();
            self.losses.lost(&address, now);
            self.observe(Observation::RegionUnreachable { address });
        }
        // Every region past the removal timeout is out of the view before
        // any of them is removed: a shard of the first removed must not be
        // re-homed on the next (the coordinator fuzz target found it).
        for address in &remove {
            if let Some(live) = self.live.get_mut(address) {
                live.unreachable = true;
            }
        }
        if !remove.is_empty() {
            self.topology_changed();
        }
        for address in remove {
            self.losses.lost(&address, now);
            self.remove_region(&address, "heartbeat timeout");
        }
    }

    /// Removes a region and re-homes its shards at once.
    pub(super) fn remove_region(&mut self, address: &str, why: &'static str) {
        let Some(record) = self.durable.regions.get(address).cloned() else { return };
        self.forget_in_flights(address);
        for shard in &record.shards {
            self.change(Change::HomeRemoved { shard: shard.clone() });
        }
        self.change(Change::RegionRemoved { address: address.to_owned() });
        self.live.remove(address);
        for waiting in self.pending.values_mut() {
            waiting.retain(|r| r != address);
        }
        self.observe(Observation::RegionRemoved { address: address.to_owned(), why, shards: record.shards.len() });
        self.tell_removed(address);
        for shard in record.shards {
            self.allocate(&shard, None, AllocationCause::RegionRemoved, None);
        }
    }

    /// Tells every other region that `address` (or its old incarnation) is
    /// gone, so each drops its cached homes there (revealed after the
    /// persist, as every answer is).
    fn tell_removed(&mut self, address: &str) {
        let others: Vec<String> = self.durable.regions.keys().filter(|r| *r != address).cloned().collect();
        for region in others {
            self.reveal(&region, NodeMessage::RegionRemoved { address: address.to_owned() });
        }
    }

    /// Removes leaving regions that hold no shard any more and tells them.
    pub(super) fn finish_leaves(&mut self) {
        let done: Vec<String> = self
            .durable
            .regions
            .values()
            .filter(|r| r.leaving && r.shards.is_empty())
            .map(|r| r.address.clone())
            .collect();
        for address in done {
            self.remove_region(&address, "left");
            self.reveal(&address, NodeMessage::LeaveDone);
        }
    }

    /// True when a region other than `address` can take shards.
    fn other_allocatable(&self, address: &str) -> bool {
        self.durable.regions.values().any(|r| {
            r.address != address
                && !r.proxy_only
                && !r.draining
                && !r.leaving
                && self.live.get(&r.address).is_some_and(|l| !l.unreachable)
        })
    }

    /// Hands off shards of leaving and draining regions, at most
    /// `drain_batch` in flight per region. A draining region keeps its
    /// shards while no other region can take them, or while a strict
    /// freeze holds; a leaving one hands them
    /// off anyway (the whole cluster may be leaving): they stop through the
    /// full hand-off and wait, homeless, for the next region.
    pub(super) fn drain(&mut self) {
        let draining: Vec<(String, bool)> = self
            .durable
            .regions
            .values()
            .filter(|r| (r.leaving || r.draining) && !r.shards.is_empty())
            .map(|r| (r.address.clone(), r.leaving))
            .collect();
        let strict = self.durable.operations.freezes.strict();
        for (address, leaving) in draining {
            if !leaving && (strict || !self.other_allocatable(&address)) {
                continue;
            }
            let in_flight = self.durable.handoffs_from(&address);
            let budget = self.config.drain_batch.saturating_sub(in_flight);
            let shards: Vec<String> = self.durable.regions[&address]
                .shards
                .iter()
                .filter(|s| !self.durable.handoffs.contains_key(*s))
                .take(budget)
                .cloned()
                .collect();
            for shard in shards {
                if !self.start_handoff(&shard, AllocationCause::Drained, None) {
                    return;
                }
            }
        }
    }
}
