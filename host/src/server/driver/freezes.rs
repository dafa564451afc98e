//! Freezes through the driver: a type's own, and the cluster-wide one,
//! which the driver gives every type (and every type created while it is
//! in force) as the same [`FreezeScope::Cluster`] freeze, so each type
//! persists it and ends it at the same time by the driver's clock. The
//! coordinators decide (`coordinator/freeze.rs`); this file fans an order
//! out, gathers the replies and answers with the freezes as the REST API
//! shows them, after the commit that made them durable.

use std::collections::BTreeMap;

use shardalloc_proto::api::{FreezeEntry, FreezeInfo, FreezeState};

use super::request::{Refusal, Reply};
use super::{Driver, Waiter};
use crate::coordinator::{
    FREEZE_HISTORY, Freeze, FreezeAction, FreezeOrder, FreezeRecord, FreezeScope, Freezes, Millis, OperatorRequest,
    Reply as CoordinatorReply,
};

/// How an operator's freeze ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezeEnd {
    /// This many milliseconds from when the driver takes the order.
    After(Millis),
    /// At this time of the driver's clock (milliseconds since the Unix epoch).
    At(Millis),
}

/// What an operator asks of a type's freezes, or the cluster's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreezeChange {
    /// Freeze (replacing the freeze of the same scope).
    Freeze {
        /// When it ends.
        ends: FreezeEnd,
        /// Why.
        reason: String,
        /// Operators' moves wait too.
        strict: bool,
    },
    /// Lift: a type's own freeze and its maintenance freeze, or the
    /// cluster-wide freeze.
    Thaw {
        /// Why.
        reason: String,
    },
}

/// A freeze order on its way through one or more coordinators.
pub(super) struct FreezeWait {
    remaining: usize,
    name: Option<String>,
    refusal: Option<Refusal>,
    reply: Reply<Result<FreezeState, Refusal>>,
}

impl Driver {
    /// Applies `change` (when given) to the type `name`, or to every type
    /// (`None`), and answers with the freezes after the commit.
    pub(super) fn on_freeze(
        &mut self,
        name: Option<String>,
        change: Option<FreezeChange>,
        reply: Reply<Result<FreezeState, Refusal>>,
    ) {
        let names = match &name {
            Some(name) => match self.catalog.get(name) {
                Ok(_) => vec![name.clone()],
                Err(refusal) => return self.answer(reply, Err(refusal)),
            },
            None => self.catalog.names(),
        };
        let Some(change) = change else {
            let state = self.freeze_state(name.as_deref());
            return self.answer(reply, Ok(state));
        };
        if names.is_empty() {
            return self.answer(reply, Err(Refusal::NoTypes));
        }
        let scope = if name.is_some() { FreezeScope::Type } else { FreezeScope::Cluster };
        let op = match change {
            FreezeChange::Freeze { ends, reason, strict } => {
                let until = match ends {
                    FreezeEnd::After(ms) => self.now.saturating_add(ms),
                    FreezeEnd::At(at) => at,
                };
                let order = FreezeOrder { scope, reason, until: Some(until), strict };
                if let Err(error) = order.check(self.now) {
                    return self.answer(reply, Err(Refusal::Freeze(error.to_string())));
                }
                OperatorRequest::Freeze(order)
            }
            FreezeChange::Thaw { reason } => {
                let scopes = match scope {
                    FreezeScope::Cluster => vec![FreezeScope::Cluster],
                    _ => vec![FreezeScope::Type, FreezeScope::Maintenance],
                };
                OperatorRequest::Thaw { scopes, reason }
            }
        };
        let group = self.next_request;
        self.freeze_waits.insert(group, FreezeWait { remaining: names.len(), name, refusal: None, reply });
        for name in names {
            self.operate(&name, op.clone(), Waiter::Freeze(group));
        }
    }

