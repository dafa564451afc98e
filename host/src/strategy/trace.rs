//! Load traces: the CSV format `shardalloc strategy simulate --trace`
//! replays, its parser (every refusal names the line and the problem) and
//! the generator of `shardalloc strategy trace`.
//!
//! ```text
//! t_ms,kind,subject,value
//! 0,join,10.0.0.1:2552,
//! 0,load,tenant-7,125.5        a shard carries 125.5 units a second from then on
//! 0,edge,tenant-7|ledger-7,40  two shards exchange 40 messages a second from then on
//! 600000,join,10.0.0.9:2552,   a region joins
//! 900000,fail,10.0.0.1:2552,   a region fails (leave: it leaves gracefully)
//! ```
//!
//! Times never go backwards. A region joins before it leaves or fails, and
//! the regions present at the start join at time 0. A shard exists from its
//! first load line; a shard with no load line carries 0. An edge joins two
//! different shards that exist (their ids, which cannot hold `|`, joined by
//! `|`, in either order); its weight (messages a second, both ways
//! together) stands until the pair's next edge line, and 0 ends it.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write;

/// The header line every trace starts with.
pub const HEADER: &str = "t_ms,kind,subject,value";

/// Most lines a trace may hold.
pub const MAX_TRACE_LINES: usize = 10_000_000;

/// What happens at one instant of a trace.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceEvent {
    /// A shard carries this load (units a second) from now on.
    Load {
        /// The shard.
        shard: String,
        /// Its load.
        load: f64,
    },
    /// A region joins.
    Join(String),
    /// A region leaves gracefully: its shards are handed off.
    Leave(String),
    /// A region fails: its shards are homed again elsewhere.
    Fail(String),
    /// Two shards exchange this many messages a second from now on (0: no
    /// more); the pair is unordered, `a` below `b`.
    Edge {
        /// The shard whose id sorts first.
        a: String,
        /// The other shard.
        b: String,
        /// Messages a second, both ways together.
        weight: f64,
    },
}

/// A parsed trace: its events in time order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    /// (time in ms, event), times never decreasing.
    pub events: Vec<(u64, TraceEvent)>,
}

/// Why a trace was refused: the line (from 1, the header is line 1) and
/// the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct TraceError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

