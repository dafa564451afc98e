//! The inter-region wire: the frames regions exchange directly, carrying
//! the application's messages to a shard's home and `ask` replies back
//! (`docs/protocol.md`, "The inter-region wire"). Versioned on its own
//! ([`PEER_PROTOCOL_VERSION`]), encoded like the region session (postcard,
//! one binary WebSocket message per frame, [`encode`](crate::protocol::encode)
//! and [`decode`](crate::protocol::decode)), frozen by the golden frames in
//! `contracts/wire/` (`peer-*.hex`) that the Rust, TypeScript and Python
//! codecs are tested against.
//!
//! A region listens on its own address at [`PEER_PATH`]. The dialling
//! region sends [`PeerHello`] first; the listener answers
//! [`PeerMessage::Welcome`] or [`PeerMessage::Refused`]. After that both
//! ends may send every other frame: a region reuses a connection the peer
//! opened to it before dialling one of its own, so a pair of regions needs
//! one connection.
//!
//! Each [`PeerMessage::Deliver`] and [`PeerMessage::Ask`] a side sends takes
//! the next `seq` of that side on that connection (from 1). The receiver
//! answers with cumulative [`PeerMessage::Ack`]s once it handed them to its
//! region, and with [`PeerMessage::NotDelivered`] for one it could not take;
//! the sender keeps what is unacknowledged (at most
//! [`MAX_UNACKED_BYTES`] per peer) and, when the connection fails, hands the
//! undelivered messages back to its region in order (which retries them),
//! and fails the unanswered asks by name.

use serde::{Deserialize, Serialize};

/// The version of the inter-region wire this crate speaks.
pub const PEER_PROTOCOL_VERSION: u32 = 1;

/// The path of the inter-region WebSocket on a region's address.
pub const PEER_PATH: &str = "/shardalloc/v1/peer";

/// Most bytes of `Deliver` and `Ask` payloads a region keeps unacknowledged
/// for one peer: past it, the transport refuses new messages for that peer
/// (the region keeps them and retries), which is the wire's back-pressure.
pub const MAX_UNACKED_BYTES: usize = 8 << 20;

/// The dialling region's first frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerHello {
    /// The inter-region wire version the dialler speaks.
    pub protocol: u32,
    /// The entity type both regions serve.
    pub entity_type: String,
    /// The dialler's address.
    pub from: String,
    /// The dialler's incarnation.
    pub incarnation: u64,
}

/// Every frame after [`PeerHello`], in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerMessage {
    /// The listener accepts the connection.
    Welcome {
        /// The version it speaks on this connection.
        protocol: u32,
        /// The listener's address.
        address: String,
        /// The listener's incarnation.
        incarnation: u64,
    },
    /// The listener refuses the connection (version, entity type, token);
    /// it closes next.
    Refused {
        /// Why.
        reason: String,
    },
    /// An application message for `shard`, to deliver there or route on.
    Deliver {
        /// The sender's number for it on this connection.
        seq: u64,
        /// The shard.
        shard: String,
        /// The application's message, in the application's encoding.
        payload: Vec<u8>,
    },
    /// A request for `shard` that wants one [`PeerMessage::Reply`].
    Ask {
        /// The sender's number for it on this connection.
        seq: u64,
        /// The shard.
        shard: String,
        /// The request, in the application's encoding.
        payload: Vec<u8>,
        /// How long the asker waits; the receiver may drop it after.
        timeout_ms: u64,
    },
    /// The answer to the [`PeerMessage::Ask`] numbered `seq`.
    Reply {
        /// The ask's number.
        seq: u64,
        /// The answer, in the application's encoding.
        payload: Vec<u8>,
    },
    /// Every `Deliver` and `Ask` up to `through` was handed to the region.
    Ack {
        /// The greatest number handed over.
        through: u64,
    },
    /// The `Deliver` numbered `seq` was not taken (the receiver's buffers
    /// are full, it is stopping): the sender hands it back to its region.
    NotDelivered {
        /// Its number.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// The `Ask` numbered `seq` will not be answered (the shard stopped,
    /// no home could be found, the handler failed).
    AskFailed {
        /// Its number.
        seq: u64,
        /// Why.
        reason: String,
    },
}

impl PeerMessage {
    /// The message's name, as `docs/protocol.md` lists it.
    pub fn name(&self) -> &'static str {
        match self {
            PeerMessage::Welcome { .. } => "Welcome",
            PeerMessage::Refused { .. } => "Refused",
            PeerMessage::Deliver { .. } => "Deliver",
            PeerMessage::Ask { .. } => "Ask",
            PeerMessage::Reply { .. } => "Reply",
            PeerMessage::Ack { .. } => "Ack",
            PeerMessage::NotDelivered { .. } => "NotDelivered",
            PeerMessage::AskFailed { .. } => "AskFailed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode, encode};

    #[test]
    fn a_payload_travels_as_its_length_and_its_bytes() {
        let message = PeerMessage::Deliver { seq: 1, shard: "s".into(), payload: vec![0xde, 0xad] };
        // Variant 2, seq 1, "s", 2 bytes.
        assert_eq!(encode(&message).unwrap(), [2, 1, 1, b's', 2, 0xde, 0xad]);
        assert_eq!(decode::<PeerMessage>(&[2, 1, 1, b's', 2, 0xde, 0xad]).unwrap(), message);
    }
}
