//! Entity types: the list, a type's state and snapshot, its signal, and
//! where one of its shards is and why.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use shardalloc_client::api::{ShardId, ShardState, TypeState, Types};
use shardalloc_guest::Snapshot;

use super::shard_id;
use crate::coordinator::Reply;
use crate::server::AppState;
use crate::server::api_error::ApiError;
use crate::server::body::{JsonBody, Params};
use crate::server::driver::request::{AdminRequest, Operation, Refusal};
use crate::server::openapi::{BadRequest, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType};

/// List entity types
#[utoipa::path(
    get, path = "/v1/cluster/shards", operation_id = "listTypes", tag = "types",
    responses(
        (status = 200, description = "Every entity type in brief.", body = Types),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<Types>, ApiError> {
    let types = state.driver.ask(|reply| AdminRequest::Types { reply }).await?;
    Ok(Json(Types { types }))
}

/// An entity type's state
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}", operation_id = "getType", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "Regions with their shards, hand-offs in flight, placements and the active strategy.", body = TypeState),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn get(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<TypeState>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::TypeState { name, reply }).await??))
}

/// The type's state as a strategy snapshot
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/snapshot", operation_id = "getSnapshot", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "The snapshot `shardalloc strategy eval --snapshot FILE` reads (snake_case field names; see docs/strategies.md).", body = Snapshot),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn snapshot(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<Snapshot>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::Snapshot { name, reply }).await??))
}

/// Set the type's signal
///
/// Any JSON value, at most 1 MiB; `null` clears it. 400 `invalid-signal`
/// when it is too large, 400 `invalid-body` when it is not JSON.
#[utoipa::path(
    put, path = "/v1/cluster/shards/{type}/signal", operation_id = "setSignal", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = Value, description = "Any JSON.", example = json!({"shards": {"42": "eu"}})),
    responses(
        (status = 204, description = "Set (or cleared). Handed to the strategy with the next topology."),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn set_signal(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(value): JsonBody<Value>,
) -> Result<StatusCode, ApiError> {
    let signal = (!value.is_null()).then(|| value.to_string());
    let operation = Operation::SetSignal(signal);
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await?? {
        Reply::Done => Ok(StatusCode::NO_CONTENT),
        Reply::SignalRefused(message) => Err(Refusal::Signal(message).into()),
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}

/// Where a shard is and why
///
/// 404 `unknown-type`, or `unknown-shard` when the shard has no home, no
/// hand-off in flight and no placement.
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/shards/{shardId}", operation_id = "getShard", tag = "types",
    params(
        ("type" = String, Path, description = "The entity type."),
        ("shardId" = String, Path, description = "The shard id (percent-encode `/` as `%2F`)."),
    ),
    responses(
        (status = 200, description = "Its home, why it is there, since when, whether it is moving, and its placement.", body = ShardState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn shard(
    State(state): State<AppState>,
    Params((name, shard)): Params<(String, String)>,
) -> Result<Json<ShardState>, ApiError> {
    let shard = shard_id(&ShardId(shard), "shardId")?;
    Ok(Json(state.driver.ask(|reply| AdminRequest::Shard { name, shard, reply }).await??))
}
