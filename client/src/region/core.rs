//! The region's deterministic, sans-I/O core: [`RegionCore`].
//!
//! Events go in (a [`NodeMessage`], an application send, a message from
//! another region, a tick, a finished stop, the session going up or down),
//! each carrying the time as milliseconds of the driver's clock
//! ([`Millis`]); [`Action`]s come out, in the order the driver must perform
//! them. The core has no clock, no sockets, no tasks and no randomness, so
//! every decision can be tested with literal action lists.
//!
//! ```text
//!  driver ──event{now}──▶ RegionCore ──▶ Vec<Action>
//!                                         ├─ Send(RegionMessage)     → the node session
//!                                         ├─ Start / Stop / Deliver  → the application (per-shard worker)
//!                                         ├─ AbandonStop             → give up on a stop past its deadline
//!                                         ├─ Forward                 → the Transport, to another region
//!                                         ├─ Publish(Update)         → the updates stream
//!                                         └─ Reconnect               → hang up; the driver reconnects
//! ```
//!
//! ## Lease
//!
//! Registration and heartbeats share one sequence counter; the send time of
//! the last [`SEQUENCE_WINDOW`] of them is kept. `Registered` and
//! `HeartbeatAck` extend the lease to *that message's* send time plus
//! `lease_ms`, and drop every entry up to the acknowledged sequence, so a
//! late or lost acknowledgement never stretches the lease. When the lease
//! runs out (checked at every event) the region fences itself: it stops
//! every running shard and forgets every cached home. It starts shards
//! again only after an acknowledgement renews the lease.
//!
//! ## Per-shard state
//!
//! Each shard the region has heard of has a cached home (or none), a FIFO
//! buffer of messages waiting for a home, whether a `GetShardHome` is out,
//! whether a hand-off began, and its local state (idle, running, stopping).
//! Messages are buffered while the home is unknown (never asked, asked, or
//! dropped by `BeginHandOff`) and flushed in order when a `ShardHome`
//! answer arrives, so one sender's messages to one shard keep their order
//! across hand-offs.
//!
//! At most [`CoreConfig::max_lookups_in_flight`] homes are asked and
//! unanswered at once (256 by default, the node's own bound on one
//! session's lookups queued for its coordinator); more wait their turn in
//! the order they were needed and go out as answers come. A region that
//! hears of 100,000 shards at once so never has more lookups in its
//! connection than the node reads without waiting, and its heartbeats do
//! not queue behind them.
//!
//! ## Drain and leave
//!
//! [`RegionCore::drain_and_leave`] is a departure within a bound (for a
//! Kubernetes preStop hook): `Drain{draining: true}` first, so the node
//! hands the shards off (`drain_batch` at a time) to regions that can take
//! them while this one still serves what it has; `Leave` once no shard runs
//! here, or at half the bound when shards still run (the drain stalled:
//! no other region can take them, e.g. every region is stopping; a leaving
//! region is let go even then); done at `LeaveDone`. When the bound passes
//! first, the core gives up: it stops every shard still running, undrains
//! the region if it asked to leave (so a restart at the same address is
//! not left draining), and reports what was left
//! ([`RegionError::DrainAndLeaveTimedOut`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tracing::warn;

use super::Update;
use super::error::{DeliveryError, RegionError, SendError, check_shard};
pub use crate::protocol::Millis;
use crate::protocol::{LoadReport, NodeMessage, RegionMessage, Register};

/// How many registration and heartbeat send times are kept for lease renewal.
pub const SEQUENCE_WINDOW: usize = 64;

/// Default per-shard buffer limit, in messages.
pub const DEFAULT_SHARD_BUFFER_LIMIT: usize = 1_000;

/// Default region-wide buffer limit, in messages.
pub const DEFAULT_TOTAL_BUFFER_LIMIT: usize = 100_000;

/// Default number of failed forwards in a row after which a shard's
/// messages are given up ([`CoreConfig::forward_attempts`]).
pub const DEFAULT_FORWARD_ATTEMPTS: u32 = 10;

/// Default time a shard's forwards may keep failing before its messages
/// are given up ([`CoreConfig::forward_deadline_ms`]): twice the node's
/// default removal time (15 s), so a dead home is replaced well before.
pub const DEFAULT_FORWARD_DEADLINE_MS: Millis = 30_000;

/// Default most homes asked of the node at once
/// ([`CoreConfig::max_lookups_in_flight`]): the node's own bound on one
/// session's lookups queued for its coordinator, so a region's lookups
/// never wait in its connection, where its heartbeats would queue behind
/// them.
pub const DEFAULT_MAX_LOOKUPS_IN_FLIGHT: usize = 256;

/// A lookup unanswered is asked again after `home_retry_ms`, then after
/// twice that, four times, … up to `2^MAX_RETRY_DOUBLINGS` times that: a
/// node slower than the retry (busy, or a debug build) is not sent every
/// unanswered lookup again and again, which would queue the repeats ahead
/// of the answers they wait for.
pub const MAX_RETRY_DOUBLINGS: u32 = 4;

/// What the core needs to know about its region.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreConfig {
    /// The registration sent to the node (its `sequence` is filled in per send).
    pub registration: Register,
    /// Most messages buffered for one shard.
    pub shard_buffer_limit: usize,
    /// Most messages buffered over all shards.
    pub total_buffer_limit: usize,
    /// How long the application may take to stop a shard (including the
    /// deliveries queued before the stop); past it the stop is abandoned
    /// and reported anyway.
    pub stop_deadline_ms: Millis,
    /// How long to wait for a `ShardHome` answer before asking again (the
    /// node may drop an answer overtaken by a change, or forget a waiting
    /// request when it restarts).
    pub home_retry_ms: Millis,
    /// How long the node may stay silent (no `Welcome`, no registration
    /// answer) before the session is given up. Once registered, the limit
    /// is three heartbeat intervals (at least [`MIN_SILENCE_MS`]) instead.
    pub response_timeout_ms: Millis,
    /// How many forwards of one shard may fail in a row (against homes the
    /// node keeps naming) before its messages are given up: each one
    /// given back or waiting goes to the application as
    /// [`Action::Undelivered`]. A home the node names anew starts a new run.
    pub forward_attempts: u32,
    /// How long a shard's forwards may keep failing, from the first failure
    /// of the run, before its messages are given up the same way.
    pub forward_deadline_ms: Millis,
    /// Most homes asked of the node and not yet answered (a failed
    /// forward's wait for its retry counts too); more wait their turn, in
    /// the order they were needed, and go out as answers come. At least 1.
    pub max_lookups_in_flight: usize,
}

