//! # The region client
//!
//! A *region* is one process of the application, serving one entity type:
//! it registers with the node, keeps a lease alive with heartbeats, runs the
//! shards whose home the node says it is, and routes every message to its
//! shard's home, buffering while a home is unknown or a hand-off is in
//! progress.
//!
//! ## Layout
//!
//! - [`core`]: [`RegionCore`], the deterministic sans-I/O state machine
//!   (lease, sequence numbers, cached homes, per-shard buffers, running
//!   shards). Events in, [`Action`]s out.
//! - `driver` (private): the task that owns the core's clock and performs
//!   its actions; one worker task per running shard calls the
//!   [`Application`] in order (start, deliveries, stop).
//! - `session` (private): one WebSocket session with the node
//!   (`Hello`/`Welcome`, then postcard frames), reconnected with backoff.
//! - [`Application`]: what the region asks of the application.
//! - [`Transport`], [`Inbox`], [`InMemoryTransport`]: carrying messages
//!   between regions; [`PeerTransport`]: the built-in one between processes.
//! - [`Parcel`], [`Replier`], [`AskError`]: request and reply
//!   ([`RegionHandle::ask`]).
//! - [`RegionConfig`], [`Region::start`], [`RegionHandle`]: the API.
//!
//! ```text
//!  RegionHandle ─send/ask/home_of┐                       ┌──▶ Application (per-shard worker)
//!  Inbox (other regions) ───────┼──▶ RegionCore ──actions┼──▶ Transport (other regions)
//!  node session (WebSocket) ────┤     (locked)           ├──▶ node session
//!  ticks (50 ms) ───────────────┘                       └──▶ updates (broadcast)
//! ```
//!
//! ## Guarantees
//!
//! - Messages from one sender to one shard are delivered in send order,
//!   including across hand-offs: messages buffered during a hand-off are
//!   flushed, in order, before later ones, and a region delivers every
//!   message that reached its inbox before it processes a `HandOff`.
//! - A region whose lease runs out stops its shards (fencing) and starts
//!   them again only after the lease is renewed.
//! - A message another region carried here for a shard that no longer runs
//!   here is routed again like a local send (if this region's buffers are
//!   full, it is dropped and logged).
//! - Buffers are bounded: [`RegionConfig::shard_buffer_limit`] per shard (also
//!   bounding messages queued for the application's `deliver`) and
//!   [`RegionConfig::total_buffer_limit`] over all shards;
//!   [`RegionHandle::send`] returns [`SendError`] rather than growing them.

pub mod core;
pub mod load;

mod application;
mod ask;
mod driver;
mod error;
mod peer;
mod session;
mod transport;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{broadcast, mpsc, oneshot};

pub use self::core::{Action, CoreConfig, HomeLookup, Millis, RegionCore};
pub use application::Application;
pub use ask::{AskError, Parcel, Replier};
pub use error::{DeliveryError, RegionError, SendError};
pub use peer::{PeerConfig, PeerTransport};
pub use transport::{InMemoryTransport, Inbox, Transport, TransportError, Undelivered};

use crate::protocol::{CONNECT_PATH, Register};
use driver::{Control, Shared};

/// What a region publishes on [`RegionHandle::updates`].
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// The node accepted the registration (first, or after a reconnect).
    Registered {
        /// The incarnation registered.
        incarnation: u64,
    },
    /// The node refused the session or the registration; the region retries
    /// with backoff.
    Refused {
        /// The node's reason.
        reason: String,
    },
    /// The session with the node is down; the region reconnects with backoff.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// The lease ran out: every shard was told to stop, cached homes are forgotten.
    Fenced,
    /// A renewal lifted the fence; shards start again as their homes are learnt.
    LeaseRegained,
    /// The region learnt where a shard lives (it was unknown, or moved).
    HomeChanged {
        /// The shard.
        shard: String,
        /// Its home's address.
        home: String,
    },
    /// The node refused to give a shard a home; its buffered messages were dropped.
    ShardRefused {
        /// The shard.
        shard: String,
        /// The node's reason.
        reason: String,
        /// How many buffered messages were dropped.
        dropped: usize,
    },
    /// An operator changed a shard's placement (`None`: removed).
    PlacementChanged {
        /// The shard.
        shard: String,
        /// Its target region.
        target: Option<String>,
    },
    /// A shard was started here.
    ShardStarted {
        /// The shard.
        shard: String,
        /// Its epoch here: greater than any earlier home's of the shard, for
        /// fencing writes to the application's storage.
        epoch: u64,
    },
    /// A shard stopped here (or its stop was abandoned at the deadline).
    ShardStopped {
        /// The shard.
        shard: String,
    },
    /// The node confirmed the leave; the region stops.
    Left,
    /// Another region of the type was removed (it left, or was silent past
    /// the node's removal timeout): every cached home on it was dropped,
    /// and its shards' homes are asked again when next needed. A transport
    /// may close its connection to that address.
    RegionRemoved {
        /// The removed region's address.
        address: String,
    },
}

