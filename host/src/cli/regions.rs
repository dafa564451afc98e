//! `shardalloc regions`: a simulator that connects N regions (`sim-1` …
//! `sim-N`, or `PREFIX-1` … with `--address-prefix`) to a node with the
//! region client, routes traffic for shards "1" … "M" (or ids from
//! `--shard-pattern` or `--shard-list`) between them through the in-memory
//! transport, each region with the labels, metrics and declared capacity
//! of its entry in `--regions-file` besides the common ones, prints
//! `ready N` once all are registered, and drains and leaves when
//! interrupted (SIGINT or SIGTERM): each region runs the region client's
//! `drain_and_leave` (the node hands its shards off, then lets it go)
//! within `--leave-timeout-ms` (1.5 s by default), stopping what still
//! runs when that passes, so the simulator exits within about two seconds
//! even when its node is gone. A second signal stops at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use shardalloc_client::capacity::RegionCapacity;
use shardalloc_client::region::{Application, InMemoryTransport, Region, RegionConfig, RegionHandle};

/// `shardalloc regions` flags.
#[derive(Debug, Args)]
pub struct RegionsArgs {
    /// The node's URL.
    #[arg(long, env = "SHARDALLOC_NODE", default_value = "http://127.0.0.1:7878")]
    node: String,
    /// The entity type the regions serve.
    #[arg(long = "type", value_name = "NAME")]
    entity_type: String,
    /// How many regions.
    #[arg(long)]
    count: usize,
    /// The regions' addresses are PREFIX-1 … PREFIX-N (e.g. a pod's name,
    /// so that regions of several simulators do not collide).
    #[arg(long, env = "SHARDALLOC_ADDRESS_PREFIX", default_value = "sim")]
    address_prefix: String,
    /// Traffic goes to M shards: "1" … "M", or as `--shard-pattern` names them.
    #[arg(long, default_value_t = 100)]
    shards: u64,
    /// The shard ids, `{n}` standing for 1 … M (e.g. `tenant-{n}`).
    #[arg(long, value_name = "PATTERN", conflicts_with = "shard_list")]
    shard_pattern: Option<String>,
    /// A file of shard ids, one a line (blank lines and `#` comments
    /// skipped); `--shards` is then their count.
    #[arg(long, value_name = "FILE")]
    shard_list: Option<std::path::PathBuf>,
    /// A TOML file of per-region settings: `[[region]]` tables, the first
    /// for PREFIX-1 and so on, each with `labels`, `metrics` and `capacity`
    /// tables added to the common `--label`s, `--metric`s and
    /// `--capacity`s (regions past the list get the common ones only).
    #[arg(long, value_name = "FILE")]
    regions_file: Option<std::path::PathBuf>,
    /// The region token, when the node requires one.
    #[arg(long, env = "SHARDALLOC_REGION_TOKEN", hide_env_values = true)]
    region_token: Option<String>,
    /// A PEM file of CA certificates to trust, besides the system's, for an
    /// https:// (wss://) node.
    #[arg(long, env = "SHARDALLOC_CA_CERT", value_name = "FILE")]
    ca_cert: Option<std::path::PathBuf>,
    /// A label every region registers with: KEY=VALUE (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Spread regions over this many zones (label `zone` = `z1` … `zN`).
    #[arg(long)]
    zones: Option<usize>,
    /// A gauge every region reports: NAME=VALUE (repeatable).
    #[arg(long = "metric", value_name = "NAME=VALUE")]
    metrics: Vec<String>,
    /// A quantity of the capacity every region declares when it registers:
    /// NAME=AMOUNT (repeatable; `load` is in the units of shard loads).
    #[arg(long = "capacity", value_name = "NAME=AMOUNT")]
    capacity: Vec<String>,
    /// How long stopping a shard takes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    stop_delay_ms: u64,
    /// Milliseconds between messages each region sends (0: no traffic).
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// When interrupted, milliseconds each region may take to drain and
    /// leave before stopping its shards anyway.
    #[arg(long, default_value_t = 1_500)]
    leave_timeout_ms: u64,
}

/// The most regions one simulator runs.
pub const MAX_REGIONS: usize = 1_000;

/// The most shards one simulator sends to.
pub const MAX_SHARDS: u64 = 10_000_000;

/// `--regions-file`.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionsFile {
    #[serde(default)]
    region: Vec<RegionEntry>,
}

/// One region's own settings in `--regions-file`.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionEntry {
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    metrics: BTreeMap<String, f64>,
    #[serde(default)]
    capacity: BTreeMap<String, f64>,
}

fn read_regions_file(path: &std::path::Path) -> anyhow::Result<RegionsFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--regions-file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("--regions-file {}: not the regions file's TOML", path.display()))
}

