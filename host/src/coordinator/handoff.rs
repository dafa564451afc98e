//! The hand-off protocol, rebalance ticks and manual rebalance.

use std::collections::BTreeSet;

use super::{
    Change, Coordinator, Flight, MAX_NAMED_CLIPS, NodeMessage, NotAccepted, Observation, Reply, RequestId, Step,
};
use crate::strategy::{AllocationCause, churn};

impl Coordinator {
    /// Starts a hand-off of a homed shard that is not moving, for `cause`
    /// and to `to` if the strategy named a destination; false when the
    /// in-flight limit is reached or the shard cannot move.
    pub(super) fn start_handoff(&mut self, shard: &str, cause: AllocationCause, to: Option<String>) -> bool {
        if self.durable.handoffs.contains_key(shard) || self.flights.len() >= self.config.max_handoffs_in_flight {
            return false;
        }
        let Some(from) = self.durable.homes.get(shard).map(|h| h.region.to_string()) else { return false };
        self.change(Change::HandOffStarted { shard: shard.to_owned(), from: from.clone() });
        self.begin_flight(shard, &from, cause, to);
        true
    }

    /// Step 1: BeginHandOff to every region and proxy.
    pub(super) fn begin_flight(&mut self, shard: &str, from: &str, cause: AllocationCause, to: Option<String>) {
        let waiting: BTreeSet<String> = self.durable.regions.keys().cloned().collect();
        for region in &waiting {
            self.reveal(region, NodeMessage::BeginHandOff { shard: shard.to_owned() });
        }
        let deadline = self.now.saturating_add(self.config.handoff_timeout_ms);
        let ack_deadline = self.now.saturating_add(self.config.handoff_ack_timeout_ms);
        let flight = Flight { step: Step::Begin, deadline, ack_deadline, waiting, cause, to };
        self.flights.insert(shard.to_owned(), flight);
        self.observe(Observation::HandOff { shard: shard.to_owned(), from: from.to_owned(), step: Step::Begin });
        self.advance(shard);
    }

    /// Says again to a reconnected region (same incarnation) what the hand-offs
    /// in flight still wait for from it: BeginHandOff where its
    /// acknowledgement is missing, HandOff where it is the owner.
    pub(super) fn resend_hand_offs(&mut self, address: &str) {
        let mut again = Vec::new();
        for (shard, flight) in &self.flights {
            match flight.step {
                Step::Begin if flight.waiting.contains(address) => {
                    again.push(NodeMessage::BeginHandOff { shard: shard.clone() })
                }
                Step::Stop if self.durable.handoffs.get(shard).is_some_and(|from| from == address) => {
                    again.push(NodeMessage::HandOff { shard: shard.clone() })
                }
                _ => {}
            }
        }
        for message in again {
            self.reveal(address, message);
        }
    }

    /// Step 2 once every region acknowledged: HandOff to the owner.
    fn advance(&mut self, shard: &str) {
        let Some(flight) = self.flights.get_mut(shard) else { return };
        if flight.step != Step::Begin || !flight.waiting.is_empty() {
            return;
        }
        flight.step = Step::Stop;
        flight.deadline = self.now.saturating_add(self.config.handoff_timeout_ms);
        let from = self.durable.handoffs[shard].clone();
        self.reveal(&from, NodeMessage::HandOff { shard: shard.to_owned() });
        self.observe(Observation::HandOff { shard: shard.to_owned(), from, step: Step::Stop });
    }

    pub(super) fn on_ack(&mut self, region: &str, shard: &str) {
        let expected = self.flights.get_mut(shard).is_some_and(|f| f.step == Step::Begin && f.waiting.remove(region));
        if expected {
            self.advance(shard);
        } else {
            self.observe(Observation::Ignored { what: format!("BeginHandOffAck for {shard} from {region}") });
        }
    }

