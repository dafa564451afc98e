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
//! - `sessions.rs`: the region sessions' WebSocket tasks; `wire.rs`: the one
//!   mapping between coordinator messages and wire messages.
//! - `metrics.rs`: Prometheus metrics with typed labels; `auth.rs`: bearer
//!   tokens; `guard.rs`: no cross-site writes (Origin, content types); `api_error.rs`: the one error type; `body.rs`: extractors;
//!   `tls.rs`: optional TLS on the port.
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
pub mod leadership;
pub mod metrics;
mod node;
pub mod openapi;
pub mod reads;
pub mod rest;
mod router;
pub mod sessions;
pub mod throttle;
pub mod tls;
pub mod ui;
pub mod uploads;
mod wire;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use self::conn::no_delay;
use self::driver::DriverHandle;
use self::metrics::Metrics;
pub use self::node::{ClusterSettings, DEFAULT_LEADER_LEASE, Node, NodeError, NodeSettings};
pub use self::router::{api, document, router};
use crate::engine::Engine;
use crate::engine::limits::Limits;
use crate::store::Store;

/// Who may call what.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// Required on every `/v1` admin call when set.
    pub admin_token: Option<String>,
    /// Required on region sessions when set.
    pub region_token: Option<String>,
    /// The web origins writes and WebSocket upgrades may come from.
    pub origins: guard::OwnOrigins,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The coordinator driver.
    pub driver: DriverHandle,
    /// The WebAssembly engine (compiles uploads off the driver thread).
    pub engine: Arc<Engine>,
    /// The store (component blobs are written and read off the driver thread).
    pub store: Arc<dyn Store>,
    /// Held while a component's blob is written and recorded, or its record
    /// removed and its blob deleted, so an upload and a delete of the same
    /// component never interleave.
    pub component_writes: Arc<tokio::sync::Mutex<()>>,
    /// Tokens.
    pub security: Arc<Security>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Sandbox limits for strategies.
    pub limits: Limits,
    /// Limits of every connection.
    pub connections: conn::ConnectionLimits,
    /// The dry runs under way.
    pub dry_runs: Arc<dry_runs::DryRuns>,
    /// The reads of a whole type under way (`reads.rs`).
    pub reads: Arc<reads::ExpensiveReads>,
    /// Cancelled when the node shuts down.
    pub shutdown: CancellationToken,
    /// Who leads, and who this node is.
    pub leadership: leadership::Leadership,
    /// The decision events this node's driver published (while it leads).
    pub events: Arc<events::EventHub>,
    /// The bounds of uploaded components: quota, collection, compile budget.
    pub uploads: Arc<uploads::Uploads>,
}

#[cfg(test)]
mod tests;
