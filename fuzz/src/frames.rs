//! Postcard frames both ways: whatever a peer sends must decode to a
//! message or an error, and a decoded message must encode to a frame that
//! decodes to the same message. "The same" is compared by encoding: a
//! metric may be NaN, which equals nothing, itself included (the fuzzer's
//! first find; the coordinator drops non-finite metrics).

use shardalloc_client::protocol::{Hello, NodeMessage, RegionMessage, decode, encode};

fn round_trip<T>(frame: &[u8])
where
    T: serde::Serialize + for<'a> serde::Deserialize<'a> + std::fmt::Debug,
{
    if let Ok(message) = decode::<T>(frame) {
        let again = encode(&message).expect("a decoded message encodes");
        let back: T = decode(&again).expect("an encoded message decodes");
        let twice = encode(&back).expect("a decoded message encodes");
        assert_eq!(twice, again, "a message changed through its own encoding: {message:?} became {back:?}");
    }
}

/// A frame a region sends the node: the handshake, then region messages.
pub fn region_frames(frame: &[u8]) {
    round_trip::<Hello>(frame);
    round_trip::<RegionMessage>(frame);
}

/// A frame the node sends a region.
pub fn node_frames(frame: &[u8]) {
    round_trip::<NodeMessage>(frame);
}
