//! The region's driver: owns the clock, feeds the [`RegionCore`] and
//! performs its actions.
//!
//! The core sits behind a mutex in [`Shared`], so a [`RegionHandle`](super::RegionHandle)
//! can send without waiting; every action is performed synchronously while
//! the lock is held (queueing to a shard worker, to the transport, to the
//! session, to the updates stream), so actions happen in the order the core
//! emitted them whoever triggered them. The driver task runs the rest:
//!
//! ```text
//!  loop select {
//!    control (leave, drain and leave, shutdown) → core.leave / core.drain_and_leave / core.shutdown
//!    inbox (other regions)          → core.inbound
//!    worker reports (stop done)     → core.stop_finished
//!    session events                 → (drain the inbox first) core.connected / on_message / disconnected
//!    tick every 50 ms               → core.tick, reconnect when due, the leave deadline
//!  }
//! ```
//!
//! Each running shard has a worker task calling the application in order:
//! `start_shard`, then `deliver` per message, then `stop_shard`, reporting
//! the stop back. A stop past its deadline is abandoned (the task aborted).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use super::ask::{AskError, Parcel};
use super::core::{Action, Millis, RegionCore};
use super::load::LoadMeter;
use super::session::{self, SessionEvent, SessionParams};
use super::transport::{Inbound, Inbox, Returned, Transport, TransportError};
use super::{Application, DeliveryError, RegionConfig, RegionError, Update, millis, unpoison};
use crate::protocol::RegionMessage;

/// How often the driver ticks the core.
const TICK: Duration = Duration::from_millis(50);

/// Capacity of the updates stream.
const UPDATES_CAPACITY: usize = 1024;

/// What a handle asks of the driver task.
pub(crate) enum Control {
    Leave(oneshot::Sender<Result<(), RegionError>>),
    DrainAndLeave(oneshot::Sender<Result<(), RegionError>>),
    Shutdown(oneshot::Sender<Result<(), RegionError>>),
}

/// What handles may wait for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    pub(crate) registered: bool,
    pub(crate) refused: Option<String>,
    pub(crate) ended: Option<RegionError>,
}

enum WorkerCommand<M, R> {
    Deliver(Parcel<M, R>),
    Stop,
}

/// A shard worker's stop finished.
struct StopReport {
    shard: String,
    run: u64,
}

struct Worker<M, R> {
    run: u64,
    commands: mpsc::UnboundedSender<WorkerCommand<M, R>>,
    /// Deliveries queued and not yet done.
    backlog: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

/// What a new shard worker gets.
struct ShardRun<M, R> {
    shard: String,
    epoch: u64,
    run: u64,
    commands: mpsc::UnboundedReceiver<WorkerCommand<M, R>>,
    backlog: Arc<AtomicUsize>,
    reports: mpsc::UnboundedSender<StopReport>,
}

type Spawner<M, R> = Box<dyn Fn(ShardRun<M, R>) -> JoinHandle<()> + Send + Sync>;
type Metrics = Box<dyn Fn() -> BTreeMap<String, f64> + Send + Sync>;
/// A shard's forwards the transport refused in one batch: shard, home, parcels, why.
type Failed<M, R> = (String, String, Vec<Parcel<M, R>>, String);
type GivenUp<M> = Box<dyn Fn(&str, M, DeliveryError) + Send + Sync>;

/// The shared state of a region serving `A`.
type SharedOf<A> = Arc<Shared<<A as Application>::Message, <A as Application>::Reply>>;

/// The state handles and the driver share.
pub(crate) struct Shared<M, R> {
    pub(crate) address: String,
    pub(crate) incarnation: u64,
    pub(crate) shard_buffer_limit: usize,
    pub(crate) inbox: Inbox<M, R>,
    pub(crate) updates: broadcast::Sender<Update>,
    pub(crate) status: watch::Sender<Status>,
    epoch: Instant,
    inner: Mutex<Inner<M, R>>,
    transport: Arc<dyn Transport<M, R>>,
    spawn_worker: Spawner<M, R>,
    metrics: Metrics,
    /// The application's [`Application::undelivered`].
    undelivered: GivenUp<M>,
    /// The shards' load since the last report: a lock of its own, so
    /// recording load never waits for the core.
    load: Mutex<LoadMeter>,
    load_report_shards: usize,
    reports: mpsc::UnboundedSender<StopReport>,
}

/// The state behind the lock.
pub(crate) struct Inner<M, R> {
    pub(crate) core: RegionCore<Parcel<M, R>>,
    /// The session's outgoing messages; `None` while down (dropping it hangs up).
    node: Option<mpsc::UnboundedSender<RegionMessage>>,
    workers: HashMap<String, Worker<M, R>>,
    pub(crate) waiters: HashMap<String, Vec<oneshot::Sender<Result<String, RegionError>>>>,
    next_run: u64,
    /// Why the region stopped, once it has.
    pub(crate) ended: Option<RegionError>,
}

impl<M, R> Inner<M, R> {
    /// Deliveries queued for the shard's worker and not yet done.
    pub(crate) fn backlog(&self, shard: &str) -> usize {
        self.workers.get(shard).map_or(0, |w| w.backlog.load(Ordering::Relaxed))
    }
}

impl<M: Send + 'static, R: Send + 'static> Shared<M, R> {
    /// Milliseconds since the region started.
    pub(crate) fn now(&self) -> Millis {
        millis(self.epoch.elapsed())
    }

