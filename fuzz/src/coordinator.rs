//! The coordinator fed arbitrary event sequences — registrations, heart-
//! beats, leaves, home requests, hand-off acknowledgements and stops (right
//! or wrong), time passing, persists acknowledged late, placements,
//! rebalances, drains — with its invariants checked after every event:
//!
//! - **persist before reveal**: a `ShardHome` is sent only for a home the
//!   acknowledged (persisted) state holds;
//! - **one home per shard**: every home is in its region's shard list, and
//!   no shard is in two lists;
//! - **no home on a region that cannot take it**: a shard the strategy (or
//!   the fallback) homes goes to a registered region that is neither
//!   draining nor leaving;
//! - **hand-offs bounded**: a hand-off is of a homed shard from its home,
//!   and after a tick none is past the deadline of the step it is in (the
//!   acknowledgement timeout from its begin, the hand-off timeout from its
//!   stop: each counted from when the coordinator took the step).
//!
//! Three bytes make one event: what, whom, and a value.

use std::collections::{BTreeMap, VecDeque};

use shardalloc::coordinator::{
    Change, Command, Config, Coordinator, Durable, Event, Millis, NodeMessage, Observation, OperatorRequest, Register,
    Stamp, Step,
};
use shardalloc::strategy::builtin;
use shardalloc::strategy::external::{AllocationReason, ExternalAllocation};
use shardalloc::strategy::guarded::Guarded;
use shardalloc_client::capacity::RegionCapacity;
use shardalloc_client::protocol::{LoadReport, ShardLoad};

const REGIONS: u8 = 4;
const SHARDS: u8 = 8;

struct Harness {
    coordinator: Coordinator,
    config: Config,
    /// What the store holds: batches applied once acknowledged.
    persisted: Durable,
    /// Batches made but not acknowledged yet, in order.
    pending: VecDeque<(u64, Vec<Change>)>,
    incarnations: [u64; REGIONS as usize],
    sequences: [u64; REGIONS as usize],
    now: Millis,
    request: u64,
    stamp: u64,
    /// The deadline of each hand-off's current step.
    deadlines: BTreeMap<String, Millis>,
}

fn region(i: u8) -> String {
    format!("r{}", i % REGIONS)
}

fn shard(i: u8) -> String {
    format!("s{}", i % SHARDS)
}

impl Harness {
    fn new() -> Harness {
        let config = Config { min_regions: 1, ..Config::default() };
        let strategy = builtin::native("least-shard", "").expect("a built-in").expect("configured");
        let coordinator =
            Coordinator::new(config.clone(), ExternalAllocation::new(Guarded::new(strategy))).expect("valid settings");
        Harness {
            coordinator,
            config,
            persisted: Durable::default(),
            pending: VecDeque::new(),
            incarnations: [1; REGIONS as usize],
            sequences: [0; REGIONS as usize],
            now: 1_000,
            request: 1,
            stamp: 1,
            deadlines: BTreeMap::new(),
        }
    }

