//! The election on etcd. A node campaigns by creating the leader key
//! (`{prefix}leader`, its identity as JSON) under a lease of exactly
//! `--leader-lease-s` seconds, in a transaction that succeeds only when no
//! key exists. The key's create revision is the leader's term and its
//! fencing revision: every store write compares it ([`Fence`]).
//!
//! The known pitfalls of etcd elections, and what is done about each:
//!
//! - a keep-alive stream that fails or ends silently: it is opened again
//!   while the lease clock holds; an answer of TTL 0: the lease is lost at
//!   once;
//! - renewals that stop arriving without an error: the [`LeaseClock`] runs
//!   out at *send time of the last renewal + TTL* (never later than etcd's
//!   own expiry) and the driver checks it before releasing every turn;
//! - a campaign that returns after its lease already expired: the win is
//!   checked against the time the lease was granted and given up if late;
//! - a leader key that disappears (or is re-created by another node) while
//!   this process is paused: every write is fenced on the key's create
//!   revision, and the key is re-read every [`LEADER_POLL`];
//! - a commit refused by the fence: the driver ends with the error, and
//!   this node steps down.
//!
//! Stepping down stops the driver at once (its sessions end; nothing it
//! could not persist is revealed), detaches the node's driver handle, and
//! campaigns again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shardalloc_etcd::{Client, ops};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::backoff::start_backoff;
use super::claim::{self, ClusterSecret};
use super::renewal::keep_alive;
use super::{NodeIdentity, Role};
use crate::server::driver::lease::LeaseClock;
use crate::server::driver::{DriverError, DriverHandle, Input};
use crate::server::metrics::{LeadershipChange, Metrics};
use crate::server::throttle::Throttle;
use crate::store::EtcdStore;
use crate::store::etcd::Fence;

/// How often a follower reads the leader key (a campaign follows at once
/// when it is gone).
pub const POLL: Duration = Duration::from_millis(100);

/// How often a leader checks that the key is still its own.
pub const LEADER_POLL: Duration = Duration::from_millis(250);

/// How a leadership ended.
enum Led {
    /// The node shuts down.
    Shutdown,
    /// The lease, the key or the driver was lost: campaign again.
    Lost,
    /// The driver could not start: campaign again after a pause.
    CannotStart(String),
}

/// What the election keeps between polls: its repeated warnings, each
/// rate-limited, and the leader key whose lease it last found alive.
#[derive(Default)]
struct Polls {
    unreachable: Throttle,
    stale_key: Throttle,
    unverified: Throttle,
    cannot_start: Throttle,
    /// (create revision, lease) of the leader key last found with a live
    /// lease. etcd deletes a key with its lease, so while the same key
    /// stands its lease is alive: asked once per key, not every poll.
    alive: Option<(i64, i64)>,
}

/// Starts a driver under a lease: loads the store and returns the
/// driver's handle and thread (blocking; run on a blocking thread). The
/// second argument is the term won.
pub type StartDriver = Arc<
    dyn Fn(LeaseClock, u64) -> Result<(DriverHandle, std::thread::JoinHandle<Result<(), DriverError>>), DriverError>
        + Send
        + Sync,
>;

/// One node's part in the election. See the module documentation.
pub struct Election {
    /// The store (its fence is set while leading).
    pub store: Arc<EtcdStore>,
    /// This node.
    pub me: NodeIdentity,
    /// The secret that signs this node's leader claims and checks others'.
    pub secret: ClusterSecret,
    /// The leader lease's TTL, whole seconds.
    pub lease_ttl: Duration,
    /// Where the role is published.
    pub role: watch::Sender<Role>,
    /// The node's driver handle: replaced while leading, detached otherwise.
    pub driver: DriverHandle,
    /// Starts a driver.
    pub start: StartDriver,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Cancelled when the node shuts down.
    pub shutdown: CancellationToken,
}

/// A won campaign.
struct Won {
    lease: i64,
    term: i64,
    clock: LeaseClock,
    /// The lease etcd granted (at least `--leader-lease-s`).
    ttl: Duration,
}

fn etcd_error(error: shardalloc_etcd::Error) -> String {
    error.to_string()
}

impl Election {
    fn key(&self) -> String {
        self.store.keys().leader()
    }

    fn client(&self) -> Client {
        self.store.client()
    }

    fn publish(&self, role: Role) {
        self.metrics.term.set(role.term as i64);
        self.metrics.leader.set(i64::from(role.leading));
        self.role.send_if_modified(|current| {
            let changed = *current != role;
            *current = role;
            changed
        });
    }

