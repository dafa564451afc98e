//! The strategy engine: wasmtime, made safe enough to load strategies into
//! a production node without recompiling it.
//!
//! - **Loading** ([`Engine::compile`]): the bytes are classified (empty, not
//!   wasm, a core module), compiled once with cranelift in parallel — or
//!   loaded by mmap from the precompiled-artifact cache ([`cache`]), keyed by
//!   the component's sha256 and the engine's compatibility hash — checked to
//!   export the allocator of a contract this host speaks (0.1 or 0.2, told
//!   apart by the export's version: [`component::Contract`]), pre-instantiated
//!   through that contract's bindings ([`bindings`]), and described.
//! - **Sandbox** ([`instance::Sandboxed`], limits in [`limits`]): every call
//!   runs under a deadline (epoch interruption driven by a ticker thread;
//!   default 50 ms) and a memory cap (default 256 MiB). A trap, a deadline or
//!   memory exhaustion poisons that store only: it is dropped and the next
//!   call instantiates afresh from the pooling allocator. No WASI, no clock,
//!   no randomness, no I/O: the contract's imports are logging and shard
//!   ids, and a component built with WASI gets a capability-free,
//!   deterministic one ([`wasi`]).
//! - **Instance pool** ([`limits::DEFAULT_MAX_INSTANCES`]): sized for the
//!   node's 1,024 entity types, each holding what its slot keeps at once
//!   (the live instance, the one it swaps for, a shadow's), with the core
//!   instances, memories and tables a strategy instance was measured to use.
//!   Only memories and tables reserve address space (12.3 TiB, no memory).
//! - **Fallback rule** (in `strategy::guarded`): every answer is checked
//!   against the view it was computed on; an error, a fault or a refused
//!   answer is logged with the strategy's name and version, counted, and
//!   replaced by the built-in least-shard compiled into the host.
//! - **Hot swap** ([`slot`]): one slot per entity type holds the active
//!   activation behind an atomic pointer. A swap is one pointer store; a
//!   call in flight finishes on the instance it started with and the next
//!   call picks up the new one, so swapping never fails or stalls a call.
//!   Activations are kept as history for one-call rollback, and a new
//!   activation that faults too often is rolled back automatically; every
//!   change is reported on a channel rather than polled.
//! - **Shadow** ([`slot`]): a candidate runs beside the active strategy on
//!   every decision, disagreements counted. (A dry run needs no wasmtime:
//!   it is `crate::strategy::dry_run`.)
//! - **Sources** ([`source`]): a strategy named by a
//!   [`crate::strategy::StrategySource`] is read (a built-in, a file, or an
//!   uploaded component through the caller) and compiled.
//!
//! Strategy calls are synchronous and short; the coordinator driver makes
//! them on its own OS thread, never on tokio's workers.

pub mod bindings;
pub mod budget;
pub mod cache;
pub mod component;
pub mod host;
pub mod instance;
pub mod limits;
pub mod lower;
pub mod precompiled;
pub mod slot;
pub mod source;
pub mod wasi;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig, Store};

use self::bindings::{v0_1, v0_2, v0_3};
use self::cache::{ArtifactCache, CacheOutcome};
use self::component::{Compiled, Contract, LoadError, Pre, check_world, sniff};
use self::host::HostState;
use self::instance::Sandboxed;
use self::limits::{EPOCH_TICK, Limits, MAX_COMPONENT_SIZE, MAX_MEMORY_LIMIT, MEMORY_GUARD, MEMORY_RESERVATION};
use crate::strategy::Info;
use crate::strategy::source::digest_of as digest;

/// Longest strategy name or version kept from `describe`.
pub const MAX_INFO_FIELD: usize = 128;

/// Longest config schema kept from `describe`.
pub const MAX_CONFIG_SCHEMA: usize = 64 * 1024;

