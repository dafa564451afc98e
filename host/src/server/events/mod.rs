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
//!   slow client is told what it missed instead of slowing the node;
//! - `stream.rs`: the SSE handler: `?type=` filter, resume with
//!   `Last-Event-ID: <term>-<seq>`, a comment every [`KEEP_ALIVE`].
//!
//! On a follower the stream is the leader's, proxied by `forward.rs`.

pub mod decision;
mod hub;
mod stream;

pub use self::hub::{BACKLOG, Delivery, EventHub, Start, Subscription};
pub use self::stream::{__path_events, KEEP_ALIVE, LIVE, events};
pub use shardalloc_client::api::{ChangedBy, DecisionEvent, EventKind};
