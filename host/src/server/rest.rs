//! The admin REST API's cluster endpoints: types, their state and snapshot,
//! placements, manual rebalance, signal, regions and drain, and the "why is
//! shard S on region R" endpoint. Strategies are in `strategies.rs`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use shardalloc_client::api::{
    HandOff, Placement, Placements, RebalanceRequest, RebalanceResponse, RegionState, RegionSummary, Regions, Rejected,
    ShardId, ShardState, TypeState, TypeSummary, Types,
};

use super::AppState;
use super::api_error::ApiError;
use super::body::{JsonBody, Params, RawBody, parse};
use super::driver::{Driver, TypeEntry};
use super::strategies::activation_info;
use crate::coordinator::{NotAccepted, OperatorRequest, PlacementError, Reply, Stamp};
use crate::strategy::external::AllocationReason;

/// Most shards one rebalance or placement request may name.
pub const MAX_SHARDS_PER_REQUEST: usize = 10_000;
/// Longest region address, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 256;

/// A type by name, or 404.
pub(super) fn entry<'d>(driver: &'d mut Driver, name: &str) -> Result<&'d mut TypeEntry, ApiError> {
    driver.types.get_mut(name).ok_or_else(|| ApiError::unknown_type(name))
}

/// A shard id from a request, checked; the error names `field`.
pub(super) fn shard_id(id: &ShardId, field: &str) -> Result<String, ApiError> {
    id.validate().map(str::to_owned).map_err(|m| ApiError::bad_request("invalid-shard-id", format!("{field}: {m}")))
}

fn placements_of(entry: &TypeEntry) -> Placements {
    let placements = entry
        .coordinator
        .durable()
        .live_placements()
        .map(|(s, t)| Placement { shard_id: ShardId(s.clone()), target: t.clone() })
        .collect();
    Placements { placements }
}

/// `GET /v1/cluster/shards`
pub async fn types(State(state): State<AppState>) -> Result<Json<Types>, ApiError> {
    let types = state
        .driver
        .call(|driver| {
            driver
                .types
                .iter()
                .map(|(name, entry)| TypeSummary {
                    name: name.clone(),
                    regions: entry.coordinator.durable().regions.len(),
                    shards: entry.coordinator.durable().homes.len(),
                    strategy: entry.slot.active().label(),
                })
                .collect()
        })
        .await?;
    Ok(Json(Types { types }))
}

/// `GET /v1/cluster/shards/{type}`
pub async fn type_state(
    State(state): State<AppState>,
    Params(name): Params<String>,
) -> Result<Json<TypeState>, ApiError> {
    let answer = state
        .driver
        .call(move |driver| {
            let entry = entry(driver, &name)?;
            let durable = entry.coordinator.durable();
            let mut regions: Vec<&crate::coordinator::RegionRecord> = durable.regions.values().collect();
            regions.sort_by_key(|r| r.join_order);
            let regions = regions
                .into_iter()
                .map(|r| RegionState {
                    address: r.address.clone(),
                    incarnation: r.incarnation,
                    status: entry.region_status(&r.address).to_owned(),
                    draining: r.draining,
                    proxy_only: r.proxy_only,
                    labels: r.labels.clone(),
                    shards: r.shards.clone(),
                })
                .collect();
            let hand_offs = durable
                .handoffs
                .iter()
                .map(|(shard, from)| HandOff { shard_id: shard.clone(), from: from.clone() })
                .collect();
            let strategy = entry.activations.last().map(activation_info).unwrap_or_else(|| {
                super::strategies::slot_activation_info(&entry.slot.active(), &entry.record.strategy)
            });
            Ok::<_, ApiError>(TypeState {
                name,
                regions,
                hand_offs,
                placements: placements_of(entry).placements,
                strategy,
            })
        })
        .await??;
    Ok(Json(answer))
}

/// `GET /v1/cluster/shards/{type}/snapshot`: the format `shardalloc strategy eval` reads.
pub async fn snapshot(State(state): State<AppState>, Params(name): Params<String>) -> Result<Response, ApiError> {
    let snapshot =
        state.driver.call(move |driver| Ok::<_, ApiError>(entry(driver, &name)?.coordinator.snapshot())).await??;
    Ok(Json(snapshot).into_response())
}