/// The shortest silence after which a registered region gives its session
/// up (three heartbeat intervals, when longer).
pub const MIN_SILENCE_MS: Millis = 1_000;

impl CoreConfig {
    /// A configuration with the default limits and timings.
    pub fn new(registration: Register) -> Self {
        CoreConfig {
            registration,
            shard_buffer_limit: DEFAULT_SHARD_BUFFER_LIMIT,
            total_buffer_limit: DEFAULT_TOTAL_BUFFER_LIMIT,
            stop_deadline_ms: 10_000,
            home_retry_ms: 2_000,
            response_timeout_ms: 10_000,
            forward_attempts: DEFAULT_FORWARD_ATTEMPTS,
            forward_deadline_ms: DEFAULT_FORWARD_DEADLINE_MS,
            max_lookups_in_flight: DEFAULT_MAX_LOOKUPS_IN_FLIGHT,
        }
    }
}

/// Something the driver must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<M> {
    /// Send a message to the node over the session.
    Send(RegionMessage),
    /// Start the shard in the application (before any delivery to it).
    Start {
        /// The shard.
        shard: String,
        /// Its epoch here (0 from a node speaking protocol 1 or 2).
        epoch: u64,
    },
    /// Stop the shard in the application, after the deliveries queued so
    /// far; then feed back [`RegionCore::stop_finished`].
    Stop {
        /// The shard.
        shard: String,
    },
    /// The stop ran past its deadline: give up on it (the core already
    /// counts the shard as stopped).
    AbandonStop {
        /// The shard.
        shard: String,
    },
    /// Deliver a message to the shard, which runs here.
    Deliver {
        /// The shard.
        shard: String,
        /// The message.
        message: M,
    },
    /// Carry a message to the shard's home, another region. If the
    /// transport fails, feed the message back with [`RegionCore::forward_failed`].
    Forward {
        /// The home's address.
        to: String,
        /// The shard.
        shard: String,
        /// The message.
        message: M,
    },
    /// A message the region took is given up: its shard's forwards kept
    /// failing. Hand it to the application with the error.
    Undelivered {
        /// The shard.
        shard: String,
        /// The message.
        message: M,
        /// Why it was given up.
        error: DeliveryError,
    },
    /// Publish on the updates stream.
    Publish(Update),
    /// Hang up the session; the driver reconnects with backoff and feeds
    /// [`RegionCore::disconnected`] once the session is down.
    Reconnect {
        /// Why.
        reason: String,
    },
}

/// The error of a run of failed forwards past its deadline.
fn deadline_passed(shard: &str, failing: &Failing, now: Millis) -> DeliveryError {
    DeliveryError::DeadlinePassed {
        shard: shard.to_owned(),
        to: failing.to.clone(),
        waited_ms: now.saturating_sub(failing.since),
        reason: failing.reason.clone(),
    }
}

/// The answer to [`RegionCore::request_home`].
#[derive(Debug, Clone, PartialEq)]
pub enum HomeLookup<M> {
    /// The home is cached.
    Known(String),
    /// The home is unknown; it has been (or will be) asked for. A
    /// [`Update::HomeChanged`] or [`Update::ShardRefused`] answers it.
    Asked(Vec<Action<M>>),
}

/// The application's side of a shard on this region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Local {
    Idle,
    Running,
    Stopping {
        deadline: Millis,
        /// Send `ShardStopped` when done (a hand-off asked for the stop).
        report: bool,
    },
}

#[derive(Debug)]
struct ShardEntry<M> {
    home: Option<String>,
    buffer: VecDeque<M>,
    /// When `GetShardHome` was last sent (or a failed forward deferred it);
    /// `None` when no answer is expected.
    asked_at: Option<Millis>,
    /// Someone awaits the home ([`RegionCore::request_home`]).
    wanted: bool,
    /// In the core's `waiting` queue for a place among the lookups in flight.
    queued: bool,
    /// How many times the lookup out was sent again unanswered (the next
    /// repeat waits `home_retry_ms × 2^repeats`, at most
    /// [`MAX_RETRY_DOUBLINGS`] doublings).
    repeats: u32,
    /// `asked_at` is a failed forward's wait, not a lookup sent: the ask
    /// after it is the first.
    deferred: bool,
    local: Local,
    /// The epoch of the run here, while it runs.
    epoch: u64,
    /// A hand-off stop finished while the session was down.
    unreported_stop: bool,
    /// The run of failed forwards under way, if any.
    failing: Option<Failing>,
    /// How many messages at the front of `buffer` came back from failed
    /// forwards: later ones come back behind them, ahead of the messages
    /// never sent, so reports arriving one by one keep the send order.
    returned: usize,
    /// A failure was already counted since the last home answer: the
    /// forwards of one round count as one attempt, however many reports
    /// they come back in.
    round_failed: bool,
}

/// A shard's run of failed forwards: since when, how many, the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failing {
    since: Millis,
    attempts: u32,
    to: String,
    reason: String,
}

impl<M> ShardEntry<M> {
    fn new() -> Self {
        ShardEntry {
            home: None,
            buffer: VecDeque::new(),
            asked_at: None,
            wanted: false,
            queued: false,
            repeats: 0,
            deferred: false,
            local: Local::Idle,
            epoch: 0,
            unreported_stop: false,
            failing: None,
            returned: 0,
            round_failed: false,
        }
    }

