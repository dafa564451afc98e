//! Randomised convergence: repeated rebalance rounds, with every moved shard
//! re-allocated by the strategy, bring any healthy cluster to
//! `max - min <= 1` shards per region within a bounded number of rounds, and
//! then stop moving anything.
//!
//! A round: `rebalance`; the returned shards leave their regions; each is
//! allocated, in ascending id order, with the strategy and appended to its new
//! region before the next allocation. Hand-offs complete within the round, so
//! nothing is in progress at the next one.

use std::collections::HashSet;
use std::sync::Arc;

use shardalloc_guest::testing::{Scenario, Shape, generate};
use shardalloc_guest::{Allocations, ShardKey, Strategy, Topology, View};
use shardalloc_strategy_least_shard::LeastShard;

struct Cluster {
    topology: Arc<Topology>,
    shards: Vec<Vec<String>>,
}

impl Cluster {
    fn new(scenario: &Scenario) -> Self {
        let regions = scenario.snapshot.topology().regions().to_vec();
        let topology = Arc::new(Topology::new(regions, Vec::new(), None));
        let shards = scenario.snapshot.regions.iter().map(|r| r.shards.clone()).collect();
        Cluster { topology, shards }
    }

    /// Every shard on the first region.
    fn all_on_first(scenario: &Scenario) -> Self {
        let mut cluster = Cluster::new(scenario);
        let mut all: Vec<String> = cluster.shards.iter_mut().flat_map(std::mem::take).collect();
        all.sort_by_key(|s| s[1..].parse::<u64>().unwrap());
        cluster.shards[0] = all;
        cluster
    }

    fn view(&self) -> View {
        let counts = self.shards.iter().map(|s| s.len() as u32).collect();
        View::new(self.topology.clone(), counts, Vec::new()).unwrap()
    }

    fn spread(&self) -> usize {
        let sizes = self.shards.iter().map(Vec::len);
        sizes.clone().max().unwrap() - sizes.min().unwrap()
    }

    /// One round; returns how many shards moved.
    fn round(&mut self, strategy: &LeastShard) -> usize {
        let table = Allocations::from_ids(&self.shards, &[] as &[String]);
        let moved = strategy.rebalance(&self.view(), &table).unwrap();
        let mut ids: Vec<String> = moved.iter().map(|m| table.shard_id(m.shard).into_owned()).collect();
        let gone: HashSet<&str> = ids.iter().map(String::as_str).collect();
        assert_eq!(gone.len(), ids.len(), "a shard returned twice");
        for region in &mut self.shards {
            region.retain(|s| !gone.contains(s.as_str()));
        }
        ids.sort();
        for id in ids {
            let home = strategy.allocate(&self.view(), &ShardKey::new(id.clone()), None).unwrap();
            self.shards[home.index()].push(id);
        }
        moved.len()
    }

    /// Rounds until `max - min <= 1`; then checks the next round moves nothing.
    fn converge(&mut self, strategy: &LeastShard, max_rounds: usize) -> usize {
        let total: usize = self.shards.iter().map(Vec::len).sum();
        let mut rounds = 0;
        while self.spread() > 1 {
            assert!(rounds < max_rounds, "not balanced after {rounds} rounds: spread {}", self.spread());
            let moved = self.round(strategy);
            assert!(moved > 0, "stuck with spread {} after {rounds} rounds", self.spread());
            rounds += 1;
        }
        assert_eq!(self.round(strategy), 0, "moved shards in a balanced cluster");
        assert_eq!(self.shards.iter().map(Vec::len).sum::<usize>(), total, "lost or duplicated a shard");
        rounds
    }
}

fn strategy(config: &str) -> LeastShard {
    let mut s = LeastShard::default();
    s.configure(config).unwrap();
    s
}

/// Shards above the optimal count (the phase-1 work), and the per-round limit.
fn work(cluster: &Cluster, strategy: &LeastShard) -> (usize, usize) {
    let total: usize = cluster.shards.iter().map(Vec::len).sum();
    let optimal = total.div_ceil(cluster.shards.len());
    let excess = cluster.shards.iter().map(|s| s.len().saturating_sub(optimal)).sum();
    (excess, strategy.config().limit(total))
}

const SHAPES: [(usize, usize); 7] = [(100, 1000), (64, 1000), (100, 150), (37, 611), (10, 100), (3, 1000), (2, 7)];

#[test]
fn current_with_default_limits_converges_at_limit_speed() {
    // Phase 1 moves `limit` = min(20, 0.1 × shards) per round until no region
    // is above optimal; phase 2 then needs a few more rounds.
    let s = LeastShard::default();
    let mut worst_extra = 0;
    for (regions, shards) in SHAPES {
        for seed in 0..3 {
            let scenario = generate(seed, &Shape::healthy(regions, shards));
            for mut cluster in [Cluster::new(&scenario), Cluster::all_on_first(&scenario)] {
                let (excess, limit) = work(&cluster, &s);
                let floor = excess.div_ceil(limit);
                let rounds = cluster.converge(&s, 200);
                println!("{regions}x{shards} seed {seed}: excess {excess}, limit {limit}: {rounds} rounds");
                assert!(rounds <= floor + 2, "{regions}x{shards} seed {seed}: {rounds} rounds, floor {floor}");
                worst_extra = worst_extra.max(rounds.saturating_sub(floor));
            }
        }
    }
    println!("worst rounds beyond ceil(excess / limit): {worst_extra}");
}

#[test]
fn current_without_limits_converges_in_two_rounds() {
    let s = strategy(r#"{"absolute_limit":100000,"relative_limit":1}"#);
    for (regions, shards) in SHAPES {
        for seed in 0..3 {
            let scenario = generate(seed, &Shape::healthy(regions, shards));
            for mut cluster in [Cluster::new(&scenario), Cluster::all_on_first(&scenario)] {
                let rounds = cluster.converge(&s, 10);
                println!("{regions}x{shards} seed {seed}: {rounds} rounds");
                assert!(rounds <= 2, "{regions}x{shards} seed {seed}: {rounds} rounds");
            }
        }
    }
}

#[test]
fn classic_converges_one_shard_per_round() {
    // With threshold 1 the classic algorithm moves min(difference - 1, 1) = 1
    // shard per round, always from the most to the least loaded region.
    let s = strategy(r#"{"algorithm":"classic"}"#);
    for (regions, shards) in [(20, 200), (7, 150), (2, 31)] {
        for seed in 0..3 {
            let scenario = generate(seed, &Shape::healthy(regions, shards));
            for mut cluster in [Cluster::new(&scenario), Cluster::all_on_first(&scenario)] {
                let (excess, _) = work(&cluster, &s);
                let rounds = cluster.converge(&s, 1000);
                println!("classic {regions}x{shards} seed {seed}: excess {excess}: {rounds} rounds");
                assert!(rounds <= excess + regions, "{regions}x{shards} seed {seed}: {rounds} rounds");
            }
        }
    }
}