impl Trace {
    /// Parses a trace. See the module documentation.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let refuse = |line: usize, problem: String| TraceError { line, problem };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
        match lines.next() {
            Some((_, HEADER)) => {}
            Some((_, other)) => return Err(refuse(1, format!("the header must be {HEADER:?}, not {other:?}"))),
            None => return Err(refuse(1, format!("the trace is empty; it starts with the header {HEADER:?}"))),
        }
        let mut trace = Trace::default();
        let mut present = BTreeSet::new();
        let mut shards: HashSet<String> = HashSet::new();
        let mut last = 0;
        for (number, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            if number > MAX_TRACE_LINES {
                return Err(refuse(number, format!("a trace holds at most {MAX_TRACE_LINES} lines")));
            }
            let fields: Vec<&str> = line.split(',').collect();
            let [t, kind, subject, value] = fields[..] else {
                return Err(refuse(number, format!("{} fields; a line has 4: {HEADER}", fields.len())));
            };
            let t: u64 = t.trim().parse().map_err(|_| refuse(number, format!("bad number {t:?} for t_ms")))?;
            if t < last {
                return Err(refuse(number, format!("time goes backwards: {t} ms after {last} ms")));
            }
            last = t;
            let subject = subject.trim();
            if subject.is_empty() {
                return Err(refuse(number, "the subject is empty".to_owned()));
            }
            let value = value.trim();
            let no_value = |kind: &str| {
                if value.is_empty() {
                    Ok(())
                } else {
                    Err(refuse(number, format!("a {kind} line has no value, not {value:?}")))
                }
            };
            let event = match kind.trim() {
                "load" => {
                    let load: f64 =
                        value.parse().map_err(|_| refuse(number, format!("bad number {value:?} for a load")))?;
                    if !(load.is_finite() && load >= 0.0) {
                        return Err(refuse(number, format!("bad number {value:?}: a load is finite and not negative")));
                    }
                    if let Err(rule) = shardalloc_proto::protocol::check_shard_id(subject) {
                        return Err(refuse(number, rule));
                    }
                    if !shards.contains(subject) {
                        shards.insert(subject.to_owned());
                    }
                    TraceEvent::Load { shard: subject.to_owned(), load }
                }
                "edge" => {
                    let weight: f64 =
                        value.parse().map_err(|_| refuse(number, format!("bad number {value:?} for a weight")))?;
                    if !(weight.is_finite() && weight >= 0.0) {
                        return Err(refuse(
                            number,
                            format!("bad number {value:?}: a weight is finite and not negative"),
                        ));
                    }
                    let Some((a, b)) = subject.split_once('|').filter(|(_, b)| !b.contains('|')) else {
                        return Err(refuse(
                            number,
                            format!("an edge's subject is two shard ids joined by |, not {subject:?}"),
                        ));
                    };
                    let (a, b) = (a.trim(), b.trim());
                    for shard in [a, b] {
                        if !shards.contains(shard) {
                            return Err(refuse(
                                number,
                                format!("an edge of shard {shard:?}, which no load line before it names"),
                            ));
                        }
                    }
                    if a == b {
                        return Err(refuse(number, format!("an edge joins two shards, not {a} with itself")));
                    }
                    let (a, b) = if a < b { (a, b) } else { (b, a) };
                    TraceEvent::Edge { a: a.to_owned(), b: b.to_owned(), weight }
                }
                "join" => {
                    no_value("join")?;
                    if let Err(rule) = shardalloc_proto::protocol::check_address(subject) {
                        return Err(refuse(number, rule));
                    }
                    if !present.insert(subject.to_owned()) {
                        return Err(refuse(number, format!("region {subject} joins twice")));
                    }
                    TraceEvent::Join(subject.to_owned())
                }
                kind @ ("leave" | "fail") => {
                    no_value(kind)?;
                    if !present.remove(subject) {
                        return Err(refuse(number, format!("a {kind} of unknown region {subject}")));
                    }
                    if kind == "leave" {
                        TraceEvent::Leave(subject.to_owned())
                    } else {
                        TraceEvent::Fail(subject.to_owned())
                    }
                }
                other => {
                    return Err(refuse(number, format!("unknown kind {other:?}: load, edge, join, leave or fail")));
                }
            };
            trace.events.push((t, event));
        }
        Ok(trace)
    }

    /// The time of the last event.
    pub fn end_ms(&self) -> u64 {
        self.events.last().map_or(0, |(t, _)| *t)
    }
}

/// What `shardalloc strategy trace` generates.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceShape {
    /// Regions present at time 0.
    pub regions: usize,
    /// Shards, all present at time 0.
    pub shards: usize,
    /// The Zipf exponent of the shard loads: the shard of rank `r` (from 1)
    /// carries `1000 / r^zipf` units a second.
    pub zipf: f64,
    /// How long the trace runs, in ms.
    pub duration_ms: u64,
    /// Every this many ms the hot set drifts: the loads of the hottest 1%
    /// of shards (at least one) move to other shards.
    pub drift_every_ms: u64,
    /// Regions that join during the trace (at even intervals).
    pub joins: usize,
    /// The joining regions join together, at the first of their times.
    pub joins_together: bool,
    /// Regions that leave during the trace.
    pub leaves: usize,
    /// Regions that fail during the trace.
    pub fails: usize,
    /// Communities of shards that message each other (0: no edges). Each
    /// shard belongs to one, picked at random, and has
    /// [`EDGES_PER_SHARD`] edges of weight 1 to 10; at each drift, 1% of
    /// the shards (at least one) move to another community and their edges
    /// with them.
    pub communities: usize,
    /// The share of edges inside a shard's community (the rest go to any
    /// shard), from 0 to 1.
    pub inside: f64,
    /// The seed: the same shape and seed give the same trace.
    pub seed: u64,
}

/// The edges each shard starts with in a generated trace with communities.
pub const EDGES_PER_SHARD: usize = 2;

/// The generator's communities: each shard's community, its members, and
/// each shard's partners, so a shard that moves can end its edges.
struct Communities {
    of: Vec<usize>,
    members: Vec<Vec<usize>>,
    partners: Vec<Vec<usize>>,
    inside: f64,
}

impl Communities {
    fn new(shards: usize, communities: usize, inside: f64, rng: &mut Rng) -> Self {
        let of: Vec<usize> = (0..shards).map(|_| rng.below(communities)).collect();
        let mut members = vec![Vec::new(); communities];
        for (shard, community) in of.iter().enumerate() {
            members[*community].push(shard);
        }
        Communities { of, members, partners: vec![Vec::new(); shards], inside }
    }

