//! Entity types: the list, a type's state (its regions and a page of its
//! shards) and snapshot (both built from the store off the driver thread),
//! deletion, its signal, and where one of its shards is and why.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use shardalloc_guest::Snapshot;
use shardalloc_proto::api::{HomeReason, ShardHome, ShardId, ShardLoads, ShardState, TypeState, Types};

use super::paging::{PageQuery, Paging, split};
use super::{blocking, shard_id};
use crate::coordinator::{Durable, Reply, complete_snapshot};
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params};
use crate::server::driver::request::Page;
use crate::server::driver::request::{AdminRequest, Operation, Refusal, TypeLive};
use crate::server::openapi::{
    BadRequest, Conflict, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType,
};
use crate::server::state::AppState;
use crate::strategy::churn::Paced;
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

/// An entity type's state, a page of its shards at a time
///
/// Every page carries the type's regions (in join order, each with its
/// `shardCount`), its hand-offs in flight (all of them: at most the type's
/// `max-handoffs-in-flight`, 100 by default) and its active strategy, all
/// from the live coordinator at a cost per region; and one page of its
/// shards with a home, by shard id, each with its region and why it is
/// there, read from the store (only the page) on a blocking thread. Nothing
/// here grows with the type's shards beyond the page, so these reads are
/// not counted among the reads of a whole type (`reads-busy`). Placements
/// are paged at `…/placements`; a whole type at once is `…/snapshot`.
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}", operation_id = "getType", tag = "types",
    params(("type" = String, Path, description = "The entity type."), PageQuery),
    responses(
        (status = 200, description = "Regions with their shard counts, hand-offs in flight, the active strategy, and a page of the shards with a home (their region and why), by shard id.", body = TypeState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    Params(name): Params<String>,
    Paging(page): Paging,
) -> Result<Json<TypeState>, ApiError> {
    let type_name = name.clone();
    let live = state.driver.ask(|reply| AdminRequest::TypeLive { name: type_name, reply }).await??;
    let store = state.store.clone();
    let (limit, fetch, type_name) = (page.limit, page.fetch(), name.clone());
    let found = blocking(move || store.homes(&type_name, page.after.as_deref(), fetch).map(|h| h.ok_or(type_name)))
        .await?
        .map_err(ApiError::store)?
        .map_err(|name| ApiError::from(Refusal::UnknownType(name)))?;
    let shards: Vec<ShardHome> = found
        .into_iter()
        .map(|(shard, home)| ShardHome {
            shard_id: shard,
            region: home.region.to_string(),
            reason: match &*home.reason {
                AllocationReason::Strategy { .. } => HomeReason::Strategy,
                AllocationReason::Placement => HomeReason::Placement,
                AllocationReason::Fallback(_) => HomeReason::Fallback,
            },
        })
        .collect();
    let (shards, next) = split(shards, limit, |s| &s.shard_id);
    Ok(Json(TypeState { name, regions: live.states, hand_offs: live.hand_offs, strategy: live.strategy, shards, next }))
}

/// The snapshot of type `name` and its churn limits over rounds from now,
/// with each shard's last move as the store holds it (for dry runs).
pub(crate) async fn snapshot_and_paced(state: &AppState, name: String) -> Result<(Snapshot, Paced), ApiError> {
    read_type(state, name, |live, durable| {
        let paced = with_moves(live.paced, durable);
        (complete_snapshot(live.regions, durable), paced)
    })
    .await
}

/// `paced` with each shard's last move as the store holds it, when the
/// type has churn limits.
fn with_moves(mut paced: Paced, durable: &Durable) -> Paced {
    if !paced.limits.is_off() {
        let moves = durable.loads.iter().filter_map(|(s, l)| l.moved_at.map(|at| (s.clone(), at)));
        paced.moved_at = moves.collect();
    }
    paced
}

/// What a plan of type `name` starts from: its snapshot, its churn limits
/// over rounds from now, its shards' loads (as of their last save) and its
/// active strategy.
pub(crate) async fn plan_inputs(
    state: &AppState,
    name: String,
) -> Result<(Snapshot, Paced, std::collections::BTreeMap<String, f64>, shardalloc_proto::api::ActivationInfo), ApiError>
{
    read_type(state, name, |live, durable| {
        let paced = with_moves(live.paced, durable);
        let loads = durable.loads.iter().filter(|(_, l)| l.load != 0.0).map(|(s, l)| (s.clone(), l.load)).collect();
        let strategy = live.strategy.clone();
        (complete_snapshot(live.regions, durable), paced, loads, strategy)
    })
    .await
}

/// The snapshot of type `name`, then `finish` applied to it.
async fn snapshot_then<T: Send + 'static>(
    state: &AppState,
    name: String,
    finish: impl FnOnce(Snapshot) -> T + Send + 'static,
) -> Result<T, ApiError> {
    read_type(state, name, |live, durable| finish(complete_snapshot(live.regions, durable))).await
}