    fn needs_home(&self) -> bool {
        self.home.is_none() && (self.wanted || !self.buffer.is_empty())
    }

    fn is_empty(&self) -> bool {
        self.home.is_none()
            && self.buffer.is_empty()
            && self.asked_at.is_none()
            && !self.wanted
            && self.local == Local::Idle
            && !self.unreported_stop
    }
}

/// A [`RegionCore::drain_and_leave`] under way (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
struct Departure {
    /// The bound asked for.
    bound_ms: Millis,
    /// Send `Leave` from then on even if shards still run here.
    leave_at: Millis,
    /// Give up from then on.
    give_up_at: Millis,
    /// How it ended, once it has.
    outcome: Option<Result<(), RegionError>>,
}

/// The session's registration state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    /// No session.
    Down,
    /// A `Register` with this sequence is out.
    Registering { sequence: u64 },
    /// Registered on this session.
    Registered,
}

/// The region's state machine. See the module documentation.
#[derive(Debug)]
pub struct RegionCore<M> {
    config: CoreConfig,
    link: Link,
    /// Send time of recent registrations and heartbeats, by sequence.
    sent: BTreeMap<u64, Millis>,
    next_sequence: u64,
    lease_until: Option<Millis>,
    fenced: bool,
    heartbeat_interval_ms: Millis,
    next_heartbeat: Millis,
    last_heard: Millis,
    shards: BTreeMap<String, ShardEntry<M>>,
    buffered: usize,
    /// Shards whose `asked_at` is set: homes asked and not answered.
    asking: usize,
    /// Shards that needed a home while `asking` was at its bound, in that
    /// order (one may be there twice, or need no home any more by its
    /// turn: each is checked when it comes up).
    waiting: VecDeque<String>,
    leaving: bool,
    /// `Leave` was sent (on some session).
    leave_sent: bool,
    left: bool,
    /// Shutting down or left: nothing starts any more.
    closing: bool,
    /// A drain request to send once registered.
    drain_request: Option<bool>,
    /// A drain-and-leave under way or ended.
    departure: Option<Departure>,
    /// What a call found to do before it failed (the lease ran out in a
    /// `send` the buffers then refused): done first at the next call, so a
    /// fence's stops are never lost.
    deferred: Vec<Action<M>>,
}

