//! The golden samples of the region wire protocol: one value of every frame
//! either side sends, filled in the way a real session fills it (every
//! string non-empty, every number non-zero, `Option`s both `Some` and
//! `None`, both values of a `bool` that changes a message's meaning).
//!
//! Each frame's fixture is named by an exhaustive `match` over its enum
//! ([`region_variant`], [`node_variant`]): a new variant does not compile
//! until it has a name here, and then fails `every_frame_variant_has_a_sample`
//! until [`samples`] holds a value of it.

use std::collections::BTreeMap;

use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;
use shardalloc_proto::peer::{PeerHello, PeerMessage};
use shardalloc_proto::protocol::{
    self, FrameError, Hello, LoadReport, NodeMessage, RegionMessage, Register, ShardLoad,
};

/// Defines a function naming each variant of an enum (an exhaustive `match`,
/// no wildcard) and the list of those names, from the one list of arms.
macro_rules! variants {
    ($(#[$meta:meta])* fn $name:ident($ty:ty) -> $all:ident { $($pattern:pat => $file:literal,)+ }) => {
        $(#[$meta])*
        pub fn $name(message: &$ty) -> &'static str {
            match message {
                $($pattern => $file,)+
            }
        }

        /// Every name the function above gives, in the enum's order.
        pub const $all: &[&str] = &[$($file,)+];
    };
}

variants! {
    /// The fixture name of a region's message.
    fn region_variant(RegionMessage) -> REGION_VARIANTS {
        RegionMessage::Register(_) => "region-register",
        RegionMessage::Heartbeat { .. } => "region-heartbeat",
        RegionMessage::GetShardHome { .. } => "region-get-shard-home",
        RegionMessage::BeginHandOffAck { .. } => "region-begin-hand-off-ack",
        RegionMessage::ShardStopped { .. } => "region-shard-stopped",
        RegionMessage::Leave => "region-leave",
        RegionMessage::Drain { .. } => "region-drain",
        RegionMessage::Load(_) => "region-load",
        RegionMessage::GetShardHomeWithAttributes { .. } => "region-get-shard-home-with-attributes",
        RegionMessage::RegisterWithCapacity { .. } => "region-register-with-capacity",
    }
}

variants! {
    /// The fixture name of the node's message.
    fn node_variant(NodeMessage) -> NODE_VARIANTS {
        NodeMessage::Welcome { .. } => "node-welcome",
        NodeMessage::Refused { .. } => "node-refused",
        NodeMessage::Registered { .. } => "node-registered",
        NodeMessage::RegisterRefused { .. } => "node-register-refused",
        NodeMessage::HeartbeatAck { .. } => "node-heartbeat-ack",
        NodeMessage::NotRegistered => "node-not-registered",
        NodeMessage::ShardHome { .. } => "node-shard-home",
        NodeMessage::ShardRefused { .. } => "node-shard-refused",
        NodeMessage::BeginHandOff { .. } => "node-begin-hand-off",
        NodeMessage::HandOff { .. } => "node-hand-off",
        NodeMessage::PlacementChanged { .. } => "node-placement-changed",
        NodeMessage::LeaveDone => "node-leave-done",
        NodeMessage::ShuttingDown => "node-shutting-down",
        NodeMessage::Redirect { .. } => "node-redirect",
        NodeMessage::ShardHomeEpoch { .. } => "node-shard-home-epoch",
        NodeMessage::RegionRemoved { .. } => "node-region-removed",
    }
}

variants! {
    /// The fixture name of a frame of the inter-region wire.
    fn peer_variant(PeerMessage) -> PEER_VARIANTS {
        PeerMessage::Welcome { .. } => "peer-welcome",
        PeerMessage::Refused { .. } => "peer-refused",
        PeerMessage::Deliver { .. } => "peer-deliver",
        PeerMessage::Ask { .. } => "peer-ask",
        PeerMessage::Reply { .. } => "peer-reply",
        PeerMessage::Ack { .. } => "peer-ack",
        PeerMessage::NotDelivered { .. } => "peer-not-delivered",
        PeerMessage::AskFailed { .. } => "peer-ask-failed",
    }
}

/// The first frame of a session; sent on its own, never inside an enum.
pub const HELLO: &str = "hello";

/// The first frame of an inter-region connection; sent on its own.
pub const PEER_HELLO: &str = "peer-hello";

/// One frame of the protocol: what a fixture holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A region's first frame.
    Hello(Hello),
    /// A region's later frames.
    Region(RegionMessage),
    /// The node's frames.
    Node(NodeMessage),
    /// An inter-region connection's first frame.
    PeerHello(PeerHello),
    /// The inter-region frames after it.
    Peer(PeerMessage),
}

