//! [`Node`]: a started node. It opens the configured store, starts the
//! engine and the driver thread, and serves the router on a listener the
//! caller gives until a shutdown future the caller gives completes or the
//! driver ends; then it stops the driver (state flushed, regions told) and
//! closes the sessions.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

use std::time::Duration;

use tokio::sync::watch;

use super::driver::{self, DriverError, DriverHandle, DriverSettings, Input};
use super::leadership::claim::ClusterSecret;
use super::leadership::election::{Election, StartDriver};
use super::leadership::{Leadership, NodeIdentity, Role};
use super::metrics::Metrics;
use super::state::{AppState, Security};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::store::{EtcdStore, Store, StoreConfig, StoreError};

/// The node's settings.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// Where the node's state is kept.
    pub store: StoreConfig,
    /// Where compiled strategies are cached (`None`: compiled at every start).
    pub cache_dir: Option<PathBuf>,
    /// The driver's settings.
    pub driver: DriverSettings,
    /// Tokens.
    pub security: Security,
    /// Instance slots of the engine's pooling allocator.
    pub max_instances: u32,
    /// Timeouts and limits of every connection.
    pub connections: super::conn::ConnectionLimits,
    /// This node's identity and the leader lease (used with etcd).
    pub cluster: ClusterSettings,
    /// The bounds of uploaded components.
    pub uploads: super::uploads::UploadSettings,
}

/// How this node takes part in a cluster (with an etcd store).
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// This node's name and URL, as the others and clients see them.
    pub identity: NodeIdentity,
    /// The leader lease's TTL (whole seconds; `--leader-lease-s`).
    pub leader_lease: Duration,
    /// The secret the nodes sign and check leader claims with
    /// (`--cluster-secret-file`); needed with etcd.
    pub secret: Option<ClusterSecret>,
}

/// The default leader lease: 3 s.
pub const DEFAULT_LEADER_LEASE: Duration = Duration::from_secs(3);

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            identity: NodeIdentity { name: "node".into(), url: "http://127.0.0.1".into() },
            leader_lease: DEFAULT_LEADER_LEASE,
            secret: None,
        }
    }
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The driver.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// Several nodes on etcd, and no secret to tell their leader claims
    /// from anyone else's.
    #[error(
        "a node on etcd needs the cluster secret (--cluster-secret-file, the same on every node): without it, anyone \
         who can write to etcd could name a leader and receive the operators' tokens"
    )]
    NoClusterSecret,
}

