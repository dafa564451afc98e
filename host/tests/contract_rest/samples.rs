//! The golden samples of the REST API's bodies: one value of every schema
//! in the node's OpenAPI document, filled in the way the node fills it
//! (every string non-empty, every number non-zero, every list non-empty,
//! every `Option` `Some`). A closed set of words (an enum schema) is sampled
//! as the list of all its words, in order.
//!
//! Each sample's schema name is its type's own `ToSchema::name()`, so a
//! sample cannot claim a schema its type does not describe.

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use shardalloc_guest::{Snapshot, SnapshotRegion};
use shardalloc_proto::api::{
    ActivateRequest, ActivationCause, ActivationInfo, AttributesRequest, AttributesWritten, ChangedBy, ClippedMove,
    ClusterLeader, ClusterNode, DecisionEvent, DrainOfType, DrainState, DryRunRequest, DryRunResponse, DryRunRound,
    ErrorBody, ErrorCode, ErrorDetail, EventKind, FreezeAction, FreezeEntry, FreezeInfo, FreezeRequest, FreezeScope,
    FreezeState, HandOff, HomeReason, NotStoppable, Placement, PlacementRequest, Placements, PlacementsWritten,
    PlanMove, PlanRegion, PlanRequest, PlanResponse, PlanRound, PlannedRegion, RebalanceRequest, RebalanceResponse,
    RegionState, RegionStatus, RegionSummary, Regions, RejectReason, Rejected, ShadowCounts, ShardHome, ShardId,
    ShardLoadState, ShardLoads, ShardState, StopBlocked, StopReason, Stoppable, StoredStrategy, Strategies,
    StrategyState, TypeState, TypeSummary, Types,
};
use shardalloc_proto::attributes::ShardAttributes;
use shardalloc_proto::capacity::RegionCapacity;
use utoipa::ToSchema;

/// A body: its JSON, and whether JSON reads back as it.
pub trait Body {
    /// The body as `serde_json` writes it.
    fn json(&self) -> Value;
    /// Reads `json` as the body's type and compares it with the body.
    fn read_back(&self, json: &Value) -> Result<(), String>;
}

impl<T: Serialize + DeserializeOwned + PartialEq + Debug> Body for T {
    fn json(&self) -> Value {
        serde_json::to_value(self).expect("a body serializes")
    }

    fn read_back(&self, json: &Value) -> Result<(), String> {
        match serde_json::from_value::<T>(json.clone()) {
            Ok(read) if read == *self => Ok(()),
            Ok(read) => Err(format!("it reads back as {read:?}, not as the sample {self:?}")),
            Err(e) => Err(format!("it does not read back as its type: {e}")),
        }
    }
}

/// A golden body and the name of its fixture.
pub struct Sample {
    /// The schema's name in `components.schemas`.
    pub schema: String,
    /// Tells several samples of one schema apart (`None`: the main one).
    pub form: Option<&'static str>,
    /// The value.
    pub body: Box<dyn Body>,
}

impl Sample {
    /// The fixture's file name under `contracts/rest/`.
    pub fn file(&self) -> String {
        match self.form {
            None => format!("{}.json", self.schema),
            Some(form) => format!("{}.{form}.json", self.schema),
        }
    }
}

fn one<T: ToSchema + Body + 'static>(body: T) -> Sample {
    Sample { schema: T::name().into_owned(), form: None, body: Box::new(body) }
}

fn form<T: ToSchema + Body + 'static>(form: &'static str, body: T) -> Sample {
    Sample { schema: T::name().into_owned(), form: Some(form), body: Box::new(body) }
}

/// Every word of a closed set, as one sample of the set's schema.
fn words<T>(all: &[T]) -> Sample
where
    T: ToSchema + Serialize + DeserializeOwned + PartialEq + Debug + Clone + 'static,
{
    Sample { schema: T::name().into_owned(), form: None, body: Box::new(all.to_vec()) }
}

/// The fixture form of each way a placement request is written (an
/// exhaustive `match`: a new form does not compile until it is named).
pub fn placement_request_form(request: &PlacementRequest) -> Option<&'static str> {
    match request {
        PlacementRequest::Many { .. } => None,
        PlacementRequest::One(_) => Some("one"),
    }
}

const SHARD: &str = "tenant-7/order-42";
const OTHER_SHARD: &str = "tenant-7/order-43";
const AT: u64 = 1_700_000_000_000;
const DIGEST: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn strings<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.into_iter().map(str::to_owned).collect()
}

