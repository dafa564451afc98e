//! Regions across entity types, drain (and its progress), and which
//! regions may stop now.

use axum::Json;
use axum::extract::Query;
use axum::extract::State;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use shardalloc_proto::api::{DrainState, ErrorBody, Regions, Stoppable};

use super::paging::{PageQuery, Paging, split};
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::Params;
use crate::server::driver::request::AdminRequest;
use crate::server::driver::stops::MAX_STOPPABLE;
use crate::server::openapi::{BadRequest, Unauthorized, Unavailable};
use crate::server::state::AppState;

/// List regions
#[utoipa::path(
    get, path = "/v1/cluster/regions", operation_id = "listRegions", tag = "regions", params(PageQuery),
    responses(
        (status = 200, description = "A page of the registered regions across entity types, by address.", body = Regions),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(State(state): State<AppState>, Paging(page): Paging) -> Result<Json<Regions>, ApiError> {
    let limit = page.limit;
    let regions = state.driver.ask(|reply| AdminRequest::Regions { page, reply }).await?;
    let (regions, next) = split(regions, limit, |r| &r.address);
    Ok(Json(Regions { regions, next }))
}

async fn set_draining(state: AppState, address: String, draining: bool) -> Result<StatusCode, ApiError> {
    state.driver.ask(|reply| AdminRequest::Drain { address, draining, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}

/// Drain a region
#[utoipa::path(
    post, path = "/v1/cluster/regions/{address}/drain", operation_id = "drainRegion", tag = "regions",
    params(("address" = String, Path, description = "The region's address (percent-encoded).")),
    responses(
        (status = 204, description = "Draining in every type it serves: its shards are handed off (`drain-batch` at a time) and it gets no new ones. Persisted."),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No region with this address is registered (`unknown-region`).", body = ErrorBody),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn drain(State(state): State<AppState>, Params(address): Params<String>) -> Result<StatusCode, ApiError> {
    set_draining(state, address, true).await
}

/// Undrain a region
#[utoipa::path(
    delete, path = "/v1/cluster/regions/{address}/drain", operation_id = "undrainRegion", tag = "regions",
    params(("address" = String, Path, description = "The region's address (percent-encoded).")),
    responses(
        (status = 204, description = "It may get shards again (in every type it serves)."),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No region with this address is registered (`unknown-region`).", body = ErrorBody),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn undrain(State(state): State<AppState>, Params(address): Params<String>) -> Result<StatusCode, ApiError> {
    set_draining(state, address, false).await
}

/// A drain's progress
#[utoipa::path(
    get, path = "/v1/cluster/regions/{address}/drain", operation_id = "drainState", tag = "regions",
    params(("address" = String, Path, description = "The region's address (percent-encoded).")),
    responses(
        (status = 200, description = "The shards it still holds and the hand-offs from it in flight, in all and per type, and when its drain began. Cancel a drain with `DELETE`.", body = DrainState),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No region with this address is registered (`unknown-region`).", body = ErrorBody),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn drain_state(
    State(state): State<AppState>,
    Params(address): Params<String>,
) -> Result<Json<DrainState>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::DrainState { address, reply }).await??))
}

/// The regions asked about.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StoppableQuery {
    /// Region addresses, comma-separated (at most 1,000).
    pub addresses: String,
}

/// Which regions may stop now
///
/// Checked together: a region is stoppable when it may stop along with
/// every stoppable region before it in the list. One is not when its
/// shards would have no other home, its zone (the `zone` label) would be
/// left without a region, hand-offs from it are in flight, a strict freeze
/// holds its drain, or fewer regions than `min-regions` would stay.
#[utoipa::path(
    get, path = "/v1/cluster/regions/stoppable", operation_id = "stoppableRegions", tag = "regions",
    params(StoppableQuery),
    responses(
        (status = 200, description = "The regions that may stop now, together, and for each of the others every reason it may not.", body = Stoppable),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn stoppable(
    State(state): State<AppState>,
    query: Result<Query<StoppableQuery>, QueryRejection>,
) -> Result<Json<Stoppable>, ApiError> {
    let Query(StoppableQuery { addresses }) =
        query.map_err(|rejection| ApiError::bad_request(ErrorCode::InvalidQuery, rejection.body_text()))?;
    let addresses: Vec<String> =
        addresses.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect();
    if addresses.is_empty() {
        return Err(ApiError::bad_request(ErrorCode::InvalidQuery, "addresses names no region: ?addresses=a,b,c"));
    }
    if addresses.len() > MAX_STOPPABLE {
        let message = format!("{} regions named; at most {MAX_STOPPABLE} at once", addresses.len());
        return Err(ApiError::bad_request(ErrorCode::TooMany, message));
    }
    Ok(Json(state.driver.ask(|reply| AdminRequest::Stoppable { addresses, reply }).await?))
}
