//! Helpers shared by the integration tests.
#![allow(dead_code, reason = "shared by test files that each use a part")]

use shardalloc_guest::Strategy;
use shardalloc_guest::testing::Scenario;
use shardalloc_strategy_least_shard::LeastShard;

/// A strategy configured from JSON.
pub fn strategy(config: &str) -> LeastShard {
    let mut s = LeastShard::default();
    s.configure(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    s
}

/// The current algorithm without limits, as Akka's `strategyWithoutLimits`.
pub fn unlimited() -> LeastShard {
    strategy(r#"{"absolute_limit":1000,"relative_limit":1.0}"#)
}

/// Akka's `createAllocations`: regions a, b, c holding shards `001`, `002`, …
/// numbered consecutively across them.
pub fn abc(a: usize, b: usize, c: usize) -> Scenario {
    let ids: Vec<String> = (1..=a + b + c).map(|n| format!("{n:03}")).collect();
    let spec = format!("a={} b={} c={}", ids[..a].join(","), ids[a..a + b].join(","), ids[a + b..].join(","));
    Scenario::parse(&spec)
}

/// Moves `moved` as the coordinator would: removes them from their homes,
/// then allocates each, in ascending id order, with the strategy, appending
/// it to its new home before the next allocation.
pub fn apply(strategy: &LeastShard, scenario: &Scenario, moved: &[String]) -> Scenario {
    let mut next = scenario.clone();
    for region in &mut next.snapshot.regions {
        region.shards.retain(|s| !moved.contains(s));
    }
    let mut sorted = moved.to_vec();
    sorted.sort();
    for shard in sorted {
        let home = next.allocate(strategy, &shard).expect("allocate");
        let region = next.snapshot.regions.iter_mut().find(|r| r.address == home).unwrap();
        region.shards.push(shard);
    }
    next
}

/// Shard counts in region order.
pub fn sizes(scenario: &Scenario) -> Vec<usize> {
    scenario.snapshot.regions.iter().map(|r| r.shards.len()).collect()
}

/// Literal shard id lists.
pub fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Shard ids `from..=to`, three digits.
pub fn range(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|n| format!("{n:03}")).collect()
}
