//! # The coordinator driver
//!
//! One thread owns every entity type's [`Coordinator`](crate::coordinator::Coordinator),
//! the region sessions' outboxes and the pending write. It is built from
//! parts with one job each:
//!
//! - [`catalog::TypeCatalog`]: the types (declare, open, activate, roll
//!   back), their slots and activation history, the uploaded components;
//! - [`sessions::Sessions`]: region sessions routed by type and address;
//! - `regions.rs`: what a region's message does (registration, the
//!   coordinator events it becomes);
//! - `admin.rs`: the answers to [`request::AdminRequest`]s;
//! - `commands.rs`: what the coordinators' commands do (persist, send,
//!   reply, observe);
//! - `startup.rs`: [`Driver::load`], from the store to the first commit;
//! - `thread.rs`: the thread that waits for inputs or the next tick;
//! - `progress.rs`: its heartbeat, which `/livez` checks;
//! - this file: the turn — [`Driver::step`] handles a batch of inputs at a
//!   time given as a value, ticks the coordinators when due, commits once,
//!   feeds `Persisted` back and releases what waited for the commit.
//!
//! ```text
//!  sessions / REST ──Input──▶ step(inputs, now): handle each, tick when due
//!                               ├─ Send (not a reveal) ──▶ session outbox
//!                               ├─ Persist ──▶ Turn (all types)
//!                               └─ Reply / Observe
//!                             commit Turn ──▶ the turn's decision events to the hub
//!                               ├─ Persisted{batch} per type
//!                               └─ released reveals ──▶ outboxes, replies
//!                             release admin answers
//! ```
//!
//! The thread itself ([`start`]) only waits for inputs or the next tick and
//! calls [`Driver::step`] with the coordinator's monotonic time
//! (`crate::clock`); tests call `step` directly.

mod admin;
pub mod catalog;
mod commands;
mod components;
mod deletion;
mod entry;
pub mod freezes;
mod handle;
pub mod lease;
pub mod progress;
mod refusal;
mod regions;
pub mod request;
pub mod sessions;
mod startup;
pub mod stops;
mod thread;
pub mod writes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::catalog::TypeCatalog;
pub use self::handle::{DriverHandle, INPUT_QUEUE, Input, REQUESTS_IN_FLIGHT, Unavailable};
use self::request::{Refusal, Reply};
use self::sessions::Sessions;
pub use self::thread::start;
use super::events::{DecisionEvent, EventHub, decision};
use super::metrics::Metrics;
use crate::coordinator::{Config, Event, Millis, RequestId, TypeSettings};
use crate::engine::limits::Limits;
use crate::engine::slot::AutoRollback;
use crate::store::{Revision, Store, StoreError, Turn};
use crate::strategy::StrategySource;

/// Most messages queued for one region session; a session that falls this
/// far behind is closed.
pub const SESSION_OUTBOX: usize = 16_384;
/// Most region-session inputs handled in one turn (one commit).
pub const MAX_INPUTS_PER_TURN: usize = 4_096;
/// Most admin requests handled in one turn, after the region inputs.
pub const MAX_ADMIN_PER_TURN: usize = 32;
/// How often coordinators get a `Tick`, in milliseconds.
pub const TICK_MS: Millis = 100;
/// How often the gauges are recomputed, in milliseconds.
pub const GAUGES_MS: Millis = 1_000;

/// A type declared at start-up: its strategy and that strategy's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeDeclaration {
    /// The strategy (a file is uploaded at start-up and named by digest).
    pub strategy: StrategySource,
    /// Its configuration (JSON text, empty for none).
    pub config: String,
}

/// The driver's settings.
#[derive(Clone, Debug)]
pub struct DriverSettings {
    /// Every coordinator's settings.
    pub coordinator: Config,
    /// Sandbox limits of strategies.
    pub limits: Limits,
    /// The strategy of a type created by a region's registration.
    pub default_strategy: StrategySource,
    /// Types declared at start-up. A type already in the store keeps its
    /// stored strategy. Readiness counts these types only.
    pub types: BTreeMap<String, TypeDeclaration>,
    /// The settings of a type apart from `coordinator` (`[types.NAME]`),
    /// by type; a type not named here has the node's. They apply to a type
    /// whether it is declared, stored or created by a registration.
    pub type_settings: BTreeMap<String, TypeSettings>,
    /// Whether a region's registration may create a type that does not
    /// exist. Off by default: types are declared.
    pub auto_create_types: bool,
    /// Automatic rollback of a faulting new activation.
    pub auto_rollback: AutoRollback,
    /// The origin stamped on placements written through this node.
    pub origin: String,
    /// The leader's lease, when elected (`None`: a node alone, always leading).
    pub lease: Option<lease::LeaseClock>,
    /// The leadership's term when elected: the events' ids carry it. A node
    /// alone (`lease: None`) ignores it and numbers its events under the
    /// store revision of a commit it makes at start (`load.rs`), so the ids
    /// of each start differ from every earlier start's.
    pub term: u64,
    /// Where the decision events go once their turn is committed.
    pub events: Arc<EventHub>,
    /// The clocks the driver's thread reads (`crate::clock`).
    pub clocks: Arc<dyn crate::clock::Clocks>,
}

