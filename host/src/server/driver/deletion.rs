//! Deleting an entity type: at once when it has no regions; with `force`,
//! after its regions have left (every shard stopped through the full
//! hand-off, so no shard runs anywhere when the type is gone); never while
//! a region still holds its shards unless the deadline passed.

use shardalloc_proto::protocol::NodeMessage;

use super::request::{Refusal, Reply};
use super::{Driver, Waiter};
use crate::coordinator::{Millis, OperatorRequest};

/// Most region addresses a `type-has-regions` refusal names.
const NAMED_REGIONS: usize = 20;

/// A forced deletion waiting for the type's regions to leave.
pub(super) struct Retirement {
    /// When the type goes even if some region still holds shards (it stops
    /// them when its lease runs out).
    deadline: Millis,
    reply: Reply<Result<(), Refusal>>,
}

impl Driver {
    pub(super) fn delete_type(&mut self, name: String, force: bool, reply: Reply<Result<(), Refusal>>) {
        let regions: Vec<String> = match self.catalog.get(&name) {
            Ok(entry) => entry.coordinator.durable().regions.keys().cloned().collect(),
            Err(refusal) => return self.answer(reply, Err(refusal)),
        };
        if regions.is_empty() {
            self.remove_type(&name);
            return self.answer(reply, Ok(()));
        }
        if !force {
            let count = regions.len();
            let named = regions.into_iter().take(NAMED_REGIONS).collect();
            return self.answer(reply, Err(Refusal::TypeHasRegions { entity_type: name, regions: named, count }));
        }
        if self.retiring.contains_key(&name) {
            return self.answer(reply, Err(Refusal::TypeBeingDeleted(name)));
        }
        let config = self.catalog.settings().coordinator.clone();
        let deadline = self.now + 2 * config.handoff_timeout_ms + config.lease_ms;
        tracing::info!(r#type = %name, regions = regions.len(), "deleting an entity type: its regions leave first");
        self.retiring.insert(name.clone(), Retirement { deadline, reply });
        self.operate(&name, OperatorRequest::Retire, Waiter::Nobody);
    }

    /// True while a type is being deleted (its regions may not register).
    pub(super) fn is_retiring(&self, name: &str) -> bool {
        self.retiring.contains_key(name)
    }

    /// Deletes the retiring types whose regions have all left, or whose
    /// deadline passed.
    pub(super) fn finish_retirements(&mut self) {
        let done: Vec<String> = self
            .retiring
            .iter()
            .filter(|(name, retirement)| {
                let empty = self.catalog.get(name).is_ok_and(|e| e.coordinator.durable().regions.is_empty());
                empty || self.now >= retirement.deadline
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in done {
            let retirement = self.retiring.remove(&name).expect("listed");
            if let Ok(entry) = self.catalog.get(&name)
                && !entry.coordinator.durable().regions.is_empty()
            {
                let left: Vec<&String> = entry.coordinator.durable().regions.keys().collect();
                tracing::warn!(r#type = %name, ?left, "deleting an entity type past its deadline: these regions \
                    still held shards and stop them when their lease runs out");
            }
            self.remove_type(&name);
            self.answer(retirement.reply, Ok(()));
        }
    }

    fn remove_type(&mut self, name: &str) {
        self.catalog.remove(name, &mut self.turn);
        self.batches.remove(name);
        self.metrics.forget_type(name);
        let reason = format!("the entity type {name} was deleted");
        self.sessions.close_type(name, NodeMessage::Refused { reason });
    }
}