    /// Gives `shard` its edges at time `t`: each inside its community with
    /// the `inside` share, else to any shard; never itself, never twice.
    fn connect(&mut self, t: u64, shard: usize, rng: &mut Rng, out: &mut String) {
        for _ in 0..EDGES_PER_SHARD {
            let community = &self.members[self.of[shard]];
            let inside = (rng.next() % 1_000_000) as f64 / 1_000_000.0 < self.inside;
            let other = if inside && community.len() > 1 {
                community[rng.below(community.len())]
            } else {
                rng.below(self.of.len())
            };
            let weight = 1 + rng.below(10);
            if other == shard || self.partners[shard].contains(&other) {
                continue;
            }
            self.partners[shard].push(other);
            self.partners[other].push(shard);
            writeln!(out, "{t},edge,s{shard}|s{other},{weight}").expect("writing to a String");
        }
    }

    /// Moves `shard` to another community at time `t`: its edges end, it
    /// gets new ones.
    fn drift(&mut self, t: u64, shard: usize, rng: &mut Rng, out: &mut String) {
        for other in std::mem::take(&mut self.partners[shard]) {
            self.partners[other].retain(|p| *p != shard);
            writeln!(out, "{t},edge,s{shard}|s{other},0").expect("writing to a String");
        }
        let from = self.of[shard];
        let to = (from + 1 + rng.below(self.members.len() - 1)) % self.members.len();
        self.members[from].retain(|s| *s != shard);
        self.members[to].push(shard);
        self.of[shard] = to;
        self.connect(t, shard, rng, out);
    }
}