impl Default for DriverSettings {
    fn default() -> Self {
        DriverSettings {
            coordinator: Config::default(),
            limits: Limits::default(),
            default_strategy: StrategySource::Builtin("least-shard".into()),
            types: BTreeMap::new(),
            type_settings: BTreeMap::new(),
            auto_create_types: false,
            auto_rollback: AutoRollback::default(),
            origin: "node".into(),
            lease: None,
            term: 1,
            events: Arc::default(),
            clocks: Arc::new(crate::clock::SystemClocks::new()),
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
    /// The leader's lease ran out before this turn was released; nothing
    /// of it was revealed.
    #[error("the leader lease ran out; this node stops leading")]
    LeaseExpired,
}

/// Whether the driver goes on after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// A shutdown was asked for: stop after [`Driver::shut_down`].
    Stop,
}

/// Who waits for a coordinator's reply to an operator request.
enum Waiter {
    /// An admin request about a type.
    Admin(String, Reply<Result<request::Operated, Refusal>>),
    /// One type of a drain across types.
    Drain(u64),
    /// One type of a freeze or a lift (`freezes.rs`).
    Freeze(u64),
    /// A slice of a placement write (`writes.rs`).
    Slice,
    /// Nobody (a region asked to be drained).
    Nobody,
}

/// The driver's state. See the module documentation.
pub struct Driver {
    catalog: TypeCatalog,
    sessions: Sessions,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    origin: String,
    /// The types declared at start-up: the ones readiness counts.
    declared: BTreeSet<String>,
    auto_create_types: bool,
    /// Types being deleted with `force`: their regions leave first.
    retiring: BTreeMap<String, deletion::Retirement>,
    /// The readiness last answered, so a change is logged once.
    readiness: Option<Result<(), String>>,
    revision: Revision,
    lease: Option<lease::LeaseClock>,
    turn: Turn,
    batches: BTreeMap<String, u64>,
    released: Vec<Box<dyn FnOnce() + Send>>,
    waiters: HashMap<RequestId, Waiter>,
    drains: HashMap<u64, (usize, Reply<Result<(), Refusal>>)>,
    freeze_waits: HashMap<u64, freezes::FreezeWait>,
    next_request: RequestId,
    /// The decision events of this turn, published after its commit.
    decisions: Vec<DecisionEvent>,
    events: Arc<EventHub>,
    term: u64,
    now: Millis,
    next_tick: Millis,
    next_gauges: Millis,
    stamps: crate::clock::StampSequence,
    /// Placement writes waiting or under way, a slice per turn.
    writes: writes::PlacementWrites,
}

impl Driver {
    /// Handles `inputs` at time `now` (never earlier than a previous step's),
    /// in the order given (the thread puts region inputs before admin
    /// requests), ticks the coordinators when a tick is due, and commits the
    /// turn.
    pub fn step(&mut self, inputs: impl IntoIterator<Item = Input>, now: Millis) -> Result<Flow, DriverError> {
        self.now = self.now.max(now);
        let mut flow = Flow::Continue;
        for input in inputs {
            if self.on_input(input) == Flow::Stop {
                flow = Flow::Stop;
                break;
            }
        }
        if self.now >= self.writes.next_slice_at() && self.writes.pending() {
            // The region inputs' answers are committed and released first:
            // a home answer never waits for a slice's pushes and commit.
            self.commit()?;
            self.write_slices();
        }
        if self.now >= self.next_tick {
            self.next_tick = self.now + TICK_MS;
            for name in self.catalog.names() {
                self.feed(&name, Event::Tick { now: self.now });
            }
        }
        self.commit()?;
        if !self.retiring.is_empty() {
            self.finish_retirements();
            self.commit()?;
        }
        if self.now >= self.next_gauges {
            self.next_gauges = self.now + GAUGES_MS;
            self.metrics.update_gauges(self.catalog.gauges());
        }
        Ok(flow)
    }

