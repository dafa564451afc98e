//! The coordinator driver: one thread owns every entity type's
//! [`Coordinator`], the store and the region sessions' outboxes. It feeds
//! events with the real clock, executes commands, and commits once per turn.
//!
//! ```text
//!  sessions / REST ──Input──▶ [turn: handle every queued input, tick]
//!                               ├─ Send (not a reveal) ──▶ session outbox
//!                               ├─ Persist ──▶ Turn (all types)
//!                               └─ Reply / Observe
//!                             [commit Turn] ──▶ Persisted{batch} per type
//!                               └─ released reveals ──▶ outboxes, replies
//!                             [after-commit calls: REST answers]
//! ```
//!
//! A REST call runs as a closure on this thread ([`DriverHandle::call`]);
//! its answer is released only after the turn it ran in is committed, so an
//! operator never sees state the store does not hold.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shardalloc_client::protocol::{NodeMessage, RegionMessage};
use tokio::sync::{mpsc, oneshot};

use super::metrics::Metrics;
use crate::coordinator::{
    Command, Config, Coordinator, Durable, Event, Observation, OperatorRequest, Registration, Reply, RequestId,
    ToRegion,
};
use crate::engine::Engine;
use crate::engine::limits::Limits;
use crate::engine::load::Compiled;
use crate::engine::registry::{Activation, AutoRollback, Slot};
use crate::store::{ActivationRecord, ComponentRecord, Revision, Store, StoreError, Turn, TypeRecord};
use crate::strategy::builtin;
use crate::strategy::external::ExternalAllocation;
use crate::strategy::guarded::Guarded;

/// Most inputs queued for the driver; beyond it REST answers 503 and
/// sessions wait.
pub const INPUT_QUEUE: usize = 65_536;
/// Most messages queued for one region session; a session that falls this
/// far behind is closed.
pub const SESSION_OUTBOX: usize = 16_384;
/// Most inputs handled in one turn (one commit).
pub const MAX_INPUTS_PER_TURN: usize = 4_096;
/// How often coordinators get a `Tick`.
pub const TICK: Duration = Duration::from_millis(100);
/// Longest entity type name, in bytes.
pub const MAX_TYPE_NAME_BYTES: usize = 128;
/// Most entity types.
pub const MAX_TYPES: usize = 1_024;

/// The wall clock in milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A region session's id.
pub type SessionId = u64;

/// A closure run on the driver thread.
pub type Call = Box<dyn FnOnce(&mut Driver) + Send>;

/// What the driver is fed.
pub enum Input {
    /// A session passed its handshake.
    Opened {
        /// Its id.
        session: SessionId,
        /// The type it serves.
        entity_type: String,
        /// Where its messages go.
        outbox: mpsc::Sender<NodeMessage>,
    },
    /// A session's message.
    Message {
        /// From which session.
        session: SessionId,
        /// The message.
        message: RegionMessage,
    },
    /// A session ended.
    Closed {
        /// Its id.
        session: SessionId,
    },
    /// Run on the driver thread.
    Call(Call),
    /// Stop after this turn, telling every session.
    Shutdown,
}

/// The node's driver settings.
#[derive(Clone, Debug)]
pub struct DriverSettings {
    /// Every coordinator's settings.
    pub coordinator: Config,
    /// Sandbox limits of strategies.
    pub limits: Limits,
    /// The strategy of a type created by a region's registration.
    pub default_strategy: String,
    /// Types declared at start-up: name → (strategy, config). A type already
    /// in the store keeps its stored strategy.
    pub types: BTreeMap<String, (String, String)>,
    /// Automatic rollback of a faulting new activation.
    pub auto_rollback: AutoRollback,
}

impl Default for DriverSettings {
    fn default() -> Self {
        DriverSettings {
            coordinator: Config::default(),
            limits: Limits::default(),
            default_strategy: "least-shard".into(),
            types: BTreeMap::new(),
            auto_rollback: AutoRollback::default(),
        }
    }
}

