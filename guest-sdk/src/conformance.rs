//! The conformance suite every strategy should pass, natively and as a
//! component. The host runs the same suite against its component adapter,
//! through the [`Subject`] trait, so both forms are held to one standard.
//!
//! Rules checked on every scenario:
//! - allocate answers an allocatable region whenever one exists, and an
//!   error when none does;
//! - rebalance answers only shards that are allocated and not already
//!   moving, none twice;
//! - the same input gives the same answer, also with a fresh topology;
//! - nothing panics, including on empty and single-region clusters.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::snapshot::Snapshot;
use crate::strategy::Strategy;
use crate::testing::{Scenario, Shape, generate};
use crate::view::RegionStatus;

/// Anything that answers allocate and rebalance over a snapshot, in
/// addresses and shard ids: a native strategy, or the host's component.
pub trait Subject {
    /// The chosen home's address, or the strategy's error.
    fn allocate(&mut self, snapshot: &Snapshot, shard: &str, requester: Option<&str>) -> Result<String, String>;
    /// The shards to move, in order, or the strategy's error.
    fn rebalance(&mut self, snapshot: &Snapshot) -> Result<Vec<String>, String>;
}

/// A native strategy as a [`Subject`].
pub struct Native<S>(pub S);

impl<S: Strategy> Subject for Native<S> {
    fn allocate(&mut self, snapshot: &Snapshot, shard: &str, requester: Option<&str>) -> Result<String, String> {
        Scenario::new(snapshot.clone()).allocate_from(&self.0, shard, requester)
    }

    fn rebalance(&mut self, snapshot: &Snapshot) -> Result<Vec<String>, String> {
        Scenario::new(snapshot.clone()).rebalance(&self.0)
    }
}

/// The suite's scenarios: edge cases by name, then generated clusters.
pub fn scenarios() -> Vec<(String, Snapshot)> {
    let mut all: Vec<(String, Scenario)> = vec![
        ("empty".into(), Scenario::default()),
        ("one region, no shards".into(), Scenario::parse("a=")),
        ("one region".into(), Scenario::parse("a=1,2,3")),
        ("one unreachable region".into(), Scenario::parse("a=1").status("a", RegionStatus::Unreachable)),
        ("one draining region".into(), Scenario::parse("a=1,2").draining("a")),
        ("only a proxy".into(), Scenario::parse("p=").proxy_only("p")),
        (
            "every status".into(),
            Scenario::parse("up=1,2,3,4 join= leave=5,6 gone=7")
                .status("join", RegionStatus::Joining)
                .status("leave", RegionStatus::Leaving)
                .status("gone", RegionStatus::Unreachable),
        ),
        ("draining and proxy".into(), Scenario::parse("a=1,2,3,4,5,6 b= p= d=7,8").proxy_only("p").draining("d")),
        ("all moving".into(), Scenario::parse("a=1,2,3,4 b=").in_progress(&["1", "2", "3", "4"])),
        ("homeless moving shard".into(), Scenario::parse("a=1,2,3,4,5 b=").in_progress(&["9"])),
        ("unbalanced".into(), Scenario::parse("a=1,2,3,4,5,6,7,8,9,10 b= c=11")),
        (
            "mixed versions".into(),
            Scenario::parse("a=1,2,3,4,5,6 b= c=").version("a", "1.0").version("b", "1.10").version("c", "1.9"),
        ),
        ("bad signal".into(), Scenario::parse("a=1,2,3 b=").signal("[1,2]")),
        (
            "zones".into(),
            Scenario::parse("a=1,2,3,4 b= c=")
                .label("a", "zone", "eu")
                .label("b", "zone", "us")
                .signal(r#"{"shards":{"1":"us","2":"ap"},"prefixes":{"3":"us"}}"#),
        ),
        (
            "full regions".into(),
            Scenario::parse("a=1,2,3 b=4 c=")
                .metric("a", "mem-used-ratio", 0.95)
                .metric("b", "mem-used-ratio", 0.2)
                .metric("c", "mem-used-ratio", 0.99),
        ),
    ];
    for seed in 0..12 {
        all.push((format!("healthy seed {seed}"), generate(seed, &Shape::healthy(1 + seed as usize * 3, 150))));
        all.push((format!("messy seed {seed}"), generate(seed, &Shape::messy(2 + seed as usize * 4, 300))));
    }
    all.into_iter().map(|(name, s)| (name, s.snapshot)).collect()
}

/// Shards to ask `allocate` about in a scenario: new ones and, to check
/// that a strategy does not mind, ids that are already allocated.
fn probe_shards(snapshot: &Snapshot) -> Vec<String> {
    let mut probes: Vec<String> = ["new-1", "s1", "s9", "3", "tenant/42"].iter().map(|s| s.to_string()).collect();
    probes.extend(snapshot.regions.iter().flat_map(|r| r.shards.first().cloned()));
    probes.truncate(16);
    probes
}

/// Runs `f`, turning a panic into an error naming it.
fn guarded<T>(_call: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("panicked: {message}")
    })
}

