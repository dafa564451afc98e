//! Trying a candidate strategy on a running node before it takes over:
//! `shardalloc strategy dry-run` (what it would do on a type's current
//! state, nothing applied) and `shardalloc strategy shadow set|show|clear`
//! (run it beside the active strategy and count where it disagrees). Human
//! output by default, `--json` for the node's answer as it is.

use anyhow::Context;
use clap::{Args, Subcommand};
use shardalloc_proto::api::{ActivateRequest, DryRunRequest, DryRunResponse, ShardId, StrategyState};

use crate::cli::admin::NodeArgs;
use crate::cli::shown;

/// Shards named in full before the rest are only counted.
const NAMED: usize = 10;

/// `shardalloc strategy dry-run`.
#[derive(Debug, Args)]
pub struct DryRunArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The entity type.
    entity_type: String,
    /// A built-in's name or an uploaded `sha256:…` digest.
    strategy: String,
    /// Its configuration, as JSON.
    #[arg(long)]
    config: Option<String>,
    /// Rounds of rebalance to simulate (at most 100).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// A shard to ask the candidate to allocate (repeatable, at most 1,000).
    #[arg(long = "shard", value_name = "SHARD")]
    shards: Vec<String>,
    /// Print the node's answer as JSON.
    #[arg(long)]
    json: bool,
}

/// `shardalloc strategy shadow …`.
#[derive(Debug, Subcommand)]
pub enum ShadowCommand {
    /// Runs a candidate beside the active strategy: it is asked every
    /// question the active one is, and its disagreements are counted.
    Set {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// A built-in's name or an uploaded `sha256:…` digest.
        strategy: String,
        /// Its configuration, as JSON.
        #[arg(long)]
        config: Option<String>,
    },
    /// The shadow candidate and its counts, and past candidates' counts.
    Show {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// Print the node's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stops the shadow candidate (its counts are kept in the history).
    Clear {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the runtime")
}

fn config_of(config: Option<String>) -> anyhow::Result<Option<serde_json::Value>> {
    config.map(|text| serde_json::from_str(&text).context("--config is not JSON")).transpose()
}

/// Runs `shardalloc strategy dry-run`.
pub fn dry_run(args: DryRunArgs) -> anyhow::Result<()> {
    let DryRunArgs { node, entity_type, strategy, config, rounds, shards, json } = args;
    let request = DryRunRequest {
        strategy,
        config: config_of(config)?,
        rounds,
        shard_ids: shards.into_iter().map(ShardId).collect(),
    };
    let answer = runtime()?.block_on(async { node.client()?.dry_run(&entity_type, &request).await.map_err(Into::into) })
        as anyhow::Result<DryRunResponse>;
    let answer = answer?;
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print!("{}", describe_dry_run(&entity_type, &answer));
    }
    Ok(())
}

/// A dry run's answer in words: one line per allocation, the rebalance,
/// then each round.
fn describe_dry_run(entity_type: &str, answer: &DryRunResponse) -> String {
    let mut out = format!("{} on {} (nothing applied)\n", shown(&answer.strategy), shown(entity_type));
    for (shard, home) in &answer.allocations {
        let home = home.as_deref().map_or_else(|| "no allocatable region".to_owned(), shown);
        out.push_str(&format!("allocate {} -> {home}\n", shown(shard)));
    }
    out.push_str(&format!("rebalance: {}\n", moves(&answer.rebalance)));
    for (i, round) in answer.rounds.iter().enumerate() {
        let counts: Vec<String> = round.counts.iter().map(|(region, n)| format!("{}={n}", shown(region))).collect();
        let clipped =
            if round.clipped.is_empty() { String::new() } else { format!("; {} clipped", round.clipped.len()) };
        out.push_str(&format!("round {}: {}{clipped}; then {}\n", i + 1, moves(&round.moved), counts.join(" ")));
    }
    out
}

/// "nothing moves", or how many move and the first few by name.
fn moves(shards: &[String]) -> String {
    match shards.len() {
        0 => "nothing moves".to_owned(),
        n => {
            let named: Vec<String> = shards.iter().take(NAMED).map(|s| shown(s)).collect();
            let more = if n > NAMED { format!(" and {} more", n - NAMED) } else { String::new() };
            format!("{n} move ({}{more})", named.join(", "))
        }
    }
}

/// Runs `shardalloc strategy shadow …`.
pub fn shadow(command: ShadowCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match command {
            ShadowCommand::Set { node, entity_type, strategy, config } => {
                let client = node.client()?;
                let request = ActivateRequest { strategy, config: config_of(config)?, force: false };
                client.set_shadow(&entity_type, &request).await?;
                print!("{}", describe_shadow(&entity_type, &client.strategy(&entity_type).await?));
            }
            ShadowCommand::Show { node, entity_type, json } => {
                let state = node.client()?.strategy(&entity_type).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&state)?);
                } else {
                    print!("{}", describe_shadow(&entity_type, &state));
                }
            }
            ShadowCommand::Clear { node, entity_type } => {
                let client = node.client()?;
                client.clear_shadow(&entity_type).await?;
                print!("{}", describe_shadow(&entity_type, &client.strategy(&entity_type).await?));
            }
        }
        anyhow::Ok(())
    })
}

