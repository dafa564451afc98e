//! Freezes and the automatic maintenance mode.
//!
//! While a type is frozen its strategy's rebalance does not run: new shards
//! still get a home, shards whose region is gone are still re-homed, and
//! operators' placements, `rebalance-now` and drains still move shards
//! unless a freeze is strict. Regions that leave by themselves always hand
//! their shards off (they are going away either way).
//!
//! A type holds at most one freeze per [`FreezeScope`]: its own (an
//! operator's), the cluster-wide one (the driver gives the same freeze to
//! every type) and the maintenance mode's (the coordinator's own rule,
//! [`MaintenanceRule`]). Each is durable ([`Change::FreezeSet`],
//! [`Change::FreezeLifted`]) and ends at its `until` by the driver's clock
//! (the time carried by events), so a freeze survives a failover and ends
//! on the new leader. Every freeze, lift and expiry is kept in the type's
//! history (the last [`FREEZE_HISTORY`]) and observed
//! ([`Observation::Freeze`]).
//!
//! ## Maintenance mode
//!
//! A region is *lost* when it becomes unreachable, or is removed for
//! silence; it stops being lost when it registers or heartbeats again. The
//! rule counts the regions lost within the last `window_ms` that are still
//! lost. When the count reaches `enter_lost`, or (two or more lost) its
//! share of the type's regions (those registered plus those lost) reaches
//! `enter_share`, the
//! coordinator freezes the type itself, with a reason that says so ("3 of
//! 10 regions lost in 60 s"). It lifts that freeze once the count is at or
//! below `exit_lost` and the share at or below `exit_share` (stricter than
//! entering: hysteresis), and not sooner than one window after it froze or
//! after the coordinator recovered (the losses are not durable). An
//! operator may lift it; the rule then waits for the losses to fall under
//! its exit thresholds before it may freeze again.

use std::collections::{BTreeMap, VecDeque};

pub use shardalloc_proto::api::{ChangedBy, FreezeAction, FreezeScope};

use super::{Change, Coordinator, Millis, Observation, Reply, RequestId};

/// How many freezes, lifts and expiries a type keeps in its history.
pub const FREEZE_HISTORY: usize = 20;
/// The longest reason kept, in bytes.
pub const MAX_FREEZE_REASON_BYTES: usize = 1024;
/// The longest freeze, in milliseconds: 30 days.
pub const MAX_FREEZE_MS: Millis = 30 * 24 * 3600 * 1000;

/// A freeze in force.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Freeze {
    /// Whose.
    pub scope: FreezeScope,
    /// Why, in the words of whoever froze.
    pub reason: String,
    /// When it began (the driver's clock).
    pub since: Millis,
    /// When it ends by itself (the driver's clock); `None`: when lifted.
    pub until: Option<Millis>,
    /// Operators' placements, `rebalance-now` and drains wait too.
    pub strict: bool,
}

/// One entry of a type's freeze history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FreezeRecord {
    /// When (the driver's clock).
    pub at: Millis,
    /// What.
    pub action: FreezeAction,
    /// Which freeze.
    pub scope: FreezeScope,
    /// An operator, or the node itself (the maintenance rule, an expiry).
    pub by: ChangedBy,
    /// Why.
    pub reason: String,
    /// The freeze's end, for `frozen`.
    pub until: Option<Millis>,
    /// Whether the freeze was strict, for `frozen`.
    pub strict: bool,
}

/// The freezes of a type and their history: part of its durable state.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Freezes {
    /// The freezes in force, at most one per scope, by scope.
    pub now: BTreeMap<FreezeScope, Freeze>,
    /// The last [`FREEZE_HISTORY`] freezes, lifts and expiries, oldest first.
    pub history: VecDeque<FreezeRecord>,
}

impl Freezes {
    /// True while any freeze is in force.
    pub fn frozen(&self) -> bool {
        !self.now.is_empty()
    }

    /// True while a strict freeze is in force.
    pub fn strict(&self) -> bool {
        self.now.values().any(|f| f.strict)
    }

    /// Applies a freeze change (others are ignored).
    pub fn apply(&mut self, change: &Change) {
        let record = match change {
            Change::FreezeSet { freeze } => {
                self.now.insert(freeze.scope, freeze.clone());
                FreezeRecord {
                    at: freeze.since,
                    action: FreezeAction::Frozen,
                    scope: freeze.scope,
                    by: if freeze.scope == FreezeScope::Maintenance {
                        ChangedBy::Automatic
                    } else {
                        ChangedBy::Operator
                    },
                    reason: freeze.reason.clone(),
                    until: freeze.until,
                    strict: freeze.strict,
                }
            }
            Change::FreezeLifted { scope, at, by, reason, expired } => {
                self.now.remove(scope);
                FreezeRecord {
                    at: *at,
                    action: if *expired { FreezeAction::Expired } else { FreezeAction::Lifted },
                    scope: *scope,
                    by: *by,
                    reason: reason.clone(),
                    until: None,
                    strict: false,
                }
            }
            _ => return,
        };
        if self.history.len() == FREEZE_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(record);
    }
}

