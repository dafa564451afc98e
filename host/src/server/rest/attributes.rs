//! Shard attributes: an operator writes one shard's (`PUT …/shards/{id}/attributes`)
//! or many shards' at once (`POST …/attributes`); `GET …/shards/{id}`
//! shows them. Each write names every shard's whole map (`{}` clears it),
//! and is applied all or nothing by the type's coordinator.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use shardalloc_proto::api::{AttributesRequest, AttributesWritten, ShardId};
use shardalloc_proto::attributes::ShardAttributes;

use super::shard_id;
use crate::coordinator::{MAX_ATTRIBUTE_WRITES, Reply};
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params};
use crate::server::driver::request::{AdminRequest, Operation, Refusal};
use crate::server::openapi::{BadRequest, Internal, TooLarge, Unauthorized, Unavailable, UnknownType};
use crate::server::state::AppState;

/// The body of a write, before its attributes are checked: read as plain
/// maps, so a key or value outside the rules is answered
/// `invalid-attributes` naming its shard, not as unreadable JSON.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unchecked {
    shards: BTreeMap<ShardId, BTreeMap<String, String>>,
}

fn checked(shard: &ShardId, pairs: BTreeMap<String, String>) -> Result<(String, ShardAttributes), ApiError> {
    let id = shard_id(shard, "shard")?;
    let attributes = ShardAttributes::from_map(pairs)
        .map_err(|error| ApiError::bad_request(ErrorCode::InvalidAttributes, format!("shard {id:?}: {error}")))?;
    Ok((id, attributes))
}

async fn write(
    state: &AppState,
    name: String,
    writes: Vec<(String, ShardAttributes)>,
) -> Result<AttributesWritten, ApiError> {
    let operation = Operation::SetAttributes(writes);
    match state.driver.ask(|reply| AdminRequest::Operate { name, operation, reply }).await??.reply {
        Reply::AttributesWritten { mut changed } => {
            changed.sort();
            Ok(AttributesWritten { changed })
        }
        Reply::AttributesRefused(message) => Err(Refusal::Attributes(message).into()),
        other => Err(Refusal::Unexpected(format!("{other:?}")).into()),
    }
}

/// Write shards' attributes
///
/// Each named shard's attributes become the map given (`{}` clears them),
/// all or nothing: at most 10,000 shards a write; per shard at most 16
/// pairs, keys 1 to 64 bytes of `A-Z a-z 0-9 . _ - /`, values at most 256
/// bytes without control characters. A shard needs no home to have
/// attributes; they follow it through its moves. The type keeps attributes
/// for at most its `max-shards` shards. Strategies of contract 0.3 read
/// them with the next view.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/attributes", operation_id = "writeAttributes", tag = "types",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = AttributesRequest, example = json!({"shards": {"cart-17": {"tenant": "acme", "tier": "gold"}, "cart-18": {}}})),
    responses(
        (status = 200, description = "Written: the shards whose attributes changed.", body = AttributesWritten),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn write_many(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(body): JsonBody<Unchecked>,
) -> Result<Json<AttributesWritten>, ApiError> {
    if body.shards.len() > MAX_ATTRIBUTE_WRITES {
        let message = format!("{} shards named; at most {MAX_ATTRIBUTE_WRITES} in one write", body.shards.len());
        return Err(ApiError::bad_request(ErrorCode::InvalidAttributes, message));
    }
    let writes = body.shards.into_iter().map(|(shard, pairs)| checked(&shard, pairs)).collect::<Result<_, _>>()?;
    Ok(Json(write(&state, name, writes).await?))
}

/// Write one shard's attributes
///
/// The shard's attributes become the object given (`{}` clears them),
/// within the limits of `writeAttributes`.
#[utoipa::path(
    put, path = "/v1/cluster/shards/{type}/shards/{shardId}/attributes", operation_id = "setShardAttributes", tag = "types",
    params(
        ("type" = String, Path, description = "The entity type."),
        ("shardId" = String, Path, description = "The shard id (percent-encode `/` as `%2F`)."),
    ),
    request_body(content = ShardAttributes, example = json!({"tenant": "acme", "tier": "gold"})),
    responses(
        (status = 200, description = "Written: the shard, listed when its attributes changed.", body = AttributesWritten),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 413, response = TooLarge),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn set_one(
    State(state): State<AppState>,
    Params((name, shard)): Params<(String, String)>,
    JsonBody(pairs): JsonBody<BTreeMap<String, String>>,
) -> Result<Json<AttributesWritten>, ApiError> {
    let write_one = checked(&ShardId(shard), pairs)?;
    Ok(Json(write(&state, name, vec![write_one]).await?))
}
