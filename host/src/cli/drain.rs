//! `shardalloc drain REGION [--wait SECONDS]`: drains a region on a running
//! node (it gets no new shard, and its shards are handed off), and with
//! `--wait` waits until it holds no shard (or has left), failing with the
//! count it still holds when the wait runs out. Made for a region's
//! Kubernetes preStop hook (deploy/kubernetes/examples/region.yaml).

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

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
        loop {
            let regions = client.regions().await?;
            let held = regions.regions.iter().find(|r| r.address == args.region).map(|r| r.shards);
            match held {
                None => {
                    println!("region {region} has left");
                    return Ok(());
                }
                Some(0) => {
                    println!("region {region} drained: it holds no shard ({:.1} s)", started.elapsed().as_secs_f64());
                    return Ok(());
                }
                Some(shards) if started.elapsed() >= wait => bail!(
                    "region {region} still holds {shards} shard(s) after {} s; the drain goes on (see docs/operations.md, \"Shards do not move\")",
                    wait.as_secs()
                ),
                Some(_) => tokio::time::sleep(POLL).await,
            }
        }
    })
}
