//! Strategies: upload, list, delete, and per type activate (after a dry
//! run), dry-run, shadow and roll back.
//!
//! Compiling, reading component bytes and dry runs happen on blocking
//! threads; the driver thread only swaps, between two decisions.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use shardalloc_proto::api::{
    ActivateRequest, ClippedMove, DryRunRequest, DryRunResponse, DryRunRound, ErrorBody, StoredStrategy, Strategies,
    StrategyState,
};

use super::paging::{PageQuery, Paging, split};
use super::{blocking, shard_ids};
use crate::engine::component::Compiled;
use crate::engine::source::SourceLoadError;
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params, RawBody};
use crate::server::driver::request::{AdminRequest, Candidate};
use crate::server::dry_runs::DRY_RUN_DEADLINE;
use crate::server::openapi::{
    BadRequest, Conflict, DryRunBusy, Internal, NotFound, TooLarge, Unauthorized, Unavailable, UnknownType,
    Unprocessable,
};
use crate::server::state::AppState;
use crate::strategy::StrategySource;
use crate::strategy::dry_run::{DryRunError, dry_run};

/// The largest component accepted by `POST /v1/strategies`, in bytes.
pub const MAX_UPLOAD: usize = crate::engine::limits::MAX_COMPONENT_SIZE;

/// A candidate named in a request: a built-in or an uploaded digest,
/// read and compiled off the driver thread.
pub(crate) async fn candidate(
    state: &AppState,
    strategy: &str,
    config: &Option<serde_json::Value>,
) -> Result<Candidate, ApiError> {
    let source = StrategySource::parse_api(strategy)
        .map_err(|e| ApiError::not_found(ErrorCode::UnknownStrategy, e.to_string()))?;
    let (engine, store) = (state.engine.clone(), state.store.clone());
    let compiled = if let StrategySource::Digest(digest) = &source {
        // Uploaded bytes compile within the upload budget (their artifact
        // may have left the cache).
        let digest = digest.clone();
        let bytes = blocking(move || store.blob(&digest))
            .await?
            .map_err(ApiError::store)?
            .ok_or_else(|| ApiError::not_found(ErrorCode::UnknownStrategy, source.unknown_error().to_string()))?;
        state.uploads.compiler.compile(&engine, bytes.into()).await?
    } else {
        blocking(move || engine.compile_source(&source, None)).await?.map_err(|error| match error {
            SourceLoadError::Unknown(e) => ApiError::not_found(ErrorCode::UnknownStrategy, e.to_string()),
            SourceLoadError::Load { error, .. } => {
                ApiError::unprocessable(ErrorCode::InvalidComponent, error.to_string())
            }
            other => ApiError::store(other),
        })?
    };
    let config = config.as_ref().map(|c| c.to_string()).unwrap_or_default();
    Ok(Candidate { compiled, config })
}

/// Upload a strategy component
///
/// The raw bytes of a WebAssembly component exporting
/// `shardalloc:strategy/allocator@0.1.0`, at most 32 MiB. 400 `invalid-body`
/// for an empty body; 422 `invalid-component` when it does not compile or
/// exports another contract, `over-compile-budget` when it has more
/// functions, locals or code than the compile budget allows (nothing is
/// compiled), `compile-timeout` when its compile runs past the time limit
/// (it is killed); 507 `component-quota` when the node stores as many
/// components, or bytes of them, as its quota allows.
#[utoipa::path(
    post, path = "/v1/strategies", operation_id = "uploadStrategy", tag = "strategies",
    request_body(content = Vec<u8>, content_type = "application/wasm", description = "The component's bytes."),
    responses(
        (status = 201, description = "Compiled and stored (persisted). Activate it with `PUT …/strategy`.", body = StoredStrategy),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 413, response = TooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
        (status = 507, description = "The node's quota of stored components is full (`component-quota`).", body = ErrorBody),
    ),
)]
pub async fn upload(
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<StoredStrategy>), ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(ErrorCode::InvalidBody, "the body is empty; send the component's bytes"));
    }
    let stored = crate::server::uploads::upload(&state, body).await?;
    Ok((StatusCode::CREATED, Json(stored)))
}

