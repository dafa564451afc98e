//! Replaying a load trace ([`Trace`]) against a strategy, round by round,
//! as `shardalloc strategy simulate --trace` does for several strategies
//! side by side.
//!
//! Each round, at `round × every_ms`:
//! 1. the trace's events up to then apply: loads change, regions join, and
//!    the shards of a region that leaves or fails are homed again through
//!    `allocate` (not counted as moves);
//! 2. new shards (first seen in a load line) are homed through `allocate`;
//! 3. the strategy's `rebalance` answer (placements aside: a trace has none)
//!    is carried out: each shard leaves its home and is allocated again;
//! 4. the round's figures are taken: the moves, the load they carried,
//!    `maxOverBound`, the most loaded region's load over the bound
//!    `max(mean region load, the heaviest shard's load)`, the best any
//!    placement can do without splitting shards, and, when the trace has
//!    edges, `cutRatio`: the weight of the edges whose shards live on
//!    different regions over the weight of all edges between homed shards
//!    (0: every pair that talks lives together);
//! 5. every region that joined after time 0 is checked against
//!    [`JOINED_TARGET`] × the mean region load, and × the level: the rounds
//!    it took to reach each, counting the round it joined in as the first,
//!    go into the summary's `joins`. The level is what every region can
//!    carry when each shard heavier than it has a region of its own and
//!    the other regions share the rest evenly: the mean when no shard
//!    outweighs it, lower when a few do (then even the best placement
//!    leaves most regions below the mean).
//!
//! Strategies see the trace's loads as they stand (the node would smooth
//! them; a trace's loads are already rates). Hand-offs complete within a
//! round.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use shardalloc_guest::{Snapshot, SnapshotRegion, Topology};

use super::external::ExternalAllocation;
use super::table::ShardTable;
use super::trace::{Trace, TraceEvent};
use super::{AllocationCause, ClusterView};

/// The share of the mean region load a joining region is waited for.
pub const JOINED_TARGET: f64 = 0.9;

/// One round's figures for one strategy.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundFigures {
    /// The strategy's moves this round.
    pub moves: usize,
    /// The load those moves carried.
    pub moved_load: f64,
    /// The most loaded region's load over the bound (1 is the best possible).
    pub max_over_bound: f64,
    /// The share of edge weight crossing regions (none: the trace has no
    /// edge between homed shards now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_ratio: Option<f64>,
}

/// A strategy's figures over a whole replay.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The strategy (`name@version`).
    pub strategy: String,
    /// Rounds replayed.
    pub rounds: usize,
    /// `maxOverBound` after each round: its median, 99th percentile and maximum.
    pub max_over_bound: Percentiles,
    /// Moves over all rounds.
    pub moves: usize,
    /// The load moved over all rounds, as a fraction of the load carried
    /// over all rounds (each round's total load summed).
    pub moved_load_fraction: f64,
    /// How fast the regions that joined after time 0 took their share.
    pub joins: JoinFigures,
    /// `cutRatio` over the rounds that had one (none: the trace has no
    /// edges).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_ratio: Option<CutRatio>,
}

/// The cut ratio over a replay: its median and 99th percentile over the
/// rounds, and the last round's.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CutRatio {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// After the last round.
    #[serde(rename = "final")]
    pub last: f64,
}

/// How fast joining regions reached [`JOINED_TARGET`] × the mean load,
/// and × the level (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinFigures {
    /// Regions that joined after time 0.
    pub regions: usize,
    /// Those that reached 0.9 × the mean (the others left first, or never did).
    pub reached_mean: usize,
    /// The rounds each that reached it took, the round it joined in first.
    pub rounds_to_mean: Percentiles,
    /// Those that reached 0.9 × the level.
    pub reached_level: usize,
    /// The rounds each that reached it took.
    pub rounds_to_level: Percentiles,
}

/// A region that joined after time 0: the round it joined in (from 1),
/// and the rounds it took to reach the mean's and the level's targets.
#[derive(Debug, Clone)]
struct Joined {
    address: String,
    round: usize,
    to_mean: Option<usize>,
    to_level: Option<usize>,
}

/// The level of `loads` over `regions` regions: shards heavier than the
/// level each alone on a region, the rest shared evenly (the shards'
/// loads are the floors of `load-balance`'s level).
fn level(loads: &HashMap<String, f64>, regions: usize) -> f64 {
    shardalloc_strategy_load_balance::level(loads.values().sum(), loads.values().copied(), regions)
}

/// A distribution's median, 99th percentile and maximum.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The maximum.
    pub max: f64,
}

