//! `shardalloc strategy eval`: one question (allocate a shard, or
//! rebalance) asked of a strategy about a snapshot; one JSON line.

use anyhow::bail;
use serde_json::json;
use shardalloc::strategy::ClusterView;
use shardalloc::strategy::external::AllocationReason;

use super::{Common, Question, prepare};

/// Asks `question`.
pub(super) fn run(common: &Common, question: Question) -> anyhow::Result<()> {
    let (snapshot, mut external) = prepare(common)?;
    let view = ClusterView::from_snapshot(&snapshot);
    match question {
        Question::Allocate { shard, requester } => {
            if shard.is_empty() {
                bail!("--shard must not be empty");
            }
            if let Some(r) = &requester
                && view.region_index(r).is_none()
            {
                bail!("--requester {r} is not a region of the snapshot");
            }
            let allocation = external.allocate(&view, &shard, requester.as_deref())?;
            if let Some(warning) = &allocation.warning {
                eprintln!("warning: {warning}");
            }
            let mut line = json!({ "region": allocation.region });
            if let AllocationReason::Fallback(error) = &allocation.reason {
                eprintln!("fallback: {error}");
                line["fallback"] = error.to_string().into();
            }
            println!("{line}");
        }
        Question::Rebalance => {
            let rebalance = external.rebalance(&view);
            let mut line = json!({ "shards": rebalance.shards });
            if !rebalance.destinations.is_empty() {
                // Where the strategy sent them (contract 0.3), by shard.
                let to: std::collections::BTreeMap<_, _> = rebalance.destinations.iter().collect();
                line["to"] = json!(to);
            }
            if let Some(error) = &rebalance.fallback {
                eprintln!("fallback: {error}");
                line["fallback"] = error.to_string().into();
            }
            println!("{line}");
        }
    }
    Ok(())
}
