//! Prometheus metrics, served as text at `GET /metrics`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `shardalloc_decisions_total` | type, reason | allocations by reason (`placement`, `strategy`, `fallback`) |
//! | `shardalloc_fallbacks_total` | type, reason | strategy answers replaced by the fallback, by failure kind |
//! | `shardalloc_moves_clipped_total` | type, limit | strategy moves the churn limits clipped, by limit (`max-moves-per-round`, `move-cooldown`, `min-round-interval`) |
//! | `shardalloc_handoffs_total` | type, outcome | hand-off steps and ends: `started` (BeginHandOff sent), `stopping` (HandOff sent to the owner), `timed-out`, `owner-gone` |
//! | `shardalloc_regions` | type, status | regions by status (`up`, `unreachable`, `leaving`, `draining`) |
//! | `shardalloc_shards` | type, region | shards per region |
//! | `shardalloc_placements` | type | live placements |
//! | `shardalloc_frozen` | type | 1 while a freeze is in force (the type's, the cluster's or the maintenance mode's), 2 while a strict one is, else 0 |
//! | `shardalloc_region_load` | type, region | a region's shards' smoothed load together, as of its last load report (regions that report) |
//! | `shardalloc_load_imbalance` | type | the most loaded region's load over the mean of the regions that report load (1 is even; absent while none reports or all carry 0) |
//! | `shardalloc_strategy_call_seconds` | type, call, strategy | strategy call latency (`allocate`, `rebalance`) by strategy (`name@version`; at most [`MAX_STRATEGY_SERIES`] per type, then `other`) |
//! | `shardalloc_commit_seconds` | | store commit latency, once per driver turn |
//! | `shardalloc_region_sessions` | | open region sessions |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use crate::coordinator::{Observation, Step};
use crate::engine::slot::SlotHandle;
use crate::strategy::churn::ClipReason;
use crate::strategy::external::AllocationReason;
use shardalloc_proto::api::RegionStatus;

mod labels;
mod timed;
use labels::LeadershipLabels;
pub use labels::{Call, Decision, FallbackReason, HandOffOutcome, LabelText, LeadershipChange, RegionGauge};
pub use timed::{MAX_STRATEGY_SERIES, Timed};

/// One type's figures for the gauges.
pub struct TypeGauges<'a> {
    /// The type.
    pub name: &'a str,
    /// Its registered regions.
    pub regions: Vec<RegionGauges<'a>>,
    /// Its live placements.
    pub placements: usize,
    /// 0 not frozen, 1 frozen, 2 frozen strictly.
    pub frozen: i64,
}

