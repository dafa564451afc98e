//! Who leads. A node alone (no etcd) always leads, in term 1. Nodes that
//! share an etcd elect one leader ([`election`]): only it runs the driver
//! and answers region sessions and admin calls; the others forward admin
//! calls to it (`forward.rs`) and redirect regions to it.
//!
//! [`Leadership`] is what the rest of the server reads: this node's
//! identity and the [`Role`] it knows of now.

pub mod election;

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
}

impl Leadership {
    /// A node alone: it leads, in term 1, forever.
    pub fn alone(me: NodeIdentity) -> Self {
        let role = Role { term: 1, leader: Some(me.clone()), leading: true };
        let (sender, receiver) = watch::channel(role);
        // The sender is dropped: the role never changes.
        drop(sender);
        Leadership { me, role: receiver }
    }

    /// A node in an election; `role` is the election's sender's receiver.
    pub fn elected(me: NodeIdentity, role: watch::Receiver<Role>) -> Self {
        Leadership { me, role }
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
