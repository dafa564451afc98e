//! `shardalloc plan TYPE`: what the active strategy (or a candidate) would
//! do on a running node's type with regions added, removed or drained and
//! shards given other loads (`POST …/plan`). Nothing changes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use shardalloc_client::api::{PlanMove, PlanRegion, PlanRequest, PlanResponse};

use super::admin::NodeArgs;
use super::shown;

/// `shardalloc plan` flags.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The entity type.
    entity_type: String,
    /// A region to add: its address, then labels and its capacity
    /// (`10.0.0.9:2552,zone=b,capacity=800`). Repeat for more.
    #[arg(long = "add", value_name = "ADDRESS[,KEY=VALUE…]", value_parser = parse_region)]
    add: Vec<PlanRegion>,
    /// A region to remove: its shards are re-homed in round 0. Repeat for more.
    #[arg(long = "remove", value_name = "ADDRESS")]
    remove: Vec<String>,
    /// A region to drain: its shards move in round 0. Repeat for more.
    #[arg(long = "drain", value_name = "ADDRESS")]
    drain: Vec<String>,
    /// A JSON file of shard loads over the live ones: `{"shard": load, …}`.
    #[arg(long, value_name = "FILE")]
    loads: Option<PathBuf>,
    /// Plan with this strategy (a built-in's name or a digest) instead of
    /// the active one.
    #[arg(long)]
    strategy: Option<String>,
    /// The strategy's configuration, as JSON.
    #[arg(long, requires = "strategy")]
    config: Option<String>,
    /// Rebalance rounds after round 0 (at most 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=100))]
    rounds: u64,
    /// Print the node's JSON.
    #[arg(long)]
    json: bool,
}

/// `ADDRESS[,KEY=VALUE…]`: labels, and `capacity=N`.
fn parse_region(text: &str) -> Result<PlanRegion, String> {
    let mut parts = text.split(',');
    let address = parts.next().unwrap_or_default().trim();
    if address.is_empty() {
        return Err(format!("{text:?}: the address comes first"));
    }
    let mut region = PlanRegion { address: address.to_owned(), labels: BTreeMap::new(), capacity: None };
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(|| format!("{part:?} is not KEY=VALUE"))?;
        if key == "capacity" {
            let capacity = value.parse::<f64>().map_err(|_| format!("capacity {value:?} is not a number"))?;
            region.capacity = Some(capacity);
        } else {
            region.labels.insert(key.to_owned(), value.to_owned());
        }
    }
    Ok(region)
}

/// Runs `shardalloc plan`.
pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let loads: BTreeMap<String, f64> = match &args.loads {
        None => BTreeMap::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: expected {{\"shard\": load, …}}", path.display()))?
        }
    };
    let config = match &args.config {
        None => None,
        Some(text) => Some(serde_json::from_str(text).context("--config is not JSON")?),
    };
    let request = PlanRequest {
        add_regions: args.add,
        remove_regions: args.remove,
        drain: args.drain,
        loads,
        strategy: args.strategy,
        config,
        rounds: args.rounds as usize,
    };
    if request.add_regions.is_empty()
        && request.remove_regions.is_empty()
        && request.drain.is_empty()
        && request.loads.is_empty()
        && request.strategy.is_none()
    {
        bail!("nothing to plan: give --add, --remove, --drain, --loads or --strategy");
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let answer = runtime
        .block_on(async { args.node.client()?.plan(&args.entity_type, &request).await.map_err(anyhow::Error::from) })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answer).context("the plan as JSON")?);
    } else {
        print!("{}", describe(&args.entity_type, &answer));
    }
    Ok(())
}

/// `from → to: n` for each pair, most first.
fn flows(moves: &[PlanMove]) -> String {
    let mut flows: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for m in moves {
        *flows.entry((m.from.as_str(), m.to.as_deref().unwrap_or("nowhere"))).or_default() += 1;
    }
    let mut flows: Vec<_> = flows.into_iter().collect();
    flows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    flows.iter().map(|((from, to), n)| format!("{} → {}: {n}", shown(from), shown(to))).collect::<Vec<_>>().join(", ")
}

/// The plan in words: each round's moves, then every region at the end.
fn describe(entity_type: &str, plan: &PlanResponse) -> String {
    let mut text = format!("plan of {} with {} (nothing changed)\n", shown(entity_type), shown(&plan.strategy));
    text.push_str(&format!("round 0: {} shard(s) displaced", plan.displaced.len()));
    if !plan.displaced.is_empty() {
        text.push_str(&format!(" ({})", flows(&plan.displaced)));
    }
    text.push('\n');
    for round in &plan.rounds {
        text.push_str(&format!("round {}: {} move(s)", round.round, round.moves.len()));
        if !round.moves.is_empty() {
            text.push_str(&format!(" ({})", flows(&round.moves)));
        }
        if !round.clipped.is_empty() {
            text.push_str(&format!(", {} clipped by the churn limits", round.clipped.len()));
        }
        text.push('\n');
    }
    let width = plan.regions.iter().map(|r| shown(&r.address).chars().count()).max().unwrap_or(6).max(6);
    text.push_str(&format!("{:width$}  shards  load\n", "region"));
    for region in &plan.regions {
        let load = region.load.map_or("-".to_owned(), |l| format!("{l:.1}"));
        text.push_str(&format!("{:width$}  {:>6}  {load}\n", shown(&region.address), region.shards));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_to_add_read_their_labels_and_capacity() {
        let region = parse_region("10.0.0.9:2552,zone=b,capacity=800").unwrap();
        assert_eq!(region.address, "10.0.0.9:2552");
        assert_eq!(region.labels, BTreeMap::from([("zone".to_owned(), "b".to_owned())]));
        assert_eq!(region.capacity, Some(800.0));
        assert!(parse_region(",zone=b").unwrap_err().contains("the address comes first"));
        assert!(parse_region("a,zone").unwrap_err().contains("not KEY=VALUE"));
        assert!(parse_region("a,capacity=lots").unwrap_err().contains("not a number"));
    }
}
