//! [`ApiError`]: every REST error, answered as
//! `{"error":{"code":"…","message":"…"}}` with the status that fits.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shardalloc_client::api::{ErrorBody, ErrorDetail};

use super::driver::Unavailable;
use super::driver::request::Refusal;
use crate::coordinator::PlacementError;

/// The `Retry-After` of every 429 (busy: dry runs, event streams), in seconds.
pub const RETRY_AFTER_BUSY_S: &str = "5";

/// A REST error: the status, a stable code and a message naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code.
    pub code: &'static str,
    /// A sentence for the operator.
    pub message: String,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    /// 400: the request is malformed.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404: the named thing does not exist.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 409: the request conflicts with the state.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 422: well-formed, but it cannot be applied.
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 401: the bearer token is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 404 for an entity type.
    pub fn unknown_type(name: &str) -> Self {
        Self::not_found("unknown-type", format!("there is no entity type named {name:?}"))
    }
}

impl From<Unavailable> for ApiError {
    fn from(error: Unavailable) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error.to_string())
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        let message = refusal.to_string();
        match refusal {
            Refusal::UnknownType(_) => ApiError::not_found("unknown-type", message),
            Refusal::UnknownRegion(_) => ApiError::not_found("unknown-region", message),
            Refusal::TypeHasRegions { .. } => ApiError::conflict("type-has-regions", message),
            Refusal::TypeBeingDeleted(_) => ApiError::conflict("type-being-deleted", message),
            Refusal::UnknownShard(_) => ApiError::not_found("unknown-shard", message),
            Refusal::NoPlacement { .. } => ApiError::not_found("no-placement", message),
            Refusal::Placement(PlacementError::TooMany { .. }) => ApiError::conflict("too-many-placements", message),
            Refusal::Placement(_) => ApiError::bad_request("invalid-placement", message),
            Refusal::Signal(_) => ApiError::bad_request("invalid-signal", message),
            Refusal::UnknownComponent(_) => ApiError::not_found("unknown-strategy", message),
            Refusal::Builtin(_) => ApiError::conflict("builtin", message),
            Refusal::StrategyInUse { .. } => ApiError::conflict("strategy-in-use", message),
            Refusal::StrategyRefused(_) => ApiError::unprocessable("strategy-refused", message),
            Refusal::NoPreviousStrategy => ApiError::conflict("no-previous-strategy", message),
            Refusal::WritesBusy { .. } => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "writes-busy", message),
            Refusal::Unexpected(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // 503 tells the caller to retry (not ready, shutting down, busy):
        // the node's own state, logged where it changes, not per call.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::debug!(status = %self.status, code = self.code, message = %self.message, "request refused");
        } else if self.status.is_server_error() {
            tracing::error!(status = %self.status, code = self.code, message = %self.message, "request failed");
        } else {
            tracing::info!(status = %self.status, code = self.code, message = %self.message, "request refused");
        }
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } };
        let mut response = (self.status, Json(body)).into_response();
        // A refusal for being busy says when to come back.
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_BUSY_S));
        }
        // The rest of a body too large or too slow is not read: end the connection.
        if matches!(self.status, StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT) {
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