impl<M> RegionCore<M> {
    /// A region that has not connected yet.
    pub fn new(config: CoreConfig) -> Self {
        RegionCore {
            config,
            link: Link::Down,
            sent: BTreeMap::new(),
            next_sequence: 1,
            lease_until: None,
            fenced: false,
            heartbeat_interval_ms: 1_000,
            next_heartbeat: 0,
            last_heard: 0,
            shards: BTreeMap::new(),
            buffered: 0,
            asking: 0,
            waiting: VecDeque::new(),
            leaving: false,
            leave_sent: false,
            left: false,
            closing: false,
            drain_request: None,
            departure: None,
            deferred: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    fn address(&self) -> &str {
        &self.config.registration.address
    }

    /// True while registered on the current session.
    pub fn is_registered(&self) -> bool {
        self.link == Link::Registered
    }

    /// True while the region is fenced: its lease ran out and was not renewed since.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// When the lease runs out (if the region ever held one).
    pub fn lease_until(&self) -> Option<Millis> {
        self.lease_until
    }

    /// True once the node let the region go (`LeaveDone`, or `NotRegistered` while leaving).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// True when no shard runs or is stopping.
    pub fn is_idle(&self) -> bool {
        self.shards.values().all(|e| e.local == Local::Idle)
    }

    /// The shards the application runs (started, and not yet stopped), in order.
    pub fn running(&self) -> Vec<String> {
        self.shards.iter().filter(|(_, e)| e.local != Local::Idle).map(|(s, _)| s.clone()).collect()
    }

    /// The epoch a shard runs here at, while it runs (not while stopping).
    pub fn epoch_of(&self, shard: &str) -> Option<u64> {
        self.shards.get(shard).filter(|e| e.local == Local::Running).map(|e| e.epoch)
    }

    /// Messages buffered over all shards.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The cached home of a shard.
    pub fn cached_home(&self, shard: &str) -> Option<&str> {
        self.shards.get(shard).and_then(|e| e.home.as_deref())
    }

    /// True when a message sent to the shard now would be delivered here.
    pub fn delivers_locally(&self, shard: &str) -> bool {
        self.shards.get(shard).is_some_and(|e| e.local == Local::Running && e.home.as_deref() == Some(self.address()))
    }

    fn lease_valid(&self, now: Millis) -> bool {
        !self.fenced && self.lease_until.is_some_and(|until| now < until)
    }

    fn can_ask(&self) -> bool {
        self.link == Link::Registered && !self.fenced && !self.left
    }

    fn entry(&mut self, shard: &str) -> &mut ShardEntry<M> {
        self.shards.entry(shard.to_owned()).or_insert_with(ShardEntry::new)
    }

    fn forget_if_empty(&mut self, shard: &str) {
        if self.shards.get(shard).is_some_and(ShardEntry::is_empty) {
            self.shards.remove(shard);
        }
    }

    fn next_sequence(&mut self, now: Millis) -> u64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.sent.insert(sequence, now);
        while self.sent.len() > SEQUENCE_WINDOW {
            self.sent.pop_first();
        }
        sequence
    }

    fn register(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        let sequence = self.next_sequence(now);
        self.link = Link::Registering { sequence };
        self.forget_asked();
        self.shards.retain(|_, entry| !entry.is_empty());
        out.push(Action::Send(RegionMessage::Register(Register { sequence, ..self.config.registration.clone() })));
    }

    /// Extends the lease to `sent_at + lease_ms`; true when that lifts a fence.
    fn renew(&mut self, sequence: u64, lease_ms: Millis, now: Millis, out: &mut Vec<Action<M>>) -> bool {
        let Some(&sent_at) = self.sent.get(&sequence) else { return false };
        self.sent.retain(|&s, _| s > sequence);
        let until = sent_at.saturating_add(lease_ms);
        self.lease_until = Some(self.lease_until.map_or(until, |old| old.max(until)));
        if self.fenced && now < until {
            self.fenced = false;
            out.push(Action::Publish(Update::LeaseRegained));
            return true;
        }
        false
    }

    /// Fences the region when its lease has run out.
    fn check_lease(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        out.append(&mut self.deferred);
        if self.fenced || self.lease_until.is_none_or(|until| now < until) {
            return;
        }
        warn!(region = %self.address(), "the lease ran out: stopping every shard and forgetting cached homes");
        self.fenced = true;
        let deadline = now.saturating_add(self.config.stop_deadline_ms);
        for (shard, entry) in &mut self.shards {
            entry.home = None;
            if entry.local == Local::Running {
                entry.local = Local::Stopping { deadline, report: false };
                out.push(Action::Stop { shard: shard.clone() });
            }
        }
        self.shards.retain(|_, entry| !entry.is_empty());
        out.push(Action::Publish(Update::Fenced));
    }

    fn ask(&mut self, shard: &str, now: Millis, out: &mut Vec<Action<M>>) {
        if !self.can_ask() {
            return;
        }
        let bound = self.config.max_lookups_in_flight.max(1);
        let asking = self.asking;
        let entry = self.entry(shard);
        if entry.asked_at.is_none() {
            if asking >= bound {
                // Its turn comes with an answer ([`RegionCore::ask_waiting`]).
                if !entry.queued {
                    entry.queued = true;
                    self.waiting.push_back(shard.to_owned());
                }
                return;
            }
            entry.repeats = 0;
            self.asking += 1;
        } else if !entry.deferred {
            entry.repeats = entry.repeats.saturating_add(1);
        }
        let entry = self.entry(shard);
        entry.deferred = false;
        entry.asked_at = Some(now);
        out.push(Action::Send(RegionMessage::GetShardHome { shard: shard.to_owned() }));
    }

    /// The shard's home is no longer awaited.
    fn answered(&mut self, shard: &str) {
        if let Some(entry) = self.shards.get_mut(shard)
            && entry.asked_at.take().is_some()
        {
            self.asking -= 1;
        }
    }

    /// Nothing asked is awaited any more (the session ended or registers
    /// anew, which asks again for every home still needed).
    fn forget_asked(&mut self) {
        for entry in self.shards.values_mut() {
            entry.asked_at = None;
            entry.queued = false;
        }
        self.asking = 0;
        self.waiting.clear();
    }

    /// Asks for the homes that waited their turn, as far as the bound on
    /// lookups in flight allows.
    fn ask_waiting(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        while self.can_ask() && self.asking < self.config.max_lookups_in_flight.max(1) {
            let Some(shard) = self.waiting.pop_front() else { return };
            let Some(entry) = self.shards.get_mut(&shard) else { continue };
            entry.queued = false;
            if entry.needs_home() && entry.asked_at.is_none() {
                self.ask(&shard, now, out);
            }
        }
    }

    /// Asks for every home that is needed and not asked for.
    fn ask_missing(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        if !self.can_ask() {
            return;
        }
        let missing: Vec<String> = self
            .shards
            .iter()
            .filter(|(_, e)| e.needs_home() && e.asked_at.is_none())
            .map(|(s, _)| s.clone())
            .collect();
        for shard in missing {
            self.ask(&shard, now, out);
        }
    }

    /// Stops every running shard without reporting it to the node.
    fn stop_all(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        let deadline = now.saturating_add(self.config.stop_deadline_ms);
        for (shard, entry) in &mut self.shards {
            if entry.local == Local::Running {
                entry.local = Local::Stopping { deadline, report: false };
                if entry.home.as_deref() == Some(self.config.registration.address.as_str()) {
                    entry.home = None;
                }
                out.push(Action::Stop { shard: shard.clone() });
            }
        }
    }

    /// The session is up (the node welcomed the region): register.
    pub fn connected(&mut self, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        self.last_heard = now;
        if !self.left {
            self.register(now, &mut out);
        }
        out
    }

    /// The session is down. The lease keeps running out; cached homes stay
    /// (they are valid while the lease is); outstanding home requests are
    /// asked again after the next registration.
    pub fn disconnected(&mut self, now: Millis, reason: &str) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if self.link == Link::Down {
            return out;
        }
        self.link = Link::Down;
        self.forget_asked();
        self.shards.retain(|_, entry| !entry.is_empty());
        out.push(Action::Publish(Update::Disconnected { reason: reason.to_owned() }));
        out
    }

