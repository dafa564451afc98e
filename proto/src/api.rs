//! The admin REST API's bodies, shared by the node (which serves them) and
//! the client crate's `shardalloc_client::admin` (which sends them). JSON
//! field names are camelCase.
//!
//! Shard ids are strings. Where a request carries one, a JSON integer is
//! accepted as its decimal string ([`ShardId`]); any other number is refused.
//!
//! Closed sets of words (a region's status, why a shard is where it is, why a
//! strategy became active, why a rebalance refused a shard, an error's code:
//! [`ErrorCode`]) are enums that serialize as kebab-case strings. With the
//! `openapi` feature every body also describes itself as an OpenAPI schema
//! (`utoipa::ToSchema`); the node builds its `/v1/openapi.json` from them.

use std::collections::BTreeMap;
use std::fmt;

use crate::attributes::ShardAttributes;
use crate::capacity::RegionCapacity;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::protocol::MAX_SHARD_ID_BYTES;

/// A shard id as requests carry it: a string, or a JSON integer taken as its
/// decimal string (`42` is `"42"`). Floats are refused. Emptiness and length
/// are checked by [`ShardId::validate`], so the error can name the field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub String);

impl ShardId {
    /// Checks that the id is 1 to [`MAX_SHARD_ID_BYTES`] bytes without
    /// control characters.
    pub fn validate(&self) -> Result<&str, String> {
        crate::protocol::check_shard_id(&self.0).map(|()| self.0.as_str())
    }
}

impl From<&str> for ShardId {
    fn from(s: &str) -> Self {
        ShardId(s.to_owned())
    }
}

impl From<String> for ShardId {
    fn from(s: String) -> Self {
        ShardId(s)
    }
}