    pub(crate) fn load(&self) -> MutexGuard<'_, LoadMeter> {
        unpoison(self.load.lock())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner<M, R>> {
        unpoison(self.inner.lock())
    }

    /// Performs the core's actions in order. Forwards the transport could
    /// not carry go back to the core (with every later forward of the same
    /// shard in this batch, so their order holds).
    pub(crate) fn execute(&self, inner: &mut Inner<M, R>, actions: Vec<Action<Parcel<M, R>>>, now: Millis) {
        let mut queue: std::collections::VecDeque<Action<Parcel<M, R>>> = actions.into();
        let mut failed: Vec<Failed<M, R>> = Vec::new();
        loop {
            while let Some(action) = queue.pop_front() {
                match action {
                    Action::Send(message) => {
                        if let Some(node) = &inner.node {
                            let _ = node.send(message);
                        }
                    }
                    Action::Start { shard, epoch } => self.start_worker(inner, shard, epoch),
                    Action::Deliver { shard, message } => match inner.workers.get(&shard) {
                        Some(worker) => {
                            worker.backlog.fetch_add(1, Ordering::Relaxed);
                            let _ = worker.commands.send(WorkerCommand::Deliver(message));
                        }
                        None => warn!(%shard, "no worker for a running shard; dropping a message"),
                    },
                    Action::Stop { shard } => {
                        if let Some(worker) = inner.workers.get(&shard) {
                            let _ = worker.commands.send(WorkerCommand::Stop);
                        }
                    }
                    Action::AbandonStop { shard } => {
                        if let Some(worker) = inner.workers.remove(&shard) {
                            worker.task.abort();
                        }
                    }
                    Action::Forward { to, shard, message } => {
                        if let Some((_, _, parcels, _)) = failed.iter_mut().find(|(s, _, _, _)| *s == shard) {
                            parcels.push(message);
                        } else if let Err((parcel, error)) = self.forward(&to, &shard, message) {
                            warn!(%shard, %to, %error, "cannot forward a message; it waits for the home again");
                            failed.push((shard, to, vec![parcel], error.to_string()));
                        }
                    }
                    Action::Undelivered { shard, message: Parcel::Tell(message), error } => {
                        (self.undelivered)(&shard, message, error)
                    }
                    Action::Undelivered { message: Parcel::Ask(_, replier), error, .. } => {
                        replier.fail(AskError::NotDelivered(error))
                    }
                    Action::Publish(update) => self.publish(inner, update),
                    Action::Reconnect { reason } => {
                        info!(region = %self.address, %reason, "hanging up the node session");
                        inner.node = None;
                    }
                }
            }
            if failed.is_empty() {
                break;
            }
            for (shard, to, messages, reason) in std::mem::take(&mut failed) {
                queue.extend(inner.core.forward_failed(&shard, &to, messages, &reason, now));
            }
        }
    }