fn map<V: Clone, const N: usize>(items: [(&str, V); N]) -> BTreeMap<String, V> {
    items.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn node(n: u32) -> ClusterNode {
    ClusterNode { name: format!("node-{n}"), url: format!("https://node-{n}.shardalloc.internal:7878") }
}

fn placement(shard: &str, target: &str) -> Placement {
    Placement { shard_id: shard.into(), target: target.to_owned() }
}

fn activation(name: &str, cause: ActivationCause, at_ms: u64) -> ActivationInfo {
    ActivationInfo {
        name: name.to_owned(),
        version: "0.1.0".to_owned(),
        digest: DIGEST.to_owned(),
        config: Some(json!({"label": "zone", "spread": 2})),
        cause,
        at_ms,
    }
}

fn stored_strategy() -> StoredStrategy {
    StoredStrategy {
        digest: DIGEST.to_owned(),
        name: "zone-spread".to_owned(),
        version: "0.3.1".to_owned(),
        size: 48_213,
        active_in: strings(["cart", "session"]),
        contract: Some("shardalloc:strategy@0.2.0".to_owned()),
    }
}

fn snapshot_region() -> SnapshotRegion {
    SnapshotRegion {
        address: "10.0.0.1:2552".to_owned(),
        shards: strings([SHARD, OTHER_SHARD]),
        status: shardalloc_guest::RegionStatus::Leaving,
        app_version: "1.4.0".to_owned(),
        join_order: Some(2),
        labels: map([("zone", "eu-central-1a".to_owned())]),
        metrics: map([("cpu", 0.75), ("mem-used-ratio", 0.5)]),
        proxy_only: true,
        draining: true,
        capacity: Some(1200.0),
        quantities: map([("load", 1200.0), ("memory-mb", 4096.0)]),
    }
}

/// Every golden body.
pub fn samples() -> Vec<Sample> {
    let error = ErrorDetail { code: "unknown-type".to_owned(), message: "no entity type is named \"cart\"".to_owned() };
    let placements = vec![placement(SHARD, "10.0.0.3:2552"), placement(OTHER_SHARD, "10.0.0.2:2552")];
    let requests = [
        PlacementRequest::Many { placements: placements.clone() },
        PlacementRequest::One(placement(SHARD, "10.0.0.3:2552")),
    ];
    let type_summary =
        TypeSummary { name: "cart".to_owned(), regions: 3, shards: 1_200, strategy: "least-shard@0.1.0".to_owned() };
    let region_state = RegionState {
        address: "10.0.0.1:2552".to_owned(),
        incarnation: AT,
        status: RegionStatus::Up,
        draining: true,
        proxy_only: true,
        labels: map([("dc", "fra1".to_owned()), ("zone", "eu-central-1a".to_owned())]),
        shard_count: 400,
        load: Some(5210.75),
        registered_at_ms: Some(AT),
        capacity: RegionCapacity::new([("load", 1200.0), ("memory-mb", 4096.0)]).unwrap(),
    };
    let hand_off = HandOff { shard_id: OTHER_SHARD.to_owned(), from: "10.0.0.2:2552".to_owned() };
    let shard_home =
        ShardHome { shard_id: SHARD.to_owned(), region: "10.0.0.1:2552".to_owned(), reason: HomeReason::Fallback };
    let region_summary = RegionSummary {
        address: "10.0.0.1:2552".to_owned(),
        types: map([("cart", RegionStatus::Up), ("session", RegionStatus::Unreachable)]),
        shards: 800,
        draining: true,
    };
    let clipped = ClippedMove { shard_id: "tenant-9/order-7".to_owned(), limit: "move-cooldown".to_owned() };
    let round = DryRunRound {
        moved: strings([SHARD]),
        counts: map([("10.0.0.1:2552", 399), ("10.0.0.2:2552", 401)]),
        clipped: vec![clipped.clone()],
    };
    let plan_region = PlanRegion {
        address: "10.0.0.9:2552".to_owned(),
        labels: map([("zone", "eu-central-1b".to_owned())]),
        capacity: Some(800.0),
    };
    let plan_move =
        PlanMove { shard_id: SHARD.to_owned(), from: "10.0.0.3:2552".to_owned(), to: Some("10.0.0.9:2552".to_owned()) };
    let planned_region = PlannedRegion { address: "10.0.0.9:2552".to_owned(), shards: 7, load: Some(87.5) };
    let drain_of_type = DrainOfType {
        entity_type: "cart".to_owned(),
        draining: true,
        shards_left: 12,
        hand_offs_in_flight: 5,
        started_at_ms: Some(AT),
    };
    let stop_blocked = StopBlocked {
        entity_type: Some("cart".to_owned()),
        reason: StopReason::ZoneLeftEmpty,
        detail: "zone eu-1 would have no region left to take shards".to_owned(),
    };
    let freeze_info = FreezeInfo {
        scope: FreezeScope::Maintenance,
        reason: "3 of 10 regions lost in 60 s".to_owned(),
        since_ms: AT,
        until_ms: Some(AT + 3_600_000),
        strict: true,
    };
    let freeze_entry = FreezeEntry {
        at_ms: AT,
        action: FreezeAction::Frozen,
        scope: FreezeScope::Type,
        by: ChangedBy::Operator,
        reason: "deploy 42".to_owned(),
        until_ms: Some(AT + 3_600_000),
        strict: true,
    };
    let rejected = Rejected { shard_id: OTHER_SHARD.to_owned(), reason: RejectReason::AlreadyMoving };
    let mut samples = vec![
        one(node(1)),
        one(ClusterLeader { leader: Some(node(1)), self_: node(2), term: 7 }),
        one(error.clone()),
        one(ErrorBody { error }),
        one(ShardId::from(SHARD)),
        one(placement(SHARD, "10.0.0.3:2552")),
        one(Placements { placements: placements.clone(), next: Some(OTHER_SHARD.to_owned()) }),
        one(PlacementsWritten { written: placements, total: 12 }),
        one(RebalanceRequest { shard_ids: vec![SHARD.into(), OTHER_SHARD.into()], immediate: true }),
        one(RebalanceResponse { accepted: strings([SHARD]), rejected: vec![rejected.clone()] }),
        one(rejected),
        one(Types { types: vec![type_summary.clone()], next: Some("cart".to_owned()) }),
        one(type_summary),
        one(TypeState {
            name: "cart".to_owned(),
            regions: vec![region_state.clone()],
            hand_offs: vec![hand_off.clone()],
            strategy: activation("zone-spread", ActivationCause::Operator, AT),
            shards: vec![shard_home.clone()],
            next: Some(SHARD.to_owned()),
        }),
        one(region_state),
        one(hand_off),
        one(shard_home),
        one(ShardState {
            shard_id: SHARD.to_owned(),
            home: Some("10.0.0.1:2552".to_owned()),
            reason: Some(HomeReason::Strategy),
            detail: Some("zone-spread@0.3.1".to_owned()),
            since_ms: Some(AT),
            moving: true,
            placement: Some("10.0.0.3:2552".to_owned()),
            load: 1250.5,
            moved_ms: Some(AT),
            epoch: Some(17),
            attributes: ShardAttributes::new([("tenant", "acme"), ("tier", "gold")]).unwrap(),
        }),
        one(AttributesRequest {
            shards: [
                (SHARD.to_owned(), ShardAttributes::new([("tenant", "acme")]).unwrap()),
                ("t-2".to_owned(), ShardAttributes::default()),
            ]
            .into(),
        }),
        one(AttributesWritten { changed: vec![SHARD.to_owned()] }),
        one(ShardAttributes::new([("tenant", "acme"), ("tier", "gold")]).unwrap()),
        one(RegionCapacity::new([("load", 1200.0), ("memory-mb", 4096.0)]).unwrap()),
        one(ShardLoads {
            shards: vec![ShardLoadState {
                shard_id: SHARD.to_owned(),
                home: Some("10.0.0.1:2552".to_owned()),
                load: 1250.5,
                moved_ms: Some(AT),
            }],
            next: Some("313235302e353a74".to_owned()),
        }),
        one(ShardLoadState { shard_id: SHARD.to_owned(), home: None, load: 0.25, moved_ms: None }),
        one(Regions { regions: vec![region_summary.clone()], next: Some("10.0.0.1:2552".to_owned()) }),
        one(region_summary),
        one(stored_strategy()),
        one(Strategies { strategies: vec![stored_strategy()], next: Some(DIGEST.to_owned()) }),
        one(ActivateRequest { strategy: DIGEST.to_owned(), config: Some(json!({"label": "zone"})), force: true }),
        one(DryRunRequest {
            strategy: "hash".to_owned(),
            config: Some(json!({"seed": 42})),
            rounds: 5,
            shard_ids: vec![SHARD.into(), OTHER_SHARD.into()],
        }),
        one(DryRunResponse {
            strategy: "hash@0.1.0".to_owned(),
            allocations: map([(SHARD, Some("10.0.0.1:2552".to_owned())), (OTHER_SHARD, None)]),
            rebalance: strings([SHARD]),
            rounds: vec![round.clone()],
        }),
        one(round),
        one(clipped),
        one(activation("zone-spread", ActivationCause::AutoRollback, AT)),
        one(StrategyState {
            active: activation("zone-spread", ActivationCause::Rollback, AT + 2_000),
            history: vec![
                activation("least-shard", ActivationCause::Initial, AT),
                activation("zone-spread", ActivationCause::Rollback, AT + 2_000),
            ],
            next: Some("2".to_owned()),
            shadow: Some(activation("hash", ActivationCause::Operator, AT + 1_000)),
            shadow_calls: 5_000,
            shadow_disagreements: 12,
            shadow_history: vec![ShadowCounts {
                candidate: "zone-spread@1.2.0".to_owned(),
                calls: 900,
                disagreements: 4,
            }],
        }),
        one(ShadowCounts { candidate: "zone-spread@1.2.0".to_owned(), calls: 900, disagreements: 4 }),
        one(DecisionEvent {
            seq: 981,
            kind: EventKind::ShardHomed,
            at_ms: AT,
            entity_type: "cart".to_owned(),
            shard_id: Some(SHARD.to_owned()),
            region: Some("10.0.0.1:2552".to_owned()),
            reason: Some(HomeReason::Strategy),
            strategy: Some("zone-spread@0.3.1".to_owned()),
            target: Some("10.0.0.3:2552".to_owned()),
            cause: Some("operator".to_owned()),
            by: Some(ChangedBy::Operator),
            detail: Some("the placement's target is draining".to_owned()),
            missed: Some(3),
            load: Some(5210.75),
            until_ms: Some(AT + 3_600_000),
        }),
        one(FreezeRequest {
            for_seconds: Some(3600),
            until: Some(AT + 3_600_000),
            reason: "deploy 42".to_owned(),
            strict: true,
        }),
        one(freeze_info.clone()),
        one(freeze_entry.clone()),
        one(plan_region.clone()),
        one(PlanRequest {
            add_regions: vec![plan_region],
            remove_regions: strings(["10.0.0.2:2552"]),
            drain: strings(["10.0.0.3:2552"]),
            loads: map([(SHARD, 12.5)]),
            strategy: Some("load-balance".to_owned()),
            config: Some(json!({"tolerance": 0.1})),
            rounds: 5,
        }),
        one(plan_move.clone()),
        one(PlanRound {
            round: 1,
            moves: vec![plan_move.clone()],
            counts: map([("10.0.0.9:2552", 7)]),
            clipped: vec![ClippedMove { shard_id: OTHER_SHARD.to_owned(), limit: "move-cooldown".to_owned() }],
        }),
        one(planned_region.clone()),
        one(PlanResponse {
            strategy: "load-balance@0.1.0".to_owned(),
            displaced: vec![plan_move.clone()],
            rounds: vec![PlanRound {
                round: 1,
                moves: vec![plan_move],
                counts: map([("10.0.0.9:2552", 7)]),
                clipped: vec![ClippedMove { shard_id: OTHER_SHARD.to_owned(), limit: "move-cooldown".to_owned() }],
            }],
            regions: vec![planned_region],
        }),
        one(drain_of_type.clone()),
        one(DrainState {
            address: "10.0.0.1:2552".to_owned(),
            draining: true,
            shards_left: 12,
            hand_offs_in_flight: 5,
            started_at_ms: Some(AT),
            types: vec![drain_of_type],
        }),
        one(stop_blocked.clone()),
        one(NotStoppable { address: "10.0.0.2:2552".to_owned(), reasons: vec![stop_blocked.clone()] }),
        one(Stoppable {
            stoppable: strings(["10.0.0.1:2552"]),
            not_stoppable: vec![NotStoppable { address: "10.0.0.2:2552".to_owned(), reasons: vec![stop_blocked] }],
        }),
        one(FreezeState { frozen: true, strict: true, freezes: vec![freeze_info], history: vec![freeze_entry] }),
        one(Snapshot {
            regions: vec![snapshot_region()],
            in_progress: strings([OTHER_SHARD]),
            placements: map([(SHARD, "10.0.0.3:2552".to_owned())]),
            signal: Some(json!({"shards": {"42": "eu"}})),
        }),
        one(snapshot_region()),
        words(RegionStatus::ALL),
        words(HomeReason::ALL),
        words(ActivationCause::ALL),
        words(RejectReason::ALL),
        words(EventKind::ALL),
        words(ChangedBy::ALL),
        words(FreezeScope::ALL),
        words(StopReason::ALL),
        words(FreezeAction::ALL),
        words(ErrorCode::ALL),
    ];
    for request in requests {
        samples.push(match placement_request_form(&request) {
            None => one(request),
            Some(name) => form(name, request),
        });
    }
    samples
}