impl From<u64> for ShardId {
    fn from(n: u64) -> Self {
        ShardId(n.to_string())
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ShardId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(MAX_SHARD_ID_BYTES)))
            .item(ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some(
                "A shard id: 1 to 256 bytes. In request bodies a JSON integer is taken as its decimal string; other numbers are refused.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ShardId {}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ShardId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ShardId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ShardIdVisitor;
        impl Visitor<'_> for ShardIdVisitor {
            type Value = ShardId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a shard id: a string or an integer")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardId, E> {
                Ok(ShardId(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ShardId, E> {
                Ok(ShardId(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ShardId, E> {
                Ok(ShardId(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ShardId, E> {
                Ok(ShardId(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ShardId, E> {
                Err(E::custom(format!("a shard id must be a string or an integer, not the number {v}")))
            }
        }
        deserializer.deserialize_any(ShardIdVisitor)
    }
}

/// Defines a closed set of words: an enum whose every variant is spelt, in
/// JSON, by `as_str` and by `Display`, as its one literal; `ALL` lists them,
/// `from_word` reads one, and a word compares with `&str`.
macro_rules! words {
    // `$word` is a `tt`, not a `literal`: a `literal` reaches derive macros
    // wrapped in an invisible group, which utoipa does not read as a name.
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $word:tt,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant,)+
        }

        impl $name {
            /// Every word, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The word as JSON spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// The variant spelt `word`, if any.
            pub fn from_word(word: &str) -> Option<Self> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

words! {
    /// A registered region's status in one entity type.
    RegionStatus {
        /// Heartbeating; gets shards unless draining or proxy-only.
        Up => "up",
        /// Missed its heartbeats; removed (its shards re-homed) if it stays silent.
        Unreachable => "unreachable",
        /// Leaving gracefully: its shards are handed off.
        Leaving => "leaving",
    }
}

words! {
    /// Why a shard has the home it has.
    HomeReason {
        /// An operator's placement.
        Placement => "placement",
        /// The active strategy's answer.
        Strategy => "strategy",
        /// The built-in fallback, because the strategy failed.
        Fallback => "fallback",
    }
}

words! {
    /// Why a strategy became a type's active strategy.
    ActivationCause {
        /// The type's first strategy.
        Initial => "initial",
        /// An operator activated it.
        Operator => "operator",
        /// An operator rolled back to it.
        Rollback => "rollback",
        /// The node rolled back to it because its successor failed too often.
        AutoRollback => "auto-rollback",
    }
}

words! {
    /// Why a rebalance request did not accept a shard.
    RejectReason {
        /// The coordinator has never heard of it.
        Unknown => "unknown",
        /// It has no home now.
        Unallocated => "unallocated",
        /// Its hand-off is in progress or queued already.
        AlreadyMoving => "already-moving",
        /// Too many shards are queued already.
        QueueFull => "queue-full",
        /// The type is frozen strictly: operators' moves wait too.
        Frozen => "frozen",
    }
}

words! {
    /// What a decision event tells (`GET /v1/events`).
    EventKind {
        /// A shard got a home (`region`, `reason`, `strategy` or `cause`).
        ShardHomed => "shard-homed",
        /// No region could take a shard; it waits.
        ShardWaiting => "shard-waiting",
        /// A hand-off began: every region was told to buffer the shard.
        HandOffBegun => "hand-off-begun",
        /// Every region acknowledged; the owner was told to stop the shard.
        HandOffAcknowledged => "hand-off-acknowledged",
        /// The owner stopped the shard; it is re-homed next.
        HandOffCompleted => "hand-off-completed",
        /// A hand-off ran past a deadline (`detail` says which step and who).
        HandOffTimedOut => "hand-off-timed-out",
        /// A hand-off ended because its owner is gone.
        HandOffAbandoned => "hand-off-abandoned",
        /// An operator's placement was set (`target`).
        PlacementSet => "placement-set",
        /// An operator's placement was removed.
        PlacementRemoved => "placement-removed",
        /// A shard was accepted for a rebalance.
        RebalanceAccepted => "rebalance-accepted",
        /// The type's churn limits clipped the strategy's rebalance answer
        /// (`cause`: the limits, comma-separated; `detail`: how many moves
        /// each clipped and the first shards).
        MovesClipped => "moves-clipped",
        /// A strategy became active (`strategy`, `cause`, `by`).
        StrategyActivated => "strategy-activated",
        /// A strategy was rolled back (`strategy` is the one active now, `by`).
        StrategyRolledBack => "strategy-rolled-back",
        /// A shadow candidate was set (`strategy`) or cleared (none).
        StrategyShadowed => "strategy-shadowed",
        /// The strategy failed and the built-in answered instead (`cause`).
        Fallback => "fallback",
        /// A region registered.
        RegionRegistered => "region-registered",
        /// A region missed its heartbeats; its lease runs out.
        RegionUnreachable => "region-unreachable",
        /// A region heartbeated again.
        RegionReachable => "region-reachable",
        /// An older incarnation of a region was refused (`cause`).
        RegionFenced => "region-fenced",
        /// An operator drained a region.
        RegionDrained => "region-drained",
        /// An operator undrained a region.
        RegionUndrained => "region-undrained",
        /// A region was removed (`cause`: left, heartbeat timeout).
        RegionGone => "region-gone",
        /// A sample of a region's load (`region`, `load`): at most one per
        /// region every 10 s, and at most 10 a second per type.
        RegionLoad => "region-load",
        /// A type was frozen (`cause`: the freeze's scope, `by`, `detail`:
        /// its reason, `untilMs`: its end when it has one).
        Frozen => "frozen",
        /// A freeze was lifted (`cause`: its scope, `by`, `detail`: why).
        FreezeLifted => "freeze-lifted",
        /// A freeze reached its time limit (`cause`: its scope).
        FreezeExpired => "freeze-expired",
        /// This client fell behind or resumed from an event no longer kept:
        /// `missed` events are lost to it (0: unknown, another term).
        Missed => "missed",
    }
}

words! {
    /// Who made a strategy change.
    ChangedBy {
        /// An operator, through the API.
        Operator => "operator",
        /// The node itself (an automatic rollback).
        Automatic => "automatic",
    }
}

/// One decision, as `GET /v1/events` sends it in an event's `data:` line
/// (its `id:` is `<term>-<seq>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DecisionEvent {
    /// Its number in this leader's term, from 1 without gaps.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// The entity type (empty for `missed`).
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The shard, for shard events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_id: Option<String>,
    /// The region: a shard's new home, a hand-off's owner, a region event's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Why a shard is where it is (`shard-homed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<HomeReason>,
    /// The strategy, `name@version`: the one that chose a home, or the one activated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// A placement's target (`placement-set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The cause: a fallback's error, why a region went, an activation's cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Who changed a strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<ChangedBy>,
    /// More about it, in words (a placement not honoured, who did not acknowledge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// How many events this client missed (`missed`; 0: unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<u64>,
    /// A region's load: its shards' smoothed loads together (`region-load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// When a freeze ends (`frozen`; milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

impl DecisionEvent {
    /// An event of `kind` in `entity_type` at `at_ms`, every other field
    /// empty (the hub numbers it when it publishes it).
    pub fn new(kind: EventKind, entity_type: impl Into<String>, at_ms: u64) -> Self {
        DecisionEvent {
            seq: 0,
            kind,
            at_ms,
            entity_type: entity_type.into(),
            shard_id: None,
            region: None,
            reason: None,
            strategy: None,
            target: None,
            cause: None,
            by: None,
            detail: None,
            missed: None,
            load: None,
            until_ms: None,
        }
    }
}

/// A node of a cluster: its name and the URL it is reached at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterNode {
    /// `--node-name` (default: its listen address).
    pub name: String,
    /// `--advertise` (default: its listen address as a URL).
    pub url: String,
}

/// `GET /v1/cluster/leader`: who leads, as the answering node knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterLeader {
    /// The leader; `null` while none is known (an election is under way).
    pub leader: Option<ClusterNode>,
    /// The node that answered.
    #[serde(rename = "self")]
    pub self_: ClusterNode,
    /// Grows with every new leadership (the leader's etcd election key's
    /// create revision); 1 for a node without etcd, 0 before one is known.
    pub term: u64,
}

words! {
    /// Every code a REST error carries (`{"error":{"code":…}}`); each
    /// variant says when it is answered and with which status, and so does
    /// docs/operations.md ("Error codes"). The words are a contract: clients
    /// match on them, so a word is never respelt or given another meaning,
    /// and a new failure gets a new word. A client must expect words it does
    /// not know, from newer nodes (see [`ErrorDetail::code`]).
    ErrorCode {
        /// 400: a JSON body is empty, is not JSON, gives a key twice, or has
        /// a missing, unknown or mistyped field; an upload is empty.
        InvalidBody => "invalid-body",
        /// 400: a query parameter does not parse (`limit=0`, `force`, the
        /// event stream's `from`).
        InvalidQuery => "invalid-query",
        /// 400: a list's `after` is not the `next` cursor of a previous page.
        InvalidCursor => "invalid-cursor",
        /// 400: an entity type or region address in the path breaks the
        /// naming rule.
        InvalidName => "invalid-name",
        /// 400: a path segment does not decode (percent-encoding that is not
        /// UTF-8).
        InvalidPath => "invalid-path",
        /// 400: a shard id is empty, longer than 256 bytes, or has control
        /// characters.
        InvalidShardId => "invalid-shard-id",
        /// 400: a placement's target is not a valid region address.
        InvalidTarget => "invalid-target",
        /// 400: the coordinator refused a set of placements (an empty target,
        /// a shard listed twice…); none was applied.
        InvalidPlacement => "invalid-placement",
        /// 400: the coordinator refused a type's signal (larger than 1 MiB).
        InvalidSignal => "invalid-signal",
        /// 400: shard attributes outside their limits (a key, a value, too
        /// many pairs or shards, a shard id named twice), or more shards
        /// with attributes than the type keeps.
        InvalidAttributes => "invalid-attributes",
        /// 400: a freeze without a reason, with both or neither of
        /// `forSeconds` and `until`, ending in the past or after 30 days.
        InvalidFreeze => "invalid-freeze",
        /// 400: a plan names a region the type lacks (or adds one it has),
        /// gives a load that is not a finite number at or above 0, or asks
        /// too much (rounds, regions, loads).
        InvalidPlan => "invalid-plan",
        /// 400: a dry run asks for too many rounds or shards.
        InvalidDryRun => "invalid-dry-run",
        /// 400: the event stream's `Last-Event-ID` is not `<term>-<seq>`.
        InvalidLastEventId => "invalid-last-event-id",
        /// 400: more shards in one request than it takes (placements,
        /// rebalance).
        TooMany => "too-many",
        /// 400: the request body could not be read (the client broke off).
        UnreadableBody => "unreadable-body",
        /// 401: the admin token (or, on the region WebSocket, the region
        /// token) is missing or wrong.
        Unauthorized => "unauthorized",
        /// 403: a write or WebSocket upgrade comes from a web origin that is
        /// not the node's own.
        CrossOrigin => "cross-origin",
        /// 404: no endpoint has this path.
        NoRoute => "no-route",
        /// 404: no entity type has this name.
        UnknownType => "unknown-type",
        /// 404: no region with this address is registered.
        UnknownRegion => "unknown-region",
        /// 404: the shard has no home, placement or hand-off.
        UnknownShard => "unknown-shard",
        /// 404: the shard has no placement to remove.
        NoPlacement => "no-placement",
        /// 404: no built-in or uploaded strategy has this name or digest.
        UnknownStrategy => "unknown-strategy",
        /// 404: the dashboard has no file of this name.
        NoAsset => "no-asset",
        /// 405: the endpoint does not take this method.
        MethodNotAllowed => "method-not-allowed",
        /// 408: the request body did not arrive in time.
        BodyTimeout => "body-timeout",
        /// 409: the type has registered regions and the delete was not
        /// forced.
        TypeHasRegions => "type-has-regions",
        /// 409: a plan on a type with no region, or one that leaves no
        /// region able to take shards.
        EmptyCluster => "empty-cluster",
        /// 409: a cluster-wide freeze on a node that has no entity type.
        NoTypes => "no-types",
        /// 409: a forced delete of the type is under way.
        TypeBeingDeleted => "type-being-deleted",
        /// 409: the type would hold more placements than it may.
        TooManyPlacements => "too-many-placements",
        /// 409: a built-in strategy cannot be deleted.
        Builtin => "builtin",
        /// 409: the component is active or shadowing in some type.
        StrategyInUse => "strategy-in-use",
        /// 409: a rollback with no previous strategy to go back to.
        NoPreviousStrategy => "no-previous-strategy",
        /// 413: the body is larger than the endpoint accepts (4 MiB of JSON,
        /// 32 MiB for an upload); the connection is closed.
        BodyTooLarge => "body-too-large",
        /// 414: the request target is over 8 KiB.
        UriTooLong => "uri-too-long",
        /// 415: a body sent without its media type (`application/json`,
        /// `application/wasm` for an upload).
        UnsupportedMediaType => "unsupported-media-type",
        /// 421: on a node without an admin token, the `Host` is not one of
        /// the node's own names.
        UnknownHost => "unknown-host",
        /// 422: the upload is not a valid component for this host.
        InvalidComponent => "invalid-component",
        /// 422: the upload is over the compile budget (functions, locals,
        /// code); nothing was compiled.
        OverCompileBudget => "over-compile-budget",
        /// 422: the upload did not compile within `compile-timeout-ms`.
        CompileTimeout => "compile-timeout",
        /// 422: the strategy does not load, refuses its configuration, or
        /// cannot be rolled back to.
        StrategyRefused => "strategy-refused",
        /// 422: the candidate failed (or ran out of time in) its dry run.
        DryRunFailed => "dry-run-failed",
        /// 429: too many placement writes wait; retry after `Retry-After`.
        WritesBusy => "writes-busy",
        /// 429: too many reads of a whole type (snapshots) run; retry after
        /// `Retry-After`.
        ReadsBusy => "reads-busy",
        /// 429: a dry run of the type, or as many as run at once, is under
        /// way; retry after `Retry-After`.
        DryRunBusy => "dry-run-busy",
        /// 429: the node serves as many event streams as it allows
        /// (`--max-event-streams`); retry after `Retry-After`.
        TooManyStreams => "too-many-streams",
        /// 429: the stream would replay while as many replay as may; retry
        /// after `Retry-After`, or start from now.
        ReplaysBusy => "replays-busy",
        /// 431: the request headers are over 64 KiB.
        HeadersTooLarge => "headers-too-large",
        /// 500: the catch-all, something the node did not expect; the
        /// node's log has the detail.
        Internal => "internal",
        /// 500: the store failed to read or write.
        Store => "store",
        /// 500: the compiler process failed (not the component: that is
        /// `invalid-component`).
        Compiler => "compiler",
        /// 503: the node is shutting down or its input queue is full; retry.
        Unavailable => "unavailable",
        /// 503: with etcd, this node does not lead and knows no leader.
        NoLeader => "no-leader",
        /// 503: with etcd, the leader this node forwarded to did not answer;
        /// retry after `Retry-After`.
        LeaderUnavailable => "leader-unavailable",
        /// 503 (`/readyz`): a declared type has fewer than `min-regions`
        /// regions.
        NotReady => "not-ready",
        /// 503 (`/livez`): the driver thread has finished no turn for 30 s.
        Stalled => "stalled",
        /// 503 (`/livez`): the driver thread of a node alone has stopped.
        DriverStopped => "driver-stopped",
        /// 503 (`/livez`): this node's leader election has ended.
        ElectionStopped => "election-stopped",
        /// 503: as many compiles as may run are under way and none ended
        /// within the upload's compile time.
        CompileBusy => "compile-busy",
        /// 507: the node's quota of stored components is full.
        ComponentQuota => "component-quota",
    }
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// A stable, machine-readable code: one of the `ErrorCode` words. A
    /// newer node may answer a word this version does not list; go by the
    /// status then. That is why the Rust type is a `String`, not
    /// `ErrorCode`: an enum would refuse the whole body of such an error
    /// (the admin client would report a status without the node's code and
    /// message). `ErrorDetail::error_code` gives the code when it is known.
    #[cfg_attr(feature = "openapi", schema(value_type = ErrorCode))]
    pub code: String,
    /// A sentence naming the problem.
    pub message: String,
}

impl ErrorDetail {
    /// An error with a known code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorDetail { code: code.as_str().to_owned(), message: message.into() }
    }

    /// The code, when it is one this version knows.
    pub fn error_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_word(&self.code)
    }
}

/// One placement: the shard belongs on the target region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// The shard.
    pub shard_id: ShardId,
    /// The target region's address.
    pub target: String,
}

/// `POST …/placements`: one placement, or many applied all-or-nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum PlacementRequest {
    /// `{"placements":[…]}`
    Many {
        /// The placements.
        placements: Vec<Placement>,
    },
    /// `{"shardId":42,"target":"ADDRESS"}`
    One(Placement),
}

/// A page of the type's placements.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Placements {
    /// Live placements, by shard id.
    pub placements: Vec<Placement>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// The answer to `POST …/placements`: what it wrote, and the type's count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlacementsWritten {
    /// The placements of the request that took effect (a write older than
    /// the current one for its shard does not).
    pub written: Vec<Placement>,
    /// The type's live placements after the write.
    pub total: usize,
}

words! {
    /// Whose freeze.
    FreezeScope {
        /// An operator froze this type.
        Type => "type",
        /// An operator froze every type.
        Cluster => "cluster",
        /// The node froze the type itself: too many regions were lost.
        Maintenance => "maintenance",
    }
}

words! {
    /// What happened to a freeze.
    FreezeAction {
        /// It began (or replaced the freeze of its scope).
        Frozen => "frozen",
        /// It was lifted before its end.
        Lifted => "lifted",
        /// It reached its time limit.
        Expired => "expired",
    }
}

/// `PUT /v1/cluster/shards/{type}/freeze` and `PUT /v1/cluster/freeze`:
/// exactly one of `forSeconds` and `until`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FreezeRequest {
    /// How long the freeze lasts, in seconds (at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<u64>,
    /// When it ends: milliseconds since the Unix epoch, judged by the
    /// leader's clock (at most 30 days ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    /// Why (shown in the dashboard's banner and the events; at most 1 KiB).
    pub reason: String,
    /// Hold operators' placements, `rebalance-now` and drains too.
    #[serde(default)]
    pub strict: bool,
}

/// A freeze in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FreezeInfo {
    /// Whose.
    pub scope: FreezeScope,
    /// Why.
    pub reason: String,
    /// When it began (milliseconds since the Unix epoch).
    pub since_ms: u64,
    /// When it ends by itself; absent: when lifted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// Operators' moves wait too.
    pub strict: bool,
}

/// One entry of a freeze history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FreezeEntry {
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// What.
    pub action: FreezeAction,
    /// Which freeze.
    pub scope: FreezeScope,
    /// An operator, or the node itself (the maintenance mode, an expiry).
    pub by: ChangedBy,
    /// Why.
    pub reason: String,
    /// The freeze's end (`frozen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// Whether the freeze was strict (`frozen`).
    pub strict: bool,
}

