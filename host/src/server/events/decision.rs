//! What becomes a decision event: the coordinators' observations and the
//! slots' activation records, mapped to [`DecisionEvent`]s. Observations
//! that tell no decision (an ignored message, a limit hit) become none.

use shardalloc_proto::api::{ActivationCause, ChangedBy, DecisionEvent, EventKind, HomeReason};

use crate::coordinator::{FreezeAction, Observation, Step};
use crate::store::ActivationRecord;
use crate::strategy::external::AllocationReason;

/// The event an observation in `entity_type` at `at_ms` tells, if any.
pub fn from_observation(entity_type: &str, at_ms: u64, observation: &Observation) -> Option<DecisionEvent> {
    let event = |kind| DecisionEvent::new(kind, entity_type, at_ms);
    let shard_event = |kind, shard: &str, region: Option<&str>| DecisionEvent {
        shard_id: Some(shard.to_owned()),
        region: region.map(str::to_owned),
        ..event(kind)
    };
    let region_event = |kind, address: &str| DecisionEvent { region: Some(address.to_owned()), ..event(kind) };
    Some(match observation {
        Observation::Allocated { shard, region, reason, warning } => {
            let mut homed = shard_event(EventKind::ShardHomed, shard, Some(region));
            match reason {
                AllocationReason::Placement => homed.reason = Some(HomeReason::Placement),
                AllocationReason::Strategy { name, version } => {
                    homed.reason = Some(HomeReason::Strategy);
                    homed.strategy = Some(format!("{name}@{version}"));
                }
                AllocationReason::Fallback(error) => {
                    homed.reason = Some(HomeReason::Fallback);
                    homed.cause = Some(error.to_string());
                }
            }
            homed.detail = warning.clone();
            homed
        }
        Observation::NoAllocatableRegion { shard } => shard_event(EventKind::ShardWaiting, shard, None),
        Observation::HandOff { shard, from, step: Step::Begin } => {
            shard_event(EventKind::HandOffBegun, shard, Some(from))
        }
        Observation::HandOff { shard, from, step: Step::Stop } => {
            shard_event(EventKind::HandOffAcknowledged, shard, Some(from))
        }
        Observation::HandOffCompleted { shard, from } => shard_event(EventKind::HandOffCompleted, shard, Some(from)),
        Observation::HandOffTimedOut { shard, from, step, missing } => {
            let waiting = match step {
                Step::Begin => format!("acknowledgements from {}", missing.join(", ")),
                Step::Stop => format!("{from} to stop the shard"),
            };
            DecisionEvent {
                detail: Some(format!("timed out waiting for {waiting}; the shard keeps its home")),
                ..shard_event(EventKind::HandOffTimedOut, shard, Some(from))
            }
        }
        Observation::HandOffAckTimedOut { shard, missing } => DecisionEvent {
            detail: Some(format!(
                "{} did not acknowledge in time; the hand-off goes on without them",
                missing.join(", ")
            )),
            ..shard_event(EventKind::HandOffTimedOut, shard, None)
        },
        Observation::HandOffOwnerGone { shard, from } => shard_event(EventKind::HandOffAbandoned, shard, Some(from)),
        Observation::PlacementChanged { shard, target: Some(target), .. } => {
            DecisionEvent { target: Some(target.clone()), ..shard_event(EventKind::PlacementSet, shard, None) }
        }
        Observation::PlacementChanged { shard, target: None, .. } => {
            shard_event(EventKind::PlacementRemoved, shard, None)
        }
        Observation::RegionRegistered { address, incarnation, rehomed } => DecisionEvent {
            detail: Some(format!("incarnation {incarnation}; {rehomed} shards of an older incarnation re-homed")),
            ..region_event(EventKind::RegionRegistered, address)
        },
        Observation::RegionUnreachable { address } => region_event(EventKind::RegionUnreachable, address),
        Observation::RegionReachable { address } => region_event(EventKind::RegionReachable, address),
        Observation::RegionFenced { address, reason } => {
            DecisionEvent { cause: Some(reason.clone()), ..region_event(EventKind::RegionFenced, address) }
        }
        Observation::RegionDraining { address, draining: true } => region_event(EventKind::RegionDrained, address),
        Observation::RegionDraining { address, draining: false } => region_event(EventKind::RegionUndrained, address),
        Observation::RegionRemoved { address, why, shards } => DecisionEvent {
            cause: Some((*why).to_owned()),
            detail: Some(format!("it held {shards} shards")),
            ..region_event(EventKind::RegionGone, address)
        },
        Observation::MovesClipped { asked, by_limit, shards } => {
            let clipped: usize = by_limit.iter().map(|(_, n)| n).sum();
            let limits: Vec<String> = by_limit.iter().map(|(limit, n)| format!("{n} by {limit}")).collect();
            let named = shards.join(", ");
            let more = if clipped > shards.len() { ", …" } else { "" };
            DecisionEvent {
                cause: Some(by_limit.iter().map(|(limit, _)| limit.as_str()).collect::<Vec<_>>().join(",")),
                detail: Some(format!(
                    "kept {} of {asked} moves the strategy asked for; clipped {}: {named}{more}",
                    asked - clipped.min(*asked),
                    limits.join(", ")
                )),
                ..event(EventKind::MovesClipped)
            }
        }
        Observation::RegionLoad { address, load } => {
            DecisionEvent { load: Some(*load), ..region_event(EventKind::RegionLoad, address) }
        }
        Observation::RebalanceFallback { error } => DecisionEvent {
            cause: Some(error.clone()),
            detail: Some("rebalance: nothing moved".into()),
            ..event(EventKind::Fallback)
        },
        Observation::Freeze { record } => DecisionEvent {
            cause: Some(record.scope.as_str().to_owned()),
            by: Some(record.by),
            detail: Some(record.reason.clone()),
            until_ms: record.until.map(|until| at_ms.saturating_add(until.saturating_sub(record.at))),
            ..event(match record.action {
                FreezeAction::Frozen => EventKind::Frozen,
                FreezeAction::Lifted => EventKind::FreezeLifted,
                FreezeAction::Expired => EventKind::FreezeExpired,
            })
        },
        Observation::Ignored { .. } | Observation::Limit { .. } => return None,
    })
}

