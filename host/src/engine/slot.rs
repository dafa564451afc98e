//! Strategy slots, one per entity type: the active strategy behind an
//! atomic pointer, its activation history, rollback (by hand and
//! automatic), the shadow candidate and the counters.
//!
//! **Changes are reported, not polled.** Every activation after the first
//! (an operator's, a rollback, an automatic rollback) is sent as an
//! [`ActivationChanged`] to the channel given to [`Slot::report_changes`],
//! so the node records each in its history in one place, whatever caused it.
//!
//! **Swap guarantee.** Activating validates the candidate first (it must
//! instantiate and accept its configuration), so a failed activation leaves
//! the active strategy in place. The swap itself is one atomic pointer
//! store. Callers hold a [`SlotHandle`]; each call loads the pointer once,
//! so a call in flight finishes on the instance it started with and the
//! next call takes the new activation's instance. No call fails or waits
//! because of a swap.
//!
//! **No cold first call.** The instance that validated an activation is
//! kept in it, warmed before the swap: configured, given the most recent
//! topology the slot's callers used, and asked one allocation on that view
//! (its answer is discarded). The first caller after the swap takes that
//! instance, so its first production call is as fast as its hundredth.
//! A contract 0.2 instance keeps a copy of the caller's shard table, which
//! the slot cannot keep between calls; the node's driver therefore warms on
//! its coordinator's current view ([`Slot::activate_on`]), and the first
//! call only applies the table's batches since.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};

use super::Engine;
use super::component::{Compiled, LoadError};
use super::instance::Sandboxed;
use super::limits::Limits;
use crate::clock::{Clocks, SystemClocks};
pub use crate::strategy::ActivationCause;
use crate::strategy::table::ShardTable;
use crate::strategy::{AllocationStrategy, ClusterView, Info, RebalanceMove, StrategyError};
use shardalloc_proto::protocol::Millis;

/// How many past activations a slot remembers: the activation history's
/// one limit.
pub use crate::strategy::ACTIVATION_HISTORY as HISTORY_LIMIT;

/// One activation of a strategy in a slot.
#[derive(Debug)]
pub struct Activation {
    /// Unique within the process, increasing.
    pub id: u64,
    /// The compiled component.
    pub compiled: Arc<Compiled>,
    /// Its configuration (JSON text).
    pub config: String,
    /// Its sandbox limits.
    pub limits: Limits,
    /// Why it was activated.
    pub cause: ActivationCause,
    /// When, on the wall clock (milliseconds since the Unix epoch): shown to
    /// people, never compared.
    pub at: Millis,
    /// The validated, warmed instance, until the first caller takes it.
    warm: Mutex<Option<Sandboxed>>,
}

impl Activation {
    /// `name@version`.
    pub fn label(&self) -> String {
        format!("{}@{}", self.compiled.info.name, self.compiled.info.version)
    }
}

static NEXT_ACTIVATION: AtomicU64 = AtomicU64::new(1);

/// A slot's active strategy changed.
#[derive(Debug, Clone)]
pub struct ActivationChanged {
    /// The slot's entity type.
    pub entity_type: String,
    /// The new active activation (its `cause` says why).
    pub activation: Arc<Activation>,
}

/// When a new activation (by an operator) is rolled back automatically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoRollback {
    /// More rejected answers than this within `window`…
    pub max_faults: u32,
    /// …counted over this sliding window, roll back. `max_faults == 0`
    /// disables automatic rollback.
    pub window: Duration,
}

impl Default for AutoRollback {
    fn default() -> Self {
        AutoRollback { max_faults: 5, window: Duration::from_secs(60) }
    }
}

/// Why a rollback could not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollbackError {
    /// Nothing was active before the current activation.
    #[error("there is no previous strategy to roll back to")]
    NoPrevious,
    /// The previous strategy no longer loads.
    #[error("the previous strategy cannot be activated again: {0}")]
    Load(#[from] LoadError),
}

