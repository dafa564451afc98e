//! [`Refusal`]: why the driver said no to an admin request. The REST
//! layer maps each to a status and a stable code (`api_error.rs`).

use crate::coordinator::PlacementError;

/// Why the driver refused a request. The REST layer maps each to a status
/// and a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No such entity type.
    #[error("there is no entity type named {0:?}")]
    UnknownType(String),
    /// The type still has regions (the first few named) and `force` was not given.
    #[error(
        "the entity type {entity_type} has {count} region(s) ({}); stop them first, or delete with ?force=true to let them leave",
        regions.join(", ")
    )]
    TypeHasRegions {
        /// The type.
        entity_type: String,
        /// Some of its regions.
        regions: Vec<String>,
        /// How many it has.
        count: usize,
    },
    /// A forced deletion of the type is under way.
    #[error("the entity type {0} is being deleted")]
    TypeBeingDeleted(String),
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
    /// A freeze or a lift was refused.
    #[error("{0}")]
    Freeze(String),
    /// An attribute write was refused.
    #[error("{0}")]
    Attributes(String),
    /// A cluster-wide freeze with no type to hold it.
    #[error("the node has no entity type to freeze")]
    NoTypes,
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
    /// Too many placement writes wait in the driver's queue.
    #[error("{queued} placement writes are waiting to be applied; retry after the time Retry-After gives")]
    WritesBusy {
        /// The queue's bound.
        queued: usize,
    },
    /// The coordinator answered something this request does not expect.
    #[error("unexpected coordinator reply {0}")]
    Unexpected(String),
}
