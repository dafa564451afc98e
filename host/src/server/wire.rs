//! The one place the coordinator's region messages and registrations meet
//! the wire format ([`shardalloc_proto::protocol`]). The coordinator knows
//! no wire format; these `From` impls are the whole mapping, field for field.

use shardalloc_proto::protocol::{NodeMessage, Register};

use crate::coordinator::{Registration, ToRegion};

impl From<ToRegion> for NodeMessage {
    fn from(message: ToRegion) -> Self {
        match message {
            ToRegion::Registered { incarnation, sequence, lease_ms, heartbeat_interval_ms } => {
                NodeMessage::Registered { incarnation, sequence, lease_ms, heartbeat_interval_ms }
            }
            ToRegion::RegisterRefused { reason } => NodeMessage::RegisterRefused { reason },
            ToRegion::HeartbeatAck { incarnation, sequence, lease_ms } => {
                NodeMessage::HeartbeatAck { incarnation, sequence, lease_ms }
            }
            ToRegion::NotRegistered => NodeMessage::NotRegistered,
            ToRegion::ShardHome { shard, home } => NodeMessage::ShardHome { shard, home },
            ToRegion::ShardRefused { shard, reason } => NodeMessage::ShardRefused { shard, reason },
            ToRegion::BeginHandOff { shard } => NodeMessage::BeginHandOff { shard },
            ToRegion::HandOff { shard } => NodeMessage::HandOff { shard },
            ToRegion::PlacementChanged { shard, target } => NodeMessage::PlacementChanged { shard, target },
            ToRegion::LeaveDone => NodeMessage::LeaveDone,
        }
    }
}

/// A registration as the coordinator sees it; the wire's `sequence` travels
/// beside it in [`crate::coordinator::Event::Register`].
impl From<Register> for Registration {
    fn from(register: Register) -> Self {
        let Register { address, incarnation, roles, app_version, labels, proxy_only, sequence: _ } = register;
        Registration { address, incarnation, roles, app_version, labels, proxy_only }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coordinator_message_maps_to_its_namesake() {
        let cases = [
            (
                ToRegion::Registered { incarnation: 1, sequence: 2, lease_ms: 3, heartbeat_interval_ms: 4 },
                NodeMessage::Registered { incarnation: 1, sequence: 2, lease_ms: 3, heartbeat_interval_ms: 4 },
            ),
            (ToRegion::RegisterRefused { reason: "r".into() }, NodeMessage::RegisterRefused { reason: "r".into() }),
            (
                ToRegion::HeartbeatAck { incarnation: 5, sequence: 6, lease_ms: 7 },
                NodeMessage::HeartbeatAck { incarnation: 5, sequence: 6, lease_ms: 7 },
            ),
            (ToRegion::NotRegistered, NodeMessage::NotRegistered),
            (
                ToRegion::ShardHome { shard: "s".into(), home: "h".into() },
                NodeMessage::ShardHome { shard: "s".into(), home: "h".into() },
            ),
            (
                ToRegion::ShardRefused { shard: "s".into(), reason: "r".into() },
                NodeMessage::ShardRefused { shard: "s".into(), reason: "r".into() },
            ),
            (ToRegion::BeginHandOff { shard: "s".into() }, NodeMessage::BeginHandOff { shard: "s".into() }),
            (ToRegion::HandOff { shard: "s".into() }, NodeMessage::HandOff { shard: "s".into() }),
            (
                ToRegion::PlacementChanged { shard: "s".into(), target: Some("t".into()) },
                NodeMessage::PlacementChanged { shard: "s".into(), target: Some("t".into()) },
            ),
            (ToRegion::LeaveDone, NodeMessage::LeaveDone),
        ];
        for (coordinator, wire) in cases {
            assert_eq!(NodeMessage::from(coordinator), wire);
        }
    }

    #[test]
    fn a_registration_keeps_every_field_but_the_sequence() {
        let register = Register {
            address: "a".into(),
            incarnation: 3,
            roles: vec!["r".into()],
            app_version: "1.2".into(),
            labels: [("zone".to_string(), "eu".to_string())].into(),
            proxy_only: true,
            sequence: 9,
        };
        let registration = Registration::from(register.clone());
        assert_eq!(
            registration,
            Registration {
                address: register.address,
                incarnation: 3,
                roles: register.roles,
                app_version: register.app_version,
                labels: register.labels,
                proxy_only: true,
            }
        );
    }
}