/// The slot's counters, as numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SlotStats {
    /// Answers not used, by `name@version` and reason.
    pub fallbacks: BTreeMap<String, BTreeMap<String, u64>>,
    /// Activations, rollbacks included.
    pub activations: u64,
    /// Automatic rollbacks.
    pub auto_rollbacks: u64,
    /// Decisions the current shadow candidate was asked about (from 0 at
    /// each new candidate).
    pub shadow_calls: u64,
    /// Decisions where the current shadow disagreed with the active strategy.
    pub shadow_disagreements: u64,
    /// Past shadow candidates' counts, oldest first, at most
    /// [`MAX_SHADOW_HISTORY`].
    pub shadow_history: VecDeque<ShadowCounts>,
    /// Times a caller found no warmed instance waiting and made a cold one
    /// (a second caller of one activation, or one after a fault).
    pub cold_instances: u64,
}

/// Most past shadow candidates whose counts a slot keeps.
pub const MAX_SHADOW_HISTORY: usize = 16;

/// What one shadow candidate saw, kept when it was replaced or cleared.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShadowCounts {
    /// The candidate, `name@version`.
    pub candidate: String,
    /// Decisions it was asked about.
    pub calls: u64,
    /// Decisions where it disagreed with the active strategy.
    pub disagreements: u64,
}

#[derive(Default)]
struct Faults {
    activation: u64,
    /// When each counted fault happened, on the slot's monotonic clock.
    times: VecDeque<Millis>,
}

/// One entity type's strategy slot.
pub struct Slot {
    type_name: String,
    engine: Arc<Engine>,
    policy: AutoRollback,
    active: ArcSwap<Activation>,
    shadow: ArcSwapOption<Activation>,
    history: Mutex<Vec<Arc<Activation>>>,
    faults: Mutex<Faults>,
    stats: Mutex<SlotStats>,
    changes: OnceLock<Sender<ActivationChanged>>,
    /// The latest view a caller allocated on (refreshed when its topology
    /// generation changes), to warm new activations on.
    recent_view: Mutex<Option<ClusterView>>,
    /// Instances callers swapped out, dropped on the next activation rather
    /// than on a caller's first call after the swap (returning a store's
    /// memory to the pool costs tens of microseconds).
    retired: Mutex<Vec<Sandboxed>>,
    /// The node's clocks: the auto-rollback window on the monotonic one,
    /// activation times on the wall clock (`crate::clock`).
    clocks: Arc<dyn Clocks>,
}

/// Most swapped-out instances kept for dropping later; beyond it the caller
/// drops the oldest itself.
pub const MAX_RETIRED: usize = 8;

/// The shard id of the allocation that warms a new instance.
pub const WARM_UP_SHARD: &str = "shardalloc-warm-up";

impl Slot {
    /// A slot with its first strategy, validated by instantiating it, on
    /// the system's clocks.
    pub fn new(
        type_name: impl Into<String>,
        engine: Arc<Engine>,
        policy: AutoRollback,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
    ) -> Result<Arc<Self>, LoadError> {
        Self::clocked(type_name, engine, policy, compiled, config, limits, Arc::new(SystemClocks::new()))
    }

    /// [`Slot::new`] on `clocks`: the node's own (the driver passes its
    /// clocks, so one clock times leases and the auto-rollback window), or
    /// a test's manual ones.
    pub fn clocked(
        type_name: impl Into<String>,
        engine: Arc<Engine>,
        policy: AutoRollback,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
        clocks: Arc<dyn Clocks>,
    ) -> Result<Arc<Self>, LoadError> {
        let instance = engine.instantiate(&compiled, config, limits)?;
        let first = Arc::new(activation(compiled, config, limits, ActivationCause::Initial, instance, clocks.wall()));
        Ok(Arc::new(Slot {
            type_name: type_name.into(),
            engine,
            policy,
            active: ArcSwap::new(first.clone()),
            shadow: ArcSwapOption::empty(),
            history: Mutex::new(vec![first]),
            faults: Mutex::new(Faults::default()),
            stats: Mutex::new(SlotStats { activations: 1, ..SlotStats::default() }),
            changes: OnceLock::new(),
            recent_view: Mutex::new(None),
            retired: Mutex::new(Vec::new()),
            clocks,
        }))
    }

