//! Which regions may stop now: for a set of regions stopping together,
//! what keeps one of them from stopping in this type (Helix's "stoppable"
//! check). The driver asks every type a region serves and answers for the
//! whole node.

use std::collections::BTreeSet;

use super::Coordinator;

/// The label whose value is a region's zone.
pub const ZONE_LABEL: &str = "zone";

/// Why a region cannot stop now, in one type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopBlocker {
    /// It holds shards and no region that stays could take them.
    NoOtherHome {
        /// How many shards it holds.
        shards: usize,
    },
    /// It holds shards and its zone would have no region left.
    ZoneLeftEmpty {
        /// The zone.
        zone: String,
    },
    /// Hand-offs from it are in flight.
    HandOffsInFlight {
        /// How many.
        count: usize,
    },
    /// A strict freeze holds its drain: its shards could not be handed off.
    FrozenStrictly {
        /// How many shards it holds.
        shards: usize,
    },
    /// Fewer regions than the type's minimum would stay.
    BelowMinRegions {
        /// The minimum (`min_regions`).
        min: usize,
        /// How many would stay.
        left: usize,
    },
}

impl Coordinator {
    /// What keeps `candidate` from stopping together with `stopping` (which
    /// it is not part of) in this type; empty when it may stop, or when it
    /// is not a region of this type.
    pub fn stop_blockers(&self, stopping: &BTreeSet<String>, candidate: &str) -> Vec<StopBlocker> {
        let Some(region) = self.durable.regions.get(candidate) else { return Vec::new() };
        let gone = |address: &str| address == candidate || stopping.contains(address);
        let staying: Vec<_> = self.durable.regions.values().filter(|r| !r.proxy_only && !gone(&r.address)).collect();
        let takers: Vec<_> =
            staying.iter().filter(|r| !r.draining && !r.leaving && self.is_reachable(&r.address)).collect();
        let shards = region.shards.len();
        let mut blockers = Vec::new();
        if shards > 0 && takers.is_empty() {
            blockers.push(StopBlocker::NoOtherHome { shards });
        }
        if shards > 0
            && let Some(zone) = region.labels.get(ZONE_LABEL)
            && !takers.iter().any(|r| r.labels.get(ZONE_LABEL) == Some(zone))
            && !takers.is_empty()
        {
            blockers.push(StopBlocker::ZoneLeftEmpty { zone: zone.clone() });
        }
        let count = self.durable.handoffs_from(candidate);
        if count > 0 {
            blockers.push(StopBlocker::HandOffsInFlight { count });
        }
        if shards > 0 && self.durable.operations.freezes.strict() {
            blockers.push(StopBlocker::FrozenStrictly { shards });
        }
        let min = self.config.min_regions;
        if !region.proxy_only && staying.len() < min {
            blockers.push(StopBlocker::BelowMinRegions { min, left: staying.len() });
        }
        blockers
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use crate::strategy::builtin;
    use crate::strategy::guarded::Guarded;

    fn settle(c: &mut Coordinator, event: Event) {
        let now = event.now();
        let out = c.handle(event);
        for command in out {
            if let Command::Persist { batch, .. } = command {
                c.handle(Event::Persisted { now, batch });
            }
        }
    }

    /// a and b in zone z1, c in z2; every region holds shards.
    fn zoned(min_regions: usize) -> Coordinator {
        let config = Config { min_regions, ..Config::default() };
        let strategy = ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()));
        let mut c = Coordinator::new(config, strategy).unwrap();
        for (address, zone) in [("a", "z1"), ("b", "z1"), ("c", "z2")] {
            let labels = [(ZONE_LABEL.to_owned(), zone.to_owned())].into();
            let register = Register { address: address.into(), incarnation: 1, labels, ..Default::default() };
            settle(&mut c, Event::Register { now: 0, register, capacity: Default::default() });
        }
        for i in 0..6 {
            settle(
                &mut c,
                Event::GetShardHome { now: 1, requester: "a".into(), incarnation: 1, shard: format!("s{i}") },
            );
        }
        assert!(c.durable().regions.values().all(|r| !r.shards.is_empty()));
        c
    }

    fn set(addresses: &[&str]) -> BTreeSet<String> {
        addresses.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_region_may_stop_unless_its_zone_or_its_shards_would_be_left_without_a_home() {
        let c = zoned(1);
        assert_eq!(c.stop_blockers(&set(&[]), "a"), []);
        // With a stopping, b is the last of z1.
        assert_eq!(c.stop_blockers(&set(&["a"]), "b"), [StopBlocker::ZoneLeftEmpty { zone: "z1".into() }]);
        assert_eq!(c.stop_blockers(&set(&[]), "c"), [StopBlocker::ZoneLeftEmpty { zone: "z2".into() }]);
        // With a and b stopping, c's shards have nowhere to go.
        assert_eq!(
            c.stop_blockers(&set(&["a", "b"]), "c"),
            [StopBlocker::NoOtherHome { shards: 2 }, StopBlocker::BelowMinRegions { min: 1, left: 0 }]
        );
        assert_eq!(c.stop_blockers(&set(&[]), "nobody"), []);
    }

    #[test]
    fn hand_offs_a_strict_freeze_and_the_minimum_block_a_stop() {
        let mut c = zoned(3);
        assert_eq!(c.stop_blockers(&set(&[]), "a"), [StopBlocker::BelowMinRegions { min: 3, left: 2 }]);
        let mut c2 = zoned(1);
        let shard = c2.durable().regions["a"].shards[0].clone();
        let op = OperatorRequest::RebalanceNow { shards: vec![shard], immediate: true };
        settle(&mut c2, Event::Operator { now: 2, request: 1, op });
        assert_eq!(c2.stop_blockers(&set(&[]), "a"), [StopBlocker::HandOffsInFlight { count: 1 }]);
        let order = FreezeOrder { scope: FreezeScope::Type, reason: "x".into(), until: Some(100_000), strict: true };
        settle(&mut c, Event::Operator { now: 2, request: 1, op: OperatorRequest::Freeze(order) });
        assert!(c.stop_blockers(&set(&[]), "a").contains(&StopBlocker::FrozenStrictly { shards: 2 }));
    }
}
