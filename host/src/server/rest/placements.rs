//! Placements (operators' "shard S belongs on region R") and manual
//! rebalance: external allocation.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use shardalloc_client::api::{
    Placement, PlacementRequest, Placements, RebalanceRequest, RebalanceResponse, RejectReason, Rejected, ShardId,
};

use super::{shard_id, shard_ids};
use crate::coordinator::{NotAccepted, Reply};
use crate::server::AppState;
use crate::server::api_error::ApiError;
use crate::server::body::{JsonBody, Params};
use crate::server::driver::request::{AdminRequest, Operation, Refusal};
use crate::server::openapi::{
    BadRequest, Conflict, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType,
};

/// Most shards one rebalance or placement request may name.
pub const MAX_SHARDS_PER_REQUEST: usize = 10_000;
/// Longest region address, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

impl From<NotAccepted> for RejectReason {
    fn from(reason: NotAccepted) -> Self {
        match reason {
            NotAccepted::Unknown => RejectReason::Unknown,
            NotAccepted::Unallocated => RejectReason::Unallocated,
            NotAccepted::AlreadyMoving => RejectReason::AlreadyMoving,
            NotAccepted::QueueFull => RejectReason::QueueFull,
        }
    }
}

/// List placements
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/placements", operation_id = "listPlacements", tag = "placements",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "Every live placement.", body = Placements),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<Placements>, ApiError> {
    let placements = state.driver.ask(|reply| AdminRequest::Placements { name, reply }).await??;
    Ok(Json(Placements { placements }))
}

/// Parses `{"shardId":…,"target":…}` or `{"placements":[…]}`, naming the field at fault.
fn placement_request(value: Value) -> Result<Vec<(String, String)>, ApiError> {
    let Value::Object(mut object) = value else {
        return Err(ApiError::bad_request("invalid-body", "the body must be a JSON object"));
    };
    let list: Vec<Value> = match object.remove("placements") {
        Some(Value::Array(list)) if object.is_empty() => list,
        Some(Value::Array(_)) => {
            let extra: Vec<&String> = object.keys().collect();
            return Err(ApiError::bad_request(
                "invalid-body",
                format!("unexpected fields beside placements: {extra:?}"),
            ));
        }
        Some(_) => return Err(ApiError::bad_request("invalid-body", "placements must be an array")),
        None => vec![Value::Object(object)],
    };
    if list.is_empty() {
        return Err(ApiError::bad_request("invalid-body", "no placements given"));
    }
    if list.len() > MAX_SHARDS_PER_REQUEST {
        return Err(ApiError::bad_request(
            "too-many",
            format!("{} placements; at most {MAX_SHARDS_PER_REQUEST} per request", list.len()),
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, item)| {
            let placement: Placement = serde_json::from_value(item)
                .map_err(|e| ApiError::bad_request("invalid-body", format!("placement {i}: {e}")))?;
            let shard = shard_id(&placement.shard_id, &format!("placement {i}"))?;
            if placement.target.is_empty() || placement.target.len() > MAX_ADDRESS_BYTES {
                return Err(ApiError::bad_request(
                    "invalid-target",
                    format!("placement {i}: the target must be 1 to {MAX_ADDRESS_BYTES} bytes"),
                ));
            }
            Ok((shard, placement.target))
        })
        .collect()
}

/// Set placements
///
/// Pins shards to regions, all or nothing: the whole request is checked
/// first (ids, targets, duplicates, the type's placement limit). Each write
/// carries the stamp (node time, node origin); last writer wins. A placement
/// takes effect at the shard's next allocation or at the next rebalance tick
/// (or now, with `POST …/rebalance` and `immediate`). Every change is pushed
/// to every region of the type. A target that is unknown, unreachable,
/// draining or proxy-only is not honoured: the strategy decides and the node
/// logs a warning. 409 `too-many-placements` when the type's
/// `max-placements` (live placements and tombstones) would be exceeded.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/placements", operation_id = "setPlacements", tag = "placements",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = PlacementRequest, description = "One placement or `{\"placements\": […]}`.",
        example = json!({"placements": [{"shardId": 42, "target": "10.0.0.7:2552"}, {"shardId": "43", "target": "10.0.0.8:2552"}]})),
    responses(
        (status = 200, description = "Written. The answer lists every live placement of the type.", body = Placements),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 409, response = Conflict),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn set(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Placements>, ApiError> {
    let operation = Operation::SetPlacements(placement_request(body)?);
    let type_name = name.clone();
    match state.driver.ask(|reply| AdminRequest::Operate { name: type_name, operation, reply }).await?? {
        Reply::PlacementsWritten { .. } => list(State(state), Params(name)).await,
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
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await?? {
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
        return Err(ApiError::bad_request("invalid-body", "shardIds is empty"));
    }
    if request.shard_ids.len() > MAX_SHARDS_PER_REQUEST {
        return Err(ApiError::bad_request(
            "too-many",
            format!("{} shard ids; at most {MAX_SHARDS_PER_REQUEST} per request", request.shard_ids.len()),
        ));
    }
    let shards = shard_ids(&request.shard_ids, "shardIds")?;
    let operation = Operation::RebalanceNow { shards, immediate: request.immediate };
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await?? {
        Reply::Rebalance { accepted, rejected } => {
            let rejected =
                rejected.into_iter().map(|(shard, why)| Rejected { shard_id: shard, reason: why.into() }).collect();
            Ok((StatusCode::ACCEPTED, Json(RebalanceResponse { accepted, rejected })))
        }
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}
