//! What-if plans (`POST /v1/cluster/shards/{type}/plan`): the live strategy,
//! or a candidate, run on the type's live view changed as asked
//! (`strategy/plan.rs`), off the driver thread, within the dry runs' limits
//! (`dry_runs.rs`). Nothing changes.

use std::time::Instant;

use axum::Json;
use axum::extract::State;
use shardalloc_proto::api::{ClippedMove, PlanMove, PlanRequest, PlanResponse, PlanRound, PlannedRegion};

use super::blocking;
use super::strategies::candidate;
use crate::server::api_error::{ApiError, ErrorCode};
use crate::server::body::{JsonBody, Params};
use crate::server::dry_runs::DRY_RUN_DEADLINE;
use crate::server::openapi::{
    BadRequest, Conflict, DryRunBusy, Internal, NotFound, TooLarge, Unauthorized, Unavailable, Unprocessable,
};
use crate::server::state::AppState;
use crate::strategy::plan::{Changes, NewRegion, PlanError, plan};
use crate::strategy::simulate::Move;

fn planned(m: Move) -> PlanMove {
    PlanMove { shard_id: m.shard, from: m.from, to: m.to }
}

/// Plan a change
///
/// What the active strategy (or `strategy` with `config`) would do on the
/// type's live view with `addRegions` added, `removeRegions` removed and
/// `drain` drained, its shards carrying their live loads with `loads` over
/// them: round 0 re-homes the removed and drained regions' shards, then
/// `rounds` rebalance rounds, clipped by the type's churn limits. Nothing
/// changes. 400 `invalid-plan` for a region the type lacks (or has, to
/// add), a load that is not a finite number at or above 0, or too much
/// asked (100 rounds, 1,000 regions, 100,000 loads); 409 `empty-cluster`
/// when the type has no region or the plan leaves none that can take
/// shards; 422 when the strategy fails or does not finish within 30 s; 429
/// `dry-run-busy` while a dry run or plan of the type, or two in all, run.
#[utoipa::path(
    post, path = "/v1/cluster/shards/{type}/plan", operation_id = "planType", tag = "strategies",
    params(("type" = String, Path, description = "The entity type.")),
    request_body(content = PlanRequest, description = "The changes.",
        example = json!({"addRegions": [{"address": "10.0.0.9:2552", "labels": {"zone": "b"}}], "drain": ["10.0.0.3:2552"], "rounds": 5})),
    responses(
        (status = 200, description = "The moves of round 0 and of each round, and every region at the end. Nothing changed.", body = PlanResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthorized),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = TooLarge),
        (status = 422, response = Unprocessable),
        (status = 429, response = DryRunBusy),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn plan_type(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(request): JsonBody<PlanRequest>,
) -> Result<Json<PlanResponse>, ApiError> {
    let slot = state.dry_runs.start(&name)?;
    let (snapshot, paced, loads, active) = super::types::plan_inputs(&state, name).await?;
    let (strategy, config) = match &request.strategy {
        Some(strategy) => (strategy.clone(), request.config.clone()),
        None if request.config.is_some() => {
            let message = "config without strategy: name the strategy the configuration is for";
            return Err(ApiError::bad_request(ErrorCode::InvalidPlan, message));
        }
        None => (active.digest.clone(), active.config.clone()),
    };
    let candidate = candidate(&state, &strategy, &config).await?;
    let changes = Changes {
        add: (request.add_regions.into_iter())
            .map(|r| NewRegion { address: r.address, labels: r.labels, capacity: r.capacity })
            .collect(),
        remove: request.remove_regions,
        drain: request.drain,
        loads: request.loads,
    };
    let rounds = request.rounds;
    let (engine, limits) = (state.engine.clone(), state.limits);
    let answer = blocking(move || {
        let _slot = slot;
        let compiled = candidate.compiled;
        let label = format!("{}@{}", compiled.info.name, compiled.info.version);
        let instance = engine.instantiate(&compiled, &candidate.config, limits).map_err(|e| {
            ApiError::unprocessable(ErrorCode::StrategyRefused, format!("the strategy does not load: {e}"))
        })?;
        let deadline = Instant::now() + DRY_RUN_DEADLINE;
        let done =
            plan(Box::new(instance), &snapshot, loads, changes, rounds, deadline, paced).map_err(|e| match e {
                PlanError::EmptyCluster(_) => ApiError::conflict(ErrorCode::EmptyCluster, e.to_string()),
                PlanError::Failed(_) | PlanError::TimedOut(_) => {
                    ApiError::unprocessable(ErrorCode::DryRunFailed, format!("{label} failed the plan: {e}"))
                }
                _ => ApiError::bad_request(ErrorCode::InvalidPlan, e.to_string()),
            })?;
        Ok::<_, ApiError>(PlanResponse {
            strategy: label,
            displaced: done.displaced.into_iter().map(planned).collect(),
            rounds: (done.rounds.into_iter())
                .map(|r| PlanRound {
                    round: r.round,
                    moves: r.moves.into_iter().map(planned).collect(),
                    counts: r.counts,
                    clipped: (r.clipped.into_iter())
                        .map(|c| ClippedMove { shard_id: c.shard, limit: c.limit.into() })
                        .collect(),
                })
                .collect(),
            regions: (done.regions.into_iter())
                .map(|(address, shards, load)| PlannedRegion { address, shards, load })
                .collect(),
        })
    })
    .await??;
    Ok(Json(answer))
}