    pub(super) fn on_stopped(&mut self, region: &str, shard: &str) {
        let expected = self.flights.get(shard).is_some_and(|f| f.step == Step::Stop)
            && self.durable.handoffs.get(shard).is_some_and(|from| from == region);
        if !expected {
            self.observe(Observation::Ignored { what: format!("ShardStopped for {shard} from {region}") });
            return;
        }
        let flight = self.flights.remove(shard).expect("checked above");
        self.change(Change::HomeRemoved { shard: shard.to_owned() });
        self.change(Change::HandOffEnded { shard: shard.to_owned() });
        self.observe(Observation::HandOffCompleted { shard: shard.to_owned(), from: region.to_owned() });
        self.record_move(shard);
        self.allocate(shard, None, flight.cause, flight.to.as_deref());
        self.finish_leaves();
    }

    /// A region is gone (removed or restarted): hand-offs from it end (its
    /// shards are re-homed by the caller); it counts as having acknowledged
    /// every other one.
    pub(super) fn forget_in_flights(&mut self, address: &str) {
        let owned: Vec<String> =
            self.durable.handoffs.iter().filter(|(_, from)| *from == address).map(|(s, _)| s.clone()).collect();
        for shard in owned {
            self.flights.remove(&shard);
            self.change(Change::HandOffEnded { shard: shard.clone() });
            self.observe(Observation::HandOffOwnerGone { shard, from: address.to_owned() });
        }
        let acked: Vec<String> = self
            .flights
            .iter_mut()
            .filter_map(|(shard, flight)| flight.waiting.remove(address).then(|| shard.clone()))
            .collect();
        for shard in acked {
            self.advance(&shard);
        }
    }

    /// Ends hand-offs past their step's deadline (the shard keeps its home),
    /// then lets a hand-off go on without the regions that have not
    /// acknowledged its `BeginHandOff` by its acknowledgement deadline: they
    /// count as unreachable for it. The owner must still stop the shard, so
    /// the shard never gets a second home.
    pub(super) fn check_deadlines(&mut self) {
        let now = self.now;
        let late: Vec<String> =
            self.flights.iter().filter(|(_, f)| f.deadline <= now).map(|(s, _)| s.clone()).collect();
        for shard in late {
            let flight = self.flights.remove(&shard).expect("listed");
            let from = self.durable.handoffs.get(&shard).cloned().unwrap_or_default();
            self.change(Change::HandOffEnded { shard: shard.clone() });
            self.observe(Observation::HandOffTimedOut {
                shard: shard.clone(),
                from,
                step: flight.step,
                missing: flight.waiting.into_iter().collect(),
            });
            self.answer_waiting(&shard);
        }
        // After the step deadlines: a hand-off past both ends, it does not go on.
        let late_acks: Vec<String> = self
            .flights
            .iter()
            .filter(|(_, f)| f.step == Step::Begin && f.ack_deadline <= now && !f.waiting.is_empty())
            .map(|(s, _)| s.clone())
            .collect();
        for shard in late_acks {
            let flight = self.flights.get_mut(&shard).expect("listed");
            let missing: Vec<String> = std::mem::take(&mut flight.waiting).into_iter().collect();
            self.observe(Observation::HandOffAckTimedOut { shard: shard.clone(), missing });
            self.advance(&shard);
        }
    }