/// SplitMix64: deterministic, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        shardalloc_guest::kept::mix(self.0)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Generates a trace (its CSV text). See [`TraceShape`].
pub fn generate(shape: &TraceShape) -> String {
    let mut rng = Rng(shape.seed);
    let mut out = format!("{HEADER}\n");
    let region = |i: usize| format!("10.0.{}.{}:2552", i / 250, i % 250 + 1);
    let mut present: Vec<usize> = (0..shape.regions).collect();
    for i in &present {
        writeln!(out, "0,join,{},", region(*i)).expect("writing to a String");
    }
    // rank[s]: the shard's rank in the load order (from 1).
    let mut ranks: Vec<usize> = (1..=shape.shards).collect();
    for i in (1..ranks.len()).rev() {
        ranks.swap(i, rng.below(i + 1));
    }
    let load = |rank: usize| 1000.0 / (rank as f64).powf(shape.zipf);
    for (shard, rank) in ranks.iter().enumerate() {
        writeln!(out, "0,load,s{shard},{}", load(*rank)).expect("writing to a String");
    }
    let mut communities = (shape.communities > 0 && shape.shards > 1)
        .then(|| Communities::new(shape.shards, shape.communities, shape.inside, &mut rng));
    if let Some(communities) = &mut communities {
        for shard in 0..shape.shards {
            communities.connect(0, shard, &mut rng, &mut out);
        }
    }
    // Region changes at even intervals, interleaved with the drifts.
    let changes = shape.joins + shape.leaves + shape.fails;
    let mut next_region = shape.regions;
    let mut kinds: Vec<&str> = std::iter::repeat_n("join", shape.joins)
        .chain(std::iter::repeat_n("leave", shape.leaves))
        .chain(std::iter::repeat_n("fail", shape.fails))
        .collect();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i + 1));
    }
    let mut times: Vec<(u64, Option<&str>)> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| (shape.duration_ms * (i as u64 + 1) / (changes as u64 + 1), Some(*kind)))
        .collect();
    if shape.joins_together {
        let first = times.iter().filter(|(_, kind)| *kind == Some("join")).map(|(t, _)| *t).min();
        for (t, kind) in &mut times {
            if *kind == Some("join") {
                *t = first.expect("a join, since this one is");
            }
        }
    }
    if shape.drift_every_ms > 0 && shape.shards > 1 {
        let mut t = shape.drift_every_ms;
        while t <= shape.duration_ms {
            times.push((t, None));
            t += shape.drift_every_ms;
        }
    }
    times.sort_by_key(|(t, kind)| (*t, kind.is_none()));
    let hot = (shape.shards / 100).max(1);
    for (t, kind) in times {
        match kind {
            Some("join") => {
                writeln!(out, "{t},join,{},", region(next_region)).expect("writing to a String");
                present.push(next_region);
                next_region += 1;
            }
            Some(kind) if present.len() > 1 => {
                let gone = present.swap_remove(rng.below(present.len()));
                writeln!(out, "{t},{kind},{},", region(gone)).expect("writing to a String");
            }
            Some(_) => {}
            None => {
                // The hot set drifts: each of the hottest shards trades its
                // rank with a shard anywhere.
                for shard in 0..shape.shards {
                    if ranks[shard] > hot {
                        continue;
                    }
                    let other = rng.below(shape.shards);
                    ranks.swap(shard, other);
                    for s in [shard, other] {
                        writeln!(out, "{t},load,s{s},{}", load(ranks[s])).expect("writing to a String");
                    }
                }
                // Shards change communities, their edges with them.
                if let Some(communities) = &mut communities
                    && shape.communities > 1
                {
                    for _ in 0..hot {
                        let shard = rng.below(shape.shards);
                        communities.drift(t, shard, &mut rng, &mut out);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_parses_into_its_events() {
        let text =
            "t_ms,kind,subject,value\n0,join,a:1,\n0,load,s1,2.5\n\n10,join,b:1,\r\n20,fail,a:1,\n20,leave,b:1,\n";
        let trace = Trace::parse(text).unwrap();
        assert_eq!(
            trace.events,
            [
                (0, TraceEvent::Join("a:1".into())),
                (0, TraceEvent::Load { shard: "s1".into(), load: 2.5 }),
                (10, TraceEvent::Join("b:1".into())),
                (20, TraceEvent::Fail("a:1".into())),
                (20, TraceEvent::Leave("b:1".into())),
            ]
        );
        assert_eq!(trace.end_ms(), 20);
    }

    #[test]
    fn a_bad_trace_is_refused_with_the_line_and_the_problem() {
        let cases = [
            ("", 1, "the trace is empty"),
            ("t,kind,subject,value\n", 1, "the header must be"),
            ("t_ms,kind,subject,value\n0,jump,a:1,\n", 2, "unknown kind \"jump\""),
            ("t_ms,kind,subject,value\nx,join,a:1,\n", 2, "bad number \"x\" for t_ms"),
            ("t_ms,kind,subject,value\n0,load,s,lots\n", 2, "bad number \"lots\" for a load"),
            ("t_ms,kind,subject,value\n0,load,s,-1\n", 2, "a load is finite and not negative"),
            ("t_ms,kind,subject,value\n0,load,s,NaN\n", 2, "a load is finite and not negative"),
            ("t_ms,kind,subject,value\n5,join,a:1,\n4,join,b:1,\n", 3, "time goes backwards: 4 ms after 5 ms"),
            ("t_ms,kind,subject,value\n0,leave,a:1,\n", 2, "a leave of unknown region a:1"),
            ("t_ms,kind,subject,value\n0,join,a:1,\n1,fail,a:1,\n2,fail,a:1,\n", 4, "a fail of unknown region a:1"),
            ("t_ms,kind,subject,value\n0,join,a:1,\n0,join,a:1,\n", 3, "region a:1 joins twice"),
            ("t_ms,kind,subject,value\n0,join,a:1\n", 2, "3 fields; a line has 4"),
            ("t_ms,kind,subject,value\n0,join,a:1,7\n", 2, "a join line has no value"),
            ("t_ms,kind,subject,value\n0,load,,1\n", 2, "the subject is empty"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,load,b,1\n0,edge,a|b,x\n", 4, "bad number \"x\" for a weight"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,load,b,1\n0,edge,a|b,-2\n", 4, "a weight is finite"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,load,b,1\n0,edge,a|b,inf\n", 4, "a weight is finite"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,load,b,1\n0,edge,ab,1\n", 4, "two shard ids joined by |"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,load,b,1\n0,edge,a|b|a,1\n", 4, "two shard ids joined by |"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,edge,a|c,1\n", 3, "an edge of shard \"c\", which no load line"),
            ("t_ms,kind,subject,value\n0,load,a,1\n0,edge,a|a,1\n", 3, "not a with itself"),
        ];
        for (text, line, says) in cases {
            let error = Trace::parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.to_string().contains(says), "{text:?}: {error} should say {says:?}");
        }
    }

    fn shape() -> TraceShape {
        TraceShape {
            regions: 3,
            shards: 200,
            zipf: 1.1,
            duration_ms: 600_000,
            drift_every_ms: 120_000,
            joins: 2,
            joins_together: false,
            leaves: 1,
            fails: 1,
            communities: 0,
            inside: 0.9,
            seed: 7,
        }
    }

    #[test]
    fn edges_parse_as_unordered_pairs() {
        let text = "t_ms,kind,subject,value\n0,load,b,1\n0,load,a,1\n0,edge,b|a,2.5\n5,edge,a|b,0\n";
        let trace = Trace::parse(text).unwrap();
        assert_eq!(
            trace.events[2..],
            [
                (0, TraceEvent::Edge { a: "a".into(), b: "b".into(), weight: 2.5 }),
                (5, TraceEvent::Edge { a: "a".into(), b: "b".into(), weight: 0.0 }),
            ]
        );
    }

    #[test]
    fn a_community_trace_has_its_edges_and_moves_shards_between_communities() {
        let with = TraceShape { communities: 10, ..shape() };
        let text = generate(&with);
        assert_eq!(text, generate(&with), "the same seed gives the same trace");
        let trace = Trace::parse(&text).unwrap();
        let edges = |at: &dyn Fn(u64) -> bool, ended: bool| {
            (trace.events.iter())
                .filter(|(t, e)| at(*t) && matches!(e, TraceEvent::Edge { weight, .. } if (*weight == 0.0) == ended))
                .count()
        };
        // Two edges a shard, fewer where a pick repeated a partner or hit
        // the shard itself.
        let first = edges(&|t| t == 0, false);
        assert!((300..=400).contains(&first), "{first} edges for 200 shards");
        // Each drift (at 2, 4, 6, 8 and 10 minutes) moves 1% of the shards
        // (2): their edges end and new ones start.
        assert!(edges(&|t| t > 0, true) > 0, "no edge ended at a drift");
        assert!(edges(&|t| t > 0, false) > 0, "no edge started at a drift");
        assert!(!generate(&shape()).contains(",edge,"), "no communities, no edge lines");
    }

    #[test]
    fn joins_together_share_the_first_joins_time() {
        let join_times = |shape: &TraceShape| -> Vec<u64> {
            let trace = Trace::parse(&generate(shape)).unwrap();
            trace.events.iter().filter(|(t, e)| *t > 0 && matches!(e, TraceEvent::Join(_))).map(|(t, _)| *t).collect()
        };
        let apart = join_times(&TraceShape { joins: 4, ..shape() });
        assert_eq!(apart.len(), 4);
        assert!(apart.windows(2).all(|w| w[0] < w[1]), "at even intervals: {apart:?}");
        let together = join_times(&TraceShape { joins: 4, joins_together: true, ..shape() });
        assert_eq!(together, vec![apart[0]; 4], "all at the first join's time");
    }

    #[test]
    fn a_generated_trace_is_deterministic_zipf_and_parses() {
        let text = generate(&shape());
        assert_eq!(text, generate(&shape()), "the same seed gives the same trace");
        assert_ne!(text, generate(&TraceShape { seed: 8, ..shape() }));
        let trace = Trace::parse(&text).unwrap();
        let count = |f: &dyn Fn(&TraceEvent) -> bool| trace.events.iter().filter(|(_, e)| f(e)).count();
        assert_eq!(count(&|e| matches!(e, TraceEvent::Join(_))), 5);
        assert_eq!(count(&|e| matches!(e, TraceEvent::Leave(_))), 1);
        assert_eq!(count(&|e| matches!(e, TraceEvent::Fail(_))), 1);
        // At time 0: one load line per shard, the loads Zipf-distributed.
        let mut loads: Vec<f64> = (trace.events.iter())
            .filter_map(|(t, e)| match e {
                TraceEvent::Load { load, .. } if *t == 0 => Some(*load),
                _ => None,
            })
            .collect();
        loads.sort_by(|a, b| b.total_cmp(a));
        assert_eq!(loads.len(), 200);
        assert_eq!(loads[0], 1000.0);
        assert!((loads[1] - 1000.0 / 2f64.powf(1.1)).abs() < 1e-9);
        // The hot set drifts: later load lines exist.
        assert!(trace.events.iter().any(|(t, e)| *t > 0 && matches!(e, TraceEvent::Load { .. })));
    }
}
