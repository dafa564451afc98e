//! Entity types: the list, a type's state and snapshot (built from the
//! store off the driver thread), deletion, its signal, and where one of
//! its shards is and why.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde_json::Value;
use shardalloc_client::api::{
    HandOff, HomeReason, Placement, RegionState, RegionStatus, ShardId, ShardState, TypeState, Types,
};
use shardalloc_guest::Snapshot;

use super::paging::{PageQuery, Paging, split};
use super::{blocking, shard_id};
use crate::coordinator::{RegionRecord, Reply, complete_snapshot};
use crate::server::AppState;
use crate::server::api_error::ApiError;
use crate::server::body::{JsonBody, Params};
use crate::server::driver::request::{AdminRequest, Operation, Refusal, TypeLive};
use crate::server::openapi::{
    BadRequest, Conflict, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType,
};
use crate::store::LoadedType;
use crate::strategy::external::AllocationReason;

/// List entity types
#[utoipa::path(
    get, path = "/v1/cluster/shards", operation_id = "listTypes", tag = "types", params(PageQuery),
    responses(
        (status = 200, description = "A page of the entity types in brief, by name.", body = Types),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(State(state): State<AppState>, Paging(page): Paging) -> Result<Json<Types>, ApiError> {
    let limit = page.limit;
    let types = state.driver.ask(|reply| AdminRequest::Types { page, reply }).await?;
    let (types, next) = split(types, limit, |t| &t.name);
    Ok(Json(Types { types, next }))
}

/// What the live coordinator knows of a type, and its state as the store
/// holds it, read off the driver thread.
pub(crate) async fn read_type(state: &AppState, name: String) -> Result<(TypeLive, LoadedType), ApiError> {
    let type_name = name.clone();
    let live = state.driver.ask(|reply| AdminRequest::TypeLive { name: type_name, reply }).await??;
    let store = state.store.clone();
    let stored = blocking(move || store.load_type(&name).map(|t| t.ok_or(name)))
        .await?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string()))?
        .map_err(|name| ApiError::from(Refusal::UnknownType(name)))?;
    Ok((live, stored))
}

/// An entity type's state
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}", operation_id = "getType", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "Regions with their shards, hand-offs in flight, placements and the active strategy.", body = TypeState),
        (status = 401, response = Unauthorized),
        (status = 429, description = "Too many reads of a whole type at once (`reads-busy`): retry after `Retry-After`.", body = shardalloc_client::api::ErrorBody),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn get(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<TypeState>, ApiError> {
    let _read = state.reads.start(&name)?;
    let (live, stored) = read_type(&state, name.clone()).await?;
    let durable = stored.durable;
    let mut records: Vec<&RegionRecord> = durable.regions.values().collect();
    records.sort_by_key(|r| r.join_order);
    let regions = records
        .into_iter()
        .map(|r| RegionState {
            address: r.address.clone(),
            incarnation: r.incarnation,
            status: live.statuses.get(&r.address).copied().unwrap_or(RegionStatus::Up),
            draining: r.draining,
            proxy_only: r.proxy_only,
            labels: r.labels.clone(),
            shards: r.shards.clone(),
        })
        .collect();
    let hand_offs =
        durable.handoffs.iter().map(|(shard, from)| HandOff { shard_id: shard.clone(), from: from.clone() }).collect();
    let placements =
        durable.live_placements().map(|(s, t)| Placement { shard_id: ShardId(s.clone()), target: t.clone() }).collect();
    let not_by_strategy = durable
        .homes
        .iter()
        .filter_map(|(shard, home)| match &*home.reason {
            AllocationReason::Strategy { .. } => None,
            AllocationReason::Placement => Some((shard.clone(), HomeReason::Placement)),
            AllocationReason::Fallback(_) => Some((shard.clone(), HomeReason::Fallback)),
        })
        .collect();
    Ok(Json(TypeState { name, regions, hand_offs, placements, not_by_strategy, strategy: live.strategy }))
}

/// A type's state as a strategy snapshot, built off the driver thread.
pub(crate) async fn snapshot_of(state: &AppState, name: String) -> Result<Snapshot, ApiError> {
    let (live, stored) = read_type(state, name).await?;
    blocking(move || complete_snapshot(live.regions, &stored.durable)).await
}

/// The type's state as a strategy snapshot
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/snapshot", operation_id = "getSnapshot", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "The snapshot `shardalloc strategy eval --snapshot FILE` reads (snake_case field names; see docs/strategies.md).", body = Snapshot),
        (status = 401, response = Unauthorized),
        (status = 429, description = "Too many reads of a whole type at once (`reads-busy`): retry after `Retry-After`.", body = shardalloc_client::api::ErrorBody),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn snapshot(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<Snapshot>, ApiError> {
    let _read = state.reads.start(&name)?;
    Ok(Json(snapshot_of(&state, name).await?))
}

/// Whether to let a type's regions leave before deleting it.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Let the type's regions leave first (their shards stop through the
    /// full hand-off) instead of refusing while it has regions.
    #[serde(default)]
    pub force: bool,
}

/// Delete an entity type
///
/// Removes the type and all its state (regions, homes, placements, signal,
/// strategy history). 409 `type-has-regions` while regions are registered,
/// naming them; with `?force=true` they leave first — each shard stops
/// through the full hand-off — and the answer comes once they are gone. A
/// type declared with `--type` is declared again at the next start.
#[utoipa::path(
    delete, path = "/v1/cluster/shards/{type}", operation_id = "deleteType", tag = "types",
    params(("type" = String, Path, description = "The entity type."), DeleteQuery),
    responses(
        (status = 204, description = "Deleted, with all its state."),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    Params(name): Params<String>,
    query: Result<Query<DeleteQuery>, QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(DeleteQuery { force }) =
        query.map_err(|rejection| ApiError::bad_request("invalid-query", rejection.body_text()))?;
    state.driver.ask(|reply| AdminRequest::DeleteType { name, force, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
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
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await??.reply {
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