/// `GET /v1/cluster/shards/{type}/placements`
pub async fn list_placements(
    State(state): State<AppState>,
    Params(name): Params<String>,
) -> Result<Json<Placements>, ApiError> {
    Ok(Json(state.driver.call(move |driver| Ok::<_, ApiError>(placements_of(entry(driver, &name)?))).await??))
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

/// `POST /v1/cluster/shards/{type}/placements`
pub async fn set_placements(
    State(state): State<AppState>,
    Params(name): Params<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Placements>, ApiError> {
    let placements = placement_request(body)?;
    let origin = state.origin.clone();
    let type_name = name.clone();
    let reply = state
        .driver
        .call(move |driver| {
            let stamp = Stamp::new(driver.stamp_time(), origin);
            driver.operator(&type_name, OperatorRequest::SetPlacements { placements, stamp })
        })
        .await?;
    let Some(rx) = reply else { return Err(ApiError::unknown_type(&name)) };
    match rx.await.map_err(|_| super::driver::Unavailable::Stopped)? {
        Reply::PlacementsWritten { .. } => {}
        Reply::PlacementRefused(error) => return Err(placement_error(error)),
        other => return Err(unexpected(other)),
    }
    list_placements(State(state), Params(name)).await
}

fn placement_error(error: PlacementError) -> ApiError {
    match error {
        PlacementError::TooMany { .. } => ApiError::conflict("too-many-placements", error.to_string()),
        _ => ApiError::bad_request("invalid-placement", error.to_string()),
    }
}

fn unexpected(reply: Reply) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("unexpected coordinator reply {reply:?}"))
}

/// `DELETE /v1/cluster/shards/{type}/placements/{shardId}`
pub async fn remove_placement(
    State(state): State<AppState>,
    Params((name, shard)): Params<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let shard = shard_id(&ShardId(shard), "shardId")?;
    let origin = state.origin.clone();
    let rx = state
        .driver
        .call(move |driver| {
            let entry = entry(driver, &name)?;
            if entry.coordinator.durable().placements.get(&shard).is_none_or(|p| p.target.is_none()) {
                return Err(ApiError::not_found("no-placement", format!("shard {shard:?} of {name} has no placement")));
            }
            let stamp = Stamp::new(driver.stamp_time(), origin);
            Ok(driver.operator(&name, OperatorRequest::RemovePlacements { shards: vec![shard], stamp }))
        })
        .await??;
    let rx = rx.expect("the type exists");
    match rx.await.map_err(|_| super::driver::Unavailable::Stopped)? {
        Reply::PlacementsWritten { .. } => Ok(StatusCode::NO_CONTENT),
        Reply::PlacementRefused(error) => Err(placement_error(error)),
        other => Err(unexpected(other)),
    }
}

fn reason_name(reason: &NotAccepted) -> &'static str {
    match reason {
        NotAccepted::Unknown => "unknown",
        NotAccepted::Unallocated => "unallocated",
        NotAccepted::AlreadyMoving => "already-moving",
        NotAccepted::QueueFull => "queue-full",
    }
}