/// The shard ids traffic goes to.
fn shard_ids(args: &RegionsArgs) -> anyhow::Result<Vec<String>> {
    if let Some(path) = &args.shard_list {
        let text = std::fs::read_to_string(path).with_context(|| format!("--shard-list {}", path.display()))?;
        let ids: Vec<String> =
            text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect();
        if ids.is_empty() {
            bail!("--shard-list {} names no shard", path.display());
        }
        if ids.len() as u64 > MAX_SHARDS {
            bail!("--shard-list {} names {} shards; at most {MAX_SHARDS}", path.display(), ids.len());
        }
        return Ok(ids);
    }
    let pattern = args.shard_pattern.as_deref().unwrap_or("{n}");
    if !pattern.contains("{n}") {
        bail!("--shard-pattern {pattern:?} has no {{n}} to number the shards with");
    }
    Ok((1..=args.shards).map(|n| pattern.replace("{n}", &n.to_string())).collect())
}

/// A simulated application: counts what its shards receive.
struct SimApp {
    stop_delay: Duration,
    metrics: BTreeMap<String, f64>,
    delivered: Arc<AtomicU64>,
}

impl Application for SimApp {
    type Message = u64;
    type Reply = ();

    async fn start_shard(&self, _shard: &str) {}

    async fn stop_shard(&self, _shard: &str) {
        if !self.stop_delay.is_zero() {
            tokio::time::sleep(self.stop_delay).await;
        }
    }

    async fn deliver(&self, _shard: &str, _message: u64) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    fn metrics(&self) -> BTreeMap<String, f64> {
        self.metrics.clone()
    }
}

fn pairs(items: &[String], what: &str) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("--{what} {item:?}: expected NAME=VALUE"))
        })
        .collect()
}

/// NAME=NUMBER flags as a map; the error names the flag and the pair.
fn numbers(flags: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    pairs(flags, flag)?
        .into_iter()
        .map(|(k, v)| v.parse::<f64>().map(|v| (k.clone(), v)).with_context(|| format!("--{flag} {k}: not a number")))
        .collect()
}