/// One region's figures for the gauges.
pub struct RegionGauges<'a> {
    /// Its address.
    pub address: &'a str,
    /// Up, unreachable or leaving.
    pub status: RegionStatus,
    /// Whether it is draining.
    pub draining: bool,
    /// Its shards.
    pub shards: usize,
    /// Its shards' load together, as of its last load report.
    pub load: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    r#type: LabelText,
    reason: Decision,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FallbackLabels {
    r#type: LabelText,
    reason: FallbackReason,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HandOffLabels {
    r#type: LabelText,
    outcome: HandOffOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClipLabels {
    r#type: LabelText,
    limit: LabelText,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RegionLabels {
    r#type: LabelText,
    status: RegionGauge,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ShardLabels {
    r#type: LabelText,
    region: LabelText,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TypeLabels {
    r#type: LabelText,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct CallLabels {
    pub(super) r#type: LabelText,
    pub(super) call: Call,
    pub(super) strategy: LabelText,
}

pub(super) type HistogramFamily = Family<CallLabels, Histogram, fn() -> Histogram>;

/// The strategy labels each type's call-latency series were made under,
/// so a deleted type's are removed.
pub(super) type StrategySeries = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

fn latency() -> Histogram {
    // 1 µs to about 4 s.
    Histogram::new(exponential_buckets(1e-6, 4.0, 12))
}

/// The node's metrics.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
    handoffs: Family<HandOffLabels, Counter>,
    clipped: Family<ClipLabels, Counter>,
    regions: Family<RegionLabels, Gauge>,
    shards: Family<ShardLabels, Gauge>,
    placements: Family<TypeLabels, Gauge>,
    frozen: Family<TypeLabels, Gauge>,
    region_load: Family<ShardLabels, Gauge<f64, AtomicU64>>,
    load_imbalance: Family<TypeLabels, Gauge<f64, AtomicU64>>,
    strategy_calls: HistogramFamily,
    strategy_series: StrategySeries,
    /// Store commit latency.
    pub commit_seconds: Histogram,
    /// Open region sessions.
    pub sessions: Gauge,
    /// Load reports folded into another because their session sent them
    /// sooner than the pacing allows (`server::load_pacing`).
    pub load_reports_coalesced: Counter,
    /// 1 while this node leads (a node without etcd always does), else 0.
    pub leader: Gauge,
    /// The term of the leadership this node knows of (0: none known).
    pub term: Gauge,
    /// The leader lease etcd granted this node when it last won (seconds).
    pub leader_lease_seconds: Gauge,
    leadership_changes: Family<LeadershipLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("shardalloc");
        let metrics = Metrics {
            decisions: Family::default(),
            fallbacks: Family::default(),
            handoffs: Family::default(),
            clipped: Family::default(),
            regions: Family::default(),
            shards: Family::default(),
            placements: Family::default(),
            frozen: Family::default(),
            region_load: Family::default(),
            load_imbalance: Family::default(),
            strategy_calls: HistogramFamily::new_with_constructor(latency),
            strategy_series: StrategySeries::default(),
            commit_seconds: latency(),
            sessions: Gauge::default(),
            load_reports_coalesced: Counter::default(),
            leader: Gauge::default(),
            term: Gauge::default(),
            leader_lease_seconds: Gauge::default(),
            leadership_changes: Family::default(),
            registry: Registry::default(),
        };
        registry.register("decisions", "Allocations by reason", metrics.decisions.clone());
        registry.register("fallbacks", "Strategy answers replaced by the fallback", metrics.fallbacks.clone());
        registry.register("handoffs", "Hand-offs by outcome", metrics.handoffs.clone());
        registry.register("moves_clipped", "Strategy moves the churn limits clipped", metrics.clipped.clone());
        registry.register("regions", "Regions by status", metrics.regions.clone());
        registry.register("shards", "Shards per region", metrics.shards.clone());
        registry.register("placements", "Live placements", metrics.placements.clone());
        registry.register("frozen", "1 while the type is frozen, 2 while strictly", metrics.frozen.clone());
        registry.register("region_load", "A region's shards' smoothed load together", metrics.region_load.clone());
        registry.register(
            "load_imbalance",
            "The most loaded region's load over the mean of the regions that report load",
            metrics.load_imbalance.clone(),
        );
        registry.register("strategy_call_seconds", "Strategy call latency", metrics.strategy_calls.clone());
        registry.register("commit_seconds", "Store commit latency", metrics.commit_seconds.clone());
        registry.register("region_sessions", "Open region sessions", metrics.sessions.clone());
        registry.register(
            "load_reports_coalesced",
            "Load reports a session sent sooner than four a second, folded into the next",
            metrics.load_reports_coalesced.clone(),
        );
        registry.register("leader", "1 while this node leads", metrics.leader.clone());
        registry.register("term", "The term of the leadership this node knows of", metrics.term.clone());
        registry.register(
            "leader_lease_seconds",
            "The leader lease etcd granted when this node last won (etcd raises short ones to its minimum)",
            metrics.leader_lease_seconds.clone(),
        );
        registry.register(
            "leadership_changes",
            "Leaderships this node won or lost, by change",
            metrics.leadership_changes.clone(),
        );
        Metrics { registry, ..metrics }
    }

    /// Counts a leadership this node won or lost.
    pub fn leadership_changed(&self, change: LeadershipChange) {
        self.leadership_changes.get_or_create(&LeadershipLabels { change }).inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String");
        text
    }

    /// Counts what an observation says.
    pub fn observe(&self, entity_type: &str, observation: &Observation) {
        let r#type = LabelText::from(entity_type);
        match observation {
            Observation::Allocated { reason, .. } => {
                let reason = match reason {
                    AllocationReason::Placement => Decision::Placement,
                    AllocationReason::Strategy { .. } => Decision::Strategy,
                    AllocationReason::Fallback(error) => {
                        let labels = FallbackLabels { r#type: r#type.clone(), reason: error.into() };
                        self.fallbacks.get_or_create(&labels).inc();
                        Decision::Fallback
                    }
                };
                self.decisions.get_or_create(&DecisionLabels { r#type, reason }).inc();
            }
            Observation::HandOff { step, .. } => {
                let outcome = match step {
                    Step::Begin => HandOffOutcome::Started,
                    Step::Stop => HandOffOutcome::Stopping,
                };
                self.handoffs.get_or_create(&HandOffLabels { r#type, outcome }).inc();
            }
            Observation::HandOffTimedOut { .. } => {
                self.handoffs.get_or_create(&HandOffLabels { r#type, outcome: HandOffOutcome::TimedOut }).inc();
            }
            Observation::HandOffOwnerGone { .. } => {
                self.handoffs.get_or_create(&HandOffLabels { r#type, outcome: HandOffOutcome::OwnerGone }).inc();
            }
            Observation::MovesClipped { by_limit, .. } => {
                for (limit, count) in by_limit {
                    let labels = ClipLabels { r#type: r#type.clone(), limit: LabelText::from(limit.as_str()) };
                    self.clipped.get_or_create(&labels).inc_by(*count as u64);
                }
            }
            Observation::RebalanceFallback { .. } => {
                self.fallbacks.get_or_create(&FallbackLabels { r#type, reason: FallbackReason::Rebalance }).inc();
            }
            _ => {}
        }
    }

    /// Sets the gauges to these types' figures (the driver reads them off
    /// its catalog); types and regions not named are dropped.
    pub fn update_gauges<'a>(&self, types: impl IntoIterator<Item = TypeGauges<'a>>) {
        self.regions.clear();
        self.shards.clear();
        self.placements.clear();
        self.frozen.clear();
        self.region_load.clear();
        self.load_imbalance.clear();
        for one in types {
            let loads: Vec<f64> = one.regions.iter().filter_map(|r| r.load).collect();
            let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
            if mean > 0.0 {
                let max = loads.iter().copied().fold(0.0, f64::max);
                self.load_imbalance.get_or_create(&TypeLabels { r#type: one.name.into() }).set(max / mean);
            }
            for region in one.regions {
                let status = match region.status {
                    RegionStatus::Up if region.draining => RegionGauge::Draining,
                    RegionStatus::Up => RegionGauge::Up,
                    RegionStatus::Unreachable => RegionGauge::Unreachable,
                    RegionStatus::Leaving => RegionGauge::Leaving,
                };
                self.regions.get_or_create(&RegionLabels { r#type: one.name.into(), status }).inc();
                let labels = ShardLabels { r#type: one.name.into(), region: region.address.into() };
                self.shards.get_or_create(&labels).set(region.shards as i64);
                if let Some(load) = region.load {
                    let labels = ShardLabels { r#type: one.name.into(), region: region.address.into() };
                    self.region_load.get_or_create(&labels).set(load);
                }
            }
            self.placements.get_or_create(&TypeLabels { r#type: one.name.into() }).set(one.placements as i64);
            self.frozen.get_or_create(&TypeLabels { r#type: one.name.into() }).set(one.frozen);
        }
    }

    /// Wraps a slot handle so its calls are timed.
    pub fn timed(&self, entity_type: &str, handle: SlotHandle) -> Timed {
        Timed::new(self.strategy_calls.clone(), self.strategy_series.clone(), entity_type, handle)
    }

    /// Removes every series of a deleted type (its gauges go at the next
    /// [`Metrics::update_gauges`], which lists only the types there are).
    pub fn forget_type(&self, entity_type: &str) {
        let t = || LabelText::from(entity_type);
        for &reason in Decision::ALL {
            self.decisions.remove(&DecisionLabels { r#type: t(), reason });
        }
        for &reason in FallbackReason::ALL {
            self.fallbacks.remove(&FallbackLabels { r#type: t(), reason });
        }
        for &outcome in HandOffOutcome::ALL {
            self.handoffs.remove(&HandOffLabels { r#type: t(), outcome });
        }
        for limit in ClipReason::ALL {
            self.clipped.remove(&ClipLabels { r#type: t(), limit: LabelText::from(limit.as_str()) });
        }
        let strategies =
            self.strategy_series.lock().unwrap_or_else(PoisonError::into_inner).remove(entity_type).unwrap_or_default();
        for strategy in strategies {
            for &call in Call::ALL {
                self.strategy_calls.remove(&CallLabels { r#type: t(), call, strategy: strategy.as_str().into() });
            }
        }
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