    /// A message from the node.
    pub fn on_message(&mut self, message: NodeMessage, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if let Err(rule) = message.check_limits() {
            // Nothing of it is believed: hang up (the driver reconnects with
            // a growing delay).
            out.push(Action::Reconnect { reason: format!("protocol violation: {rule}") });
            return out;
        }
        self.last_heard = now;
        match message {
            // The session handles both in its handshake.
            NodeMessage::Welcome { .. } | NodeMessage::Redirect { .. } => {}
            NodeMessage::Refused { reason } => {
                out.push(Action::Publish(Update::Refused { reason: reason.clone() }));
                out.push(Action::Reconnect { reason: format!("the node refused the session: {reason}") });
            }
            NodeMessage::Registered { incarnation, sequence, lease_ms, heartbeat_interval_ms } => {
                self.on_registered(incarnation, sequence, lease_ms, heartbeat_interval_ms, now, &mut out);
            }
            NodeMessage::RegisterRefused { reason } => {
                out.push(Action::Publish(Update::Refused { reason: reason.clone() }));
                out.push(Action::Reconnect { reason: format!("the node refused the registration: {reason}") });
            }
            NodeMessage::HeartbeatAck { incarnation, sequence, lease_ms } => {
                // Also while re-registering: the node granted this lease.
                if incarnation == self.config.registration.incarnation
                    && self.link != Link::Down
                    && self.renew(sequence, lease_ms, now, &mut out)
                {
                    self.ask_missing(now, &mut out);
                }
            }
            NodeMessage::NotRegistered if self.leaving => {
                // The node removes a leaving region before its LeaveDone is
                // out (that waits for a persist), so a NotRegistered can
                // overtake it: the region is gone either way.
                self.finish_leave(now, &mut out);
            }
            NodeMessage::NotRegistered => {
                if !self.left && self.link == Link::Registered {
                    self.register(now, &mut out);
                }
            }
            NodeMessage::ShardHome { shard, home } => self.on_home(&shard, home, 0, now, &mut out),
            NodeMessage::ShardHomeEpoch { shard, home, epoch } => self.on_home(&shard, home, epoch, now, &mut out),
            NodeMessage::ShardRefused { shard, reason } => {
                let dropped = self.shards.get(&shard).map_or(0, |e| e.buffer.len());
                if let Some(entry) = self.shards.get_mut(&shard) {
                    entry.wanted = false;
                }
                let error = DeliveryError::ShardRefused { shard: shard.clone(), reason: reason.clone() };
                self.give_up(&shard, &error, &mut out);
                out.push(Action::Publish(Update::ShardRefused { shard, reason, dropped }));
            }
            NodeMessage::BeginHandOff { shard } => {
                // Messages for the shard wait here from now on; a home
                // request made now is answered when the hand-off ends.
                let mut ask = false;
                if let Some(entry) = self.shards.get_mut(&shard) {
                    entry.home = None;
                    ask = entry.needs_home() && entry.asked_at.is_none();
                    self.forget_if_empty(&shard);
                }
                out.push(Action::Send(RegionMessage::BeginHandOffAck { shard: shard.clone() }));
                if ask {
                    self.ask(&shard, now, &mut out);
                }
            }
            NodeMessage::HandOff { shard } => {
                let deadline = now.saturating_add(self.config.stop_deadline_ms);
                let entry = self.entry(&shard);
                entry.home = None;
                match entry.local {
                    Local::Running => {
                        entry.local = Local::Stopping { deadline, report: true };
                        out.push(Action::Stop { shard });
                    }
                    Local::Stopping { deadline, .. } => entry.local = Local::Stopping { deadline, report: true },
                    Local::Idle => {
                        self.forget_if_empty(&shard);
                        out.push(Action::Send(RegionMessage::ShardStopped { shard }));
                    }
                }
            }
            NodeMessage::PlacementChanged { shard, target } => {
                out.push(Action::Publish(Update::PlacementChanged { shard, target }));
            }
            NodeMessage::LeaveDone => self.finish_leave(now, &mut out),
            NodeMessage::RegionRemoved { address } => self.on_region_removed(address, now, &mut out),
            NodeMessage::ShuttingDown => {
                out.push(Action::Reconnect { reason: "the node is shutting down".to_owned() });
            }
        }
        self.ask_waiting(now, &mut out);
        self.advance_departure(now, &mut out);
        out
    }

    /// Another region was removed: every cached home on it is dropped;
    /// shards with messages waiting (or a home wanted) ask again at once,
    /// the others at their next send.
    fn on_region_removed(&mut self, address: String, now: Millis, out: &mut Vec<Action<M>>) {
        if address == self.address() {
            warn!(%address, "the node says this region was removed; waiting for it to say NotRegistered");
            return;
        }
        let homed: Vec<String> = self
            .shards
            .iter()
            .filter(|(_, e)| e.home.as_deref() == Some(address.as_str()))
            .map(|(s, _)| s.clone())
            .collect();
        for shard in homed {
            let entry = self.entry(&shard);
            entry.home = None;
            if entry.needs_home() && entry.asked_at.is_none() {
                self.ask(&shard, now, out);
            }
            self.forget_if_empty(&shard);
        }
        out.push(Action::Publish(Update::RegionRemoved { address }));
    }

    /// The node let the region go: stop everything, start nothing.
    fn finish_leave(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        if self.leaving && !self.left {
            self.left = true;
            self.closing = true;
            self.stop_all(now, out);
            self.give_up_all(out);
            out.push(Action::Publish(Update::Left));
        }
    }

    /// The region stops: every message still waiting for a home is given
    /// up ([`DeliveryError::RegionStopped`]), in order per shard.
    fn give_up_all(&mut self, out: &mut Vec<Action<M>>) {
        let waiting: Vec<String> =
            self.shards.iter().filter(|(_, e)| !e.buffer.is_empty()).map(|(s, _)| s.clone()).collect();
        for shard in waiting {
            let error = DeliveryError::RegionStopped { shard: shard.clone() };
            self.give_up(&shard, &error, out);
        }
    }

    fn on_registered(
        &mut self,
        incarnation: u64,
        sequence: u64,
        lease_ms: Millis,
        heartbeat_interval_ms: Millis,
        now: Millis,
        out: &mut Vec<Action<M>>,
    ) {
        if incarnation != self.config.registration.incarnation || self.link != (Link::Registering { sequence }) {
            warn!(incarnation, sequence, "ignoring a registration answer that is not for the registration in flight");
            return;
        }
        self.link = Link::Registered;
        self.heartbeat_interval_ms = heartbeat_interval_ms.max(1);
        self.next_heartbeat = now.saturating_add(self.heartbeat_interval_ms);
        out.push(Action::Publish(Update::Registered { incarnation }));
        self.renew(sequence, lease_ms, now, out);
        // Hand-off stops that finished while the session was down.
        let mut reported = Vec::new();
        for (shard, entry) in &mut self.shards {
            if entry.unreported_stop {
                entry.unreported_stop = false;
                reported.push(shard.clone());
            }
        }
        for shard in reported {
            out.push(Action::Send(RegionMessage::ShardStopped { shard: shard.clone() }));
            self.forget_if_empty(&shard);
        }
        if let Some(draining) = self.drain_request.take() {
            out.push(Action::Send(RegionMessage::Drain { draining }));
        }
        self.ask_missing(now, out);
        if self.leaving {
            self.leave_sent = true;
            out.push(Action::Send(RegionMessage::Leave));
        }
    }