/// The default bound of [`RegionHandle::drain_and_leave`]: 20 s.
pub const DEFAULT_DRAIN_AND_LEAVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Most shards a load report names by default ([`RegionConfig::load_report_shards`]).
pub const DEFAULT_LOAD_REPORT_SHARDS: usize = 256;

/// How a region connects and behaves. [`RegionConfig::new`] fills in the defaults.
#[derive(Clone)]
pub struct RegionConfig {
    /// The node: `http://host:port` or `ws://host:port`, or with TLS
    /// `https://host:port` or `wss://host:port` (the connect path is added
    /// unless the URL already ends with it).
    pub node: String,
    /// The entity type this region serves.
    pub entity_type: String,
    /// This region's address, unique in the cluster; other regions reach it by it.
    pub address: String,
    /// Greater for every restart; default: milliseconds since the Unix epoch at [`RegionConfig::new`].
    pub incarnation: u64,
    /// Cluster roles.
    pub roles: Vec<String>,
    /// Application version.
    pub app_version: String,
    /// Labels (zone, dc…), handed to the strategy.
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    pub proxy_only: bool,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
    /// A PEM file of CA certificates trusted (besides the system's roots)
    /// for a `wss://` node: a node serving a self-signed or private-CA
    /// certificate.
    pub ca_cert: Option<PathBuf>,
    /// Most messages waiting per shard (for a home, or for the application). Default 1,000.
    pub shard_buffer_limit: usize,
    /// Most messages waiting for a home over all shards. Default 100,000.
    pub total_buffer_limit: usize,
    /// Capacity of the inbox other regions send to. Default 10,000.
    pub inbox_capacity: usize,
    /// How long the application may take to stop a shard. Default 10 s.
    pub stop_deadline: Duration,
    /// How long [`RegionHandle::leave`] waits for the node's `LeaveDone`. Default 60 s.
    pub leave_timeout: Duration,
    /// The bound of [`RegionHandle::drain_and_leave`]. Default
    /// [`DEFAULT_DRAIN_AND_LEAVE_TIMEOUT`] (20 s): with the default
    /// [`RegionConfig::stop_deadline`] (10 s) for the shards still running
    /// at the bound, it fits Kubernetes' default grace period of 30 s.
    pub drain_and_leave_timeout: Duration,
    /// First reconnect delay (doubling, with jitter). Default 100 ms.
    pub reconnect_min: Duration,
    /// Longest reconnect delay. Default 1 s (a failover is found fast).
    pub reconnect_max: Duration,
    /// How long to wait for a home answer before asking again. Default 2 s.
    pub home_retry: Duration,
    /// How long the node may stay silent in the handshake and registration
    /// before the session is given up. Default 10 s. Once registered, three
    /// missed heartbeat acknowledgements (at least 1 s) end the session.
    pub response_timeout: Duration,
    /// How long connecting to one node may take: TCP, TLS, the WebSocket
    /// upgrade and its `Welcome` (or redirect). Default 2 s: a paused or
    /// unreachable node is passed over quickly for the next one.
    pub connect_timeout: Duration,
    /// Most shards a load report names one by one (the others are summed);
    /// 1 to [`MAX_LOAD_SHARDS`](crate::protocol::MAX_LOAD_SHARDS). Default 256.
    pub load_report_shards: usize,
    /// How many forwards of one shard may fail in a row before its waiting
    /// messages are given up to [`Application::undelivered`]. Default 10.
    /// A round takes about [`RegionConfig::home_retry`]: keep
    /// `forward_attempts × home_retry` above the node's removal time (15 s
    /// by default; the defaults give 20 s), or a crashed home's messages
    /// are given up before the node re-homes its shards.
    pub forward_attempts: u32,
    /// How long a shard's forwards may keep failing before its waiting
    /// messages are given up the same way. Default 30 s (twice the node's
    /// default removal time, so a dead home is replaced well before).
    pub forward_deadline: Duration,
    /// The attributes the application gives a shard (`tenant=acme`), sent
    /// with each request for its home (protocol version 5): the node keeps
    /// them when the shard has none yet, and strategies read them. Called
    /// on the session's task, once per request: keep it quick. Default
    /// none.
    pub shard_attributes: Option<ShardAttributesOf>,
    /// The capacity this region declares when it registers (named
    /// quantities: `load` in the units of its shard loads, `memory-mb`…;
    /// protocol version 5), handed to strategies. Default none.
    pub capacity: crate::capacity::RegionCapacity,
}

