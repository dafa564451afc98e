//! # The decision event stream
//!
//! Every decision the node makes, told as it is made, after its turn is
//! persisted: `GET /v1/events` (Server-Sent Events).
//!
//! - `decision.rs`: what becomes an event — the mapping from the
//!   coordinators' observations and the strategy slots' activation records
//!   to [`DecisionEvent`]s (pure functions);
//! - `hub.rs`: [`EventHub`], the numbered, bounded backlog (the last
//!   [`BACKLOG`] events of this leader's term) that the driver publishes
//!   to after each commit and every stream reads at its own pace, so a
//!   slow client is told what it missed instead of slowing the node; it
//!   also bounds the streams: how many are open, and how many replay at
//!   once ([`MAX_REPLAYS`] streams starting more than [`REPLAY_FREE`]
//!   events behind, each for at most [`REPLAY_DEADLINE`]);
//! - `subscription.rs`: the reading side, a stream's [`Subscription`]: its
//!   cursor into the backlog, many events' frames per lock, and its replay
//!   permit, given back at the newest event;
//! - `frame.rs`: the SSE bytes, each event's made once for all streams;
//! - `stream.rs`: the SSE handler: `?type=` filter, resume with
//!   `Last-Event-ID: <term>-<seq>`, many events per body chunk, a comment
//!   every [`KEEP_ALIVE`].
//!
//! On a follower the stream is the leader's, proxied by `forward.rs`.

pub mod decision;
mod frame;
mod hub;
mod stream;
mod subscription;

pub use self::hub::{BACKLOG, EventHub, MAX_REPLAYS, REPLAY_DEADLINE, REPLAY_FREE, Refused, Start};
pub use self::stream::{__path_events, CHUNK, GATHER, KEEP_ALIVE, LIVE, events};
pub use self::subscription::{Delivery, Subscription};
pub use shardalloc_proto::api::{ChangedBy, DecisionEvent, EventKind};
