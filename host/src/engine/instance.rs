//! A sandboxed strategy instance: one store, a deadline and a memory cap on
//! every call, and a fresh store after any fault.
//!
//! A trap poisons the whole store, so after a trap, a deadline or memory
//! exhaustion the store is dropped (the compiled component and its
//! pre-instantiation are kept) and the next call instantiates anew, which
//! costs microseconds with the pooling allocator.

use std::sync::Arc;

use shardalloc_guest::Topology;
use wasmtime::Store;

use super::bindings::v0_1::wit;
use super::bindings::{v0_1, v0_2, v0_3};
use super::component::Contract;
use super::component::{Compiled, LoadError, Pre};
use super::host::HostState;
use super::limits::Limits;
use super::limits::cut;
use super::lower;
use crate::strategy::table::ShardTable;
use crate::strategy::{AllocationStrategy, ClusterView, FaultKind, Info, RebalanceMove, StrategyError};

/// A live instance with its store.
struct Live {
    store: Store<HostState>,
    guest: Guest,
}

/// A live instance through the bindings of its contract.
enum Guest {
    /// Contract 0.1: the topology is sent when its generation changes.
    V0_1 { world: v0_1::World, sent_generation: Option<u64> },
    /// Contracts 0.2 and 0.3: the instance keeps a copy of a shard table's
    /// view; `topology` is that view's topology generation; `fresh`, the
    /// kinds of decision not made since the last whole-view load (each
    /// one's first runs under the view-load budget: where a strategy builds
    /// its index).
    Kept { world: KeptWorld, copy: Option<CopyAt>, topology: Option<u64>, fresh: Fresh },
}

/// The bindings of an instance that keeps a copy of the view.
enum KeptWorld {
    /// Contract 0.2.
    V0_2(v0_2::World),
    /// Contract 0.3; `wants`: what the strategy asked to be sent with its
    /// view (`needs-shard-ids`, `needs-shard-attributes`, as it said after
    /// its configuration).
    V0_3 { world: v0_3::World, wants: lower::v3::Wants },
}

/// The kinds of decision a kept-view instance has not made since its last
/// whole-view load.
#[derive(Clone, Copy, Debug, Default)]
struct Fresh {
    allocate: bool,
    rebalance: bool,
}

/// A kind of decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Allocate,
    Rebalance,
}

impl Fresh {
    /// Whether `decision` is the first of its kind since the load, which
    /// it then is no longer.
    fn take(&mut self, decision: Decision) -> bool {
        let flag = match decision {
            Decision::Allocate => &mut self.allocate,
            Decision::Rebalance => &mut self.rebalance,
        };
        std::mem::replace(flag, false)
    }
}