/// A type's freezes (`GET …/freeze`), or the cluster's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FreezeState {
    /// A freeze is in force: the strategy's rebalance does not run.
    pub frozen: bool,
    /// A strict freeze is in force: operators' moves wait too.
    pub strict: bool,
    /// The freezes in force, by scope.
    pub freezes: Vec<FreezeInfo>,
    /// The last 20 freezes, lifts and expiries, oldest first.
    pub history: Vec<FreezeEntry>,
}

words! {
    /// Why a region cannot stop now (`GET /v1/cluster/regions/stoppable`).
    StopReason {
        /// It holds shards and no region that stays could take them.
        NoOtherHome => "no-other-home",
        /// It holds shards and its zone (the `zone` label) would have no region left.
        ZoneLeftEmpty => "zone-left-empty",
        /// Hand-offs from it are in flight.
        HandOffsInFlight => "hand-offs-in-flight",
        /// A strict freeze holds its drain.
        FrozenStrictly => "frozen-strictly",
        /// Fewer regions than the type's minimum (`min-regions`) would stay.
        BelowMinRegions => "below-min-regions",
        /// No region with this address is registered.
        UnknownRegion => "unknown-region",
    }
}

/// One reason a region cannot stop now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StopBlocked {
    /// The entity type it is blocked in (absent for `unknown-region`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub entity_type: Option<String>,
    /// Why.
    pub reason: StopReason,
    /// The same in words, with the figures.
    pub detail: String,
}