/// An operator's freeze, as the coordinator takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeOrder {
    /// [`FreezeScope::Type`] or [`FreezeScope::Cluster`].
    pub scope: FreezeScope,
    /// Why.
    pub reason: String,
    /// When it ends (the driver's clock); `None`: when lifted.
    pub until: Option<Millis>,
    /// Placements, `rebalance-now` and drains wait too.
    pub strict: bool,
}

impl FreezeOrder {
    /// Why the coordinator would refuse this order at `now`, if it would.
    pub fn check(&self, now: Millis) -> Result<(), FreezeError> {
        if self.scope == FreezeScope::Maintenance {
            return Err(FreezeError::NotAnOperatorsScope);
        }
        if self.reason.trim().is_empty() {
            return Err(FreezeError::NoReason);
        }
        if self.reason.len() > MAX_FREEZE_REASON_BYTES {
            return Err(FreezeError::ReasonTooLong(self.reason.len()));
        }
        match self.until {
            Some(until) if until <= now => Err(FreezeError::EndsInThePast),
            Some(until) if until - now > MAX_FREEZE_MS => Err(FreezeError::TooLong),
            _ => Ok(()),
        }
    }
}

/// Why a freeze or a lift was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FreezeError {
    /// No reason given.
    #[error("a freeze needs a reason")]
    NoReason,
    /// A reason too long.
    #[error("the reason is {0} bytes; at most {MAX_FREEZE_REASON_BYTES}")]
    ReasonTooLong(usize),
    /// An end in the past.
    #[error("the freeze would end in the past")]
    EndsInThePast,
    /// An end too far away.
    #[error("a freeze lasts at most {} days", MAX_FREEZE_MS / (24 * 3600 * 1000))]
    TooLong,
    /// The maintenance mode's scope is the node's own.
    #[error("only the node itself sets the maintenance freeze")]
    NotAnOperatorsScope,
}

/// When the maintenance mode freezes a type and when it lifts that freeze
/// (see the module documentation). Every field has a setting of the same
/// name (`maintenance-*`), node-wide or per type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaintenanceRule {
    /// Off when false: the type is never frozen automatically.
    pub enabled: bool,
    /// How far back a loss counts (default 60 s).
    pub window_ms: Millis,
    /// Freeze when this many regions are lost within the window (default 3).
    pub enter_lost: usize,
    /// Or when this share of the type's regions is, two at least (default 0.3).
    pub enter_share: f64,
    /// Lift when at most this many are still lost (default 1)…
    pub exit_lost: usize,
    /// …and at most this share (default 0.1).
    pub exit_share: f64,
}

impl Default for MaintenanceRule {
    fn default() -> Self {
        MaintenanceRule {
            enabled: true,
            window_ms: 60_000,
            enter_lost: 3,
            enter_share: 0.3,
            exit_lost: 1,
            exit_share: 0.1,
        }
    }
}

impl MaintenanceRule {
    /// Checks that the exit thresholds are stricter than the entry ones.
    pub fn check(&self) -> Result<(), String> {
        if self.window_ms == 0 {
            return Err("maintenance_window_ms must be positive".into());
        }
        if self.enter_lost == 0 {
            return Err("maintenance_enter_lost must be positive".into());
        }
        if !(self.enter_share > 0.0 && self.enter_share <= 1.0) {
            return Err(format!("maintenance_enter_share is {}; it must be in (0, 1]", self.enter_share));
        }
        if self.exit_lost >= self.enter_lost {
            return Err(format!(
                "maintenance_exit_lost ({}) must be below maintenance_enter_lost ({})",
                self.exit_lost, self.enter_lost
            ));
        }
        if !(self.exit_share >= 0.0 && self.exit_share < self.enter_share) {
            return Err(format!(
                "maintenance_exit_share ({}) must be at least 0 and below maintenance_enter_share ({})",
                self.exit_share, self.enter_share
            ));
        }
        Ok(())
    }
}

/// What the maintenance rule keeps between ticks (not durable).
#[derive(Debug, Clone, Default)]
pub(super) struct Losses {
    /// Lost regions and when they were lost.
    lost: BTreeMap<String, Millis>,
    /// The maintenance freeze is not lifted before this time.
    hold_until: Millis,
    /// An operator lifted the maintenance freeze: the rule waits for the
    /// losses to fall under its exit thresholds before freezing again.
    disarmed: bool,
}

impl Losses {
    /// Losses as a recovered coordinator starts them: none, and a held
    /// maintenance freeze kept for one window at least.
    pub(super) fn recovered(now: Millis, window_ms: Millis) -> Self {
        Losses { lost: BTreeMap::new(), hold_until: now.saturating_add(window_ms), disarmed: false }
    }