impl Percentiles {
    /// Of `values` (nearest rank); all 0 when there are none.
    pub fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Percentiles { p50: 0.0, p99: 0.0, max: 0.0 };
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Percentiles { p50: at(0.5), p99: at(0.99), max: values[values.len() - 1] }
    }
}

/// One strategy's replay of a trace. See the module documentation.
pub struct Replay<'t> {
    trace: &'t Trace,
    external: ExternalAllocation,
    /// The next event to apply.
    next: usize,
    /// Regions in join order, each with its shards in allocation order.
    regions: Vec<(String, Vec<String>)>,
    /// The topology of `regions`, made again when they change.
    topology: Arc<Topology>,
    /// The shard table strategies read (homes and loads), kept change by
    /// change as the coordinator keeps its own.
    table: Arc<ShardTable>,
    loads: HashMap<String, f64>,
    /// The weight of each pair of shards that talk (`a` below `b`).
    edges: HashMap<(String, String), f64>,
    /// Shards waiting for a home (no region could take them).
    homeless: Vec<String>,
    rounds: Vec<RoundFigures>,
    joined: Vec<Joined>,
    total_load: f64,
    moved_load: f64,
}

impl<'t> Replay<'t> {
    /// A replay of `trace` against `external`.
    pub fn new(trace: &'t Trace, external: ExternalAllocation) -> Self {
        let topology = Arc::new(Topology::new(Vec::new(), Vec::new(), None));
        let table = Arc::new(ShardTable::new(&topology, Vec::new()));
        Replay {
            trace,
            external,
            next: 0,
            regions: Vec::new(),
            topology,
            table,
            loads: HashMap::new(),
            edges: HashMap::new(),
            homeless: Vec::new(),
            rounds: Vec::new(),
            joined: Vec::new(),
            total_load: 0.0,
            moved_load: 0.0,
        }
    }

    /// Makes the topology of the regions now, and gives it to the table.
    fn regions_changed(&mut self) {
        let snapshot = Snapshot {
            regions: (self.regions.iter())
                .map(|(address, _)| SnapshotRegion { address: address.clone(), ..SnapshotRegion::default() })
                .collect(),
            ..Snapshot::default()
        };
        self.topology = Arc::new(snapshot.topology());
        Arc::make_mut(&mut self.table).set_topology(&self.topology, &[], &[]);
    }

    /// The view `rebalance` sees: every shard list, with the table.
    fn view(&self) -> ClusterView {
        let homes = self.regions.iter().map(|(_, shards)| shards.clone()).collect();
        ClusterView::new(self.topology.clone(), Vec::new(), homes, Default::default())
            .expect("the replay keeps the view consistent")
            .with_table(self.table.clone())
    }

    /// Homes `shards` through the strategy's `allocate` (or the
    /// destinations a rebalance named, as the node honours them), one by
    /// one, each seeing the ones before it placed, at the trace's time `now`.
    fn home(&mut self, shards: Vec<String>, cause: AllocationCause, destinations: &HashMap<String, String>, now: u64) {
        for shard in shards {
            let counts = self.regions.iter().map(|(_, s)| s.len() as u32).collect();
            let view = ClusterView::for_allocation(self.topology.clone(), Vec::new(), counts)
                .expect("the replay keeps the view consistent")
                .with_table(self.table.clone())
                .because(cause)
                .at(now);
            let allocation =
                self.external.allocate_to(&view, &shard, None, destinations.get(&shard).map(String::as_str));
            drop(view);
            match allocation {
                Ok(allocation) => {
                    let index = self.regions.iter().position(|(a, _)| *a == allocation.region);
                    self.regions[index.expect("allocations name known regions")].1.push(shard.clone());
                    let table = Arc::make_mut(&mut self.table);
                    table.home(&shard, &allocation.region, now).expect("a region of the topology");
                    table.set_loads([(shard.as_str(), self.loads.get(&shard).copied().unwrap_or(0.0))]);
                }
                Err(_) => self.homeless.push(shard),
            }
        }
    }