/// Why the driver could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The store failed; nothing was revealed that it does not hold.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A type's strategy could not be loaded.
    #[error("type {entity_type}: cannot load its strategy {strategy}: {reason}")]
    Strategy {
        /// The type.
        entity_type: String,
        /// The strategy.
        strategy: String,
        /// Why.
        reason: String,
    },
    /// The coordinator settings are inconsistent.
    #[error("coordinator settings: {0}")]
    Config(#[from] crate::coordinator::ConfigError),
}

/// One entity type.
pub struct TypeEntry {
    /// Its coordinator.
    pub coordinator: Coordinator,
    /// Its strategy slot.
    pub slot: Arc<Slot>,
    /// Its declared strategy.
    pub record: TypeRecord,
    /// Its activation history, oldest first (persisted).
    pub activations: Vec<ActivationRecord>,
    active_id: u64,
}

impl TypeEntry {
    /// A registered region's status: `unreachable`, `leaving` or `up`.
    pub fn region_status(&self, address: &str) -> &'static str {
        if !self.coordinator.is_reachable(address) {
            "unreachable"
        } else if self.coordinator.durable().regions.get(address).is_some_and(|r| r.leaving) {
            "leaving"
        } else {
            "up"
        }
    }
}

struct Session {
    entity_type: String,
    outbox: mpsc::Sender<NodeMessage>,
    registered: Option<(String, u64)>,
}

/// The driver's state; REST calls get `&mut Driver`.
pub struct Driver {
    /// Every type.
    pub types: BTreeMap<String, TypeEntry>,
    /// The engine.
    pub engine: Arc<Engine>,
    /// Uploaded components by digest.
    pub components: BTreeMap<String, ComponentRecord>,
    /// Counters and gauges.
    pub metrics: Arc<Metrics>,
    /// Settings.
    pub settings: DriverSettings,
    store: Box<dyn Store>,
    revision: Revision,
    sessions: HashMap<SessionId, Session>,
    /// Type → region address → its current session.
    routes: HashMap<String, HashMap<String, SessionId>>,
    requests: HashMap<RequestId, oneshot::Sender<Reply>>,
    next_request: RequestId,
    turn: Turn,
    batches: BTreeMap<String, u64>,
    after_commit: Vec<Box<dyn FnOnce() + Send>>,
    builtin_digests: BTreeMap<String, String>,
    now: u64,
    last_stamp: u64,
}

/// The handle REST handlers and sessions use.
#[derive(Clone)]
pub struct DriverHandle {
    tx: SyncSender<Input>,
    alive: Arc<AtomicBool>,
}

/// The driver is gone (shutting down or failed) or too busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The driver stopped.
    #[error("the node is shutting down")]
    Stopped,
    /// Its input queue is full.
    #[error("the node is overloaded; retry")]
    Busy,
}

impl DriverHandle {
    /// Queues an input without waiting.
    pub fn try_send(&self, input: Input) -> Result<(), Unavailable> {
        self.tx.try_send(input).map_err(|e| match e {
            TrySendError::Full(_) => Unavailable::Busy,
            TrySendError::Disconnected(_) => Unavailable::Stopped,
        })
    }

    /// Queues an input, waiting (asynchronously) while the queue is full.
    pub async fn send(&self, mut input: Input) -> Result<(), Unavailable> {
        loop {
            match self.tx.try_send(input) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Disconnected(_)) => return Err(Unavailable::Stopped),
                Err(TrySendError::Full(back)) => {
                    input = back;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        }
    }

    /// Runs `f` on the driver thread; its answer arrives once the turn it ran
    /// in is committed.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Driver) -> T + Send + 'static,
    ) -> Result<T, Unavailable> {
        let (tx, rx) = oneshot::channel();
        self.try_send(Input::Call(Box::new(move |driver: &mut Driver| {
            let answer = f(driver);
            driver.after_commit.push(Box::new(move || {
                let _ = tx.send(answer);
            }));
        })))?;
        rx.await.map_err(|_| Unavailable::Stopped)
    }

    /// An operator request to a type's coordinator; the reply comes after
    /// its changes are committed. `None` for an unknown type.
    pub async fn operator(&self, entity_type: &str, op: OperatorRequest) -> Result<Option<Reply>, Unavailable> {
        let entity_type = entity_type.to_owned();
        let rx = self.call(move |driver| driver.operator(&entity_type, op)).await?;
        match rx {
            None => Ok(None),
            Some(rx) => rx.await.map(Some).map_err(|_| Unavailable::Stopped),
        }
    }

    /// True while the driver runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

