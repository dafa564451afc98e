//! `shardalloc drain REGION [--wait SECONDS]`: drains a region on a running
//! node (it gets no new shard, and its shards are handed off), and with
//! `--wait` waits until it holds no shard (or has left), showing a progress
//! bar on stderr (`GET …/regions/{address}/drain`: shards left, hand-offs
//! in flight), failing with the count it still holds when the wait runs out. Made for a region's
//! Kubernetes preStop hook (deploy/kubernetes/examples/region.yaml).

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use shardalloc_client::admin::AdminError;

use super::admin::NodeArgs;
use super::shown;

/// The longest `--wait`: a preStop hook is bounded by the pod's grace period.
pub const MAX_WAIT_S: u64 = 3_600;

/// How often `--wait` asks the node.
const POLL: Duration = Duration::from_millis(500);

/// `shardalloc drain` flags.
#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The region's address, as it registered (`GET /v1/cluster/regions`).
    #[arg(env = "SHARDALLOC_REGION")]
    region: String,
    /// Wait until the region holds no shard (or has left), at most this
    /// many seconds (1 to 3600); fail if it still holds some then.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_S))]
    wait: Option<u64>,
}

/// Runs `shardalloc drain`.
pub fn run(args: DrainArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let client = args.node.client()?;
        client.drain(&args.region).await?;
        let region = shown(&args.region);
        let Some(wait) = args.wait.map(Duration::from_secs) else {
            println!("region {region} drained: its shards are being handed off");
            return Ok(());
        };
        let started = Instant::now();
        let mut progress = Progress::new(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        loop {
            let state = match client.drain_state(&args.region).await {
                Err(AdminError::Api { status, .. }) if status == reqwest::StatusCode::NOT_FOUND => None,
                other => Some(other?),
            };
            let Some(state) = state else {
                progress.finish();
                println!("region {region} has left");
                return Ok(());
            };
            progress.show(state.shards_left, state.hand_offs_in_flight, started.elapsed());
            if state.shards_left == 0 {
                progress.finish();
                println!("region {region} drained: it holds no shard ({:.1} s)", started.elapsed().as_secs_f64());
                return Ok(());
            }
            if started.elapsed() >= wait {
                progress.finish();
                bail!(
                    "region {region} still holds {} shard(s) after {} s; the drain goes on (see docs/operations.md, \"Shards do not move\")",
                    state.shards_left,
                    wait.as_secs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// The drain's progress on stderr: a bar redrawn in place on a terminal,
/// a line at each change otherwise.
struct Progress {
    terminal: bool,
    /// The most shards seen: the bar's whole.
    total: usize,
    last: Option<(usize, usize)>,
}

/// The bar's width in characters.
const BAR: usize = 30;

impl Progress {
    fn new(terminal: bool) -> Self {
        Progress { terminal, total: 0, last: None }
    }

    fn show(&mut self, left: usize, in_flight: usize, elapsed: Duration) {
        self.total = self.total.max(left);
        if !self.terminal && self.last == Some((left, in_flight)) {
            return;
        }
        self.last = Some((left, in_flight));
        let line = bar(self.total, left, in_flight, elapsed);
        if self.terminal {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    }

    fn finish(&self) {
        if self.terminal && self.last.is_some() {
            eprintln!();
        }
    }
}

/// `[##########--------------------] 12/36 shards handed off, 3 in flight, 5.2 s`
fn bar(total: usize, left: usize, in_flight: usize, elapsed: Duration) -> String {
    let done = total - left.min(total);
    let filled = (done * BAR).checked_div(total).unwrap_or(BAR);
    format!(
        "[{}{}] {done}/{total} shards handed off, {in_flight} in flight, {:.1} s",
        "#".repeat(filled),
        "-".repeat(BAR - filled),
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_as_shards_are_handed_off() {
        let second = Duration::from_secs(1);
        assert_eq!(bar(30, 30, 5, second), format!("[{}] 0/30 shards handed off, 5 in flight, 1.0 s", "-".repeat(30)));
        assert_eq!(
            bar(30, 20, 5, second),
            format!("[{}{}] 10/30 shards handed off, 5 in flight, 1.0 s", "#".repeat(10), "-".repeat(20))
        );
        assert_eq!(bar(0, 0, 0, second), format!("[{}] 0/0 shards handed off, 0 in flight, 1.0 s", "#".repeat(30)));
    }
}
