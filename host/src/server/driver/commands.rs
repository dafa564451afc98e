//! What the coordinators' commands do on the driver: persists join the
//! turn, messages go to the sessions (the wire's `NodeMessage`s, as the
//! coordinator made them), replies
//! to whoever waits, observations to the metrics and the log.

use super::{Driver, Waiter, request, sessions};
use crate::coordinator::{Command, Event, Observation, OperatorRequest, Reply as CoordinatorReply, RequestId};
use crate::server::events::decision;

impl Driver {
    /// Sends an operator request to a type's coordinator; `waiter` gets its reply.
    pub(super) fn operate(&mut self, entity_type: &str, op: OperatorRequest, waiter: Waiter) {
        let request = self.next_request;
        self.next_request += 1;
        self.waiters.insert(request, waiter);
        self.feed(entity_type, Event::Operator { now: self.now, request, op });
    }

    pub(super) fn feed(&mut self, entity_type: &str, event: Event) {
        let Ok(entry) = self.catalog.get_mut(entity_type) else { return };
        let commands = entry.coordinator.handle(event);
        self.execute(entity_type, commands);
    }

    pub(super) fn execute(&mut self, entity_type: &str, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Persist { batch, changes } => {
                    self.turn.changes.entry(entity_type.to_owned()).or_default().extend(changes);
                    self.batches.insert(entity_type.to_owned(), batch);
                }
                Command::Send { to, message } => {
                    if let Err(why) = self.sessions.send(entity_type, &to, message)
                        && why != sessions::Undelivered::NoRoute
                    {
                        tracing::warn!(r#type = entity_type, region = %to, ?why, "closed a region session");
                    }
                }
                Command::Reply { request, reply } => self.on_reply(request, reply),
                Command::Observe(observation) => self.observe(entity_type, observation),
            }
        }
    }

    fn on_reply(&mut self, request: RequestId, reply: CoordinatorReply) {
        match self.waiters.remove(&request) {
            Some(Waiter::Admin(entity_type, tx)) => {
                if let CoordinatorReply::Rebalance { accepted, .. } = &reply {
                    for shard in accepted {
                        self.decided(decision::rebalance_accepted(&entity_type, self.now, shard));
                    }
                }
                let live_placements =
                    self.catalog.get(&entity_type).map_or(0, |e| e.coordinator.live_placement_count());
                let _ = tx.send(Ok(request::Operated { reply, live_placements }));
            }
            Some(Waiter::Drain(group)) => {
                if let Some((remaining, _)) = self.drains.get_mut(&group) {
                    *remaining -= 1;
                    if *remaining == 0 {
                        let (_, tx) = self.drains.remove(&group).expect("present");
                        let _ = tx.send(Ok(()));
                    }
                }
            }
            Some(Waiter::Freeze(group)) => self.on_freeze_reply(group, reply),
            Some(Waiter::Slice) => self.on_slice_written(request, reply),
            Some(Waiter::Nobody) | None => {}
        }
    }

    fn observe(&mut self, entity_type: &str, observation: Observation) {
        self.metrics.observe(entity_type, &observation);
        if let Some(event) = decision::from_observation(entity_type, self.now, &observation) {
            self.decided(event);
        }
        match &observation {
            Observation::Allocated { warning: Some(warning), .. } => {
                tracing::warn!(r#type = entity_type, ?observation, warning, "placement not honoured")
            }
            Observation::HandOffTimedOut { .. }
            | Observation::NoAllocatableRegion { .. }
            | Observation::Limit { .. }
            | Observation::RebalanceFallback { .. } => tracing::warn!(r#type = entity_type, ?observation),
            Observation::Ignored { .. } => tracing::debug!(r#type = entity_type, ?observation),
            Observation::RegionUnreachable { address } => tracing::info!(
                r#type = entity_type,
                region = %address,
                "region unreachable: no heartbeat within unreachable-after-ms; it keeps its shards until it is removed"
            ),
            Observation::RegionRemoved { address, why, shards } => tracing::info!(
                r#type = entity_type,
                region = %address,
                why,
                shards,
                "region removed; its shards are homed again and the other regions told"
            ),
            _ => tracing::info!(r#type = entity_type, ?observation),
        }
    }
}