    /// Applies the events up to `until_ms`.
    fn apply(&mut self, until_ms: u64) {
        let mut new = Vec::new();
        let mut orphans = Vec::new();
        let mut changed = Vec::new();
        let mut regions_changed = false;
        while let Some((t, event)) = self.trace.events.get(self.next) {
            if *t > until_ms {
                break;
            }
            self.next += 1;
            match event {
                TraceEvent::Load { shard, load } => {
                    if self.loads.insert(shard.clone(), *load).is_none() {
                        new.push(shard.clone());
                    } else {
                        changed.push(shard.clone());
                    }
                }
                TraceEvent::Edge { a, b, weight } => {
                    if *weight > 0.0 {
                        self.edges.insert((a.clone(), b.clone()), *weight);
                    } else {
                        self.edges.remove(&(a.clone(), b.clone()));
                    }
                }
                TraceEvent::Join(address) => {
                    self.regions.push((address.clone(), Vec::new()));
                    if *t > 0 {
                        let round = self.rounds.len() + 1;
                        self.joined.push(Joined { address: address.clone(), round, to_mean: None, to_level: None });
                    }
                    regions_changed = true;
                }
                TraceEvent::Leave(address) | TraceEvent::Fail(address) => {
                    if let Some(index) = self.regions.iter().position(|(a, _)| a == address) {
                        let (_, shards) = self.regions.remove(index);
                        for shard in &shards {
                            Arc::make_mut(&mut self.table).unhome(shard);
                        }
                        orphans.extend(shards);
                        regions_changed = true;
                    }
                }
            }
        }
        if regions_changed {
            self.regions_changed();
        }
        let loads = &self.loads;
        Arc::make_mut(&mut self.table).set_loads(changed.iter().map(|s| (s.as_str(), loads[s])));
        new.append(&mut self.homeless);
        self.home(orphans, AllocationCause::RegionRemoved, &HashMap::new(), until_ms);
        self.home(new, AllocationCause::NewShard, &HashMap::new(), until_ms);
    }

    /// Replays up to `until_ms` and runs one round there.
    pub fn round(&mut self, until_ms: u64) -> RoundFigures {
        self.apply(until_ms);
        let view = self.view().at(until_ms);
        let decision = self.external.rebalance(&view);
        drop(view);
        let answer = decision.shards;
        let mut moved_load = 0.0;
        let moving: std::collections::HashSet<&str> = answer.iter().map(String::as_str).collect();
        for (_, shards) in &mut self.regions {
            shards.retain(|s| !moving.contains(s.as_str()));
        }
        for shard in &answer {
            Arc::make_mut(&mut self.table).unhome(shard);
            moved_load += self.loads.get(shard).copied().unwrap_or(0.0);
        }
        let moves = answer.len();
        self.home(answer, AllocationCause::Rebalance, &decision.destinations, until_ms);
        let region_loads: Vec<f64> = (self.regions.iter())
            .map(|(_, shards)| shards.iter().map(|s| self.loads.get(s).copied().unwrap_or(0.0)).sum())
            .collect();
        let total: f64 = region_loads.iter().sum();
        let mean = total / region_loads.len().max(1) as f64;
        let heaviest = self.loads.values().copied().fold(0.0, f64::max);
        let bound = mean.max(heaviest);
        let max = region_loads.iter().copied().fold(0.0, f64::max);
        let max_over_bound = if bound > 0.0 { max / bound } else { 1.0 };
        let round = self.rounds.len() + 1;
        if self.joined.iter().any(|j| j.to_mean.is_none() || j.to_level.is_none()) {
            let level = level(&self.loads, self.regions.len());
            for joined in &mut self.joined {
                let Some(at) = self.regions.iter().position(|(a, _)| *a == joined.address) else { continue };
                let took = Some(round + 1 - joined.round);
                if joined.to_mean.is_none() && region_loads[at] >= JOINED_TARGET * mean {
                    joined.to_mean = took;
                }
                if joined.to_level.is_none() && region_loads[at] >= JOINED_TARGET * level {
                    joined.to_level = took;
                }
            }
        }
        self.total_load += total;
        self.moved_load += moved_load;
        let cut_ratio = self.cut_ratio();
        let figures = RoundFigures { moves, moved_load, max_over_bound, cut_ratio };
        self.rounds.push(figures);
        figures
    }

    /// The weight of edges crossing regions over the weight of edges
    /// between homed shards; `None` when there is none.
    fn cut_ratio(&self) -> Option<f64> {
        if self.edges.is_empty() {
            return None;
        }
        let home: HashMap<&str, usize> = (self.regions.iter().enumerate())
            .flat_map(|(i, (_, shards))| shards.iter().map(move |s| (s.as_str(), i)))
            .collect();
        let (mut cut, mut total) = (0.0, 0.0);
        for ((a, b), weight) in &self.edges {
            let (Some(x), Some(y)) = (home.get(a.as_str()), home.get(b.as_str())) else { continue };
            total += weight;
            if x != y {
                cut += weight;
            }
        }
        (total > 0.0).then(|| cut / total)
    }

