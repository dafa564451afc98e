//! `shardalloc events [--type NAME] [--json]`: tails the node's decision
//! event stream in a terminal, one line per event, until interrupted. When
//! the node ends the stream (it shut down or stopped leading) the command
//! reconnects with the last event's id, so nothing kept is lost.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use shardalloc_proto::api::{DecisionEvent, EventKind};

use super::admin::NodeArgs;
use super::shown;

/// How long to wait before reconnecting to a stream the node ended.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// Most reconnections in a row that deliver nothing before giving up.
const MAX_EMPTY_RECONNECTS: u32 = 30;

/// `shardalloc events`
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Only this entity type's events.
    #[arg(long = "type", value_name = "NAME")]
    entity_type: Option<String>,
    /// Print each event as the JSON object the stream sends.
    #[arg(long)]
    json: bool,
}

/// `HH:MM:SS.mmm` (UTC) of a time in milliseconds since the Unix epoch.
fn clock(at_ms: u64) -> String {
    let of_day = at_ms % 86_400_000;
    let (h, m, s, ms) = (of_day / 3_600_000, of_day / 60_000 % 60, of_day / 1000 % 60, of_day % 1000);
    format!("{h:02}:{m:02}:{s:02}.{ms:03}")
}

/// One event as a line for people.
pub fn line(event: &DecisionEvent) -> String {
    if event.kind == EventKind::Missed {
        return match event.missed {
            Some(n) if n > 0 => format!("-- {n} events missed (this terminal fell behind the node's backlog)"),
            _ => "-- events missed (the leader changed)".to_owned(),
        };
    }
    let mut line = format!("{} {} {}", clock(event.at_ms), shown(&event.entity_type), event.kind);
    if let Some(shard) = &event.shard_id {
        line.push_str(&format!(" shard {}", shown(shard)));
    }
    match (event.kind, &event.region) {
        (EventKind::ShardHomed, Some(region)) => line.push_str(&format!(" -> {}", shown(region))),
        (_, Some(region)) => line.push_str(&format!(" region {}", shown(region))),
        _ => {}
    }
    if let Some(target) = &event.target {
        line.push_str(&format!(" -> {}", shown(target)));
    }
    if let Some(load) = event.load {
        line.push_str(&format!(" load {load:.1}"));
    }
    let mut why = Vec::new();
    if let Some(reason) = event.reason {
        why.push(reason.to_string());
    }
    why.extend(event.strategy.iter().map(|s| shown(s)));
    why.extend(event.cause.iter().map(|c| shown(c)));
    why.extend(event.by.iter().map(|b| format!("by {b}")));
    why.extend(event.detail.iter().map(|d| shown(d)));
    if !why.is_empty() {
        line.push_str(&format!(" ({})", why.join("; ")));
    }
    line
}

/// Runs `shardalloc events`.
pub fn run(args: EventsArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the runtime")?;
    runtime.block_on(async move {
        let client = args.node.client()?;
        let mut last_id: Option<String> = None;
        let mut empty = 0;
        loop {
            let mut stream = client.events(args.entity_type.as_deref(), last_id.as_deref()).await?;
            let mut delivered = false;
            while let Some(streamed) = stream.next().await? {
                delivered = true;
                if streamed.id.is_some() {
                    last_id = streamed.id;
                }
                if args.json {
                    println!("{}", serde_json::to_string(&streamed.event)?);
                } else {
                    println!("{}", line(&streamed.event));
                }
            }
            empty = if delivered { 0 } else { empty + 1 };
            if empty >= MAX_EMPTY_RECONNECTS {
                anyhow::bail!("the node ended the event stream {MAX_EMPTY_RECONNECTS} times in a row; giving up");
            }
            eprintln!("-- the node ended the stream (shut down or leader changed); reconnecting");
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use shardalloc_proto::api::HomeReason;

    use super::*;

    #[test]
    fn a_line_says_what_where_and_why() {
        let event = DecisionEvent {
            shard_id: Some("42".into()),
            region: Some("b".into()),
            reason: Some(HomeReason::Strategy),
            strategy: Some("least-shard@1.0.0".into()),
            ..DecisionEvent::new(EventKind::ShardHomed, "cart", 3_723_004)
        };
        assert_eq!(line(&event), "01:02:03.004 cart shard-homed shard 42 -> b (strategy; least-shard@1.0.0)");
        let load = DecisionEvent {
            region: Some("b".into()),
            load: Some(1234.56),
            ..DecisionEvent::new(EventKind::RegionLoad, "cart", 3_723_004)
        };
        assert_eq!(line(&load), "01:02:03.004 cart region-load region b load 1234.6");
        let missed = DecisionEvent { missed: Some(7), ..DecisionEvent::new(EventKind::Missed, "", 0) };
        assert!(line(&missed).contains("7 events missed"));
    }
}
