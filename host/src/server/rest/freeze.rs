//! Freezes: a type's (`/v1/cluster/shards/{type}/freeze`) and the
//! cluster's (`/v1/cluster/freeze`). While a type is frozen its strategy's
//! rebalance does not run; see `coordinator/freeze.rs` for what still moves.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use shardalloc_proto::api::{FreezeRequest, FreezeState};

use crate::coordinator::MAX_FREEZE_MS;
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params};
use crate::server::driver::freezes::{FreezeChange, FreezeEnd};
use crate::server::driver::request::AdminRequest;
use crate::server::openapi::{BadRequest, Conflict, Internal, TooLarge, Unauthorized, Unavailable, UnknownType};
use crate::server::state::AppState;

/// Why a freeze is lifted.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LiftQuery {
    /// Why (kept in the history and the events; at most 1 KiB).
    #[serde(default)]
    pub reason: Option<String>,
}

/// The order a freeze request gives: exactly one of `forSeconds` and `until`.
fn freeze_change(request: FreezeRequest) -> Result<FreezeChange, ApiError> {
    let invalid = |message: &str| ApiError::bad_request(ErrorCode::InvalidFreeze, message);
    let ends = match (request.for_seconds, request.until) {
        (Some(_), Some(_)) => return Err(invalid("give forSeconds or until, not both")),
        (None, None) => {
            return Err(invalid("a freeze needs an end: forSeconds, or until (milliseconds since the Unix epoch)"));
        }
        (Some(0), None) => return Err(invalid("forSeconds must be positive")),
        (Some(seconds), None) if seconds > MAX_FREEZE_MS / 1000 => {
            return Err(invalid(&format!(
                "forSeconds is {seconds}; a freeze lasts at most {} s (30 days)",
                MAX_FREEZE_MS / 1000
            )));
        }
        (Some(seconds), None) => FreezeEnd::After(seconds * 1000),
        (None, Some(until)) => FreezeEnd::At(until),
    };
    Ok(FreezeChange::Freeze { ends, reason: request.reason, strict: request.strict })
}

fn thaw(query: Result<Query<LiftQuery>, QueryRejection>) -> Result<FreezeChange, ApiError> {
    let Query(LiftQuery { reason }) =
        query.map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
    let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| "lifted by an operator".to_owned());
    Ok(FreezeChange::Thaw { reason })
}

async fn ask(
    state: AppState,
    name: Option<String>,
    change: Option<FreezeChange>,
) -> Result<Json<FreezeState>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::Freeze { name, change, reply }).await??))
}

/// A type's freezes
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/freeze", operation_id = "getFreeze", tag = "freeze",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "The freezes in force (the type's own, the cluster's, the maintenance mode's) and the last 20 freezes, lifts and expiries.", body = FreezeState),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn get(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<FreezeState>, ApiError> {
    ask(state, Some(name), None).await
}

/// Freeze a type
///
/// While frozen the strategy's rebalance does not run. New shards still get
/// a home and shards of lost regions are still re-homed; operators'
/// placements, `rebalance-now` and drains still move shards unless
/// `strict`. Replaces the type's own freeze. Ends by itself after
/// `forSeconds`, or at `until`.
#[utoipa::path(
    put, path = "/v1/cluster/shards/{type}/freeze", operation_id = "freezeType", tag = "freeze",
    params(("type" = String, Path, description = "The entity type.")),
    request_body = FreezeRequest,
    responses(
        (status = 200, description = "Frozen, persisted; the type's freezes.", body = FreezeState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn freeze(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<FreezeRequest>,
) -> Result<Json<FreezeState>, ApiError> {
    let change = freeze_change(request)?;
    ask(state, Some(name), Some(change)).await
}

/// Lift a type's freeze
///
/// Lifts the type's own freeze and the maintenance mode's (which then waits
/// for the lost regions to fall under its lift thresholds before it may
/// freeze again). A cluster-wide freeze stays: lift it at `/v1/cluster/freeze`.
#[utoipa::path(
    delete, path = "/v1/cluster/shards/{type}/freeze", operation_id = "liftFreeze", tag = "freeze",
    params(("type" = String, Path, description = "The entity type."), LiftQuery),
    responses(
        (status = 200, description = "Lifted (nothing to lift is no error), persisted; the type's freezes.", body = FreezeState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn lift(
    State(state): State<AppState>,
    Params(name): Params<String>,
    query: Result<Query<LiftQuery>, QueryRejection>,
) -> Result<Json<FreezeState>, ApiError> {
    let change = thaw(query)?;
    ask(state, Some(name), Some(change)).await
}

/// The cluster-wide freeze
#[utoipa::path(
    get, path = "/v1/cluster/freeze", operation_id = "getClusterFreeze", tag = "freeze",
    responses(
        (status = 200, description = "The cluster-wide freeze in force, if any, and its last 20 freezes, lifts and expiries.", body = FreezeState),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn get_cluster(State(state): State<AppState>) -> Result<Json<FreezeState>, ApiError> {
    ask(state, None, None).await
}

/// Freeze every type
///
/// The same freeze in every type, and in every type created while it is
/// in force; see `PUT /v1/cluster/shards/{type}/freeze`.
#[utoipa::path(
    put, path = "/v1/cluster/freeze", operation_id = "freezeCluster", tag = "freeze",
    request_body = FreezeRequest,
    responses(
        (status = 200, description = "Every type frozen, persisted; the cluster's freeze.", body = FreezeState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 409, description = "The node has no entity type (`no-types`).", body = shardalloc_proto::api::ErrorBody),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn freeze_cluster(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<FreezeRequest>,
) -> Result<Json<FreezeState>, ApiError> {
    let change = freeze_change(request)?;
    ask(state, None, Some(change)).await
}

/// Lift the cluster-wide freeze
#[utoipa::path(
    delete, path = "/v1/cluster/freeze", operation_id = "liftClusterFreeze", tag = "freeze", params(LiftQuery),
    responses(
        (status = 200, description = "Lifted in every type, persisted; the cluster's freeze.", body = FreezeState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn lift_cluster(
    State(state): State<AppState>,
    query: Result<Query<LiftQuery>, QueryRejection>,
) -> Result<Json<FreezeState>, ApiError> {
    let change = thaw(query)?;
    ask(state, None, Some(change)).await
}
