//! Placements (operators' "shard S belongs on region R") and manual
//! rebalance: external allocation.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::collections::BTreeSet;

use shardalloc_proto::api::{
    Placement, PlacementRequest, Placements, PlacementsWritten, RebalanceRequest, RebalanceResponse, RejectReason,
    Rejected, ShardId,
};

use shardalloc_proto::protocol::check_address;

use super::paging::{PageQuery, Paging, split};
use super::{blocking, shard_id, shard_ids};
use crate::coordinator::{NotAccepted, Reply};
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params, json_bytes, parse_then};
use crate::server::driver::request::{AdminRequest, Operation, Refusal};
use crate::server::openapi::{
    BadRequest, Conflict, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType,
};
use crate::server::state::AppState;

/// Most shards one rebalance or placement request may name.
pub const MAX_SHARDS_PER_REQUEST: usize = 10_000;

impl From<NotAccepted> for RejectReason {
    fn from(reason: NotAccepted) -> Self {
        match reason {
            NotAccepted::Unknown => RejectReason::Unknown,
            NotAccepted::Unallocated => RejectReason::Unallocated,
            NotAccepted::AlreadyMoving => RejectReason::AlreadyMoving,
            NotAccepted::QueueFull => RejectReason::QueueFull,
            NotAccepted::Frozen => RejectReason::Frozen,
        }
    }
}

/// List placements
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/placements", operation_id = "listPlacements", tag = "placements",
    params(("type" = String, Path, description = "The entity type."), PageQuery),
    responses(
        (status = 200, description = "A page of the live placements, by shard id.", body = Placements),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    Params(name): Params<String>,
    Paging(page): Paging,
) -> Result<Json<Placements>, ApiError> {
    let store = state.store.clone();
    let (limit, fetch) = (page.limit, page.fetch());
    let found = blocking(move || store.placements(&name, page.after.as_deref(), fetch).map(|p| p.ok_or(name)))
        .await?
        .map_err(ApiError::store)?
        .map_err(|name| ApiError::from(Refusal::UnknownType(name)))?;
    let placements: Vec<Placement> =
        found.into_iter().map(|(shard, target)| Placement { shard_id: ShardId(shard), target }).collect();
    let (placements, next) = split(placements, limit, |p| &p.shard_id.0);
    Ok(Json(Placements { placements, next }))
}