/// The active strategy, the shadow and its counts, and past candidates.
fn describe_shadow(entity_type: &str, state: &StrategyState) -> String {
    let label = |name: &str, version: &str| format!("{}@{}", shown(name), shown(version));
    let mut out = format!("{}: active {}\n", shown(entity_type), label(&state.active.name, &state.active.version));
    match &state.shadow {
        Some(shadow) => out.push_str(&format!(
            "shadow {}: {}\n",
            label(&shadow.name, &shadow.version),
            counts(state.shadow_calls, state.shadow_disagreements)
        )),
        None => out.push_str("no shadow\n"),
    }
    for past in &state.shadow_history {
        out.push_str(&format!("past shadow {}: {}\n", shown(&past.candidate), counts(past.calls, past.disagreements)));
    }
    out
}

fn counts(calls: u64, disagreements: u64) -> String {
    let share = if calls == 0 { 0.0 } else { 100.0 * disagreements as f64 / calls as f64 };
    format!("{calls} decisions, {disagreements} disagreed ({share:.1}%)")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use shardalloc_proto::api::{ActivationCause, ActivationInfo, DryRunRound, ShadowCounts};

    use super::*;

    #[test]
    fn a_dry_run_reads_as_words() {
        let answer = DryRunResponse {
            strategy: "zone@1.0.0".into(),
            allocations: BTreeMap::from([("9".into(), Some("a".into())), ("10".into(), None)]),
            rebalance: (1..=12).map(|i| i.to_string()).collect(),
            rounds: vec![DryRunRound {
                moved: vec![],
                counts: BTreeMap::from([("a".into(), 3), ("b".into(), 2)]),
                clipped: vec![],
            }],
        };
        assert_eq!(
            describe_dry_run("cart", &answer),
            "zone@1.0.0 on cart (nothing applied)\nallocate 10 -> no allocatable region\nallocate 9 -> a\n\
             rebalance: 12 move (1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more)\nround 1: nothing moves; then a=3 b=2\n"
        );
    }

    #[test]
    fn a_shadow_reads_as_words_with_its_share_of_disagreements() {
        let info = |name: &str| ActivationInfo {
            name: name.into(),
            version: "1.0.0".into(),
            digest: name.into(),
            config: None,
            cause: ActivationCause::Operator,
            at_ms: 0,
        };
        let state = StrategyState {
            active: info("least-shard"),
            history: vec![],
            next: None,
            shadow: Some(info("hash")),
            shadow_calls: 200,
            shadow_disagreements: 50,
            shadow_history: vec![ShadowCounts { candidate: "zone@1.0.0".into(), calls: 0, disagreements: 0 }],
        };
        assert_eq!(
            describe_shadow("cart", &state),
            "cart: active least-shard@1.0.0\nshadow hash@1.0.0: 200 decisions, 50 disagreed (25.0%)\n\
             past shadow zone@1.0.0: 0 decisions, 0 disagreed (0.0%)\n"
        );
    }
}