/// The application's attributes of a shard, by id ([`RegionConfig::shard_attributes`]).
pub type ShardAttributesOf = std::sync::Arc<dyn Fn(&str) -> crate::attributes::ShardAttributes + Send + Sync>;

impl fmt::Debug for RegionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionConfig")
            .field("node", &self.node)
            .field("entity_type", &self.entity_type)
            .field("address", &self.address)
            .field("incarnation", &self.incarnation)
            .field("roles", &self.roles)
            .field("app_version", &self.app_version)
            .field("labels", &self.labels)
            .field("proxy_only", &self.proxy_only)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca_cert", &self.ca_cert)
            .field("shard_buffer_limit", &self.shard_buffer_limit)
            .field("total_buffer_limit", &self.total_buffer_limit)
            .field("inbox_capacity", &self.inbox_capacity)
            .field("stop_deadline", &self.stop_deadline)
            .field("leave_timeout", &self.leave_timeout)
            .field("drain_and_leave_timeout", &self.drain_and_leave_timeout)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("home_retry", &self.home_retry)
            .field("response_timeout", &self.response_timeout)
            .field("forward_attempts", &self.forward_attempts)
            .field("forward_deadline", &self.forward_deadline)
            .field("connect_timeout", &self.connect_timeout)
            .field("load_report_shards", &self.load_report_shards)
            .field("shard_attributes", &self.shard_attributes.as_ref().map(|_| "<function>"))
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl RegionConfig {
    /// A region of `entity_type` at `address`, connecting to `node`, with
    /// the defaults.
    pub fn new(node: impl Into<String>, entity_type: impl Into<String>, address: impl Into<String>) -> Self {
        let incarnation = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_millis() as u64);
        RegionConfig {
            node: node.into(),
            entity_type: entity_type.into(),
            address: address.into(),
            incarnation,
            roles: Vec::new(),
            app_version: String::new(),
            labels: BTreeMap::new(),
            proxy_only: false,
            token: None,
            ca_cert: None,
            shard_buffer_limit: self::core::DEFAULT_SHARD_BUFFER_LIMIT,
            total_buffer_limit: self::core::DEFAULT_TOTAL_BUFFER_LIMIT,
            inbox_capacity: 10_000,
            stop_deadline: Duration::from_secs(10),
            leave_timeout: Duration::from_secs(60),
            drain_and_leave_timeout: DEFAULT_DRAIN_AND_LEAVE_TIMEOUT,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(1),
            home_retry: Duration::from_secs(2),
            response_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            load_report_shards: DEFAULT_LOAD_REPORT_SHARDS,
            forward_attempts: self::core::DEFAULT_FORWARD_ATTEMPTS,
            forward_deadline: Duration::from_millis(self::core::DEFAULT_FORWARD_DEADLINE_MS),
            shard_attributes: None,
            capacity: crate::capacity::RegionCapacity::default(),
        }
    }

    /// The WebSocket URL of the (first) node's region endpoint, from [`RegionConfig::node`].
    pub fn connect_url(&self) -> Result<String, RegionError> {
        Ok(self.connect_urls()?.remove(0))
    }

    /// The WebSocket URLs of every node in [`RegionConfig::node`] (a
    /// comma-separated list: the nodes sharing one etcd).
    pub fn connect_urls(&self) -> Result<Vec<String>, RegionError> {
        let urls: Vec<String> = self
            .node
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(connect_url_of)
            .collect::<Result<_, _>>()?;
        if urls.is_empty() {
            return Err(RegionError::Config("no node URL given".to_owned()));
        }
        Ok(urls)
    }

    fn validate(&self) -> Result<(), RegionError> {
        let problem = if self.address.is_empty() {
            Some("the address is empty".to_owned())
        } else if self.entity_type.is_empty() {
            Some("the entity type is empty".to_owned())
        } else if let Err(rule) = crate::protocol::check_address(&self.address) {
            Some(rule)
        } else if let Err(rule) = crate::protocol::check_type_name(&self.entity_type) {
            Some(rule)
        } else if self.shard_buffer_limit == 0 || self.total_buffer_limit == 0 || self.inbox_capacity == 0 {
            Some("buffer limits and the inbox capacity must be at least 1".to_owned())
        } else if !(1..=crate::protocol::MAX_LOAD_SHARDS).contains(&self.load_report_shards) {
            Some(format!(
                "load_report_shards is {}; it must be 1 to {}",
                self.load_report_shards,
                crate::protocol::MAX_LOAD_SHARDS
            ))
        } else if self.forward_attempts == 0 || self.forward_deadline.is_zero() {
            Some("forward_attempts and forward_deadline must be greater than zero".to_owned())
        } else if self.connect_timeout.is_zero() {
            Some("the connect timeout must be greater than zero".to_owned())
        } else if self.reconnect_min.is_zero() || self.reconnect_min > self.reconnect_max {
            Some(format!(
                "the reconnect delays must satisfy 0 < min ({:?}) <= max ({:?})",
                self.reconnect_min, self.reconnect_max
            ))
        } else {
            None
        };
        problem.map_or(Ok(()), |p| Err(RegionError::Config(p)))
    }

    fn core_config(&self) -> CoreConfig {
        CoreConfig {
            registration: Register {
                address: self.address.clone(),
                incarnation: self.incarnation,
                roles: self.roles.clone(),
                app_version: self.app_version.clone(),
                labels: self.labels.clone(),
                proxy_only: self.proxy_only,
                sequence: 0,
            },
            shard_buffer_limit: self.shard_buffer_limit,
            total_buffer_limit: self.total_buffer_limit,
            stop_deadline_ms: millis(self.stop_deadline),
            home_retry_ms: millis(self.home_retry),
            response_timeout_ms: millis(self.response_timeout),
            forward_attempts: self.forward_attempts,
            forward_deadline_ms: millis(self.forward_deadline),
            max_lookups_in_flight: core::DEFAULT_MAX_LOOKUPS_IN_FLIGHT,
        }
    }
}

