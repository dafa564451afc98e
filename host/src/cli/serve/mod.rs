//! `shardalloc serve`: runs the node.
//!
//! Settings come from flags, then `SHARDALLOC_*` environment variables
//! (clap reads both, a flag first), then the TOML file given with
//! `--config`, then the defaults: `settings.rs` holds them as one type and
//! lays the flags' layer over the file's, `resolve.rs` turns the result
//! into the node's settings, checking each.

mod resolve;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use shardalloc::server::guard::OwnOrigins;
use shardalloc::server::{Node, tls};
use shardalloc::store::StoreConfig;

use self::settings::{ConnectionsSection, CoordinatorSection, Settings};

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

impl ServeArgs {
    /// The flags (and their environment variables) as a layer of the
    /// settings: what they set, in the file's shape. The tokens' values,
    /// `--type`, `--allowed-host` and `--no-migrate` have no key in the
    /// file and are read apart (`resolve.rs`).
    fn layer(&self) -> Settings {
        let coordinator = CoordinatorSection {
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            unreachable_after_ms: self.unreachable_after_ms,
            remove_after_ms: self.remove_after_ms,
            lease_ms: self.lease_ms,
            handoff_timeout_ms: self.handoff_timeout_ms,
            handoff_ack_timeout_ms: self.handoff_ack_timeout_ms,
            rebalance_interval_ms: self.rebalance_interval_ms,
            min_regions: self.min_regions,
            load_save_interval_ms: self.load_save_interval_ms,
            ..CoordinatorSection::default()
        };
        let connections = ConnectionsSection {
            header_read_timeout_ms: self.header_read_timeout_ms,
            request_body_timeout_ms: self.request_body_timeout_ms,
            idle_timeout_ms: self.idle_timeout_ms,
            session_handshake_timeout_ms: self.session_handshake_timeout_ms,
            max_connections: self.max_connections,
            max_unauthenticated_connections: self.max_unauthenticated_connections,
            forward_timeout_ms: self.forward_timeout_ms,
            max_event_streams: self.max_event_streams,
        };
        Settings {
            listen: self.listen,
            data: self.data.clone(),
            admin_token_file: self.admin_token_file.clone(),
            region_token_file: self.region_token_file.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            auto_create_types: self.auto_create_types.then_some(true),
            advertise: self.advertise.clone(),
            node_name: self.node_name.clone(),
            leader_lease_s: self.leader_lease_s,
            cluster_secret_file: self.cluster_secret_file.clone(),
            etcd: self.etcd.clone(),
            etcd_prefix: self.etcd_prefix.clone(),
            etcd_user: self.etcd_user.clone(),
            etcd_password_file: self.etcd_password_file.clone(),
            etcd_ca_cert: self.etcd_ca_cert.clone(),
            etcd_cert: self.etcd_cert.clone(),
            etcd_key: self.etcd_key.clone(),
            coordinator,
            connections,
            uploads: self.uploads.layer(),
            ..Settings::default()
        }
    }
}

/// Runs the node until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (listen, mut settings, tls, reached) = resolve::resolve(args)?;
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
