//! The minimal component loader: compile a strategy component, check that
//! it exports the `shardalloc:strategy@0.1.0` world, configure it and call
//! it. Sandboxing (deadlines, memory caps), artifact caching and hot swap
//! belong to the engine, which replaces this loader.

use std::sync::Arc;

use shardalloc_guest::{Level, RegionStatus, Topology};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

use super::{AllocationStrategy, ClusterView, Info, StrategyError};

mod bindings {
    wasmtime::component::bindgen!({
        world: "strategy",
        path: "../wit",
    });
}

use bindings::shardalloc::strategy::host as wit_host;
use bindings::shardalloc::strategy::types as wit;

/// The contract version this host speaks.
pub const CONTRACT: &str = "shardalloc:strategy@0.1.0";

/// Why a component could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly file (it does not start with the \\0asm magic)")]
    NotWasm,
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// A core module, not a component.
    #[error(
        "this is a core WebAssembly module, not a component: wrap it with wit-component (see docs/writing-a-strategy.md)"
    )]
    CoreModule,
    /// The component does not compile.
    #[error("the component is not valid: {0}")]
    Invalid(String),
    /// It does not export the strategy world (or another version of it).
    #[error("the component does not implement {CONTRACT}: {0}")]
    WrongWorld(String),
    /// `configure` refused the configuration.
    #[error("the strategy rejected its configuration: {0}")]
    Config(String),
    /// A call trapped during loading.
    #[error("the strategy faulted while loading: {0}")]
    Fault(String),
}

/// The node's log for records a strategy emits (native or component).
pub fn emit_strategy_log(strategy: &str, level: Level, message: &str, fields: &[(String, String)]) {
    let fields = fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    match level {
        Level::Trace => tracing::trace!(strategy, fields, "{message}"),
        Level::Debug => tracing::debug!(strategy, fields, "{message}"),
        Level::Info => tracing::info!(strategy, fields, "{message}"),
        Level::Warn => tracing::warn!(strategy, fields, "{message}"),
        Level::Error => tracing::error!(strategy, fields, "{message}"),
    }
}

/// What the host keeps in a strategy's store.
struct HostState {
    name: String,
    shard_ids: Vec<String>,
}

impl wit::Host for HostState {}

impl wit_host::Host for HostState {
    fn log(&mut self, level: wit_host::Level, message: String, fields: Vec<(String, String)>) {
        let level = match level {
            wit_host::Level::Trace => Level::Trace,
            wit_host::Level::Debug => Level::Debug,
            wit_host::Level::Info => Level::Info,
            wit_host::Level::Warn => Level::Warn,
            wit_host::Level::Error => Level::Error,
        };
        emit_strategy_log(&self.name, level, &message, &fields);
    }

    fn shard_id(&mut self, handle: u32) -> String {
        // Out of range yields "", which names no shard; answers are checked.
        self.shard_ids.get(handle as usize).cloned().unwrap_or_default()
    }
}

/// Classifies bytes before compiling, so each kind of wrong file gets its own
/// message.
pub fn sniff(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.is_empty() {
        return Err(LoadError::Empty);
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm);
    }
    // Core modules have version 1, layer 0; components layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

/// A strategy component, compiled and instantiated.
pub struct ComponentStrategy {
    store: Store<HostState>,
    exports: bindings::Strategy,
    info: Info,
    sent_generation: Option<u64>,
}

impl ComponentStrategy {
    /// An engine with the settings strategies need.
    pub fn engine() -> Engine {
        Engine::default()
    }

    /// Compiles, instantiates, describes and configures a component.
    pub fn load(engine: &Engine, bytes: &[u8], config: &str) -> Result<Self, LoadError> {
        sniff(bytes)?;
        let component = Component::new(engine, bytes).map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        let mut linker = Linker::new(engine);
        bindings::Strategy::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        let mut store = Store::new(engine, HostState { name: "(loading)".into(), shard_ids: Vec::new() });
        let exports = bindings::Strategy::instantiate(&mut store, &component, &linker)
            .map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?;
        let described = exports.call_describe(&mut store).map_err(|e| LoadError::Fault(format!("{e:#}")))?;
        let info = Info {
            name: described.name,
            version: described.version,
            description: described.description,
            config_schema: described.config_schema,
            needs_shard_names: described.needs_shard_names,
        };
        store.data_mut().name = format!("{}@{}", info.name, info.version);
        exports
            .call_configure(&mut store, config)
            .map_err(|e| LoadError::Fault(format!("{e:#}")))?
            .map_err(LoadError::Config)?;
        // A setting may change what the strategy needs (e.g. shard names).
        let needs_shard_names =
            exports.call_describe(&mut store).map_err(|e| LoadError::Fault(format!("{e:#}")))?.needs_shard_names;
        let info = Info { needs_shard_names, ..info };
        Ok(ComponentStrategy { store, exports, info, sent_generation: None })
    }