/// The WebSocket URL of the region endpoint of the node at `node`
/// (`http(s)://` or `ws(s)://`, with or without the connect path).
pub fn connect_url_of(node: &str) -> Result<String, RegionError> {
    let mut url = reqwest::Url::parse(node)
        .map_err(|e| RegionError::Config(format!("the node URL {node:?} is not a URL: {e}")))?;
    let scheme = match url.scheme() {
        "http" | "ws" => "ws",
        "https" | "wss" => "wss",
        other => {
            return Err(RegionError::Config(format!(
                "the node URL {node:?} has scheme {other:?}; expected http, https, ws or wss"
            )));
        }
    };
    url.set_scheme(scheme).map_err(|()| RegionError::Config(format!("cannot use scheme {scheme} for {node:?}")))?;
    if !url.path().ends_with(CONNECT_PATH) {
        let path = format!("{}{CONNECT_PATH}", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url.into())
}

/// Starts regions.
#[derive(Debug)]
pub struct Region;

impl Region {
    /// Starts a region: attaches its inbox to `transport`, then spawns the
    /// task that connects to the node, registers, heartbeats and reconnects
    /// with backoff until [`RegionHandle::leave`] or
    /// [`RegionHandle::shutdown`] (or until every handle is dropped, which
    /// shuts it down). Must be called inside a Tokio runtime.
    pub fn start<A, T>(
        config: RegionConfig,
        app: A,
        transport: T,
    ) -> Result<RegionHandle<A::Message, A::Reply>, RegionError>
    where
        A: Application,
        T: Transport<A::Message, A::Reply>,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| RegionError::NoRuntime)?;
        config.validate()?;
        let urls = config.connect_urls()?;
        let tls = if urls.iter().any(|url| url.starts_with("wss://")) {
            Some(crate::tls::client_config(config.ca_cert.as_deref()).map_err(|e| RegionError::Config(e.to_string()))?)
        } else {
            None
        };
        let (shared, control) = driver::start(runtime, config, urls, tls, Arc::new(app), Arc::new(transport));
        Ok(RegionHandle { shared, control })
    }
}

