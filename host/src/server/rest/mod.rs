//! The admin REST API under `/v1`: thin handlers that check their input,
//! send one typed [`AdminRequest`](super::driver::request::AdminRequest) (or
//! a few) to the driver and map the typed reply to a JSON body or an
//! [`ApiError`]. Each handler carries its OpenAPI description
//! (`#[utoipa::path]`), so the document served at `/v1/openapi.json` is
//! generated from the same code that routes.
//!
//! - `health.rs`: `/healthz`, `/livez`, `/readyz`, `/metrics` (no token);
//! - `types.rs`: entity types, their state and snapshot, the signal, where a shard is;
//! - `attributes.rs`: shard attributes, one shard's or many at once;
//! - `placements.rs`: placements and manual rebalance (external allocation);
//! - `regions.rs`: regions and drain;
//! - `freeze.rs`: a type's freezes and the cluster's;
//! - `plan.rs`: what-if plans;
//! - `strategies.rs`: upload, list, delete, activate, dry-run, shadow, roll back.

pub mod attributes;
pub mod cluster;
pub mod freeze;
pub mod health;
pub mod paging;
pub mod placements;
pub mod plan;
pub mod regions;
pub mod strategies;
pub mod types;

use shardalloc_proto::api::ShardId;

use super::api_error::{ApiError, ErrorCode};

/// Runs `work` on a blocking thread.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ApiError::internal(format!("a blocking task failed: {e}")))
}

/// A shard id from a request, checked; the error names `field`.
pub(crate) fn shard_id(id: &ShardId, field: &str) -> Result<String, ApiError> {
    id.validate()
        .map(str::to_owned)
        .map_err(|m| ApiError::bad_request(ErrorCode::InvalidShardId, format!("{field}: {m}")))
}

/// Checks every shard id of a list; errors name `field[i]`.
pub(crate) fn shard_ids(ids: &[ShardId], field: &str) -> Result<Vec<String>, ApiError> {
    ids.iter().enumerate().map(|(i, id)| shard_id(id, &format!("{field}[{i}]"))).collect()
}
