//! What the admin API asks the driver: [`AdminRequest`], one variant per
//! question or command, each with a typed reply channel, and [`Refusal`],
//! why the driver said no. The REST handlers send a request and map the
//! reply; they never touch the driver's state.
//!
//! Every reply is released after the turn that handled the request is
//! committed, so an operator never sees state the store does not hold.

use std::sync::Arc;

use shardalloc_proto::api::{
    ActivationInfo, RegionSummary, ShardLoadState, ShardState, StoredStrategy, StrategyState, TypeSummary,
};
use shardalloc_proto::attributes::ShardAttributes;
use tokio::sync::oneshot;

pub use super::refusal::Refusal;

use crate::coordinator::Reply as CoordinatorReply;
use crate::engine::component::Compiled;
use crate::store::ComponentRecord;

/// Where a request's answer goes.
pub type Reply<T> = oneshot::Sender<T>;

/// A change an operator asks of one type's coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Set placements (shard, target), all or nothing, stamped by the driver.
    SetPlacements(Vec<(String, String)>),
    /// Remove a shard's placement (404 when it has none).
    RemovePlacement(String),
    /// Move shards at the next rebalance, or at once when `immediate`.
    RebalanceNow {
        /// The shards.
        shards: Vec<String>,
        /// Start the hand-offs now.
        immediate: bool,
    },
    /// Set (or with `None` clear) the type's signal.
    SetSignal(Option<String>),
    /// Write shards' attributes (each shard's whole map; empty clears).
    SetAttributes(Vec<(String, ShardAttributes)>),
}

/// Which page of a list: at most `limit` items after the key `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The most items the page holds.
    pub limit: usize,
    /// The last key of the previous page.
    pub after: Option<String>,
}

impl Page {
    /// How many items to fetch: one more than the page, to know whether
    /// another follows.
    pub fn fetch(&self) -> usize {
        self.limit.saturating_add(1)
    }

    /// True for a key past the cursor.
    pub fn after(&self, key: &str) -> bool {
        self.after.as_deref().is_none_or(|after| key > after)
    }

    /// The opaque cursor (`next`, `?after=`) of a key: its bytes in hex.
    pub fn cursor(key: &str) -> String {
        key.bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// The key of a cursor, `None` when it is not one.
    pub fn key(cursor: &str) -> Option<String> {
        if cursor.is_empty() || !cursor.len().is_multiple_of(2) {
            return None;
        }
        let bytes: Option<Vec<u8>> =
            (0..cursor.len()).step_by(2).map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok()).collect();
        String::from_utf8(bytes?).ok()
    }
}

/// What only the live coordinator knows of a type, at a cost per region:
/// the REST layer adds the rest from the store, off the driver thread.
pub struct TypeLive {
    /// Its regions as a snapshot lists them, without their shards.
    pub regions: Vec<shardalloc_guest::SnapshotRegion>,
    /// Its regions in join order, each with its status and its count of
    /// shards (not the shards: O(regions)).
    pub states: Vec<shardalloc_client::api::RegionState>,
    /// Its hand-offs in flight, by shard: bounded by the coordinator's
    /// `max_handoffs_in_flight`.
    pub hand_offs: Vec<shardalloc_client::api::HandOff>,
    /// The active strategy.
    pub strategy: ActivationInfo,
    /// Its churn limits as a dry run applies them (without the shards'
    /// last moves, which come from the store).
    pub paced: crate::strategy::churn::Paced,
}

/// The coordinator's answer to an [`Operation`], with the type's count of
/// live placements when it answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Operated {
    /// The coordinator's reply.
    pub reply: CoordinatorReply,
    /// The type's live placements.
    pub live_placements: usize,
}

/// A strategy to run, compiled off the driver thread.
#[derive(Clone)]
pub struct Candidate {
    /// Compiled.
    pub compiled: Arc<Compiled>,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// The uploaded components the driver records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredComponents {
    /// How many.
    pub count: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Whether the digest asked about is one of them.
    pub has_digest: bool,
}