/// Type `name`'s live part (from the driver, a cost per region) and its
/// stored state, then `finish` applied to both: the store read and `finish`
/// on an expensive read's thread at the lowest priority (`reads.rs`), off
/// the driver's.
async fn read_type<T: Send + 'static>(
    state: &AppState,
    name: String,
    finish: impl FnOnce(TypeLive, &Durable) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let type_name = name.clone();
    let live = state.driver.ask(|reply| AdminRequest::TypeLive { name: type_name, reply }).await??;
    let store = state.store.clone();
    crate::server::low_priority::run(move || {
        let stored = store
            .load_type(&name)
            .map_err(ApiError::store)?
            .ok_or_else(|| ApiError::from(Refusal::UnknownType(name)))?;
        Ok(finish(live, &stored.durable))
    })
    .await?
}

/// The type's state as a strategy snapshot
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/snapshot", operation_id = "getSnapshot", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "The snapshot `shardalloc strategy eval --snapshot FILE` reads (snake_case field names; see docs/strategies.md).", body = Snapshot),
        (status = 401, response = Unauthorized),
        (status = 429, description = "Too many reads of a whole type at once (`reads-busy`): retry after `Retry-After`.", body = shardalloc_proto::api::ErrorBody),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn snapshot(State(state): State<AppState>, Params(name): Params<String>) -> Result<Response, ApiError> {
    let read = state.reads.start(&name)?;
    // Serialised on the read's thread too: 34 MB of JSON at 1,000,000
    // placements would hold a tokio worker, and the sessions it serves. The
    // permit goes with the work, so a client that leaves frees no place
    // while its read still runs.
    let body = snapshot_then(&state, name, move |snapshot| {
        let _read = read;
        serde_json::to_vec(&snapshot)
    })
    .await?
    .map_err(|e| ApiError::internal(format!("the snapshot does not serialise: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
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
        query.map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
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

/// The order of a shard list.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ShardOrder {
    /// `load`: most loaded first (the default, and the only order today).
    pub sort: Option<String>,
}

/// A type's hottest shards
///
/// The shards with a load, most loaded first (ties by shard id, last
/// first), each with its home, its smoothed load and when it last moved;
/// paged like every list (`?limit=`, `?after=` the `next` of the page
/// before). The loads are the coordinator's current averages; a page costs
/// the shards it lists, not the type's.
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/shards", operation_id = "listShardsByLoad", tag = "types",
    params(("type" = String, Path, description = "The entity type."), ShardOrder, PageQuery),
    responses(
        (status = 200, description = "A page of the shards with a load, most loaded first.", body = ShardLoads),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn shards_by_load(
    State(state): State<AppState>,
    Params(name): Params<String>,
    order: Result<Query<ShardOrder>, QueryRejection>,
    Paging(page): Paging,
) -> Result<Json<ShardLoads>, ApiError> {
    let Query(order) =
        order.map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
    if let Some(sort) = order.sort.as_deref().filter(|sort| *sort != "load") {
        return Err(ApiError::bad_request(ErrorCode::InvalidQuery, format!("sort must be load, not {sort:?}")));
    }
    let after = match page.after.as_deref() {
        None => None,
        Some(key) => Some(load_cursor(key).ok_or_else(|| {
            ApiError::bad_request(ErrorCode::InvalidCursor, "after must be the next cursor of a previous page")
        })?),
    };
    let limit = page.limit;
    let shards = state.driver.ask(|reply| AdminRequest::Hottest { name, after, limit: limit + 1, reply }).await??;
    let (shards, more) = split(shards, limit, |s| &s.shard_id);
    let next = more.and_then(|_| shards.last()).map(|s| Page::cursor(&format!("{}:{}", s.load, s.shard_id)));
    Ok(Json(ShardLoads { shards, next }))
}

/// A load page's cursor key: `{load}:{shard}`.
fn load_cursor(key: &str) -> Option<(f64, String)> {
    let (load, shard) = key.split_once(':')?;
    let load: f64 = load.parse().ok()?;
    (load.is_finite() && load >= 0.0 && !shard.is_empty()).then(|| (load, shard.to_owned()))
}
