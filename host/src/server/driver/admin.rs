//! The driver's answers to [`AdminRequest`]s: reads of the types' state in
//! the REST bodies' shapes, and changes through the coordinators and the
//! catalog. Each answer is released after the turn's commit.

use std::collections::BTreeMap;

use shardalloc_client::api::{
    HandOff, HomeReason, Placement, RegionSummary, ShardId, ShardState, StoredStrategy, StrategyState, TypeState,
    TypeSummary,
};

use super::catalog::activation_record;
use super::request::{AdminRequest, Operation, Refusal, activation_info};
use super::{Driver, Waiter};
use crate::coordinator::{OperatorRequest, Stamp};
use crate::strategy::external::AllocationReason;
use crate::strategy::{StrategySource, builtin};

impl Driver {
    pub(super) fn on_admin(&mut self, request: AdminRequest) {
        match request {
            AdminRequest::Readiness { reply } => {
                let answer = self.readiness();
                self.answer(reply, answer);
            }
            AdminRequest::Types { reply } => {
                let answer = self.types();
                self.answer(reply, answer);
            }
            AdminRequest::TypeState { name, reply } => {
                let answer = self.type_state(name);
                self.answer(reply, answer);
            }
            AdminRequest::Snapshot { name, reply } => {
                let answer = self.catalog.get_mut(&name).map(|e| e.coordinator.snapshot());
                self.answer(reply, answer);
            }
            AdminRequest::Placements { name, reply } => {
                let answer = self.placements(&name);
                self.answer(reply, answer);
            }
            AdminRequest::Shard { name, shard, reply } => {
                let answer = self.shard(&name, shard);
                self.answer(reply, answer);
            }
            AdminRequest::Operate { name, operation, reply } => match self.operator_request(&name, operation) {
                Ok(op) => self.operate(&name, op, Waiter::Admin(reply)),
                Err(refusal) => self.answer(reply, Err(refusal)),
            },
            AdminRequest::Regions { reply } => {
                let answer = self.regions();
                self.answer(reply, answer);
            }
            AdminRequest::Drain { address, draining, reply } => self.drain(address, draining, reply),
            AdminRequest::Strategies { reply } => {
                let answer = self.strategies();
                self.answer(reply, answer);
            }
            AdminRequest::AddComponent { record, reply } => {
                tracing::info!(digest = %record.digest, name = %record.name, version = %record.version, "strategy uploaded");
                self.catalog.add_component(record, &mut self.turn);
                self.answer(reply, ());
            }
            AdminRequest::RemoveComponent { digest, reply } => {
                let answer = self.catalog.remove_component(&digest, &mut self.turn);
                self.answer(reply, answer);
            }
            AdminRequest::StrategyState { name, reply } => {
                let answer = self.strategy_state(&name);
                self.answer(reply, answer);
            }
            AdminRequest::Activate { name, candidate, reply } => {
                let changed = self.catalog.activate(&name, candidate);
                self.answer_strategy_change(&name, changed, reply);
            }
            AdminRequest::Rollback { name, reply } => {
                let changed = self.catalog.rollback(&name);
                self.answer_strategy_change(&name, changed, reply);
            }
            AdminRequest::Shadow { name, candidate, reply } => {
                let changed = self.catalog.set_shadow(&name, candidate);
                self.answer_strategy_change(&name, changed, reply);
            }
        }
    }

    /// Answers a strategy change with the type's strategy state, the change
    /// recorded first.
    fn answer_strategy_change(
        &mut self,
        name: &str,
        changed: Result<(), Refusal>,
        reply: super::request::Reply<Result<StrategyState, Refusal>>,
    ) {
        self.catalog.record_changes(&mut self.turn);
        let answer = changed.and_then(|()| self.strategy_state(name));
        self.answer(reply, answer);
    }

    fn readiness(&self) -> Result<(), String> {
        let short: Vec<&str> =
            self.catalog.iter().filter(|(_, e)| !e.coordinator.enough_regions()).map(|(n, _)| n.as_str()).collect();
        if short.is_empty() {
            return Ok(());
        }
        let min = self.catalog.settings().coordinator.min_regions;
        Err(format!("fewer than {min} regions in {}", short.join(", ")))
    }

    fn types(&self) -> Vec<TypeSummary> {
        self.catalog
            .iter()
            .map(|(name, entry)| TypeSummary {
                name: name.clone(),
                regions: entry.coordinator.durable().regions.len(),
                shards: entry.coordinator.durable().homes.len(),
                strategy: entry.slot.active().label(),
            })
            .collect()
    }

    fn type_state(&self, name: String) -> Result<TypeState, Refusal> {
        let entry = self.catalog.get(&name)?;
        let durable = entry.coordinator.durable();
        let mut regions: Vec<&crate::coordinator::RegionRecord> = durable.regions.values().collect();
        regions.sort_by_key(|r| r.join_order);
        let regions = regions
            .into_iter()
            .map(|r| shardalloc_client::api::RegionState {
                address: r.address.clone(),
                incarnation: r.incarnation,
                status: entry.region_status(&r.address),
                draining: r.draining,
                proxy_only: r.proxy_only,
                labels: r.labels.clone(),
                shards: r.shards.clone(),
            })
            .collect();
        let hand_offs = durable
            .handoffs
            .iter()
            .map(|(shard, from)| HandOff { shard_id: shard.clone(), from: from.clone() })
            .collect();
        let strategy = match entry.activations.last() {
            Some(last) => activation_info(last),
            None => activation_info(&activation_record(&entry.slot.active(), &entry.record.strategy)),
        };
        Ok(TypeState { name, regions, hand_offs, placements: self.placements_of(entry), strategy })
    }

