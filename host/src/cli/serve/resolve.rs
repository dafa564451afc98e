//! From the layered [`Settings`] (and the few flags that have no key in the
//! file) to what the node runs with: one function per part (the
//! coordinator, strategy limits, types, connections, the store, the
//! cluster, the web origins), each checking its values and naming the key
//! of a value that cannot work.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use shardalloc::coordinator::{Config, TypeSettings};
use shardalloc::engine::limits::Limits;
use shardalloc::server::conn::ConnectionLimits;
use shardalloc::server::driver::catalog::MAX_TYPES;
use shardalloc::server::driver::{DriverSettings, TypeDeclaration};
use shardalloc::server::leadership::NodeIdentity;
use shardalloc::server::leadership::claim::ClusterSecret;
use shardalloc::server::{ClusterSettings, DEFAULT_LEADER_LEASE, NodeSettings, Security};
use shardalloc::store::{EtcdConfig, StoreConfig};
use shardalloc::strategy::StrategySource;

use super::ServeArgs;
use super::settings::{ConnectionsSection, CoordinatorSection, LimitsSection, Settings, TypeSection};

/// The default listen address.
const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The default data directory.
const DEFAULT_DATA: &str = "./shardalloc-data";

/// Where the TLS certificate and key are, when TLS is on.
pub(super) type TlsFiles = Option<(PathBuf, PathBuf)>;

/// How the node is reached, for its own web origins (known once bound).
pub(super) struct Reached {
    pub advertise: Option<axum::http::Uri>,
    pub allowed_hosts: Vec<String>,
}

/// Resolves every setting: the listen address, the node's settings, TLS
/// and how the node is reached.
pub(super) fn resolve(args: ServeArgs) -> anyhow::Result<(SocketAddr, NodeSettings, TlsFiles, Reached)> {
    let settings = Settings::from_file(args.config.as_deref())?.under(args.layer())?;
    let listen = settings.listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid"));
    let data_dir = settings.data.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DATA));
    let tls = match (settings.tls_cert.clone(), settings.tls_key.clone()) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => bail!("TLS needs both a certificate (--tls-cert) and its key (--tls-key)"),
    };
    let security = security(&args, &settings, listen)?;
    let coordinator = coordinator(&settings.coordinator)?;
    let (types, type_settings) = types(&settings.types, &args.types, &coordinator)?;
    let auto_create_types = settings.auto_create_types.unwrap_or(false);
    let limits = strategy_limits(&settings.strategy_limits)?;
    let driver =
        DriverSettings { coordinator, limits, types, type_settings, auto_create_types, ..DriverSettings::default() };
    let store = match etcd_store(&settings)? {
        Some(StoreConfig::Etcd(config)) => StoreConfig::Etcd(EtcdConfig { migrate: !args.no_migrate, ..config }),
        Some(other) => other,
        None => StoreConfig::Embedded { dir: data_dir.clone(), migrate: !args.no_migrate },
    };
    let clustered = matches!(store, StoreConfig::Etcd(_));
    let node = NodeSettings {
        cluster: cluster(&settings)?,
        cache_dir: Some(data_dir.join("cache")),
        store,
        driver,
        security,
        // Every type the node may serve, with what its slot holds at once.
        max_instances: shardalloc::engine::limits::instances_for_types(MAX_TYPES),
        connections: connections(&settings.connections)?,
        uploads: crate::cli::uploads::settings(&settings.uploads)?,
    };
    let reached = reached(&settings, args.allowed_hosts, clustered)?;
    Ok((listen, node, tls, reached))
}

/// The tokens: a flag's value first, then the file a flag names, then the
/// file the settings file names. Refuses to listen beyond loopback without
/// an admin token.
fn security(args: &ServeArgs, settings: &Settings, listen: SocketAddr) -> anyhow::Result<Security> {
    let admin_token = token(args.admin_token.as_deref(), settings.admin_token_file.as_deref(), "admin token")?;
    let region_token = token(args.region_token.as_deref(), settings.region_token_file.as_deref(), "region token")?;
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
    Ok(Security { admin_token, region_token, ..Security::default() })
}

fn read_token(path: &Path, what: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let token = text.trim().to_owned();
    if token.is_empty() {
        bail!("the {what} file {} is empty", path.display());
    }
    Ok(token)
}

fn token(value: Option<&str>, file: Option<&Path>, what: &str) -> anyhow::Result<Option<String>> {
    if let Some(token) = value {
        if token.trim().is_empty() {
            bail!("the {what} is empty");
        }
        return Ok(Some(token.to_owned()));
    }
    file.map(|path| read_token(path, what)).transpose()
}

/// Sets `target` when `value` is given.
fn set<T>(target: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *target = value;
    }
}