    /// Flushes the turn and tells every session the node is shutting down.
    pub fn shut_down(&mut self) -> Result<(), DriverError> {
        self.commit()?;
        self.sessions.shut_down();
        tracing::info!(revision = self.revision, "the coordinator driver stopped; state flushed");
        Ok(())
    }

    /// Paces placement slices: after a turn that wrote one and took
    /// `spent`, the next slice waits as long, and long enough to keep the
    /// node under `writes::PUSHES_PER_SECOND` (1 ms to 1 s), so writes take
    /// at most about half of a busy core and sessions the rest. The thread
    /// calls it with each turn's measured time; tests step without.
    pub fn pace_slices(&mut self, spent: Duration) {
        self.writes.pace(self.now, spent);
    }

    /// The types.
    pub fn catalog(&self) -> &TypeCatalog {
        &self.catalog
    }

    /// The region sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The store revision the driver is at.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// How long until the next turn is due, from `now`: the next tick, or
    /// at once while a placement write waits for its next slice.
    pub fn until_tick(&self, now: Millis) -> Duration {
        if self.writes.stalled() {
            return Duration::from_millis(self.next_tick.saturating_sub(now).clamp(1, 10));
        }
        if self.writes.pending() {
            return Duration::from_millis(self.writes.next_slice_at().saturating_sub(now).min(TICK_MS));
        }
        Duration::from_millis(self.next_tick.saturating_sub(now).min(TICK_MS))
    }

    fn on_input(&mut self, input: Input) -> Flow {
        match input {
            Input::SessionOpened { session, entity_type, outbox } => self.sessions.open(session, entity_type, outbox),
            Input::SessionClosed { session } => self.sessions.close(session),
            Input::Region { session, message } => self.on_region(session, message),
            Input::Request { session, message, permit } => {
                self.on_region(session, message);
                drop(permit);
            }
            Input::Admin(request) => self.on_admin(request),
            Input::Shutdown => return Flow::Stop,
        }
        Flow::Continue
    }

    /// Releases `value` to `reply` once this turn is committed.
    fn answer<T: Send + 'static>(&mut self, reply: Reply<T>, value: T) {
        self.released.push(Box::new(move || {
            let _ = reply.send(value);
        }));
    }

    /// The next placement write's order (`clock::StampSequence`): one past
    /// every stamp the store holds (read at load) and every one written
    /// since. Commit order, never a clock.
    fn stamp_time(&mut self) -> u64 {
        self.stamps.stamp()
    }

    /// Remembers a decision event of this turn, published after its commit.
    fn decided(&mut self, event: DecisionEvent) {
        self.decisions.push(event);
    }

    /// Commits the turn, then releases what waited for it — if the leader's
    /// lease still holds (then the store's fence is still this node's too).
    fn commit(&mut self) -> Result<(), DriverError> {
        if let Some(lease) = &self.lease
            && !lease.valid()
        {
            return Err(DriverError::LeaseExpired);
        }
        self.catalog.record_changes(&mut self.turn);
        for (entity_type, activation) in &self.turn.activations {
            self.decisions.push(decision::from_activation(entity_type, activation));
        }
        let decisions = std::mem::take(&mut self.decisions);
        if !self.turn.is_empty() {
            let turn = std::mem::take(&mut self.turn);
            let started = Instant::now();
            self.revision = self.store.commit(self.revision, &turn)?;
            self.metrics.commit_seconds.observe(started.elapsed().as_secs_f64());
        }
        // Published once durable, and before any answer of the turn is
        // released: who got an answer finds its decision in the stream.
        self.events.publish(decisions);
        for (entity_type, batch) in std::mem::take(&mut self.batches) {
            self.feed(&entity_type, Event::Persisted { now: self.now, batch });
        }
        for release in std::mem::take(&mut self.released) {
            release();
        }
        self.metrics.sessions.set(self.sessions.len() as i64);
        Ok(())
    }
}

impl Drop for Driver {
    /// However the driver ends, the streams of its term end with it, so
    /// their clients reconnect to whoever leads now.
    fn drop(&mut self) {
        self.events.end_term(self.term);
    }
}
