//! `shardalloc freeze`: freezes a type (or every type, `--all`) on a
//! running node, lifts a freeze, and shows a type's freezes with their
//! history. While a type is frozen its strategy moves no shard
//! (docs/operations.md, "Freezes and the maintenance mode").

use anyhow::Context;
use clap::{Args, Subcommand};
use shardalloc_client::api::{FreezeRequest, FreezeState};

use super::admin::NodeArgs;
use super::shown;

/// `shardalloc freeze` subcommands.
#[derive(Debug, Subcommand)]
pub enum FreezeCommand {
    /// Freeze a type (or every type): its strategy moves no shard until the
    /// freeze ends or is lifted.
    Set(SetArgs),
    /// Lift a type's freeze (its own and the maintenance mode's), or with
    /// --all the cluster-wide freeze.
    Lift(LiftArgs),
    /// Show a type's freezes (or the cluster's) and their history.
    Show(ShowArgs),
}

/// Which freezes: a type's, or the cluster's.
#[derive(Debug, Args)]
pub struct Target {
    /// The entity type.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    entity_type: Option<String>,
    /// Every type: the cluster-wide freeze.
    #[arg(long)]
    all: bool,
}

/// `shardalloc freeze set` flags.
#[derive(Debug, Args)]
pub struct SetArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    target: Target,
    /// How long: seconds, or with a unit (90s, 30m, 2h, 1d; at most 30 days).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    duration: u64,
    /// Why (shown in the dashboard's banner and the events).
    #[arg(long)]
    reason: String,
    /// Hold operators' placements, rebalance-now and drains too.
    #[arg(long)]
    strict: bool,
}

/// `shardalloc freeze lift` flags.
#[derive(Debug, Args)]
pub struct LiftArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    target: Target,
    /// Why (kept in the history).
    #[arg(long, default_value = "lifted by an operator")]
    reason: String,
}

/// `shardalloc freeze show` flags.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    target: Target,
    /// Print the node's JSON.
    #[arg(long)]
    json: bool,
}

/// A duration in seconds from `90`, `90s`, `30m`, `2h` or `1d`.
fn parse_duration(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 90s, 30m, 2h or 1d"))?;
    let seconds = match unit {
        "s" => number,
        "m" => number.saturating_mul(60),
        "h" => number.saturating_mul(3_600),
        "d" => number.saturating_mul(86_400),
        other => return Err(format!("unknown unit {other:?} in {text:?}: use s, m, h or d")),
    };
    match seconds {
        0 => Err("a freeze lasts at least a second".into()),
        s if s > 30 * 86_400 => Err(format!("{text} is more than 30 days")),
        s => Ok(s),
    }
}

/// Runs `shardalloc freeze`.
pub fn run(command: FreezeCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        match command {
            FreezeCommand::Set(args) => {
                let client = args.node.client()?;
                let request = FreezeRequest {
                    for_seconds: Some(args.duration),
                    until: None,
                    reason: args.reason,
                    strict: args.strict,
                };
                let state = client.freeze(args.target.entity_type.as_deref(), &request).await?;
                print!("{}", describe(&args.target, &state));
            }
            FreezeCommand::Lift(args) => {
                let client = args.node.client()?;
                let state = client.lift_freeze(args.target.entity_type.as_deref(), &args.reason).await?;
                print!("{}", describe(&args.target, &state));
            }
            FreezeCommand::Show(args) => {
                let client = args.node.client()?;
                let state = client.freezes(args.target.entity_type.as_deref()).await?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&state).context("the freezes as JSON")?);
                } else {
                    print!("{}", describe(&args.target, &state));
                    let now = shardalloc::clock::wall_clock_ms();
                    for entry in &state.history {
                        println!(
                            "  {} ago: {} {} by {}: {}",
                            span(now.saturating_sub(entry.at_ms)),
                            entry.scope,
                            entry.action,
                            entry.by,
                            shown(&entry.reason)
                        );
                    }
                }
            }
        }
        Ok(())
    })
}

/// The freezes in force, in words, one per line.
fn describe(target: &Target, state: &FreezeState) -> String {
    let name = match &target.entity_type {
        Some(name) => shown(name),
        None => "the cluster".to_owned(),
    };
    if !state.frozen {
        return format!("{name} is not frozen\n");
    }
    let now = shardalloc::clock::wall_clock_ms();
    let mut text = String::new();
    for freeze in &state.freezes {
        let until =
            freeze.until_ms.map_or("until lifted".to_owned(), |ms| format!("for {}", span(ms.saturating_sub(now))));
        let strict = if freeze.strict { ", strict" } else { "" };
        text.push_str(&format!(
            "{name} is frozen ({} freeze{strict}) {until}: {}\n",
            freeze.scope,
            shown(&freeze.reason)
        ));
    }
    text
}

/// A span of milliseconds in words: `2d 3h`, `29m 59s`, `12s`.
fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m {}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, span};

    #[test]
    fn spans_read_in_two_units() {
        assert_eq!(span(12_400), "12s");
        assert_eq!(span(1_799_000), "29m 59s");
        assert_eq!(span(7_260_000), "2h 1m");
        assert_eq!(span(183_600_000), "2d 3h");
    }

    #[test]
    fn durations_read_with_their_units_and_are_bounded() {
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("30m"), Ok(1_800));
        assert_eq!(parse_duration("2h"), Ok(7_200));
        assert_eq!(parse_duration("1d"), Ok(86_400));
        assert!(parse_duration("0").unwrap_err().contains("at least a second"));
        assert!(parse_duration("31d").unwrap_err().contains("more than 30 days"));
        assert!(parse_duration("5w").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("m").unwrap_err().contains("not a duration"));
    }
}
