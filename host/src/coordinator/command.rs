//! What the coordinator asks the driver to do.

use super::NodeMessage;
use super::event::RequestId;
use super::freeze::{FreezeError, FreezeRecord};
use super::state::{Change, Stamp};
use crate::strategy::churn::ClipReason;
use crate::strategy::external::AllocationReason;

/// Most clipped shards an [`Observation::MovesClipped`] names (it counts all).
pub const MAX_NAMED_CLIPS: usize = 20;

/// A command for the driver, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Make these changes durable, then feed back `Event::Persisted { batch }`.
    /// Batches are numbered from 1 and must be persisted in order.
    Persist {
        /// The batch number.
        batch: u64,
        /// The changes, in order.
        changes: Vec<Change>,
    },
    /// Send a message to a region.
    Send {
        /// The region's address.
        to: String,
        /// The message.
        message: NodeMessage,
    },
    /// Answer an operator.
    Reply {
        /// The request answered.
        request: RequestId,
        /// The answer.
        reply: Reply,
    },
    /// Tell observers (logs, metrics, the "why" endpoint). Never waits for a persist.
    Observe(Observation),
}

/// Why a shard named in `rebalance-now` was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAccepted {
    /// The coordinator has never heard of it.
    #[error("unknown shard")]
    Unknown,
    /// It has no home now.
    #[error("shard has no home")]
    Unallocated,
    /// Its hand-off is in progress or queued already.
    #[error("shard is already moving")]
    AlreadyMoving,
    /// Too many shards are queued already.
    #[error("rebalance queue is full")]
    QueueFull,
    /// A strict freeze holds every move an operator asks for.
    #[error("the type is frozen strictly")]
    Frozen,
}

/// Why a placement request was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// An empty shard id.
    #[error("placement {index}: empty shard id")]
    EmptyShard {
        /// Its position in the request.
        index: usize,
    },
    /// A shard id longer than 256 bytes.
    #[error("placement {index}: shard id of {len} bytes is longer than 256 bytes")]
    ShardTooLong {
        /// Its position in the request.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// An empty target.
    #[error("placement {index}: shard {shard} has an empty target")]
    EmptyTarget {
        /// Its position in the request.
        index: usize,
        /// The shard.
        shard: String,
    },
    /// The same shard twice in one request.
    #[error("placement {index}: shard {shard} is listed twice")]
    Duplicate {
        /// Its position in the request.
        index: usize,
        /// The shard.
        shard: String,
    },
    /// More placements than the limit.
    #[error("too many placements: the limit is {limit}")]
    TooMany {
        /// The limit.
        limit: usize,
    },
    /// Nothing named.
    #[error("no placements given")]
    Empty,
}

/// The answer to an operator.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Placements written: `applied` changed the state, `stale` lost to a newer write.
    PlacementsWritten {
        /// Shards whose placement changed.
        applied: Vec<String>,
        /// Shards whose write was older than the current one.
        stale: Vec<String>,
    },
    /// The request was refused as a whole.
    PlacementRefused(PlacementError),
    /// The live placements: (shard, target, stamp).
    Placements(Vec<(String, String, Stamp)>),
    /// Which shards will move, and why the others will not.
    Rebalance {
        /// Accepted shards.
        accepted: Vec<String>,
        /// The others, with the reason.
        rejected: Vec<(String, NotAccepted)>,
    },
    /// Done.
    Done,
    /// No such region.
    UnknownRegion(String),
    /// The signal was refused (not JSON, too large); the message says why.
    SignalRefused(String),
    /// A freeze or a lift was refused.
    FreezeRefused(FreezeError),
    /// Attributes written: the shards whose attributes changed (the others
    /// already had what was written).
    AttributesWritten {
        /// Shards whose attributes changed.
        changed: Vec<String>,
    },
    /// An attribute write was refused as a whole; the message says why.
    AttributesRefused(String),
}

/// A hand-off step, for observers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// BeginHandOff sent; waiting for every region's acknowledgement.
    Begin,
    /// HandOff sent to the owner; waiting for ShardStopped.
    Stop,
}

