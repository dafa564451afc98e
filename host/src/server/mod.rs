//! # The node's server
//!
//! One process: the coordinator driver on its own thread (`driver.rs`), the
//! axum server on one port with the admin REST API under `/v1` (`rest.rs`,
//! `strategies.rs`), the region sessions' WebSocket (`sessions.rs`),
//! health, readiness and Prometheus metrics (`metrics.rs`), bearer-token
//! checks (`auth.rs`), one error type (`api_error.rs`), request extractors
//! (`body.rs`) and optional TLS (`tls.rs`).
//!
//! [`router`] builds the whole API from an [`AppState`], so tests run it
//! in-process; [`serve`] takes its listener and shutdown signal from the
//! caller.

pub mod api_error;
pub mod auth;
pub mod body;
pub mod driver;
pub mod metrics;
pub mod rest;
pub mod sessions;
pub mod strategies;
pub mod tls;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use tokio_util::sync::CancellationToken;

use self::api_error::ApiError;
use self::driver::{DriverError, DriverHandle, DriverSettings, Input};
use self::metrics::Metrics;
use crate::engine::limits::Limits;
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::store::{RedbStore, StoreError};

/// Who may call what.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// Required on every `/v1` admin call when set.
    pub admin_token: Option<String>,
    /// Required on region sessions when set.
    pub region_token: Option<String>,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The coordinator driver.
    pub driver: DriverHandle,
    /// The WebAssembly engine (compiles uploads off the driver thread).
    pub engine: Arc<Engine>,
    /// Tokens.
    pub security: Arc<Security>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Sandbox limits for strategies.
    pub limits: Limits,
    /// The origin stamped on placements written through this node.
    pub origin: String,
    /// Cancelled when the node shuts down.
    pub shutdown: CancellationToken,
}

/// The node's settings.
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// The data directory (store and artifact cache).
    pub data_dir: PathBuf,
    /// The driver's settings.
    pub driver: DriverSettings,
    /// Tokens.
    pub security: Security,
    /// Instance slots of the engine's pooling allocator.
    pub max_instances: u32,
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
    /// Opens the store, starts the engine and the driver.
    pub fn start(settings: NodeSettings, origin: String) -> Result<Node, NodeError> {
        let store = RedbStore::open(&settings.data_dir)?;
        let engine = Engine::new(EngineConfig {
            cache_dir: Some(settings.data_dir.join("cache")),
            max_instances: settings.max_instances,
        })?;
        let metrics = Arc::new(Metrics::new());
        let limits = settings.driver.limits;
        let (driver, thread) = driver::start(Box::new(store), engine.clone(), settings.driver, metrics.clone())?;
        let state = AppState {
            driver,
            engine,
            security: Arc::new(settings.security),
            metrics,
            limits,
            origin,
            shutdown: CancellationToken::new(),
        };
        Ok(Node { state, driver: thread })
    }

    /// Serves on `listener` until `shutdown` completes (or the driver
    /// fails), then stops the driver (state flushed, regions told) and
    /// closes the sessions.
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
        let token = state.shutdown.clone();
        let app = router(state.clone());
        let driver_thread = self.driver;
        let watch = state.driver.clone();
        let stop = async move {
            tokio::select! {
                _ = shutdown => tracing::info!("shutting down"),
                _ = async {
                    while watch.is_alive() {
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                } => tracing::error!("the coordinator driver stopped; shutting down"),
            }
            let _ = watch.send(Input::Shutdown).await;
            token.cancel();
        };
        let server = axum::serve(listener, app).with_graceful_shutdown(stop);
        if let Err(error) = server.await {
            tracing::error!(%error, "the server failed");
        }
        state.shutdown.cancel();
        let _ = state.driver.try_send(Input::Shutdown);
        let result = tokio::task::spawn_blocking(move || driver_thread.join())
            .await
            .expect("join the driver")
            .unwrap_or_else(|_| Ok(()));
        result.map_err(NodeError::from)
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> Response {
    let verdict = state
        .driver
        .call(|driver| {
            let min = driver.settings.coordinator.min_regions;
            let short: Vec<String> =
                driver.types.iter().filter(|(_, e)| !e.coordinator.enough_regions()).map(|(n, _)| n.clone()).collect();
            if short.is_empty() { Ok(()) } else { Err(format!("fewer than {min} regions in {}", short.join(", "))) }
        })
        .await;
    match verdict {
        Ok(Ok(())) => "ready\n".into_response(),
        Ok(Err(message)) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", message).into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.metrics.render(),
    )
        .into_response()
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "this endpoint does not take that method")
}

async fn not_found() -> ApiError {
    ApiError::not_found("no-route", "no such endpoint; see /v1/openapi.json")
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    use rest::*;
    let admin = Router::new()
        .route("/cluster/shards", get(types))
        .route("/cluster/shards/{type}", get(type_state))
        .route("/cluster/shards/{type}/snapshot", get(snapshot))
        .route("/cluster/shards/{type}/placements", post(set_placements).get(list_placements))
        .route("/cluster/shards/{type}/placements/{shard}", axum::routing::delete(remove_placement))
        .route("/cluster/shards/{type}/rebalance", post(rebalance))
        .route("/cluster/shards/{type}/signal", put(set_signal))
        .route("/cluster/shards/{type}/shards/{shard}", get(shard))
        .route("/cluster/shards/{type}/strategy", put(strategies::activate).get(strategies::get))
        .route("/cluster/shards/{type}/strategy/dry-run", post(strategies::dry_run_endpoint))
        .route("/cluster/shards/{type}/strategy/shadow", put(strategies::set_shadow).delete(strategies::clear_shadow))
        .route("/cluster/shards/{type}/strategy/rollback", post(strategies::rollback))
        .route("/cluster/regions", get(regions))
        .route("/cluster/regions/{address}/drain", post(drain).delete(undrain))
        .route("/strategies/{digest}", axum::routing::delete(strategies::delete))
        .route("/strategies", get(strategies::list))
        .layer(DefaultBodyLimit::max(body::MAX_JSON_BODY))
        .merge(
            Router::new()
                .route("/strategies", post(strategies::upload))
                .layer(DefaultBodyLimit::max(strategies::MAX_UPLOAD)),
        )
        .route("/openapi.json", get(openapi))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_admin));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route(shardalloc_client::protocol::CONNECT_PATH, get(sessions::connect))
        .nest("/v1", admin)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

async fn openapi() -> Response {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], include_str!("openapi.json")).into_response()
}