impl Frame {
    /// The name of the frame's variant.
    pub fn variant(&self) -> &'static str {
        match self {
            Frame::Hello(_) => HELLO,
            Frame::Region(message) => region_variant(message),
            Frame::Node(message) => node_variant(message),
            Frame::PeerHello(_) => PEER_HELLO,
            Frame::Peer(message) => peer_variant(message),
        }
    }

    /// The frame's bytes, as `protocol::encode` writes them.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        match self {
            Frame::Hello(hello) => protocol::encode(hello),
            Frame::Region(message) => protocol::encode(message),
            Frame::Node(message) => protocol::encode(message),
            Frame::PeerHello(hello) => protocol::encode(hello),
            Frame::Peer(message) => protocol::encode(message),
        }
    }

    /// Reads `bytes` with `protocol::decode` as a frame of this one's kind.
    pub fn decode_like(&self, bytes: &[u8]) -> Result<Frame, FrameError> {
        match self {
            Frame::Hello(_) => protocol::decode(bytes).map(Frame::Hello),
            Frame::Region(_) => protocol::decode(bytes).map(Frame::Region),
            Frame::Node(_) => protocol::decode(bytes).map(Frame::Node),
            Frame::PeerHello(_) => protocol::decode(bytes).map(Frame::PeerHello),
            Frame::Peer(_) => protocol::decode(bytes).map(Frame::Peer),
        }
    }
}

/// A golden value and the name of its fixture.
pub struct Sample {
    /// Tells several samples of one variant apart (`None`: the variant's
    /// main sample).
    pub form: Option<&'static str>,
    /// The value.
    pub frame: Frame,
}

impl Sample {
    /// The fixture's file name under `contracts/wire/`.
    pub fn file(&self) -> String {
        match self.form {
            None => format!("{}.hex", self.frame.variant()),
            Some(form) => format!("{}-{form}.hex", self.frame.variant()),
        }
    }
}

fn one(frame: Frame) -> Sample {
    Sample { form: None, frame }
}

fn form(form: &'static str, frame: Frame) -> Sample {
    Sample { form: Some(form), frame }
}

const SHARD: &str = "tenant-7/order-42";
const INCARNATION: u64 = 1_700_000_000_000;