    /// Sends every later change of the active strategy to `to`. Set once;
    /// a second call is ignored.
    pub fn report_changes(&self, to: Sender<ActivationChanged>) {
        let _ = self.changes.set(to);
    }

    /// The entity type this slot serves.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The active activation.
    pub fn active(&self) -> Arc<Activation> {
        self.active.load_full()
    }

    /// Every activation, oldest first (at most [`HISTORY_LIMIT`]).
    pub fn history(&self) -> Vec<Arc<Activation>> {
        self.history.lock().expect("history lock").clone()
    }

    /// The counters.
    pub fn stats(&self) -> SlotStats {
        self.stats.lock().expect("stats lock").clone()
    }

    /// Validates and activates a strategy. On error the active one stays.
    pub fn activate(
        &self,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
    ) -> Result<Arc<Activation>, LoadError> {
        self.activate_on(compiled, config, limits, ActivationCause::Operator, None)
    }

    /// Validates and activates a strategy recorded with `cause` (an
    /// operator's, or a rollback to an activation the slot no longer
    /// remembers: one from before a restart, kept in the node's store),
    /// warming the new instance on `view` when one is given: the caller's
    /// current view, shard table and all, so a contract 0.2 instance starts
    /// with a copy of the very table later calls lend, and its first call
    /// brings it up to date from the table's journal instead of loading the
    /// whole view (see [`Slot::warmed`]). On error the active one stays.
    pub fn activate_on(
        &self,
        compiled: Arc<Compiled>,
        config: &str,
        limits: Limits,
        cause: ActivationCause,
        view: Option<&ClusterView>,
    ) -> Result<Arc<Activation>, LoadError> {
        let instance = self.warmed(&compiled, config, limits, view)?;
        Ok(self.install(activation(compiled, config, limits, cause, instance, self.clocks.wall())))
    }

