//! Regions across entity types, and drain.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use shardalloc_proto::api::{ErrorBody, Regions};

use super::paging::{PageQuery, Paging, split};
use crate::server::api_error::ApiError;
use crate::server::body::Params;
use crate::server::driver::request::AdminRequest;
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