/// A region that cannot stop now, and every reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NotStoppable {
    /// Its address.
    pub address: String,
    /// Why not.
    pub reasons: Vec<StopBlocked>,
}

/// `GET /v1/cluster/regions/stoppable?addresses=a,b,c`: the regions that
/// can stop now, all of them together, and why the others cannot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Stoppable {
    /// These may stop now, together and in parallel (in the order asked).
    pub stoppable: Vec<String>,
    /// The others, each with its reasons (checked as if the stoppable ones
    /// had stopped).
    pub not_stoppable: Vec<NotStoppable>,
}

/// A region's drain in one type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DrainOfType {
    /// The entity type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// It is draining in this type.
    pub draining: bool,
    /// The shards it still holds.
    pub shards_left: usize,
    /// Hand-offs from it in flight.
    pub hand_offs_in_flight: usize,
    /// When its drain began (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
}

/// `GET /v1/cluster/regions/{address}/drain`: a drain's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DrainState {
    /// The region.
    pub address: String,
    /// It is draining in every type it serves.
    pub draining: bool,
    /// The shards it still holds, in every type.
    pub shards_left: usize,
    /// Hand-offs from it in flight, in every type.
    pub hand_offs_in_flight: usize,
    /// When its drain began (the earliest of its types').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    /// Each type it serves.
    pub types: Vec<DrainOfType>,
}