    /// The figures of the rounds replayed so far.
    pub fn summary(&self) -> Summary {
        let info = self.external.info();
        Summary {
            strategy: format!("{}@{}", info.name, info.version),
            rounds: self.rounds.len(),
            max_over_bound: Percentiles::of(self.rounds.iter().map(|r| r.max_over_bound).collect()),
            moves: self.rounds.iter().map(|r| r.moves).sum(),
            moved_load_fraction: if self.total_load > 0.0 { self.moved_load / self.total_load } else { 0.0 },
            joins: {
                let took = |pick: fn(&Joined) -> Option<usize>| -> Vec<f64> {
                    self.joined.iter().filter_map(|j| pick(j).map(|t| t as f64)).collect()
                };
                let (to_mean, to_level) = (took(|j| j.to_mean), took(|j| j.to_level));
                JoinFigures {
                    regions: self.joined.len(),
                    reached_mean: to_mean.len(),
                    rounds_to_mean: Percentiles::of(to_mean),
                    reached_level: to_level.len(),
                    rounds_to_level: Percentiles::of(to_level),
                }
            },
            cut_ratio: {
                let ratios: Vec<f64> = self.rounds.iter().filter_map(|r| r.cut_ratio).collect();
                ratios.last().copied().map(|last| {
                    let p = Percentiles::of(ratios);
                    CutRatio { p50: p.p50, p99: p.p99, last }
                })
            },
        }
    }

    /// Shard counts per region now.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.regions.iter().map(|(a, s)| (a.clone(), s.len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::builtin;
    use crate::strategy::guarded::Guarded;

    fn external(name: &str) -> ExternalAllocation {
        ExternalAllocation::new(Guarded::new(builtin::native(name, "").unwrap().unwrap()))
    }

