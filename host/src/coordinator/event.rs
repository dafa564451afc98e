//! What the driver feeds the coordinator.

use std::collections::BTreeMap;

use super::freeze::{FreezeOrder, FreezeScope};
use super::state::Stamp;

use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;
/// The driver's clock, in milliseconds: the one definition, shared with the
/// region client's core.
pub use shardalloc_proto::protocol::Millis;
use shardalloc_proto::protocol::{LoadReport, Register};

/// Identifies an operator request, echoed in its [`Reply`](super::Reply).
pub type RequestId = u64;

/// Something that happened; every event carries the time.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A region (re)connected.
    Register {
        /// The time.
        now: Millis,
        /// Who, as the region sent it: its `sequence` is echoed in
        /// [`NodeMessage::Registered`](super::NodeMessage::Registered) so the region knows which of its sends
        /// the lease counts from.
        register: Register,
        /// The capacity it declared (protocol version 5's
        /// `RegisterWithCapacity`); empty for a plain `Register`.
        capacity: RegionCapacity,
    },
    /// A region is alive; renews its lease.
    Heartbeat {
        /// The time.
        now: Millis,
        /// Who.
        address: String,
        /// Its incarnation.
        incarnation: u64,
        /// Its latest metrics (`mem-used-ratio`, `cpu`, custom gauges).
        metrics: BTreeMap<String, f64>,
        /// Chosen by the region (increasing), echoed in
        /// [`NodeMessage::HeartbeatAck`](super::NodeMessage::HeartbeatAck): the
        /// lease runs from when *this* heartbeat was sent.
        sequence: u64,
    },
    /// A region reports the load its shards carried (protocol version 2).
    Load {
        /// The time.
        now: Millis,
        /// Who.
        address: String,
        /// Its incarnation; a report of another one is ignored.
        incarnation: u64,
        /// What it carried.
        report: LoadReport,
    },
    /// A region wants to leave gracefully.
    Leave {
        /// The time.
        now: Millis,
        /// Who.
        address: String,
        /// Which incarnation; a late message of an older one is ignored.
        incarnation: u64,
    },
    /// A region asks where a shard lives.
    GetShardHome {
        /// The time.
        now: Millis,
        /// Who asks.
        requester: String,
        /// Which incarnation; an older one is told to register again.
        incarnation: u64,
        /// Which shard.
        shard: String,
    },
    /// A region gives the attributes the application has for a shard, with
    /// its request for the shard's home (protocol version 5): kept when the
    /// shard has none yet.
    ShardAttributesOffered {
        /// The time.
        now: Millis,
        /// Who offers.
        region: String,
        /// Which incarnation; an older one's offer is ignored.
        incarnation: u64,
        /// Which shard.
        shard: String,
        /// Its attributes.
        attributes: ShardAttributes,
    },
    /// A region stopped routing to a shard and buffers its messages.
    BeginHandOffAck {
        /// The time.
        now: Millis,
        /// Who acknowledges.
        region: String,
        /// Which incarnation; a late message of an older one is ignored.
        incarnation: u64,
        /// Which shard.
        shard: String,
    },
    /// A shard's owner stopped it.
    ShardStopped {
        /// The time.
        now: Millis,
        /// Who stopped it.
        region: String,
        /// Which incarnation; a late message of an older one is ignored.
        incarnation: u64,
        /// Which shard.
        shard: String,
    },
    /// Time passes: liveness, deadlines, rebalance.
    Tick {
        /// The time.
        now: Millis,
    },
    /// A [`Command::Persist`](super::Command::Persist) batch (and every one
    /// before it) is durable.
    Persisted {
        /// The time.
        now: Millis,
        /// The batch number.
        batch: u64,
    },
    /// An operator's request; answered with a [`Reply`](super::Reply).
    Operator {
        /// The time.
        now: Millis,
        /// Echoed in the reply.
        request: RequestId,
        /// What is asked.
        op: OperatorRequest,
    },
}

impl Event {
    /// The time the event carries.
    pub fn now(&self) -> Millis {
        match self {
            Event::Register { now, .. }
            | Event::Heartbeat { now, .. }
            | Event::Load { now, .. }
            | Event::Leave { now, .. }
            | Event::GetShardHome { now, .. }
            | Event::ShardAttributesOffered { now, .. }
            | Event::BeginHandOffAck { now, .. }
            | Event::ShardStopped { now, .. }
            | Event::Tick { now }
            | Event::Persisted { now, .. }
            | Event::Operator { now, .. } => *now,
        }
    }
}

/// An operator's request.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorRequest {
    /// Sets placements (shard, target), all or nothing.
    SetPlacements {
        /// (shard, target address) pairs.
        placements: Vec<(String, String)>,
        /// The write's (timestamp, origin); last writer wins.
        stamp: Stamp,
    },
    /// Removes placements, leaving tombstones.
    RemovePlacements {
        /// The shards.
        shards: Vec<String>,
        /// The write's (timestamp, origin).
        stamp: Stamp,
    },
    /// Lists the live placements.
    ListPlacements,
    /// Moves shards on the next tick, or at once when `immediate`.
    RebalanceNow {
        /// The shards.
        shards: Vec<String>,
        /// Start the hand-offs now rather than on the next rebalance.
        immediate: bool,
    },
    /// Moves every shard off a region and gives it no new ones.
    Drain {
        /// The region.
        address: String,
    },
    /// Lets a drained region get shards again.
    Undrain {
        /// The region.
        address: String,
    },
    /// Sets (or with `None` clears) the type's signal: JSON handed to the
    /// strategy unread (at most [`MAX_SIGNAL_BYTES`](super::MAX_SIGNAL_BYTES)).
    SetSignal {
        /// The JSON text.
        signal: Option<String>,
    },
    /// Every region leaves, as if each had sent `Leave`: their shards stop
    /// through the full hand-off and get no new home, and each region is
    /// removed (and told `LeaveDone`) once it holds none. The type is being
    /// deleted; new registrations are the driver's to refuse.
    Retire,
    /// Freezes the type (replacing the freeze of the order's scope).
    Freeze(FreezeOrder),
    /// Writes shards' attributes (each shard's whole map; the empty map
    /// clears it), all or nothing.
    SetAttributes {
        /// (shard, its attributes) pairs.
        writes: Vec<(String, ShardAttributes)>,
    },
    /// Lifts the freezes of these scopes that are in force.
    Thaw {
        /// Which freezes.
        scopes: Vec<FreezeScope>,
        /// Why.
        reason: String,
    },
}