/// `POST …/rebalance`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RebalanceRequest {
    /// The shards to move.
    pub shard_ids: Vec<ShardId>,
    /// Start the hand-offs now instead of at the next rebalance tick.
    #[serde(default)]
    pub immediate: bool,
}

/// The answer to a rebalance request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RebalanceResponse {
    /// The shards that will move.
    pub accepted: Vec<String>,
    /// The others, each with why.
    pub rejected: Vec<Rejected>,
}

/// A shard a rebalance request did not accept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// The shard.
    pub shard_id: String,
    /// Why it was not accepted.
    pub reason: RejectReason,
}

/// `GET /v1/cluster/shards`: a page of the entity types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Types {
    /// Entity types, by name.
    pub types: Vec<TypeSummary>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// One entity type in brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TypeSummary {
    /// Its name.
    pub name: String,
    /// Regions registered.
    pub regions: usize,
    /// Shards with a home.
    pub shards: usize,
    /// The active strategy, `name@version`.
    pub strategy: String,
}

/// `GET /v1/cluster/shards/{type}`: one page of the type's shards with a
/// home (`?limit=`, `?after=`, as every list), with its regions, hand-offs
/// in flight and active strategy on every page. Placements are paged at
/// `…/placements`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TypeState {
    /// The type.
    pub name: String,
    /// Its regions, in join order, each with its count of shards.
    pub regions: Vec<RegionState>,
    /// Hand-offs in flight, all of them (at most the type's
    /// `max-handoffs-in-flight`).
    pub hand_offs: Vec<HandOff>,
    /// The active strategy.
    pub strategy: ActivationInfo,
    /// A page of the shards with a home, by shard id: where each is and why.
    pub shards: Vec<ShardHome>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// A region of one type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegionState {
    /// Its address.
    pub address: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Up, unreachable or leaving.
    pub status: RegionStatus,
    /// Drained by an operator.
    pub draining: bool,
    /// Routes only.
    pub proxy_only: bool,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// How many shards it is home to (the shards themselves are paged in
    /// [`TypeState::shards`]).
    pub shard_count: usize,
    /// The smoothed load of its shards together, as of its last load
    /// report; `null` for a region that never reported one.
    #[serde(default)]
    pub load: Option<f64>,
    /// When this incarnation of the region first registered (milliseconds
    /// since the Unix epoch); `null` when the node does not know (a region
    /// kept by an older store).
    #[serde(default)]
    pub registered_at_ms: Option<u64>,
    /// The capacity it declared when it registered (named quantities;
    /// `load` is in the units of shard loads); empty when it declared none.
    #[serde(default)]
    pub capacity: RegionCapacity,
}

