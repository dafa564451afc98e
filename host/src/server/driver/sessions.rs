//! [`Sessions`]: the driver's table of region sessions, each an outbox to
//! the task that writes its WebSocket, routed by entity type then region
//! address once the session registered.
//!
//! Nothing reaches a session before its first `Registered`: a message routed
//! to it meanwhile (a `HeartbeatAck` answered at once while the
//! registration waits for its commit, a `BeginHandOff` broadcast) is held,
//! bounded, and sent right after the `Registered`.

use std::collections::HashMap;

use shardalloc_proto::protocol::NodeMessage;
use tokio::sync::mpsc;

/// A region session's id.
pub type SessionId = u64;

/// Most messages held for a session before its `Registered`; one more
/// closes it.
pub const MAX_HELD: usize = 1_024;

struct Session {
    entity_type: String,
    outbox: mpsc::Sender<NodeMessage>,
    /// (address, incarnation) once registered.
    registered: Option<(String, u64)>,
    /// True once the session was sent a `Registered`.
    welcomed: bool,
    /// Messages routed to it before that.
    held: Vec<NodeMessage>,
}

/// Why a message did not reach a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undelivered {
    /// No session is registered for that region.
    NoRoute,
    /// Its outbox is full (it does not read); the session was closed.
    Full,
    /// Its task ended; the session was closed.
    Closed,
}

/// Every open region session. See the module documentation.
#[derive(Default)]
pub struct Sessions {
    sessions: HashMap<SessionId, Session>,
    /// Type → region address → its current session.
    routes: HashMap<String, HashMap<String, SessionId>>,
}

impl Sessions {
    /// A session passed its handshake.
    pub fn open(&mut self, id: SessionId, entity_type: String, outbox: mpsc::Sender<NodeMessage>) {
        self.sessions.insert(id, Session { entity_type, outbox, registered: None, welcomed: false, held: Vec::new() });
    }

    /// A session ended (or is ended): forgets it and its route.
    pub fn close(&mut self, id: SessionId) {
        if let Some(session) = self.sessions.remove(&id)
            && let Some((address, _)) = session.registered
            && let Some(routes) = self.routes.get_mut(&session.entity_type)
            && routes.get(&address) == Some(&id)
        {
            routes.remove(&address);
        }
    }

    /// The entity type a session serves.
    pub fn entity_type(&self, id: SessionId) -> Option<&str> {
        self.sessions.get(&id).map(|s| s.entity_type.as_str())
    }

    /// The region (address, incarnation) a session registered.
    pub fn registered(&self, id: SessionId) -> Option<&(String, u64)> {
        self.sessions.get(&id).and_then(|s| s.registered.as_ref())
    }

    /// Routes the session's type and `address` to it; a previous session of
    /// the same region is over and forgotten.
    pub fn register(&mut self, id: SessionId, address: &str, incarnation: u64) {
        let Some(session) = self.sessions.get_mut(&id) else { return };
        session.registered = Some((address.to_owned(), incarnation));
        let routes = self.routes.entry(session.entity_type.clone()).or_default();
        if let Some(old) = routes.insert(address.to_owned(), id)
            && old != id
        {
            self.sessions.remove(&old);
        }
    }

    /// Queues a message for the region at `to` of `entity_type`. A session
    /// that cannot take it (full or gone) is closed.
    pub fn send(&mut self, entity_type: &str, to: &str, message: NodeMessage) -> Result<(), Undelivered> {
        let Some(&id) = self.routes.get(entity_type).and_then(|r| r.get(to)) else {
            return Err(Undelivered::NoRoute);
        };
        self.send_to(id, message)
    }

    /// Queues a message straight to a session (registered or not). A
    /// session that cannot take it is closed. Before the session's first
    /// `Registered` only refusals go out; anything else is held for after it.
    pub fn send_to(&mut self, id: SessionId, message: NodeMessage) -> Result<(), Undelivered> {
        let Some(session) = self.sessions.get_mut(&id) else { return Err(Undelivered::NoRoute) };
        let refusal = matches!(message, NodeMessage::Refused { .. } | NodeMessage::RegisterRefused { .. });
        if !session.welcomed && !refusal {
            if !matches!(message, NodeMessage::Registered { .. }) {
                if session.held.len() >= MAX_HELD {
                    self.close(id);
                    return Err(Undelivered::Full);
                }
                session.held.push(message);
                return Ok(());
            }
            session.welcomed = true;
            let held = std::mem::take(&mut session.held);
            self.deliver(id, message)?;
            for message in held {
                self.deliver(id, message)?;
            }
            return Ok(());
        }
        self.deliver(id, message)
    }

    fn deliver(&mut self, id: SessionId, message: NodeMessage) -> Result<(), Undelivered> {
        let Some(session) = self.sessions.get(&id) else { return Err(Undelivered::NoRoute) };
        match session.outbox.try_send(message) {
            Ok(()) => Ok(()),
            Err(error) => {
                self.close(id);
                Err(match error {
                    mpsc::error::TrySendError::Full(_) => Undelivered::Full,
                    mpsc::error::TrySendError::Closed(_) => Undelivered::Closed,
                })
            }
        }
    }

    /// How many sessions `entity_type` has open.
    pub fn count(&self, entity_type: &str) -> usize {
        self.sessions.values().filter(|s| s.entity_type == entity_type).count()
    }

