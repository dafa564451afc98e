//! [`Sessions`]: the driver's table of region sessions, each an outbox to
//! the task that writes its WebSocket, routed by entity type then region
//! address once the session registered.

use std::collections::HashMap;

use shardalloc_client::protocol::NodeMessage;
use tokio::sync::mpsc;

/// A region session's id.
pub type SessionId = u64;

struct Session {
    entity_type: String,
    outbox: mpsc::Sender<NodeMessage>,
    /// (address, incarnation) once registered.
    registered: Option<(String, u64)>,
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
        self.sessions.insert(id, Session { entity_type, outbox, registered: None });
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
    /// session that cannot take it is closed.
    pub fn send_to(&mut self, id: SessionId, message: NodeMessage) -> Result<(), Undelivered> {
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

    /// Tells every session the node is shutting down and forgets them all.
    pub fn shut_down(&mut self) {
        for session in self.sessions.values() {
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
        sessions.send("cart", "r1", NodeMessage::LeaveDone).unwrap();
        sessions.send("cart", "r1", NodeMessage::LeaveDone).unwrap();
        assert_eq!(sessions.send("cart", "r1", NodeMessage::LeaveDone), Err(Undelivered::Full));
        assert!(sessions.is_empty());
        assert_eq!(sessions.send("cart", "r1", NodeMessage::LeaveDone), Err(Undelivered::NoRoute));
    }
}
