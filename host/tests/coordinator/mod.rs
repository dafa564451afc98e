//! Shared helpers for the coordinator's integration tests.

#![allow(dead_code, reason = "shared by several test files, each using a part")]

use shardalloc::coordinator::{
    Command, Config, Coordinator, Durable, Event, Millis, NodeMessage, OperatorRequest, Register, Stamp,
};
use shardalloc::strategy::builtin;
use shardalloc::strategy::external::ExternalAllocation;
use shardalloc::strategy::guarded::Guarded;

/// The native least-shard behind external allocation.
pub fn least_shard() -> ExternalAllocation {
    ExternalAllocation::new(Guarded::new(builtin::native("least-shard", "").unwrap().unwrap()))
}

/// A coordinator whose persists are acknowledged at once, with a store that
/// applies exactly what was persisted.
pub struct Harness {
    /// The coordinator.
    pub c: Coordinator,
    /// What the store holds.
    pub store: Durable,
    /// Everything emitted, in order.
    pub log: Vec<Command>,
    /// The clock.
    pub now: Millis,
    /// Whether persists are acknowledged at once.
    pub auto_persist: bool,
    next_request: u64,
}

impl Harness {
    /// A harness with these settings.
    pub fn new(config: Config) -> Self {
        Harness {
            c: Coordinator::new(config, least_shard()).unwrap(),
            store: Durable::default(),
            log: Vec::new(),
            now: 0,
            auto_persist: true,
            next_request: 1,
        }
    }

    /// Feeds an event (persisting when auto) and returns what came out.
    pub fn step(&mut self, event: Event) -> Vec<Command> {
        let mut out = self.c.handle(event);
        let mut i = 0;
        while i < out.len() {
            if let Command::Persist { batch, changes } = &out[i]
                && self.auto_persist
            {
                for change in changes {
                    self.store.apply(change);
                }
                let more = self.c.handle(Event::Persisted { now: self.now, batch: *batch });
                out.extend(more);
            }
            i += 1;
        }
        self.log.extend(out.clone());
        out
    }

    /// Advances the clock, heartbeats every registered region and ticks.
    pub fn tick(&mut self, ms: Millis) -> Vec<Command> {
        self.now += ms;
        let regions: Vec<String> = self.c.durable().regions.keys().cloned().collect();
        let regions: Vec<&str> = regions.iter().map(String::as_str).collect();
        self.heartbeat(&regions);
        self.step(Event::Tick { now: self.now })
    }

    /// Registers a region.
    pub fn register(&mut self, address: &str) -> Vec<Command> {
        let register = Register { address: address.into(), incarnation: 1, ..Default::default() };
        self.step(Event::Register { now: self.now, register, capacity: Default::default() })
    }

    /// The registered incarnation of a region (1 when it is unknown).
    pub fn incarnation(&self, address: &str) -> u64 {
        self.c.durable().regions.get(address).map_or(1, |r| r.incarnation)
    }

    /// Heartbeats from these regions.
    pub fn heartbeat(&mut self, addresses: &[&str]) {
        for address in addresses {
            let incarnation = self.c.durable().regions[*address].incarnation;
            self.step(Event::Heartbeat {
                now: self.now,
                address: address.to_string(),
                incarnation,
                metrics: Default::default(),
                sequence: self.now,
            });
        }
    }

    /// Asks for a shard's home.
    pub fn get(&mut self, requester: &str, shard: &str) -> Vec<Command> {
        let incarnation = self.incarnation(requester);
        self.step(Event::GetShardHome { now: self.now, requester: requester.into(), incarnation, shard: shard.into() })
    }

    /// An operator request.
    pub fn operator(&mut self, op: OperatorRequest) -> Vec<Command> {
        let request = self.next_request;
        self.next_request += 1;
        self.step(Event::Operator { now: self.now, request, op })
    }

    /// Sets placements with a stamp at the current time.
    pub fn place(&mut self, placements: &[(&str, &str)]) -> Vec<Command> {
        let placements = placements.iter().map(|(s, t)| (s.to_string(), t.to_string())).collect();
        let stamp = Stamp::new(self.now, "test");
        self.operator(OperatorRequest::SetPlacements { placements, stamp })
    }

    /// Plays every region's part of the hand-offs revealed in `commands`
    /// (acks and stops), until nothing more happens.
    pub fn cooperate(&mut self, commands: Vec<Command>) -> Vec<Command> {
        let mut all = Vec::new();
        let mut queue = commands;
        while !queue.is_empty() {
            let mut next = Vec::new();
            for command in queue {
                if let Command::Send { to, message } = &command {
                    let (now, region, incarnation) = (self.now, to.clone(), self.incarnation(to));
                    let reply = match message {
                        NodeMessage::BeginHandOff { shard } => {
                            Some(Event::BeginHandOffAck { now, region, incarnation, shard: shard.clone() })
                        }
                        NodeMessage::HandOff { shard } => {
                            Some(Event::ShardStopped { now, region, incarnation, shard: shard.clone() })
                        }
                        _ => None,
                    };
                    if let Some(event) = reply {
                        next.extend(self.step(event));
                    }
                }
                all.push(command);
            }
            queue = next;
        }
        all
    }
}

/// The messages sent in `commands`, as (to, message).
pub fn sends(commands: &[Command]) -> Vec<(String, NodeMessage)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Send { to, message } => Some((to.clone(), message.clone())),
            _ => None,
        })
        .collect()
}