/// List strategies
#[utoipa::path(
    get, path = "/v1/strategies", operation_id = "listStrategies", tag = "strategies", params(PageQuery),
    responses(
        (status = 200, description = "A page of the built-ins (first) and uploaded components (by digest), with the types where each is active.", body = Strategies),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn list(State(state): State<AppState>, Paging(page): Paging) -> Result<Json<Strategies>, ApiError> {
    let limit = page.limit;
    let strategies = state.driver.ask(|reply| AdminRequest::Strategies { page, reply }).await?;
    let (mut strategies, next) = split(strategies, limit, |s| &s.digest);
    crate::server::uploads::with_contracts(&state, &mut strategies).await;
    Ok(Json(Strategies { strategies, next }))
}

/// Delete an uploaded strategy
#[utoipa::path(
    delete, path = "/v1/strategies/{digest}", operation_id = "deleteStrategy", tag = "strategies",
    params(("digest" = String, Path, description = "The component's `sha256:…` digest.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 401, response = Unauthorized),
        (status = 404, description = "No uploaded component has this digest (`unknown-strategy`).", body = ErrorBody),
        (status = 409, description = "It is built in (`builtin`), or active or shadowing in some type (`strategy-in-use`).", body = ErrorBody),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn delete(State(state): State<AppState>, Params(digest): Params<String>) -> Result<StatusCode, ApiError> {
    // The record first, then the bytes: a crash between leaves bytes that
    // the next start collects.
    let _writes = state.component_writes.lock().await;
    let removed = digest.clone();
    state.driver.ask(|reply| AdminRequest::RemoveComponent { digest: removed, reply }).await??;
    state.uploads.forget_contract(&digest);
    let store = state.store.clone();
    if let Err(error) = blocking(move || store.delete_blob(&digest)).await? {
        tracing::warn!(%error, "cannot delete a deleted component's bytes; the next start collects them");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a candidate on the type's current state, off the driver thread,
/// within the dry-run limits: 422 when it fails or does not finish in time.
async fn run_dry(
    state: &AppState,
    name: String,
    compiled: Arc<Compiled>,
    config: String,
    rounds: usize,
    shards: Vec<String>,
) -> Result<DryRunResponse, ApiError> {
    let slot = state.dry_runs.start(&name)?;
    let (snapshot, paced) = super::types::snapshot_and_paced(state, name).await?;
    let engine = state.engine.clone();
    let limits = state.limits;
    blocking(move || {
        let _slot = slot;
        let candidate = engine.instantiate(&compiled, &config, limits).map_err(|e| {
            ApiError::unprocessable(ErrorCode::StrategyRefused, format!("the strategy does not load: {e}"))
        })?;
        let label = format!("{}@{}", compiled.info.name, compiled.info.version);
        let deadline = Instant::now() + DRY_RUN_DEADLINE;
        let run = dry_run(Box::new(candidate), &snapshot, &shards, rounds, deadline, paced).map_err(|e| match e {
            DryRunError::TooManyRounds(_) | DryRunError::TooManyShards(_) => {
                ApiError::bad_request(ErrorCode::InvalidDryRun, e.to_string())
            }
            DryRunError::Failed(_) | DryRunError::TimedOut(_) => {
                ApiError::unprocessable(ErrorCode::DryRunFailed, format!("{label} failed its dry run: {e}"))
            }
        })?;
        Ok(DryRunResponse {
            strategy: label,
            allocations: run
                .allocations
                .into_iter()
                .map(|(shard, allocation)| (shard, allocation.ok().map(|a| a.region)))
                .collect(),
            rebalance: run.rebalance.shards,
            rounds: (run.rounds.into_iter())
                .map(|r| DryRunRound {
                    moved: r.moved,
                    counts: r.counts,
                    clipped: r
                        .clipped
                        .into_iter()
                        .map(|c| ClippedMove { shard_id: c.shard, limit: c.limit.into() })
                        .collect(),
                })
                .collect(),
        })
    })
    .await?
}

/// Dry-run a candidate strategy
///
/// 404 `unknown-strategy` or `unknown-type`. 400 `invalid-dry-run` for more
/// than 100 rounds or 1,000 shards. 422 when the candidate does not load,
/// or fails during the run (a fault, an error or an answer the node refuses:
/// the message names it), or does not finish within 30 s. 429 `dry-run-busy`
/// while another dry run of the type, or two in all, are under way.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/strategy/dry-run", operation_id = "dryRunStrategy", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = DryRunRequest, description = "The candidate.",
        example = json!({"strategy": "hash", "config": {"rebalance_limit": 25}, "rounds": 5, "shardIds": [42]})),
    responses(
        (status = 200, description = "What the candidate would do on the type's current state. Nothing changes.", body = DryRunResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = TooLarge),
        (status = 422, response = Unprocessable),
        (status = 429, response = DryRunBusy),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn dry_run_candidate(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<DryRunRequest>,
) -> Result<Json<DryRunResponse>, ApiError> {
    let shards = shard_ids(&request.shard_ids, "shardIds")?;
    let candidate = candidate(&state, &request.strategy, &request.config).await?;
    Ok(Json(run_dry(&state, name, candidate.compiled, candidate.config, request.rounds, shards).await?))
}

/// Activate a strategy
///
/// Loads and configures the strategy, dry-runs it on the type's current
/// state (one rebalance round), then swaps it in between two decisions. 404
/// `unknown-strategy` or `unknown-type`. 422 when it does not compile,
/// refuses its configuration or fails the dry run (unless `"force": true`,
/// which skips the dry run); the active strategy stays. 429 while another
/// dry run of the type is under way.
#[utoipa::path(
    put, path = "/v1/cluster/shards/{type}/strategy", operation_id = "activateStrategy", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = ActivateRequest, description = "The strategy and its configuration.",
        example = json!({"strategy": "least-shard", "config": {"absolute_limit": 10}})),
    responses(
        (status = 200, description = "Activated; persisted.", body = StrategyState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = TooLarge),
        (status = 422, response = Unprocessable),
        (status = 429, response = DryRunBusy),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn activate(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<ActivateRequest>,
) -> Result<Json<StrategyState>, ApiError> {
    let candidate = candidate(&state, &request.strategy, &request.config).await?;
    if !request.force {
        run_dry(&state, name.clone(), candidate.compiled.clone(), candidate.config.clone(), 1, Vec::new()).await?;
    }
    Ok(Json(state.driver.ask(|reply| AdminRequest::Activate { name, candidate, reply }).await??))
}

/// The type's strategy
#[utoipa::path(
    get, path = "/v1/cluster/shards/{type}/strategy", operation_id = "getStrategy", tag = "strategies",
    params(("type" = String, Path, description = "The entity type."), PageQuery),
    responses(
        (status = 200, description = "Active strategy, a page of the history, shadow and its counters.", body = StrategyState),
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
) -> Result<Json<StrategyState>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::StrategyState { name, page, reply }).await??))
}

/// Roll back to the previous strategy
///
/// 409 `no-previous-strategy` when nothing was active before. 422
/// `strategy-refused` when the previous strategy no longer loads.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/strategy/rollback", operation_id = "rollbackStrategy", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 200, description = "Rolled back; persisted.", body = StrategyState),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 409, response = Conflict),
        (status = 422, response = Unprocessable),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn rollback(
    State(state): State<AppState>,
    Params(name): Params<String>,
) -> Result<Json<StrategyState>, ApiError> {
    Ok(Json(state.driver.ask(|reply| AdminRequest::Rollback { name, reply }).await??))
}

/// Set a shadow strategy
///
/// 404 `unknown-strategy` or `unknown-type`. 422 when it does not load or
/// refuses its configuration.
#[utoipa::path(
    put, path = "/v1/cluster/shards/{type}/strategy/shadow", operation_id = "setShadow", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = ActivateRequest, description = "The candidate.", example = json!({"strategy": "hash"})),
    responses(
        (status = 200, description = "The shadow now runs beside the active strategy on every decision; disagreements are counted and logged. It decides nothing.", body = StrategyState),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 413, response = TooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn set_shadow(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<ActivateRequest>,
) -> Result<Json<StrategyState>, ApiError> {
    let candidate = Some(candidate(&state, &request.strategy, &request.config).await?);
    Ok(Json(state.driver.ask(|reply| AdminRequest::Shadow { name, candidate, reply }).await??))
}

/// Remove the shadow strategy
#[utoipa::path(
    delete, path = "/v1/cluster/shards/{type}/strategy/shadow", operation_id = "clearShadow", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    responses(
        (status = 204, description = "Removed (also when there was none)."),
        (status = 401, response = Unauthorized),
        (status = 404, response = UnknownType),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn clear_shadow(State(state): State<AppState>, Params(name): Params<String>) -> Result<StatusCode, ApiError> {
    state.driver.ask(|reply| AdminRequest::Shadow { name, candidate: None, reply }).await??;
    Ok(StatusCode::NO_CONTENT)
}