    fn on_home(&mut self, shard: &str, home: String, epoch: u64, now: Millis, out: &mut Vec<Action<M>>) {
        let own = home == self.address();
        let may_start = !self.closing && self.lease_valid(now);
        let stop_deadline = now.saturating_add(self.config.stop_deadline_ms);
        self.answered(shard);
        let entry = self.entry(shard);
        if own {
            match entry.local {
                // Not while fenced or closing, nor before the last run
                // stopped: asked again after renewal or the stop.
                _ if !may_start => return self.forget_if_empty(shard),
                Local::Stopping { .. } => return,
                Local::Idle => {
                    entry.local = Local::Running;
                    entry.epoch = epoch;
                    out.push(Action::Start { shard: shard.to_owned(), epoch });
                    out.push(Action::Publish(Update::ShardStarted { shard: shard.to_owned(), epoch }));
                }
                // Homed here again with a greater epoch: the node moved it
                // away and back meanwhile; this run's epoch is stale.
                Local::Running if epoch > entry.epoch => {
                    warn!(%shard, epoch, running = entry.epoch, "the shard runs here with an older epoch: stopping it");
                    entry.local = Local::Stopping { deadline: stop_deadline, report: false };
                    out.push(Action::Stop { shard: shard.to_owned() });
                }
                Local::Running => {}
            }
        } else if entry.local == Local::Running {
            // The node homes it elsewhere: this run is stale.
            warn!(%shard, %home, "the shard runs here but its home is elsewhere: stopping it");
            entry.local = Local::Stopping { deadline: stop_deadline, report: false };
            out.push(Action::Stop { shard: shard.to_owned() });
        }
        entry.wanted = false;
        entry.round_failed = false;
        if entry.failing.as_ref().is_some_and(|f| f.to != home) {
            // A home other than the failing one: a new run of attempts.
            entry.failing = None;
        }
        if entry.home.as_deref() != Some(home.as_str()) {
            entry.home = Some(home.clone());
            out.push(Action::Publish(Update::HomeChanged { shard: shard.to_owned(), home: home.clone() }));
        }
        let flushed = entry.buffer.len();
        entry.returned = 0;
        for message in entry.buffer.drain(..) {
            out.push(if own {
                Action::Deliver { shard: shard.to_owned(), message }
            } else {
                Action::Forward { to: home.clone(), shard: shard.to_owned(), message }
            });
        }
        self.buffered -= flushed;
    }

    /// The application sends `message` to `shard`.
    pub fn send(&mut self, shard: &str, message: M, now: Millis) -> Result<Vec<Action<M>>, SendError> {
        check_shard(shard).map_err(|reason| SendError::InvalidShard { shard: shard.to_owned(), reason })?;
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        self.route_or_defer(shard, message, now, out)
    }

    /// Another region carried `message` for `shard` here. Delivered when the
    /// shard runs here (the sender sent it before the shard's hand-off
    /// began); otherwise routed again like a local send.
    pub fn inbound(&mut self, shard: &str, message: M, now: Millis) -> Result<Vec<Action<M>>, SendError> {
        check_shard(shard).map_err(|reason| SendError::InvalidShard { shard: shard.to_owned(), reason })?;
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if self.shards.get(shard).is_some_and(|e| e.local == Local::Running) {
            out.push(Action::Deliver { shard: shard.to_owned(), message });
            return Ok(out);
        }
        self.route_or_defer(shard, message, now, out)
    }

    /// Routes `message` after the actions in `out`; when routing refuses it,
    /// those actions are kept for the next call instead of being lost.
    fn route_or_defer(
        &mut self,
        shard: &str,
        message: M,
        now: Millis,
        mut out: Vec<Action<M>>,
    ) -> Result<Vec<Action<M>>, SendError> {
        match self.route(shard, message, now, &mut out) {
            Ok(()) => Ok(out),
            Err(error) => {
                self.deferred = out;
                Err(error)
            }
        }
    }

    fn route(&mut self, shard: &str, message: M, now: Millis, out: &mut Vec<Action<M>>) -> Result<(), SendError> {
        let own = self.address().to_owned();
        if let Some(entry) = self.shards.get(shard) {
            match entry.home.as_deref() {
                Some(home) if home == own && entry.local == Local::Running => {
                    out.push(Action::Deliver { shard: shard.to_owned(), message });
                    return Ok(());
                }
                Some(home) if home != own => {
                    out.push(Action::Forward { to: home.to_owned(), shard: shard.to_owned(), message });
                    return Ok(());
                }
                _ => {}
            }
        }
        let queued = self.shards.get(shard).map_or(0, |e| e.buffer.len());
        if queued >= self.config.shard_buffer_limit {
            return Err(SendError::BufferFull { shard: shard.to_owned(), limit: self.config.shard_buffer_limit });
        }
        if self.buffered >= self.config.total_buffer_limit {
            return Err(SendError::TotalBufferFull { limit: self.config.total_buffer_limit });
        }
        let entry = self.entry(shard);
        entry.buffer.push_back(message);
        let ask = entry.asked_at.is_none();
        self.buffered += 1;
        if ask {
            self.ask(shard, now, out);
        }
        Ok(())
    }

    /// Someone wants the shard's home: the cached one, or it is asked for.
    pub fn request_home(&mut self, shard: &str, now: Millis) -> Result<HomeLookup<M>, RegionError> {
        check_shard(shard).map_err(|reason| RegionError::InvalidShard { shard: shard.to_owned(), reason })?;
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if let Some(home) = self.cached_home(shard)
            && out.is_empty()
        {
            return Ok(HomeLookup::Known(home.to_owned()));
        }
        let entry = self.entry(shard);
        entry.wanted = true;
        if entry.home.is_none() && entry.asked_at.is_none() {
            self.ask(shard, now, &mut out);
        }
        Ok(HomeLookup::Asked(out))
    }

