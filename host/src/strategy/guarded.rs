//! Answer checking and fallback: the host owns the truth.
//!
//! Every answer is checked against the view it was computed on. allocate
//! must name an allocatable region; rebalance must name shards that are
//! allocated, not already moving, each once, and destinations that are
//! regions of the view (allocatable or not: whether a destination is
//! honoured is decided when the shard arrives). A refused answer, an error or
//! a fault is logged with the strategy's name and version and counted
//! against it (the automatic rollback's rule), and the caller knows why:
//!
//! - a failed `allocate` is replaced by the built-in least-shard compiled
//!   into the host: the shard still needs a home;
//! - a failed `rebalance` moves nothing this round. Another strategy's
//!   moves would undo what this one arranged (a zone or latency policy),
//!   and nothing is lost by waiting for the next round.

use std::collections::HashSet;

use shardalloc_strategy_least_shard::LeastShard;

use super::native::NativeStrategy;
use super::{AllocationStrategy, ClusterView, Info, RebalanceMove, StrategyError};

/// No region can take a shard: every one is down, draining or proxy-only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no allocatable region: every region is unreachable, joining, leaving, draining or proxy-only")]
pub struct NoAllocatableRegion;

/// A decision and, when the strategy's answer was not used, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<T> {
    /// The decision the caller should apply.
    pub value: T,
    /// Set when the strategy's answer was not used: its failure (an
    /// allocation then came from the fallback; a rebalance moves nothing).
    pub fallback: Option<StrategyError>,
}

