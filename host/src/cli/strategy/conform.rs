//! `shardalloc strategy conform`: the conformance suite against a strategy
//! (as a component), every violation printed once with its count.

use anyhow::bail;
use serde_json::json;
use shardalloc::engine::instance::Sandboxed;
use shardalloc::strategy::ClusterView;
use shardalloc_guest::Snapshot;
use shardalloc_guest::conformance::Problem;

use super::{Sandbox, load};

/// Runs the suite; an error when the strategy is not conformant.
pub(super) fn run(strategy: &str, config: Option<&str>, sandbox: &Sandbox) -> anyhow::Result<()> {
    let loaded = load(strategy, config, sandbox.limits())?;
    let contract = loaded.compiled().contract.name();
    let scenarios = shardalloc_guest::conformance::scenarios().len();
    let problems = shardalloc_guest::conformance::run(&mut Conformance(loaded));
    let kinds = problem_kinds(&problems);
    for (kind, count, first) in &kinds {
        println!("{}", json!({ "problem": kind, "count": count, "first": first }));
    }
    if problems.is_empty() {
        println!("{}", json!({ "conformant": true, "contract": contract, "scenarios": scenarios }));
        return Ok(());
    }
    println!(
        "{}",
        json!({
            "conformant": false,
            "contract": contract,
            "scenarios": scenarios,
            "problems": problems.len(),
            "distinct": kinds.len()
        })
    );
    bail!(
        "{} conformance problems ({} distinct, each printed once with its count) over {scenarios} scenarios",
        problems.len(),
        kinds.len()
    )
}

/// Problems grouped by what went wrong, in order of first appearance: the
/// description, how many times, and where first (`scenario: call`).
fn problem_kinds(problems: &[Problem]) -> Vec<(String, usize, String)> {
    let mut kinds: Vec<(String, usize, String)> = Vec::new();
    for problem in problems {
        let kind = problem.kind();
        match kinds.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, count, _)) => *count += 1,
            None => kinds.push((kind, 1, format!("{}: {}", problem.scenario, problem.call))),
        }
    }
    kinds
}

/// A loaded strategy as a conformance subject: each snapshot is viewed as
/// the node would view it.
struct Conformance(Sandboxed);

impl shardalloc_guest::conformance::Subject for Conformance {
    fn allocate(&mut self, snapshot: &Snapshot, shard: &str, requester: Option<&str>) -> Result<String, String> {
        use shardalloc::strategy::AllocationStrategy;
        self.0.allocate(&ClusterView::from_snapshot(snapshot), shard, requester).map_err(|e| e.to_string())
    }

    fn rebalance(&mut self, snapshot: &Snapshot) -> Result<Vec<String>, String> {
        use shardalloc::strategy::AllocationStrategy;
        // A destination out of the view is refused by the engine as an
        // invalid answer, which the suite reports.
        let moves = self.0.rebalance(&ClusterView::from_snapshot(snapshot)).map_err(|e| e.to_string())?;
        Ok(moves.into_iter().map(|m| m.shard).collect())
    }
}