/// A running region. Cheap to clone; the region shuts down when every
/// clone is dropped (or at [`RegionHandle::leave`] / [`RegionHandle::shutdown`]).
pub struct RegionHandle<M, R = ()> {
    shared: Arc<Shared<M, R>>,
    control: mpsc::UnboundedSender<Control>,
}

impl<M, R> Clone for RegionHandle<M, R> {
    fn clone(&self) -> Self {
        RegionHandle { shared: self.shared.clone(), control: self.control.clone() }
    }
}

impl<M, R> fmt::Debug for RegionHandle<M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionHandle")
            .field("address", &self.shared.address)
            .field("incarnation", &self.shared.incarnation)
            .finish_non_exhaustive()
    }
}

impl<M: Send + 'static, R: Send + 'static> RegionHandle<M, R> {
    /// This region's address.
    pub fn address(&self) -> &str {
        &self.shared.address
    }

    /// This region's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.shared.incarnation
    }

    /// Where `shard` lives: the cached home, or the node's answer (awaited,
    /// possibly across reconnects and hand-offs). Asking for a shard no
    /// region hosts yet makes the node allocate it.
    pub async fn home_of(&self, shard: &str) -> Result<String, RegionError> {
        let answer = {
            let now = self.shared.now();
            let mut inner = self.shared.lock();
            if let Some(ended) = &inner.ended {
                return Err(ended.clone());
            }
            match inner.core.request_home(shard, now)? {
                HomeLookup::Known(home) => return Ok(home),
                HomeLookup::Asked(actions) => {
                    let (sender, answer) = oneshot::channel();
                    inner.waiters.entry(shard.to_owned()).or_default().push(sender);
                    self.shared.execute(&mut inner, actions, now);
                    answer
                }
            }
        };
        answer.await.unwrap_or_else(|_| Err(self.shared.lock().ended.clone().unwrap_or(RegionError::ShutDown)))
    }

    /// Records `units` of work done by `shard` (requests weighted by their
    /// cost, bytes, CPU milliseconds: any unit, the same for every shard of
    /// the type). The region reports the rate with its next heartbeat, so
    /// the node can place shards by load. Cheap: a map update under a lock
    /// of its own. Values that are not finite and positive are ignored.
    pub fn record_load(&self, shard: &str, units: f64) {
        let now = self.shared.now();
        self.shared.load().record(shard, units, now);
    }

    /// Sets `shard`'s load to `rate` units per second, a gauge the
    /// application measures itself; it stands until set again, the shard
    /// stops here, or it is set to 0. Adds to what [`RegionHandle::record_load`]
    /// records.
    pub fn set_load(&self, shard: &str, rate: f64) {
        let now = self.shared.now();
        self.shared.load().set(shard, rate, now);
    }

    /// Sends `message` to `shard`, wherever it lives, without waiting:
    /// delivered here if the shard runs here, carried by the transport if
    /// its home is known, buffered otherwise (while the home is asked for or
    /// a hand-off is in progress).
    pub fn send(&self, shard: &str, message: M) -> Result<(), SendError> {
        self.route(shard, Parcel::Tell(message))
    }

    /// Asks `shard`, wherever it lives; the returned future waits up to
    /// `timeout` for its answer ([`Application::answer`] at its home). The
    /// request is routed at the call, before the future is polled, like a
    /// [`RegionHandle::send`]: in order with this caller's sends and asks
    /// to the same shard, buffered across hand-offs, resent after a lost
    /// home. It is answered at most once; without an answer the future
    /// fails with an [`AskError`] naming why (the region did not take it,
    /// the timeout, a request never delivered, the home failing it).
    pub fn ask(
        &self,
        shard: &str,
        request: M,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<R, AskError>> + Send + 'static {
        let shard = shard.to_owned();
        let (answered, answer) = oneshot::channel();
        let replier = Replier::new(&shard, timeout, move |outcome| {
            let _ = answered.send(outcome);
        });
        let taken = self.route(&shard, Parcel::Ask(request, replier));
        async move {
            taken.map_err(AskError::from)?;
            match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => Err(AskError::Failed { shard, reason: "the region stopped".to_owned() }),
                Err(_) => Err(AskError::Timeout { shard, timeout }),
            }
        }
    }

    /// Hands a message or request to the core now, unless the region has
    /// ended or the shard's worker here has a full backlog.
    fn route(&self, shard: &str, parcel: Parcel<M, R>) -> Result<(), SendError> {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        if inner.ended.is_some() {
            return Err(SendError::Stopped);
        }
        if inner.core.delivers_locally(shard) && inner.backlog(shard) >= self.shared.shard_buffer_limit {
            return Err(SendError::BufferFull { shard: shard.to_owned(), limit: self.shared.shard_buffer_limit });
        }
        let actions = inner.core.send(shard, parcel, now)?;
        self.shared.execute(&mut inner, actions, now);
        Ok(())
    }

    /// A receiver of the region's [`Update`]s from now on (it lags, losing
    /// the oldest, if it falls more than 1,024 behind).
    pub fn updates(&self) -> broadcast::Receiver<Update> {
        self.shared.updates.subscribe()
    }

    /// Waits for the outcome of the current connection attempt: `Ok` once
    /// registered, [`RegionError::Refused`] if the node refused the session
    /// or registration (the region keeps retrying), or the reason it
    /// stopped. Wrap it in a timeout: it waits as long as the node is unreachable.
    pub async fn wait_registered(&self) -> Result<(), RegionError> {
        let mut status = self.shared.status.subscribe();
        let status = status
            .wait_for(|s| s.registered || s.refused.is_some() || s.ended.is_some())
            .await
            .map_err(|_| RegionError::ShutDown)?;
        match (&status.ended, &status.refused) {
            (Some(ended), _) => Err(ended.clone()),
            _ if status.registered => Ok(()),
            (_, Some(reason)) => Err(RegionError::Refused { reason: reason.clone() }),
            _ => unreachable!("wait_for returned on one of these"),
        }
    }

    /// True while registered with the node.
    pub fn is_registered(&self) -> bool {
        self.shared.lock().core.is_registered()
    }

    /// The shards running here (started and not yet stopped), sorted.
    pub fn running_shards(&self) -> Vec<String> {
        self.shared.lock().core.running()
    }

    /// The epoch `shard` runs here at, while it runs: what the application
    /// fences its own writes with (see [`Application::start_shard_at`]).
    pub fn epoch_of(&self, shard: &str) -> Option<u64> {
        self.shared.lock().core.epoch_of(shard)
    }

    /// True while the region is fenced (its lease ran out unrenewed).
    pub fn is_fenced(&self) -> bool {
        self.shared.lock().core.is_fenced()
    }

    /// The region's inbox, for an application transport that receives
    /// messages from other regions itself.
    pub fn inbox(&self) -> Inbox<M, R> {
        self.shared.inbox.clone()
    }

    /// Asks the node to drain this region (move its shards away and give it
    /// no new ones) or, with `false`, to undrain it.
    pub fn request_drain(&self, draining: bool) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        let actions = inner.core.request_drain(draining, now);
        self.shared.execute(&mut inner, actions, now);
    }

    /// Leaves the cluster: the node hands this region's shards off (the
    /// region keeps routing meanwhile) and confirms; then every shard still
    /// running is stopped and the session closed. Without the confirmation
    /// within [`RegionConfig::leave_timeout`], stops everything anyway and
    /// returns [`RegionError::LeaveTimedOut`].
    pub async fn leave(self) -> Result<(), RegionError> {
        let (done, result) = oneshot::channel();
        if self.control.send(Control::Leave(done)).is_err() {
            return Err(self.shared.lock().ended.clone().unwrap_or(RegionError::ShutDown));
        }
        result.await.unwrap_or_else(|_| Err(self.shared.lock().ended.clone().unwrap_or(RegionError::ShutDown)))
    }

    /// Drains this region, then leaves, within
    /// [`RegionConfig::drain_and_leave_timeout`]: what a process does before
    /// it is stopped (a Kubernetes preStop hook, SIGTERM).
    ///
    /// It asks the node to drain the region (no new shards; its shards are
    /// handed off, `drain_batch` at a time, through the usual hand-off,
    /// which this region takes part in as always: it keeps serving and
    /// routing meanwhile), waits until no shard runs here, then leaves
    /// (`Leave`, `LeaveDone`). When shards still run at half the bound (no
    /// other region can take them), it leaves anyway: the node hands them
    /// off or, when no region can take them, lets the region go and they
    /// wait for the next one. Returns `Ok` once the node let the region go.
    ///
    /// When the bound passes first, every shard still running is stopped
    /// (each within [`RegionConfig::stop_deadline`]) and it returns
    /// [`RegionError::DrainAndLeaveTimedOut`] naming the shards that still
    /// ran and whether the node had been asked to let the region go. So it
    /// returns within the bound plus, in that case, the stop deadline.
    pub async fn drain_and_leave(self) -> Result<(), RegionError> {
        let (done, result) = oneshot::channel();
        if self.control.send(Control::DrainAndLeave(done)).is_err() {
            return Err(self.shared.lock().ended.clone().unwrap_or(RegionError::ShutDown));
        }
        result.await.unwrap_or_else(|_| Err(self.shared.lock().ended.clone().unwrap_or(RegionError::ShutDown)))
    }

    /// Stops every shard and closes the session without leaving: the node
    /// re-homes the shards once the region's heartbeats stop.
    pub async fn shutdown(self) {
        let (done, result) = oneshot::channel();
        if self.control.send(Control::Shutdown(done)).is_ok() {
            let _ = result.await;
        }
    }
}