/// Every golden frame.
pub fn samples() -> Vec<Sample> {
    let region = |message| Frame::Region(message);
    let node = |message| Frame::Node(message);
    vec![
        // The protocol number is written out: the `Hello` layout never
        // changes, whatever version a later crate speaks.
        one(Frame::Hello(Hello { protocol: 1, entity_type: "cart.v2".into() })),
        one(region(RegionMessage::Register(Register {
            address: "10.0.0.1:2552".into(),
            incarnation: INCARNATION,
            roles: vec!["frontend".into(), "backend".into()],
            app_version: "1.4.0".into(),
            labels: BTreeMap::from([("dc".into(), "fra1".into()), ("zone".into(), "eu-central-1a".into())]),
            proxy_only: true,
            sequence: 3,
        }))),
        one(region(RegionMessage::RegisterWithCapacity {
            register: Register {
                address: "10.0.0.2:2552".into(),
                incarnation: INCARNATION,
                roles: vec![],
                app_version: "1.4.0".into(),
                labels: BTreeMap::from([("zone".into(), "eu-central-1b".into())]),
                proxy_only: false,
                sequence: 4,
            },
            capacity: RegionCapacity::new([("load", 800.5), ("memory-mb", 4096.0)]).unwrap(),
        })),
        one(region(RegionMessage::Heartbeat {
            sequence: 12_345,
            metrics: BTreeMap::from([
                ("cpu".into(), 0.75),
                ("mem-used-ratio".into(), 0.42),
                ("sessions".into(), 1280.0),
            ]),
        })),
        one(region(RegionMessage::GetShardHome { shard: SHARD.into() })),
        one(region(RegionMessage::GetShardHomeWithAttributes {
            shard: SHARD.into(),
            attributes: ShardAttributes::new([("tenant", "acme"), ("tier", "gold")]).unwrap(),
        })),
        one(region(RegionMessage::BeginHandOffAck { shard: SHARD.into() })),
        one(region(RegionMessage::ShardStopped { shard: SHARD.into() })),
        one(region(RegionMessage::Leave)),
        one(region(RegionMessage::Drain { draining: true })),
        form("false", region(RegionMessage::Drain { draining: false })),
        one(region(RegionMessage::Load(LoadReport {
            window_ms: 1_000,
            shards: vec![
                ShardLoad { shard: SHARD.into(), load: 1250.5 },
                ShardLoad { shard: "tenant-9/order-7".into(), load: 310.25 },
            ],
            rest: 42.75,
        }))),
        one(node(NodeMessage::Welcome { protocol: 1 })),
        one(node(NodeMessage::Refused {
            reason: "protocol version 2 is not supported; this node speaks version 1".into(),
        })),
        one(node(NodeMessage::Registered {
            incarnation: INCARNATION,
            sequence: 3,
            lease_ms: 10_000,
            heartbeat_interval_ms: 1_000,
        })),
        one(node(NodeMessage::RegisterRefused {
            reason: "incarnation 1699999999999 of 10.0.0.1:2552 is older than the registered 1700000000000".into(),
        })),
        one(node(NodeMessage::HeartbeatAck { incarnation: INCARNATION, sequence: 12_345, lease_ms: 10_000 })),
        one(node(NodeMessage::NotRegistered)),
        one(node(NodeMessage::ShardHome { shard: SHARD.into(), home: "10.0.0.2:2552".into() })),
        one(node(NodeMessage::ShardRefused {
            shard: SHARD.into(),
            reason: "the type holds 1000000 shards, its limit".into(),
        })),
        one(node(NodeMessage::BeginHandOff { shard: SHARD.into() })),
        one(node(NodeMessage::HandOff { shard: SHARD.into() })),
        one(node(NodeMessage::PlacementChanged { shard: SHARD.into(), target: Some("10.0.0.3:2552".into()) })),
        form("removed", node(NodeMessage::PlacementChanged { shard: SHARD.into(), target: None })),
        one(node(NodeMessage::LeaveDone)),
        one(node(NodeMessage::ShuttingDown)),
        one(node(NodeMessage::Redirect { leader: "https://node-2.shardalloc.internal:7878".into() })),
        one(node(NodeMessage::ShardHomeEpoch { shard: SHARD.into(), home: "10.0.0.2:2552".into(), epoch: 300 })),
        one(node(NodeMessage::RegionRemoved { address: "10.0.0.2:2552".into() })),
        // The inter-region wire (its own version, written out as above).
        one(Frame::PeerHello(PeerHello {
            protocol: 1,
            entity_type: "cart.v2".into(),
            from: "10.0.0.1:2552".into(),
            incarnation: INCARNATION,
        })),
        one(Frame::Peer(PeerMessage::Welcome {
            protocol: 1,
            address: "10.0.0.2:2552".into(),
            incarnation: INCARNATION,
        })),
        one(Frame::Peer(PeerMessage::Refused { reason: "the region serves cart.v2, not cart.v1".into() })),
        one(Frame::Peer(PeerMessage::Deliver { seq: 300, shard: SHARD.into(), payload: br#"{"add":1}"#.to_vec() })),
        form("empty", Frame::Peer(PeerMessage::Deliver { seq: 1, shard: SHARD.into(), payload: Vec::new() })),
        one(Frame::Peer(PeerMessage::Ask {
            seq: 301,
            shard: SHARD.into(),
            payload: br#"{"get":"total"}"#.to_vec(),
            timeout_ms: 5_000,
        })),
        one(Frame::Peer(PeerMessage::Reply { seq: 301, payload: br#"{"total":42}"#.to_vec() })),
        one(Frame::Peer(PeerMessage::Ack { through: 301 })),
        one(Frame::Peer(PeerMessage::NotDelivered {
            seq: 300,
            reason: "the region's buffers are full (100000 messages over all shards)".into(),
        })),
        one(Frame::Peer(PeerMessage::AskFailed { seq: 301, reason: "the shard stopped before it answered".into() })),
    ]
}
