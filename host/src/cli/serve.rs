//! `shardalloc serve`: runs the node.
//!
//! Settings come from flags, then `SHARDALLOC_*` environment variables, then
//! the TOML file given with `--config`, then the defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use shardalloc::coordinator::{Config, TypeSettings};
use shardalloc::engine::limits::Limits;
use shardalloc::server::conn::ConnectionLimits;
use shardalloc::server::driver::catalog::MAX_TYPES;
use shardalloc::server::driver::{DriverSettings, TypeDeclaration};
use shardalloc::server::guard::OwnOrigins;
use shardalloc::server::leadership::NodeIdentity;
use shardalloc::server::leadership::claim::ClusterSecret;
use shardalloc::server::{ClusterSettings, DEFAULT_LEADER_LEASE, Node, NodeSettings, Security, tls};
use shardalloc::store::{EtcdConfig, StoreConfig};
use shardalloc::strategy::StrategySource;

/// `shardalloc serve` flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (REST API, region sessions, metrics).
    #[arg(long, env = "SHARDALLOC_LISTEN")]
    listen: Option<SocketAddr>,
    /// Data directory: the store and the artifact cache.
    #[arg(long, env = "SHARDALLOC_DATA")]
    data: Option<PathBuf>,
    /// A TOML file with the node's settings (see docs/operations.md).
    #[arg(long, env = "SHARDALLOC_CONFIG")]
    config: Option<PathBuf>,
    /// Token every /v1 admin call must bear (Authorization: Bearer …).
    #[arg(long, env = "SHARDALLOC_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// File holding the admin token.
    #[arg(long, env = "SHARDALLOC_ADMIN_TOKEN_FILE", conflicts_with = "admin_token")]
    admin_token_file: Option<PathBuf>,
    /// Token every region session must bear.
    #[arg(long, env = "SHARDALLOC_REGION_TOKEN", hide_env_values = true)]
    region_token: Option<String>,
    /// File holding the region token.
    #[arg(long, env = "SHARDALLOC_REGION_TOKEN_FILE", conflicts_with = "region_token")]
    region_token_file: Option<PathBuf>,
    /// PEM certificate chain: serve HTTPS and WSS on the one port (needs `--tls-key`).
    #[arg(long, env = "SHARDALLOC_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SHARDALLOC_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Declares an entity type, with its strategy (default least-shard): NAME[=STRATEGY], where
    /// STRATEGY is a built-in's name, an uploaded component's sha256:… digest or a .wasm file.
    /// Repeatable.
    #[arg(long = "type", value_name = "NAME[=STRATEGY]")]
    types: Vec<String>,
    /// Regions (not proxies) a type needs before it allocates.
    #[arg(long, env = "SHARDALLOC_MIN_REGIONS")]
    min_regions: Option<usize>,
    /// Milliseconds between rebalance ticks.
    #[arg(long, env = "SHARDALLOC_REBALANCE_INTERVAL_MS")]
    rebalance_interval_ms: Option<u64>,
    /// Milliseconds between two saves of the shards' smoothed loads.
    #[arg(long, env = "SHARDALLOC_LOAD_SAVE_INTERVAL_MS")]
    load_save_interval_ms: Option<u64>,
    /// Milliseconds before a silent region is unreachable; removal follows after `--remove-after-ms`.
    #[arg(long, env = "SHARDALLOC_UNREACHABLE_AFTER_MS")]
    unreachable_after_ms: Option<u64>,
    /// Milliseconds an unreachable region is kept before its shards are re-homed.
    #[arg(long, env = "SHARDALLOC_REMOVE_AFTER_MS")]
    remove_after_ms: Option<u64>,
    /// A region's lease in milliseconds (shorter than unreachable + remove).
    #[arg(long, env = "SHARDALLOC_LEASE_MS")]
    lease_ms: Option<u64>,
    /// Milliseconds between region heartbeats.
    #[arg(long, env = "SHARDALLOC_HEARTBEAT_INTERVAL_MS")]
    heartbeat_interval_ms: Option<u64>,
    /// Deadline of every hand-off step, in milliseconds.
    #[arg(long, env = "SHARDALLOC_HANDOFF_TIMEOUT_MS")]
    handoff_timeout_ms: Option<u64>,
    /// Milliseconds a hand-off waits for one region's acknowledgement before
    /// going on without it (the owner must still stop the shard).
    #[arg(long, env = "SHARDALLOC_HANDOFF_ACK_TIMEOUT_MS")]
    handoff_ack_timeout_ms: Option<u64>,
    /// The URL clients use to reach this node (its own web origin; writes
    /// from other origins are refused).
    #[arg(long, env = "SHARDALLOC_ADVERTISE", value_name = "URL")]
    advertise: Option<String>,
    /// Another host name this node is reached by (any port); repeatable.
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// Milliseconds a client has to send a request head (and to start its
    /// next request on a kept-alive connection).
    #[arg(long, env = "SHARDALLOC_HEADER_READ_TIMEOUT_MS")]
    header_read_timeout_ms: Option<u64>,
    /// Milliseconds a client has to send a request body.
    #[arg(long, env = "SHARDALLOC_REQUEST_BODY_TIMEOUT_MS")]
    request_body_timeout_ms: Option<u64>,
    /// Milliseconds a connection may sit idle (no request, no traffic).
    #[arg(long, env = "SHARDALLOC_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,
    /// Milliseconds a region session has to send its Hello, then its Register.
    #[arg(long, env = "SHARDALLOC_SESSION_HANDSHAKE_TIMEOUT_MS")]
    session_handshake_timeout_ms: Option<u64>,
    /// Most open connections, region sessions included.
    #[arg(long, env = "SHARDALLOC_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Most connections that have not yet made an authorised request.
    #[arg(long, env = "SHARDALLOC_MAX_UNAUTHENTICATED_CONNECTIONS")]
    max_unauthenticated_connections: Option<usize>,
    /// Milliseconds a follower waits for the leader's answer to a call it
    /// forwards before answering 503 leader-unavailable (default 5000; an
    /// upload waits for its compile).
    #[arg(long, env = "SHARDALLOC_FORWARD_TIMEOUT_MS")]
    forward_timeout_ms: Option<u64>,
    /// Most event streams (GET /v1/events) served at once; more get 429
    /// (default 256).
    #[arg(long, env = "SHARDALLOC_MAX_EVENT_STREAMS")]
    max_event_streams: Option<usize>,
    /// Let a region's registration create an entity type the node does not
    /// have (off: types are declared with --type or [types.NAME]).
    #[arg(long, env = "SHARDALLOC_AUTO_CREATE_TYPES")]
    auto_create_types: bool,
    /// This node's name among the nodes sharing an etcd (default: the
    /// listen address).
    #[arg(long, env = "SHARDALLOC_NODE_NAME")]
    node_name: Option<String>,
    /// Seconds of the leader's etcd lease (default 3): a dead leader is
    /// replaced within about this long. Separate from the regions' lease.
    #[arg(long, env = "SHARDALLOC_LEADER_LEASE_S")]
    leader_lease_s: Option<u64>,
    /// File holding the secret every node of the cluster shares (at least
    /// 16 bytes, e.g. `openssl rand -hex 32`): nodes sign their leader
    /// claims with it and follow, forward to and redirect to no leader whose
    /// claim does not verify. Needed with --etcd.
    #[arg(long, env = "SHARDALLOC_CLUSTER_SECRET_FILE", value_name = "PATH")]
    cluster_secret_file: Option<PathBuf>,
    /// Keep the state in etcd, shared with other nodes (one leads):
    /// comma-separated client URLs. Without it, the embedded store in `--data`.
    #[arg(long, env = "SHARDALLOC_ETCD", value_name = "URL[,URL…]", value_delimiter = ',')]
    etcd: Vec<String>,
    /// The prefix of every etcd key (default /shardalloc/); nodes with the
    /// same prefix share one state.
    #[arg(long, env = "SHARDALLOC_ETCD_PREFIX")]
    etcd_prefix: Option<String>,
    /// etcd user (authentication on); the password comes from `--etcd-password-file`.
    #[arg(long, env = "SHARDALLOC_ETCD_USER", requires = "etcd_password_file")]
    etcd_user: Option<String>,
    /// File holding the etcd user's password.
    #[arg(long, env = "SHARDALLOC_ETCD_PASSWORD_FILE", requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
    /// PEM CA certificate that signed etcd's (for https:// etcd URLs).
    #[arg(long, env = "SHARDALLOC_ETCD_CA_CERT")]
    etcd_ca_cert: Option<PathBuf>,
    /// PEM client certificate for etcd (needs `--etcd-key`).
    #[arg(long, env = "SHARDALLOC_ETCD_CERT", requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// Refuse a store of an older schema instead of migrating it when it
    /// opens (the error says how to migrate: start without this flag).
    #[arg(long, env = "SHARDALLOC_NO_MIGRATE")]
    no_migrate: bool,
    /// PEM private key of `--etcd-cert`.
    #[arg(long, env = "SHARDALLOC_ETCD_KEY", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    #[command(flatten)]
    uploads: super::uploads::UploadArgs,
}