    /// The application finished stopping the shard (after a
    /// [`Action::Stop`]). A hand-off's stop is reported to the node.
    pub fn stop_finished(&mut self, shard: &str, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        self.finish_stop(shard, now, &mut out);
        self.advance_departure(now, &mut out);
        out
    }

    fn finish_stop(&mut self, shard: &str, now: Millis, out: &mut Vec<Action<M>>) {
        let connected = self.link != Link::Down;
        let Some(entry) = self.shards.get_mut(shard) else { return };
        let Local::Stopping { report, .. } = entry.local else { return };
        entry.local = Local::Idle;
        if report {
            if connected {
                out.push(Action::Send(RegionMessage::ShardStopped { shard: shard.to_owned() }));
            } else {
                entry.unreported_stop = true;
            }
        }
        out.push(Action::Publish(Update::ShardStopped { shard: shard.to_owned() }));
        if entry.needs_home() && entry.asked_at.is_none() {
            self.ask(shard, now, out);
        }
        self.forget_if_empty(shard);
    }

    /// The transport could not carry these messages (in order) to `to`, at
    /// once or later (`reason` says why): one more failed attempt in the
    /// shard's run. Within [`CoreConfig::forward_attempts`] and
    /// [`CoreConfig::forward_deadline_ms`] they go back to the front of the
    /// shard's buffer, the cached home is dropped and asked for again after
    /// `home_retry_ms`; past either, they and every message waiting for the
    /// shard are given up ([`Action::Undelivered`], in order).
    pub fn forward_failed(
        &mut self,
        shard: &str,
        to: &str,
        messages: Vec<M>,
        reason: &str,
        now: Millis,
    ) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        let count = messages.len();
        let can_ask = self.can_ask();
        let (attempts_limit, deadline) = (self.config.forward_attempts, self.config.forward_deadline_ms);
        self.buffered += count;
        let entry = self.entry(shard);
        if entry.home.as_deref().is_some_and(|home| home != to) {
            warn!(%shard, %to, "a failed forward to a region that is no longer the cached home");
        }
        // Asked again even when another home is cached: the messages given
        // back wait in the buffer, flushed in order by the next answer.
        entry.home = None;
        let failing = entry.failing.get_or_insert_with(|| Failing {
            since: now,
            attempts: 0,
            to: to.to_owned(),
            reason: String::new(),
        });
        if !entry.round_failed {
            failing.attempts += 1;
        }
        entry.round_failed = true;
        failing.to = to.to_owned();
        failing.reason = reason.to_owned();
        let failing = failing.clone();
        for message in messages {
            entry.buffer.insert(entry.returned, message);
            entry.returned += 1;
        }
        if failing.attempts >= attempts_limit {
            let error = DeliveryError::AttemptsExhausted {
                shard: shard.to_owned(),
                to: failing.to,
                attempts: failing.attempts,
                reason: failing.reason,
            };
            self.give_up(shard, &error, &mut out);
        } else if now.saturating_sub(failing.since) >= deadline {
            self.give_up(shard, &deadline_passed(shard, &failing, now), &mut out);
        } else if can_ask && entry.asked_at.is_none() {
            // Asked again after `home_retry_ms` ([`RegionCore::tick`]):
            // the wait holds a place among the lookups in flight.
            entry.asked_at = Some(now);
            entry.repeats = 0;
            entry.deferred = true;
            self.asking += 1;
        }
        self.ask_waiting(now, &mut out);
        out
    }

    /// Gives up every message waiting for `shard`, in order, with `error`;
    /// the shard's next message starts a new run of attempts.
    fn give_up(&mut self, shard: &str, error: &DeliveryError, out: &mut Vec<Action<M>>) {
        self.answered(shard);
        let Some(entry) = self.shards.get_mut(shard) else { return };
        if !entry.buffer.is_empty() {
            warn!(%shard, given_up = entry.buffer.len(), %error, "giving up the shard's waiting messages");
        }
        entry.failing = None;
        entry.returned = 0;
        self.buffered -= entry.buffer.len();
        for message in entry.buffer.drain(..) {
            out.push(Action::Undelivered { shard: shard.to_owned(), message, error: error.clone() });
        }
        self.forget_if_empty(shard);
    }

    /// Time passes: the lease, stop deadlines, heartbeats, the node's
    /// silence and home requests to repeat. `metrics` is called only when
    /// a heartbeat is due.
    pub fn tick(&mut self, now: Millis, metrics: impl FnOnce() -> BTreeMap<String, f64>) -> Vec<Action<M>> {
        self.tick_with_load(now, metrics, |_| None)
    }

    /// [`RegionCore::tick`], with a load report after each heartbeat:
    /// `load` is called only when a heartbeat is due, with what tells the
    /// shards running here (running or stopping) from the others, and its
    /// report (if any) is sent right after the heartbeat.
    pub fn tick_with_load(
        &mut self,
        now: Millis,
        metrics: impl FnOnce() -> BTreeMap<String, f64>,
        load: impl FnOnce(&dyn Fn(&str) -> bool) -> Option<LoadReport>,
    ) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        let late: Vec<String> = self
            .shards
            .iter()
            .filter(|(_, e)| matches!(e.local, Local::Stopping { deadline, .. } if deadline <= now))
            .map(|(s, _)| s.clone())
            .collect();
        for shard in late {
            warn!(%shard, deadline_ms = self.config.stop_deadline_ms, "the application did not stop the shard in time; reporting it stopped anyway");
            out.push(Action::AbandonStop { shard: shard.clone() });
            self.finish_stop(&shard, now, &mut out);
        }
        let deadline = self.config.forward_deadline_ms;
        let overdue: Vec<(String, Failing)> = self
            .shards
            .iter()
            .filter_map(|(s, e)| e.failing.as_ref().map(|f| (s, f)))
            .filter(|(_, f)| now.saturating_sub(f.since) >= deadline)
            .map(|(s, f)| (s.clone(), f.clone()))
            .collect();
        for (shard, failing) in overdue {
            self.give_up(&shard, &deadline_passed(&shard, &failing, now), &mut out);
        }
        if self.link == Link::Registered && now >= self.next_heartbeat {
            let sequence = self.next_sequence(now);
            self.next_heartbeat = now.saturating_add(self.heartbeat_interval_ms);
            out.push(Action::Send(RegionMessage::Heartbeat { sequence, metrics: metrics() }));
            let runs = |shard: &str| self.shards.get(shard).is_some_and(|e| e.local != Local::Idle);
            if let Some(report) = load(&runs) {
                out.push(Action::Send(RegionMessage::Load(report)));
            }
        }
        if self.link != Link::Down {
            let limit = match self.link {
                // Three missed acknowledgements: a paused or cut-off node is
                // left well within the lease, so a failover costs no shard.
                Link::Registered => self.heartbeat_interval_ms.saturating_mul(3).max(MIN_SILENCE_MS),
                _ => self.config.response_timeout_ms,
            };
            let silent = now.saturating_sub(self.last_heard);
            if silent >= limit {
                self.last_heard = now;
                out.push(Action::Reconnect { reason: format!("the node has been silent for {silent} ms") });
            }
        }
        if self.can_ask() {
            let retry = self.config.home_retry_ms;
            let due: Vec<String> = self
                .shards
                .iter()
                .filter(|(_, e)| {
                    let wait = retry.saturating_mul(1 << e.repeats.min(MAX_RETRY_DOUBLINGS));
                    e.needs_home() && e.asked_at.is_some_and(|at| now >= at.saturating_add(wait))
                })
                .map(|(s, _)| s.clone())
                .collect();
            for shard in due {
                self.ask(&shard, now, &mut out);
            }
            self.ask_waiting(now, &mut out);
        }
        self.advance_departure(now, &mut out);
        out
    }

    /// The region wants to leave: `Leave` now if registered, else after the
    /// next registration. The node hands its shards off, then answers
    /// `LeaveDone`.
    pub fn leave(&mut self, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if self.left || self.leaving {
            return out;
        }
        self.start_leaving(&mut out);
        out
    }

    fn start_leaving(&mut self, out: &mut Vec<Action<M>>) {
        self.leaving = true;
        if self.link == Link::Registered {
            self.leave_sent = true;
            out.push(Action::Send(RegionMessage::Leave));
        }
    }

    /// The region drains, then leaves, within `bound_ms` (see the module
    /// documentation). Ignored when the region already leaves, has left or
    /// departs. Its end is [`RegionCore::departure`].
    pub fn drain_and_leave(&mut self, bound_ms: Millis, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if self.left || self.leaving || self.departure.is_some() {
            return out;
        }
        self.departure = Some(Departure {
            bound_ms,
            leave_at: now.saturating_add(bound_ms / 2),
            give_up_at: now.saturating_add(bound_ms),
            outcome: None,
        });
        out.extend(self.request_drain(true, now));
        self.advance_departure(now, &mut out);
        out
    }

    /// How a [`RegionCore::drain_and_leave`] ended: `None` while it runs (or
    /// when none was asked for), `Ok` once the node let the region go, the
    /// error once the bound passed first (the shards still running were
    /// told to stop: wait for [`RegionCore::is_idle`]).
    pub fn departure(&self) -> Option<&Result<(), RegionError>> {
        self.departure.as_ref().and_then(|d| d.outcome.as_ref())
    }

    /// Moves a drain-and-leave on: done once left; `Leave` once nothing
    /// runs here (or at half the bound); gives up at the bound.
    fn advance_departure(&mut self, now: Millis, out: &mut Vec<Action<M>>) {
        let Some(departure) = &self.departure else { return };
        if departure.outcome.is_some() {
            return;
        }
        let (bound_ms, leave_at, give_up_at) = (departure.bound_ms, departure.leave_at, departure.give_up_at);
        let outcome = if self.left {
            Ok(())
        } else if now >= give_up_at {
            let shards = self.running();
            let leave_asked = self.leave_sent;
            warn!(
                region = %self.address(),
                bound_ms,
                running = shards.len(),
                leave_asked,
                "the region did not drain and leave within its bound: stopping what still runs"
            );
            if leave_asked && self.link == Link::Registered {
                // Leaving, it gets no new shards; undrained, a restart at
                // this address is not left draining.
                out.push(Action::Send(RegionMessage::Drain { draining: false }));
            }
            self.closing = true;
            self.stop_all(now, out);
            self.give_up_all(out);
            Err(RegionError::DrainAndLeaveTimedOut { bound: Duration::from_millis(bound_ms), shards, leave_asked })
        } else {
            if !self.leaving && (self.is_idle() || now >= leave_at) {
                self.start_leaving(out);
            }
            return;
        };
        if let Some(departure) = &mut self.departure {
            departure.outcome = Some(outcome);
        }
    }

    /// The region shuts down without leaving: every running shard stops
    /// and nothing starts any more.
    pub fn shutdown(&mut self, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        self.closing = true;
        self.stop_all(now, &mut out);
        self.give_up_all(&mut out);
        out
    }

    /// Asks the node to drain (`true`) or undrain (`false`) this region; sent
    /// once, now or after the next registration.
    pub fn request_drain(&mut self, draining: bool, now: Millis) -> Vec<Action<M>> {
        let mut out = Vec::new();
        self.check_lease(now, &mut out);
        if self.link == Link::Registered {
            self.drain_request = None;
            out.push(Action::Send(RegionMessage::Drain { draining }));
        } else {
            self.drain_request = Some(draining);
        }
        out
    }
}

/// The core's tests: the scenarios of `contracts/region-core/`.
#[cfg(test)]
#[path = "core_scenarios.rs"]
mod scenarios;
