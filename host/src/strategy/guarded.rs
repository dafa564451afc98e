//! Answer checking and fallback: the host owns the truth.
//!
//! Every answer is checked against the view it was computed on. allocate
//! must name an allocatable region; rebalance must name shards that are
//! allocated, not already moving, each once. A refused answer, an error or
//! a fault is logged with the strategy's name and version and replaced by
//! the built-in least-shard compiled into the host, so the caller always
//! gets a valid decision and knows when it came from the fallback and why.

use std::collections::HashSet;

use shardalloc_strategy_least_shard::LeastShard;

use super::native::NativeStrategy;
use super::{AllocationStrategy, ClusterView, Info, StrategyError};

/// No region can take a shard: every one is down, draining or proxy-only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no allocatable region: every region is unreachable, joining, leaving, draining or proxy-only")]
pub struct NoAllocatableRegion;

/// A decision and, when the strategy's answer was not used, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<T> {
    /// The decision the caller should apply.
    pub value: T,
    /// Set when the value came from the fallback: the strategy's failure.
    pub fallback: Option<StrategyError>,
}

/// Checks a rebalance answer against the view.
pub fn check_rebalance(view: &ClusterView, shards: &[String]) -> Result<(), StrategyError> {
    let homes = view.home_index();
    let mut seen = HashSet::new();
    for shard in shards {
        if !homes.contains_key(shard.as_str()) {
            return Err(StrategyError::Invalid(format!("shard {shard} is not allocated")));
        }
        if view.in_progress().contains(shard) {
            return Err(StrategyError::Invalid(format!("shard {shard} is already moving")));
        }
        if !seen.insert(shard.as_str()) {
            return Err(StrategyError::Invalid(format!("shard {shard} is listed twice")));
        }
    }
    Ok(())
}

/// A strategy whose every answer is checked, with the native least-shard
/// as fallback.
pub struct Guarded {
    strategy: Box<dyn AllocationStrategy>,
    fallback: NativeStrategy<LeastShard>,
}

impl Guarded {
    /// Guards a strategy.
    pub fn new(strategy: Box<dyn AllocationStrategy>) -> Self {
        let fallback = NativeStrategy::new(LeastShard::default(), "").expect("least-shard accepts its defaults");
        Guarded { strategy, fallback }
    }

    /// The guarded strategy's description.
    pub fn info(&self) -> &Info {
        self.strategy.info()
    }

    fn report(&self, call: &str, subject: &str, error: &StrategyError) {
        let info = self.strategy.info();
        tracing::warn!(
            strategy = %info.name,
            version = %info.version,
            call,
            subject,
            reason = error.kind(),
            "strategy answer not used, falling back to built-in least-shard: {error}"
        );
    }

    /// A home for `shard`: the strategy's answer when it is an allocatable
    /// region, else the fallback's.
    pub fn allocate(
        &mut self,
        view: &ClusterView,
        shard: &str,
        requester: Option<&str>,
    ) -> Result<Decision<String>, NoAllocatableRegion> {
        if !view.regions().iter().any(|r| r.is_allocatable()) {
            return Err(NoAllocatableRegion);
        }
        let error = match self.strategy.allocate(view, shard, requester) {
            Ok(region) => match view.not_allocatable_reason(&region) {
                None => return Ok(Decision { value: region, fallback: None }),
                Some(reason) => StrategyError::Invalid(reason),
            },
            Err(error) => error,
        };
        self.report("allocate", shard, &error);
        match self.fallback.allocate(view, shard, None) {
            Ok(region) if view.is_allocatable(&region) => Ok(Decision { value: region, fallback: Some(error) }),
            _ => Err(NoAllocatableRegion),
        }
    }

    /// Shards to move: the strategy's answer when every shard in it is
    /// allocated, not moving and listed once; else the fallback's.
    pub fn rebalance(&mut self, view: &ClusterView) -> Decision<Vec<String>> {
        let error = match self.strategy.rebalance(view) {
            Ok(shards) => match check_rebalance(view, &shards) {
                Ok(()) => return Decision { value: shards, fallback: None },
                Err(error) => error,
            },
            Err(error) => error,
        };
        self.report("rebalance", "", &error);
        let value = match self.fallback.rebalance(view) {
            Ok(shards) if check_rebalance(view, &shards).is_ok() => shards,
            _ => Vec::new(),
        };
        Decision { value, fallback: Some(error) }
    }
}
