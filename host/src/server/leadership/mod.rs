//! Who leads. A node alone (no etcd) always leads, in term 1. Nodes that
//! share an etcd elect one leader ([`election`]): only it runs the driver
//! and answers region sessions and admin calls; the others forward admin
//! calls to it (`forward.rs`) and redirect regions to it.
//!
//! [`Leadership`] is what the rest of the server reads: this node's
//! identity and the [`Role`] it knows of now.

mod backoff;
pub mod claim;
pub mod election;
mod renewal;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// A node as the others see it: its name and the URL clients reach it at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// `--node-name` (default: the listen address).
    pub name: String,
    /// `--advertise` (default: `http(s)://` and the listen address).
    pub url: String,
}

/// What a node knows of the leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// The leader's term: the create revision of its etcd election key,
    /// growing with every new leadership (1 for a node alone; 0 while none
    /// is known yet).
    pub term: u64,
    /// The leader, when one is known.
    pub leader: Option<NodeIdentity>,
    /// This node is the leader and its driver is running.
    pub leading: bool,
    /// What keeps this node from leading or knowing a leader, when
    /// something does (etcd unreachable, a store that cannot load): the
    /// message `/readyz` gives.
    pub trouble: Option<String>,
}

impl Role {
    /// The leader, when one is known and it is not the node named `me`
    /// (one that knows itself as leader but does not lead yet is starting).
    pub fn leader_other_than(&self, me: &str) -> Option<&NodeIdentity> {
        self.leader.as_ref().filter(|leader| leader.name != me)
    }
}

/// This node's identity and its view of the leadership. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    me: NodeIdentity,
    role: watch::Receiver<Role>,
    elected: bool,
}

impl Leadership {
    /// A node alone: it leads, in term 1, forever.
    pub fn alone(me: NodeIdentity) -> Self {
        let role = Role { term: 1, leader: Some(me.clone()), leading: true, trouble: None };
        let (sender, receiver) = watch::channel(role);
        // The sender is dropped: the role never changes.
        drop(sender);
        Leadership { me, role: receiver, elected: false }
    }

    /// A node in an election; `role` is the election's sender's receiver.
    pub fn elected(me: NodeIdentity, role: watch::Receiver<Role>) -> Self {
        Leadership { me, role, elected: true }
    }

    /// True for a node in an election (with etcd), false for a node alone.
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// True while the election publishing this node's role runs: its
    /// sender lives as long as the election loop (the loop owns it and
    /// drops it when it ends, panics included). Always false for a node
    /// alone, whose role never changes.
    pub fn election_runs(&self) -> bool {
        self.elected && self.role.has_changed().is_ok()
    }

    /// This node.
    pub fn me(&self) -> &NodeIdentity {
        &self.me
    }

    /// What this node knows now.
    pub fn role(&self) -> Role {
        self.role.borrow().clone()
    }

    /// True while this node leads.
    pub fn leading(&self) -> bool {
        self.role.borrow().leading
    }

    /// The role once it is settled — this node leads, or another node is
    /// known to — or as it is after `timeout` (an election under way).
    pub async fn settled(&self, timeout: std::time::Duration) -> Role {
        let me = self.me.name.clone();
        let mut role = self.role.clone();
        let settled = move |r: &Role| r.leading || r.leader_other_than(&me).is_some();
        match tokio::time::timeout(timeout, role.wait_for(settled)).await {
            Ok(Ok(role)) => role.clone(),
            _ => self.role(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> NodeIdentity {
        NodeIdentity { name: "n1".into(), url: "http://127.0.0.1:1".into() }
    }

    #[test]
    fn the_election_runs_while_its_sender_lives() {
        let (sender, receiver) = watch::channel(Role { term: 0, leader: None, leading: false, trouble: None });
        let leadership = Leadership::elected(me(), receiver);
        assert!(leadership.is_elected() && leadership.election_runs());
        sender.send_replace(Role { term: 2, leader: Some(me()), leading: true, trouble: None });
        assert!(leadership.election_runs(), "a change is not an end");
        drop(sender);
        assert!(!leadership.election_runs());
        let alone = Leadership::alone(me());
        assert!(!alone.is_elected() && !alone.election_runs());
    }
}
