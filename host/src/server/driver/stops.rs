//! Stopping regions: a drain's progress (`GET …/regions/{address}/drain`)
//! and which regions may stop now (`GET …/regions/stoppable`), both read
//! across every type a region serves, at a cost per region and hand-off,
//! never per shard.

use std::collections::BTreeSet;

use shardalloc_proto::api::{DrainOfType, DrainState, NotStoppable, StopBlocked, StopReason, Stoppable};

use super::Driver;
use super::request::Refusal;
use crate::coordinator::StopBlocker;

/// Most regions one stoppable question may name.
pub const MAX_STOPPABLE: usize = 1_000;

impl Driver {
    /// A region's drain in every type it serves.
    pub(super) fn drain_state(&self, address: &str) -> Result<DrainState, Refusal> {
        let mut types = Vec::new();
        for (name, entry) in self.catalog.iter() {
            let durable = entry.coordinator.durable();
            let Some(region) = durable.regions.get(address) else { continue };
            types.push(DrainOfType {
                entity_type: name.clone(),
                draining: region.draining,
                shards_left: region.shards.len(),
                hand_offs_in_flight: durable.handoffs_from(address),
                started_at_ms: durable.operations.drains.get(address).copied(),
            });
        }
        if types.is_empty() {
            return Err(Refusal::UnknownRegion(address.to_owned()));
        }
        Ok(DrainState {
            address: address.to_owned(),
            draining: types.iter().all(|t| t.draining),
            shards_left: types.iter().map(|t| t.shards_left).sum(),
            hand_offs_in_flight: types.iter().map(|t| t.hand_offs_in_flight).sum(),
            started_at_ms: types.iter().filter_map(|t| t.started_at_ms).min(),
            types,
        })
    }

    /// Which of `addresses` may stop now, together: each in the order
    /// given joins the set that stops when no type it serves objects to it
    /// stopping with the set so far.
    pub(super) fn stoppable(&self, addresses: Vec<String>) -> Stoppable {
        let mut stopping = BTreeSet::new();
        let mut answer = Stoppable { stoppable: Vec::new(), not_stoppable: Vec::new() };
        let mut seen = BTreeSet::new();
        for address in addresses {
            if !seen.insert(address.clone()) {
                continue;
            }
            let mut known = false;
            let mut reasons = Vec::new();
            for (name, entry) in self.catalog.iter() {
                if !entry.coordinator.durable().regions.contains_key(&address) {
                    continue;
                }
                known = true;
                for blocker in entry.coordinator.stop_blockers(&stopping, &address) {
                    reasons.push(blocked(name, blocker));
                }
            }
            if !known {
                reasons.push(StopBlocked {
                    entity_type: None,
                    reason: StopReason::UnknownRegion,
                    detail: format!("no region {address:?} is registered"),
                });
            }
            if reasons.is_empty() {
                stopping.insert(address.clone());
                answer.stoppable.push(address);
            } else {
                answer.not_stoppable.push(NotStoppable { address, reasons });
            }
        }
        answer
    }
}

fn blocked(entity_type: &str, blocker: StopBlocker) -> StopBlocked {
    let (reason, detail) = match blocker {
        StopBlocker::NoOtherHome { shards } => {
            (StopReason::NoOtherHome, format!("its {shards} shard(s) would have no other home"))
        }
        StopBlocker::ZoneLeftEmpty { zone } => {
            (StopReason::ZoneLeftEmpty, format!("zone {zone} would have no region left to take shards"))
        }
        StopBlocker::HandOffsInFlight { count } => {
            (StopReason::HandOffsInFlight, format!("{count} hand-off(s) from it are in flight"))
        }
        StopBlocker::FrozenStrictly { shards } => {
            (StopReason::FrozenStrictly, format!("a strict freeze holds the drain of its {shards} shard(s)"))
        }
        StopBlocker::BelowMinRegions { min, left } => {
            (StopReason::BelowMinRegions, format!("{left} region(s) would stay; the type needs {min} (min-regions)"))
        }
    };
    StopBlocked { entity_type: Some(entity_type.to_owned()), reason, detail }
}