    /// Hands a parcel to the transport; what it could not take comes back.
    fn forward(&self, to: &str, shard: &str, parcel: Parcel<M, R>) -> Result<(), (Parcel<M, R>, TransportError)> {
        match parcel {
            Parcel::Tell(message) => {
                self.transport.send(to, shard, message).map_err(|back| (Parcel::Tell(back.message), back.error))
            }
            Parcel::Ask(request, replier) => self.transport.ask(to, shard, request, replier).map_err(|back| {
                let (request, replier) = back.message;
                (Parcel::Ask(request, replier), back.error)
            }),
        }
    }

    fn start_worker(&self, inner: &mut Inner<M, R>, shard: String, epoch: u64) {
        let run = inner.next_run;
        inner.next_run += 1;
        let (commands, receiver) = mpsc::unbounded_channel();
        let backlog = Arc::new(AtomicUsize::new(0));
        let task = (self.spawn_worker)(ShardRun {
            shard: shard.clone(),
            epoch,
            run,
            commands: receiver,
            backlog: backlog.clone(),
            reports: self.reports.clone(),
        });
        if let Some(old) = inner.workers.insert(shard, Worker { run, commands, backlog, task }) {
            old.task.abort();
        }
    }

    fn publish(&self, inner: &mut Inner<M, R>, update: Update) {
        match &update {
            Update::HomeChanged { shard, home } => {
                for waiter in inner.waiters.remove(shard).unwrap_or_default() {
                    let _ = waiter.send(Ok(home.clone()));
                }
            }
            Update::ShardRefused { shard, reason, .. } => {
                for waiter in inner.waiters.remove(shard).unwrap_or_default() {
                    let _ =
                        waiter.send(Err(RegionError::ShardRefused { shard: shard.clone(), reason: reason.clone() }));
                }
            }
            Update::Registered { .. } => self.status.send_modify(|s| {
                s.registered = true;
                s.refused = None;
            }),
            Update::Refused { reason } => self.status.send_modify(|s| {
                s.registered = false;
                s.refused = Some(reason.clone());
            }),
            Update::Disconnected { .. } => self.status.send_modify(|s| s.registered = false),
            _ => {}
        }
        debug!(region = %self.address, ?update, "region update");
        let _ = self.updates.send(update);
    }
}

/// Runs one shard: start, deliveries in order, stop; then reports the stop.
async fn run_shard<A: Application>(app: Arc<A>, run: ShardRun<A::Message, A::Reply>) {
    let ShardRun { shard, epoch, run, mut commands, backlog, reports } = run;
    app.start_shard_at(&shard, epoch).await;
    while let Some(command) = commands.recv().await {
        match command {
            WorkerCommand::Deliver(Parcel::Tell(message)) => {
                app.deliver(&shard, message).await;
                backlog.fetch_sub(1, Ordering::Relaxed);
            }
            WorkerCommand::Deliver(Parcel::Ask(request, replier)) => {
                match app.answer(&shard, request).await {
                    Ok(reply) => replier.reply(reply),
                    Err(reason) => replier.fail(AskError::Failed { shard: shard.clone(), reason }),
                }
                backlog.fetch_sub(1, Ordering::Relaxed);
            }
            WorkerCommand::Stop => {
                app.stop_shard(&shard).await;
                let _ = reports.send(StopReport { shard, run });
                return;
            }
        }
    }
}

/// Reconnect delays: doubling from `min` to `max`, each drawn uniformly
/// from the upper half of the current step.
struct Backoff {
    min: Duration,
    max: Duration,
    step: Duration,
    state: u64,
    /// Since when the session has been registered, if it is.
    registered_at: Option<Instant>,
}

/// How long a session must stay registered before its end restarts the
/// reconnect delays from the minimum: a node that registers a region and
/// then breaks the session (a malformed frame, say) is retried ever more
/// slowly, not about seven times a second.
pub const HEALTHY_SESSION: Duration = Duration::from_secs(10);

impl Backoff {
    fn new(min: Duration, max: Duration, seed: u64) -> Self {
        Backoff { min, max, step: min, state: seed | 1, registered_at: None }
    }

