//! `/healthz`, `/livez`, `/readyz` and `/metrics`: no token needed.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::driver::DriverHandle;
use crate::server::driver::progress::STALL_BOUND;
use crate::server::driver::request::AdminRequest;
use crate::server::leadership::Leadership;
use crate::server::state::AppState;

/// Liveness
///
/// Always 200 while the process answers HTTP. It does not consult the
/// coordinator; use `/readyz` for that. Needs no token.
#[utoipa::path(
    get, path = "/healthz", operation_id = "healthz", tag = "health", security(()),
    responses((status = 200, description = "The process serves HTTP. Body `ok` and a newline.", body = String, content_type = "text/plain")),
)]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Liveness of the coordinator
///
/// 200 while this node's coordinator driver thread makes progress: it
/// finishes a turn at least every 100 ms when idle, and `/livez` fails once
/// it has finished none for 30 s (stuck or dead). On a node in an etcd
/// cluster that does not lead (no driver here), 200 while its election
/// loop runs. Use it as the liveness probe. Needs no token.
#[utoipa::path(
    get, path = "/livez", operation_id = "livez", tag = "health", security(()),
    responses(
        (status = 200, description = "The driver thread finished a turn within the last 30 s (or, on a node that does not lead, the election runs). Body `live` and a newline.", body = String, content_type = "text/plain"),
        (status = 503, description = "The driver thread has finished no turn for over 30 s (`stalled`), or it has stopped on a node alone (`driver-stopped`), or this node's election has ended (`election-stopped`).", body = shardalloc_proto::api::ErrorBody),
    ),
)]
pub async fn livez(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    liveness(&state.driver, &state.leadership, Instant::now(), STALL_BOUND).map(|()| "live\n")
}

/// What `/livez` answers at `now`: the driver's heartbeat checked against
/// `bound` while a driver runs here; else, with etcd, whether the election
/// runs; a node alone without a running driver is not live.
pub fn liveness(driver: &DriverHandle, leadership: &Leadership, now: Instant, bound: Duration) -> Result<(), ApiError> {
    if let Some(progress) = driver.progress()
        && !driver.is_stopped()
    {
        return progress
            .check(now, bound)
            .map_err(|stalled| ApiError::unavailable(ErrorCode::Stalled, stalled.to_string()));
    }
    match (leadership.is_elected(), leadership.election_runs()) {
        (true, true) => Ok(()),
        (true, false) => {
            Err(ApiError::unavailable(ErrorCode::ElectionStopped, "this node's leader election has ended"))
        }
        (false, _) => Err(ApiError::unavailable(ErrorCode::DriverStopped, "the coordinator driver has stopped")),
    }
}

/// Readiness
///
/// Needs no token.
#[utoipa::path(
    get, path = "/readyz", operation_id = "readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Every declared entity type (`--type`, `[types.NAME]`) has at least `min-regions` registered regions (proxies not counted). Body `ready` and a newline. A node with no declared type is ready.", body = String, content_type = "text/plain"),
        (status = 503, description = "Some declared type has fewer than `min-regions` regions (`not-ready`; the message names the types), or the coordinator is unavailable (`unavailable`), or (with etcd) this node neither leads nor knows a leader (`no-leader`). A follower that knows the leader is ready.", body = shardalloc_proto::api::ErrorBody),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    if !state.leadership.leading() {
        return match state.leadership.role().leader_other_than(&state.leadership.me().name) {
            Some(_) => Ok("ready\n"),
            None => {
                let why = match &state.leadership.role().trouble {
                    Some(trouble) => format!("no leader is known right now: {trouble}"),
                    None => "no leader is known right now".to_owned(),
                };
                Err(ApiError::unavailable(ErrorCode::NoLeader, why))
            }
        };
    }
    match state.driver.ask(|reply| AdminRequest::Readiness { reply }).await? {
        Ok(()) => Ok("ready\n"),
        Err(message) => Err(ApiError::unavailable(ErrorCode::NotReady, message)),
    }
}

/// Prometheus metrics
///
/// Needs no token. Restrict access at your proxy if the metric labels (type
/// names, region addresses) are sensitive. See docs/operations.md for the
/// metric list.
#[utoipa::path(
    get, path = "/metrics", operation_id = "metrics", tag = "health", security(()),
    responses((status = 200, description = "OpenMetrics text exposition (`application/openmetrics-text; version=1.0.0; charset=utf-8`).", body = String, content_type = "application/openmetrics-text")),
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.metrics.render(),
    )
        .into_response()
}
