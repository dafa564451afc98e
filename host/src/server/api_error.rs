//! [`ApiError`]: every REST error, answered as
//! `{"error":{"code":"…","message":"…"}}` with the status that fits. The
//! code is always an [`ErrorCode`]; the catch-all is [`ApiError::internal`].

use std::fmt;
use std::panic::Location;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
pub use shardalloc_proto::api::ErrorCode;
use shardalloc_proto::api::{ErrorBody, ErrorDetail};

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
    pub code: ErrorCode,
    /// A sentence for the operator.
    pub message: String,
}

impl ApiError {
    /// A new error.
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }

    /// 400: the request is malformed.
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404: the named thing does not exist.
    pub fn not_found(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 409: the request conflicts with the state.
    pub fn conflict(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 422: well-formed, but it cannot be applied.
    pub fn unprocessable(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 429: too many of these at once; the answer says when to come back
    /// (`Retry-After`).
    pub fn busy(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, code, message)
    }

    /// 503: not now (shutting down, no leader, not ready); retry.
    pub fn unavailable(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    /// 401: the bearer token is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    /// 404 for an entity type.
    pub fn unknown_type(name: &str) -> Self {
        Self::not_found(ErrorCode::UnknownType, format!("there is no entity type named {name:?}"))
    }

    /// 500 `store`: the store failed to read or write.
    pub fn store(error: impl fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Store, error.to_string())
    }

    /// 500 `internal`, the catch-all, the only place it is built:
    /// something the node did not expect (a coordinator reply a handler
    /// does not expect, a thread that panicked or could not start). Logged
    /// here at error level with the caller's place in the code (and not
    /// again when answered); the message carries the detail too, for the
    /// operator who reports it.
    #[track_caller]
    pub fn internal(detail: impl fmt::Display) -> Self {
        let (status, code, at) = (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal, Location::caller());
        let message = detail.to_string();
        tracing::error!(%status, %code, %at, %message, "request failed");
        Self::new(status, code, message)
    }
}

impl From<Unavailable> for ApiError {
    fn from(error: Unavailable) -> Self {
        ApiError::unavailable(ErrorCode::Unavailable, error.to_string())
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        use ErrorCode as C;
        let message = refusal.to_string();
        match refusal {
            Refusal::UnknownType(_) => ApiError::not_found(C::UnknownType, message),
            Refusal::UnknownRegion(_) => ApiError::not_found(C::UnknownRegion, message),
            Refusal::TypeHasRegions { .. } => ApiError::conflict(C::TypeHasRegions, message),
            Refusal::TypeBeingDeleted(_) => ApiError::conflict(C::TypeBeingDeleted, message),
            Refusal::UnknownShard(_) => ApiError::not_found(C::UnknownShard, message),
            Refusal::NoPlacement { .. } => ApiError::not_found(C::NoPlacement, message),
            Refusal::Placement(PlacementError::TooMany { .. }) => ApiError::conflict(C::TooManyPlacements, message),
            Refusal::Placement(_) => ApiError::bad_request(C::InvalidPlacement, message),
            Refusal::Signal(_) => ApiError::bad_request(C::InvalidSignal, message),
            Refusal::Freeze(_) => ApiError::bad_request(C::InvalidFreeze, message),
            Refusal::Attributes(_) => ApiError::bad_request(C::InvalidAttributes, message),
            Refusal::NoTypes => ApiError::conflict(C::NoTypes, message),
            Refusal::UnknownComponent(_) => ApiError::not_found(C::UnknownStrategy, message),
            Refusal::Builtin(_) => ApiError::conflict(C::Builtin, message),
            Refusal::StrategyInUse { .. } => ApiError::conflict(C::StrategyInUse, message),
            Refusal::StrategyRefused(_) => ApiError::unprocessable(C::StrategyRefused, message),
            Refusal::NoPreviousStrategy => ApiError::conflict(C::NoPreviousStrategy, message),
            Refusal::WritesBusy { .. } => ApiError::busy(C::WritesBusy, message),
            Refusal::Unexpected(_) => ApiError::internal(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = (self.status, self.code, &self.message);
        match status {
            // Logged where it was built, with its place in the code.
            _ if code == ErrorCode::Internal => {}
            // 503 tells the caller to retry (not ready, shutting down, busy):
            // the node's own state, logged where it changes, not per call.
            StatusCode::SERVICE_UNAVAILABLE => tracing::debug!(%status, %code, %message, "request refused"),
            _ if status.is_server_error() => tracing::error!(%status, %code, %message, "request failed"),
            _ => tracing::info!(%status, %code, %message, "request refused"),
        }
        let body = ErrorBody { error: ErrorDetail::new(self.code, self.message) };
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