/// Checks a rebalance answer against the view.
pub fn check_rebalance(view: &ClusterView, moves: &[RebalanceMove]) -> Result<(), StrategyError> {
    let homes = view.home_index();
    let mut seen = HashSet::new();
    for RebalanceMove { shard, to } in moves {
        if let Some(to) = to
            && view.region_index(to).is_none()
        {
            return Err(StrategyError::Invalid(format!("shard {shard} is moved to {to}, which is not a region")));
        }
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
/// as the fallback of a failed allocation.
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

    fn report(&mut self, call: &str, subject: &str, error: &StrategyError, instead: &str) {
        self.strategy.rejected(error);
        let info = self.strategy.info();
        tracing::warn!(
            strategy = %info.name,
            version = %info.version,
            call,
            subject,
            reason = error.kind(),
            "strategy answer not used, {instead}: {error}"
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
        self.report("allocate", shard, &error, "falling back to built-in least-shard");
        match self.fallback.allocate(view, shard, None) {
            Ok(region) if view.is_allocatable(&region) => Ok(Decision { value: region, fallback: Some(error) }),
            _ => Err(NoAllocatableRegion),
        }
    }

    /// Shards to move: the strategy's answer when every shard in it is
    /// allocated, not moving and listed once; else none (with why).
    pub fn rebalance(&mut self, view: &ClusterView) -> Decision<Vec<RebalanceMove>> {
        let error = match self.strategy.rebalance(view) {
            Ok(shards) => match check_rebalance(view, &shards) {
                Ok(()) => return Decision { value: shards, fallback: None },
                Err(error) => error,
            },
            Err(error) => error,
        };
        self.report("rebalance", "", &error, "moving nothing this round");
        Decision { value: Vec::new(), fallback: Some(error) }
    }
}

#[cfg(test)]
mod tests {
    use shardalloc_guest::testing::Scenario;
    use shardalloc_test_misbehaving::Misbehaving;

    use super::*;

    fn guarded(config: &str) -> Guarded {
        Guarded::new(Box::new(NativeStrategy::new(Misbehaving::default(), config).unwrap()))
    }

    fn view(scenario: Scenario) -> ClusterView {
        ClusterView::from_snapshot(&scenario.snapshot)
    }

    #[test]
    fn bad_allocations_fall_back_with_the_reason() {
        let v = view(Scenario::parse("a=1,2 b= d=").draining("d"));
        let cases = [
            ("error", "strategy error: misbehaving on purpose"),
            ("out-of-range", "invalid answer: region index 10 out of range (3 regions)"),
            ("not-allocatable", "invalid answer: region d is draining"),
        ];
        for (mode, reason) in cases {
            let decision = guarded(&format!(r#"{{"allocate":"{mode}"}}"#)).allocate(&v, "9", None).unwrap();
            assert_eq!(decision.value, "b");
            assert_eq!(decision.fallback.map(|e| e.to_string()).as_deref(), Some(reason));
        }
        let good = guarded("").allocate(&v, "9", None).unwrap();
        assert_eq!(good, Decision { value: "b".into(), fallback: None });
    }

    #[test]
    fn no_allocatable_region_is_an_error_not_a_fallback() {
        let v = view(Scenario::parse("a=1").draining("a"));
        assert_eq!(guarded("").allocate(&v, "9", None), Err(NoAllocatableRegion));
    }

    #[test]
    fn a_failed_rebalance_moves_nothing_where_least_shard_would_move_shards() {
        // Unbalanced, nothing moving: least-shard would move two shards to b.
        let v = view(Scenario::parse("a=1,2,3,4 b="));
        let mut least_shard = NativeStrategy::new(LeastShard::default(), "").unwrap();
        assert!(!least_shard.rebalance(&v).unwrap().is_empty(), "least-shard would move shards here");
        for mode in ["error", "duplicate", "out-of-range"] {
            let decision = guarded(&format!(r#"{{"rebalance":"{mode}"}}"#)).rebalance(&v);
            assert_eq!(decision.value, Vec::<RebalanceMove>::new(), "{mode}: nothing moves");
            assert!(decision.fallback.is_some(), "{mode}: the failure is reported");
        }
    }

    #[test]
    fn bad_rebalances_fall_back_with_the_reason() {
        let v = view(Scenario::parse("a=1,2,3,4 b=5 c=").in_progress(&["5", "9"]));
        let cases = [
            ("duplicate", "invalid answer: shard 1 is listed twice"),
            ("moving", "invalid answer: shard 5 is already moving"),
            ("homeless", "invalid answer: shard 9 is not allocated"),
            ("out-of-range", "invalid answer: shard handle 9 out of range (6 shards)"),
            ("error", "strategy error: misbehaving on purpose"),
            ("bad-destination", "invalid answer: region index 8 out of range (3 regions)"),
        ];
        for (mode, reason) in cases {
            let decision = guarded(&format!(r#"{{"rebalance":"{mode}"}}"#)).rebalance(&v);
            assert_eq!(decision.fallback.map(|e| e.to_string()).as_deref(), Some(reason), "{mode:?}");
            // least-shard holds while a hand-off is in progress.
            assert_eq!(decision.value, Vec::<RebalanceMove>::new());
        }
        let all = guarded(r#"{"rebalance":"all"}"#).rebalance(&v);
        let anywhere = |shards: &[&str]| shards.iter().map(|s| RebalanceMove::anywhere(*s)).collect::<Vec<_>>();
        assert_eq!(all, Decision { value: anywhere(&["1", "2", "3", "4"]), fallback: None });
        let to_last = guarded(r#"{"rebalance":"to-last"}"#).rebalance(&v);
        let want = vec![RebalanceMove { shard: "1".into(), to: Some("c".into()) }];
        assert_eq!(to_last, Decision { value: want, fallback: None });
    }

    #[test]
    fn a_destination_must_be_a_region_of_the_view() {
        let v = view(Scenario::parse("a=1,2 b=3"));
        let moves = |to: &str| vec![RebalanceMove { shard: "1".into(), to: Some(to.into()) }];
        assert_eq!(check_rebalance(&v, &moves("b")), Ok(()));
        assert_eq!(
            check_rebalance(&v, &moves("z")),
            Err(StrategyError::Invalid("shard 1 is moved to z, which is not a region".into()))
        );
    }
}
