//! Admin commands on a running node, through the typed admin client:
//! `shardalloc placements set|rm|ls`, `shardalloc rebalance`,
//! `shardalloc strategies push|activate|rollback|ls`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use shardalloc_client::admin::AdminClient;
use shardalloc_proto::api::{ActivateRequest, Placement, ShardId};

use super::shown;

/// Where the node is and how to authenticate.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The node's URL, or several comma-separated (nodes sharing an etcd):
    /// the first that accepts a connection is used (any node forwards to
    /// the leader).
    #[arg(long, env = "SHARDALLOC_NODE", default_value = "http://127.0.0.1:7878")]
    pub node: String,
    /// The admin token, when the node requires one.
    #[arg(long, env = "SHARDALLOC_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// A PEM file of CA certificates to trust, besides the system's, for an
    /// https:// node (a self-signed or private-CA certificate).
    #[arg(long, env = "SHARDALLOC_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

/// How long the CLI tries to connect to each of several nodes.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl NodeArgs {
    pub(super) fn client(&self) -> anyhow::Result<AdminClient> {
        let node = self.reachable_node()?;
        AdminClient::with_ca_cert(&node, self.admin_token.clone(), self.ca_cert.as_deref())
            .with_context(|| format!("node URL {node}"))
    }

    /// The one node given, or the first of several that accepts a TCP
    /// connection.
    fn reachable_node(&self) -> anyhow::Result<String> {
        let nodes: Vec<&str> = self.node.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        match nodes.as_slice() {
            [] => anyhow::bail!("--node is empty"),
            [one] => return Ok((*one).to_owned()),
            _ => {}
        }
        for node in &nodes {
            let url = reqwest::Url::parse(node).with_context(|| format!("node URL {node}"))?;
            let reachable = url
                .socket_addrs(|| None)
                .ok()
                .into_iter()
                .flatten()
                .any(|address| std::net::TcpStream::connect_timeout(&address, PROBE_TIMEOUT).is_ok());
            if reachable {
                return Ok((*node).to_owned());
            }
        }
        anyhow::bail!("none of the nodes {} accepts a connection", nodes.join(", "))
    }
}

/// `shardalloc placements …`
#[derive(Debug, Subcommand)]
pub enum PlacementsCommand {
    /// Pins shards to a region: `set TYPE TARGET SHARD…` (all or nothing).
    Set {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// The target region's address.
        target: String,
        /// The shards.
        #[arg(required = true)]
        shards: Vec<String>,
    },
    /// Removes a shard's placement; the strategy decides again on the next rebalance.
    Rm {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// The shard.
        shard: String,
    },
    /// Lists a type's placements.
    Ls {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `shardalloc types …`
#[derive(Debug, Subcommand)]
pub enum TypesCommand {
    /// Lists the entity types: name, regions, shards, strategy.
    Ls {
        #[command(flatten)]
        node: NodeArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deletes an entity type and all its state; refused while it has
    /// regions unless --force, which lets them leave first.
    Rm {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// Let its regions leave first (every shard stops through the hand-off).
        #[arg(long)]
        force: bool,
    },
}

/// `shardalloc rebalance`
#[derive(Debug, Args)]
pub struct RebalanceArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The entity type.
    entity_type: String,
    /// The shards to move.
    #[arg(required = true)]
    shards: Vec<String>,
    /// Start the hand-offs now rather than at the next rebalance tick.
    #[arg(long)]
    immediate: bool,
}

/// `shardalloc strategies …`
#[derive(Debug, Subcommand)]
pub enum StrategiesCommand {
    /// Uploads a component; prints its digest.
    Push {
        #[command(flatten)]
        node: NodeArgs,
        /// The component file (.wasm).
        file: PathBuf,
    },
    /// Activates a strategy for a type (after a dry run on the node).
    Activate {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
        /// A built-in's name or an uploaded `sha256:…` digest.
        strategy: String,
        /// Its configuration, as JSON.
        #[arg(long)]
        config: Option<String>,
        /// Activate without the dry run that must otherwise pass first.
        #[arg(long)]
        force: bool,
    },
    /// Activates again the strategy active before the current one.
    Rollback {
        #[command(flatten)]
        node: NodeArgs,
        /// The entity type.
        entity_type: String,
    },
    /// Lists built-in and uploaded strategies and where they are active.
    Ls {
        #[command(flatten)]
        node: NodeArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the runtime")
}

pub(super) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Runs `shardalloc placements …`.
pub fn placements(command: PlacementsCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match command {
            PlacementsCommand::Set { node, entity_type, target, shards } => {
                let placements: Vec<Placement> =
                    shards.into_iter().map(|s| Placement { shard_id: ShardId(s), target: target.clone() }).collect();
                let answer = node.client()?.set_placements(&entity_type, &placements).await?;
                let stale = placements.len() - answer.written.len();
                print!(
                    "{} placement(s) set; {} has {} in all",
                    answer.written.len(),
                    shown(&entity_type),
                    answer.total
                );
                if stale > 0 {
                    print!(" ({stale} lost to newer writes)");
                }
                println!();
            }
            PlacementsCommand::Rm { node, entity_type, shard } => {
                if node.client()?.remove_placement(&entity_type, &shard).await? {
                    println!("placement of {} removed; the strategy decides at the next rebalance", shown(&shard));
                } else {
                    anyhow::bail!("shard {} of {} has no placement", shown(&shard), shown(&entity_type));
                }
            }
            PlacementsCommand::Ls { node, entity_type, json } => {
                let placements = node.client()?.placements(&entity_type).await?;
                if json {
                    return print_json(&placements);
                }
                for p in placements.placements {
                    println!("{}\t{}", shown(&p.shard_id.0), shown(&p.target));
                }
            }
        }
        Ok(())
    })
}

/// Runs `shardalloc types …`.
pub fn types(command: TypesCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match command {
            TypesCommand::Ls { node, json } => {
                let types = node.client()?.types().await?;
                if json {
                    return print_json(&types);
                }
                for t in types.types {
                    println!("{}\t{} regions\t{} shards\t{}", shown(&t.name), t.regions, t.shards, shown(&t.strategy));
                }
            }
            TypesCommand::Rm { node, entity_type, force } => {
                node.client()?.delete_type(&entity_type, force).await?;
                println!("entity type {} deleted", shown(&entity_type));
            }
        }
        Ok(())
    })
}

