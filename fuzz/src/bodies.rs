//! Every REST body, as the node reads requests and the clients read
//! answers: any JSON is a value or an error, and a value survives its own
//! encoding. The snapshot `shardalloc strategy eval` reads is then viewed
//! and decided on as that command does. The first byte chooses the type.

use serde::Serialize;
use serde::de::DeserializeOwned;
use shardalloc::strategy::external::ExternalAllocation;
use shardalloc::strategy::guarded::Guarded;
use shardalloc::strategy::{ClusterView, builtin};
use shardalloc_client::api::*;
use shardalloc_guest::Snapshot;

fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(json: &[u8]) {
    if let Ok(value) = serde_json::from_slice::<T>(json) {
        let again = serde_json::to_vec(&value).expect("a decoded body encodes");
        let back: T = serde_json::from_slice(&again).expect("an encoded body decodes");
        let twice = serde_json::to_vec(&back).expect("a decoded body encodes");
        assert_eq!(twice, again, "a body changed through its own encoding: {value:?} became {back:?}");
    }
}

/// The snapshot path of `strategy eval`: parse, check, view, decide.
fn snapshot(json: &[u8]) {
    let Ok(text) = std::str::from_utf8(json) else { return };
    let Ok(snapshot) = Snapshot::from_json(text) else { return };
    let view = ClusterView::from_snapshot(&snapshot);
    let strategy = builtin::native("least-shard", "").expect("a built-in").expect("configured");
    let mut external = ExternalAllocation::new(Guarded::new(strategy));
    for (shard, target) in &snapshot.placements {
        external.set_placement(shard.clone(), target.clone());
    }
    if let Some(shard) = snapshot.regions.iter().flat_map(|r| r.shards.iter()).next() {
        let _ = external.allocate(&view, shard, None);
    }
    let _ = external.rebalance(&view);
}

/// One REST body (or the snapshot), chosen by the first byte.
pub fn rest_bodies(data: &[u8]) {
    let Some((choice, json)) = data.split_first() else { return };
    match choice % 30 {
        0 => round_trip::<DecisionEvent>(json),
        1 => round_trip::<ClusterLeader>(json),
        2 => round_trip::<ErrorBody>(json),
        3 => round_trip::<Placement>(json),
        4 => round_trip::<PlacementRequest>(json),
        5 => round_trip::<Placements>(json),
        6 => round_trip::<PlacementsWritten>(json),
        7 => round_trip::<RebalanceRequest>(json),
        8 => round_trip::<RebalanceResponse>(json),
        9 => round_trip::<Types>(json),
        10 => round_trip::<TypeState>(json),
        11 => round_trip::<ShardState>(json),
        12 => round_trip::<Regions>(json),
        13 => round_trip::<StoredStrategy>(json),
        14 => round_trip::<Strategies>(json),
        15 => round_trip::<ActivateRequest>(json),
        16 => round_trip::<DryRunRequest>(json),
        17 => round_trip::<DryRunResponse>(json),
        18 => round_trip::<StrategyState>(json),
        19 => round_trip::<ClusterNode>(json),
        20 => round_trip::<RegionSummary>(json),
        21 => round_trip::<ActivationInfo>(json),
        22 => {
            if let Ok(id) = serde_json::from_slice::<ShardId>(json) {
                let _ = id.validate();
            }
        }
        _ => snapshot(json),
    }
}
