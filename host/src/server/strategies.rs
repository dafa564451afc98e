//! The admin REST API's strategy endpoints: upload, list, delete, activate
//! (after loading, configuring and a dry run), dry runs, shadows, rollback.
//!
//! Compiling and dry runs happen on blocking threads; only the swap itself
//! runs on the driver thread, between two decisions.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use shardalloc_client::api::{
    ActivateRequest, ActivationInfo, DryRunRequest, DryRunResponse, DryRunRound, StoredStrategy, Strategies,
    StrategyState,
};

use super::AppState;
use super::api_error::ApiError;
use super::body::{JsonBody, Params, RawBody};
use super::driver::{Driver, activation_record, unknown_strategy};
use super::rest::{entry, shard_id};
use crate::engine::dry_run::dry_run;
use crate::engine::load::Compiled;
use crate::engine::registry::{Activation, ActivationCause, RollbackError};
use crate::store::{ActivationRecord, ComponentRecord};
use crate::strategy::builtin;

/// The largest component accepted by `POST /v1/strategies`, in bytes.
pub const MAX_UPLOAD: usize = crate::engine::limits::MAX_COMPONENT_SIZE;

fn config_value(text: &str) -> Option<serde_json::Value> {
    if text.is_empty() { None } else { serde_json::from_str(text).ok() }
}

/// The API form of a persisted activation.
pub fn activation_info(record: &ActivationRecord) -> ActivationInfo {
    ActivationInfo {
        name: record.name.clone(),
        version: record.version.clone(),
        digest: record.strategy.clone(),
        config: config_value(&record.config),
        cause: record.cause.clone(),
        at_ms: record.at_ms,
    }
}

/// The API form of a live activation.
pub fn slot_activation_info(activation: &Activation, spec: &str) -> ActivationInfo {
    activation_info(&activation_record(activation, spec))
}

fn strategy_state(driver: &Driver, name: &str) -> StrategyState {
    let entry = &driver.types[name];
    let history: Vec<ActivationInfo> = entry.activations.iter().map(activation_info).collect();
    let active = slot_activation_info(&entry.slot.active(), &entry.record.strategy);
    let shadow = entry.slot.shadow().map(|a| {
        let spec = driver.spec_of(&a.compiled);
        slot_activation_info(&a, &spec)
    });
    let stats = entry.slot.stats();
    StrategyState {
        active,
        history,
        shadow,
        shadow_calls: stats.shadow_calls,
        shadow_disagreements: stats.shadow_disagreements,
    }
}

/// `POST /v1/strategies`: the raw component; answered once it compiled.
pub async fn upload(
    State(state): State<AppState>,
    RawBody(body): RawBody,
) -> Result<(StatusCode, Json<StoredStrategy>), ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("invalid-body", "the body is empty; send the component's bytes"));
    }
    let engine = state.engine.clone();
    let bytes = body.to_vec();
    let (compiled, bytes) = tokio::task::spawn_blocking(move || (engine.compile(&bytes), bytes))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let compiled = compiled.map_err(|e| ApiError::unprocessable("invalid-component", e.to_string()))?;
    let record = ComponentRecord {
        digest: compiled.digest.clone(),
        name: compiled.info.name.clone(),
        version: compiled.info.version.clone(),
        size: bytes.len() as u64,
    };
    let stored = record.clone();
    state.driver.call(move |driver| driver.store_component(record, bytes)).await?;
    tracing::info!(digest = %stored.digest, name = %stored.name, version = %stored.version, "strategy uploaded");
    Ok((
        StatusCode::CREATED,
        Json(StoredStrategy {
            digest: stored.digest,
            name: stored.name,
            version: stored.version,
            size: stored.size,
            active_in: Vec::new(),
        }),
    ))
}