    fn send_topology(&mut self, topology: &Arc<Topology>) -> Result<(), StrategyError> {
        if self.sent_generation == Some(topology.generation()) {
            return Ok(());
        }
        let regions = topology
            .regions()
            .iter()
            .map(|r| wit::Region {
                address: r.address.clone(),
                status: match r.status {
                    RegionStatus::Up => wit::RegionStatus::Up,
                    RegionStatus::Joining => wit::RegionStatus::Joining,
                    RegionStatus::Leaving => wit::RegionStatus::Leaving,
                    RegionStatus::Unreachable => wit::RegionStatus::Unreachable,
                },
                app_version: r.app_version.clone(),
                join_order: r.join_order,
                labels: r.labels.iter().map(|(k, v)| wit::Label { key: k.clone(), value: v.clone() }).collect(),
                proxy_only: r.proxy_only,
                draining: r.draining,
            })
            .collect();
        let wit_topology = wit::Topology {
            generation: topology.generation(),
            regions,
            metric_names: topology.metric_names().to_vec(),
            signal: topology.signal().map(str::to_owned),
        };
        self.sent_generation = None;
        self.exports.call_set_topology(&mut self.store, &wit_topology).map_err(fault)?;
        self.sent_generation = Some(topology.generation());
        Ok(())
    }

    fn loads(view: &ClusterView) -> wit::Loads {
        wit::Loads {
            generation: view.topology().generation(),
            shard_counts: view.shard_counts(),
            metrics: view.metrics().to_vec(),
        }
    }
}

fn fault(e: wasmtime::Error) -> StrategyError {
    StrategyError::Fault(format!("{e:#}"))
}

impl AllocationStrategy for ComponentStrategy {
    fn info(&self) -> &Info {
        &self.info
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        let requester = match requester {
            Some(address) => Some(
                view.region_index(address)
                    .ok_or_else(|| StrategyError::Invalid(format!("requester {address} is not a known region")))?
                    as u32,
            ),
            None => None,
        };
        self.send_topology(view.topology())?;
        let key = wit::ShardKey { id: shard.to_owned(), hash: shardalloc_guest::shard_hash(shard) };
        let loads = Self::loads(view);
        let index = self
            .exports
            .call_allocate(&mut self.store, &key, requester, &loads)
            .map_err(fault)?
            .map_err(StrategyError::Refused)?;
        view.regions().get(index as usize).map(|r| r.address.clone()).ok_or_else(|| {
            StrategyError::Invalid(format!("region index {index} out of range ({} regions)", view.regions().len()))
        })
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<String>, StrategyError> {
        self.send_topology(view.topology())?;
        let table = view.allocations();
        let ids = table.ids().map(<[String]>::to_vec).unwrap_or_default();
        let allocations = wit::Allocations {
            hashes: table.hashes().to_vec(),
            in_progress: table.in_progress_handles(),
            ids: self.info.needs_shard_names.then(|| ids.clone()),
        };
        self.store.data_mut().shard_ids = ids;
        let loads = Self::loads(view);
        let result = self.exports.call_rebalance(&mut self.store, &loads, &allocations);
        let ids = std::mem::take(&mut self.store.data_mut().shard_ids);
        let handles = result.map_err(fault)?.map_err(StrategyError::Refused)?;
        handles
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
    use super::*;

    #[test]
    fn sniff_tells_wrong_files_apart() {
        assert_eq!(sniff(b""), Err(LoadError::Empty));
        assert_eq!(sniff(b"hello world"), Err(LoadError::NotWasm));
        assert_eq!(sniff(b"\0asm\x01\0\0\0"), Err(LoadError::CoreModule));
        assert_eq!(sniff(b"\0asm\x0d\0\x01\0"), Ok(()));
    }
}