    /// The session is registered (kept from its first time).
    fn registered(&mut self, now: Instant) {
        self.registered_at.get_or_insert(now);
    }

    /// The delay before the next attempt after a session ended at `now`:
    /// from the minimum again after a session that stayed registered
    /// [`HEALTHY_SESSION`], else the next of the growing ones.
    fn closed(&mut self, now: Instant) -> Duration {
        if self.registered_at.take().is_some_and(|at| now.duration_since(at) >= HEALTHY_SESSION) {
            self.reset();
        }
        self.next()
    }

    fn next(&mut self) -> Duration {
        // xorshift64: jitter needs no cryptographic quality.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let half = step / 2;
        half + Duration::from_nanos(self.state % (half.as_nanos() as u64 + 1))
    }

    fn reset(&mut self) {
        self.step = self.min;
    }
}

/// The session's state, as the driver sees it.
enum Link {
    /// Connect at this instant.
    Waiting(Instant),
    /// A session task is connecting.
    Connecting(u64),
    /// A session task is connected.
    Up(u64),
}

/// How the region is ending.
enum Ending {
    Leave {
        deadline: Instant,
        timed_out: bool,
    },
    /// The core keeps the bound and the outcome ([`RegionCore::departure`]).
    DrainAndLeave,
    Shutdown,
}

struct Driver<M, R> {
    shared: Arc<Shared<M, R>>,
    params: Arc<SessionParams>,
    leave_timeout: Duration,
    drain_and_leave_timeout: Duration,
    control: mpsc::UnboundedReceiver<Control>,
    control_open: bool,
    inbox: mpsc::Receiver<Inbound<M, R>>,
    /// Forwards the transport reported later as not delivered.
    returned: mpsc::UnboundedReceiver<Returned<M, R>>,
    reports: mpsc::UnboundedReceiver<StopReport>,
    session_events: mpsc::UnboundedReceiver<SessionEvent>,
    session_sender: mpsc::UnboundedSender<SessionEvent>,
    session_task: Option<JoinHandle<()>>,
    generation: u64,
    link: Link,
    backoff: Backoff,
    ending: Option<Ending>,
    done: Vec<oneshot::Sender<Result<(), RegionError>>>,
}

/// Builds the shared state and spawns the driver task.
pub(crate) fn start<A: Application>(
    runtime: tokio::runtime::Handle,
    config: RegionConfig,
    urls: Vec<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    app: Arc<A>,
    transport: Arc<dyn Transport<A::Message, A::Reply>>,
) -> (SharedOf<A>, mpsc::UnboundedSender<Control>) {
    let (inbox, inbox_receiver, returned) = Inbox::new(&config.address, config.inbox_capacity);
    transport.attach(inbox.clone());
    let (reports, report_receiver) = mpsc::unbounded_channel();
    let (control, control_receiver) = mpsc::unbounded_channel();
    let (session_sender, session_events) = mpsc::unbounded_channel();
    let spawn_worker: Spawner<A::Message, A::Reply> = {
        let app = app.clone();
        let runtime = runtime.clone();
        Box::new(move |run| runtime.spawn(run_shard(app.clone(), run)))
    };
    let undelivered: GivenUp<A::Message> = {
        let app = app.clone();
        Box::new(move |shard, message, error| app.undelivered(shard, message, error))
    };
    let metrics: Metrics = Box::new(move || app.metrics());
    let shared = Arc::new(Shared {
        address: config.address.clone(),
        incarnation: config.incarnation,
        shard_buffer_limit: config.shard_buffer_limit,
        inbox,
        updates: broadcast::channel(UPDATES_CAPACITY).0,
        status: watch::channel(Status::default()).0,
        epoch: Instant::now(),
        inner: Mutex::new(Inner {
            core: RegionCore::new(config.core_config()),
            node: None,
            workers: HashMap::new(),
            waiters: HashMap::new(),
            next_run: 1,
            ended: None,
        }),
        transport,
        spawn_worker,
        metrics,
        undelivered,
        load: Mutex::new(LoadMeter::default()),
        load_report_shards: config.load_report_shards,
        reports,
    });
    let seed = config.incarnation
        ^ config
            .address
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let driver = Driver {
        shared: shared.clone(),
        params: Arc::new(SessionParams {
            urls,
            leader: Mutex::new(None),
            tls,
            token: config.token.clone(),
            entity_type: config.entity_type.clone(),
            handshake_timeout: config.connect_timeout,
            shard_attributes: config.shard_attributes.clone(),
            capacity: config.capacity.clone(),
        }),
        leave_timeout: config.leave_timeout,
        drain_and_leave_timeout: config.drain_and_leave_timeout,
        control: control_receiver,
        control_open: true,
        inbox: inbox_receiver,
        returned,
        reports: report_receiver,
        session_events,
        session_sender,
        session_task: None,
        generation: 0,
        link: Link::Waiting(Instant::now()),
        backoff: Backoff::new(config.reconnect_min, config.reconnect_max, seed),
        ending: None,
        done: Vec::new(),
    };
    runtime.spawn(driver.run());
    (shared, control)
}

impl<M: Send + 'static, R: Send + 'static> Driver<M, R> {
    async fn run(mut self) {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let paused = self.inbox_paused();
            tokio::select! {
                control = self.control.recv(), if self.control_open => self.on_control(control),
                Some(inbound) = self.inbox.recv(), if !paused => self.on_inbound(inbound),
                Some(report) = self.reports.recv() => self.on_report(report),
                Some(returned) = self.returned.recv() => self.on_returned(returned),
                Some(event) = self.session_events.recv() => {
                    // Whatever other regions sent before the node's message
                    // (e.g. before they acknowledged a hand-off) goes first.
                    while let Ok(inbound) = self.inbox.try_recv() {
                        self.on_inbound(inbound);
                    }
                    self.on_session(event);
                }
                _ = ticker.tick() => self.on_tick(),
            }
            if self.finished() {
                break;
            }
        }
        self.finish().await;
    }

