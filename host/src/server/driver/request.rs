//! What the admin API asks the driver: [`AdminRequest`], one variant per
//! question or command, each with a typed reply channel, and [`Refusal`],
//! why the driver said no. The REST handlers send a request and map the
//! reply; they never touch the driver's state.
//!
//! Every reply is released after the turn that handled the request is
//! committed, so an operator never sees state the store does not hold.

use std::sync::Arc;

use shardalloc_client::api::{
    ActivationInfo, Placement, RegionSummary, ShardState, StoredStrategy, StrategyState, TypeState, TypeSummary,
};
use shardalloc_guest::Snapshot;
use tokio::sync::oneshot;

use crate::coordinator::{PlacementError, Reply as CoordinatorReply};
use crate::engine::load::Compiled;
use crate::store::ComponentRecord;

/// Where a request's answer goes.
pub type Reply<T> = oneshot::Sender<T>;

/// A change an operator asks of one type's coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Set placements (shard, target), all or nothing, stamped by the driver.
    SetPlacements(Vec<(String, String)>),
    /// Remove a shard's placement (404 when it has none).
    RemovePlacement(String),
    /// Move shards at the next rebalance, or at once when `immediate`.
    RebalanceNow {
        /// The shards.
        shards: Vec<String>,
        /// Start the hand-offs now.
        immediate: bool,
    },
    /// Set (or with `None` clear) the type's signal.
    SetSignal(Option<String>),
}

/// A strategy to run, compiled off the driver thread.
#[derive(Clone)]
pub struct Candidate {
    /// Compiled.
    pub compiled: Arc<Compiled>,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// A question or command for the driver. See the module documentation.
pub enum AdminRequest {
    /// Is every type ready (enough regions)? `Err` names those that are not.
    Readiness {
        /// The answer.
        reply: Reply<Result<(), String>>,
    },
    /// Every type in brief.
    Types {
        /// The answer.
        reply: Reply<Vec<TypeSummary>>,
    },
    /// A type's regions, hand-offs, placements and strategy.
    TypeState {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<TypeState, Refusal>>,
    },
    /// A type's state in the format `shardalloc strategy eval` reads.
    Snapshot {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<Snapshot, Refusal>>,
    },
    /// A type's live placements.
    Placements {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<Vec<Placement>, Refusal>>,
    },
    /// Where a shard is and why.
    Shard {
        /// The type.
        name: String,
        /// The shard.
        shard: String,
        /// The answer.
        reply: Reply<Result<ShardState, Refusal>>,
    },
    /// A change to one type's coordinator; answered with the coordinator's reply.
    Operate {
        /// The type.
        name: String,
        /// The change.
        operation: Operation,
        /// The answer.
        reply: Reply<Result<CoordinatorReply, Refusal>>,
    },
    /// Every region across types.
    Regions {
        /// The answer.
        reply: Reply<Vec<RegionSummary>>,
    },
    /// Drain (or undrain) a region in every type it serves.
    Drain {
        /// The region.
        address: String,
        /// Drain, or undrain.
        draining: bool,
        /// The answer, once every type applied it.
        reply: Reply<Result<(), Refusal>>,
    },
    /// Built-in and uploaded strategies and where they are active.
    Strategies {
        /// The answer.
        reply: Reply<Vec<StoredStrategy>>,
    },
    /// Record an uploaded component (its blob is already stored).
    AddComponent {
        /// Its description.
        record: ComponentRecord,
        /// The answer.
        reply: Reply<()>,
    },
    /// Forget an uploaded component (the caller deletes its blob after the answer).
    RemoveComponent {
        /// Its digest.
        digest: String,
        /// The answer.
        reply: Reply<Result<(), Refusal>>,
    },
    /// A type's active strategy, history and shadow.
    StrategyState {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Activate a strategy (already compiled and dry-run).
    Activate {
        /// The type.
        name: String,
        /// The strategy.
        candidate: Candidate,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Activate again the strategy active before the current one.
    Rollback {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Set (`Some`) or clear (`None`) the shadow candidate.
    Shadow {
        /// The type.
        name: String,
        /// The candidate.
        candidate: Option<Candidate>,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
}

/// Why the driver refused a request. The REST layer maps each to a status
/// and a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No such entity type.
    #[error("there is no entity type named {0:?}")]
    UnknownType(String),
    /// No such region in any type.
    #[error("no region {0:?} is registered")]
    UnknownRegion(String),
    /// The shard has no home, placement or hand-off.
    #[error("shard {0:?} has no home")]
    UnknownShard(String),
    /// The shard has no placement to remove.
    #[error("shard {shard:?} of {entity_type} has no placement")]
    NoPlacement {
        /// The type.
        entity_type: String,
        /// The shard.
        shard: String,
    },
    /// The placements were refused as a whole.
    #[error(transparent)]
    Placement(PlacementError),
    /// The signal was refused.
    #[error("{0}")]
    Signal(String),
    /// No uploaded component has that digest.
    #[error("no uploaded strategy has the digest {0}")]
    UnknownComponent(String),
    /// Built-ins cannot be deleted.
    #[error("{0} is built in and cannot be deleted")]
    Builtin(String),
    /// The component is active or shadowing somewhere.
    #[error("{digest} is active in {}", types.join(", "))]
    StrategyInUse {
        /// The component.
        digest: String,
        /// Where.
        types: Vec<String>,
    },
    /// The strategy would not load, configure or roll back.
    #[error("{0}")]
    StrategyRefused(String),
    /// Nothing to roll back to.
    #[error("there is no previous strategy to roll back to")]
    NoPreviousStrategy,
    /// The coordinator answered something this request does not expect.
    #[error("unexpected coordinator reply {0}")]
    Unexpected(String),
}

/// The API form of an activation.
pub fn activation_info(record: &crate::store::ActivationRecord) -> ActivationInfo {
    ActivationInfo {
        name: record.name.clone(),
        version: record.version.clone(),
        digest: record.strategy.to_string(),
        config: (!record.config.is_empty()).then(|| serde_json::from_str(&record.config).ok()).flatten(),
        cause: record.cause,
        at_ms: record.at_ms,
    }
}