/// What observers are told.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A shard got a home.
    Allocated {
        /// The shard.
        shard: String,
        /// Its home.
        region: String,
        /// Why there.
        reason: AllocationReason,
        /// Set when a placement could not be honoured.
        warning: Option<String>,
    },
    /// No region could take a shard; it waits.
    NoAllocatableRegion {
        /// The shard.
        shard: String,
    },
    /// A hand-off reached a step.
    HandOff {
        /// The shard.
        shard: String,
        /// The owner.
        from: String,
        /// The step.
        step: Step,
    },
    /// A hand-off finished: the owner stopped the shard, which is re-homed next.
    HandOffCompleted {
        /// The shard.
        shard: String,
        /// The region that stopped it.
        from: String,
    },
    /// A hand-off ran past a step's deadline; the shard keeps its home.
    HandOffTimedOut {
        /// The shard.
        shard: String,
        /// The owner.
        from: String,
        /// The step that timed out.
        step: Step,
        /// Regions that had not acknowledged.
        missing: Vec<String>,
    },
    /// Regions did not acknowledge a `BeginHandOff` in time: the hand-off goes
    /// on without them (they count as unreachable for it).
    HandOffAckTimedOut {
        /// The shard.
        shard: String,
        /// The regions that had not acknowledged.
        missing: Vec<String>,
    },
    /// A hand-off ended because its owner is gone; the shard is re-homed.
    HandOffOwnerGone {
        /// The shard.
        shard: String,
        /// The owner.
        from: String,
    },
    /// A placement changed.
    PlacementChanged {
        /// The shard.
        shard: String,
        /// The new target (`None`: removed).
        target: Option<String>,
        /// The write's stamp.
        stamp: Stamp,
    },
    /// A region registered.
    RegionRegistered {
        /// Its address.
        address: String,
        /// Its incarnation.
        incarnation: u64,
        /// Shards re-homed because the incarnation changed.
        rehomed: usize,
    },
    /// A region's registration was refused because an older incarnation
    /// asked after a newer one registered: the old one is fenced out.
    RegionFenced {
        /// Its address.
        address: String,
        /// Why.
        reason: String,
    },
    /// An operator drained a region (or undrained it).
    RegionDraining {
        /// Its address.
        address: String,
        /// Draining now.
        draining: bool,
    },
    /// A region missed its heartbeats.
    RegionUnreachable {
        /// Its address.
        address: String,
    },
    /// A region heartbeated again.
    RegionReachable {
        /// Its address.
        address: String,
    },
    /// A region was removed.
    RegionRemoved {
        /// Its address.
        address: String,
        /// Why (timeout, left).
        why: &'static str,
        /// How many shards it had.
        shards: usize,
    },
    /// The type's churn limits clipped the strategy's rebalance answer.
    MovesClipped {
        /// The moves the strategy asked for (placement moves not counted).
        asked: usize,
        /// How many each limit clipped.
        by_limit: Vec<(ClipReason, usize)>,
        /// The first shards clipped (at most [`MAX_NAMED_CLIPS`]), in the
        /// answer's order.
        shards: Vec<String>,
    },
    /// A sample of a region's load after its report, at a bounded rate
    /// ([`LOAD_SAMPLE_MS`](super::LOAD_SAMPLE_MS)).
    RegionLoad {
        /// The region.
        address: String,
        /// Its shards' smoothed loads together.
        load: f64,
    },
    /// The strategy's rebalance failed (a fault, an error, an invalid
    /// answer, the deadline): nothing moved this round.
    RebalanceFallback {
        /// The strategy's failure.
        error: String,
    },
    /// A freeze began, was lifted or expired.
    Freeze {
        /// What, as the type's history keeps it.
        record: FreezeRecord,
    },
    /// A message that does not fit the state was ignored.
    Ignored {
        /// What and why.
        what: String,
    },
    /// A limit was hit.
    Limit {
        /// Which one.
        what: &'static str,
    },
}
