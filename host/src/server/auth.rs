//! Bearer tokens: the admin token guards every path under `/v1` (except the
//! region WebSocket, which has its own region token); `/healthz`, `/livez`,
//! `/readyz` and `/metrics` need none. Compared in constant time.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::api_error::ApiError;
use super::conn::Trust;
use super::state::AppState;

/// True when the `Authorization` header is `Bearer <token>`.
pub fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(given) = value.strip_prefix("Bearer ") else { return false };
    given.as_bytes().ct_eq(token.as_bytes()).into()
}

/// True for the paths the admin token guards.
pub fn is_admin_path(path: &str) -> bool {
    path.starts_with("/v1/") && path != shardalloc_proto::protocol::CONNECT_PATH
}

/// Middleware: refuses admin calls without the admin token (when one is
/// set). An admin call that passes, or any call to a node without tokens,
/// trusts its connection ([`Trust`]).
pub async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let admin = is_admin_path(request.uri().path());
    match &state.security.admin_token {
        Some(token) if admin && !bearer_matches(request.headers(), token) => {
            return ApiError::unauthorized("an admin token is required: Authorization: Bearer <admin token>")
                .into_response();
        }
        Some(_) if admin => trust(&request),
        None if state.security.region_token.is_none() => trust(&request),
        _ => {}
    }
    next.run(request).await
}

/// The request's connection made an authorised request.
pub fn trust(request: &Request) {
    if let Some(trust) = request.extensions().get::<Trust>() {
        trust.grant();
    }
}