/// Compiles the built-in strategies into the artifact cache in the
/// background, so that the first time this node wins an election its
/// driver loads them in milliseconds instead of compiling them.
fn warm_builtins(engine: Arc<Engine>) {
    let spawned = std::thread::Builder::new().name("warm-strategies".into()).spawn(move || {
        for name in crate::strategy::builtin::names() {
            if let Some(bytes) = crate::strategy::builtin::component_bytes(name)
                && let Err(error) = engine.compile(bytes)
            {
                tracing::warn!(strategy = name, %error, "cannot precompile a built-in strategy");
            }
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start precompiling the built-in strategies");
    }
}

/// A started node: its state for the router, and the driver thread (a
/// node alone) or the election that starts and stops drivers (with etcd).
pub struct Node {
    /// The handlers' state.
    pub state: AppState,
    driver: Option<std::thread::JoinHandle<Result<(), DriverError>>>,
    election: Option<Election>,
}

impl Node {
    /// Opens the store, starts an engine and the driver.
    pub fn start(settings: NodeSettings) -> Result<Node, NodeError> {
        let engine =
            Engine::new(EngineConfig { cache_dir: settings.cache_dir.clone(), max_instances: settings.max_instances })?;
        Self::with_engine(settings, engine)
    }

    /// Opens the store and starts the driver with an engine the caller
    /// shares (tests start many nodes on one engine).
    pub fn with_engine(settings: NodeSettings, engine: Arc<Engine>) -> Result<Node, NodeError> {
        let metrics = Arc::new(Metrics::new());
        let limits = settings.driver.limits;
        let shutdown = CancellationToken::new();
        let identity = settings.cluster.identity.clone();
        let (store, driver, thread, election, leadership): (Arc<dyn Store>, _, _, _, _) = match &settings.store {
            StoreConfig::Etcd(config) => {
                let etcd = Arc::new(EtcdStore::open(config)?);
                warm_builtins(engine.clone());
                let driver = DriverHandle::detached();
                let (role, receiver) = watch::channel(Role { term: 0, leader: None, leading: false, trouble: None });
                let start: StartDriver = {
                    let (store, engine, metrics) = (etcd.clone() as Arc<dyn Store>, engine.clone(), metrics.clone());
                    let settings = settings.driver.clone();
                    Arc::new(move |clock, term| {
                        let settings = DriverSettings { lease: Some(clock), term, ..settings.clone() };
                        driver::start(store.clone(), engine.clone(), settings, metrics.clone())
                    })
                };
                let secret = settings.cluster.secret.clone().ok_or(NodeError::NoClusterSecret)?;
                let election = Election {
                    store: etcd.clone(),
                    me: identity.clone(),
                    secret,
                    lease_ttl: settings.cluster.leader_lease,
                    role,
                    driver: driver.clone(),
                    start,
                    metrics: metrics.clone(),
                    shutdown: shutdown.clone(),
                };
                (etcd as Arc<dyn Store>, driver, None, Some(election), Leadership::elected(identity, receiver))
            }
            other => {
                let store = crate::store::open(other)?;
                let (driver, thread) =
                    driver::start(store.clone(), engine.clone(), settings.driver.clone(), metrics.clone())?;
                metrics.leader.set(1);
                metrics.term.set(1);
                (store, driver, Some(thread), None, Leadership::alone(identity))
            }
        };
        let state = AppState {
            driver,
            engine,
            store,
            component_writes: Arc::default(),
            security: Arc::new(settings.security),
            metrics,
            limits,
            connections: settings.connections,
            dry_runs: Arc::default(),
            reads: Arc::default(),
            shutdown,
            leadership,
            events: settings.driver.events.clone(),
            uploads: super::uploads::Uploads::new(settings.uploads.clone()),
        };
        Ok(Node { state, driver: thread, election })
    }

    /// The node's HTTP API.
    pub fn router(&self) -> Router {
        super::router(self.state.clone())
    }

    /// Stops the driver (state flushed, regions told) and waits for it.
    pub async fn stop(self) -> Result<(), NodeError> {
        self.state.shutdown.cancel();
        let _ = self.state.driver.send(Input::Shutdown).await;
        let Some(thread) = self.driver else { return Ok(()) };
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .expect("join the driver")
            .unwrap_or_else(|_| Ok(()))
            .map_err(NodeError::from)
    }

    /// Serves on `listener` until `shutdown` completes (or the driver of a
    /// node alone ends), then stops the driver and closes the sessions.
    /// With etcd, the election runs meanwhile: it starts a driver when this
    /// node wins and stops it when it loses; at shutdown a leader flushes
    /// and gives up its key so another node takes over at once.
    pub async fn serve<L>(
        mut self,
        listener: L,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), NodeError>
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let election = self.election.take().map(|election| tokio::spawn(election.run()));
        super::uploads::start_collecting(self.state.clone());
        let alone = election.is_none();
        let state = self.state.clone();
        let stop = async move {
            let driver_ended =
                async { if alone { state.driver.stopped().await } else { std::future::pending().await } };
            tokio::select! {
                _ = shutdown => tracing::info!("shutting down"),
                _ = driver_ended => tracing::error!("the coordinator driver stopped; shutting down"),
            }
            if alone {
                let _ = state.driver.send(Input::Shutdown).await;
            }
            state.shutdown.cancel();
        };
        super::conn::serve(listener, self.router(), self.state.connections, stop).await;
        if let Some(election) = election {
            self.state.shutdown.cancel();
            let _ = election.await;
        }
        self.stop().await
    }
}