/// Parses `{"shardId":…,"target":…}` or `{"placements":[…]}`, naming the field at fault.
fn placement_request(value: Value) -> Result<Vec<(String, String)>, ApiError> {
    let Value::Object(mut object) = value else {
        return Err(ApiError::bad_request(ErrorCode::InvalidBody, "the body must be a JSON object"));
    };
    let list: Vec<Value> = match object.remove("placements") {
        Some(Value::Array(list)) if object.is_empty() => list,
        Some(Value::Array(_)) => {
            let extra: Vec<&String> = object.keys().collect();
            return Err(ApiError::bad_request(
                ErrorCode::InvalidBody,
                format!("unexpected fields beside placements: {extra:?}"),
            ));
        }
        Some(_) => return Err(ApiError::bad_request(ErrorCode::InvalidBody, "placements must be an array")),
        None => vec![Value::Object(object)],
    };
    if list.is_empty() {
        return Err(ApiError::bad_request(ErrorCode::InvalidBody, "no placements given"));
    }
    if list.len() > MAX_SHARDS_PER_REQUEST {
        return Err(ApiError::bad_request(
            ErrorCode::TooMany,
            format!("{} placements; at most {MAX_SHARDS_PER_REQUEST} per request", list.len()),
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, item)| {
            let placement: Placement = serde_json::from_value(item)
                .map_err(|e| ApiError::bad_request(ErrorCode::InvalidBody, format!("placement {i}: {e}")))?;
            let shard = shard_id(&placement.shard_id, &format!("placement {i}"))?;
            check_address(&placement.target).map_err(|rule| {
                ApiError::bad_request(ErrorCode::InvalidTarget, format!("placement {i}: the target: {rule}"))
            })?;
            Ok((shard, placement.target))
        })
        .collect()
}

/// Set placements
///
/// Pins shards to regions, all or nothing: the whole request is checked
/// first (ids, targets, duplicates, the type's placement limit). The node
/// writes placements in slices of at most 500 per turn (fewer for a type
/// with many regions, paced by the pushes to them), so heartbeats and homes
/// are answered between them; the answer comes once every slice is stored
/// (readers may see a large write partly applied meanwhile, and a write
/// that got no answer may be partly applied: sending it again is safe).
/// 429 `writes-busy` when 256 writes already wait. Each write
/// carries the stamp (commit order, node origin); last writer wins. A placement
/// takes effect at the shard's next allocation or at the next rebalance tick
/// (or now, with `POST …/rebalance` and `immediate`). Every change is pushed
/// to every region of the type. A target that is unknown, unreachable,
/// draining or proxy-only is not honoured: the strategy decides and the node
/// logs a warning. 409 `too-many-placements` when the type's
/// `max-placements` (live placements and tombstones) would be exceeded. The
/// answer lists what was written (a write older than the current one for
/// its shard is not) and the type's count of live placements.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/placements", operation_id = "setPlacements", tag = "placements",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = PlacementRequest, description = "One placement or `{\"placements\": […]}`.",
        example = json!({"placements": [{"shardId": 42, "target": "10.0.0.7:2552"}, {"shardId": "43", "target": "10.0.0.8:2552"}]})),
    responses(
        (status = 200, description = "Written: the placements that took effect and the type's live count.", body = PlacementsWritten),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 409, response = Conflict),
        (status = 413, response = TooLarge),
        (status = 429, description = "Too many placement writes wait (`writes-busy`): retry after `Retry-After`.", body = shardalloc_proto::api::ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn set(
    State(state): State<AppState>,
    Params(name): Params<String>,
    headers: HeaderMap,
    body: Request,
) -> Result<Json<PlacementsWritten>, ApiError> {
    // Up to 10,000 placements: parsed and checked at low priority.
    let (requested, asked) =
        parse_then(json_bytes(body).await?, |v| placement_request(v).map(|r| (r.clone(), r))).await?;
    let operation = Operation::SetPlacements(asked);
    let driver = state.driver.clone();
    let ask = async move { driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await };
    // A write whose client left before it began is dropped unwritten
    // (driver/writes.rs). A follower that forwarded one stops waiting after
    // its forward timeout, shorter than a large write may queue: that write
    // waits in a task of its own, so it is still applied.
    let asked = if headers.contains_key(crate::server::forward::HOP) {
        tokio::spawn(ask).await.map_err(|e| ApiError::internal(format!("a forwarded write's task: {e}")))?
    } else {
        ask.await
    };
    let operated = asked??;
    match operated.reply {
        Reply::PlacementsWritten { applied, .. } => {
            let applied: BTreeSet<String> = applied.into_iter().collect();
            let written = requested
                .into_iter()
                .filter(|(shard, _)| applied.contains(shard))
                .map(|(shard, target)| Placement { shard_id: ShardId(shard), target })
                .collect();
            Ok(Json(PlacementsWritten { written, total: operated.live_placements }))
        }
        Reply::PlacementRefused(error) => Err(Refusal::Placement(error).into()),
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}

/// Remove a placement
///
/// 404 `unknown-type`, or `no-placement` when the shard has no live placement.
#[utoipa::path(
    delete, path = "/v1/cluster/shards/{type}/placements/{shardId}", operation_id = "removePlacement", tag = "placements",
    params(
        ("type" = String, Path, description = "The entity type."),
        ("shardId" = String, Path, description = "The shard id (percent-encode `/` as `%2F`)."),
    ),
    responses(
        (status = 204, description = "Removed. A tombstone keeps an older write from bringing it back. The shard stays where it is; from the next rebalance on the strategy alone decides."),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn remove(
    State(state): State<AppState>,
    Params((name, shard)): Params<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let operation = Operation::RemovePlacement(shard_id(&ShardId(shard), "shardId")?);
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await??.reply {
        Reply::PlacementsWritten { .. } => Ok(StatusCode::NO_CONTENT),
        Reply::PlacementRefused(error) => Err(Refusal::Placement(error).into()),
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}

/// Move shards (manual rebalance)
///
/// Hands the shards off and allocates them again (a placement, else the
/// strategy: without a placement the strategy may pick the same region).
/// Without `immediate` they move at the next rebalance tick, ahead of the
/// strategy's own moves.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/rebalance", operation_id = "rebalance", tag = "placements",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = RebalanceRequest, description = "The shards.", example = json!({"shardIds": [42, "43"], "immediate": true})),
    responses(
        (status = 202, description = "Accepted shards, and for the others why not.", body = RebalanceResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn rebalance(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<RebalanceRequest>,
) -> Result<(StatusCode, Json<RebalanceResponse>), ApiError> {
    if request.shard_ids.is_empty() {
        return Err(ApiError::bad_request(ErrorCode::InvalidBody, "shardIds is empty"));
    }
    if request.shard_ids.len() > MAX_SHARDS_PER_REQUEST {
        return Err(ApiError::bad_request(
            ErrorCode::TooMany,
            format!("{} shard ids; at most {MAX_SHARDS_PER_REQUEST} per request", request.shard_ids.len()),
        ));
    }
    let shards = shard_ids(&request.shard_ids, "shardIds")?;
    let operation = Operation::RebalanceNow { shards, immediate: request.immediate };
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await??.reply {
        Reply::Rebalance { accepted, rejected } => {
            let rejected =
                rejected.into_iter().map(|(shard, why)| Rejected { shard_id: shard, reason: why.into() }).collect();
            Ok((StatusCode::ACCEPTED, Json(RebalanceResponse { accepted, rejected })))
        }
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}