/// A question or command for the driver. See the module documentation.
pub enum AdminRequest {
    /// Is every type ready (enough regions)? `Err` names those that are not.
    Readiness {
        /// The answer.
        reply: Reply<Result<(), String>>,
    },
    /// A page of the types in brief, by name.
    Types {
        /// Which page (fetch `page.fetch()`).
        page: Page,
        /// The answer.
        reply: Reply<Vec<TypeSummary>>,
    },
    /// What only the live coordinator knows of a type (regions' status and
    /// metrics, the active strategy).
    TypeLive {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<TypeLive, Refusal>>,
    },
    /// Where a shard is and why.
    Shard {
        /// The type.
        name: String,
        /// The shard.
        shard: String,
        /// The answer.
        reply: Reply<Result<ShardState, Refusal>>,
    },
    /// A page of a type's shards with a load, most loaded first.
    Hottest {
        /// The type.
        name: String,
        /// The last (load, shard) of the page before.
        after: Option<(f64, String)>,
        /// Most shards (the caller asks one more than its page).
        limit: usize,
        /// The answer.
        reply: Reply<Result<Vec<ShardLoadState>, Refusal>>,
    },
    /// A change to one type's coordinator; answered with the coordinator's reply.
    Operate {
        /// The type.
        name: String,
        /// The change.
        operation: Operation,
        /// The answer.
        reply: Reply<Result<Operated, Refusal>>,
    },
    /// Delete a type and its state: refused while it has regions, unless
    /// `force`, which lets them leave first.
    DeleteType {
        /// The type.
        name: String,
        /// Let its regions leave first instead of refusing.
        force: bool,
        /// The answer, once the type is gone.
        reply: Reply<Result<(), Refusal>>,
    },
    /// A page of the regions across types, by address.
    Regions {
        /// Which page.
        page: Page,
        /// The answer.
        reply: Reply<Vec<RegionSummary>>,
    },
    /// Drain (or undrain) a region in every type it serves.
    Drain {
        /// The region.
        address: String,
        /// Drain, or undrain.
        draining: bool,
        /// The answer, once every type applied it.
        reply: Reply<Result<(), Refusal>>,
    },
    /// Freeze or lift (`change`), or only read, the freezes of a type
    /// (`name`) or of the cluster (`None`).
    Freeze {
        /// The type, or every type.
        name: Option<String>,
        /// What to change; `None`: only read.
        change: Option<super::freezes::FreezeChange>,
        /// The freezes, after the commit.
        reply: Reply<Result<shardalloc_proto::api::FreezeState, Refusal>>,
    },
    /// A region's drain in every type it serves.
    DrainState {
        /// The region.
        address: String,
        /// The answer.
        reply: Reply<Result<shardalloc_proto::api::DrainState, Refusal>>,
    },
    /// Which of these regions may stop now, together.
    Stoppable {
        /// The regions, in the order asked.
        addresses: Vec<String>,
        /// The answer.
        reply: Reply<shardalloc_proto::api::Stoppable>,
    },
    /// A page of the built-in and uploaded strategies, by digest (a
    /// built-in's name sorts before `sha256:…`), and where they are active.
    Strategies {
        /// Which page.
        page: Page,
        /// The answer.
        reply: Reply<Vec<StoredStrategy>>,
    },
    /// Record an uploaded component (its blob is already stored).
    AddComponent {
        /// Its description.
        record: ComponentRecord,
        /// The answer.
        reply: Reply<()>,
    },
    /// Forget an uploaded component (the caller deletes its blob after the answer).
    RemoveComponent {
        /// Its digest.
        digest: String,
        /// The answer.
        reply: Reply<Result<(), Refusal>>,
    },
    /// How many uploaded components are recorded and their bytes, and
    /// whether `digest` is one of them (for the quota).
    StoredComponents {
        /// The component about to be stored.
        digest: String,
        /// The answer.
        reply: Reply<StoredComponents>,
    },
    /// Forget the uploaded components no type uses (active, in the history
    /// a rollback can return to, shadowing) and nothing in this process
    /// holds (`in_flight`: a dry run or an activation under way) that were
    /// uploaded more than `retention_ms` before `now_ms` (wall clock). The
    /// caller deletes their blobs after the answer, which lists them.
    CollectComponents {
        /// The wall clock now, in milliseconds since the Unix epoch.
        now_ms: u64,
        /// How old an unused component must be to be collected.
        retention_ms: u64,
        /// Whether something in the process holds a digest's compiled component.
        in_flight: Box<dyn Fn(&str) -> bool + Send>,
        /// The digests forgotten.
        reply: Reply<Vec<String>>,
    },
    /// A type's active strategy, a page of its history (after an entry's
    /// number) and its shadow.
    StrategyState {
        /// The type.
        name: String,
        /// Which page of the history.
        page: Page,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Activate a strategy (already compiled and dry-run).
    Activate {
        /// The type.
        name: String,
        /// The strategy.
        candidate: Candidate,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Activate again the strategy active before the current one.
    Rollback {
        /// The type.
        name: String,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
    /// Set (`Some`) or clear (`None`) the shadow candidate.
    Shadow {
        /// The type.
        name: String,
        /// The candidate.
        candidate: Option<Candidate>,
        /// The answer.
        reply: Reply<Result<StrategyState, Refusal>>,
    },
}

/// The API form of an activation.
pub fn activation_info(record: &crate::store::ActivationRecord) -> ActivationInfo {
    ActivationInfo {
        name: record.name.clone(),
        version: record.version.clone(),
        digest: record.strategy.to_string(),
        config: (!record.config.is_empty()).then(|| serde_json::from_str(&record.config).ok()).flatten(),
        cause: record.cause,
        at_ms: record.at_ms,
    }
}