/// Where a kept-view instance's copy of the view stands.
#[derive(Clone, Copy, Debug)]
struct CopyAt {
    /// The table it follows.
    table: u64,
    /// The table's generation it holds.
    at: u64,
    /// The copy's own generation: the full view's, plus one per batch sent
    /// since (merged batches stand for several of the table's).
    generation: u64,
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
    view_loads: u64,
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
            view_loads: 0,
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
        match self.live.as_ref().map(|live| &live.guest) {
            Some(Guest::V0_1 { sent_generation, .. }) => *sent_generation,
            Some(Guest::Kept { topology, .. }) => *topology,
            None => None,
        }
    }

    /// How many stores it has created (1 + one per fault recovered from).
    pub fn instantiations(&self) -> u64 {
        self.instantiations
    }

    /// The live instance's linear memory in bytes (0 when none is live):
    /// what it holds, its view's copy among it.
    pub fn memory_bytes(&self) -> usize {
        self.live.as_ref().map_or(0, |live| live.store.data().memory_bytes)
    }

    /// How many times a 0.2 or 0.3 instance was sent the whole view (`load-view`)
    /// rather than the table's batches since its copy: once per new store,
    /// and again whenever it is lent a table its copy does not follow.
    pub fn view_loads(&self) -> u64 {
        self.view_loads
    }

    fn new_store(&self) -> Store<HostState> {
        let label = format!("{}@{}", self.compiled.info.name, self.compiled.info.version);
        let state = HostState {
            label: label.clone(),
            shard_ids: Vec::new(),
            table: None,
            allocating: None,
            allocating_id: String::new(),
            allocating_attributes: Default::default(),
            memory_limit: self.limits.memory,
            memory_denied: false,
            memory_bytes: 0,
            loading_view: false,
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
            let instantiating = |e: wasmtime::Error, store: &Store<HostState>| {
                ("while instantiating", classify(e, store.data().memory_denied))
            };
            let guest = match &self.compiled.pre {
                Pre::V0_1(pre) => {
                    let world = pre.instantiate(&mut store).map_err(|e| instantiating(e, &store))?;
                    Guest::V0_1 { world, sent_generation: None }
                }
                Pre::V0_2(pre) => {
                    let world = pre.instantiate(&mut store).map_err(|e| instantiating(e, &store))?;
                    let world = KeptWorld::V0_2(world);
                    Guest::Kept { world, copy: None, topology: None, fresh: Fresh::default() }
                }
                Pre::V0_3(pre) => {
                    let world = pre.instantiate(&mut store).map_err(|e| instantiating(e, &store))?;
                    let world = KeptWorld::V0_3 { world, wants: lower::v3::Wants::default() };
                    Guest::Kept { world, copy: None, topology: None, fresh: Fresh::default() }
                }
            };
            self.instantiations += 1;
            store.set_epoch_deadline(ticks);
            let configured = match &guest {
                Guest::V0_1 { world, .. } => {
                    world.shardalloc_strategy_allocator().call_configure(&mut store, &self.config)
                }
                Guest::Kept { world: KeptWorld::V0_2(world), .. } => {
                    world.shardalloc_strategy_allocator().call_configure(&mut store, &self.config)
                }
                Guest::Kept { world: KeptWorld::V0_3 { world, .. }, .. } => {
                    world.shardalloc_strategy_allocator().call_configure(&mut store, &self.config)
                }
            };
            match configured {
                Ok(Ok(())) => {}
                Ok(Err(message)) => return Err(("in configure", StrategyError::Refused(bounded(message)))),
                Err(e) => {
                    let denied = store.data().memory_denied;
                    return Err(("in configure", classify(e, denied)));
                }
            }
            store.set_epoch_deadline(ticks);
            // A setting may change what the strategy needs (shard names,
            // 0.1 and 0.3).
            let mut guest = guest;
            let describing = |e: wasmtime::Error, store: &Store<HostState>| {
                let denied = store.data().memory_denied;
                ("in describe", classify(e, denied))
            };
            match &mut guest {
                Guest::V0_1 { world, .. } => {
                    let described = world
                        .shardalloc_strategy_allocator()
                        .call_describe(&mut store)
                        .map_err(|e| describing(e, &store))?;
                    self.info.needs_shard_names = described.needs_shard_names;
                }
                Guest::Kept { world: KeptWorld::V0_3 { world, wants }, .. } => {
                    let described = world
                        .shardalloc_strategy_allocator()
                        .call_describe(&mut store)
                        .map_err(|e| describing(e, &store))?;
                    self.info.needs_shard_names = described.needs_shard_ids;
                    self.info.needs_shard_attributes = described.needs_shard_attributes;
                    *wants = lower::v3::Wants {
                        ids: described.needs_shard_ids,
                        attributes: described.needs_shard_attributes,
                    };
                }
                Guest::Kept { world: KeptWorld::V0_2(_), .. } => {}
            }
            self.live = Some(Live { store, guest });
        }
        Ok(self.live.as_mut().expect("just made"))
    }

    /// Runs one call under the deadline; a fault drops the store. Before
    /// it, a 0.1 instance is sent the topology when its generation changed.
    fn call<R>(
        &mut self,
        topology: &Arc<Topology>,
        f: impl FnOnce(&mut Guest, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, StrategyError> {
        let ticks = self.limits.deadline_ticks();
        let live = self.live().map_err(|(during, error)| match error {
            StrategyError::Fault { kind, detail } => {
                StrategyError::Fault { kind, detail: format!("{during}: {detail}") }
            }
            other => other,
        })?;
        live.store.data_mut().memory_denied = false;
        live.store.data_mut().loading_view = false;
        live.store.data().wasi.begin_call();
        let result = (|| {
            if let Guest::V0_1 { world, sent_generation } = &mut live.guest
                && *sent_generation != Some(topology.generation())
            {
                *sent_generation = None;
                live.store.set_epoch_deadline(ticks);
                let labels = lower::v1::labels(topology);
                let regions = lower::v1::regions(topology, &labels);
                let metric_names: Vec<&str> = topology.metric_names().iter().map(String::as_str).collect();
                let wit_topology = wit::Topology {
                    generation: topology.generation(),
                    regions: &regions,
                    metric_names: &metric_names,
                    signal: topology.signal(),
                };
                world.shardalloc_strategy_allocator().call_set_topology(&mut live.store, wit_topology)?;
                *sent_generation = Some(topology.generation());
            }
            live.store.set_epoch_deadline(ticks);
            f(&mut live.guest, &mut live.store)
        })();
        // The store never keeps the shard table past a call.
        live.store.data_mut().table = None;
        live.store.data_mut().allocating = None;
        match result {
            Ok(value) => Ok(value),
            Err(error) => {
                let denied = live.store.data().memory_denied;
                let loading = live.store.data().loading_view;
                self.live = None;
                Err(match classify(error, denied) {
                    StrategyError::Fault { kind: FaultKind::Deadline, detail } if loading => StrategyError::Fault {
                        kind: FaultKind::Deadline,
                        detail: format!(
                            "loading the whole view into a fresh instance and its first decision on it took longer \
                             than their budget of {:?} ([strategy-limits] view-load-ms): {detail}",
                            self.limits.view_load.max(self.limits.deadline)
                        ),
                    },
                    other => other,
                })
            }
        }
    }
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
        match self.compiled.contract {
            Contract::V0_1 => self.allocate_v0_1(view, shard, requester),
            Contract::V0_2 | Contract::V0_3 => self.allocate_kept(view, shard, requester),
        }
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        match self.compiled.contract {
            Contract::V0_1 => Ok(self.rebalance_v0_1(view)?.into_iter().map(RebalanceMove::anywhere).collect()),
            Contract::V0_2 | Contract::V0_3 => self.rebalance_kept(view),
        }
    }
}