/// Runs `shardalloc rebalance`.
pub fn rebalance(args: RebalanceArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let shards: Vec<&str> = args.shards.iter().map(String::as_str).collect();
        let answer = args.node.client()?.rebalance(&args.entity_type, &shards, args.immediate).await?;
        for shard in &answer.accepted {
            println!("{}\taccepted", shown(shard));
        }
        for rejected in &answer.rejected {
            println!("{}\trejected: {}", shown(&rejected.shard_id), rejected.reason);
        }
        Ok(())
    })
}

/// Runs `shardalloc strategies …`.
pub fn strategies(command: StrategiesCommand) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        match command {
            StrategiesCommand::Push { node, file } => {
                let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
                // The node compiles before it answers: tens of seconds for
                // a JavaScript or Python component. Say so, then how long.
                let mib = bytes.len() as f64 / (1024.0 * 1024.0);
                eprintln!("uploading {} ({mib:.1} MiB); the node compiles it before answering…", file.display());
                let started = std::time::Instant::now();
                let stored = node.client()?.upload_strategy(bytes).await?;
                eprintln!("compiled and stored in {:.1} s", started.elapsed().as_secs_f64());
                println!("{}\t{}@{}", stored.digest, shown(&stored.name), shown(&stored.version));
            }
            StrategiesCommand::Activate { node, entity_type, strategy, config, force } => {
                let config =
                    config.map(|text| serde_json::from_str(&text).context("--config is not JSON")).transpose()?;
                let state = node.client()?.activate(&entity_type, &ActivateRequest { strategy, config, force }).await?;
                println!(
                    "{}: {}@{} active",
                    shown(&entity_type),
                    shown(&state.active.name),
                    shown(&state.active.version)
                );
            }
            StrategiesCommand::Rollback { node, entity_type } => {
                let state = node.client()?.rollback(&entity_type).await?;
                println!(
                    "{}: rolled back to {}@{}",
                    shown(&entity_type),
                    shown(&state.active.name),
                    shown(&state.active.version)
                );
            }
            StrategiesCommand::Ls { node, json } => {
                let list = node.client()?.strategies().await?;
                if json {
                    return print_json(&list);
                }
                // digest, name@version, contract (`-` when unread), types where active.
                for s in list.strategies {
                    let active: Vec<String> = s.active_in.iter().map(|t| shown(t)).collect();
                    let contract = s.contract.as_deref().map_or_else(|| "-".to_owned(), shown);
                    println!(
                        "{}\t{}@{}\t{contract}\t{}",
                        s.digest,
                        shown(&s.name),
                        shown(&s.version),
                        active.join(",")
                    );
                }
            }
        }
        Ok(())
    })
}
