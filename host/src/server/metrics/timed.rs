//! Strategy calls timed into `shardalloc_strategy_call_seconds`, by the
//! strategy that answered.

use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

use super::{Call, CallLabels, HistogramFamily, StrategySeries};
use crate::engine::slot::SlotHandle;
use crate::strategy::{AllocationStrategy, ClusterView, Info, RebalanceMove, StrategyError};

/// Most distinct strategies (`name@version`) one type's call latency is
/// reported under; the calls of any further ones count as `other`, so
/// uploading versions in a loop cannot grow the metrics without bound.
pub const MAX_STRATEGY_SERIES: usize = 8;

/// A slot handle whose calls are timed.
pub struct Timed {
    handle: SlotHandle,
    family: HistogramFamily,
    /// Where the series made are listed, so a deleted type's are removed.
    made: StrategySeries,
    entity_type: String,
    /// `(name@version, allocate, rebalance)` of each strategy seen.
    series: Vec<(String, Histogram, Histogram)>,
    /// The strategy of the last call and its index in `series`.
    current: Option<(String, String, usize)>,
}

impl Timed {
    pub(super) fn new(family: HistogramFamily, made: StrategySeries, entity_type: &str, handle: SlotHandle) -> Self {
        Timed { family, made, entity_type: entity_type.to_owned(), series: Vec::new(), current: None, handle }
    }

    /// Records a call's duration under the strategy that answered it (the
    /// handle follows hot swaps, so this is read after the call). The
    /// series is looked up only when the strategy changed: a call formats
    /// and allocates nothing.
    fn observe(&mut self, call: Call, seconds: f64) {
        let info = self.handle.info();
        let index = match &self.current {
            Some((name, version, index)) if *name == info.name && *version == info.version => *index,
            _ => {
                let (name, version) = (info.name.clone(), info.version.clone());
                let index = self.series_for(&name, &version);
                self.current = Some((name, version, index));
                index
            }
        };
        let (_, allocate, rebalance) = &self.series[index];
        match call {
            Call::Allocate => allocate.observe(seconds),
            Call::Rebalance => rebalance.observe(seconds),
        }
    }

    /// The index of the series of `name@version`, made when new (or
    /// `other` once [`MAX_STRATEGY_SERIES`] exist).
    fn series_for(&mut self, name: &str, version: &str) -> usize {
        let mut label = format!("{name}@{version}");
        let known =
            |label: &str, series: &[(String, Histogram, Histogram)]| series.iter().position(|(l, _, _)| l == label);
        if known(&label, &self.series).is_none() && self.series.len() >= MAX_STRATEGY_SERIES {
            label = "other".to_owned();
        }
        if let Some(index) = known(&label, &self.series) {
            return index;
        }
        let labels =
            |call| CallLabels { r#type: self.entity_type.as_str().into(), call, strategy: label.as_str().into() };
        let allocate = self.family.get_or_create_owned(&labels(Call::Allocate));
        let rebalance = self.family.get_or_create_owned(&labels(Call::Rebalance));
        self.made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(self.entity_type.clone())
            .or_default()
            .insert(label.clone());
        self.series.push((label, allocate, rebalance));
        self.series.len() - 1
    }
}

impl AllocationStrategy for Timed {
    fn info(&self) -> &Info {
        self.handle.info()
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        let started = Instant::now();
        let answer = self.handle.allocate(view, shard, requester);
        self.observe(Call::Allocate, started.elapsed().as_secs_f64());
        answer
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        let started = Instant::now();
        let answer = self.handle.rebalance(view);
        self.observe(Call::Rebalance, started.elapsed().as_secs_f64());
        answer
    }

    fn rejected(&mut self, error: &StrategyError) {
        self.handle.rejected(error);
    }
}