    fn next_request(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    fn next_stamp(&mut self) -> Stamp {
        self.stamp += 1;
        Stamp { timestamp: self.stamp, origin: "fuzz".into() }
    }

    fn operator(&mut self, op: OperatorRequest) -> Event {
        Event::Operator { now: self.now, request: self.next_request(), op }
    }

    /// The event three bytes describe.
    fn event(&mut self, what: u8, who: u8, value: u8) -> Event {
        let now = self.now;
        let r = (who % REGIONS) as usize;
        match what % 13 {
            0 => {
                if value.is_multiple_of(4) {
                    self.incarnations[r] += 1;
                }
                self.sequences[r] += 1;
                let register = Register {
                    address: region(who),
                    incarnation: self.incarnations[r],
                    sequence: self.sequences[r],
                    ..Register::default()
                };
                // Every other registration declares a capacity.
                let capacity = match value % 2 {
                    0 => RegionCapacity::default(),
                    _ => RegionCapacity::new([("load", f64::from(value))]).expect("within the limits"),
                };
                Event::Register { now, register, capacity }
            }
            // A load report, its window anywhere from too short to too old.
            1 if value.is_multiple_of(3) => Event::Load {
                now,
                address: region(who),
                incarnation: self.incarnations[r],
                report: LoadReport {
                    window_ms: u64::from(value) * 300,
                    shards: vec![ShardLoad { shard: shard(value), load: f64::from(value) }],
                    rest: f64::from(who),
                },
            },
            1 => {
                self.sequences[r] += 1;
                Event::Heartbeat {
                    now,
                    address: region(who),
                    incarnation: self.incarnations[r],
                    metrics: BTreeMap::new(),
                    sequence: self.sequences[r],
                }
            }
            2 => Event::Leave { now, address: region(who), incarnation: self.incarnations[r] },
            3 => Event::GetShardHome {
                now,
                requester: region(who),
                incarnation: self.incarnations[r],
                shard: shard(value),
            },
            4 => Event::BeginHandOffAck {
                now,
                region: region(who),
                incarnation: self.incarnations[r],
                shard: shard(value),
            },
            5 => {
                Event::ShardStopped { now, region: region(who), incarnation: self.incarnations[r], shard: shard(value) }
            }
            6 | 7 => {
                self.now += u64::from(value) * 40;
                Event::Tick { now: self.now }
            }
            8 => {
                let stamp = self.next_stamp();
                self.operator(OperatorRequest::SetPlacements { placements: vec![(shard(value), region(who))], stamp })
            }
            9 => {
                let stamp = self.next_stamp();
                self.operator(OperatorRequest::RemovePlacements { shards: vec![shard(value)], stamp })
            }
            10 => self.operator(OperatorRequest::RebalanceNow {
                shards: vec![shard(value)],
                immediate: value.is_multiple_of(2),
            }),
            11 if value.is_multiple_of(2) => self.operator(OperatorRequest::Drain { address: region(who) }),
            11 => self.operator(OperatorRequest::Undrain { address: region(who) }),
            // Acknowledge the oldest batch, if any (else time passes a little).
            _ => match self.pending.pop_front() {
                Some((batch, changes)) => {
                    for change in &changes {
                        self.persisted.apply(change);
                    }
                    Event::Persisted { now, batch }
                }
                None => {
                    self.now += 1;
                    Event::Tick { now: self.now }
                }
            },
        }
    }

    fn handle(&mut self, event: Event) {
        let ticked = matches!(event, Event::Tick { .. });
        let commands = self.coordinator.handle(event);
        for command in commands {
            self.check_command(command);
        }
        self.check_state(ticked);
    }

    fn check_command(&mut self, command: Command) {
        match command {
            Command::Persist { batch, changes } => {
                if let Some((last, _)) = self.pending.back() {
                    assert!(batch > *last, "batch {batch} after batch {last}");
                }
                self.pending.push_back((batch, changes));
            }
            Command::Send { to, message: NodeMessage::ShardHome { shard, home } } => {
                let stored = self.persisted.homes.get(&shard).map(|h| h.region.to_string());
                assert_eq!(
                    stored.as_deref(),
                    Some(home.as_str()),
                    "{to} was told {shard} lives on {home} before the store held it (it holds {stored:?})"
                );
            }
            Command::Observe(Observation::Allocated { shard, region, reason, .. })
                if !matches!(reason, AllocationReason::Placement) =>
            {
                let record = self.coordinator.durable().regions.get(&region);
                let record = record.unwrap_or_else(|| panic!("{shard} homed on unregistered {region}"));
                assert!(!record.draining && !record.leaving, "{shard} homed on {region}, which cannot take it");
            }
            Command::Observe(Observation::HandOff { shard, step, .. }) => {
                let timeout = match step {
                    Step::Begin => self.config.handoff_ack_timeout_ms,
                    Step::Stop => self.config.handoff_timeout_ms,
                };
                self.deadlines.insert(shard, self.now + timeout);
            }
            _ => {}
        }
    }

    fn check_state(&mut self, ticked: bool) {
        let durable = self.coordinator.durable();
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (address, record) in &durable.regions {
            for shard in &record.shards {
                if let Some(other) = owner.insert(shard, address) {
                    panic!("{shard} is in the shard lists of both {other} and {address}");
                }
                let home = durable.homes.get(shard).map(|h| &*h.region);
                assert_eq!(home, Some(address.as_str()), "{shard} is listed on {address} but its home is {home:?}");
            }
        }
        for (shard, home) in &durable.homes {
            assert_eq!(
                owner.get(shard.as_str()).copied(),
                Some(&*home.region),
                "{shard}'s home is not in its region's list"
            );
        }
        for (shard, from) in &durable.handoffs {
            let home = durable.homes.get(shard).map(|h| &*h.region);
            assert_eq!(home, Some(from.as_str()), "{shard} is handed off from {from}, its home is {home:?}");
        }
        let moving: Vec<String> = self.coordinator.moving().cloned().collect();
        self.deadlines.retain(|shard, _| moving.contains(shard));
        if ticked {
            for (shard, deadline) in &self.deadlines {
                assert!(
                    self.now <= *deadline,
                    "{shard}'s hand-off is past its step's deadline {deadline} at {}",
                    self.now
                );
            }
        }
    }
}

/// An event sequence, three bytes an event.
pub fn coordinator(data: &[u8]) {
    run(data);
}

/// Runs the sequence; how many shards have a home at the end.
fn run(data: &[u8]) -> usize {
    let mut harness = Harness::new();
    for event in data.chunks_exact(3).take(2_000) {
        let event = harness.event(event[0], event[1], event[2]);
        harness.handle(event);
    }
    harness.coordinator.durable().homes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_random_event_sequences_keep_the_invariants() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut homed = 0;
        for _ in 0..100 {
            let bytes: Vec<u8> = (0..3_000)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 32) as u8
                })
                .collect();
            homed += run(&bytes);
        }
        assert!(homed > 100, "the sequences homed only {homed} shards: the harness hardly reaches the coordinator");
    }
}