/// The shard table a kept-view instance follows for `view`: the coordinator's, or
/// for a view made without one (a snapshot's, in a dry run or the CLI) one
/// built from the view's homes.
fn table_of(view: &ClusterView) -> Result<Arc<ShardTable>, StrategyError> {
    if let Some(table) = view.table() {
        return Ok(table.clone());
    }
    view.built_table().map(Arc::new).ok_or_else(|| {
        StrategyError::Invalid(
            "a contract 0.2 or 0.3 strategy needs the view's shard table, and this allocation view has none".to_owned(),
        )
    })
}

/// Brings a kept-view instance's copy of the view to the table's generation: the
/// journal's batches after its copy, merged ([`crate::strategy::coalesce`]),
/// or the whole view (under the view-load budget, [`Limits::view_load`],
/// which the decision after it keeps) when it has none or the journal no
/// longer reaches it. A checksum that is not the table's is an error,
/// handled like a trap.
fn sync(
    world: &KeptWorld,
    copy: &mut Option<CopyAt>,
    store: &mut Store<HostState>,
    table: &ShardTable,
    limits: &Limits,
) -> wasmtime::Result<bool> {
    let since = copy.filter(|c| c.table == table.id());
    let batches = since.and_then(|c| Some((c, table.batches_since(c.at)?)));
    *copy = None;
    let loaded_whole = batches.is_none();
    let (checksum, generation) = match batches {
        Some((since, batches)) => {
            let mut checksum = None;
            let mut generation = since.generation;
            for mut batch in crate::strategy::coalesce::coalesce(batches) {
                generation += 1;
                batch.generation = generation;
                checksum = Some(match world {
                    KeptWorld::V0_2(world) => {
                        let allocator = world.shardalloc_strategy_allocator();
                        lower::v2::with_changes(&batch, |changes| allocator.call_apply(&mut *store, changes))?
                    }
                    KeptWorld::V0_3 { world, wants } => {
                        let allocator = world.shardalloc_strategy_allocator();
                        lower::v3::with_changes(&batch, *wants, |changes| allocator.call_apply(&mut *store, changes))?
                    }
                });
            }
            (checksum, generation)
        }
        None => {
            // The load has a budget of its own ([`Limits::view_load`]), which
            // the first decision of each kind after it shares.
            store.set_epoch_deadline(limits.view_load_ticks());
            store.data_mut().loading_view = true;
            let checksum = match world {
                KeptWorld::V0_2(world) => {
                    let allocator = world.shardalloc_strategy_allocator();
                    let full = table.full_view(false);
                    lower::v2::with_view(&full, |view| allocator.call_load_view(&mut *store, view))?
                }
                KeptWorld::V0_3 { world, wants } => {
                    let allocator = world.shardalloc_strategy_allocator();
                    let full = table.full_view(false);
                    let packed = wants.ids.then(|| lower::v3::pack_table(table));
                    let attributed = wants.attributes.then(|| lower::v3::pack_attributes(table));
                    lower::v3::with_view(&full, packed.as_ref(), attributed.as_ref(), |view| {
                        allocator.call_load_view(&mut *store, view)
                    })?
                }
            };
            let full_generation = table.generation();
            (Some(checksum), full_generation)
        }
    };
    if let Some(checksum) = checksum
        && checksum != table.checksum()
    {
        return Err(wasmtime::Error::msg(format!(
            "the strategy's view checksum {checksum:#018x} is not the host's {:#018x} at generation {}: its copy of \
             the view went wrong",
            table.checksum(),
            table.generation()
        )));
    }
    *copy = Some(CopyAt { table: table.id(), at: table.generation(), generation });
    Ok(loaded_whole)
}