    fn placements_of(&self, entry: &super::catalog::TypeEntry) -> Vec<Placement> {
        entry
            .coordinator
            .durable()
            .live_placements()
            .map(|(s, t)| Placement { shard_id: ShardId(s.clone()), target: t.clone() })
            .collect()
    }

    fn placements(&self, name: &str) -> Result<Vec<Placement>, Refusal> {
        Ok(self.placements_of(self.catalog.get(name)?))
    }

    fn shard(&self, name: &str, shard: String) -> Result<ShardState, Refusal> {
        let durable = self.catalog.get(name)?.coordinator.durable();
        let home = durable.homes.get(&shard);
        let (reason, detail) = match home.map(|h| &h.reason) {
            None => (None, None),
            Some(AllocationReason::Placement) => (Some(HomeReason::Placement), None),
            Some(AllocationReason::Strategy { name, version }) => {
                (Some(HomeReason::Strategy), Some(format!("{name}@{version}")))
            }
            Some(AllocationReason::Fallback(error)) => (Some(HomeReason::Fallback), Some(error.to_string())),
        };
        let moving = durable.handoffs.contains_key(&shard);
        let placement = durable.placements.get(&shard).and_then(|p| p.target.clone());
        if home.is_none() && !moving && placement.is_none() {
            return Err(Refusal::UnknownShard(shard));
        }
        Ok(ShardState {
            home: home.map(|h| h.region.clone()),
            since_ms: home.map(|h| h.at),
            shard_id: shard,
            reason,
            detail,
            moving,
            placement,
        })
    }

    fn operator_request(&mut self, name: &str, operation: Operation) -> Result<OperatorRequest, Refusal> {
        let entry = self.catalog.get(name)?;
        Ok(match operation {
            Operation::SetPlacements(placements) => {
                OperatorRequest::SetPlacements { placements, stamp: Stamp::new(self.stamp_time(), self.origin.clone()) }
            }
            Operation::RemovePlacement(shard) => {
                if entry.coordinator.durable().placements.get(&shard).is_none_or(|p| p.target.is_none()) {
                    return Err(Refusal::NoPlacement { entity_type: name.to_owned(), shard });
                }
                let stamp = Stamp::new(self.stamp_time(), self.origin.clone());
                OperatorRequest::RemovePlacements { shards: vec![shard], stamp }
            }
            Operation::RebalanceNow { shards, immediate } => OperatorRequest::RebalanceNow { shards, immediate },
            Operation::SetSignal(signal) => OperatorRequest::SetSignal { signal },
        })
    }

    fn regions(&self) -> Vec<RegionSummary> {
        let mut by_address: BTreeMap<String, RegionSummary> = BTreeMap::new();
        for (name, entry) in self.catalog.iter() {
            for record in entry.coordinator.durable().regions.values() {
                let summary = by_address.entry(record.address.clone()).or_insert_with(|| RegionSummary {
                    address: record.address.clone(),
                    types: BTreeMap::new(),
                    shards: 0,
                    draining: true,
                });
                summary.types.insert(name.clone(), entry.region_status(&record.address));
                summary.shards += record.shards.len();
                summary.draining &= record.draining;
            }
        }
        by_address.into_values().collect()
    }

    fn drain(&mut self, address: String, draining: bool, reply: super::request::Reply<Result<(), Refusal>>) {
        let names: Vec<String> = self
            .catalog
            .iter()
            .filter(|(_, e)| e.coordinator.durable().regions.contains_key(&address))
            .map(|(n, _)| n.clone())
            .collect();
        if names.is_empty() {
            return self.answer(reply, Err(Refusal::UnknownRegion(address)));
        }
        let group = self.next_request;
        self.drains.insert(group, (names.len(), reply));
        for name in names {
            let address = address.clone();
            let op = if draining { OperatorRequest::Drain { address } } else { OperatorRequest::Undrain { address } };
            self.operate(&name, op, Waiter::Drain(group));
        }
    }

    fn strategies(&self) -> Vec<StoredStrategy> {
        let mut list: Vec<StoredStrategy> = builtin::names()
            .map(|name| StoredStrategy {
                digest: name.to_owned(),
                name: name.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                size: 0,
                active_in: self.catalog.active_in(&StrategySource::Builtin(name.to_owned())),
            })
            .collect();
        list.extend(self.catalog.components().values().map(|c| StoredStrategy {
            digest: c.digest.clone(),
            name: c.name.clone(),
            version: c.version.clone(),
            size: c.size,
            active_in: self.catalog.active_in(&StrategySource::Digest(c.digest.clone())),
        }));
        list
    }

    fn strategy_state(&self, name: &str) -> Result<StrategyState, Refusal> {
        let entry = self.catalog.get(name)?;
        let active = activation_info(&activation_record(&entry.slot.active(), &entry.record.strategy));
        let shadow =
            entry.slot.shadow().map(|a| activation_info(&activation_record(&a, &self.catalog.source_of(&a.compiled))));
        let stats = entry.slot.stats();
        Ok(StrategyState {
            active,
            history: entry.activations.iter().map(activation_info).collect(),
            shadow,
            shadow_calls: stats.shadow_calls,
            shadow_disagreements: stats.shadow_disagreements,
        })
    }
}