    /// Campaigns, leads, steps down and campaigns again until shutdown.
    /// What keeps this node from leading or knowing a leader is published
    /// with the role (`/readyz` says it); repeated warnings are throttled.
    pub async fn run(self) {
        let mut polls = Polls::default();
        let mut failures = 0;
        loop {
            if self.shutdown.is_cancelled() {
                return;
            }
            let pause = match self.campaign(&mut polls).await {
                Ok(Some(won)) => match self.lead(won).await {
                    Led::Shutdown => return,
                    Led::Lost => {
                        failures = 0;
                        POLL
                    }
                    Led::CannotStart(reason) => {
                        failures += 1;
                        let pause = start_backoff(failures);
                        if let Some(left_out) = polls.cannot_start.allow(Instant::now()) {
                            tracing::error!(
                                %reason, failures, ?pause, left_out,
                                "this node won the election but cannot start its driver; campaigning again after a pause"
                            );
                        }
                        let trouble = format!(
                            "this node won the election but cannot start ({failures} time(s) in a row): {reason}; \
                             it campaigns again in {} s",
                            pause.as_secs_f64()
                        );
                        self.publish_trouble(trouble);
                        pause
                    }
                },
                Ok(None) => {
                    polls.unreachable.reset();
                    POLL
                }
                Err(error) => {
                    if let Some(left_out) = polls.unreachable.allow(Instant::now()) {
                        tracing::warn!(%error, left_out, "cannot reach etcd for the election; the leader is unknown");
                    }
                    self.publish_trouble(format!("cannot reach etcd: {error}"));
                    POLL
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.cancelled() => return,
            }
        }
    }

    /// No leader is known, for the reason given.
    fn publish_trouble(&self, trouble: String) {
        let term = self.role.borrow().term;
        self.publish(Role { term, leader: None, leading: false, trouble: Some(trouble) });
    }

    /// True when `lease` (a key's) is alive: a key without a lease, or whose
    /// lease has expired, names no leader.
    async fn lease_alive(&self, client: &Client, lease: i64) -> Result<bool, String> {
        if lease == 0 {
            return Ok(false);
        }
        Ok(client.lease_time_to_live(lease).await.map_err(etcd_error)?.ttl > 0)
    }

    /// Reads the leader key; when there is none, tries to create it.
    async fn campaign(&self, polls: &mut Polls) -> Result<Option<Won>, String> {
        let client = self.client();
        let key = self.key();
        let found = client.range(ops::range(key.clone())).await.map_err(etcd_error)?;
        if let Some(kv) = found.kvs.first() {
            let known = polls.alive == Some((kv.create_revision, kv.lease));
            if known || self.lease_alive(&client, kv.lease).await? {
                polls.alive = Some((kv.create_revision, kv.lease));
                polls.stale_key.reset();
                self.follow(&kv.value, kv.create_revision, kv.lease, polls);
                return Ok(None);
            }
            // Written without a lease, or restored from a backup: no node
            // holds it, so none would ever replace it. Removed, unless it
            // changed meanwhile; the next campaign elects a leader.
            if let Some(left_out) = polls.stale_key.allow(Instant::now()) {
                tracing::warn!(
                    %key, lease = kv.lease, left_out,
                    "the leader key has no live lease (written without one, or restored from a backup): it names no \
                     leader; removing it"
                );
            }
            let remove = ops::txn(vec![ops::modified_at(key.clone(), kv.mod_revision)], vec![ops::delete(key)], vec![]);
            client.txn(remove).await.map_err(etcd_error)?;
            self.publish_trouble("the leader key had no live lease and was removed; electing a leader".into());
            return Ok(None);
        }
        let ttl = self.lease_ttl.as_secs().max(1) as i64;
        let granted_at = Instant::now();
        let grant = client.lease_grant(ttl).await.map_err(etcd_error)?;
        let lease = grant.id;
        if grant.ttl > ttl {
            tracing::warn!(
                asked = ttl,
                granted = grant.ttl,
                "etcd granted a longer leader lease than --leader-lease-s: its minimum is 1.5 × its election \
                 timeout; a dead leader is replaced within the granted lease"
            );
        }
        let me = claim::claim(&self.me, lease, &self.secret);
        let txn = ops::txn(
            vec![ops::created_at(key.clone(), 0)],
            vec![ops::put_with_lease(key.clone(), me, lease)],
            vec![ops::get(key.clone())],
        );
        let response = client.txn(txn).await.map_err(etcd_error)?;
        if !response.succeeded {
            let _ = client.lease_revoke(lease).await;
            if let Some(kv) = ops::txn_reads(&response).flatten().next() {
                self.follow(&kv.value, kv.create_revision, kv.lease, polls);
            }
            return Ok(None);
        }
        let term = ops::revision_of(response.header.as_ref());
        // etcd's expiry is never earlier than the grant's send time plus
        // the TTL it granted (which is never shorter than the one asked).
        let granted = Duration::from_secs(grant.ttl.max(1) as u64);
        if granted_at.elapsed() >= granted {
            // Won with a lease that may already be gone: give it up.
            tracing::warn!(term, "won the election too late for its lease; campaigning again");
            let _ = client.lease_revoke(lease).await;
            return Ok(None);
        }
        let clock = LeaseClock::new();
        clock.extend_to(granted_at + granted);
        self.metrics.leader_lease_seconds.set(grant.ttl);
        Ok(Some(Won { lease, term, clock, ttl: granted }))
    }

    /// Follows the leader the key's `value` (under `lease`) names, once its
    /// claim verifies; a claim that does not names no leader (this node
    /// forwards nothing, and no token, to it).
    fn follow(&self, value: &[u8], term: i64, lease: i64, polls: &mut Polls) {
        match claim::verify(value, lease, &self.secret) {
            Ok(leader) => {
                polls.unverified.reset();
                self.publish(Role { term: term as u64, leader: Some(leader), leading: false, trouble: None })
            }
            Err(trouble) => {
                if let Some(left_out) = polls.unverified.allow(Instant::now()) {
                    tracing::warn!(%trouble, left_out, "the leader key names no leader of this cluster");
                }
                self.publish(Role { term: term as u64, leader: None, leading: false, trouble: Some(trouble) });
            }
        }
    }

    /// Leads until the lease or the driver is lost, the driver cannot
    /// start, or the node shuts down.
    async fn lead(&self, won: Won) -> Led {
        let Won { lease, term, clock, ttl } = won;
        tracing::info!(term, name = %self.me.name, "this node leads");
        self.metrics.leadership_changed(LeadershipChange::Won);
        self.store.set_fence(Some(Fence { key: self.key(), create_revision: term }));
        let lost = CancellationToken::new();
        let keeper = tokio::spawn(keep_alive(self.client(), lease, ttl, clock.clone(), lost.clone()));
        let start = self.start.clone();
        let starting = clock.clone();
        let started = tokio::task::spawn_blocking(move || start(starting, term as u64)).await;
        let (handle, thread) = match started {
            Ok(Ok(started)) => started,
            Ok(Err(error)) => {
                self.step_down(lease, term, &clock, keeper, None).await;
                return Led::CannotStart(error.to_string());
            }
            Err(error) => {
                self.step_down(lease, term, &clock, keeper, None).await;
                return Led::CannotStart(format!("the driver's start panicked: {error}"));
            }
        };
        self.driver.replace(&handle);
        self.publish(Role { term: term as u64, leader: Some(self.me.clone()), leading: true, trouble: None });
        let reason = loop {
            tokio::select! {
                _ = lost.cancelled() => break "the leader lease was lost",
                _ = tokio::time::sleep_until(clock.deadline().into()) => {
                    if !clock.valid() {
                        break "the leader lease ran out";
                    }
                }
                _ = handle.stopped() => break "the driver stopped",
                _ = self.shutdown.cancelled() => {
                    let _ = handle.send(Input::Shutdown).await;
                    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                    self.resign(lease, term).await;
                    keeper.abort();
                    self.driver.replace(&DriverHandle::detached());
                    return Led::Shutdown;
                }
                _ = tokio::time::sleep(LEADER_POLL) => {
                    if !self.still_ours(term).await {
                        break "the leader key is gone or another node's";
                    }
                }
            }
        };
        tracing::warn!(term, reason, "this node stops leading");
        self.step_down(lease, term, &clock, keeper, Some((handle, thread))).await;
        Led::Lost
    }

    async fn still_ours(&self, term: i64) -> bool {
        match self.client().range(ops::range(self.key())).await {
            Ok(found) => found.kvs.first().is_some_and(|kv| kv.create_revision == term),
            // etcd unreachable: the lease clock decides.
            Err(_) => true,
        }
    }

    async fn step_down(
        &self,
        lease: i64,
        term: i64,
        clock: &LeaseClock,
        keeper: tokio::task::JoinHandle<()>,
        driver: Option<(DriverHandle, std::thread::JoinHandle<Result<(), DriverError>>)>,
    ) {
        clock.expire();
        keeper.abort();
        self.driver.replace(&DriverHandle::detached());
        self.metrics.leadership_changed(LeadershipChange::Lost);
        self.publish(Role { term: term as u64, leader: None, leading: false, trouble: None });
        if let Some((handle, thread)) = driver {
            // The expired clock makes its next turn fail before it releases
            // anything; a driver stuck in a commit ends when etcd answers or
            // the request times out. Not waited for: the campaign goes on.
            let _ = handle.try_send(Input::Shutdown);
            tokio::task::spawn_blocking(move || thread.join());
        }
        self.resign(lease, term).await;
        self.store.set_fence(None);
    }

    /// Gives the key up, if it is still this term's, so others win at once.
    async fn resign(&self, lease: i64, term: i64) {
        let client = self.client();
        let key = self.key();
        let txn = ops::txn(vec![ops::created_at(key.clone(), term)], vec![ops::delete(key)], Vec::new());
        let _ = tokio::time::timeout(Duration::from_secs(2), client.txn(txn)).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), client.lease_revoke(lease)).await;
    }
}