    /// A region became unreachable or was removed for silence.
    pub(super) fn lost(&mut self, address: &str, now: Millis) {
        self.lost.entry(address.to_owned()).or_insert(now);
    }

    /// A region registered or heartbeated again.
    pub(super) fn back(&mut self, address: &str) {
        self.lost.remove(address);
    }
}

impl Coordinator {
    /// The type's freezes and their history.
    pub fn freezes(&self) -> &Freezes {
        &self.durable.operations.freezes
    }

    /// True while a freeze is in force.
    pub fn frozen(&self) -> bool {
        self.durable.operations.freezes.frozen()
    }

    /// An operator's freeze: replaces the freeze of its scope.
    pub(super) fn freeze(&mut self, request: RequestId, order: FreezeOrder) {
        if let Err(error) = order.check(self.now) {
            return self.reply(request, Reply::FreezeRefused(error));
        }
        let freeze = Freeze {
            scope: order.scope,
            reason: order.reason,
            since: self.now,
            until: order.until,
            strict: order.strict,
        };
        self.set_freeze(freeze);
        self.reply(request, Reply::Done);
    }

    /// An operator lifts the freezes of `scopes` that are in force (none in
    /// force: nothing changes). Lifting the maintenance freeze disarms the
    /// rule until the losses fall under its exit thresholds.
    pub(super) fn thaw(&mut self, request: RequestId, scopes: Vec<FreezeScope>, reason: String) {
        if reason.len() > MAX_FREEZE_REASON_BYTES {
            return self.reply(request, Reply::FreezeRefused(FreezeError::ReasonTooLong(reason.len())));
        }
        for scope in scopes {
            if self.durable.operations.freezes.now.contains_key(&scope) {
                if scope == FreezeScope::Maintenance {
                    self.losses.disarmed = true;
                }
                self.lift(scope, ChangedBy::Operator, reason.clone(), false);
            }
        }
        self.reply(request, Reply::Done);
    }

    fn set_freeze(&mut self, freeze: Freeze) {
        let change = Change::FreezeSet { freeze };
        self.observe_freeze(&change);
        self.change(change);
    }

    fn lift(&mut self, scope: FreezeScope, by: ChangedBy, reason: String, expired: bool) {
        let change = Change::FreezeLifted { scope, at: self.now, by, reason, expired };
        self.observe_freeze(&change);
        self.change(change);
    }

    fn observe_freeze(&mut self, change: &Change) {
        let mut one = Freezes::default();
        one.apply(change);
        if let Some(record) = one.history.pop_back() {
            self.observe(Observation::Freeze { record });
        }
    }

    /// The tick's part: freezes past their end expire, then the maintenance
    /// rule freezes or lifts.
    pub(super) fn check_freezes(&mut self) {
        let now = self.now;
        let expired: Vec<FreezeScope> = self
            .durable
            .operations
            .freezes
            .now
            .values()
            .filter(|f| f.until.is_some_and(|u| u <= now))
            .map(|f| f.scope)
            .collect();
        for scope in expired {
            self.lift(scope, ChangedBy::Automatic, "its time limit was reached".into(), true);
        }
        self.check_maintenance();
    }

    /// The maintenance rule (see the module documentation).
    fn check_maintenance(&mut self) {
        let rule = self.config.maintenance;
        if !rule.enabled {
            return;
        }
        let now = self.now;
        let since = now.saturating_sub(rule.window_ms);
        self.losses.lost.retain(|_, at| *at >= since);
        let lost = self.losses.lost.len();
        let known = self.durable.regions.len()
            + self.losses.lost.keys().filter(|a| !self.durable.regions.contains_key(*a)).count();
        let share = if known == 0 { 0.0 } else { lost as f64 / known as f64 };
        let under_exit = lost <= rule.exit_lost && share <= rule.exit_share;
        if under_exit {
            self.losses.disarmed = false;
        }
        let held = self.durable.operations.freezes.now.contains_key(&FreezeScope::Maintenance);
        let window_s = rule.window_ms.div_ceil(1000);
        // One region lost is never a storm, whatever its share.
        let storm = lost >= rule.enter_lost || (lost >= 2 && share >= rule.enter_share);
        if !held && !self.losses.disarmed && storm {
            self.losses.hold_until = now.saturating_add(rule.window_ms);
            self.set_freeze(Freeze {
                scope: FreezeScope::Maintenance,
                reason: format!("{lost} of {known} regions lost in {window_s} s"),
                since: now,
                until: None,
                strict: false,
            });
        } else if held && under_exit && now >= self.losses.hold_until {
            let reason = format!("{lost} of {known} regions lost in the last {window_s} s: under the lift threshold");
            self.lift(FreezeScope::Maintenance, ChangedBy::Automatic, reason, false);
        }
    }
}
