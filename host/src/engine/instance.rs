//! A sandboxed strategy instance: one store, a deadline and a memory cap on
//! every call, and a fresh store after any fault.
//!
//! A trap poisons the whole store, so after a trap, a deadline or memory
//! exhaustion the store is dropped (the compiled component and its
//! pre-instantiation are kept) and the next call instantiates anew, which
//! costs microseconds with the pooling allocator.

use std::sync::Arc;

use shardalloc_guest::{RegionStatus, Topology};
use wasmtime::Store;

use super::bindings::v0_1::{World as StrategyWorld, wit};
use super::host::HostState;
use super::limits::Limits;
use super::limits::cut;
use super::load::{Compiled, LoadError};
use crate::strategy::{AllocationStrategy, ClusterView, FaultKind, Info, StrategyError};

/// A live instance with its store.
struct Live {
    store: Store<HostState>,
    world: StrategyWorld,
    sent_generation: Option<u64>,
}

/// A compiled strategy, configured and sandboxed, behind [`AllocationStrategy`].
pub struct Sandboxed {
    /// Kept alive so its epoch ticker keeps deadlines working.
    engine: Arc<super::Engine>,
    compiled: Arc<Compiled>,
    config: String,
    limits: Limits,
    info: Info,
    live: Option<Live>,
    instantiations: u64,
}

/// Longest text kept from a strategy's error; it is logged and may be
/// recorded as the reason of every fallback decision.
pub const MAX_ERROR_MESSAGE: usize = 1024;

fn bounded(message: String) -> String {
    cut(message, MAX_ERROR_MESSAGE)
}

impl std::fmt::Debug for Sandboxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandboxed")
            .field("strategy", &format_args!("{}@{}", self.info.name, self.info.version))
            .field("digest", &self.compiled.digest)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn classify(error: wasmtime::Error, memory_denied: bool) -> StrategyError {
    let detail = format!("{error:#}");
    let kind = match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => FaultKind::Deadline,
        Some(_) if memory_denied => FaultKind::Memory,
        _ if memory_denied => FaultKind::Memory,
        _ => FaultKind::Trap,
    };
    StrategyError::Fault { kind, detail }
}

impl Sandboxed {
    /// Instantiates and configures a compiled strategy.
    pub(super) fn new(
        engine: Arc<super::Engine>,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
    ) -> Result<Self, LoadError> {
        let mut sandboxed = Sandboxed {
            engine,
            info: compiled.info.clone(),
            compiled,
            config: config.to_owned(),
            limits,
            live: None,
            instantiations: 0,
        };
        match sandboxed.live() {
            Ok(_) => Ok(sandboxed),
            Err((_, StrategyError::Refused(message))) => Err(LoadError::Config(message)),
            Err((during, error)) => Err(LoadError::Fault { during, detail: error.to_string() }),
        }
    }

    /// The compiled component.
    pub fn compiled(&self) -> &Arc<Compiled> {
        &self.compiled
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &str {
        &self.config
    }

    /// The generation of the topology its live instance holds, if any.
    pub fn topology_generation(&self) -> Option<u64> {
        self.live.as_ref().and_then(|live| live.sent_generation)
    }

    /// How many stores it has created (1 + one per fault recovered from).
    pub fn instantiations(&self) -> u64 {
        self.instantiations
    }

    fn new_store(&self) -> Store<HostState> {
        let label = format!("{}@{}", self.compiled.info.name, self.compiled.info.version);
        let state = HostState {
            label: label.clone(),
            shard_ids: Vec::new(),
            memory_limit: self.limits.memory,
            memory_denied: false,
            wasi: super::wasi::StoreWasi::new(&label),
        };
        let mut store = Store::new(&self.engine.wasmtime, state);
        store.limiter(|state| state);
        store.set_epoch_deadline(self.limits.load_deadline_ticks());
        store
    }

    /// The live instance, instantiating and configuring a fresh one when
    /// there is none (first use, or after a fault). An error says which step
    /// failed ("while instantiating", "in configure", "in describe").
    fn live(&mut self) -> Result<&mut Live, (&'static str, StrategyError)> {
        if self.live.is_none() {
            // The first instantiation may take the loading deadline; a
            // re-instantiation after a fault is on a decision's path and gets
            // the call deadline.
            let ticks =
                if self.instantiations == 0 { self.limits.load_deadline_ticks() } else { self.limits.deadline_ticks() };
            let mut store = self.new_store();
            store.set_epoch_deadline(ticks);
            store.data().wasi.begin_call();
            let world = self.compiled.pre.instantiate(&mut store).map_err(|e| {
                let denied = store.data().memory_denied;
                ("while instantiating", classify(e, denied))
            })?;
            self.instantiations += 1;
            store.set_epoch_deadline(ticks);
            let allocator = world.shardalloc_strategy_allocator();
            match allocator.call_configure(&mut store, &self.config) {
                Ok(Ok(())) => {}
                Ok(Err(message)) => return Err(("in configure", StrategyError::Refused(bounded(message)))),
                Err(e) => {
                    let denied = store.data().memory_denied;
                    return Err(("in configure", classify(e, denied)));
                }
            }
            store.set_epoch_deadline(ticks);
            let described = allocator.call_describe(&mut store).map_err(|e| {
                let denied = store.data().memory_denied;
                ("in describe", classify(e, denied))
            })?;
            // A setting may change what the strategy needs (shard names).
            self.info.needs_shard_names = described.needs_shard_names;
            self.live = Some(Live { store, world, sent_generation: None });
        }
        Ok(self.live.as_mut().expect("just made"))
    }

    /// Runs one call under the deadline; a fault drops the store.
    fn call<R>(
        &mut self,
        topology: &Arc<Topology>,
        f: impl FnOnce(&StrategyWorld, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, StrategyError> {
        let ticks = self.limits.deadline_ticks();
        let live = self.live().map_err(|(during, error)| match error {
            StrategyError::Fault { kind, detail } => {
                StrategyError::Fault { kind, detail: format!("{during}: {detail}") }
            }
            other => other,
        })?;
        live.store.data_mut().memory_denied = false;
        live.store.data().wasi.begin_call();
        let result = (|| {
            if live.sent_generation != Some(topology.generation()) {
                live.sent_generation = None;
                live.store.set_epoch_deadline(ticks);
                let labels = wit_labels(topology);
                let regions = wit_regions(topology, &labels);
                let metric_names: Vec<&str> = topology.metric_names().iter().map(String::as_str).collect();
                let wit_topology = wit::Topology {
                    generation: topology.generation(),
                    regions: &regions,
                    metric_names: &metric_names,
                    signal: topology.signal(),
                };
                live.world.shardalloc_strategy_allocator().call_set_topology(&mut live.store, wit_topology)?;
                live.sent_generation = Some(topology.generation());
            }
            live.store.set_epoch_deadline(ticks);
            f(&live.world, &mut live.store)
        })();
        match result {
            Ok(value) => Ok(value),
            Err(error) => {
                let denied = live.store.data().memory_denied;
                self.live = None;
                Err(classify(error, denied))
            }
        }
    }
}

/// Each region's labels as the contract's records, borrowing their text.
fn wit_labels(topology: &Topology) -> Vec<Vec<wit::Label<'_>>> {
    topology.regions().iter().map(|r| r.labels.iter().map(|(k, v)| wit::Label { key: k, value: v }).collect()).collect()
}

/// The topology's regions as the contract's records, borrowing their text.
fn wit_regions<'a>(topology: &'a Topology, labels: &'a [Vec<wit::Label<'a>>]) -> Vec<wit::Region<'a>> {
    topology
        .regions()
        .iter()
        .zip(labels)
        .map(|(r, labels)| wit::Region {
            address: &r.address,
            status: match r.status {
                RegionStatus::Up => wit::RegionStatus::Up,
                RegionStatus::Joining => wit::RegionStatus::Joining,
                RegionStatus::Leaving => wit::RegionStatus::Leaving,
                RegionStatus::Unreachable => wit::RegionStatus::Unreachable,
            },
            app_version: &r.app_version,
            join_order: r.join_order,
            labels,
            proxy_only: r.proxy_only,
            draining: r.draining,
        })
        .collect()
}