/// `POST /v1/cluster/shards/{type}/rebalance`
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
    let shards = request
        .shard_ids
        .iter()
        .enumerate()
        .map(|(i, id)| shard_id(id, &format!("shardIds[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let op = OperatorRequest::RebalanceNow { shards, immediate: request.immediate };
    match state.driver.operator(&name, op).await? {
        None => Err(ApiError::unknown_type(&name)),
        Some(Reply::Rebalance { accepted, rejected }) => {
            let rejected = rejected
                .into_iter()
                .map(|(shard, why)| Rejected { shard_id: shard, reason: reason_name(&why).to_owned() })
                .collect();
            Ok((StatusCode::ACCEPTED, Json(RebalanceResponse { accepted, rejected })))
        }
        Some(other) => Err(unexpected(other)),
    }
}

/// `PUT /v1/cluster/shards/{type}/signal`: any JSON (`null` clears it).
pub async fn set_signal(
    State(state): State<AppState>,
    Params(name): Params<String>,
    RawBody(body): RawBody,
) -> Result<StatusCode, ApiError> {
    let value: Value = parse(&body)?;
    let signal = (!value.is_null()).then(|| value.to_string());
    match state.driver.operator(&name, OperatorRequest::SetSignal { signal }).await? {
        None => Err(ApiError::unknown_type(&name)),
        Some(Reply::Done) => Ok(StatusCode::NO_CONTENT),
        Some(Reply::SignalRefused(message)) => Err(ApiError::bad_request("invalid-signal", message)),
        Some(other) => Err(unexpected(other)),
    }
}

/// `GET /v1/cluster/regions`
pub async fn regions(State(state): State<AppState>) -> Result<Json<Regions>, ApiError> {
    let regions = state
        .driver
        .call(|driver| {
            let mut by_address: BTreeMap<String, RegionSummary> = BTreeMap::new();
            for (name, entry) in &driver.types {
                for record in entry.coordinator.durable().regions.values() {
                    let summary = by_address.entry(record.address.clone()).or_insert_with(|| RegionSummary {
                        address: record.address.clone(),
                        types: BTreeMap::new(),
                        shards: 0,
                        draining: true,
                    });
                    summary.types.insert(name.clone(), entry.region_status(&record.address).to_owned());
                    summary.shards += record.shards.len();
                    summary.draining &= record.draining;
                }
            }
            by_address.into_values().collect()
        })
        .await?;
    Ok(Json(Regions { regions }))
}

async fn set_draining(state: AppState, address: String, draining: bool) -> Result<StatusCode, ApiError> {
    let receivers = state
        .driver
        .call(move |driver| {
            let names: Vec<String> = driver
                .types
                .iter()
                .filter(|(_, e)| e.coordinator.durable().regions.contains_key(&address))
                .map(|(n, _)| n.clone())
                .collect();
            if names.is_empty() {
                return Err(ApiError::not_found("unknown-region", format!("no region {address:?} is registered")));
            }
            let op = |address: &str| {
                if draining {
                    OperatorRequest::Drain { address: address.to_owned() }
                } else {
                    OperatorRequest::Undrain { address: address.to_owned() }
                }
            };
            Ok(names.iter().filter_map(|n| driver.operator(n, op(&address))).collect::<Vec<_>>())
        })
        .await??;
    for rx in receivers {
        rx.await.map_err(|_| super::driver::Unavailable::Stopped)?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/cluster/regions/{address}/drain`
pub async fn drain(State(state): State<AppState>, Params(address): Params<String>) -> Result<StatusCode, ApiError> {
    set_draining(state, address, true).await
}

/// `DELETE /v1/cluster/regions/{address}/drain`
pub async fn undrain(State(state): State<AppState>, Params(address): Params<String>) -> Result<StatusCode, ApiError> {
    set_draining(state, address, false).await
}

/// `GET /v1/cluster/shards/{type}/shards/{shardId}`: its home and why.
pub async fn shard(
    State(state): State<AppState>,
    Params((name, shard)): Params<(String, String)>,
) -> Result<Json<ShardState>, ApiError> {
    let shard = shard_id(&ShardId(shard), "shardId")?;
    let answer = state
        .driver
        .call(move |driver| {
            let entry = entry(driver, &name)?;
            let durable = entry.coordinator.durable();
            let home = durable.homes.get(&shard);
            let (reason, detail) = match home.map(|h| &h.reason) {
                None => (None, None),
                Some(AllocationReason::Placement) => (Some("placement"), None),
                Some(AllocationReason::Strategy { name, version }) => {
                    (Some("strategy"), Some(format!("{name}@{version}")))
                }
                Some(AllocationReason::Fallback(error)) => (Some("fallback"), Some(error.to_string())),
            };
            Ok::<_, ApiError>(ShardState {
                shard_id: shard.clone(),
                home: home.map(|h| h.region.clone()),
                reason: reason.map(str::to_owned),
                detail,
                since_ms: home.map(|h| h.at),
                moving: durable.handoffs.contains_key(&shard),
                placement: durable.placements.get(&shard).and_then(|p| p.target.clone()),
            })
        })
        .await??;
    if answer.home.is_none() && !answer.moving && answer.placement.is_none() {
        return Err(ApiError::not_found("unknown-shard", format!("shard {:?} has no home", answer.shard_id)));
    }
    Ok(Json(answer))
}