/// The TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    listen: Option<SocketAddr>,
    data: Option<PathBuf>,
    admin_token_file: Option<PathBuf>,
    region_token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    auto_create_types: Option<bool>,
    advertise: Option<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    node_name: Option<String>,
    leader_lease_s: Option<u64>,
    cluster_secret_file: Option<PathBuf>,
    #[serde(default)]
    etcd: Vec<String>,
    etcd_prefix: Option<String>,
    etcd_user: Option<String>,
    etcd_password_file: Option<PathBuf>,
    etcd_ca_cert: Option<PathBuf>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    #[serde(default)]
    coordinator: CoordinatorFile,
    #[serde(default)]
    strategy_limits: LimitsFile,
    #[serde(default)]
    connections: ConnectionsFile,
    #[serde(default)]
    types: BTreeMap<String, TypeFile>,
    #[serde(default)]
    uploads: super::uploads::UploadsFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CoordinatorFile {
    heartbeat_interval_ms: Option<u64>,
    unreachable_after_ms: Option<u64>,
    remove_after_ms: Option<u64>,
    lease_ms: Option<u64>,
    handoff_timeout_ms: Option<u64>,
    handoff_ack_timeout_ms: Option<u64>,
    rebalance_interval_ms: Option<u64>,
    max_rebalance_per_tick: Option<usize>,
    max_handoffs_in_flight: Option<usize>,
    drain_batch: Option<usize>,
    min_regions: Option<usize>,
    tombstone_retention_ms: Option<u64>,
    max_regions: Option<usize>,
    max_shards: Option<usize>,
    max_placements: Option<usize>,
    load_half_life_ms: Option<u64>,
    load_save_interval_ms: Option<u64>,
    max_moves_per_round: Option<usize>,
    max_moves_fraction: Option<f64>,
    move_cooldown_ms: Option<u64>,
    min_round_interval_ms: Option<u64>,
    maintenance: Option<bool>,
    maintenance_window_ms: Option<u64>,
    maintenance_enter_lost: Option<usize>,
    maintenance_enter_share: Option<f64>,
    maintenance_exit_lost: Option<usize>,
    maintenance_exit_share: Option<f64>,
}

