//! Calls into the host: structured logging and shard ids on demand.
//!
//! In a component these are the contract's `host` imports. Natively (unit
//! tests, or strategies linked into the node) log records go to a
//! per-thread sink: the node installs one that forwards to its logs, and
//! tests read what was logged with [`take_logs`].

use std::cell::RefCell;

/// Severity of a log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// Detailed.
    Debug,
    /// Normal operation worth noting.
    Info,
    /// Something an operator should look at.
    Warn,
    /// Something failed.
    Error,
}

/// One structured log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Severity.
    pub level: Level,
    /// Human-readable message.
    pub message: String,
    /// Key/value fields.
    pub fields: Vec<(String, String)>,
}

/// How many records the native capture keeps; older ones are dropped.
pub const CAPTURED_LOGS_LIMIT: usize = 1_000;

/// A native log sink: receives every record logged on its thread. Shared,
/// so a caller builds it once and installs it around each call for the
/// price of a reference count.
pub type LogSink = std::sync::Arc<dyn Fn(&LogRecord) + Send + Sync>;

thread_local! {
    static SINK: RefCell<Option<LogSink>> = const { RefCell::new(None) };
    static CAPTURED: RefCell<Vec<LogRecord>> = const { RefCell::new(Vec::new()) };
}

/// Logs a record through the host.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        host_log(level, message, fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let record = LogRecord {
            level,
            message: message.to_owned(),
            fields: fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        };
        let forwarded = SINK.with(|sink| match &*sink.borrow() {
            Some(sink) => {
                sink(&record);
                true
            }
            None => false,
        });
        if !forwarded {
            CAPTURED.with(|captured| {
                let mut captured = captured.borrow_mut();
                if captured.len() == CAPTURED_LOGS_LIMIT {
                    captured.remove(0);
                }
                captured.push(record);
            });
        }
    }
}

/// Installs (or, with `None`, removes) this thread's native log sink and
/// returns the previous one. Without a sink records are captured for
/// [`take_logs`].
pub fn set_log_sink(sink: Option<LogSink>) -> Option<LogSink> {
    SINK.with(|s| std::mem::replace(&mut *s.borrow_mut(), sink))
}

/// Takes the records captured on this thread since the last call.
pub fn take_logs() -> Vec<LogRecord> {
    CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// The id of a shard in the current rebalance call's table (components only;
/// natively every id is known up front).
#[cfg_attr(
    not(target_arch = "wasm32"),
    allow(dead_code, reason = "only a component asks the host for ids; natively every id is known up front")
)]
pub(crate) fn shard_id(handle: u32) -> String {
    #[cfg(target_arch = "wasm32")]
    {
        host_shard_id(handle)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        unreachable!("native allocations always carry their ids (handle {handle})")
    }
}

/// The attributes of a shard in the current call's view or being
/// allocated (components only; natively they are known up front).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code, reason = "only a component asks the host for attributes"))]
pub(crate) fn shard_attributes(handle: u32) -> crate::Attributes {
    #[cfg(target_arch = "wasm32")]
    {
        crate::Attributes::new(wit_host::shard_attributes(handle).into_iter().map(|label| (label.key, label.value)))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        unreachable!("native allocations always carry their attributes (handle {handle})")
    }
}

#[cfg(target_arch = "wasm32")]
use crate::bindings::shardalloc::strategy::host as wit_host;

#[cfg(target_arch = "wasm32")]
fn host_log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let level = match level {
        Level::Trace => wit_host::Level::Trace,
        Level::Debug => wit_host::Level::Debug,
        Level::Info => wit_host::Level::Info,
        Level::Warn => wit_host::Level::Warn,
        Level::Error => wit_host::Level::Error,
    };
    let fields: Vec<(String, String)> = fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    wit_host::log(level, message, &fields);
}

#[cfg(target_arch = "wasm32")]
fn host_shard_id(handle: u32) -> String {
    wit_host::shard_id(handle)
}