/// A shard with a home, in a page of [`TypeState`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShardHome {
    /// The shard.
    pub shard_id: String,
    /// Its home region's address.
    pub region: String,
    /// Why it is there: the strategy, a placement or the fallback.
    pub reason: HomeReason,
}

/// A hand-off in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HandOff {
    /// The shard.
    pub shard_id: String,
    /// Its owner.
    pub from: String,
}

/// `GET /v1/cluster/shards/{type}/shards/{shardId}`: where a shard is and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShardState {
    /// The shard.
    pub shard_id: String,
    /// Its home, if it has one.
    pub home: Option<String>,
    /// Why it is there.
    pub reason: Option<HomeReason>,
    /// The strategy (`name@version`) that chose, or the fallback's cause.
    pub detail: Option<String>,
    /// When it got its home (milliseconds since the Unix epoch).
    pub since_ms: Option<u64>,
    /// True while its hand-off is in flight.
    pub moving: bool,
    /// Its placement's target, if one is set.
    pub placement: Option<String>,
    /// Its smoothed load, in the units its regions report per second (0
    /// when none reported any).
    #[serde(default)]
    pub load: f64,
    /// When it last moved: its last hand-off ended (milliseconds since the
    /// Unix epoch).
    #[serde(default)]
    pub moved_ms: Option<u64>,
    /// Its home's epoch: it rises at every change of the shard's home,
    /// across failovers too, and its region receives it with the shard
    /// (for fencing writes: docs/operations.md). `null` without a home.
    #[serde(default)]
    pub epoch: Option<u64>,
    /// Its attributes (`{}` when it has none): what operators wrote, read
    /// by strategies of contract 0.3.
    #[serde(default)]
    pub attributes: ShardAttributes,
}

/// `POST /v1/cluster/shards/{type}/attributes`: shards' attributes, each
/// shard's whole map (`{}` clears it), written all or nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AttributesRequest {
    /// Shard id → its attributes; at most 10,000 shards.
    pub shards: BTreeMap<String, ShardAttributes>,
}

/// The answer to an attribute write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttributesWritten {
    /// The shards whose attributes changed (the others already had what
    /// was written), in id order.
    pub changed: Vec<String>,
}

/// `GET /v1/cluster/shards/{type}/shards?sort=load`: a page of a type's
/// shards with a load, most loaded first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShardLoads {
    /// The shards, most loaded first.
    pub shards: Vec<ShardLoadState>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// One shard in a [`ShardLoads`] page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShardLoadState {
    /// The shard.
    pub shard_id: String,
    /// Its home, if it has one.
    pub home: Option<String>,
    /// Its smoothed load (units per second).
    pub load: f64,
    /// When it last moved (milliseconds since the Unix epoch).
    pub moved_ms: Option<u64>,
}

/// `GET /v1/cluster/regions`: a page of the regions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Regions {
    /// Regions, by address.
    pub regions: Vec<RegionSummary>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// A region across types.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegionSummary {
    /// Its address.
    pub address: String,
    /// Per type it serves: its status there.
    pub types: BTreeMap<String, RegionStatus>,
    /// Shards it holds, all types together.
    pub shards: usize,
    /// Drained in every type it serves.
    pub draining: bool,
}

/// `POST /v1/strategies`: the uploaded component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StoredStrategy {
    /// `sha256:…` of the component's bytes.
    pub digest: String,
    /// The name it describes itself with.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its size in bytes (0 for built-ins).
    #[serde(default)]
    pub size: u64,
    /// Types where it is active.
    #[serde(default)]
    pub active_in: Vec<String>,
    /// The strategy contract it speaks (`shardalloc:strategy@0.2.0`), read
    /// from its exports; absent when its bytes could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
}

/// `GET /v1/strategies`: a page of the strategies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Strategies {
    /// Built-ins first, then uploads by digest.
    pub strategies: Vec<StoredStrategy>,
    /// The cursor of the next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
}

/// `PUT …/strategy` and `PUT …/strategy/shadow`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActivateRequest {
    /// A built-in's name or an uploaded component's `sha256:…` digest.
    pub strategy: String,
    /// Its configuration (any JSON; default none).
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Activate without the dry run that must otherwise pass first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// A region a plan adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanRegion {
    /// Its address.
    pub address: String,
    /// Its labels (a zone…).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How much load it can carry (contract 0.2 strategies see it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
}