/// Starts the driver thread over `store`. Returns its handle and the thread,
/// which ends after [`Input::Shutdown`] (or a store failure, returned).
pub fn start(
    store: Box<dyn Store>,
    engine: Arc<Engine>,
    settings: DriverSettings,
    metrics: Arc<Metrics>,
) -> Result<(DriverHandle, std::thread::JoinHandle<Result<(), DriverError>>), DriverError> {
    let mut driver = Driver::load(store, engine, settings, metrics)?;
    let (tx, rx) = sync_channel(INPUT_QUEUE);
    let alive = Arc::new(AtomicBool::new(true));
    let handle = DriverHandle { tx, alive: alive.clone() };
    let thread = std::thread::Builder::new()
        .name("shardalloc-driver".into())
        .spawn(move || {
            let result = driver.run(rx);
            alive.store(false, Ordering::Relaxed);
            if let Err(error) = &result {
                tracing::error!(%error, "the coordinator driver stopped");
            }
            result
        })
        .expect("spawn the driver thread");
    Ok((handle, thread))
}

/// Checks a type name: 1 to [`MAX_TYPE_NAME_BYTES`] bytes, no control characters.
pub fn check_type_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TYPE_NAME_BYTES {
        return Err(format!("an entity type name must be 1 to {MAX_TYPE_NAME_BYTES} bytes, not {}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return Err("an entity type name must not contain control characters".into());
    }
    Ok(())
}

impl Driver {
    fn load(
        store: Box<dyn Store>,
        engine: Arc<Engine>,
        settings: DriverSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, DriverError> {
        settings.coordinator.validate()?;
        let loaded = store.load()?;
        let builtin_digests = builtin::names()
            .map(|name| (crate::engine::load::digest(builtin::component_bytes(name).expect("listed")), name.to_owned()))
            .collect();
        let now = wall_clock_ms();
        let mut driver = Driver {
            types: BTreeMap::new(),
            engine,
            components: loaded.components,
            metrics,
            settings,
            store,
            revision: loaded.revision,
            sessions: HashMap::new(),
            routes: HashMap::new(),
            requests: HashMap::new(),
            next_request: 1,
            turn: Turn::default(),
            batches: BTreeMap::new(),
            after_commit: Vec::new(),
            builtin_digests,
            now,
            last_stamp: 0,
        };
        for (name, loaded_type) in loaded.types {
            let record = loaded_type.record.clone().unwrap_or_else(|| TypeRecord {
                strategy: driver.settings.default_strategy.clone(),
                config: String::new(),
            });
            let strategy = record.strategy.clone();
            let (entry, commands) = driver
                .open_type(&name, record, loaded_type.durable, loaded_type.activations)
                .map_err(|reason| DriverError::Strategy { entity_type: name.clone(), strategy, reason })?;
            driver.types.insert(name.clone(), entry);
            driver.execute(&name, commands);
        }
        let declared: Vec<(String, (String, String))> =
            driver.settings.types.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (name, (strategy, config)) in declared {
            if !driver.types.contains_key(&name) {
                driver.create_type(&name, &strategy, &config).map_err(|reason| DriverError::Strategy {
                    entity_type: name.clone(),
                    strategy: strategy.clone(),
                    reason,
                })?;
            }
        }
        driver.commit()?;
        Ok(driver)
    }

    /// The bytes of a built-in (by name) or of an uploaded component (by
    /// digest); `None` when the strategy is neither.
    pub fn strategy_bytes(&self, strategy: &str) -> Result<Option<Cow<'static, [u8]>>, StoreError> {
        if let Some(bytes) = builtin::component_bytes(strategy) {
            return Ok(Some(Cow::Borrowed(bytes)));
        }
        if !self.components.contains_key(strategy) {
            return Ok(None);
        }
        Ok(self.store.component(strategy)?.map(Cow::Owned))
    }

    /// Compiles a built-in (by name) or an uploaded component (by digest).
    pub fn compile(&self, strategy: &str) -> Result<Arc<Compiled>, String> {
        let bytes =
            self.strategy_bytes(strategy).map_err(|e| e.to_string())?.ok_or_else(|| unknown_strategy(strategy))?;
        self.engine.compile(&bytes).map_err(|e| e.to_string())
    }

    /// The name operators use for a compiled strategy: a built-in's name, or its digest.
    /// An uploaded component is named by its digest even when its bytes are a
    /// built-in's, so it cannot be deleted while active.
    pub fn spec_of(&self, compiled: &Compiled) -> String {
        if self.components.contains_key(&compiled.digest) {
            return compiled.digest.clone();
        }
        self.builtin_digests.get(&compiled.digest).cloned().unwrap_or_else(|| compiled.digest.clone())
    }

    /// A type's coordinator recovered from `durable`, with a strategy slot
    /// loaded from `record`, and the commands recovery emitted.
    fn open_type(
        &self,
        name: &str,
        record: TypeRecord,
        durable: Durable,
        activations: Vec<ActivationRecord>,
    ) -> Result<(TypeEntry, Vec<Command>), String> {
        let compiled = self.compile(&record.strategy)?;
        let settings = &self.settings;
        let slot =
            Slot::new(name, self.engine.clone(), settings.auto_rollback, compiled, &record.config, settings.limits)
                .map_err(|e| e.to_string())?;
        let strategy = ExternalAllocation::new(Guarded::new(Box::new(self.metrics.timed(name, slot.handle()))));
        let (coordinator, commands) = Coordinator::recover(settings.coordinator.clone(), strategy, durable, self.now)
            .expect("the coordinator settings were validated at start-up");
        let active_id = slot.active().id;
        Ok((TypeEntry { coordinator, slot, record, activations, active_id }, commands))
    }

    /// Creates a type with a strategy, recording it in this turn.
    pub fn create_type(&mut self, name: &str, strategy: &str, config: &str) -> Result<(), String> {
        check_type_name(name)?;
        if self.types.len() >= MAX_TYPES {
            return Err(format!("{MAX_TYPES} entity types exist, the most allowed"));
        }
        let record = TypeRecord { strategy: strategy.to_owned(), config: config.to_owned() };
        let (mut entry, commands) = self.open_type(name, record.clone(), Durable::default(), Vec::new())?;
        let activation = activation_record(&entry.slot.active(), strategy);
        entry.activations.push(activation.clone());
        self.turn.types.insert(name.to_owned(), record);
        self.turn.activations.push((name.to_owned(), activation));
        self.types.insert(name.to_owned(), entry);
        self.execute(name, commands);
        tracing::info!(r#type = name, strategy, "entity type created");
        Ok(())
    }

    /// Records the slot's active strategy when it changed (activation,
    /// rollback, automatic rollback).
    pub fn record_activation(&mut self, entity_type: &str) {
        let Some(entry) = self.types.get(entity_type) else { return };
        let active = entry.slot.active();
        if active.id == entry.active_id {
            return;
        }
        let spec = self.spec_of(&active.compiled);
        let record = TypeRecord { strategy: spec.clone(), config: active.config.clone() };
        let activation = activation_record(&active, &spec);
        let entry = self.types.get_mut(entity_type).expect("checked");
        entry.active_id = active.id;
        entry.record = record.clone();
        entry.activations.push(activation.clone());
        let excess = entry.activations.len().saturating_sub(crate::store::ACTIVATION_HISTORY);
        entry.activations.drain(..excess);
        self.turn.types.insert(entity_type.to_owned(), record);
        self.turn.activations.push((entity_type.to_owned(), activation));
    }

    /// Stores an uploaded component in this turn.
    pub fn store_component(&mut self, record: ComponentRecord, bytes: Vec<u8>) {
        self.components.insert(record.digest.clone(), record.clone());
        self.turn.components.push((record, bytes));
    }

    /// Deletes an uploaded component in this turn.
    pub fn remove_component(&mut self, digest: &str) {
        self.components.remove(digest);
        self.turn.removed_components.push(digest.to_owned());
    }

    /// The wall-clock time of the current turn.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// A timestamp for a placement write made by this node: the wall clock,
    /// but strictly greater than the previous one, so two writes in one
    /// millisecond (a set then a remove) are ordered as they were made.
    pub fn stamp_time(&mut self) -> u64 {
        self.last_stamp = self.now.max(self.last_stamp + 1);
        self.last_stamp
    }

    /// Number of region sessions open.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Sends an operator request to a type's coordinator; `None` for an unknown type.
    pub fn operator(&mut self, entity_type: &str, op: OperatorRequest) -> Option<oneshot::Receiver<Reply>> {
        if !self.types.contains_key(entity_type) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let request = self.next_request;
        self.next_request += 1;
        self.requests.insert(request, tx);
        self.feed(entity_type, Event::Operator { now: self.now, request, op });
        Some(rx)
    }

    fn feed(&mut self, entity_type: &str, event: Event) {
        let Some(entry) = self.types.get_mut(entity_type) else { return };
        let commands = entry.coordinator.handle(event);
        self.execute(entity_type, commands);
    }

    fn execute(&mut self, entity_type: &str, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Persist { batch, changes } => {
                    self.turn.changes.entry(entity_type.to_owned()).or_default().extend(changes);
                    self.batches.insert(entity_type.to_owned(), batch);
                }
                Command::Send { to, message } => self.send(entity_type, &to, message),
                Command::Reply { request, reply } => {
                    if let Some(tx) = self.requests.remove(&request) {
                        let _ = tx.send(reply);
                    }
                }
                Command::Observe(observation) => self.observe(entity_type, observation),
            }
        }
    }

    fn send(&mut self, entity_type: &str, to: &str, message: ToRegion) {
        let Some(&session) = self.routes.get(entity_type).and_then(|r| r.get(to)) else { return };
        let message = to_node_message(message);
        let Some(s) = self.sessions.get(&session) else { return };
        if let Err(error) = s.outbox.try_send(message) {
            let why = match error {
                mpsc::error::TrySendError::Full(_) => "its outbox is full (it does not read)",
                mpsc::error::TrySendError::Closed(_) => "it closed",
            };
            tracing::warn!(r#type = entity_type, region = to, session, why, "closing a region session");
            self.close(session);
        }
    }

    fn close(&mut self, session: SessionId) {
        if let Some(s) = self.sessions.remove(&session)
            && let Some((address, _)) = s.registered
            && let Some(routes) = self.routes.get_mut(&s.entity_type)
            && routes.get(&address) == Some(&session)
        {
            routes.remove(&address);
        }
        self.metrics.sessions.set(self.sessions.len() as i64);
    }

    fn observe(&mut self, entity_type: &str, observation: Observation) {
        self.metrics.observe(entity_type, &observation);
        match &observation {
            Observation::Allocated { warning: Some(warning), .. } => {
                tracing::warn!(r#type = entity_type, ?observation, warning, "placement not honoured")
            }
            Observation::HandOffTimedOut { .. }
            | Observation::NoAllocatableRegion { .. }
            | Observation::Limit { .. } => {
                tracing::warn!(r#type = entity_type, ?observation)
            }
            Observation::RebalanceFallback { .. } => tracing::warn!(r#type = entity_type, ?observation),
            Observation::Ignored { .. } => tracing::debug!(r#type = entity_type, ?observation),
            _ => tracing::info!(r#type = entity_type, ?observation),
        }
    }

    fn on_input(&mut self, input: Input) -> bool {
        match input {
            Input::Opened { session, entity_type, outbox } => {
                self.sessions.insert(session, Session { entity_type, outbox, registered: None });
                self.metrics.sessions.set(self.sessions.len() as i64);
            }
            Input::Closed { session } => self.close(session),
            Input::Message { session, message } => self.on_region(session, message),
            Input::Call(call) => call(self),
            Input::Shutdown => return false,
        }
        true
    }

    /// Queues a message straight to a session (not through its route).
    fn tell(&self, session: SessionId, message: NodeMessage) {
        if let Some(s) = self.sessions.get(&session) {
            let _ = s.outbox.try_send(message);
        }
    }

    fn refuse(&mut self, session: SessionId, reason: String) {
        tracing::warn!(session, %reason, "closing a region session");
        self.tell(session, NodeMessage::Refused { reason });
        self.close(session);
    }

    fn on_region(&mut self, session: SessionId, message: RegionMessage) {
        let Some(s) = self.sessions.get(&session) else { return };
        let entity_type = s.entity_type.clone();
        let now = self.now;
        if let RegionMessage::Register(register) = message {
            if let Some((address, _)) = &s.registered
                && *address != register.address
            {
                let reason = format!("this session registered {address}; it cannot register {}", register.address);
                return self.refuse(session, reason);
            }
            if !self.types.contains_key(&entity_type) {
                let strategy = self.settings.default_strategy.clone();
                if let Err(reason) = self.create_type(&entity_type, &strategy, "") {
                    return self.refuse(session, format!("cannot create the entity type {entity_type}: {reason}"));
                }
            }
            let registered = self.types[&entity_type].coordinator.durable().regions.get(&register.address);
            if let Some(current) = registered.map(|r| r.incarnation)
                && register.incarnation < current
            {
                // Refused without touching the live incarnation's session.
                let reason =
                    format!("incarnation {} is older than the registered incarnation {current}", register.incarnation);
                tracing::warn!(r#type = %entity_type, address = %register.address, %reason, "registration refused");
                self.tell(session, NodeMessage::RegisterRefused { reason });
                return;
            }
            let routes = self.routes.entry(entity_type.clone()).or_default();
            if let Some(old) = routes.insert(register.address.clone(), session)
                && old != session
            {
                // The region connected again; its previous session is over.
                self.sessions.remove(&old);
            }
            let s = self.sessions.get_mut(&session).expect("checked");
            s.registered = Some((register.address.clone(), register.incarnation));
            let registration = Registration {
                address: register.address,
                incarnation: register.incarnation,
                roles: register.roles,
                app_version: register.app_version,
                labels: register.labels,
                proxy_only: register.proxy_only,
            };
            return self.feed(&entity_type, Event::Register { now, registration, sequence: register.sequence });
        }
        let Some((address, incarnation)) = s.registered.clone() else {
            return self.refuse(session, format!("{} before Register", message_name(&message)));
        };
        let event = match message {
            RegionMessage::Register(_) => unreachable!("handled above"),
            RegionMessage::Heartbeat { sequence, metrics } => {
                Event::Heartbeat { now, address, incarnation, metrics, sequence }
            }
            RegionMessage::GetShardHome { shard } => {
                Event::GetShardHome { now, requester: address, incarnation, shard }
            }
            RegionMessage::BeginHandOffAck { shard } => {
                Event::BeginHandOffAck { now, region: address, incarnation, shard }
            }
            RegionMessage::ShardStopped { shard } => Event::ShardStopped { now, region: address, incarnation, shard },
            RegionMessage::Leave => Event::Leave { now, address, incarnation },
            RegionMessage::Drain { draining } => {
                let op =
                    if draining { OperatorRequest::Drain { address } } else { OperatorRequest::Undrain { address } };
                // The region is not answered; the reply is dropped.
                drop(self.operator(&entity_type, op));
                return;
            }
        };
        self.feed(&entity_type, event);
    }

    /// Commits the turn, then releases what waited for it.
    fn commit(&mut self) -> Result<(), StoreError> {
        if !self.turn.is_empty() {
            let turn = std::mem::take(&mut self.turn);
            let started = Instant::now();
            self.revision = self.store.commit(self.revision, &turn)?;
            self.metrics.commit_seconds.observe(started.elapsed().as_secs_f64());
        }
        let batches = std::mem::take(&mut self.batches);
        for (entity_type, batch) in batches {
            self.feed(&entity_type, Event::Persisted { now: self.now, batch });
        }
        for answer in std::mem::take(&mut self.after_commit) {
            answer();
        }
        Ok(())
    }

    fn tick(&mut self) {
        let names: Vec<String> = self.types.keys().cloned().collect();
        for name in names {
            self.feed(&name, Event::Tick { now: self.now });
            self.record_activation(&name);
        }
    }

    fn run(&mut self, rx: Receiver<Input>) -> Result<(), DriverError> {
        let mut last_tick = Instant::now();
        let mut last_gauges = Instant::now();
        loop {
            let wait = TICK.saturating_sub(last_tick.elapsed());
            let first = match rx.recv_timeout(wait) {
                Ok(input) => Some(input),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return self.shut_down(),
            };
            self.now = self.now.max(wall_clock_ms());
            let mut running = true;
            if let Some(input) = first {
                running = self.on_input(input);
                for _ in 1..MAX_INPUTS_PER_TURN {
                    if !running {
                        break;
                    }
                    match rx.try_recv() {
                        Ok(input) => running = self.on_input(input),
                        Err(_) => break,
                    }
                }
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.tick();
            }
            self.commit()?;
            if last_gauges.elapsed() >= Duration::from_secs(1) {
                last_gauges = Instant::now();
                self.metrics.update_gauges(&self.types);
            }
            if !running {
                return self.shut_down();
            }
        }
    }

    fn shut_down(&mut self) -> Result<(), DriverError> {
        self.commit()?;
        for session in self.sessions.values() {
            let _ = session.outbox.try_send(NodeMessage::ShuttingDown);
        }
        self.sessions.clear();
        self.routes.clear();
        tracing::info!(revision = self.revision, "the coordinator driver stopped; state flushed");
        Ok(())
    }
}

/// The persisted form of an activation of `strategy` (a built-in's name or a digest).
pub fn activation_record(activation: &Activation, strategy: &str) -> ActivationRecord {
    ActivationRecord {
        strategy: strategy.to_owned(),
        name: activation.compiled.info.name.clone(),
        version: activation.compiled.info.version.clone(),
        config: activation.config.clone(),
        cause: serde_json::to_value(activation.cause)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        at_ms: activation.at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
    }
}

/// Why a strategy name resolves to nothing.
pub fn unknown_strategy(strategy: &str) -> String {
    let builtins: Vec<&str> = builtin::names().collect();
    format!(
        "unknown strategy {strategy:?}: name a built-in ({}) or an uploaded component's sha256:… digest",
        builtins.join(", ")
    )
}

fn message_name(message: &RegionMessage) -> &'static str {
    match message {
        RegionMessage::Register(_) => "Register",
        RegionMessage::Heartbeat { .. } => "Heartbeat",
        RegionMessage::GetShardHome { .. } => "GetShardHome",
        RegionMessage::BeginHandOffAck { .. } => "BeginHandOffAck",
        RegionMessage::ShardStopped { .. } => "ShardStopped",
        RegionMessage::Leave => "Leave",
        RegionMessage::Drain { .. } => "Drain",
    }
}

/// The wire form of a coordinator's message to a region.
pub fn to_node_message(message: ToRegion) -> NodeMessage {
    match message {
        ToRegion::Registered { incarnation, sequence, lease_ms, heartbeat_interval_ms } => {
            NodeMessage::Registered { incarnation, sequence, lease_ms, heartbeat_interval_ms }
        }
        ToRegion::RegisterRefused { reason } => NodeMessage::RegisterRefused { reason },
        ToRegion::HeartbeatAck { incarnation, sequence, lease_ms } => {
            NodeMessage::HeartbeatAck { incarnation, sequence, lease_ms }
        }
        ToRegion::NotRegistered => NodeMessage::NotRegistered,
        ToRegion::ShardHome { shard, home } => NodeMessage::ShardHome { shard, home },
        ToRegion::ShardRefused { shard, reason } => NodeMessage::ShardRefused { shard, reason },
        ToRegion::BeginHandOff { shard } => NodeMessage::BeginHandOff { shard },
        ToRegion::HandOff { shard } => NodeMessage::HandOff { shard },
        ToRegion::PlacementChanged { shard, target } => NodeMessage::PlacementChanged { shard, target },
        ToRegion::LeaveDone => NodeMessage::LeaveDone,
    }
}