    /// True while a running shard's worker has a full backlog: other
    /// regions' messages wait in the inbox (and then in their buffers).
    fn inbox_paused(&self) -> bool {
        let limit = self.shared.shard_buffer_limit;
        self.shared.lock().workers.values().any(|w| w.backlog.load(Ordering::Relaxed) >= limit)
    }

    fn with_core(&self, f: impl FnOnce(&mut RegionCore<Parcel<M, R>>, Millis) -> Vec<Action<Parcel<M, R>>>) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        let actions = f(&mut inner.core, now);
        self.shared.execute(&mut inner, actions, now);
    }

    fn on_control(&mut self, control: Option<Control>) {
        match control {
            Some(Control::Leave(done)) => {
                self.done.push(done);
                if self.ending.is_none() {
                    info!(region = %self.shared.address, "leaving the cluster");
                    self.ending =
                        Some(Ending::Leave { deadline: Instant::now() + self.leave_timeout, timed_out: false });
                    self.with_core(|core, now| core.leave(now));
                }
            }
            Some(Control::DrainAndLeave(done)) => {
                self.done.push(done);
                if self.ending.is_none() {
                    let bound = self.drain_and_leave_timeout;
                    info!(region = %self.shared.address, ?bound, "draining, then leaving the cluster");
                    self.ending = Some(Ending::DrainAndLeave);
                    self.with_core(|core, now| core.drain_and_leave(millis(bound), now));
                }
            }
            Some(Control::Shutdown(done)) => {
                self.done.push(done);
                self.shut_down();
            }
            None => {
                // Every handle is gone.
                self.control_open = false;
                self.shut_down();
            }
        }
    }

    fn shut_down(&mut self) {
        if !matches!(self.ending, Some(Ending::Shutdown)) {
            info!(region = %self.shared.address, "shutting down");
            self.ending = Some(Ending::Shutdown);
            self.with_core(|core, now| core.shutdown(now));
        }
    }

    fn on_inbound(&mut self, inbound: Inbound<M, R>) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        match inner.core.inbound(&inbound.shard, inbound.parcel, now) {
            Ok(actions) => self.shared.execute(&mut inner, actions, now),
            Err(error) => warn!(region = %self.shared.address, %error, "dropping a message from another region"),
        }
    }

    fn on_returned(&mut self, returned: Returned<M, R>) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        let Returned { to, shard, parcels: messages, reason } = returned;
        warn!(%shard, %to, %reason, count = messages.len(), "forwarded messages were not delivered; they wait for the home again");
        let actions = inner.core.forward_failed(&shard, &to, messages, &reason, now);
        self.shared.execute(&mut inner, actions, now);
    }

    fn on_report(&mut self, report: StopReport) {
        let now = self.shared.now();
        let mut inner = self.shared.lock();
        if inner.workers.get(&report.shard).is_some_and(|w| w.run == report.run) {
            inner.workers.remove(&report.shard);
            let actions = inner.core.stop_finished(&report.shard, now);
            self.shared.execute(&mut inner, actions, now);
        }
    }

    fn on_session(&mut self, event: SessionEvent) {
        let current = match self.link {
            Link::Connecting(generation) | Link::Up(generation) => generation,
            Link::Waiting(_) => 0,
        };
        match event {
            SessionEvent::Connected { generation, outgoing } if generation == current => {
                debug!(region = %self.shared.address, "connected to the node");
                self.link = Link::Up(generation);
                let now = self.shared.now();
                let mut inner = self.shared.lock();
                inner.node = Some(outgoing);
                let actions = inner.core.connected(now);
                self.shared.execute(&mut inner, actions, now);
            }
            SessionEvent::Message { generation, message } if generation == current => {
                self.with_core(|core, now| core.on_message(message, now));
                if self.shared.lock().core.is_registered() {
                    self.backoff.registered(Instant::now());
                }
            }
            SessionEvent::Refused { generation, reason } if generation == current => {
                warn!(region = %self.shared.address, %reason, "the node refused the session");
                self.with_core(|_, _| vec![Action::Publish(Update::Refused { reason })]);
            }
            SessionEvent::Closed { generation, reason } if generation == current => {
                let delay = self.backoff.closed(Instant::now());
                info!(region = %self.shared.address, %reason, ?delay, "node session down; reconnecting");
                self.link = Link::Waiting(Instant::now() + delay);
                let now = self.shared.now();
                let mut inner = self.shared.lock();
                inner.node = None;
                let actions = inner.core.disconnected(now, &reason);
                self.shared.execute(&mut inner, actions, now);
            }
            _ => {}
        }
    }

    fn on_tick(&mut self) {
        let shared = self.shared.clone();
        self.with_core(|core, now| {
            let load = |runs: &dyn Fn(&str) -> bool| shared.load().report(now, runs, shared.load_report_shards);
            core.tick_with_load(now, || (shared.metrics)(), load)
        });
        let now = Instant::now();
        if let Link::Waiting(at) = self.link
            && now >= at
            && !matches!(self.ending, Some(Ending::Shutdown))
        {
            self.generation += 1;
            self.link = Link::Connecting(self.generation);
            let task = tokio::spawn(session::run(self.params.clone(), self.generation, self.session_sender.clone()));
            self.session_task = Some(task);
        }
        if let Some(Ending::Leave { deadline, timed_out }) = &mut self.ending
            && !*timed_out
            && now >= *deadline
            && !self.shared.lock().core.has_left()
        {
            warn!(region = %self.shared.address, timeout = ?self.leave_timeout, "no LeaveDone in time; stopping anyway");
            *timed_out = true;
            self.with_core(|core, now| core.shutdown(now));
        }
    }

    fn finished(&self) -> bool {
        let inner = self.shared.lock();
        match &self.ending {
            None => false,
            Some(Ending::Shutdown) => inner.core.is_idle(),
            Some(Ending::Leave { timed_out, .. }) => (*timed_out || inner.core.has_left()) && inner.core.is_idle(),
            Some(Ending::DrainAndLeave) => inner.core.departure().is_some() && inner.core.is_idle(),
        }
    }

    async fn finish(mut self) {
        let (ended, result) = match &self.ending {
            Some(Ending::Leave { timed_out: true, .. }) => {
                (RegionError::Left, Err(RegionError::LeaveTimedOut(self.leave_timeout)))
            }
            Some(Ending::Leave { .. }) => (RegionError::Left, Ok(())),
            Some(Ending::DrainAndLeave) => {
                let outcome = self.shared.lock().core.departure().cloned().unwrap_or(Ok(()));
                (RegionError::Left, outcome)
            }
            _ => (RegionError::ShutDown, Ok(())),
        };
        {
            let mut inner = self.shared.lock();
            inner.ended = Some(ended.clone());
            inner.node = None;
            for (_, waiters) in inner.waiters.drain() {
                for waiter in waiters {
                    let _ = waiter.send(Err(ended.clone()));
                }
            }
            for (_, worker) in inner.workers.drain() {
                worker.task.abort();
            }
            let buffered = inner.core.buffered();
            if buffered > 0 {
                warn!(region = %self.shared.address, buffered, "the region stopped with messages still waiting for a home");
            }
        }
        self.shared.transport.detach(&self.shared.inbox);
        self.shared.status.send_modify(|s| {
            s.registered = false;
            s.ended = Some(ended.clone());
        });
        // Let a connected session send what is queued and its close frame;
        // an attempt still connecting is dropped.
        if let Some(task) = self.session_task.take() {
            if matches!(self.link, Link::Up(_)) {
                let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
            } else {
                task.abort();
            }
        }
        info!(region = %self.shared.address, "region stopped");
        for done in self.done.drain(..) {
            let _ = done.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_maximum_with_jitter_in_the_upper_half() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5), 42);
        let steps = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
        for step in steps {
            let delay = backoff.next();
            let step = Duration::from_millis(step);
            assert!(delay >= step / 2 && delay <= step, "{delay:?} outside [{:?}, {step:?}]", step / 2);
        }
        backoff.reset();
        assert!(backoff.next() <= Duration::from_millis(100));
    }

    #[test]
    fn only_a_session_that_stayed_registered_restarts_the_delays() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5), 7);
        let start = Instant::now();
        // Registered, then broken at once, again and again: the delays grow.
        let mut last = Duration::ZERO;
        for round in 0..5u32 {
            let at = start + Duration::from_secs(u64::from(round));
            backoff.registered(at);
            let delay = backoff.closed(at + Duration::from_millis(50));
            let step = Duration::from_millis(100) * 2u32.pow(round);
            assert!(delay >= step / 2 && delay <= step, "round {round}: {delay:?}");
            assert!(round == 0 || delay >= last / 2, "round {round}: {delay:?} after {last:?}");
            last = delay;
        }
        // A session registered for HEALTHY_SESSION: from the minimum again.
        let at = start + Duration::from_secs(100);
        backoff.registered(at);
        backoff.registered(at + Duration::from_secs(5));
        assert!(backoff.closed(at + HEALTHY_SESSION) <= Duration::from_millis(100));
        // A session that never registered does not restart them either.
        backoff.next();
        assert!(backoff.closed(at + Duration::from_secs(200)) > Duration::from_millis(100));
    }
}