/// `POST /v1/cluster/shards/{type}/plan`: a what-if on the live view.
/// Its default changes nothing and runs three rounds, as an empty body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanRequest {
    /// Regions to add (up, with no shard).
    #[serde(default)]
    pub add_regions: Vec<PlanRegion>,
    /// Regions to remove: their shards are re-homed in round 0.
    #[serde(default)]
    pub remove_regions: Vec<String>,
    /// Regions to drain: their shards move in round 0 and they get none.
    #[serde(default)]
    pub drain: Vec<String>,
    /// Shard loads over the live ones (shard → load).
    #[serde(default)]
    pub loads: BTreeMap<String, f64>,
    /// A built-in's name or an uploaded component's digest; absent: the
    /// active strategy (with its configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// The candidate's configuration (with `strategy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// Rebalance rounds after round 0 (default 3, at most 100).
    #[serde(default = "default_rounds")]
    pub rounds: usize,
}

impl Default for PlanRequest {
    fn default() -> Self {
        PlanRequest {
            add_regions: Vec::new(),
            remove_regions: Vec::new(),
            drain: Vec::new(),
            loads: BTreeMap::new(),
            strategy: None,
            config: None,
            rounds: default_rounds(),
        }
    }
}

/// A shard a plan moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanMove {
    /// The shard.
    pub shard_id: String,
    /// The region it leaves.
    pub from: String,
    /// The region it gets; absent when no region could take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// One rebalance round of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanRound {
    /// 1-based.
    pub round: usize,
    /// Its moves, in the strategy's order.
    pub moves: Vec<PlanMove>,
    /// Each region's shard count after it.
    pub counts: BTreeMap<String, usize>,
    /// Moves the type's churn limits clipped.
    pub clipped: Vec<ClippedMove>,
}

/// A region at the end of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlannedRegion {
    /// Its address.
    pub address: String,
    /// Its shards.
    pub shards: usize,
    /// Its shards' loads together; absent when none of them has a load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
}

/// What a plan would do. Nothing changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PlanResponse {
    /// The strategy planned with, `name@version`.
    pub strategy: String,
    /// Round 0: the shards of removed and drained regions, re-homed.
    pub displaced: Vec<PlanMove>,
    /// The rebalance rounds.
    pub rounds: Vec<PlanRound>,
    /// Every region at the end, in join order.
    pub regions: Vec<PlannedRegion>,
}

/// `POST …/strategy/dry-run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DryRunRequest {
    /// A built-in's name or an uploaded component's digest.
    pub strategy: String,
    /// Its configuration.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// Rounds of rebalance to simulate (default 3, at most 100).
    #[serde(default = "default_rounds")]
    pub rounds: usize,
    /// Shards to ask the candidate to allocate.
    #[serde(default)]
    pub shard_ids: Vec<ShardId>,
}

fn default_rounds() -> usize {
    3
}

/// What a candidate would do on the type's current state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DryRunResponse {
    /// The candidate, `name@version`.
    pub strategy: String,
    /// Where it would put each shard asked about (`null`: nowhere).
    pub allocations: BTreeMap<String, Option<String>>,
    /// The shards its first rebalance would move.
    pub rebalance: Vec<String>,
    /// Each round: the shards moved and the counts after it.
    pub rounds: Vec<DryRunRound>,
}

/// One simulated round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DryRunRound {
    /// Shards moved.
    pub moved: Vec<String>,
    /// Shards per region after the round.
    pub counts: BTreeMap<String, usize>,
    /// Moves the type's churn limits clipped, in the strategy's order
    /// (empty when none were).
    #[serde(default)]
    pub clipped: Vec<ClippedMove>,
}

/// A move a type's churn limits clipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClippedMove {
    /// The shard the strategy asked to move.
    pub shard_id: String,
    /// The limit that kept it: `max-moves-per-round`, `move-cooldown` or
    /// `min-round-interval`.
    pub limit: String,
}

/// One activation of a strategy in a type's slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ActivationInfo {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The uploaded component's `sha256:…` digest, or the built-in's name.
    pub digest: String,
    /// Its configuration.
    pub config: Option<serde_json::Value>,
    /// Why it became active.
    pub cause: ActivationCause,
    /// When (milliseconds since the Unix epoch).
    pub at_ms: u64,
}

/// `GET …/strategy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct StrategyState {
    /// The active strategy.
    pub active: ActivationInfo,
    /// Past activations, oldest first (the active one last): a page of them.
    pub history: Vec<ActivationInfo>,
    /// The cursor of the history's next page (`?after=`), `null` on the last.
    #[serde(default)]
    pub next: Option<String>,
    /// The shadow candidate, if any.
    pub shadow: Option<ActivationInfo>,
    /// Decisions the current shadow candidate was asked about (from 0 at
    /// each new candidate), and how many it disagreed with.
    pub shadow_calls: u64,
    /// See `shadow_calls`.
    pub shadow_disagreements: u64,
    /// Past shadow candidates' counts, oldest first (at most 16): kept
    /// when a candidate is replaced or cleared.
    #[serde(default)]
    pub shadow_history: Vec<ShadowCounts>,
}

