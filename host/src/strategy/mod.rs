//! The host-side strategy layer: what the coordinator calls.
//!
//! - [`AllocationStrategy`]: the synchronous trait over [`ClusterView`];
//!   implemented natively ([`native::NativeStrategy`]) and, for components,
//!   by the engine (`crate::engine`).
//! - [`guarded::Guarded`]: checks every answer against the view and falls
//!   back to the built-in least-shard compiled into the host.
//! - [`external::ExternalAllocation`]: operators' placements, wrapped around
//!   whatever strategy is active.
//! - [`builtin`]: the table of built-in strategies, natively and as embedded
//!   components.
//! - [`source`]: [`StrategySource`], where a strategy comes from (a built-in,
//!   an uploaded component's digest, a file), parsed once at the edge.
//! - [`dry_run`]: what a candidate would do on a snapshot, without applying it.
//! - [`churn`]: the churn limits the host puts on every strategy's rebalance
//!   answer (moves per round, cooldown, round interval).
//! - [`simulate`]: rounds of rebalance and re-allocation over a snapshot.
//! - [`trace`]: load traces (the CSV format, its parser, the generator);
//!   [`replay`]: a trace replayed against a strategy, round by round.
//! - [`table`]: [`table::ShardTable`], every shard by handle with the
//!   journal of batches a contract 0.2 component's copy of the view follows.
//!
//! This layer knows nothing of wasmtime: the engine (`crate::engine`)
//! implements [`AllocationStrategy`] for components and depends on it, never
//! the other way round.
//!
//! "Allocatable" means: status up, not proxy-only, not draining. The host
//! never accepts another answer.

pub mod builtin;
pub mod churn;
pub mod coalesce;
pub mod dry_run;
pub mod external;
pub mod guarded;
mod handles;
pub mod native;
pub mod plan;
pub mod replay;
pub mod simulate;
pub mod source;
pub mod table;
pub mod trace;
pub mod view;

use shardalloc_guest::Level;
pub use shardalloc_guest::{AllocationCause, Info};
pub use shardalloc_proto::api::ActivationCause;

/// How many activations per entity type are remembered: the one limit of
/// the activation history, wherever it is kept (a slot's rollback list in
/// `engine::slot`, the type catalog's copy, every store backend).
pub const ACTIVATION_HISTORY: usize = 100;
pub use source::StrategySource;
pub use view::ClusterView;

/// Why a strategy call produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyError {
    /// The strategy answered with an error of its own.
    #[error("strategy error: {0}")]
    Refused(String),
    /// The strategy answered something the host does not accept.
    #[error("invalid answer: {0}")]
    Invalid(String),
    /// The strategy faulted: a trap (a panic in the guest), its deadline or
    /// its memory cap. Kept apart from the strategy's own errors.
    #[error("strategy fault ({kind}): {detail}")]
    Fault {
        /// What kind of fault.
        kind: FaultKind,
        /// The runtime's description.
        detail: String,
    },
}

/// What kind of fault stopped a strategy call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A trap: a panic, an `unreachable`, an out-of-bounds access…
    Trap,
    /// The call ran past its deadline and was interrupted.
    Deadline,
    /// The strategy wanted more memory than its cap.
    Memory,
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultKind::Trap => "trap",
            FaultKind::Deadline => "deadline",
            FaultKind::Memory => "memory",
        })
    }
}

impl StrategyError {
    /// A short, stable name of the kind of failure, for counters and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StrategyError::Refused(_) => "error",
            StrategyError::Invalid(_) => "invalid-answer",
            StrategyError::Fault { kind: FaultKind::Trap, .. } => "trap",
            StrategyError::Fault { kind: FaultKind::Deadline, .. } => "deadline",
            StrategyError::Fault { kind: FaultKind::Memory, .. } => "memory",
        }
    }
}

/// One shard a strategy's `rebalance` moves, and its destination if the
/// strategy named one: the host homes it there when the shard has stopped,
/// if that region is allocatable then and no placement names another;
/// otherwise `allocate` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceMove {
    /// The shard's id.
    pub shard: String,
    /// The destination's address, or `None` to let `allocate` decide.
    pub to: Option<String>,
}

impl RebalanceMove {
    /// A move without a destination.
    pub fn anywhere(shard: impl Into<String>) -> Self {
        RebalanceMove { shard: shard.into(), to: None }
    }
}

/// Allocation logic as the coordinator sees it: synchronous, over the
/// host's view, answering in addresses and shard ids. Why a shard is
/// allocated ([`ClusterView::cause`]) and the host's time
/// ([`ClusterView::now`]) travel with the view.
pub trait AllocationStrategy: Send {
    /// Name, version, description and config schema.
    fn info(&self) -> &Info;

    /// The address of the region that should own `shard`.
    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError>;

    /// The shards to move, in order, each with its destination if the
    /// strategy named one.
    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError>;

    /// Told when the caller did not use an answer (an error, a fault or an
    /// answer the host refused), so an implementation can count it.
    fn rejected(&mut self, _error: &StrategyError) {}
}

impl<T: AllocationStrategy + ?Sized> AllocationStrategy for Box<T> {
    fn info(&self) -> &Info {
        (**self).info()
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        (**self).allocate(view, shard, requester)
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        (**self).rebalance(view)
    }

    fn rejected(&mut self, error: &StrategyError) {
        (**self).rejected(error)
    }
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
