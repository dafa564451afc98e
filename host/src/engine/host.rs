//! The host side of the `shardalloc:strategy/host` and `types`
//! interfaces: logging and shard ids on demand, plus the store's limits.

use shardalloc_guest::Level;
use wasmtime::ResourceLimiter;

use super::bindings::v0_1::{wit, wit_host};
use super::limits::{MAX_LOG_MESSAGE, cut};

/// What the host keeps in each strategy store.
pub struct HostState {
    /// `name@version`, for logs.
    pub label: String,
    /// The current rebalance call's shard ids, by handle.
    pub shard_ids: Vec<String>,
    /// Linear memory cap of this store, in bytes.
    pub memory_limit: usize,
    /// Set when a memory growth was refused: a trap that follows is
    /// reported as memory exhaustion.
    pub memory_denied: bool,
    /// The capability-free WASI of this store.
    pub wasi: super::wasi::StoreWasi,
}

/// Most table elements a strategy may grow a table to.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

impl ResourceLimiter for HostState {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.memory_denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Most fields kept from one log record of a strategy.
pub const MAX_LOG_FIELDS: usize = 32;

/// Longest key or value of a log field kept from a strategy.
pub const MAX_LOG_FIELD: usize = 256;

impl wit::Host for HostState {}

impl wit_host::Host for HostState {
    fn log(&mut self, level: wit_host::Level, mut message: String, fields: Vec<(String, String)>) {
        let level = match level {
            wit_host::Level::Trace => Level::Trace,
            wit_host::Level::Debug => Level::Debug,
            wit_host::Level::Info => Level::Info,
            wit_host::Level::Warn => Level::Warn,
            wit_host::Level::Error => Level::Error,
        };
        message = cut(message, MAX_LOG_MESSAGE);
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| (cut(k, MAX_LOG_FIELD), cut(v, MAX_LOG_FIELD)))
            .collect();
        crate::strategy::emit_strategy_log(&self.label, level, &message, &fields);
    }

    fn shard_id(&mut self, handle: u32) -> String {
        // Out of range yields "", which names no shard; answers are checked.
        self.shard_ids.get(handle as usize).cloned().unwrap_or_default()
    }
}

impl wasmtime_wasi::WasiView for HostState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi.view()
    }
}