/// Runs the simulator until SIGINT or SIGTERM.
pub fn run(args: RegionsArgs) -> anyhow::Result<()> {
    if args.count == 0 || args.count > MAX_REGIONS {
        bail!("--count must be 1 to {MAX_REGIONS}, not {}", args.count);
    }
    if args.shards == 0 || args.shards > MAX_SHARDS {
        bail!("--shards must be 1 to {MAX_SHARDS}, not {}", args.shards);
    }
    let shards = shard_ids(&args)?;
    let own = match &args.regions_file {
        Some(path) => read_regions_file(path)?.region,
        None => Vec::new(),
    };
    if own.len() > args.count {
        bail!("--regions-file lists {} regions, more than --count {}", own.len(), args.count);
    }
    let labels = pairs(&args.labels, "label")?;
    let metrics = numbers(&args.metrics, "metric")?;
    let capacity = numbers(&args.capacity, "capacity")?;
    let capacities = (1..=args.count)
        .map(|i| {
            let mut quantities = capacity.clone();
            quantities.extend(own.get(i - 1).map(|e| e.capacity.clone()).unwrap_or_default());
            RegionCapacity::from_map(quantities)
                .with_context(|| format!("the capacity of {}-{i} (--capacity, --regions-file)", args.address_prefix))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
    runtime.block_on(async move {
        let transport = InMemoryTransport::<u64>::new();
        let delivered = Arc::new(AtomicU64::new(0));
        let mut regions: Vec<RegionHandle<u64>> = Vec::new();
        for i in 1..=args.count {
            let mut config = RegionConfig::new(&args.node, &args.entity_type, format!("{}-{i}", args.address_prefix));
            config.token = args.region_token.clone();
            config.ca_cert = args.ca_cert.clone();
            config.labels = labels.iter().cloned().collect();
            if let Some(zones) = args.zones.filter(|z| *z > 0) {
                config.labels.insert("zone".into(), format!("z{}", (i - 1) % zones + 1));
            }
            let entry = own.get(i - 1);
            config.labels.extend(entry.map(|e| e.labels.clone()).unwrap_or_default());
            let mut metrics = metrics.clone();
            metrics.extend(entry.map(|e| e.metrics.clone()).unwrap_or_default());
            config.capacity = capacities[i - 1].clone();
            config.stop_deadline = config.stop_deadline.max(Duration::from_millis(args.stop_delay_ms * 2));
            config.leave_timeout = Duration::from_millis(args.leave_timeout_ms);
            config.drain_and_leave_timeout = config.leave_timeout;
            let app =
                SimApp { stop_delay: Duration::from_millis(args.stop_delay_ms), metrics, delivered: delivered.clone() };
            regions.push(Region::start(config, app, transport.clone()).context("start a region")?);
        }
        let registered = async {
            for region in &regions {
                region
                    .wait_registered()
                    .await
                    .with_context(|| format!("region {} was not registered", region.address()))?;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            registered = registered => registered?,
            _ = super::interrupted() => {
                println!("interrupted before every region was registered; stopping");
                futures_util::future::join_all(regions.into_iter().map(RegionHandle::shutdown)).await;
                return Ok(());
            }
        }
        println!("ready {}", regions.len());
        let mut sent = 0u64;
        let mut refused = 0u64;
        let mut targets = Targets::new(shards.len() as u64);
        let traffic = async {
            if args.interval_ms == 0 {
                return std::future::pending().await;
            }
            let mut tick = tokio::time::interval(Duration::from_millis(args.interval_ms));
            loop {
                tick.tick().await;
                for region in &regions {
                    let shard = &shards[targets.next() as usize - 1];
                    match region.send(shard, sent) {
                        Ok(()) => sent += 1,
                        Err(error) => {
                            refused += 1;
                            tracing::debug!(%error, "message not sent");
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = traffic => {}
            _ = super::interrupted() => {}
        }
        println!("leaving: {sent} messages sent, {} delivered, {refused} refused", delivered.load(Ordering::Relaxed));
        let leaves = futures_util::future::join_all(regions.into_iter().map(|region| async move {
            let address = region.address().to_owned();
            region.drain_and_leave().await.map_err(|error| (address, error))
        }));
        let results = tokio::select! {
            results = leaves => results,
            _ = super::interrupted() => {
                println!("interrupted again: stopped without waiting for the regions to leave");
                return Ok(());
            }
        };
        let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
        if let Some((address, error)) = failed.first() {
            eprintln!("{} of {} regions did not leave cleanly (region {address}: {error})", failed.len(), args.count);
        }
        println!("left");
        Ok(())
    })
}

/// The shards traffic goes to: "1" … "M" in turn, one per message over
/// every region, so each shard gets traffic whatever the region count.
struct Targets {
    next: u64,
    shards: u64,
}

impl Targets {
    fn new(shards: u64) -> Self {
        Targets { next: 0, shards: shards.max(1) }
    }

    /// The next shard, from 1.
    fn next(&mut self) -> u64 {
        let shard = self.next % self.shards + 1;
        self.next = self.next.wrapping_add(1);
        shard
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RegionsArgs,
    }

    fn args(extra: &[&str]) -> RegionsArgs {
        let mut all = vec!["regions", "--type", "cart", "--count", "2"];
        all.extend_from_slice(extra);
        Cli::try_parse_from(all).unwrap().args
    }

    #[test]
    fn shard_ids_come_from_a_pattern_or_a_list() {
        assert_eq!(shard_ids(&args(&["--shards", "3"])).unwrap(), ["1", "2", "3"]);
        let tenants = shard_ids(&args(&["--shards", "2", "--shard-pattern", "tenant-{n}/cart"])).unwrap();
        assert_eq!(tenants, ["tenant-1/cart", "tenant-2/cart"]);
        let error = shard_ids(&args(&["--shard-pattern", "fixed"])).unwrap_err().to_string();
        assert_eq!(error, "--shard-pattern \"fixed\" has no {n} to number the shards with");
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("shards.txt");
        std::fs::write(&list, "# tenants\nacme\n\n globex \n").unwrap();
        assert_eq!(shard_ids(&args(&["--shard-list", list.to_str().unwrap()])).unwrap(), ["acme", "globex"]);
        std::fs::write(&list, "# nothing\n").unwrap();
        let empty = shard_ids(&args(&["--shard-list", list.to_str().unwrap()])).unwrap_err().to_string();
        assert!(empty.ends_with("names no shard"), "{empty}");
    }

    #[test]
    fn the_regions_file_gives_each_region_its_labels_and_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("regions.toml");
        std::fs::write(
            &path,
            "[[region]]\nlabels = { zone = \"eu\" }\nmetrics = { latency-eu = 12.5 }\ncapacity = { memory-mb = 4096 }\n\n\
             [[region]]\nlabels = { zone = \"us\" }\n",
        )
        .unwrap();
        let file = read_regions_file(&path).unwrap();
        assert_eq!(file.region.len(), 2);
        assert_eq!(file.region[0].labels["zone"], "eu");
        assert_eq!(file.region[0].metrics["latency-eu"], 12.5);
        assert!(file.region[1].metrics.is_empty());
        assert_eq!(file.region[0].capacity["memory-mb"], 4096.0);
        std::fs::write(&path, "[[region]]\nlable = {}\n").unwrap();
        let error = format!("{:#}", read_regions_file(&path).unwrap_err());
        assert!(error.contains("unknown field `lable`"), "{error}");
    }

    #[test]
    fn traffic_reaches_every_shard_whatever_the_region_count() {
        for (regions, shards) in [(10u64, 400u64), (2, 7), (3, 3), (4, 1)] {
            let mut targets = Targets::new(shards);
            let mut reached = BTreeSet::new();
            for _tick in 0..shards {
                for _region in 0..regions {
                    reached.insert(targets.next());
                }
            }
            assert_eq!(reached, (1..=shards).collect(), "{regions} regions, {shards} shards");
        }
    }
}