impl Sandboxed {
    fn allocate_v0_1(
        &mut self,
        view: &ClusterView,
        shard: &str,
        requester: Option<&str>,
    ) -> Result<String, StrategyError> {
        let requester = requester_index(view, requester)?;
        let key = wit::ShardKey { id: shard, hash: shardalloc_guest::shard_hash(shard) };
        let loads = lower::v1::loads(view);
        let index = self
            .call(view.topology(), |guest, store| {
                let Guest::V0_1 { world, .. } = guest else { unreachable!("a 0.1 component has 0.1 instances") };
                world.shardalloc_strategy_allocator().call_allocate(store, key, requester, loads)
            })?
            .map_err(|m| StrategyError::Refused(bounded(m)))?;
        view.regions().get(index as usize).map(|r| r.address.clone()).ok_or_else(|| {
            StrategyError::Invalid(format!("region index {index} out of range ({} regions)", view.regions().len()))
        })
    }

    fn rebalance_v0_1(&mut self, view: &ClusterView) -> Result<Vec<String>, StrategyError> {
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
        let loads = lower::v1::loads(view);
        let handles = self
            .call(view.topology(), |guest, store| {
                let Guest::V0_1 { world, .. } = guest else { unreachable!("a 0.1 component has 0.1 instances") };
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

    /// One call into a kept-view instance: its copy brought up to the lent
    /// table first ([`sync`]), the table lent to the store for the call,
    /// and a whole-view load counted.
    fn call_kept<R>(
        &mut self,
        view: &ClusterView,
        table: &Arc<ShardTable>,
        decision: Decision,
        f: impl FnOnce(&KeptWorld, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, StrategyError> {
        let limits = self.limits;
        let mut loaded_whole = false;
        let answer = self.call(view.topology(), |guest, store| {
            let Guest::Kept { world, copy, topology, fresh } = guest else {
                unreachable!("a 0.2 or 0.3 component has kept-view instances")
            };
            loaded_whole = sync(world, copy, store, table, &limits)?;
            if loaded_whole {
                *fresh = Fresh { allocate: true, rebalance: true };
            }
            // The load and the first decision of each kind after it share
            // the view-load budget; every other decision has the deadline.
            if fresh.take(decision) {
                // (Set already when the view was loaded whole in this call.)
                if !loaded_whole {
                    store.set_epoch_deadline(limits.view_load_ticks());
                }
                store.data_mut().loading_view = true;
            }
            *topology = Some(table.view().topology().generation());
            store.data_mut().table = Some(table.clone());
            f(world, store)
        });
        self.view_loads += u64::from(loaded_whole);
        answer
    }

    fn allocate_kept(
        &mut self,
        view: &ClusterView,
        shard: &str,
        requester: Option<&str>,
    ) -> Result<String, StrategyError> {
        let requester = requester_index(view, requester)?;
        let table = table_of(view)?;
        let handle = table.allocation_handle(shard);
        let hash = shardalloc_guest::shard_hash(shard);
        let (cause, now) = (lower::v3::cause(view.cause()), view.now());
        let answer = self.call_kept(view, &table, Decision::Allocate, |world, store| {
            let state = store.data_mut();
            state.allocating = Some(handle);
            state.allocating_id.clear();
            state.allocating_id.push_str(shard);
            state.allocating_attributes = view.attributes().clone();
            let (index, refused) = match world {
                KeptWorld::V0_2(world) => {
                    let allocator = world.shardalloc_strategy_allocator();
                    let index = allocator.call_allocate(&mut *store, handle, hash, requester)?;
                    (index, if index < 0 { Some(allocator.call_last_error(&mut *store)?) } else { None })
                }
                KeptWorld::V0_3 { world, .. } => {
                    let allocator = world.shardalloc_strategy_allocator();
                    let index = allocator.call_allocate(&mut *store, handle, hash, requester, cause, now)?;
                    (index, if index < 0 { Some(allocator.call_last_error(&mut *store)?) } else { None })
                }
            };
            Ok(match refused {
                Some(message) => Err(message),
                None => Ok(index as u64),
            })
        });
        let index = answer?.map_err(|m| StrategyError::Refused(bounded(m)))?;
        let regions = table.view().regions();
        regions.get(index as usize).map(|r| r.address.clone()).ok_or_else(|| {
            StrategyError::Invalid(format!("region index {index} out of range ({} regions)", regions.len()))
        })
    }

    fn rebalance_kept(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        let table = table_of(view)?;
        let now = view.now();
        let answer = self.call_kept(view, &table, Decision::Rebalance, |world, store| match world {
            KeptWorld::V0_2(world) => Ok(world
                .shardalloc_strategy_allocator()
                .call_rebalance(&mut *store)?
                .map(|handles| handles.into_iter().map(|shard| (shard, None)).collect::<Vec<_>>())),
            KeptWorld::V0_3 { world, .. } => Ok(world
                .shardalloc_strategy_allocator()
                .call_rebalance(&mut *store, now)?
                .map(|moves| moves.into_iter().map(|m| (m.shard, m.to)).collect())),
        });
        let moves = answer?.map_err(|m| StrategyError::Refused(bounded(m)))?;
        let regions = table.view().regions();
        moves
            .into_iter()
            .map(|(h, to)| {
                let shard = table
                    .shard_id(h)
                    .map(str::to_owned)
                    .ok_or_else(|| StrategyError::Invalid(format!("shard handle {h} names no shard in the view")))?;
                let to = match to {
                    None => None,
                    Some(index) => Some(regions.get(index as usize).map(|r| r.address.clone()).ok_or_else(|| {
                        StrategyError::Invalid(format!("region index {index} out of range ({} regions)", regions.len()))
                    })?),
                };
                Ok(RebalanceMove { shard, to })
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
