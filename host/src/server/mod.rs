//! # The node's server
//!
//! The I/O shell around the coordinator: one process, one port.
//!
//! - `node.rs`: [`Node`]: opens the store, starts the engine and the driver,
//!   and serves on a listener the caller gives, until a shutdown future the
//!   caller gives completes (or the driver ends); `conn.rs` serves each
//!   connection with timeouts and the connection limits.
//! - `driver/`: the coordinator driver on its own thread, in parts
//!   ([`driver::catalog::TypeCatalog`], [`driver::sessions::Sessions`], the
//!   turn in [`driver::Driver::step`]), fed [`driver::Input`]s and typed
//!   [`driver::request::AdminRequest`]s through a [`driver::DriverHandle`].
//! - `router.rs`: [`router`]`(state)`, the whole HTTP API, and the OpenAPI
//!   document generated from the same registrations (`openapi.rs` holds
//!   its frame); tests drive the router in-process.
//! - `rest/`: the admin REST handlers, one file per area.
//! - `events/`: the decision event stream (`GET /v1/events`): the hub the
//!   driver publishes to after each commit, and the SSE handler.
//! - `ui/`: the dashboard at `/ui/`, plain HTML, CSS and ES modules embedded
//!   in the binary.
//! - `sessions.rs`: the region sessions' WebSocket tasks (the coordinator
//!   speaks the wire's own `Register` and `NodeMessage`: nothing to map).
//! - `metrics.rs`: Prometheus metrics with typed labels; `auth.rs`: bearer
//!   tokens; `guard.rs`: no cross-site writes (Origin, content types); `api_error.rs`: the one error type; `body.rs`: extractors;
//!   `tls.rs`: optional TLS on the port.
//! - `low_priority.rs`: work that yields to the driver and the sessions
//!   (snapshots, large bodies) on threads at the lowest priority;
//!   `reads.rs`: the limit on reads of a whole type.
//! - `state.rs`: [`AppState`], what the handlers share, and [`Security`].
//! - `uploads.rs`: the quota and collection of uploaded components;
//!   `compile.rs`: their compile budget (measured first, bounded, killable).

pub mod api_error;
pub mod auth;
pub mod body;
pub mod compile;
pub mod conn;
pub mod driver;
pub mod dry_runs;
pub mod events;
pub mod forward;
pub mod guard;
pub mod handshakes;
pub mod leadership;
pub mod load_pacing;
pub mod low_priority;
pub mod metrics;
mod node;
pub mod openapi;
pub mod reads;
pub mod rest;
mod router;
pub mod sessions;
pub mod state;
pub mod throttle;
pub mod tls;
pub mod ui;
pub mod uploads;

pub use self::conn::no_delay;
pub use self::node::{ClusterSettings, DEFAULT_LEADER_LEASE, Node, NodeError, NodeSettings};
pub use self::router::{api, document, router};
pub use self::state::{AppState, Security};

#[cfg(test)]
mod tests;
