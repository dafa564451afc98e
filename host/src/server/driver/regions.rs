//! What a region session's message does on the driver: a `Register` (or
//! `RegisterWithCapacity`, which also declares the region's capacity) binds
//! the session to its region (creating the type when it is new) and every
//! later message becomes a coordinator event carrying the session's
//! registered incarnation. A message before `Register`, or a `Register` for
//! another address, ends the session with a `Refused` naming the rule. Which
//! registrations are refused (a stale incarnation, a malformed one, the
//! region limit) is the coordinator's rule alone: the session is routed to
//! its region only once the coordinator accepted it.

use shardalloc_proto::capacity::RegionCapacity;
use shardalloc_proto::protocol::{NodeMessage, RegionMessage, Register};

use super::sessions::SessionId;
use super::{Driver, Waiter};
use crate::coordinator::{Command, Event, OperatorRequest};

impl Driver {
    pub(super) fn on_region(&mut self, session: SessionId, message: RegionMessage) {
        let Some(entity_type) = self.sessions.entity_type(session).map(str::to_owned) else { return };
        let message = match message {
            RegionMessage::Register(register) => {
                return self.on_register(session, entity_type, register, RegionCapacity::default());
            }
            RegionMessage::RegisterWithCapacity { register, capacity } => {
                return self.on_register(session, entity_type, register, capacity);
            }
            message => message,
        };
        let Some((address, incarnation)) = self.sessions.registered(session).cloned() else {
            return self.refuse(session, format!("{} before Register", message.name()));
        };
        let now = self.now;
        let event = match message {
            RegionMessage::Register(_) | RegionMessage::RegisterWithCapacity { .. } => unreachable!("handled above"),
            RegionMessage::Heartbeat { sequence, metrics } => {
                Event::Heartbeat { now, address, incarnation, metrics, sequence }
            }
            RegionMessage::GetShardHome { shard } => {
                Event::GetShardHome { now, requester: address, incarnation, shard }
            }
            RegionMessage::GetShardHomeWithAttributes { shard, attributes } => {
                let region = address.clone();
                let offer =
                    Event::ShardAttributesOffered { now, region, incarnation, shard: shard.clone(), attributes };
                self.feed(&entity_type, offer);
                Event::GetShardHome { now, requester: address, incarnation, shard }
            }
            RegionMessage::BeginHandOffAck { shard } => {
                Event::BeginHandOffAck { now, region: address, incarnation, shard }
            }
            RegionMessage::ShardStopped { shard } => Event::ShardStopped { now, region: address, incarnation, shard },
            RegionMessage::Load(report) => Event::Load { now, address, incarnation, report },
            RegionMessage::Leave => Event::Leave { now, address, incarnation },
            RegionMessage::Drain { draining } => {
                let op =
                    if draining { OperatorRequest::Drain { address } } else { OperatorRequest::Undrain { address } };
                // The region is not answered.
                return self.operate(&entity_type, op, Waiter::Nobody);
            }
        };
        self.feed(&entity_type, event);
    }

    fn on_register(&mut self, session: SessionId, entity_type: String, register: Register, capacity: RegionCapacity) {
        if let Err(rule) = shardalloc_client::protocol::check_address(&register.address) {
            return self.refuse(session, format!("Register: {rule}"));
        }
        if let Some((address, _)) = self.sessions.registered(session)
            && *address != register.address
        {
            let reason = format!("this session registered {address}; it cannot register {}", register.address);
            return self.refuse(session, reason);
        }
        if self.is_retiring(&entity_type) {
            let reason = format!("the entity type {entity_type} is being deleted");
            let _ = self.sessions.send_to(session, NodeMessage::RegisterRefused { reason });
            return;
        }
        if !self.catalog.contains(&entity_type) && !self.auto_create_types {
            let reason = format!(
                "the entity type {entity_type} is not declared on this node: declare it (--type {entity_type}, or \
                 [types.{entity_type}] in the settings file), or start the node with --auto-create-types"
            );
            return self.refuse(session, reason);
        }
        if !self.catalog.contains(&entity_type) {
            let strategy = self.catalog.settings().default_strategy.clone();
            match self.catalog.create(&entity_type, &strategy, "", self.now, &mut self.turn) {
                Ok(commands) => {
                    self.execute(&entity_type, commands);
                    self.inherit_cluster_freeze(&entity_type);
                }
                Err(reason) => {
                    return self.refuse(session, format!("cannot create the entity type {entity_type}: {reason}"));
                }
            }
        }
        // The coordinator decides (a stale incarnation, a malformed
        // registration, the region limit); the session is routed only if it
        // accepts, so a refusal reaches the session that asked and the live
        // incarnation's session keeps its route.
        let (address, incarnation) = (register.address.clone(), register.incarnation);
        let event = Event::Register { now: self.now, register, capacity };
        let Ok(entry) = self.catalog.get_mut(&entity_type) else { return };
        let mut commands = entry.coordinator.handle(event);
        let refusal = commands.iter().position(|command| {
            matches!(command, Command::Send { to, message: NodeMessage::RegisterRefused { .. } } if *to == address)
        });
        match refusal {
            Some(at) => {
                let Command::Send { message, .. } = commands.remove(at) else { unreachable!("matched above") };
                tracing::warn!(r#type = %entity_type, %address, incarnation, ?message, "registration refused");
                let _ = self.sessions.send_to(session, message);
            }
            None => self.sessions.register(session, &address, incarnation),
        }
        self.execute(&entity_type, commands);
    }

    fn refuse(&mut self, session: SessionId, reason: String) {
        tracing::warn!(session, %reason, "closing a region session");
        let _ = self.sessions.send_to(session, NodeMessage::Refused { reason });
        self.sessions.close(session);
    }
}
