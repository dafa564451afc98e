//! In-process tests of the node's shell: [`TestNode`] is a node over an
//! in-memory store whose [`router`](super::router) is driven with
//! `tower::ServiceExt::oneshot`, and [`FakeRegion`] a region session fed
//! straight into the driver. No binary, no socket unless a test asks for
//! one ([`TestNode::serve`]).
//!
//! - `rest.rs`: every REST endpoint's success and error shapes;
//! - `openapi.rs`: the router and the OpenAPI document, in both directions;
//! - `driver.rs`: [`super::driver::Driver::step`] with time as a value;
//! - `health.rs`: `/livez` over the driver thread's heartbeat.

mod clock;
mod conn;
mod driver;
mod error_codes;
mod events;
mod guard;
mod health;
mod openapi;
mod paging;
mod rest;
mod strategies;
mod types;
mod uploads;
mod writes;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::Value;
use shardalloc_proto::protocol::{NodeMessage, RegionMessage, Register};
use tokio::sync::mpsc;
use tower::ServiceExt;

use super::api_error::ErrorCode;
use super::driver::sessions::SessionId;
use super::driver::{DriverSettings, Input, TypeDeclaration};
use super::state::Security;
use super::{Node, NodeSettings};
use crate::engine::{Engine, EngineConfig};
use crate::store::StoreConfig;
use crate::strategy::StrategySource;

/// How long a test waits for something it expects (generous: shared machines).
pub const PATIENCE: Duration = Duration::from_secs(30);

/// One engine per test process, with an artifact cache, so the built-ins
/// compile once.
pub fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let cache = CACHE.get_or_init(|| tempfile::tempdir().expect("a cache directory"));
            Engine::new(EngineConfig { cache_dir: Some(cache.path().to_owned()), max_instances: 0 }).expect("an engine")
        })
        .clone()
}

/// Driver settings declaring `types` with least-shard.
pub fn settings_with(types: &[&str]) -> DriverSettings {
    let mut settings = DriverSettings { origin: "test-node".into(), ..DriverSettings::default() };
    for name in types {
        let declaration =
            TypeDeclaration { strategy: StrategySource::Builtin("least-shard".into()), config: String::new() };
        settings.types.insert((*name).to_owned(), declaration);
    }
    settings
}

/// A node over an in-memory store, its router driven in-process.
pub struct TestNode {
    node: Option<Node>,
    router: Router,
}

impl TestNode {
    /// A node declaring `cart`, without tokens.
    pub fn start() -> TestNode {
        Self::with(settings_with(&["cart"]), Security::default())
    }

    /// A node with these driver settings and tokens.
    pub fn with(driver: DriverSettings, security: Security) -> TestNode {
        Self::with_connections(driver, security, Default::default())
    }

    /// A node with these driver settings, tokens and connection limits.
    pub fn with_connections(
        driver: DriverSettings,
        security: Security,
        connections: crate::server::conn::ConnectionLimits,
    ) -> TestNode {
        Self::on_store(StoreConfig::Memory, driver, security, connections)
    }

    /// A node declaring `cart`, without tokens, over the embedded store in
    /// `dir` (a node restarted on the same `dir` finds its state).
    pub fn on_disk(dir: &std::path::Path) -> TestNode {
        let store = StoreConfig::Embedded { dir: dir.to_owned(), migrate: true };
        Self::on_store(store, settings_with(&["cart"]), Security::default(), Default::default())
    }

    fn on_store(
        store: StoreConfig,
        driver: DriverSettings,
        security: Security,
        connections: crate::server::conn::ConnectionLimits,
    ) -> TestNode {
        let settings = NodeSettings {
            store,
            cache_dir: None,
            driver,
            security,
            max_instances: 0,
            connections,
            cluster: Default::default(),
            uploads: Default::default(),
        };
        let node = Node::with_engine(settings, engine()).expect("start a node");
        let router = node.router();
        TestNode { node: Some(node), router }
    }

    /// Stops the node and waits for its driver: its store is closed.
    pub async fn stop(mut self) {
        if let Some(node) = self.node.take() {
            node.stop().await.expect("the node stops cleanly");
        }
    }

    /// The node.
    pub fn node(&self) -> &Node {
        self.node.as_ref().expect("running")
    }

    /// Sends `request` through the router: its status and body (JSON when
    /// it parses, else a JSON string of the text, `null` when empty).
    /// An event stream's body is not read (it never ends): it is the string
    /// `"text/event-stream"`.
    pub async fn send(&self, request: Request<Body>) -> (StatusCode, Value) {
        let response = self.router.clone().oneshot(request).await.expect("the router answers");
        let status = response.status();
        if response.headers().get("content-type").is_some_and(|t| t == "text/event-stream") {
            return (status, Value::String("text/event-stream".into()));
        }
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("read the answer");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        (status, body)
    }

    /// A request with an optional body, sent as a well-behaved client
    /// would: JSON, or `application/wasm` for a strategy upload.
    pub async fn request(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let upload = method == Method::POST && path == "/v1/strategies";
        let mut request = Request::builder().method(method).uri(path);
        if body.is_some() {
            request = request.header("content-type", if upload { "application/wasm" } else { "application/json" });
        }
        self.send(request.body(Body::from(body.unwrap_or_default().to_owned())).unwrap()).await
    }

