//! `/healthz`, `/readyz` and `/metrics`: no token needed.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::server::AppState;
use crate::server::api_error::ApiError;
use crate::server::driver::request::AdminRequest;

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

/// Readiness
///
/// Needs no token.
#[utoipa::path(
    get, path = "/readyz", operation_id = "readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Every declared entity type (`--type`, `[types.NAME]`) has at least `min-regions` registered regions (proxies not counted). Body `ready` and a newline. A node with no declared type is ready.", body = String, content_type = "text/plain"),
        (status = 503, description = "Some declared type has fewer than `min-regions` regions (`not-ready`; the message names the types), or the coordinator is unavailable (`unavailable`), or (with etcd) this node neither leads nor knows a leader (`no-leader`). A follower that knows the leader is ready.", body = shardalloc_client::api::ErrorBody),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    if !state.leadership.leading() {
        return match state.leadership.role().leader_other_than(&state.leadership.me().name) {
            Some(_) => Ok("ready\n"),
            None => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no-leader", "no leader is known right now")),
        };
    }
    match state.driver.ask(|reply| AdminRequest::Readiness { reply }).await? {
        Ok(()) => Ok("ready\n"),
        Err(message) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", message)),
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