/// How the engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Where precompiled artifacts are kept; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Strategy instances the pooling allocator holds at once
    /// ([`limits::instances_for_types`] sizes it for a number of types);
    /// `0` uses on-demand allocation instead (for short-lived tools).
    pub max_instances: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { cache_dir: None, max_instances: limits::DEFAULT_MAX_INSTANCES }
    }
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration.
    #[error("cannot configure the WebAssembly engine: {0}")]
    Config(String),
    /// The cache directory is unusable.
    #[error("cannot open the artifact cache {dir}: {error}")]
    Cache {
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: wasmtime::Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("shardalloc-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawn the epoch ticker");
        Ticker { stop, thread: Some(thread) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The shared engine: wasmtime configured for strategies, the host's
/// linker, the artifact cache and the epoch ticker.
pub struct Engine {
    wasmtime: wasmtime::Engine,
    linker: Linker<HostState>,
    cache: Option<ArtifactCache>,
    engine_hash: String,
    /// The components this engine has loaded and something still holds, by
    /// digest: compiling the same bytes again shares them, so swapping
    /// between two strategies a hundred times keeps two copies of their
    /// code mapped, not a hundred (and as many open artifact files).
    loaded: Mutex<HashMap<String, Weak<Compiled>>>,
    _ticker: Ticker,
}

impl Engine {
    /// Starts an engine.
    pub fn new(config: EngineConfig) -> Result<Arc<Self>, EngineError> {
        let mut wasm = Config::new();
        wasm.epoch_interruption(true).parallel_compilation(true).wasm_component_model(true);
        // Compiled code depends on these two (its bounds checks), so every
        // engine sets them, pooled or not: the compiler process's artifacts
        // load into the node's engine.
        wasm.memory_reservation(MEMORY_RESERVATION).memory_guard_size(MEMORY_GUARD);
        if config.max_instances > 0 {
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool(config.max_instances)));
        }
        let wasmtime = wasmtime::Engine::new(&wasm).map_err(|e| match config.max_instances {
            0 => EngineError::Config(format!("{e:#}")),
            instances => EngineError::Config(format!(
                "{e:#} (the pool of {instances} strategy instances reserves {:.1} TiB of address space: is `ulimit \
                 -v` set?)",
                limits::pool_reservation(instances) as f64 / (1u64 << 40) as f64
            )),
        })?;
        let mut linker = Linker::new(&wasmtime);
        v0_1::World::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| EngineError::Config(format!("{e:#}")))?;
        v0_2::World::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| EngineError::Config(format!("{e:#}")))?;
        v0_3::World::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| EngineError::Config(format!("{e:#}")))?;
        wasi::add_to_linker(&mut linker).map_err(|e| EngineError::Config(format!("{e:#}")))?;
        let cache = match config.cache_dir {
            Some(dir) => Some(ArtifactCache::open(&dir).map_err(|error| EngineError::Cache { dir, error })?),
            None => None,
        };
        let mut hasher = std::hash::DefaultHasher::new();
        wasmtime.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = format!("{:016x}", hasher.finish());
        let ticker = Ticker::start(wasmtime.clone());
        Ok(Arc::new(Engine { wasmtime, linker, cache, engine_hash, loaded: Mutex::default(), _ticker: ticker }))
    }

    /// An engine for a short-lived tool: no pooling, no cache.
    pub fn for_tool() -> Result<Arc<Self>, EngineError> {
        Engine::new(EngineConfig { cache_dir: None, max_instances: 0 })
    }

    /// The wasmtime engine underneath, configured as every strategy runs
    /// (epoch interruption, pooling, memory reservation): the `strategies`
    /// benchmark compiles its floor component (an empty call, one crossing
    /// and nothing else) with it, so the floor and the strategies' calls
    /// are measured under one configuration.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.wasmtime
    }

    /// Whether a compiled artifact of `bytes` is in the cache (so
    /// [`Engine::compile`] will not compile).
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        self.cache.as_ref().is_some_and(|cache| cache.contains(&self.engine_hash, &digest(bytes)))
    }

    /// The artifact cache's directory, if the engine has one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache.as_ref().map(ArtifactCache::dir)
    }

    /// Compiles (or loads from the cache) and checks a component, and asks
    /// it to describe itself. A component this engine holds already is
    /// shared, not loaded again.
    pub fn compile(&self, bytes: &[u8]) -> Result<Arc<Compiled>, LoadError> {
        sniff(bytes, MAX_COMPONENT_SIZE)?;
        self.compile_digested(bytes, digest(bytes))
    }

    /// [`Engine::compile`] of bytes whose digest the caller knows.
    fn compile_digested(&self, bytes: &[u8], digest: String) -> Result<Arc<Compiled>, LoadError> {
        sniff(bytes, MAX_COMPONENT_SIZE)?;
        if let Some(held) = self.held(&digest) {
            return Ok(held);
        }
        let compiled = self.compile_new(bytes, digest)?;
        Ok(self.share(compiled))
    }

    /// The compiled component of `digest`, when something still holds it.
    fn held(&self, digest: &str) -> Option<Arc<Compiled>> {
        self.loaded.lock().expect("loaded lock").get(digest).and_then(Weak::upgrade)
    }

    /// Remembers a component just loaded, so loading its bytes again shares it.
    fn share(&self, compiled: Arc<Compiled>) -> Arc<Compiled> {
        let mut loaded = self.loaded.lock().expect("loaded lock");
        loaded.retain(|_, held| held.strong_count() > 0);
        loaded.insert(compiled.digest.clone(), Arc::downgrade(&compiled));
        compiled
    }

    fn compile_new(&self, bytes: &[u8], digest: String) -> Result<Arc<Compiled>, LoadError> {
        let (component, cache) = match &self.cache {
            Some(cache) => cache.load_or_compile(&self.wasmtime, &self.engine_hash, &digest, bytes).map_err(|e| {
                if e.downcast_ref::<std::io::Error>().is_some() {
                    LoadError::Cache(format!("{e:#}"))
                } else {
                    LoadError::Invalid(format!("{e:#}"))
                }
            })?,
            None => (
                Component::new(&self.wasmtime, bytes).map_err(|e| LoadError::Invalid(format!("{e:#}")))?,
                CacheOutcome::Compiled,
            ),
        };
        self.finish(component, cache, digest, bytes.len())
    }

    /// Checks a component's world and imports, pre-instantiates it and
    /// asks it to describe itself.
    fn finish(
        &self,
        component: Component,
        cache: CacheOutcome,
        digest: String,
        size: usize,
    ) -> Result<Arc<Compiled>, LoadError> {
        let contract = check_world(&self.wasmtime, &component)?;
        wasi::check_imports(&self.wasmtime, &component).map_err(LoadError::UnsupportedImports)?;
        let linker = wasi::link_for(&self.linker, &self.wasmtime, &component)
            .map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?;
        let wrong = |e: wasmtime::Error| LoadError::WrongWorld(format!("{e:#}"));
        let pre = match contract {
            Contract::V0_1 => Pre::V0_1(v0_1::WorldPre::new(pre).map_err(wrong)?),
            Contract::V0_2 => Pre::V0_2(v0_2::WorldPre::new(pre).map_err(wrong)?),
            Contract::V0_3 => Pre::V0_3(v0_3::WorldPre::new(pre).map_err(wrong)?),
        };
        let info = describe(&self.wasmtime, &pre)?;
        Ok(Arc::new(Compiled { digest, size, contract, info, cache, pre }))
    }

    /// A configured, sandboxed instance of a compiled strategy.
    pub fn instantiate(
        self: &Arc<Self>,
        compiled: &Arc<Compiled>,
        config: &str,
        limits: Limits,
    ) -> Result<Sandboxed, LoadError> {
        if limits.memory > MAX_MEMORY_LIMIT {
            return Err(LoadError::Config(format!(
                "memory limit {} exceeds the engine's maximum {MAX_MEMORY_LIMIT}",
                limits.memory
            )));
        }
        Sandboxed::new(self.clone(), compiled.clone(), config, limits)
    }

    /// Compiles and instantiates in one step.
    pub fn load(self: &Arc<Self>, bytes: &[u8], config: &str, limits: Limits) -> Result<Sandboxed, LoadError> {
        self.instantiate(&self.compile(bytes)?, config, limits)
    }
}