    /// Opens `GET path` with `headers` and returns the answer unread (an
    /// event stream is read as it comes).
    pub async fn open(&self, path: &str, headers: &[(&str, &str)]) -> axum::response::Response {
        let mut request = Request::builder().method(Method::GET).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.router.clone().oneshot(request.body(Body::empty()).unwrap()).await.expect("the router answers")
    }

    /// Serves the router on 127.0.0.1 (for clients that need a socket);
    /// returns its `http://ADDR`. The server ends with the test's runtime.
    pub async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let address = listener.local_addr().unwrap();
        let router = self.router.clone();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{address}")
    }

    /// A region session of `entity_type` at `address`, registered.
    pub async fn region(&self, entity_type: &str, address: &str) -> FakeRegion {
        FakeRegion::register(self, entity_type, address).await
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            let _ = node.state.driver.try_send(Input::Shutdown);
        }
    }
}

/// Asserts an error answer: `status`, and a body `{"error":{"code","message"}}`
/// with a non-empty code and message. Returns the code.
#[track_caller]
pub fn assert_error(what: &str, answer: &(StatusCode, Value), status: StatusCode) -> String {
    let (got, body) = answer;
    assert_eq!(*got, status, "{what}: expected {status}, got {got} with body {body}");
    let code = body["error"]["code"].as_str().unwrap_or_default();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !code.is_empty() && !message.is_empty(),
        "{what}: the body is not {{\"error\":{{\"code\",\"message\"}}}}: {body}"
    );
    assert!(ErrorCode::from_word(code).is_some(), "{what}: the code {code:?} is not an ErrorCode");
    let keys: Vec<&String> = body.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    assert_eq!(keys, ["error"], "{what}: unexpected top-level fields in {body}");
    code.to_owned()
}

/// A region session fed straight into the driver: what a WebSocket session
/// task would send, with its outbox in the test's hands.
pub struct FakeRegion {
    id: SessionId,
    node: super::driver::DriverHandle,
    outbox: mpsc::Receiver<NodeMessage>,
}

impl FakeRegion {
    async fn register(node: &TestNode, entity_type: &str, address: &str) -> FakeRegion {
        let (region, first) = FakeRegion::try_register(node, entity_type, address).await;
        assert!(matches!(first, NodeMessage::Registered { .. }), "{address} was not registered: {first:?}");
        region
    }

    /// Opens a session and sends `Register`; returns the node's first answer.
    pub async fn try_register(node: &TestNode, entity_type: &str, address: &str) -> (FakeRegion, NodeMessage) {
        static NEXT: AtomicU64 = AtomicU64::new(1 << 40);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let (tx, outbox) = mpsc::channel(super::driver::SESSION_OUTBOX);
        let driver = node.node().state.driver.clone();
        let opened = Input::SessionOpened { session: id, entity_type: entity_type.to_owned(), outbox: tx };
        driver.send(opened).await.expect("the driver runs");
        let mut region = FakeRegion { id, node: driver, outbox };
        let register = Register { address: address.to_owned(), incarnation: 1, sequence: 1, ..Register::default() };
        region.send(RegionMessage::Register(register)).await;
        let first = region.expect("an answer to Register", |m| Some(m.clone())).await;
        (region, first)
    }

    /// Sends a message as the region.
    pub async fn send(&self, message: RegionMessage) {
        self.node.send(Input::Region { session: self.id, message }).await.expect("the driver runs");
    }

    /// The next message `pick` accepts, skipping others; panics after [`PATIENCE`].
    pub async fn expect<T>(&mut self, what: &str, mut pick: impl FnMut(&NodeMessage) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match tokio::time::timeout_at(deadline, self.outbox.recv()).await {
                Ok(Some(message)) => {
                    if let Some(value) = pick(&message) {
                        return value;
                    }
                }
                Ok(None) => panic!("the session closed while waiting for {what}"),
                Err(_) => panic!("no {what} within {PATIENCE:?}"),
            }
        }
    }

    /// Plays the region's part of every hand-off (acknowledge, stop) until
    /// the node says `LeaveDone` or closes the session; returns what it saw.
    pub async fn cooperate_until_gone(&mut self) -> Vec<NodeMessage> {
        let mut seen = Vec::new();
        loop {
            let next = tokio::time::timeout(PATIENCE, self.outbox.recv()).await.expect("the node went silent");
            let Some(message) = next else { return seen };
            match &message {
                NodeMessage::BeginHandOff { shard } => {
                    self.send(RegionMessage::BeginHandOffAck { shard: shard.clone() }).await
                }
                NodeMessage::HandOff { shard } => self.send(RegionMessage::ShardStopped { shard: shard.clone() }).await,
                _ => {}
            }
            seen.push(message);
        }
    }

    /// Asks for a shard's home and waits for the answer.
    pub async fn home(&mut self, shard: &str) -> String {
        self.send(RegionMessage::GetShardHome { shard: shard.to_owned() }).await;
        self.expect(&format!("the home of {shard}"), |m| match m {
            NodeMessage::ShardHomeEpoch { shard: s, home, .. } if s == shard => Some(home.clone()),
            _ => None,
        })
        .await
    }
}