fn active_in(driver: &Driver, spec: &str) -> Vec<String> {
    driver
        .types
        .iter()
        .filter(|(_, e)| {
            e.record.strategy == spec || e.slot.shadow().is_some_and(|s| driver.spec_of(&s.compiled) == spec)
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// `GET /v1/strategies`
pub async fn list(State(state): State<AppState>) -> Result<Json<Strategies>, ApiError> {
    let strategies = state
        .driver
        .call(|driver| {
            let mut list: Vec<StoredStrategy> = builtin::names()
                .map(|name| StoredStrategy {
                    digest: name.to_owned(),
                    name: name.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    size: 0,
                    active_in: active_in(driver, name),
                })
                .collect();
            list.extend(driver.components.values().map(|c| StoredStrategy {
                digest: c.digest.clone(),
                name: c.name.clone(),
                version: c.version.clone(),
                size: c.size,
                active_in: active_in(driver, &c.digest),
            }));
            list
        })
        .await?;
    Ok(Json(Strategies { strategies }))
}

/// `DELETE /v1/strategies/{digest}`: 409 while active (or shadowing) anywhere.
pub async fn delete(State(state): State<AppState>, Params(digest): Params<String>) -> Result<StatusCode, ApiError> {
    state
        .driver
        .call(move |driver| {
            if builtin::component_bytes(&digest).is_some() {
                return Err(ApiError::conflict("builtin", format!("{digest} is built in and cannot be deleted")));
            }
            if !driver.components.contains_key(&digest) {
                return Err(ApiError::not_found(
                    "unknown-strategy",
                    format!("no uploaded strategy has the digest {digest}"),
                ));
            }
            let users = active_in(driver, &digest);
            if !users.is_empty() {
                return Err(ApiError::conflict(
                    "strategy-in-use",
                    format!("{digest} is active in {}", users.join(", ")),
                ));
            }
            driver.remove_component(&digest);
            Ok(StatusCode::NO_CONTENT)
        })
        .await?
}

/// The candidate's bytes-to-instance path: compiled off the driver thread.
async fn compile(state: &AppState, spec: String) -> Result<Arc<Compiled>, ApiError> {
    let bytes = state
        .driver
        .call(move |driver| match driver.strategy_bytes(&spec) {
            Ok(Some(bytes)) => Ok(bytes.into_owned()),
            Ok(None) => Err(ApiError::not_found("unknown-strategy", unknown_strategy(&spec))),
            Err(e) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e.to_string())),
        })
        .await??;
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || engine.compile(&bytes))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(|e| ApiError::unprocessable("invalid-component", e.to_string()))
}

fn config_text(config: &Option<serde_json::Value>) -> String {
    config.as_ref().map(|c| c.to_string()).unwrap_or_default()
}