/// Milliseconds from `Duration`, saturating.
pub(crate) fn millis(duration: Duration) -> Millis {
    duration.as_millis().min(u128::from(u64::MAX)) as u64
}

/// Unpoisons a lock: the region's state stays usable after a panic elsewhere.
pub(crate) fn unpoison<T>(result: Result<T, PoisonError<T>>) -> T {
    result.unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_become_the_connect_url() {
        let url = |node: &str| RegionConfig::new(node, "cart", "a").connect_url();
        assert_eq!(url("http://127.0.0.1:7878").unwrap(), "ws://127.0.0.1:7878/v1/regions/connect");
        assert_eq!(url("http://127.0.0.1:7878/").unwrap(), "ws://127.0.0.1:7878/v1/regions/connect");
        assert_eq!(url("ws://node:1/v1/regions/connect").unwrap(), "ws://node:1/v1/regions/connect");
        assert_eq!(url("https://node/base/").unwrap(), "wss://node/base/v1/regions/connect");
        let error = url("ftp://node").unwrap_err().to_string();
        assert!(error.contains("scheme \"ftp\""), "{error}");
        assert!(url("not a url").unwrap_err().to_string().contains("is not a URL"));
    }

    #[test]
    fn configs_are_validated_and_the_token_is_not_shown() {
        let mut config = RegionConfig::new("http://n", "cart", "");
        assert_eq!(config.validate(), Err(RegionError::Config("the address is empty".into())));
        config.address = "a".into();
        config.reconnect_min = Duration::from_secs(9);
        assert!(config.validate().unwrap_err().to_string().contains("reconnect delays"));
        config.reconnect_min = Duration::from_millis(100);
        config.token = Some("secret".into());
        assert_eq!(config.validate(), Ok(()));
        assert!(!format!("{config:?}").contains("secret"));
        assert!(config.incarnation > 1_600_000_000_000, "milliseconds since the epoch");
    }

    #[test]
    fn starting_outside_a_runtime_names_the_problem() {
        struct Nothing;
        impl Application for Nothing {
            type Message = ();
            type Reply = ();
            async fn start_shard(&self, _: &str) {}
            async fn stop_shard(&self, _: &str) {}
            async fn deliver(&self, _: &str, _: ()) {}
        }
        let config = RegionConfig::new("http://127.0.0.1:1", "cart", "a");
        let error = Region::start(config, Nothing, InMemoryTransport::new()).unwrap_err();
        assert_eq!(error, RegionError::NoRuntime);
    }
}
