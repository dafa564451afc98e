//! The driver's answers to [`AdminRequest`]s: reads of the types' state in
//! the REST bodies' shapes, and changes through the coordinators and the
//! catalog. Each answer is released after the turn's commit.

use std::collections::BTreeMap;

use std::ops::Bound;

use shardalloc_proto::api::{
    HandOff, HomeReason, RegionState, RegionSummary, ShadowCounts, ShardLoadState, ShardState, StoredStrategy,
    StrategyState, TypeSummary,
};

use super::catalog::activation_record;
use super::request::{AdminRequest, Operation, Page, Refusal, TypeLive, activation_info};
use super::{Driver, Waiter};
use crate::coordinator::OperatorRequest;
use crate::strategy::external::AllocationReason;
use crate::strategy::{StrategySource, builtin};

impl Driver {
    pub(super) fn on_admin(&mut self, request: AdminRequest) {
        match request {
            AdminRequest::Readiness { reply } => {
                let answer = self.readiness();
                self.answer(reply, answer);
            }
            AdminRequest::Types { page, reply } => {
                let answer = self.types(&page);
                self.answer(reply, answer);
            }
            AdminRequest::TypeLive { name, reply } => {
                let answer = self.type_live(&name);
                self.answer(reply, answer);
            }
            AdminRequest::Shard { name, shard, reply } => {
                let answer = self.shard(&name, shard);
                self.answer(reply, answer);
            }
            AdminRequest::Hottest { name, after, limit, reply } => {
                let answer = self.catalog.get(&name).map(|entry| {
                    let after = after.as_ref().map(|(load, shard)| (*load, shard.as_str()));
                    let coordinator = &entry.coordinator;
                    (coordinator.hottest(after, limit).into_iter())
                        .map(|(shard, load)| ShardLoadState {
                            home: coordinator.home(&shard).map(|h| h.region.to_string()),
                            shard_id: shard,
                            load: load.load,
                            moved_ms: load.moved_at,
                        })
                        .collect()
                });
                self.answer(reply, answer);
            }
            AdminRequest::Operate {
                name,
                operation: operation @ (Operation::SetPlacements(_) | Operation::RemovePlacement(_)),
                reply,
            } => self.queue_write(name, operation, reply),
            AdminRequest::Operate { name, operation, reply } => match self.operator_request(&name, operation) {
                Ok(op) => self.operate(&name.clone(), op, Waiter::Admin(name, reply)),
                Err(refusal) => self.answer(reply, Err(refusal)),
            },
            AdminRequest::Regions { page, reply } => {
                let answer = self.regions(&page);
                self.answer(reply, answer);
            }
            AdminRequest::Drain { address, draining, reply } => self.drain(address, draining, reply),
            AdminRequest::Freeze { name, change, reply } => self.on_freeze(name, change, reply),
            AdminRequest::DrainState { address, reply } => {
                let answer = self.drain_state(&address);
                self.answer(reply, answer);
            }
            AdminRequest::Stoppable { addresses, reply } => {
                let answer = self.stoppable(addresses);
                self.answer(reply, answer);
            }
            AdminRequest::DeleteType { name, force, reply } => self.delete_type(name, force, reply),
            AdminRequest::Strategies { page, reply } => {
                let answer = self.strategies(&page);
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
            AdminRequest::StoredComponents { digest, reply } => {
                let answer = self.stored_components(&digest);
                self.answer(reply, answer);
            }
            AdminRequest::CollectComponents { now_ms, retention_ms, in_flight, reply } => {
                let answer = self.collect_components(now_ms, retention_ms, &*in_flight);
                self.answer(reply, answer);
            }
            AdminRequest::StrategyState { name, page, reply } => {
                let answer = self.strategy_state(&name, &page);
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
                let strategy =
                    candidate.as_ref().map(|c| format!("{}@{}", c.compiled.info.name, c.compiled.info.version));
                let changed = self.catalog.set_shadow(&name, candidate);
                if changed.is_ok() {
                    self.decided(crate::server::events::decision::shadowed(&name, self.now, strategy));
                }
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
        let whole_history = Page { limit: crate::store::ACTIVATION_HISTORY, after: None };
        let answer = changed.and_then(|()| self.strategy_state(name, &whole_history));
        self.answer(reply, answer);
    }

    /// Ready when every declared type (that still exists) has enough
    /// regions; a change is logged once.
    fn readiness(&mut self) -> Result<(), String> {
        let short: Vec<&str> = self
            .declared
            .iter()
            .filter(|name| self.catalog.get(name).is_ok_and(|e| !e.coordinator.enough_regions()))
            .map(String::as_str)
            .collect();
        let answer = if short.is_empty() {
            Ok(())
        } else {
            let min = self.catalog.settings().coordinator.min_regions;
            Err(format!("fewer than {min} regions in {}", short.join(", ")))
        };
        if self.readiness.as_ref() != Some(&answer) {
            match &answer {
                Ok(()) => tracing::info!("the node is ready"),
                Err(why) => tracing::warn!(why, "the node is not ready"),
            }
            self.readiness = Some(answer.clone());
        }
        answer
    }

    fn types(&self, page: &Page) -> Vec<TypeSummary> {
        self.catalog
            .iter()
            .filter(|(name, _)| page.after(name))
            .take(page.fetch())
            .map(|(name, entry)| TypeSummary {
                name: name.clone(),
                regions: entry.coordinator.durable().regions.len(),
                shards: entry.coordinator.durable().homes.len(),
                strategy: entry.slot.active().label(),
            })
            .collect()
    }

    fn type_live(&mut self, name: &str) -> Result<TypeLive, Refusal> {
        let entry = self.catalog.get_mut(name)?;
        let regions = entry.coordinator.snapshot_regions();
        let entry = self.catalog.get(name)?;
        let durable = entry.coordinator.durable();
        let mut records: Vec<&crate::coordinator::RegionRecord> = durable.regions.values().collect();
        records.sort_by_key(|r| r.join_order);
        let states = records
            .into_iter()
            .map(|r| RegionState {
                address: r.address.clone(),
                incarnation: r.incarnation,
                status: entry.region_status(&r.address),
                draining: r.draining,
                proxy_only: r.proxy_only,
                labels: r.labels.clone(),
                shard_count: r.shards.len(),
                load: entry.coordinator.region_load(&r.address),
                registered_at_ms: r.registered_at,
                capacity: r.capacity.clone(),
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
        Ok(TypeLive { regions, states, hand_offs, strategy, paced: entry.coordinator.paced() })
    }

    fn shard(&self, name: &str, shard: String) -> Result<ShardState, Refusal> {
        let durable = self.catalog.get(name)?.coordinator.durable();
        let home = durable.homes.get(&shard);
        let (reason, detail) = match home.map(|h| &*h.reason) {
            None => (None, None),
            Some(AllocationReason::Placement) => (Some(HomeReason::Placement), None),
            Some(AllocationReason::Strategy { name, version }) => {
                (Some(HomeReason::Strategy), Some(format!("{name}@{version}")))
            }
            Some(AllocationReason::Fallback(error)) => (Some(HomeReason::Fallback), Some(error.to_string())),
        };
        let moving = durable.handoffs.contains_key(&shard);
        let placement = durable.placements.get(&shard).and_then(|p| p.target.clone());
        let attributes = durable.attributes.get(&shard).cloned().unwrap_or_default();
        if home.is_none() && !moving && placement.is_none() && attributes.is_empty() {
            return Err(Refusal::UnknownShard(shard));
        }
        let load = self.catalog.get(name)?.coordinator.load_of(&shard);
        Ok(ShardState {
            load: load.load,
            moved_ms: load.moved_at,
            home: home.map(|h| h.region.to_string()),
            since_ms: home.map(|h| h.at),
            epoch: home.map(|h| h.epoch),
            shard_id: shard,
            reason,
            detail,
            moving,
            placement,
            attributes,
        })
    }

    fn operator_request(&mut self, name: &str, operation: Operation) -> Result<OperatorRequest, Refusal> {
        self.catalog.get(name)?;
        Ok(match operation {
            // Placement writes go through the queue (`writes.rs`).
            Operation::SetPlacements(_) | Operation::RemovePlacement(_) => {
                return Err(Refusal::Unexpected(format!("a placement write outside the queue: {operation:?}")));
            }
            Operation::RebalanceNow { shards, immediate } => OperatorRequest::RebalanceNow { shards, immediate },
            Operation::SetSignal(signal) => OperatorRequest::SetSignal { signal },
            Operation::SetAttributes(writes) => OperatorRequest::SetAttributes { writes },
        })
    }

    /// A page of the regions across types. Each type's regions are bounded
    /// (`max-regions`), so this costs per region, never per shard.
    fn regions(&self, page: &Page) -> Vec<RegionSummary> {
        let mut by_address: BTreeMap<String, RegionSummary> = BTreeMap::new();
        for (name, entry) in self.catalog.iter() {
            let after = page.after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let regions = entry.coordinator.durable().regions.range::<str, _>((after, Bound::Unbounded));
            for (_, record) in regions.take(page.fetch()) {
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
        by_address.into_values().take(page.fetch()).collect()
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

    /// A page of the strategies: the built-ins in their order, then the
    /// uploads by digest.
    fn strategies(&self, page: &Page) -> Vec<StoredStrategy> {
        let builtins: Vec<&str> = builtin::names().collect();
        let (skip_builtins, uploads_after) = match page.after.as_deref() {
            None => (0, Bound::Unbounded),
            Some(after) => match builtins.iter().position(|n| *n == after) {
                Some(i) => (i + 1, Bound::Unbounded),
                None => (builtins.len(), Bound::Excluded(after)),
            },
        };
        let mut list: Vec<StoredStrategy> = builtins
            .into_iter()
            .skip(skip_builtins)
            .map(|name| StoredStrategy {
                digest: name.to_owned(),
                name: name.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                size: 0,
                active_in: self.catalog.active_in(&StrategySource::Builtin(name.to_owned())),
                contract: None,
            })
            .collect();
        let uploads = self.catalog.components().range::<str, _>((uploads_after, Bound::Unbounded));
        list.extend(
            uploads
                .map(|(_, c)| StoredStrategy {
                    digest: c.digest.clone(),
                    name: c.name.clone(),
                    version: c.version.clone(),
                    size: c.size,
                    active_in: self.catalog.active_in(&StrategySource::Digest(c.digest.clone())),
                    contract: None,
                })
                .take(page.fetch()),
        );
        list.truncate(page.fetch());
        list
    }

    /// A type's strategy state with a page of its history: entries after
    /// the entry numbered `page.after` (0-based, oldest first).
    fn strategy_state(&self, name: &str, page: &Page) -> Result<StrategyState, Refusal> {
        let entry = self.catalog.get(name)?;
        let active = activation_info(&activation_record(&entry.slot.active(), &entry.record.strategy));
        let shadow =
            entry.slot.shadow().map(|a| activation_info(&activation_record(&a, &self.catalog.source_of(&a.compiled))));
        let stats = entry.slot.stats();
        let first = match page.after.as_deref() {
            None => 0,
            Some(after) => after.parse::<usize>().map_or(usize::MAX, |a| a.saturating_add(1)),
        };
        let mut history: Vec<_> =
            entry.activations.iter().skip(first).take(page.fetch()).map(activation_info).collect();
        let next = (history.len() > page.limit).then(|| {
            history.truncate(page.limit);
            Page::cursor(&(first + page.limit - 1).to_string())
        });
        Ok(StrategyState {
            active,
            history,
            next,
            shadow,
            shadow_calls: stats.shadow_calls,
            shadow_disagreements: stats.shadow_disagreements,
            shadow_history: stats
                .shadow_history
                .iter()
                .map(|c| ShadowCounts {
                    candidate: c.candidate.clone(),
                    calls: c.calls,
                    disagreements: c.disagreements,
                })
                .collect(),
        })
    }
}