/// Runs a candidate on the type's current state, off the driver thread.
async fn run_dry(
    state: &AppState,
    name: &str,
    compiled: Arc<Compiled>,
    config: String,
    rounds: usize,
    shards: Vec<String>,
) -> Result<DryRunResponse, ApiError> {
    let type_name = name.to_owned();
    let snapshot =
        state.driver.call(move |driver| Ok::<_, ApiError>(entry(driver, &type_name)?.coordinator.snapshot())).await??;
    let engine = state.engine.clone();
    let limits = state.limits;
    tokio::task::spawn_blocking(move || {
        let candidate = engine
            .instantiate(&compiled, &config, limits)
            .map_err(|e| ApiError::unprocessable("strategy-refused", format!("the strategy does not load: {e}")))?;
        let label = format!("{}@{}", compiled.info.name, compiled.info.version);
        let run = dry_run(Box::new(candidate), &snapshot, &shards, rounds)
            .map_err(|e| ApiError::bad_request("invalid-dry-run", e.to_string()))?;
        if let Some(error) = &run.rebalance.fallback {
            return Err(ApiError::unprocessable("dry-run-failed", format!("{label} failed its dry run: {error}")));
        }
        if let Some(round) = run.rounds.iter().find(|r| !r.fallbacks.is_empty()) {
            return Err(ApiError::unprocessable(
                "dry-run-failed",
                format!("{label} failed its dry run in round {}: {}", round.round, round.fallbacks.join("; ")),
            ));
        }
        Ok(DryRunResponse {
            strategy: label,
            allocations: run
                .allocations
                .into_iter()
                .map(|(shard, allocation)| (shard, allocation.ok().map(|a| a.region)))
                .collect(),
            rebalance: run.rebalance.shards,
            rounds: run.rounds.into_iter().map(|r| DryRunRound { moved: r.moved, counts: r.counts }).collect(),
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
}

/// `POST /v1/cluster/shards/{type}/strategy/dry-run`
pub async fn dry_run_endpoint(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<DryRunRequest>,
) -> Result<Json<DryRunResponse>, ApiError> {
    let shards = request
        .shard_ids
        .iter()
        .enumerate()
        .map(|(i, id)| shard_id(id, &format!("shardIds[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let compiled = compile(&state, request.strategy.clone()).await?;
    Ok(Json(run_dry(&state, &name, compiled, config_text(&request.config), request.rounds, shards).await?))
}

/// `PUT /v1/cluster/shards/{type}/strategy`: load, configure, dry-run, swap.
pub async fn activate(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<ActivateRequest>,
) -> Result<Json<StrategyState>, ApiError> {
    let compiled = compile(&state, request.strategy.clone()).await?;
    let config = config_text(&request.config);
    run_dry(&state, &name, compiled.clone(), config.clone(), 1, Vec::new()).await?;
    let limits = state.limits;
    let answer = state
        .driver
        .call(move |driver| {
            let entry = entry(driver, &name)?;
            entry
                .slot
                .activate(compiled, &config, limits)
                .map_err(|e| ApiError::unprocessable("strategy-refused", e.to_string()))?;
            driver.record_activation(&name);
            Ok::<_, ApiError>(strategy_state(driver, &name))
        })
        .await??;
    Ok(Json(answer))
}

/// `GET /v1/cluster/shards/{type}/strategy`
pub async fn get(State(state): State<AppState>, Params(name): Params<String>) -> Result<Json<StrategyState>, ApiError> {
    Ok(Json(
        state
            .driver
            .call(move |driver| {
                entry(driver, &name)?;
                Ok::<_, ApiError>(strategy_state(driver, &name))
            })
            .await??,
    ))
}

/// `POST /v1/cluster/shards/{type}/strategy/rollback`
pub async fn rollback(
    State(state): State<AppState>,
    Params(name): Params<String>,
) -> Result<Json<StrategyState>, ApiError> {
    let answer = state
        .driver
        .call(move |driver| {
            let entry = entry(driver, &name)?;
            match entry.slot.rollback() {
                Ok(_) => {}
                // The slot remembers only this run; the store remembers more.
                Err(RollbackError::NoPrevious) => rollback_from_history(driver, &name)?,
                Err(e @ RollbackError::Load(_)) => {
                    return Err(ApiError::unprocessable("strategy-refused", e.to_string()));
                }
            }
            driver.record_activation(&name);
            Ok::<_, ApiError>(strategy_state(driver, &name))
        })
        .await??;
    Ok(Json(answer))
}

/// Rolls back to the latest persisted activation before the current one that
/// differs from it (strategy or configuration): after a restart the slot
/// knows only its initial activation.
fn rollback_from_history(driver: &mut Driver, name: &str) -> Result<(), ApiError> {
    let entry = &driver.types[name];
    let current = (&entry.record.strategy, &entry.record.config);
    let previous =
        entry.activations.iter().rev().find(|a| (&a.strategy, &a.config) != current).cloned().ok_or_else(|| {
            ApiError::conflict("no-previous-strategy", "there is no previous strategy to roll back to")
        })?;
    let compiled = driver.compile(&previous.strategy).map_err(|m| ApiError::unprocessable("strategy-refused", m))?;
    let limits = driver.settings.limits;
    driver.types[name]
        .slot
        .activate_as(compiled, &previous.config, limits, ActivationCause::Rollback)
        .map_err(|e| ApiError::unprocessable("strategy-refused", e.to_string()))?;
    Ok(())
}

/// `PUT /v1/cluster/shards/{type}/strategy/shadow`
pub async fn set_shadow(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<ActivateRequest>,
) -> Result<Json<StrategyState>, ApiError> {
    let compiled = compile(&state, request.strategy.clone()).await?;
    let config = config_text(&request.config);
    let limits = state.limits;
    Ok(Json(
        state
            .driver
            .call(move |driver| {
                let entry = entry(driver, &name)?;
                entry
                    .slot
                    .set_shadow(Some((compiled, &config, limits)))
                    .map_err(|e| ApiError::unprocessable("strategy-refused", e.to_string()))?;
                Ok::<_, ApiError>(strategy_state(driver, &name))
            })
            .await??,
    ))
}

/// `DELETE /v1/cluster/shards/{type}/strategy/shadow`
pub async fn clear_shadow(State(state): State<AppState>, Params(name): Params<String>) -> Result<StatusCode, ApiError> {
    state
        .driver
        .call(move |driver| {
            entry(driver, &name)?.slot.set_shadow(None).expect("clearing cannot fail");
            Ok::<_, ApiError>(StatusCode::NO_CONTENT)
        })
        .await?
}