/// `[coordinator]` over the defaults, checked as a whole.
fn coordinator(c: &CoordinatorSection) -> anyhow::Result<Config> {
    let mut config = Config::default();
    set(&mut config.heartbeat_interval_ms, c.heartbeat_interval_ms);
    set(&mut config.unreachable_after_ms, c.unreachable_after_ms);
    set(&mut config.remove_after_ms, c.remove_after_ms);
    set(&mut config.lease_ms, c.lease_ms);
    set(&mut config.handoff_timeout_ms, c.handoff_timeout_ms);
    set(&mut config.handoff_ack_timeout_ms, c.handoff_ack_timeout_ms);
    set(&mut config.rebalance_interval_ms, c.rebalance_interval_ms);
    set(&mut config.min_regions, c.min_regions);
    set(&mut config.max_rebalance_per_tick, c.max_rebalance_per_tick);
    set(&mut config.max_handoffs_in_flight, c.max_handoffs_in_flight);
    set(&mut config.drain_batch, c.drain_batch);
    set(&mut config.tombstone_retention_ms, c.tombstone_retention_ms);
    set(&mut config.max_regions, c.max_regions);
    set(&mut config.max_shards, c.max_shards);
    set(&mut config.max_placements, c.max_placements);
    set(&mut config.load_half_life_ms, c.load_half_life_ms);
    set(&mut config.load_save_interval_ms, c.load_save_interval_ms);
    config.churn.max_moves_per_round = c.max_moves_per_round;
    config.churn.max_moves_fraction = c.max_moves_fraction;
    set(&mut config.churn.move_cooldown_ms, c.move_cooldown_ms);
    set(&mut config.churn.min_round_interval_ms, c.min_round_interval_ms);
    let rule = &mut config.maintenance;
    set(&mut rule.enabled, c.maintenance);
    set(&mut rule.window_ms, c.maintenance_window_ms);
    set(&mut rule.enter_lost, c.maintenance_enter_lost);
    set(&mut rule.enter_share, c.maintenance_enter_share);
    set(&mut rule.exit_lost, c.maintenance_exit_lost);
    set(&mut rule.exit_share, c.maintenance_exit_share);
    config.validate().context("inconsistent coordinator settings")?;
    Ok(config)
}

