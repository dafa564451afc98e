//! [`AppState`], what the HTTP handlers share, and [`Security`], who may
//! call what. A module of its own, so the server's parts import it from a
//! sibling, never from the module above them.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::driver::DriverHandle;
use super::metrics::Metrics;
use super::{conn, dry_runs, events, guard, leadership, reads, uploads};
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