/// The per-call numbers, lent to the call as they are in the view.
fn loads(view: &ClusterView) -> wit::Loads<'_> {
    wit::Loads { generation: view.topology().generation(), shard_counts: view.shard_counts(), metrics: view.metrics() }
}

fn requester_index(view: &ClusterView, requester: Option<&str>) -> Result<Option<u32>, StrategyError> {
    requester
        .map(|address| {
            view.region_index(address)
                .map(|i| i as u32)
                .ok_or_else(|| StrategyError::Invalid(format!("requester {address} is not a known region")))
        })
        .transpose()
}

impl AllocationStrategy for Sandboxed {
    fn info(&self) -> &Info {
        &self.info
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        let requester = requester_index(view, requester)?;
        let key = wit::ShardKey { id: shard, hash: shardalloc_guest::shard_hash(shard) };
        let loads = loads(view);
        let index = self
            .call(view.topology(), |world, store| {
                world.shardalloc_strategy_allocator().call_allocate(store, key, requester, loads)
            })?
            .map_err(|m| StrategyError::Refused(bounded(m)))?;
        view.regions().get(index as usize).map(|r| r.address.clone()).ok_or_else(|| {
            StrategyError::Invalid(format!("region index {index} out of range ({} regions)", view.regions().len()))
        })
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<String>, StrategyError> {
        let table = view.allocations();
        let in_progress = table.in_progress_handles();

        // The ids move out of the table: the host answers `shard-id` from
        // them and maps the answer's handles back, without a copy.
        let (hashes, ids) = table.into_parts();
        let ids = ids.unwrap_or_default();
        // Only a strategy that asked for every name up front pays for a copy.
        let sent_ids: Vec<String> = if self.info.needs_shard_names { ids.clone() } else { Vec::new() };
        let names: Vec<&str> = sent_ids.iter().map(String::as_str).collect();
        let allocations = wit::Allocations {
            hashes: &hashes,
            in_progress: &in_progress,
            ids: self.info.needs_shard_names.then_some(names.as_slice()),
        };
        let loads = loads(view);
        let handles = self
            .call(view.topology(), |world, store| {
                store.data_mut().shard_ids = ids;
                world.shardalloc_strategy_allocator().call_rebalance(&mut *store, loads, allocations)
            })?
            .map_err(|m| StrategyError::Refused(bounded(m)));
        let ids = match &mut self.live {
            Some(live) => std::mem::take(&mut live.store.data_mut().shard_ids),
            None => Vec::new(),
        };
        handles?
            .into_iter()
            .map(|h| {
                ids.get(h as usize).cloned().ok_or_else(|| {
                    StrategyError::Invalid(format!("shard handle {h} out of range ({} shards)", ids.len()))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn guest_text_is_cut_on_a_character_boundary() {
        assert_eq!(cut("short".into(), 10), "short");
        assert_eq!(cut("abcdef".into(), 3), "abc…");
        assert_eq!(cut("ééé".into(), 3), "é…");
        assert_eq!(
            cut("x".repeat(50 << 20), super::MAX_ERROR_MESSAGE).len(),
            super::MAX_ERROR_MESSAGE + '…'.len_utf8()
        );
    }
}