/// What one past shadow candidate saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ShadowCounts {
    /// The candidate, `name@version`.
    pub candidate: String,
    /// Decisions it was asked about.
    pub calls: u64,
    /// How many it disagreed with the active strategy on.
    pub disagreements: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ids_accept_strings_and_integers_only() {
        let one: PlacementRequest = serde_json::from_str(r#"{"shardId":42,"target":"b"}"#).unwrap();
        assert_eq!(one, PlacementRequest::One(Placement { shard_id: "42".into(), target: "b".into() }));
        let many: PlacementRequest =
            serde_json::from_str(r#"{"placements":[{"shardId":"x","target":"b"},{"shardId":-3,"target":"c"}]}"#)
                .unwrap();
        let PlacementRequest::Many { placements } = many else { panic!() };
        assert_eq!(placements[1].shard_id.0, "-3");
        for bad in
            [r#"{"shardId":4.5,"target":"b"}"#, r#"{"shardId":1e3,"target":"b"}"#, r#"{"shardId":true,"target":"b"}"#]
        {
            assert!(serde_json::from_str::<PlacementRequest>(bad).is_err(), "{bad}");
        }
        let rebalance: RebalanceRequest = serde_json::from_str(r#"{"shardIds":[42,"43"]}"#).unwrap();
        assert_eq!(rebalance.shard_ids, ["42".into(), ShardId::from("43")]);
        assert!(!rebalance.immediate);
    }

    /// The words are a contract: this list is what nodes of this and
    /// earlier versions answer, and clients match on it.
    #[test]
    fn an_empty_plan_body_is_the_default_plan_of_three_rounds() {
        let empty: PlanRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, PlanRequest::default());
        assert_eq!(empty.rounds, 3);
    }

    #[test]
    fn error_codes_keep_their_wire_spelling() {
        let words: Vec<&str> = ErrorCode::ALL.iter().map(|code| code.as_str()).collect();
        assert_eq!(
            words,
            [
                "invalid-body",
                "invalid-query",
                "invalid-cursor",
                "invalid-name",
                "invalid-path",
                "invalid-shard-id",
                "invalid-target",
                "invalid-placement",
                "invalid-signal",
                "invalid-attributes",
                "invalid-freeze",
                "invalid-plan",
                "invalid-dry-run",
                "invalid-last-event-id",
                "too-many",
                "unreadable-body",
                "unauthorized",
                "cross-origin",
                "no-route",
                "unknown-type",
                "unknown-region",
                "unknown-shard",
                "no-placement",
                "unknown-strategy",
                "no-asset",
                "method-not-allowed",
                "body-timeout",
                "type-has-regions",
                "empty-cluster",
                "no-types",
                "type-being-deleted",
                "too-many-placements",
                "builtin",
                "strategy-in-use",
                "no-previous-strategy",
                "body-too-large",
                "uri-too-long",
                "unsupported-media-type",
                "unknown-host",
                "invalid-component",
                "over-compile-budget",
                "compile-timeout",
                "strategy-refused",
                "dry-run-failed",
                "writes-busy",
                "reads-busy",
                "dry-run-busy",
                "too-many-streams",
                "replays-busy",
                "headers-too-large",
                "internal",
                "store",
                "compiler",
                "unavailable",
                "no-leader",
                "leader-unavailable",
                "not-ready",
                "stalled",
                "driver-stopped",
                "election-stopped",
                "compile-busy",
                "component-quota",
            ]
        );
        for &code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str(), "{code:?}");
            assert_eq!(serde_json::from_value::<ErrorCode>(code.as_str().into()).unwrap(), code);
            assert_eq!(ErrorCode::from_word(code.as_str()), Some(code));
            let detail = ErrorDetail::new(code, "m");
            assert_eq!(detail.error_code(), Some(code));
        }
    }

    /// A newer node may answer a code this client does not know: the body
    /// still parses, with the code as it came.
    #[test]
    fn error_bodies_with_unknown_codes_still_parse() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"a-code-from-a-newer-node","message":"m"}}"#).unwrap();
        assert_eq!(body.error.code, "a-code-from-a-newer-node");
        assert_eq!(body.error.error_code(), None);
        let body: ErrorBody = serde_json::from_str(r#"{"error":{"code":"unknown-type","message":"m"}}"#).unwrap();
        assert_eq!(body.error.error_code(), Some(ErrorCode::UnknownType));
        assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"error":{"code":"unknown-type","message":"m"}}"#);
    }

    /// Every closed set of words is spelt in JSON as `as_str` spells it.
    #[test]
    fn words_are_spelt_alike_in_json_and_as_str() {
        fn check<T: Copy + Serialize + fmt::Debug>(all: &[T], as_str: fn(T) -> &'static str) {
            for &word in all {
                assert_eq!(serde_json::to_value(word).unwrap(), as_str(word), "{word:?}");
            }
        }
        check(RegionStatus::ALL, RegionStatus::as_str);
        check(HomeReason::ALL, HomeReason::as_str);
        check(ActivationCause::ALL, ActivationCause::as_str);
        check(RejectReason::ALL, RejectReason::as_str);
        check(EventKind::ALL, EventKind::as_str);
        check(ChangedBy::ALL, ChangedBy::as_str);
        check(ErrorCode::ALL, ErrorCode::as_str);
    }

    #[test]
    fn shard_id_length_is_checked() {
        assert!(ShardId::from("").validate().is_err());
        assert!(ShardId("x".repeat(257)).validate().unwrap_err().contains("257 bytes"));
        assert_eq!(ShardId("x".repeat(256)).validate().unwrap().len(), 256);
    }
}
