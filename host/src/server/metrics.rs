//! Prometheus metrics, served as text at `GET /metrics`.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `shardalloc_decisions_total` | type, reason | allocations by reason (`placement`, `strategy`, `fallback`) |
//! | `shardalloc_fallbacks_total` | type, reason | strategy answers replaced by the fallback, by failure kind |
//! | `shardalloc_handoffs_total` | type, outcome | hand-off steps and ends: `started` (BeginHandOff sent), `stopping` (HandOff sent to the owner), `timed-out`, `owner-gone` |
//! | `shardalloc_regions` | type, status | regions by status (`up`, `unreachable`, `leaving`, `draining`) |
//! | `shardalloc_shards` | type, region | shards per region |
//! | `shardalloc_placements` | type | live placements |
//! | `shardalloc_strategy_call_seconds` | type, call | strategy call latency (`allocate`, `rebalance`) |
//! | `shardalloc_commit_seconds` | | store commit latency, once per driver turn |
//! | `shardalloc_region_sessions` | | open region sessions |

use std::collections::BTreeMap;
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::driver::TypeEntry;
use crate::coordinator::{Observation, Step};
use crate::engine::registry::SlotHandle;
use crate::strategy::external::AllocationReason;
use crate::strategy::{AllocationStrategy, ClusterView, Info, StrategyError};

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn latency() -> Histogram {
    // 1 µs to about 4 s.
    Histogram::new(exponential_buckets(1e-6, 4.0, 12))
}

/// The node's metrics.
pub struct Metrics {
    registry: Registry,
    decisions: Family<Labels, Counter>,
    fallbacks: Family<Labels, Counter>,
    handoffs: Family<Labels, Counter>,
    regions: Family<Labels, Gauge>,
    shards: Family<Labels, Gauge>,
    placements: Family<Labels, Gauge>,
    strategy_calls: HistogramFamily,
    /// Store commit latency.
    pub commit_seconds: Histogram,
    /// Open region sessions.
    pub sessions: Gauge,
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
            regions: Family::default(),
            shards: Family::default(),
            placements: Family::default(),
            strategy_calls: HistogramFamily::new_with_constructor(latency),
            commit_seconds: latency(),
            sessions: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register("decisions", "Allocations by reason", metrics.decisions.clone());
        registry.register("fallbacks", "Strategy answers replaced by the fallback", metrics.fallbacks.clone());
        registry.register("handoffs", "Hand-offs by outcome", metrics.handoffs.clone());
        registry.register("regions", "Regions by status", metrics.regions.clone());
        registry.register("shards", "Shards per region", metrics.shards.clone());
        registry.register("placements", "Live placements", metrics.placements.clone());
        registry.register("strategy_call_seconds", "Strategy call latency", metrics.strategy_calls.clone());
        registry.register("commit_seconds", "Store commit latency", metrics.commit_seconds.clone());
        registry.register("region_sessions", "Open region sessions", metrics.sessions.clone());
        Metrics { registry, ..metrics }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String");
        text
    }

    /// Counts what an observation says.
    pub fn observe(&self, entity_type: &str, observation: &Observation) {
        match observation {
            Observation::Allocated { reason, .. } => {
                let reason = match reason {
                    AllocationReason::Placement => "placement",
                    AllocationReason::Strategy { .. } => "strategy",
                    AllocationReason::Fallback(error) => {
                        self.fallbacks.get_or_create(&labels(&[("type", entity_type), ("reason", error.kind())])).inc();
                        "fallback"
                    }
                };
                self.decisions.get_or_create(&labels(&[("type", entity_type), ("reason", reason)])).inc();
            }
            Observation::HandOff { step, .. } => {
                let outcome = match step {
                    Step::Begin => "started",
                    Step::Stop => "stopping",
                };
                self.handoffs.get_or_create(&labels(&[("type", entity_type), ("outcome", outcome)])).inc();
            }
            Observation::HandOffTimedOut { .. } => {
                self.handoffs.get_or_create(&labels(&[("type", entity_type), ("outcome", "timed-out")])).inc();
            }
            Observation::HandOffOwnerGone { .. } => {
                self.handoffs.get_or_create(&labels(&[("type", entity_type), ("outcome", "owner-gone")])).inc();
            }
            Observation::RebalanceFallback { .. } => {
                self.fallbacks.get_or_create(&labels(&[("type", entity_type), ("reason", "rebalance")])).inc();
            }
            _ => {}
        }
    }

    /// Recomputes the gauges from the types' state.
    pub fn update_gauges(&self, types: &BTreeMap<String, TypeEntry>) {
        self.regions.clear();
        self.shards.clear();
        self.placements.clear();
        for (name, entry) in types {
            let durable = entry.coordinator.durable();
            for region in durable.regions.values() {
                let status = match entry.region_status(&region.address) {
                    "up" if region.draining => "draining",
                    status => status,
                };
                self.regions.get_or_create(&labels(&[("type", name), ("status", status)])).inc();
                self.shards
                    .get_or_create(&labels(&[("type", name), ("region", &region.address)]))
                    .set(region.shards.len() as i64);
            }
            self.placements.get_or_create(&labels(&[("type", name)])).set(durable.live_placements().count() as i64);
        }
    }

    /// Wraps a slot handle so its calls are timed.
    pub fn timed(&self, entity_type: &str, handle: SlotHandle) -> Timed {
        Timed {
            allocate: self.strategy_calls.get_or_create_owned(&labels(&[("type", entity_type), ("call", "allocate")])),
            rebalance: self
                .strategy_calls
                .get_or_create_owned(&labels(&[("type", entity_type), ("call", "rebalance")])),
            handle,
        }
    }
}

/// A slot handle whose calls are timed.
pub struct Timed {
    handle: SlotHandle,
    allocate: Histogram,
    rebalance: Histogram,
}

impl AllocationStrategy for Timed {
    fn info(&self) -> &Info {
        self.handle.info()
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        let started = Instant::now();
        let answer = self.handle.allocate(view, shard, requester);
        self.allocate.observe(started.elapsed().as_secs_f64());
        answer
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<String>, StrategyError> {
        let started = Instant::now();
        let answer = self.handle.rebalance(view);
        self.rebalance.observe(started.elapsed().as_secs_f64());
        answer
    }

    fn rejected(&mut self, error: &StrategyError) {
        self.handle.rejected(error);
    }
}