    /// Instantiates and configures a candidate (its validation) and warms
    /// it with one allocation (its answer discarded) on `view`, else on the
    /// most recent view a caller allocated on. That one keeps no shards (a
    /// caller's table is never kept past its call, so the coordinator can
    /// go on changing it in place): a 0.2 instance warmed on it loads the
    /// whole view at its first real call, on the caller's thread. Callers
    /// that have the current view (the node's driver, which activates) pass
    /// it, so that cost is paid here instead.
    /// A warm-up call the strategy refuses or faults on is logged, not an
    /// error: the same view may not be what it will be asked about.
    fn warmed(
        &self,
        compiled: &Arc<Compiled>,
        config: &str,
        limits: Limits,
        view: Option<&ClusterView>,
    ) -> Result<Sandboxed, LoadError> {
        drop(std::mem::take(&mut *self.retired.lock().expect("retired lock")));
        let mut instance = self.engine.instantiate(compiled, config, limits)?;
        let recent = match view {
            Some(_) => None,
            None => self.recent_view.lock().expect("recent view lock").clone(),
        };
        if let Some(view) = view.or(recent.as_ref())
            && let Err(error) = instance.allocate(view, WARM_UP_SHARD, None)
        {
            tracing::warn!(r#type = %self.type_name, strategy = %compiled.info.name, "warm-up allocation failed: {error}");
        }
        Ok(instance)
    }

    /// Keeps an instance a caller swapped out, to drop it off the call path.
    fn retire(&self, instance: Sandboxed) {
        let oldest = {
            let mut retired = self.retired.lock().expect("retired lock");
            retired.push(instance);
            (retired.len() > MAX_RETIRED).then(|| retired.remove(0))
        };
        drop(oldest);
    }

    /// Remembers `view` as the one to warm new activations on: its
    /// topology, metrics and counts, with a shard table of its own holding
    /// no shards (the caller's table is never kept past its call, so the
    /// coordinator can keep changing it in place).
    fn note_view(&self, view: &ClusterView) {
        let table = ShardTable::new(view.topology(), view.metrics().to_vec());
        let latest =
            ClusterView::for_allocation(view.topology().clone(), view.metrics().to_vec(), view.shard_counts().to_vec())
                .expect("the parts of a consistent view")
                .with_table(Arc::new(table));
        *self.recent_view.lock().expect("recent view lock") = Some(latest);
    }

    fn install(&self, new: Activation) -> Arc<Activation> {
        let new = Arc::new(new);
        {
            let mut history = self.history.lock().expect("history lock");
            history.push(new.clone());
            if history.len() > HISTORY_LIMIT {
                let excess = history.len() - HISTORY_LIMIT;
                history.drain(..excess);
            }
        }
        let previous = self.active.swap(new.clone());
        // A superseded activation no caller took keeps no instance alive.
        drop(previous.warm.lock().expect("warm instance lock").take());
        self.stats.lock().expect("stats lock").activations += 1;
        if let Some(changes) = self.changes.get() {
            let change = ActivationChanged { entity_type: self.type_name.clone(), activation: new.clone() };
            // A receiver that is gone has nothing left to record.
            let _ = changes.send(change);
        }
        tracing::info!(r#type = %self.type_name, strategy = %new.label(), digest = %new.compiled.digest, cause = ?new.cause, "strategy activated");
        new
    }

    /// Activates again the strategy that was active before the current one.
    pub fn rollback(&self) -> Result<Arc<Activation>, RollbackError> {
        self.rollback_on(None)
    }

    /// [`Slot::rollback`], warming the instance on `view` when one is given
    /// (as [`Slot::activate_on`] does).
    pub fn rollback_on(&self, view: Option<&ClusterView>) -> Result<Arc<Activation>, RollbackError> {
        self.rollback_with(ActivationCause::Rollback, view)
    }

    fn rollback_with(
        &self,
        cause: ActivationCause,
        view: Option<&ClusterView>,
    ) -> Result<Arc<Activation>, RollbackError> {
        let current = self.active();
        let previous = {
            let history = self.history.lock().expect("history lock");
            let position = history.iter().rposition(|a| a.id == current.id).ok_or(RollbackError::NoPrevious)?;
            // The latest earlier activation of a different strategy or config.
            history[..position]
                .iter()
                .rev()
                .find(|a| a.compiled.digest != current.compiled.digest || a.config != current.config)
                .cloned()
                .ok_or(RollbackError::NoPrevious)?
        };
        let instance = self.warmed(&previous.compiled, &previous.config, previous.limits, view)?;
        let at = self.clocks.wall();
        Ok(self.install(activation(previous.compiled.clone(), &previous.config, previous.limits, cause, instance, at)))
    }

    /// Sets (or with `None` clears) the shadow candidate, validated first.
    pub fn set_shadow(&self, candidate: Option<(Arc<Compiled>, &str, Limits)>) -> Result<(), LoadError> {
        self.set_shadow_on(candidate, None)
    }

    /// [`Slot::set_shadow`], warming the candidate on `view` when one is
    /// given (as [`Slot::activate_on`] does).
    pub fn set_shadow_on(
        &self,
        candidate: Option<(Arc<Compiled>, &str, Limits)>,
        view: Option<&ClusterView>,
    ) -> Result<(), LoadError> {
        match candidate {
            Some((compiled, config, limits)) => {
                let instance = self.warmed(&compiled, config, limits, view)?;
                let at = self.clocks.wall();
                let candidate = activation(compiled, config, limits, ActivationCause::Operator, instance, at);
                self.replace_shadow(Some(Arc::new(candidate)));
            }
            None => self.replace_shadow(None),
        }
        Ok(())
    }

    /// Swaps the shadow candidate; the counters start again from 0 and the
    /// previous candidate's go into the history.
    fn replace_shadow(&self, candidate: Option<Arc<Activation>>) {
        let previous = self.shadow.swap(candidate);
        {
            let mut stats = self.stats.lock().expect("stats lock");
            if let Some(previous) = &previous {
                let counts = ShadowCounts {
                    candidate: previous.label(),
                    calls: stats.shadow_calls,
                    disagreements: stats.shadow_disagreements,
                };
                if stats.shadow_history.len() == MAX_SHADOW_HISTORY {
                    stats.shadow_history.pop_front();
                }
                stats.shadow_history.push_back(counts);
            }
            stats.shadow_calls = 0;
            stats.shadow_disagreements = 0;
        }
        if let Some(previous) = previous {
            drop(previous.warm.lock().expect("warm instance lock").take());
        }
    }

    /// The shadow candidate, if any.
    pub fn shadow(&self) -> Option<Arc<Activation>> {
        self.shadow.load_full()
    }

    /// A caller's handle: the [`AllocationStrategy`] the coordinator uses.
    pub fn handle(self: &Arc<Self>) -> SlotHandle {
        SlotHandle {
            slot: self.clone(),
            current: None,
            shadow: None,
            info: self.active().compiled.info.clone(),
            noted_generation: None,
        }
    }

    fn record_rejection(&self, activation: &Activation, error: &StrategyError) {
        {
            let mut stats = self.stats.lock().expect("stats lock");
            *stats.fallbacks.entry(activation.label()).or_default().entry(error.kind().to_owned()).or_default() += 1;
        }
        // Only an operator's new activation is rolled back automatically: an
        // initial strategy has nothing to go back to, and rolling back a
        // rollback would bring back the strategy just rejected.
        if self.policy.max_faults == 0 || activation.cause != ActivationCause::Operator {
            return;
        }
        let now = self.clocks.monotonic();
        let window = self.policy.window.as_millis() as Millis;
        let exceeded = {
            let mut faults = self.faults.lock().expect("faults lock");
            if faults.activation != activation.id {
                *faults = Faults { activation: activation.id, times: VecDeque::new() };
            }
            faults.times.push_back(now);
            while faults.times.front().is_some_and(|t| now.saturating_sub(*t) > window) {
                faults.times.pop_front();
            }
            faults.times.len() > self.policy.max_faults as usize
        };
        if exceeded && self.active().id == activation.id {
            match self.rollback_with(ActivationCause::AutoRollback, None) {
                Ok(back) => {
                    self.stats.lock().expect("stats lock").auto_rollbacks += 1;
                    tracing::error!(
                        r#type = %self.type_name,
                        faulty = %activation.label(),
                        restored = %back.label(),
                        max_faults = self.policy.max_faults,
                        window_secs = self.policy.window.as_secs(),
                        "AUTOMATIC ROLLBACK: the new strategy's answers were rejected too often"
                    );
                }
                Err(error) => tracing::error!(r#type = %self.type_name, "automatic rollback impossible: {error}"),
            }
        }
    }
}

fn activation(
    compiled: Arc<Compiled>,
    config: &str,
    limits: Limits,
    cause: ActivationCause,
    warm: Sandboxed,
    at: Millis,
) -> Activation {
    Activation {
        id: NEXT_ACTIVATION.fetch_add(1, Ordering::Relaxed),
        compiled,
        config: config.to_owned(),
        limits,
        cause,
        at,
        warm: Mutex::new(Some(warm)),
    }
}

impl Activation {
    /// The topology generation its warmed instance holds, while that
    /// instance waits for its first caller.
    pub fn warmed_on(&self) -> Option<u64> {
        self.warm.lock().expect("warm instance lock").as_ref().and_then(Sandboxed::topology_generation)
    }

    /// Its warmed instance if no caller took it yet, or a new one (counted
    /// in [`SlotStats::cold_instances`]).
    fn instance(&self, slot: &Slot) -> Result<Sandboxed, LoadError> {
        if let Some(instance) = self.warm.lock().expect("warm instance lock").take() {
            return Ok(instance);
        }
        slot.stats.lock().expect("stats lock").cold_instances += 1;
        slot.engine.instantiate(&self.compiled, &self.config, self.limits)
    }
}

/// A caller's view of a slot: follows swaps between calls, runs the
/// shadow beside the active strategy, and reports rejections to the slot.
pub struct SlotHandle {
    slot: Arc<Slot>,
    current: Option<(Arc<Activation>, Sandboxed)>,
    shadow: Option<(Arc<Activation>, Sandboxed)>,
    info: Info,
    /// The topology generation last reported to the slot's recent view.
    noted_generation: Option<u64>,
}

impl SlotHandle {
    /// The slot behind this handle.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    fn sync(&mut self) -> Result<(), StrategyError> {
        let active = self.slot.active.load();
        if self.current.as_ref().map(|(a, _)| a.id) != Some(active.id) {
            let active = arc_swap::Guard::into_inner(active);
            match active.instance(&self.slot) {
                Ok(instance) => {
                    self.info = instance.info().clone();
                    if let Some((_, previous)) = self.current.replace((active, instance)) {
                        self.slot.retire(previous);
                    }
                }
                Err(error) if self.current.is_none() => {
                    return Err(StrategyError::Fault {
                        kind: crate::strategy::FaultKind::Trap,
                        detail: format!("cannot instantiate {}: {error}", active.label()),
                    });
                }
                Err(error) => {
                    tracing::error!(strategy = %active.label(), "cannot instantiate the new activation, keeping the previous one: {error}");
                }
            }
        }
        let shadow = self.slot.shadow.load_full();
        match (&shadow, &self.shadow) {
            (None, _) => self.shadow = None,
            (Some(s), Some((current, _))) if s.id == current.id => {}
            (Some(s), _) => {
                self.shadow = s.instance(&self.slot).ok().map(|i| (s.clone(), i));
            }
        }
        Ok(())
    }

    /// [`Sandboxed::view_loads`] of the instance this handle calls now (0
    /// before its first call): what warming on the caller's view saves.
    pub fn view_loads(&self) -> u64 {
        self.current.as_ref().map_or(0, |(_, instance)| instance.view_loads())
    }

    fn compare<T: PartialEq + std::fmt::Debug>(
        &self,
        call: &str,
        subject: &str,
        active: &Result<T, StrategyError>,
        shadow: Result<T, StrategyError>,
    ) {
        let agree = match (active, &shadow) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let mut stats = self.slot.stats.lock().expect("stats lock");
        stats.shadow_calls += 1;
        if !agree {
            stats.shadow_disagreements += 1;
            drop(stats);
            tracing::info!(r#type = %self.slot.type_name, call, subject, active = ?active, shadow = ?shadow, "shadow strategy disagrees");
        }
    }
}

impl AllocationStrategy for SlotHandle {
    fn info(&self) -> &Info {
        &self.info
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        self.sync()?;
        let generation = view.topology().generation();
        if self.noted_generation != Some(generation) {
            self.slot.note_view(view);
            self.noted_generation = Some(generation);
        }
        let (_, instance) = self.current.as_mut().expect("synced");
        let answer = instance.allocate(view, shard, requester);
        if let Some((_, shadow)) = self.shadow.as_mut() {
            let theirs = shadow.allocate(view, shard, requester);
            self.compare("allocate", shard, &answer, theirs);
        }
        answer
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        self.sync()?;
        let (_, instance) = self.current.as_mut().expect("synced");
        let answer = instance.rebalance(view);
        if let Some((_, shadow)) = self.shadow.as_mut() {
            let theirs = shadow.rebalance(view);
            self.compare("rebalance", "", &answer, theirs);
        }
        answer
    }

    fn rejected(&mut self, error: &StrategyError) {
        if let Some((activation, _)) = &self.current {
            self.slot.record_rejection(activation, error);
        }
    }
}