/// `[strategy-limits]` over the defaults; a zero (every call would fail)
/// is refused naming its key.
fn strategy_limits(file: &LimitsFile) -> anyhow::Result<Limits> {
    let mut limits = Limits::default();
    let zero = |key: &str| {
        anyhow::anyhow!("[strategy-limits] {key} = 0 would make every strategy call fail; it must be at least 1")
    };
    if let Some(ms) = file.deadline_ms {
        if ms == 0 {
            return Err(zero("deadline-ms"));
        }
        limits.deadline = Duration::from_millis(ms);
    }
    if let Some(mib) = file.memory_mib {
        if mib == 0 {
            return Err(zero("memory-mib"));
        }
        limits.memory = mib << 20;
    }
    if let Some(ms) = file.view_load_ms {
        if ms == 0 {
            return Err(zero("view-load-ms"));
        }
        limits.view_load = Duration::from_millis(ms);
    }
    Ok(limits)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct LimitsFile {
    deadline_ms: Option<u64>,
    memory_mib: Option<usize>,
    view_load_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ConnectionsFile {
    header_read_timeout_ms: Option<u64>,
    request_body_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    session_handshake_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_unauthenticated_connections: Option<usize>,
    forward_timeout_ms: Option<u64>,
    max_event_streams: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "kebab-case")]
struct TypeFile {
    strategy: String,
    config: Option<toml::Value>,
    load_half_life_ms: Option<u64>,
    max_moves_per_round: Option<usize>,
    max_moves_fraction: Option<f64>,
    move_cooldown_ms: Option<u64>,
    min_round_interval_ms: Option<u64>,
    maintenance: Option<bool>,
    maintenance_window_ms: Option<u64>,
    maintenance_enter_lost: Option<usize>,
    maintenance_enter_share: Option<f64>,
    maintenance_exit_lost: Option<usize>,
    maintenance_exit_share: Option<f64>,
}

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The default data directory.
pub const DEFAULT_DATA: &str = "./shardalloc-data";

fn read_token(path: &Path, what: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let token = text.trim().to_owned();
    if token.is_empty() {
        bail!("the {what} file {} is empty", path.display());
    }
    Ok(token)
}

fn token(
    value: Option<String>,
    file: Option<PathBuf>,
    from_config: Option<PathBuf>,
    what: &str,
) -> anyhow::Result<Option<String>> {
    if let Some(token) = value {
        if token.trim().is_empty() {
            bail!("the {what} is empty");
        }
        return Ok(Some(token));
    }
    file.or(from_config).map(|path| read_token(&path, what)).transpose()
}

fn set<T>(target: &mut T, values: [Option<T>; 2]) {
    if let Some(value) = values.into_iter().flatten().next() {
        *target = value;
    }
}

/// Where the TLS certificate and key are, when TLS is on.
type TlsFiles = Option<(PathBuf, PathBuf)>;

/// How the node is reached, for its own web origins (known once bound).
struct Reached {
    advertise: Option<axum::http::Uri>,
    allowed_hosts: Vec<String>,
}

/// Resolves every setting: the listen address, the node's settings and TLS.
fn settings(args: ServeArgs) -> anyhow::Result<(SocketAddr, NodeSettings, TlsFiles, Reached)> {
    let file: FileConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("invalid settings file {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let file_etcd = EtcdFile {
        endpoints: file.etcd.clone(),
        prefix: file.etcd_prefix.clone(),
        user: file.etcd_user.clone(),
        password_file: file.etcd_password_file.clone(),
        ca_cert: file.etcd_ca_cert.clone(),
        cert: file.etcd_cert.clone(),
        key: file.etcd_key.clone(),
    };
    let listen = args.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid"));
    let data_dir = args.data.or(file.data).unwrap_or_else(|| PathBuf::from(DEFAULT_DATA));
    let tls = match (args.tls_cert.or(file.tls_cert), args.tls_key.or(file.tls_key)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => bail!("TLS needs both a certificate (--tls-cert) and its key (--tls-key)"),
    };
    let admin_token = token(args.admin_token, args.admin_token_file, file.admin_token_file, "admin token")?;
    let region_token = token(args.region_token, args.region_token_file, file.region_token_file, "region token")?;
    if !listen.ip().is_loopback() && admin_token.is_none() {
        bail!(
            "refusing to listen on {listen} without an admin token: anyone who reaches it could move shards. \
             Set --admin-token, --admin-token-file or SHARDALLOC_ADMIN_TOKEN, or listen on 127.0.0.1"
        );
    }
    if !listen.ip().is_loopback() && region_token.is_none() {
        tracing::warn!(%listen, "no region token: anyone who reaches this address can register a region");
        eprintln!("warning: listening on {listen} without a region token; anyone who reaches it can register a region");
    }
    let mut coordinator = Config::default();
    let c = file.coordinator;
    set(&mut coordinator.heartbeat_interval_ms, [args.heartbeat_interval_ms, c.heartbeat_interval_ms]);
    set(&mut coordinator.unreachable_after_ms, [args.unreachable_after_ms, c.unreachable_after_ms]);
    set(&mut coordinator.remove_after_ms, [args.remove_after_ms, c.remove_after_ms]);
    set(&mut coordinator.lease_ms, [args.lease_ms, c.lease_ms]);
    set(&mut coordinator.handoff_timeout_ms, [args.handoff_timeout_ms, c.handoff_timeout_ms]);
    set(&mut coordinator.handoff_ack_timeout_ms, [args.handoff_ack_timeout_ms, c.handoff_ack_timeout_ms]);
    set(&mut coordinator.rebalance_interval_ms, [args.rebalance_interval_ms, c.rebalance_interval_ms]);
    set(&mut coordinator.min_regions, [args.min_regions, c.min_regions]);
    set(&mut coordinator.max_rebalance_per_tick, [c.max_rebalance_per_tick, None]);
    set(&mut coordinator.max_handoffs_in_flight, [c.max_handoffs_in_flight, None]);
    set(&mut coordinator.drain_batch, [c.drain_batch, None]);
    set(&mut coordinator.tombstone_retention_ms, [c.tombstone_retention_ms, None]);
    set(&mut coordinator.max_regions, [c.max_regions, None]);
    set(&mut coordinator.max_shards, [c.max_shards, None]);
    set(&mut coordinator.max_placements, [c.max_placements, None]);
    set(&mut coordinator.load_half_life_ms, [c.load_half_life_ms, None]);
    set(&mut coordinator.load_save_interval_ms, [args.load_save_interval_ms, c.load_save_interval_ms]);
    coordinator.churn.max_moves_per_round = c.max_moves_per_round;
    coordinator.churn.max_moves_fraction = c.max_moves_fraction;
    set(&mut coordinator.churn.move_cooldown_ms, [c.move_cooldown_ms, None]);
    set(&mut coordinator.churn.min_round_interval_ms, [c.min_round_interval_ms, None]);
    let rule = &mut coordinator.maintenance;
    set(&mut rule.enabled, [c.maintenance, None]);
    set(&mut rule.window_ms, [c.maintenance_window_ms, None]);
    set(&mut rule.enter_lost, [c.maintenance_enter_lost, None]);
    set(&mut rule.enter_share, [c.maintenance_enter_share, None]);
    set(&mut rule.exit_lost, [c.maintenance_exit_lost, None]);
    set(&mut rule.exit_share, [c.maintenance_exit_share, None]);
    coordinator.validate().context("inconsistent coordinator settings")?;
    let limits = strategy_limits(&file.strategy_limits)?;
    let mut types = BTreeMap::new();
    let mut type_settings = BTreeMap::new();
    for (name, t) in file.types {
        let own = TypeSettings {
            load_half_life_ms: t.load_half_life_ms,
            max_moves_per_round: t.max_moves_per_round,
            max_moves_fraction: t.max_moves_fraction,
            move_cooldown_ms: t.move_cooldown_ms,
            min_round_interval_ms: t.min_round_interval_ms,
            maintenance: t.maintenance,
            maintenance_window_ms: t.maintenance_window_ms,
            maintenance_enter_lost: t.maintenance_enter_lost,
            maintenance_enter_share: t.maintenance_enter_share,
            maintenance_exit_lost: t.maintenance_exit_lost,
            maintenance_exit_share: t.maintenance_exit_share,
        };
        own.over(&coordinator).validate().with_context(|| format!("[types.{name}]: inconsistent settings"))?;
        if own != TypeSettings::default() {
            type_settings.insert(name.clone(), own);
        }
        let config = match t.config {
            None => String::new(),
            Some(value) => serde_json::to_string(&value).context("a type's config")?,
        };
        shardalloc_proto::protocol::check_type_name(&name).map_err(|rule| anyhow::anyhow!("[types.{name}]: {rule}"))?;
        let strategy = StrategySource::parse_cli(&t.strategy).with_context(|| format!("[types.{name}] strategy"))?;
        types.insert(name, TypeDeclaration { strategy, config });
    }
    for spec in args.types {
        let (name, strategy) = spec.split_once('=').unwrap_or((spec.as_str(), "least-shard"));
        if name.is_empty() || strategy.is_empty() {
            bail!("--type {spec:?}: expected NAME or NAME=STRATEGY");
        }
        shardalloc_proto::protocol::check_type_name(name).map_err(|rule| anyhow::anyhow!("--type {spec:?}: {rule}"))?;
        let strategy = StrategySource::parse_cli(strategy).with_context(|| format!("--type {spec:?}"))?;
        types.insert(name.to_owned(), TypeDeclaration { strategy, config: String::new() });
    }
    if types.len() > MAX_TYPES {
        bail!("{} entity types are declared (--type and [types.NAME]); a node serves at most {MAX_TYPES}", types.len());
    }
    let auto_create_types = args.auto_create_types || file.auto_create_types.unwrap_or(false);
    let mut connections = ConnectionLimits::default();
    let f = &file.connections;
    let ms = |value: Option<u64>| value.map(Duration::from_millis);
    set(&mut connections.header_read_timeout, [ms(args.header_read_timeout_ms), ms(f.header_read_timeout_ms)]);
    set(&mut connections.request_body_timeout, [ms(args.request_body_timeout_ms), ms(f.request_body_timeout_ms)]);
    set(&mut connections.idle_timeout, [ms(args.idle_timeout_ms), ms(f.idle_timeout_ms)]);
    set(
        &mut connections.session_handshake_timeout,
        [ms(args.session_handshake_timeout_ms), ms(f.session_handshake_timeout_ms)],
    );
    set(&mut connections.max_connections, [args.max_connections, f.max_connections]);
    set(&mut connections.forward_timeout, [ms(args.forward_timeout_ms), ms(f.forward_timeout_ms)]);
    set(&mut connections.max_event_streams, [args.max_event_streams, f.max_event_streams]);
    set(
        &mut connections.max_unauthenticated,
        [args.max_unauthenticated_connections, f.max_unauthenticated_connections],
    );
    if connections.header_read_timeout.is_zero()
        || connections.request_body_timeout.is_zero()
        || connections.idle_timeout.is_zero()
        || connections.session_handshake_timeout.is_zero()
        || connections.forward_timeout.is_zero()
    {
        bail!("connection timeouts must be greater than zero");
    }
    if connections.max_connections == 0 || connections.max_unauthenticated == 0 || connections.max_event_streams == 0 {
        bail!("connection limits must be at least 1");
    }
    let driver =
        DriverSettings { coordinator, limits, types, type_settings, auto_create_types, ..DriverSettings::default() };
    let flags_etcd = EtcdFile {
        endpoints: args.etcd,
        prefix: args.etcd_prefix,
        user: args.etcd_user,
        password_file: args.etcd_password_file,
        ca_cert: args.etcd_ca_cert,
        cert: args.etcd_cert,
        key: args.etcd_key,
    };
    let store = match etcd_store(flags_etcd, file_etcd)? {
        Some(StoreConfig::Etcd(config)) => StoreConfig::Etcd(EtcdConfig { migrate: !args.no_migrate, ..config }),
        Some(other) => other,
        None => StoreConfig::Embedded { dir: data_dir.clone(), migrate: !args.no_migrate },
    };
    let secret = match args.cluster_secret_file.as_ref().or(file.cluster_secret_file.as_ref()) {
        Some(path) => {
            Some(ClusterSecret::from_file(path).map_err(|error| anyhow::anyhow!("--cluster-secret-file: {error}"))?)
        }
        None => None,
    };
    let leader_lease_s = args.leader_lease_s.or(file.leader_lease_s).unwrap_or(DEFAULT_LEADER_LEASE.as_secs());
    if !(1..=60).contains(&leader_lease_s) {
        bail!("--leader-lease-s {leader_lease_s}: expected 1 to 60 seconds");
    }
    let node_name = args.node_name.or(file.node_name);
    if let Some(name) = &node_name
        && (name.is_empty() || name.len() > 128 || name.chars().any(char::is_control))
    {
        bail!("--node-name {name:?}: expected 1 to 128 printable characters");
    }
    let clustered = matches!(store, StoreConfig::Etcd(_));
    let settings = NodeSettings {
        cluster: ClusterSettings {
            identity: NodeIdentity { name: node_name.unwrap_or_default(), url: String::new() },
            leader_lease: Duration::from_secs(leader_lease_s),
            secret,
        },
        cache_dir: Some(data_dir.join("cache")),
        store,
        driver,
        security: Security { admin_token, region_token, ..Security::default() },
        // Every type the node may serve, with what its slot holds at once.
        max_instances: shardalloc::engine::limits::instances_for_types(MAX_TYPES),
        connections,
        uploads: super::uploads::settings(args.uploads, file.uploads)?,
    };
    let advertise = match args.advertise.or(file.advertise) {
        None => None,
        Some(url) => {
            let uri: axum::http::Uri = url.parse().with_context(|| format!("--advertise {url:?} is not a URL"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
                bail!("--advertise {url:?}: expected http(s)://HOST[:PORT]");
            }
            Some(uri)
        }
    };
    if clustered && advertise.is_none() {
        bail!(
            "--etcd needs --advertise URL: the address other nodes and clients reach this node at \
             (followers forward to the leader's, regions are redirected to it)"
        );
    }
    let mut allowed_hosts = args.allowed_hosts;
    allowed_hosts.extend(file.allowed_hosts);
    if let Some(bad) = allowed_hosts.iter().find(|h| h.is_empty() || h.contains(['/', ':', ' '])) {
        bail!("--allowed-host {bad:?}: expected a host name (no scheme, port or path)");
    }
    Ok((listen, settings, tls, Reached { advertise, allowed_hosts }))
}

/// etcd settings, from the flags or the TOML file.
struct EtcdFile {
    endpoints: Vec<String>,
    prefix: Option<String>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    ca_cert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// The etcd store's settings, when etcd URLs are given (flags first).
fn etcd_store(flags: EtcdFile, file: EtcdFile) -> anyhow::Result<Option<StoreConfig>> {
    let EtcdFile { endpoints, prefix, user, password_file, ca_cert, cert, key } = flags;
    let endpoints = if endpoints.is_empty() { file.endpoints } else { endpoints };
    let endpoints: Vec<String> = endpoints.iter().map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect();
    if endpoints.is_empty() {
        return Ok(None);
    }
    for url in &endpoints {
        let uri: axum::http::Uri = url.parse().with_context(|| format!("--etcd {url:?} is not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() || uri.port().is_none() {
            bail!("--etcd {url:?}: expected http(s)://HOST:PORT");
        }
    }
    let mut config = EtcdConfig::new(endpoints);
    if let Some(prefix) = prefix.or(file.prefix) {
        if !prefix.starts_with('/') || !prefix.ends_with('/') || prefix.len() < 2 {
            bail!("--etcd-prefix {prefix:?}: expected a key prefix that starts and ends with `/`, like /shardalloc/");
        }
        config.prefix = prefix;
    }
    if let Some(user) = user.or(file.user) {
        let path = password_file.or(file.password_file).context("--etcd-user needs --etcd-password-file")?;
        config.user = Some((user, read_token(&path, "etcd password")?));
    }
    config.ca_cert = ca_cert.or(file.ca_cert);
    config.client_cert = match (cert.or(file.cert), key.or(file.key)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => bail!("an etcd client certificate needs both --etcd-cert and --etcd-key"),
    };
    Ok(Some(StoreConfig::Etcd(config)))
}

/// Runs the node until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (listen, mut settings, tls, reached) = settings(args)?;
    let data = match &settings.store {
        StoreConfig::Embedded { dir, .. } => dir.display().to_string(),
        StoreConfig::Memory => "(memory)".to_owned(),
        StoreConfig::Etcd(etcd) => format!("etcd {} under {}", etcd.endpoints.join(","), etcd.prefix),
    };
    let acceptor = tls.map(|(cert, key)| tls::acceptor(&cert, &key)).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
    runtime.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        let address = listener.local_addr()?;
        settings.driver.origin = format!("node@{address}");
        settings.security.origins = OwnOrigins::new(address, reached.advertise.as_ref(), &reached.allowed_hosts);
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let identity = &mut settings.cluster.identity;
        if identity.name.is_empty() {
            identity.name = address.to_string();
        }
        identity.url = match &reached.advertise {
            Some(url) => url.to_string().trim_end_matches('/').to_owned(),
            None => format!("{scheme}://{address}"),
        };
        let node = Node::start(settings).with_context(|| format!("cannot start the node on {data}"))?;
        println!("shardalloc listening on {scheme}://{address} (data in {data})");
        tracing::info!(%address, %data, tls = acceptor.is_some(), "shardalloc node started");
        match acceptor {
            Some(acceptor) => node.serve(tls::TlsListener::new(listener, acceptor)?, super::interrupted()).await?,
            None => node.serve(shardalloc::server::no_delay(listener), super::interrupted()).await?,
        }
        println!("shardalloc stopped");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_strategy_limit_is_refused_naming_its_key() {
        for key in ["deadline-ms", "memory-mib", "view-load-ms"] {
            let file: LimitsFile = toml::from_str(&format!("{key} = 0")).unwrap();
            let error = strategy_limits(&file).unwrap_err().to_string();
            assert!(error.starts_with(&format!("[strategy-limits] {key} = 0 would make every")), "{error}");
        }
        let file: LimitsFile = toml::from_str("deadline-ms = 20\nview-load-ms = 500").unwrap();
        let limits = strategy_limits(&file).unwrap();
        assert_eq!((limits.deadline, limits.view_load), (Duration::from_millis(20), Duration::from_millis(500)));
    }
}
