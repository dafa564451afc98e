//! The host side of the `shardalloc:strategy/host` and `types`
//! interfaces: logging and shard ids on demand, plus the store's limits.

use shardalloc_guest::Level;
use wasmtime::ResourceLimiter;

use std::sync::Arc;

use super::bindings::{v0_1, v0_2, v0_3};
use super::limits::{MAX_LOG_MESSAGE, cut};
use crate::strategy::table::ShardTable;

/// What the host keeps in each strategy store.
pub struct HostState {
    /// `name@version`, for logs.
    pub label: String,
    /// The current rebalance call's shard ids, by handle (contract 0.1).
    pub shard_ids: Vec<String>,
    /// The shard table of the current call (contracts 0.2 and 0.3): lent
    /// for the call and taken back after it, so the store never keeps it
    /// alive.
    pub table: Option<Arc<ShardTable>>,
    /// The handle of the shard the current `allocate` is about (contracts
    /// 0.2 and 0.3): not in the view yet, its id in `allocating_id`.
    pub allocating: Option<u32>,
    /// The id of the shard being allocated: a buffer kept between calls,
    /// so an allocation allocates no string on the host.
    pub allocating_id: String,
    /// The attributes of the shard being allocated (contract 0.3).
    pub allocating_attributes: shardalloc_guest::Attributes,
    /// Linear memory cap of this store, in bytes.
    pub memory_limit: usize,
    /// Set when a memory growth was refused: a trap that follows is
    /// reported as memory exhaustion.
    pub memory_denied: bool,
    /// The linear memory's size after its last growth, in bytes (it never
    /// shrinks): what the instance holds, for memory figures.
    pub memory_bytes: usize,
    /// Set while a call runs under the view-load budget (a whole-view load
    /// and the decision after it): a deadline fault names that budget.
    pub loading_view: bool,
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
        self.memory_bytes = self.memory_bytes.max(desired);
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

impl HostState {
    /// A strategy's log record, bounded, in the node's log.
    fn log_record(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let message = cut(message, MAX_LOG_MESSAGE);
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| (cut(k, MAX_LOG_FIELD), cut(v, MAX_LOG_FIELD)))
            .collect();
        crate::strategy::emit_strategy_log(&self.label, level, &message, &fields);
    }

    /// `shard-id` of contracts 0.2 and 0.3: the shard being allocated, or
    /// one in the lent table. A handle that names no shard yields "", which
    /// names no shard; answers are checked.
    fn kept_shard_id(&self, handle: u32) -> String {
        if self.allocating == Some(handle) {
            return self.allocating_id.clone();
        }
        self.table.as_ref().and_then(|t| t.shard_id(handle)).unwrap_or_default().to_owned()
    }
}

/// The node's level of a strategy's log record, from any contract's enum
/// (they have the same cases).
macro_rules! level_of {
    ($level:expr, $wit:path) => {{
        use $wit as L;
        match $level {
            L::Trace => Level::Trace,
            L::Debug => Level::Debug,
            L::Info => Level::Info,
            L::Warn => Level::Warn,
            L::Error => Level::Error,
        }
    }};
}

impl v0_1::wit::Host for HostState {}

impl v0_1::wit_host::Host for HostState {
    fn log(&mut self, level: v0_1::wit_host::Level, message: String, fields: Vec<(String, String)>) {
        self.log_record(level_of!(level, v0_1::wit_host::Level), message, fields);
    }

    fn shard_id(&mut self, handle: u32) -> String {
        // Out of range yields "", which names no shard; answers are checked.
        self.shard_ids.get(handle as usize).cloned().unwrap_or_default()
    }
}

impl v0_2::wit::Host for HostState {}

impl v0_2::wit_host::Host for HostState {
    fn log(&mut self, level: v0_2::wit_host::Level, message: String, fields: Vec<(String, String)>) {
        self.log_record(level_of!(level, v0_2::wit_host::Level), message, fields);
    }

    fn shard_id(&mut self, handle: u32) -> String {
        self.kept_shard_id(handle)
    }
}

impl v0_3::wit::Host for HostState {}

impl v0_3::wit_host::Host for HostState {
    fn log(&mut self, level: v0_3::wit_host::Level, message: String, fields: Vec<(String, String)>) {
        self.log_record(level_of!(level, v0_3::wit_host::Level), message, fields);
    }

    fn shard_id(&mut self, handle: u32) -> String {
        self.kept_shard_id(handle)
    }

    fn shard_attributes(&mut self, handle: u32) -> Vec<v0_3::wit::LabelResult> {
        let label =
            |(key, value): (&str, &str)| v0_3::wit::LabelResult { key: key.to_owned(), value: value.to_owned() };
        if self.allocating == Some(handle) {
            return self.allocating_attributes.iter().map(label).collect();
        }
        let Some(table) = &self.table else { return Vec::new() };
        let allocations = table.allocations();
        match allocations.get(handle) {
            Some(shard) => allocations.attributes(shard).iter().map(label).collect(),
            None => Vec::new(),
        }
    }
}

impl wasmtime_wasi::WasiView for HostState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        self.wasi.view()
    }
}