/// One violation found by the suite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The scenario it was found in.
    pub scenario: String,
    /// The call, with its shard when it has one: `allocate("7")`, `rebalance`.
    pub call: String,
    /// What was wrong.
    pub what: String,
}

impl Problem {
    fn new(scenario: &str, call: impl Into<String>, what: impl Into<String>) -> Self {
        Problem { scenario: scenario.to_owned(), call: call.into(), what: what.into() }
    }

    /// The call's name without its shard (`allocate`, `rebalance`).
    pub fn call_name(&self) -> &str {
        self.call.split('(').next().unwrap_or(&self.call)
    }

    /// The same for every scenario and shard it happens in: what to group
    /// problems by when reporting them.
    pub fn kind(&self) -> String {
        format!("{} {}", self.call_name(), self.what)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} {}", self.scenario, self.call, self.what)
    }
}

/// Checks one scenario; returns every violation found.
pub fn check_scenario<T: Subject>(subject: &mut T, name: &str, snapshot: &Snapshot) -> Vec<Problem> {
    let mut problems = Vec::new();
    let allocatable: HashSet<&str> = snapshot
        .regions
        .iter()
        .filter(|r| r.status == RegionStatus::Up && !r.proxy_only && !r.draining)
        .map(|r| r.address.as_str())
        .collect();
    let requesters: Vec<Option<&str>> =
        std::iter::once(None).chain(snapshot.regions.first().map(|r| Some(r.address.as_str()))).collect();
    for shard in probe_shards(snapshot) {
        for requester in &requesters {
            let first = match guarded("allocate", || subject.allocate(snapshot, &shard, *requester)) {
                Ok(answer) => answer,
                Err(panic) => {
                    problems.push(Problem::new(name, format!("allocate({shard:?})"), panic));
                    continue;
                }
            };
            match (&first, allocatable.is_empty()) {
                (Ok(region), _) if !allocatable.contains(region.as_str()) => {
                    problems.push(Problem::new(
                        name,
                        format!("allocate({shard:?})"),
                        format!("answered {region:?}, not allocatable"),
                    ));
                }
                (Err(e), false) => problems.push(Problem::new(
                    name,
                    format!("allocate({shard:?})"),
                    format!("erred with allocatable regions: {e}"),
                )),
                _ => {}
            }
            let again = guarded("allocate", || subject.allocate(snapshot, &shard, *requester));
            if again.as_ref().ok() != Some(&first) {
                problems.push(Problem::new(
                    name,
                    format!("allocate({shard:?})"),
                    format!("not deterministic: {first:?} then {again:?}"),
                ));
            }
        }
    }
    let first = match guarded("rebalance", || subject.rebalance(snapshot)) {
        Ok(answer) => answer,
        Err(panic) => {
            problems.push(Problem::new(name, "rebalance", panic));
            return problems;
        }
    };
    if let Ok(shards) = &first {
        let moving: HashSet<&str> = snapshot.in_progress.iter().map(String::as_str).collect();
        let mut seen = HashSet::new();
        for shard in shards {
            if snapshot.home_of(shard).is_none() {
                problems.push(Problem::new(name, "rebalance", format!("answered {shard:?}, which is not allocated")));
            }
            if moving.contains(shard.as_str()) {
                problems.push(Problem::new(name, "rebalance", format!("answered {shard:?}, which is already moving")));
            }
            if !seen.insert(shard) {
                problems.push(Problem::new(name, "rebalance", format!("answered {shard:?} twice")));
            }
        }
    }
    let again = guarded("rebalance", || subject.rebalance(snapshot));
    if again.as_ref().ok() != Some(&first) {
        problems.push(Problem::new(name, "rebalance", format!("not deterministic: {first:?} then {again:?}")));
    }
    problems
}

/// Runs the whole suite and returns every violation (empty when conformant).
pub fn run<T: Subject>(subject: &mut T) -> Vec<Problem> {
    scenarios().iter().flat_map(|(name, snapshot)| check_scenario(subject, name, snapshot)).collect()
}

/// Runs the whole suite against a native strategy and panics with every
/// violation, for use in a strategy crate's tests.
pub fn assert_conforms<S: Strategy>(strategy: S) {
    let problems = run(&mut Native(strategy));
    let lines: Vec<String> = problems.iter().map(Problem::to_string).collect();
    assert!(problems.is_empty(), "{} conformance problems:\n{}", problems.len(), lines.join("\n"));
}