/// `[strategy-limits]` over the defaults; a zero (every call would fail)
/// is refused naming its key.
fn strategy_limits(file: &LimitsSection) -> anyhow::Result<Limits> {
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

/// The declared types: `[types.NAME]` (with their own settings over
/// `[coordinator]`'s), then each `--type NAME[=STRATEGY]`, which replaces a
/// declaration of the same name.
fn types(
    sections: &BTreeMap<String, TypeSection>,
    flags: &[String],
    coordinator: &Config,
) -> anyhow::Result<(BTreeMap<String, TypeDeclaration>, BTreeMap<String, TypeSettings>)> {
    let mut types = BTreeMap::new();
    let mut type_settings = BTreeMap::new();
    for (name, t) in sections {
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
        own.over(coordinator).validate().with_context(|| format!("[types.{name}]: inconsistent settings"))?;
        if own != TypeSettings::default() {
            type_settings.insert(name.clone(), own);
        }
        let config = match &t.config {
            None => String::new(),
            Some(value) => serde_json::to_string(value).context("a type's config")?,
        };
        shardalloc_proto::protocol::check_type_name(name).map_err(|rule| anyhow::anyhow!("[types.{name}]: {rule}"))?;
        let strategy = StrategySource::parse_cli(&t.strategy).with_context(|| format!("[types.{name}] strategy"))?;
        types.insert(name.clone(), TypeDeclaration { strategy, config });
    }
    for spec in flags {
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
    Ok((types, type_settings))
}

/// `[connections]` over the defaults: timeouts above zero, limits at least 1.
fn connections(c: &ConnectionsSection) -> anyhow::Result<ConnectionLimits> {
    let mut limits = ConnectionLimits::default();
    let ms = |value: Option<u64>| value.map(Duration::from_millis);
    set(&mut limits.header_read_timeout, ms(c.header_read_timeout_ms));
    set(&mut limits.request_body_timeout, ms(c.request_body_timeout_ms));
    set(&mut limits.idle_timeout, ms(c.idle_timeout_ms));
    set(&mut limits.session_handshake_timeout, ms(c.session_handshake_timeout_ms));
    set(&mut limits.max_connections, c.max_connections);
    set(&mut limits.forward_timeout, ms(c.forward_timeout_ms));
    set(&mut limits.max_event_streams, c.max_event_streams);
    set(&mut limits.max_unauthenticated, c.max_unauthenticated_connections);
    let timeouts = [
        limits.header_read_timeout,
        limits.request_body_timeout,
        limits.idle_timeout,
        limits.session_handshake_timeout,
        limits.forward_timeout,
    ];
    if timeouts.iter().any(Duration::is_zero) {
        bail!("connection timeouts must be greater than zero");
    }
    if limits.max_connections == 0 || limits.max_unauthenticated == 0 || limits.max_event_streams == 0 {
        bail!("connection limits must be at least 1");
    }
    Ok(limits)
}

/// The etcd store's settings, when etcd URLs are given.
fn etcd_store(settings: &Settings) -> anyhow::Result<Option<StoreConfig>> {
    let endpoints: Vec<String> = settings.etcd.iter().map(|e| e.trim().to_owned()).filter(|e| !e.is_empty()).collect();
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
    if let Some(prefix) = settings.etcd_prefix.clone() {
        if !prefix.starts_with('/') || !prefix.ends_with('/') || prefix.len() < 2 {
            bail!("--etcd-prefix {prefix:?}: expected a key prefix that starts and ends with `/`, like /shardalloc/");
        }
        config.prefix = prefix;
    }
    if let Some(user) = settings.etcd_user.clone() {
        let path = settings.etcd_password_file.as_deref().context("--etcd-user needs --etcd-password-file")?;
        config.user = Some((user, read_token(path, "etcd password")?));
    }
    config.ca_cert = settings.etcd_ca_cert.clone();
    config.client_cert = match (settings.etcd_cert.clone(), settings.etcd_key.clone()) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => bail!("an etcd client certificate needs both --etcd-cert and --etcd-key"),
    };
    Ok(Some(StoreConfig::Etcd(config)))
}

/// This node among others: its name, the leader lease, the shared secret.
fn cluster(settings: &Settings) -> anyhow::Result<ClusterSettings> {
    let secret = match settings.cluster_secret_file.as_ref() {
        Some(path) => {
            Some(ClusterSecret::from_file(path).map_err(|error| anyhow::anyhow!("--cluster-secret-file: {error}"))?)
        }
        None => None,
    };
    let leader_lease_s = settings.leader_lease_s.unwrap_or(DEFAULT_LEADER_LEASE.as_secs());
    if !(1..=60).contains(&leader_lease_s) {
        bail!("--leader-lease-s {leader_lease_s}: expected 1 to 60 seconds");
    }
    let name = settings.node_name.clone().unwrap_or_default();
    if settings.node_name.is_some() && (name.is_empty() || name.len() > 128 || name.chars().any(char::is_control)) {
        bail!("--node-name {name:?}: expected 1 to 128 printable characters");
    }
    Ok(ClusterSettings {
        identity: NodeIdentity { name, url: String::new() },
        leader_lease: Duration::from_secs(leader_lease_s),
        secret,
    })
}

/// The node's own web origins: `--advertise` (needed with etcd) and the
/// other host names, from the flags and the file together.
fn reached(settings: &Settings, flags: Vec<String>, clustered: bool) -> anyhow::Result<Reached> {
    let advertise = match settings.advertise.clone() {
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
    let mut allowed_hosts = flags;
    allowed_hosts.extend(settings.allowed_hosts.iter().cloned());
    if let Some(bad) = allowed_hosts.iter().find(|h| h.is_empty() || h.contains(['/', ':', ' '])) {
        bail!("--allowed-host {bad:?}: expected a host name (no scheme, port or path)");
    }
    Ok(Reached { advertise, allowed_hosts })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn a_flag_wins_over_the_file_and_the_file_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        let text = "[coordinator]\nlease-ms = 9000\nmin-regions = 2\n\
                    [connections]\nmax-connections = 50\n[uploads]\nmax-components = 3\n\
                    [types.cart]\nstrategy = \"hash\"\nconfig = { spread = 2 }\n";
        std::fs::write(&file, text).unwrap();
        let data = dir.path().join("data");
        let args = Cli::try_parse_from([
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--lease-ms",
            "4000",
            "--max-components",
            "9",
            "--type",
            "session",
        ])
        .unwrap()
        .serve;
        let (listen, node, tls, _) = resolve(args).unwrap();
        assert_eq!(listen, DEFAULT_LISTEN.parse().unwrap(), "the default");
        assert!(tls.is_none());
        let coordinator = &node.driver.coordinator;
        assert_eq!((coordinator.lease_ms, coordinator.min_regions), (4000, 2), "the flag's, then the file's");
        assert_eq!(node.connections.max_connections, 50, "the file's");
        assert_eq!(node.uploads.max_components, 9, "the flag's over the file's");
        assert_eq!(node.driver.types["cart"].config, r#"{"spread":2}"#);
        assert_eq!(node.driver.types.keys().collect::<Vec<_>>(), ["cart", "session"], "the file's and the flag's");
        assert!(matches!(node.store, StoreConfig::Embedded { ref dir, .. } if *dir == data));
    }

    #[test]
    fn a_zero_strategy_limit_is_refused_naming_its_key() {
        for key in ["deadline-ms", "memory-mib", "view-load-ms"] {
            let file: LimitsSection = toml::from_str(&format!("{key} = 0")).unwrap();
            let error = strategy_limits(&file).unwrap_err().to_string();
            assert!(error.starts_with(&format!("[strategy-limits] {key} = 0 would make every")), "{error}");
        }
        let file: LimitsSection = toml::from_str("deadline-ms = 20\nview-load-ms = 500").unwrap();
        let limits = strategy_limits(&file).unwrap();
        assert_eq!((limits.deadline, limits.view_load), (Duration::from_millis(20), Duration::from_millis(500)));
    }
}