/// The event a recorded activation in `entity_type` tells.
pub fn from_activation(entity_type: &str, activation: &ActivationRecord) -> DecisionEvent {
    let (kind, by) = match activation.cause {
        ActivationCause::Initial => (EventKind::StrategyActivated, None),
        ActivationCause::Operator => (EventKind::StrategyActivated, Some(ChangedBy::Operator)),
        ActivationCause::Rollback => (EventKind::StrategyRolledBack, Some(ChangedBy::Operator)),
        ActivationCause::AutoRollback => (EventKind::StrategyRolledBack, Some(ChangedBy::Automatic)),
    };
    DecisionEvent {
        strategy: Some(format!("{}@{}", activation.name, activation.version)),
        cause: Some(activation.cause.to_string()),
        by,
        ..DecisionEvent::new(kind, entity_type, activation.at_ms)
    }
}

/// The event of an operator setting (`Some(name@version)`) or clearing a
/// type's shadow candidate.
pub fn shadowed(entity_type: &str, at_ms: u64, strategy: Option<String>) -> DecisionEvent {
    DecisionEvent {
        strategy,
        by: Some(ChangedBy::Operator),
        ..DecisionEvent::new(EventKind::StrategyShadowed, entity_type, at_ms)
    }
}

/// The event of a shard accepted for a rebalance by an operator.
pub fn rebalance_accepted(entity_type: &str, at_ms: u64, shard: &str) -> DecisionEvent {
    DecisionEvent {
        shard_id: Some(shard.to_owned()),
        by: Some(ChangedBy::Operator),
        ..DecisionEvent::new(EventKind::RebalanceAccepted, entity_type, at_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::StrategySource;

    #[test]
    fn a_home_tells_why_it_is_there() {
        let homed = from_observation(
            "cart",
            7,
            &Observation::Allocated {
                shard: "s1".into(),
                region: "a".into(),
                reason: AllocationReason::Strategy { name: "least-shard".into(), version: "1.0.0".into() },
                warning: None,
            },
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&homed).unwrap(),
            serde_json::json!({"seq":0,"kind":"shard-homed","atMs":7,"type":"cart","shardId":"s1","region":"a",
                "reason":"strategy","strategy":"least-shard@1.0.0"})
        );
        let placed = from_observation(
            "cart",
            8,
            &Observation::Allocated {
                shard: "s1".into(),
                region: "b".into(),
                reason: AllocationReason::Placement,
                warning: Some("w".into()),
            },
        )
        .unwrap();
        assert_eq!((placed.reason, placed.detail.as_deref()), (Some(HomeReason::Placement), Some("w")));
    }

    #[test]
    fn region_and_hand_off_observations_name_their_region() {
        let cases = [
            (Observation::HandOff { shard: "s".into(), from: "a".into(), step: Step::Begin }, EventKind::HandOffBegun),
            (
                Observation::HandOff { shard: "s".into(), from: "a".into(), step: Step::Stop },
                EventKind::HandOffAcknowledged,
            ),
            (Observation::HandOffCompleted { shard: "s".into(), from: "a".into() }, EventKind::HandOffCompleted),
            (Observation::HandOffOwnerGone { shard: "s".into(), from: "a".into() }, EventKind::HandOffAbandoned),
            (Observation::RegionUnreachable { address: "a".into() }, EventKind::RegionUnreachable),
            (Observation::RegionDraining { address: "a".into(), draining: true }, EventKind::RegionDrained),
            (Observation::RegionDraining { address: "a".into(), draining: false }, EventKind::RegionUndrained),
            (Observation::RegionRemoved { address: "a".into(), why: "left", shards: 3 }, EventKind::RegionGone),
            (Observation::RegionFenced { address: "a".into(), reason: "old".into() }, EventKind::RegionFenced),
            (Observation::RegionLoad { address: "a".into(), load: 2.5 }, EventKind::RegionLoad),
        ];
        for (observation, kind) in cases {
            let event = from_observation("cart", 1, &observation).unwrap();
            assert_eq!((event.kind, event.region.as_deref()), (kind, Some("a")), "{observation:?}");
        }
        assert!(from_observation("cart", 1, &Observation::Limit { what: "max_shards" }).is_none());
        assert!(from_observation("cart", 1, &Observation::Ignored { what: "x".into() }).is_none());
    }

    #[test]
    fn a_clipped_round_says_by_which_limits_and_names_the_first_shards() {
        use crate::strategy::churn::ClipReason;
        let observation = Observation::MovesClipped {
            asked: 30,
            by_limit: vec![(ClipReason::Cooldown, 2), (ClipReason::MovesPerRound, 25)],
            shards: vec!["s1".into(), "s2".into()],
        };
        let event = from_observation("cart", 9, &observation).unwrap();
        assert_eq!(event.kind, EventKind::MovesClipped);
        assert_eq!(event.cause.as_deref(), Some("move-cooldown,max-moves-per-round"));
        assert_eq!(
            event.detail.as_deref(),
            Some(
                "kept 3 of 30 moves the strategy asked for; clipped 2 by move-cooldown, 25 by max-moves-per-round: s1, s2, …"
            )
        );
    }

    #[test]
    fn rollbacks_say_who_made_them() {
        let record = |cause| ActivationRecord {
            strategy: StrategySource::Builtin("hash".into()),
            name: "hash".into(),
            version: "1.0.0".into(),
            config: String::new(),
            cause,
            at_ms: 5,
        };
        let auto = from_activation("cart", &record(ActivationCause::AutoRollback));
        assert_eq!((auto.kind, auto.by), (EventKind::StrategyRolledBack, Some(ChangedBy::Automatic)));
        let manual = from_activation("cart", &record(ActivationCause::Rollback));
        assert_eq!((manual.kind, manual.by), (EventKind::StrategyRolledBack, Some(ChangedBy::Operator)));
        let activated = from_activation("cart", &record(ActivationCause::Operator));
        assert_eq!(activated.kind, EventKind::StrategyActivated);
        assert_eq!(activated.strategy.as_deref(), Some("hash@1.0.0"));
    }
}