    /// One coordinator's reply to a freeze order: the answer goes once
    /// every type replied.
    pub(super) fn on_freeze_reply(&mut self, group: u64, reply: CoordinatorReply) {
        let Some(wait) = self.freeze_waits.get_mut(&group) else { return };
        match reply {
            CoordinatorReply::Done => {}
            CoordinatorReply::FreezeRefused(error) => wait.refusal = Some(Refusal::Freeze(error.to_string())),
            other => wait.refusal = Some(Refusal::Unexpected(format!("{other:?}"))),
        }
        wait.remaining -= 1;
        if wait.remaining == 0 {
            let wait = self.freeze_waits.remove(&group).expect("present");
            let answer = match wait.refusal {
                Some(refusal) => Err(refusal),
                None => Ok(self.freeze_state(wait.name.as_deref())),
            };
            let _ = wait.reply.send(answer);
        }
    }

    /// The cluster-wide freeze in force, if any (every type holds the same).
    fn cluster_freeze(&self) -> Option<Freeze> {
        self.catalog.iter().find_map(|(_, entry)| entry.coordinator.freezes().now.get(&FreezeScope::Cluster).cloned())
    }

    /// Gives a type just created the cluster-wide freeze in force.
    pub(super) fn inherit_cluster_freeze(&mut self, name: &str) {
        let Some(freeze) = self.cluster_freeze() else { return };
        if freeze.until.is_some_and(|until| until <= self.now) {
            return;
        }
        let order = FreezeOrder {
            scope: FreezeScope::Cluster,
            reason: freeze.reason,
            until: freeze.until,
            strict: freeze.strict,
        };
        self.operate(name, OperatorRequest::Freeze(order), Waiter::Nobody);
    }

    /// The freezes of a type, or the cluster's (its freeze and the cluster
    /// entries of the types' histories), as the REST API shows them.
    fn freeze_state(&self, name: Option<&str>) -> FreezeState {
        match name {
            Some(name) => {
                let empty = Freezes::default();
                let freezes = self.catalog.get(name).map_or(&empty, |entry| entry.coordinator.freezes());
                state(freezes.now.values(), freezes.history.iter())
            }
            None => {
                let freeze = self.cluster_freeze();
                // Each type holds the cluster's entries; a type created
                // while a freeze was in force got its copy later, with the
                // same end and reason: one entry each.
                let mut history: BTreeMap<(FreezeAction, Option<Millis>, Option<String>), &FreezeRecord> =
                    BTreeMap::new();
                for (_, entry) in self.catalog.iter() {
                    for record in &entry.coordinator.freezes().history {
                        if record.scope != FreezeScope::Cluster {
                            continue;
                        }
                        let key = match record.action {
                            FreezeAction::Frozen => (record.action, record.until, Some(record.reason.clone())),
                            _ => (record.action, Some(record.at), None),
                        };
                        let kept = history.entry(key).or_insert(record);
                        if record.at < kept.at {
                            *kept = record;
                        }
                    }
                }
                let mut history: Vec<&FreezeRecord> = history.into_values().collect();
                history.sort_by_key(|record| record.at);
                let skip = history.len().saturating_sub(FREEZE_HISTORY);
                state(freeze.iter(), history.into_iter().skip(skip))
            }
        }
    }
}

fn state<'a>(
    freezes: impl Iterator<Item = &'a Freeze>,
    history: impl Iterator<Item = &'a FreezeRecord>,
) -> FreezeState {
    let freezes: Vec<FreezeInfo> = freezes
        .map(|f| FreezeInfo {
            scope: f.scope,
            reason: f.reason.clone(),
            since_ms: f.since,
            until_ms: f.until,
            strict: f.strict,
        })
        .collect();
    let history = history
        .map(|r| FreezeEntry {
            at_ms: r.at,
            action: r.action,
            scope: r.scope,
            by: r.by,
            reason: r.reason.clone(),
            until_ms: r.until,
            strict: r.strict,
        })
        .collect();
    FreezeState { frozen: !freezes.is_empty(), strict: freezes.iter().any(|f| f.strict), freezes, history }
}