    /// The most messages waiting in any session of `entity_type` (in its
    /// outbox, or held before its `Registered`); 0 when it has none. A
    /// message sent now reaches that region after these.
    pub fn deepest(&self, entity_type: &str) -> usize {
        self.sessions
            .values()
            .filter(|s| s.entity_type == entity_type)
            .map(|s| if s.welcomed { s.outbox.max_capacity() - s.outbox.capacity() } else { s.held.len() })
            .max()
            .unwrap_or(0)
    }

    /// Sends `last` to every session of `entity_type` and forgets them.
    pub fn close_type(&mut self, entity_type: &str, last: NodeMessage) {
        let ids: Vec<SessionId> =
            self.sessions.iter().filter(|(_, s)| s.entity_type == entity_type).map(|(id, _)| *id).collect();
        for id in ids {
            let _ = self.send_to(id, last.clone());
            self.close(id);
        }
        self.routes.remove(entity_type);
    }

    /// Tells every session the node is shutting down and forgets them all.
    pub fn shut_down(&mut self) {
        for session in self.sessions.values() {
            // Even before its Registered: the session ends either way.
            let _ = session.outbox.try_send(NodeMessage::ShuttingDown);
        }
        self.sessions.clear();
        self.routes.clear();
    }

    /// Open sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when no session is open.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> (mpsc::Sender<NodeMessage>, mpsc::Receiver<NodeMessage>) {
        mpsc::channel(2)
    }

    fn registered() -> NodeMessage {
        NodeMessage::Registered { incarnation: 1, sequence: 1, lease_ms: 10, heartbeat_interval_ms: 1 }
    }

    fn welcome(sessions: &mut Sessions, id: SessionId) {
        sessions.send_to(id, registered()).unwrap();
    }

    #[test]
    fn nothing_but_a_refusal_reaches_a_session_before_its_registered() {
        let mut sessions = Sessions::default();
        let (tx, mut rx) = mpsc::channel(8);
        sessions.open(1, "cart".into(), tx);
        sessions.register(1, "r1", 1);
        let ack = NodeMessage::HeartbeatAck { incarnation: 1, sequence: 2, lease_ms: 10 };
        sessions.send("cart", "r1", ack.clone()).unwrap();
        sessions.send("cart", "r1", NodeMessage::BeginHandOff { shard: "s".into() }).unwrap();
        assert!(rx.try_recv().is_err(), "a message went out before Registered");
        welcome(&mut sessions, 1);
        let received: Vec<NodeMessage> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(received, [registered(), ack, NodeMessage::BeginHandOff { shard: "s".into() }]);
        // A refusal needs no welcome.
        let (tx, mut rx) = mpsc::channel(8);
        sessions.open(2, "cart".into(), tx);
        sessions.send_to(2, NodeMessage::Refused { reason: "no".into() }).unwrap();
        assert_eq!(rx.try_recv().unwrap(), NodeMessage::Refused { reason: "no".into() });
    }

    #[test]
    fn messages_reach_the_registered_session_of_the_type_and_address() {
        let mut sessions = Sessions::default();
        let (a, mut a_rx) = outbox();
        let (b, mut b_rx) = outbox();
        sessions.open(1, "cart".into(), a);
        sessions.open(2, "user".into(), b);
        assert_eq!(sessions.send("cart", "r1", NodeMessage::LeaveDone), Err(Undelivered::NoRoute));
        sessions.register(1, "r1", 7);
        sessions.register(2, "r1", 7);
        welcome(&mut sessions, 1);
        welcome(&mut sessions, 2);
        assert_eq!(a_rx.try_recv().unwrap(), registered());
        assert_eq!(b_rx.try_recv().unwrap(), registered());
        sessions.send("cart", "r1", NodeMessage::NotRegistered).unwrap();
        assert_eq!(a_rx.try_recv().unwrap(), NodeMessage::NotRegistered);
        assert!(b_rx.try_recv().is_err(), "the other type's session got it");
        assert_eq!(sessions.registered(1), Some(&("r1".to_owned(), 7)));
    }

    #[test]
    fn a_reconnected_region_replaces_its_old_session() {
        let mut sessions = Sessions::default();
        let (old, _old_rx) = outbox();
        let (new, mut new_rx) = outbox();
        sessions.open(1, "cart".into(), old);
        sessions.register(1, "r1", 1);
        sessions.open(2, "cart".into(), new);
        sessions.register(2, "r1", 1);
        welcome(&mut sessions, 2);
        assert_eq!(new_rx.try_recv().unwrap(), registered());
        assert_eq!(sessions.len(), 1);
        sessions.send("cart", "r1", NodeMessage::LeaveDone).unwrap();
        assert_eq!(new_rx.try_recv().unwrap(), NodeMessage::LeaveDone);
        // The old session's late close does not remove the new route.
        sessions.close(1);
        sessions.send("cart", "r1", NodeMessage::LeaveDone).unwrap();
    }

    #[test]
    fn a_session_that_does_not_read_is_closed() {
        let mut sessions = Sessions::default();
        let (tx, _rx) = outbox();
        sessions.open(1, "cart".into(), tx);
        sessions.register(1, "r1", 1);
        welcome(&mut sessions, 1);
        sessions.send("cart", "r1", NodeMessage::LeaveDone).unwrap();
        assert_eq!(sessions.send("cart", "r1", NodeMessage::LeaveDone), Err(Undelivered::Full));
        assert!(sessions.is_empty());
        assert_eq!(sessions.send("cart", "r1", NodeMessage::LeaveDone), Err(Undelivered::NoRoute));
    }
}
