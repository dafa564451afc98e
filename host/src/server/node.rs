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

use super::driver::{self, DriverError, DriverSettings, Input};
use super::metrics::Metrics;
use super::{AppState, Security};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::store::{StoreConfig, StoreError};

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
}

/// A started node: its state for the router, and the driver thread.
pub struct Node {
    /// The handlers' state.
    pub state: AppState,
    driver: std::thread::JoinHandle<Result<(), DriverError>>,
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
        let store = crate::store::open(&settings.store)?;
        let metrics = Arc::new(Metrics::new());
        let limits = settings.driver.limits;
        let (driver, thread) = driver::start(store.clone(), engine.clone(), settings.driver, metrics.clone())?;
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
            shutdown: CancellationToken::new(),
        };
        Ok(Node { state, driver: thread })
    }

    /// The node's HTTP API.
    pub fn router(&self) -> Router {
        super::router(self.state.clone())
    }

    /// Stops the driver (state flushed, regions told) and waits for it.
    pub async fn stop(self) -> Result<(), NodeError> {
        self.state.shutdown.cancel();
        let _ = self.state.driver.send(Input::Shutdown).await;
        let thread = self.driver;
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .expect("join the driver")
            .unwrap_or_else(|_| Ok(()))
            .map_err(NodeError::from)
    }

    /// Serves on `listener` until `shutdown` completes (or the driver
    /// ends), then stops the driver and closes the sessions.
    pub async fn serve<L>(
        self,
        listener: L,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), NodeError>
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let state = self.state.clone();
        let stop = async move {
            tokio::select! {
                _ = shutdown => tracing::info!("shutting down"),
                _ = state.driver.stopped() => tracing::error!("the coordinator driver stopped; shutting down"),
            }
            let _ = state.driver.send(Input::Shutdown).await;
            state.shutdown.cancel();
        };
        super::conn::serve(listener, self.router(), self.state.connections, stop).await;
        self.stop().await
    }
}