    /// Two regions, four shards of even load; at 10 s two shards on the
    /// same region turn hot.
    fn trace() -> Trace {
        Trace::parse(
            "t_ms,kind,subject,value\n0,join,a:1,\n0,join,b:1,\n0,load,s1,1\n0,load,s2,1\n0,load,s3,1\n\
             0,load,s4,1\n10000,load,s1,100\n10000,load,s3,100\n",
        )
        .unwrap()
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(vec![]).max, 0.0);
    }

    #[test]
    fn load_balance_beats_counting_on_a_skewed_trace() {
        let trace = trace();
        let mut figures = BTreeMap::new();
        for name in ["least-shard", "load-balance"] {
            let mut replay = Replay::new(&trace, external(name));
            for round in 1..=6 {
                replay.round(round * 5_000);
            }
            figures.insert(name, replay.summary());
        }
        let (counting, balancing) = (&figures["least-shard"], &figures["load-balance"]);
        assert_eq!(counting.rounds, 6);
        assert!(balancing.strategy.starts_with("load-balance@"), "{balancing:?}");
        // s1 and s3 share a region (allocated alternately). Counting sees 2
        // and 2 and moves nothing; load-balance moves one hot shard.
        assert_eq!(counting.moves, 0, "{figures:?}");
        assert!(counting.max_over_bound.p50 > 1.9, "{figures:?}");
        assert_eq!(balancing.moves, 1, "{figures:?}");
        assert!(balancing.max_over_bound.p50 < 1.02, "{figures:?}");
        assert!(balancing.moved_load_fraction > 0.0 && balancing.moved_load_fraction < 0.2, "{balancing:?}");
    }

    #[test]
    fn joining_regions_are_timed_to_the_target() {
        // Two regions of two shards each; c and d join at 12 s (in round 2)
        // and counting gives each a shard, one a round.
        let trace = Trace::parse(
            "t_ms,kind,subject,value\n0,join,a:1,\n0,join,b:1,\n0,load,s1,1\n0,load,s2,1\n0,load,s3,1\n\
             0,load,s4,1\n12000,join,c:1,\n12000,join,d:1,\n",
        )
        .unwrap();
        let mut replay = Replay::new(&trace, external("least-shard"));
        replay.round(10_000);
        let joins = replay.summary().joins;
        assert_eq!((joins.regions, joins.reached_mean), (0, 0), "the regions present at time 0 are not counted");
        let mut reached = Vec::new();
        for round in 2..=4 {
            replay.round(round * 10_000);
            reached.push(replay.summary().joins.reached_mean);
        }
        assert_eq!(reached, [1, 2, 2], "{:?}", replay.counts());
        let joins = replay.summary().joins;
        assert_eq!(joins.regions, 2);
        assert_eq!((joins.rounds_to_mean.p50, joins.rounds_to_mean.max), (1.0, 2.0), "{joins:?}");
        // No shard outweighs the mean: the level is the mean.
        assert_eq!((joins.reached_level, joins.rounds_to_level), (2, joins.rounds_to_mean));
    }

    #[test]
    fn the_cut_ratio_is_the_weight_crossing_regions_over_all_weight() {
        // least-shard places s1, s3 on a:1 and s2, s4 on b:1. s1–s3 (3)
        // stays inside a region, s1–s2 (1) crosses; at 10 s s1–s3 ends and
        // s2–s4 (1) starts, inside b:1.
        let talking = Trace::parse(
            "t_ms,kind,subject,value\n0,join,a:1,\n0,join,b:1,\n0,load,s1,1\n0,load,s2,1\n0,load,s3,1\n\
             0,load,s4,1\n0,edge,s3|s1,3\n0,edge,s1|s2,1\n10000,edge,s1|s3,0\n10000,edge,s2|s4,1\n",
        )
        .unwrap();
        let mut replay = Replay::new(&talking, external("least-shard"));
        assert_eq!(replay.round(5_000).cut_ratio, Some(0.25));
        assert_eq!(replay.round(10_000).cut_ratio, Some(0.5));
        let summary = replay.summary().cut_ratio.expect("a trace with edges has a cut ratio");
        assert_eq!((summary.p50, summary.p99, summary.last), (0.25, 0.5, 0.5));
        let json = serde_json::to_value(replay.summary()).unwrap();
        assert_eq!(json["cutRatio"], serde_json::json!({"p50": 0.25, "p99": 0.5, "final": 0.5}));
        // Without edges there is no cut ratio, in the rounds or the summary.
        let plain = trace();
        let mut replay = Replay::new(&plain, external("least-shard"));
        assert_eq!(replay.round(5_000).cut_ratio, None);
        assert!(serde_json::to_value(replay.summary()).unwrap().get("cutRatio").is_none());
    }

    #[test]
    fn a_generated_community_trace_is_cut_by_counting_and_not_when_all_live_together() {
        use crate::strategy::trace::{TraceShape, generate};
        let shape = TraceShape {
            regions: 10,
            shards: 500,
            zipf: 0.0,
            duration_ms: 60_000,
            drift_every_ms: 30_000,
            joins: 0,
            joins_together: false,
            leaves: 0,
            fails: 0,
            communities: 25,
            inside: 1.0,
            seed: 3,
        };
        let trace = Trace::parse(&generate(&shape)).unwrap();
        let mut replay = Replay::new(&trace, external("least-shard"));
        replay.round(10_000);
        // Counting ignores who talks to whom: with 10 regions about nine
        // tenths of the weight crosses.
        let cut = replay.summary().cut_ratio.unwrap().last;
        assert!(cut > 0.8, "least-shard's cut ratio on 25 communities over 10 regions: {cut}");
        // On one region nothing crosses.
        let one = TraceShape { regions: 1, ..shape };
        let trace = Trace::parse(&generate(&one)).unwrap();
        let mut replay = Replay::new(&trace, external("least-shard"));
        replay.round(10_000);
        assert_eq!(replay.summary().cut_ratio.unwrap().last, 0.0);
    }

    #[test]
    fn the_level_holds_heavy_shards_apart() {
        let loads = |values: &[f64]| -> HashMap<String, f64> {
            values.iter().enumerate().map(|(i, l)| (i.to_string(), *l)).collect()
        };
        assert_eq!(level(&loads(&[1.0, 1.0, 1.0, 1.0]), 2), 2.0, "the mean");
        // 100 alone on one region; the other two share 8.
        assert_eq!(level(&loads(&[100.0, 4.0, 2.0, 2.0]), 3), 4.0);
        // 100, then 20 (above (20 + 8) / 2 = 14) alone; the last region has 8.
        assert_eq!(level(&loads(&[100.0, 20.0, 4.0, 2.0, 2.0]), 3), 8.0);
        assert_eq!(level(&loads(&[100.0]), 1), 100.0, "one region carries everything");
    }

    #[test]
    fn a_failed_regions_shards_are_homed_again_and_not_counted_as_moves() {
        let trace = Trace::parse(
            "t_ms,kind,subject,value\n0,join,a:1,\n0,join,b:1,\n0,load,s1,1\n0,load,s2,1\n5000,fail,a:1,\n",
        )
        .unwrap();
        let mut replay = Replay::new(&trace, external("least-shard"));
        replay.round(1_000);
        let figures = replay.round(6_000);
        assert_eq!(replay.counts(), BTreeMap::from([("b:1".to_owned(), 2)]));
        assert_eq!(figures.moves, 0);
    }
}