/// The pooling allocator for `max_instances` strategy instances, each
/// admitted its measured share of core instances, memories and tables (see
/// [`limits::DEFAULT_MAX_INSTANCES`] and the constants after it). Only the
/// memories and tables reserve address space; the counts cost nothing.
fn pool(max_instances: u32) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(max_instances)
        .total_core_instances(max_instances.saturating_mul(limits::CORE_INSTANCES_PER_INSTANCE))
        .total_memories(max_instances.saturating_mul(limits::MEMORIES_PER_INSTANCE))
        .total_tables(max_instances.saturating_mul(limits::TABLES_PER_INSTANCE))
        .max_memory_size(MAX_MEMORY_LIMIT);
    pool
}

/// Calls `describe` on a throwaway instance, under the default limits.
fn describe(engine: &wasmtime::Engine, pre: &Pre) -> Result<Info, LoadError> {
    let limits = Limits::default();
    let state = HostState {
        label: "(describing)".into(),
        shard_ids: Vec::new(),
        table: None,
        allocating: None,
        allocating_id: String::new(),
        allocating_attributes: Default::default(),
        memory_limit: limits.memory,
        memory_denied: false,
        memory_bytes: 0,
        loading_view: false,
        wasi: wasi::StoreWasi::new("(describing)"),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| s);
    store.set_epoch_deadline(limits.load_deadline_ticks());
    let instantiating =
        |e: wasmtime::Error| LoadError::Fault { during: "while instantiating", detail: format!("{e:#}") };
    let describing = |e: wasmtime::Error| LoadError::Fault { during: "in describe", detail: format!("{e:#}") };
    let (name, version, description, config_schema, needs_shard_names, needs_shard_attributes) = match pre {
        Pre::V0_1(pre) => {
            let world = pre.instantiate(&mut store).map_err(instantiating)?;
            let info = world.shardalloc_strategy_allocator().call_describe(&mut store).map_err(describing)?;
            (info.name, info.version, info.description, info.config_schema, info.needs_shard_names, false)
        }
        Pre::V0_2(pre) => {
            let world = pre.instantiate(&mut store).map_err(instantiating)?;
            let info = world.shardalloc_strategy_allocator().call_describe(&mut store).map_err(describing)?;
            (info.name, info.version, info.description, info.config_schema, false, false)
        }
        Pre::V0_3(pre) => {
            let world = pre.instantiate(&mut store).map_err(instantiating)?;
            let info = world.shardalloc_strategy_allocator().call_describe(&mut store).map_err(describing)?;
            let (ids, attributes) = (info.needs_shard_ids, info.needs_shard_attributes);
            (info.name, info.version, info.description, info.config_schema, ids, attributes)
        }
    };
    // Guest-supplied text is recorded with decisions and shown to
    // operators: keep it bounded.
    use self::limits::cut;
    Ok(Info {
        name: cut(name, MAX_INFO_FIELD),
        version: cut(version, MAX_INFO_FIELD),
        description: cut(description, 4 * MAX_INFO_FIELD),
        config_schema: cut(config_schema, MAX_CONFIG_SCHEMA),
        needs_shard_names,
        needs_shard_attributes,
    })
}
