//! Shard homes: answering, allocating and re-homing.

use std::sync::Arc;

use super::{Change, Coordinator, Home, NodeMessage, Observation};
use crate::strategy::AllocationCause;

/// The longest shard id accepted, in bytes.
pub use shardalloc_proto::protocol::MAX_SHARD_ID_BYTES;

impl Coordinator {
    /// True when enough regions (not proxy-only) have registered to allocate.
    pub fn enough_regions(&self) -> bool {
        self.durable.regions.values().filter(|r| !r.proxy_only).count() >= self.config.min_regions
    }

    pub(super) fn on_get_home(&mut self, requester: String, shard: String) {
        if !self.durable.regions.contains_key(&requester) {
            self.send_now(&requester, NodeMessage::NotRegistered);
            return;
        }
        let moving = self.durable.handoffs.contains_key(&shard);
        if !moving && let Some(home) = self.durable.homes.get(&shard) {
            let (home, epoch) = (home.region.to_string(), home.epoch);
            self.reveal(&requester, NodeMessage::ShardHomeEpoch { shard, home, epoch });
            return;
        }
        if let Err(reason) = shardalloc_proto::protocol::check_shard_id(&shard) {
            self.send_now(&requester, NodeMessage::ShardRefused { shard, reason });
            return;
        }
        if !moving && !self.pending.contains_key(&shard) {
            if self.durable.homes.len() >= self.config.max_shards {
                self.observe(Observation::Limit { what: "max_shards" });
                let reason = format!("the type has {} shards, the most allowed", self.config.max_shards);
                self.send_now(&requester, NodeMessage::ShardRefused { shard, reason });
                return;
            }
            if self.pending.len() >= self.config.max_pending_shards {
                self.observe(Observation::Limit { what: "max_pending_shards" });
                let reason = "too many shards are waiting for a home; retry".to_owned();
                self.send_now(&requester, NodeMessage::ShardRefused { shard, reason });
                return;
            }
        }
        let waiting = self.pending.entry(shard.clone()).or_default();
        if !waiting.contains(&requester) {
            if waiting.len() >= self.config.max_requesters_per_shard {
                self.observe(Observation::Limit { what: "max_requesters_per_shard" });
            } else {
                waiting.push(requester.clone());
            }
        }
        if !moving {
            let cause = self.causes.get(&shard).copied().unwrap_or_default();
            self.allocate(&shard, Some(&requester), cause, None);
        }
    }

    /// Allocates a homeless shard (placement, else the destination a
    /// rebalance gave it, else strategy) for `cause`, records it and
    /// answers every region waiting for it. Leaves it waiting when no
    /// region can take it (or too few regions registered), its cause kept
    /// for the next try.
    pub(super) fn allocate(
        &mut self,
        shard: &str,
        requester: Option<&str>,
        cause: AllocationCause,
        to: Option<&str>,
    ) -> Option<String> {
        if !self.enough_regions() {
            self.wait(shard, cause);
            return None;
        }
        let mut view = self.allocation_view().because(cause).at(self.now);
        if let Some(attributes) = self.durable.attributes.get(shard) {
            view = view.with_attributes(super::state::strategy_attributes(attributes));
        }
        let decision = self.external.allocate_to(&view, shard, requester, to);
        // The view lends the shard table: let it go before the table changes,
        // or the change copies the whole table.
        drop(view);
        match decision {
            Ok(allocation) => {
                let region = allocation.region.clone();
                let epoch = self.durable.epoch + 1;
                let reason = Arc::new(allocation.reason.clone());
                let home = Home { region: region.as_str().into(), reason, at: self.now, epoch };
                self.change(Change::HomeSet { shard: shard.to_owned(), home });
                self.observe(Observation::Allocated {
                    shard: shard.to_owned(),
                    region: region.clone(),
                    reason: allocation.reason,
                    warning: allocation.warning,
                });
                self.causes.remove(shard);
                for waiting in self.pending.remove(shard).unwrap_or_default() {
                    if self.durable.regions.contains_key(&waiting) {
                        let (shard, home) = (shard.to_owned(), region.clone());
                        self.reveal(&waiting, NodeMessage::ShardHomeEpoch { shard, home, epoch });
                    }
                }
                Some(region)
            }
            Err(_) => {
                self.wait(shard, cause);
                self.observe(Observation::NoAllocatableRegion { shard: shard.to_owned() });
                None
            }
        }
    }

    /// Leaves a shard waiting for a home, with why it needs one.
    fn wait(&mut self, shard: &str, cause: AllocationCause) {
        self.pending.entry(shard.to_owned()).or_default();
        if cause != AllocationCause::NewShard {
            self.causes.insert(shard.to_owned(), cause);
        }
    }

    /// Tries again to allocate every homeless shard that is not moving.
    pub(super) fn retry_pending(&mut self) {
        let waiting: Vec<String> = self
            .pending
            .keys()
            .filter(|s| !self.durable.homes.contains_key(*s) && !self.durable.handoffs.contains_key(*s))
            .cloned()
            .collect();
        for shard in waiting {
            let cause = self.causes.get(&shard).copied().unwrap_or_default();
            if self.allocate(&shard, None, cause, None).is_none() {
                break;
            }
        }
    }

    /// Answers the regions waiting for a shard that kept or has a home.
    pub(super) fn answer_waiting(&mut self, shard: &str) {
        let Some((home, epoch)) = self.durable.homes.get(shard).map(|h| (h.region.to_string(), h.epoch)) else {
            return;
        };
        self.causes.remove(shard);
        for waiting in self.pending.remove(shard).unwrap_or_default() {
            if self.durable.regions.contains_key(&waiting) {
                let (shard, home) = (shard.to_owned(), home.clone());
                self.reveal(&waiting, NodeMessage::ShardHomeEpoch { shard, home, epoch });
            }
        }
    }
}