    /// The rebalance tick: operator-queued shards, then the strategy's set
    /// (placement mismatches first), minus moving ones, bounded. While the
    /// type is frozen the strategy is not asked (placements and the queue
    /// still move shards); while it is frozen strictly nothing moves.
    pub(super) fn rebalance(&mut self) {
        if !self.enough_regions() || self.durable.operations.freezes.strict() {
            return;
        }
        let frozen = self.durable.operations.freezes.frozen();
        let budget = self
            .config
            .max_rebalance_per_tick
            .min(self.config.max_handoffs_in_flight.saturating_sub(self.flights.len()));
        let mut chosen: Vec<String> = Vec::new();
        let queued: Vec<String> = self.durable.queued.iter().cloned().collect();
        for shard in queued {
            if !self.durable.homes.contains_key(&shard) {
                self.change(Change::RebalanceUnqueued { shard });
            } else if chosen.len() < budget && !self.durable.handoffs.contains_key(&shard) {
                chosen.push(shard);
            }
        }
        let mut strategy_moves = BTreeSet::new();
        let mut destinations = std::collections::HashMap::new();
        let mut placement_moves = BTreeSet::new();
        let queued_count = chosen.len();
        if chosen.len() < budget {
            let view = self.view();
            let decision = if frozen { self.external.placement_moves(&view) } else { self.external.rebalance(&view) };
            drop(view);
            if let Some(error) = decision.fallback {
                self.observe(Observation::RebalanceFallback { error: error.to_string() });
            }
            let asked = decision.shards.len() - decision.placement_moves;
            let round = churn::Round {
                now: self.now,
                homed: self.durable.homes.len(),
                last_moving_round: self.last_moving_round,
            };
            let loads = &self.loads.current;
            let clipped = self.config.churn.clip(decision.shards, decision.placement_moves, round, |shard| {
                loads.get(shard).and_then(|l| l.moved_at)
            });
            if !clipped.clipped.is_empty() {
                let by_limit = clipped.counts().into_iter().collect();
                let shards = clipped.clipped.iter().take(MAX_NAMED_CLIPS).map(|(s, _)| s.clone()).collect();
                self.observe(Observation::MovesClipped { asked, by_limit, shards });
            }
            for (index, shard) in clipped.kept.into_iter().enumerate() {
                if chosen.len() >= budget {
                    break;
                }
                if !chosen.contains(&shard) && !self.durable.handoffs.contains_key(&shard) {
                    if index >= decision.placement_moves {
                        strategy_moves.insert(shard.clone());
                    } else {
                        placement_moves.insert(shard.clone());
                    }
                    chosen.push(shard);
                }
            }
            destinations = decision.destinations;
        }
        for (index, shard) in chosen.into_iter().enumerate() {
            // The queue is operators'; a placement move whose placement is
            // gone when the shard arrives is allocated as a lifted one (a
            // live placement decides before the strategy is asked).
            let cause = if index < queued_count {
                AllocationCause::Operator
            } else if placement_moves.contains(&shard) {
                AllocationCause::PlacementLifted
            } else {
                AllocationCause::Rebalance
            };
            let to = destinations.remove(&shard);
            if self.start_handoff(&shard, cause, to) && strategy_moves.contains(&shard) {
                self.last_moving_round = Some(self.now);
            }
        }
    }

    /// `rebalance-now`: queue the shards for the next tick, or hand them off now.
    pub(super) fn rebalance_now(&mut self, request: RequestId, shards: Vec<String>, immediate: bool) {
        let mut accepted = Vec::new();
        let mut rejected = Vec::new();
        let mut seen = BTreeSet::new();
        for shard in shards {
            if !seen.insert(shard.clone()) {
                continue;
            }
            let why = if self.durable.operations.freezes.strict() {
                Some(NotAccepted::Frozen)
            } else if self.durable.handoffs.contains_key(&shard) || self.durable.queued.contains(&shard) {
                Some(NotAccepted::AlreadyMoving)
            } else if !self.durable.homes.contains_key(&shard) {
                Some(if self.pending.contains_key(&shard) { NotAccepted::Unallocated } else { NotAccepted::Unknown })
            } else {
                None
            };
            match why {
                Some(why) => rejected.push((shard, why)),
                None if immediate && self.start_handoff(&shard, AllocationCause::Operator, None) => {
                    accepted.push(shard)
                }
                None if self.durable.queued.len() >= self.config.max_queued_rebalance => {
                    self.observe(Observation::Limit { what: "max_queued_rebalance" });
                    rejected.push((shard, NotAccepted::QueueFull));
                }
                None => {
                    self.change(Change::RebalanceQueued { shard: shard.clone() });
                    accepted.push(shard);
                }
            }
        }
        self.reply(request, Reply::Rebalance { accepted, rejected });
    }
}
