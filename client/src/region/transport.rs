//! Carrying messages and requests between regions: the [`Transport`] an
//! application supplies, the [`Inbox`] through which a region receives,
//! and [`InMemoryTransport`], an in-process network for tests and
//! simulators. `M` is the application's message type, `R` its reply type
//! (for [`ask`](super::RegionHandle::ask); `()` when it answers none).
//!
//! ```text
//!  region A ──Transport::send(to = "b", shard, m)──▶ Inbox of "b" ──▶ region B's driver
//! ```
//!
//! `Transport::send` is synchronous and must not block: it hands the message
//! to something that keeps the order of one sender's messages to one
//! receiver (a queue, a connection) and returns. The region calls it in the
//! order it routes messages and before it acknowledges a hand-off, so with
//! a transport whose `send` returns only once the message is in the
//! receiver's inbox (as [`InMemoryTransport`] does), every message sent to a
//! shard's old home before a hand-off reaches it before it stops the shard.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

use super::ask::{AskError, Parcel, Replier};

/// Why a message could not be carried to another region.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No region with this address is known to the transport.
    #[error("no region at address {address}")]
    UnknownAddress {
        /// The address.
        address: String,
    },
    /// The receiving region's inbox is full.
    #[error("the inbox of region {address} is full ({capacity} messages)")]
    InboxFull {
        /// The receiving region.
        address: String,
        /// Its inbox capacity.
        capacity: usize,
    },
    /// The receiving region has stopped.
    #[error("region {address} has stopped")]
    Closed {
        /// The receiving region.
        address: String,
    },
    /// The peer holds [`MAX_UNACKED_BYTES`](crate::peer::MAX_UNACKED_BYTES)
    /// of this region's messages unacknowledged already (back-pressure).
    #[error("region {address} has {bytes} bytes of messages unacknowledged; waiting for it")]
    PeerBusy {
        /// The peer.
        address: String,
        /// The bytes waiting.
        bytes: usize,
    },
    /// The transport could not reach the region (for application transports).
    #[error("cannot reach region {address}: {reason}")]
    Unreachable {
        /// The receiving region.
        address: String,
        /// Why.
        reason: String,
    },
}

/// A message the transport could not carry, handed back so the region can
/// buffer it again (in order) and retry once it has asked for the home again.
pub struct Undelivered<M> {
    /// Why it was not carried.
    pub error: TransportError,
    /// The message.
    pub message: M,
}

impl<M> Undelivered<M> {
    /// Pairs an error with the message it concerns.
    pub fn new(error: TransportError, message: M) -> Self {
        Undelivered { error, message }
    }
}

impl<M> fmt::Debug for Undelivered<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Undelivered").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<M> fmt::Display for Undelivered<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "message not delivered: {}", self.error)
    }
}

impl<M> std::error::Error for Undelivered<M> {}

/// Carries messages from this region to other regions, by address. The
/// application supplies it (over its own network), uses
/// [`PeerTransport`](super::PeerTransport) (the built-in one between
/// processes) or [`InMemoryTransport`] in tests.
pub trait Transport<M, R = ()>: Send + Sync + 'static {
    /// Carries `message` for `shard` to the region at `to`. Must not block:
    /// queue the message and return. Messages from this region to one
    /// receiver must arrive in the order of the calls. On failure, hand the
    /// message back in [`Undelivered`].
    fn send(&self, to: &str, shard: &str, message: M) -> Result<(), Undelivered<M>>;

    /// Carries a request for `shard` to the region at `to`, which answers
    /// it through `reply` (in order with [`Transport::send`]'s messages).
    /// On failure before it left, hand both back. By default fails the
    /// request: the transport carries no requests.
    fn ask(&self, to: &str, shard: &str, message: M, reply: Replier<R>) -> Result<(), Undelivered<(M, Replier<R>)>> {
        let _ = (to, message);
        reply.fail(AskError::Failed {
            shard: shard.to_owned(),
            reason: "the region's transport carries no requests".to_owned(),
        });
        Ok(())
    }

    /// Called by [`Region::start`](super::Region::start) with the region's
    /// inbox: messages for it are to be handed to [`Inbox::deliver`]. The
    /// default does nothing (the application feeds
    /// [`RegionHandle::inbox`](super::RegionHandle::inbox) itself).
    fn attach(&self, inbox: Inbox<M, R>) {
        let _ = inbox;
    }

    /// Called when the region stops, with the inbox given to [`Transport::attach`].
    fn detach(&self, inbox: &Inbox<M, R>) {
        let _ = inbox;
    }
}

/// The receiving end of what a transport hands back late.
pub(crate) type Returns<M, R> = mpsc::UnboundedReceiver<Returned<M, R>>;

/// A message another region sent to this one.
pub(crate) struct Inbound<M, R> {
    pub(crate) shard: String,
    pub(crate) parcel: Parcel<M, R>,
}

/// Messages this region forwarded that the transport found later were not
/// delivered ([`Inbox::not_delivered`]).
pub(crate) struct Returned<M, R> {
    pub(crate) to: String,
    pub(crate) shard: String,
    pub(crate) parcels: Vec<Parcel<M, R>>,
    pub(crate) reason: String,
}

/// A region's inbox: hands messages that other regions sent for a shard to
/// the region, in order. Bounded; cheap to clone.
pub struct Inbox<M, R = ()> {
    address: Arc<str>,
    capacity: usize,
    sender: mpsc::Sender<Inbound<M, R>>,
    /// Unbounded: a message comes back at most once per forward, so what
    /// waits here is bounded by what the transport holds.
    returns: mpsc::UnboundedSender<Returned<M, R>>,
}

impl<M, R> Clone for Inbox<M, R> {
    fn clone(&self) -> Self {
        Inbox {
            address: self.address.clone(),
            capacity: self.capacity,
            sender: self.sender.clone(),
            returns: self.returns.clone(),
        }
    }
}

impl<M, R> fmt::Debug for Inbox<M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox").field("address", &self.address).field("capacity", &self.capacity).finish()
    }
}

impl<M, R> Inbox<M, R> {
    /// A new inbox of `capacity` messages, its receiving end and the
    /// receiving end of the messages the transport gives back late.
    pub(crate) fn new(address: &str, capacity: usize) -> (Self, mpsc::Receiver<Inbound<M, R>>, Returns<M, R>) {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        let (returns, returned) = mpsc::unbounded_channel();
        (Inbox { address: address.into(), capacity: capacity.max(1), sender, returns }, receiver, returned)
    }

    /// For a transport that learns only later that messages it took from
    /// this region's [`Transport::send`] were not delivered to `to` (a
    /// connection refused or reset, a time-out, the far region answering
    /// that it is not the shard's home): hands them back, in the order they
    /// were sent, with why. The region asks for the shard's home again and
    /// resends them, or gives them up to
    /// [`Application::undelivered`](super::Application::undelivered) past
    /// its limits. Never blocks; ignored once the region has stopped.
    pub fn not_delivered(&self, to: &str, shard: &str, messages: Vec<M>, error: &TransportError) {
        self.parcels_not_delivered(to, shard, messages.into_iter().map(Parcel::Tell).collect(), error);
    }

    /// [`Inbox::not_delivered`] for messages and requests together (a
    /// transport carrying both hands them back in one list, so their order
    /// holds). A request handed back is resent like a message.
    pub fn parcels_not_delivered(&self, to: &str, shard: &str, parcels: Vec<Parcel<M, R>>, error: &TransportError) {
        if parcels.is_empty() {
            return;
        }
        let returned = Returned { to: to.to_owned(), shard: shard.to_owned(), parcels, reason: error.to_string() };
        let _ = self.returns.send(returned);
    }

    /// The address of the region this inbox belongs to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Hands a message for `shard` to the region without waiting. The region
    /// delivers it if the shard runs there, and routes it again otherwise.
    pub fn deliver(&self, shard: &str, message: M) -> Result<(), Undelivered<M>> {
        self.take(shard, Parcel::Tell(message)).map_err(|(error, parcel)| match parcel {
            Parcel::Tell(message) | Parcel::Ask(message, _) => Undelivered::new(error, message),
        })
    }

    /// Hands a request for `shard` to the region without waiting; it
    /// answers through `reply`. Routed on like [`Inbox::deliver`]'s messages.
    pub fn ask(&self, shard: &str, message: M, reply: Replier<R>) -> Result<(), Undelivered<(M, Replier<R>)>> {
        self.take(shard, Parcel::Ask(message, reply)).map_err(|(error, parcel)| match parcel {
            Parcel::Ask(message, reply) => Undelivered::new(error, (message, reply)),
            Parcel::Tell(_) => unreachable!("an ask comes back as an ask"),
        })
    }

    fn take(&self, shard: &str, parcel: Parcel<M, R>) -> Result<(), (TransportError, Parcel<M, R>)> {
        self.sender.try_send(Inbound { shard: shard.to_owned(), parcel }).map_err(|error| match error {
            mpsc::error::TrySendError::Full(inbound) => (
                TransportError::InboxFull { address: self.address.to_string(), capacity: self.capacity },
                inbound.parcel,
            ),
            mpsc::error::TrySendError::Closed(inbound) => {
                (TransportError::Closed { address: self.address.to_string() }, inbound.parcel)
            }
        })
    }

    /// True when both are the same region's inbox.
    pub fn same_inbox(&self, other: &Inbox<M, R>) -> bool {
        self.sender.same_channel(&other.sender)
    }
}

/// An in-process network: every region started with a clone of it is
/// reachable by its address. For tests and simulators.
///
/// ```
/// use shardalloc_client::region::{InMemoryTransport, Transport, TransportError};
///
/// let network: InMemoryTransport<u32> = InMemoryTransport::new();
/// let undelivered = network.send("nowhere", "42", 7).unwrap_err();
/// assert_eq!(undelivered.error, TransportError::UnknownAddress { address: "nowhere".into() });
/// assert_eq!(undelivered.message, 7);
/// ```
pub struct InMemoryTransport<M, R = ()> {
    regions: Arc<Mutex<HashMap<String, Inbox<M, R>>>>,
}

impl<M, R> Clone for InMemoryTransport<M, R> {
    fn clone(&self) -> Self {
        InMemoryTransport { regions: self.regions.clone() }
    }
}

impl<M, R> Default for InMemoryTransport<M, R> {
    fn default() -> Self {
        InMemoryTransport { regions: Arc::new(Mutex::new(HashMap::new())) }
    }
}

impl<M, R> fmt::Debug for InMemoryTransport<M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryTransport").field("addresses", &self.addresses()).finish()
    }
}

impl<M, R> InMemoryTransport<M, R> {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// The addresses of the regions attached now, sorted.
    pub fn addresses(&self) -> Vec<String> {
        let mut addresses: Vec<String> =
            self.regions.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        addresses.sort();
        addresses
    }

    fn inbox(&self, address: &str) -> Option<Inbox<M, R>> {
        self.regions.lock().unwrap_or_else(PoisonError::into_inner).get(address).cloned()
    }
}

impl<M: Send + 'static, R: Send + 'static> Transport<M, R> for InMemoryTransport<M, R> {
    fn send(&self, to: &str, shard: &str, message: M) -> Result<(), Undelivered<M>> {
        match self.inbox(to) {
            Some(inbox) => inbox.deliver(shard, message),
            None => Err(Undelivered::new(TransportError::UnknownAddress { address: to.to_owned() }, message)),
        }
    }

    fn ask(&self, to: &str, shard: &str, message: M, reply: Replier<R>) -> Result<(), Undelivered<(M, Replier<R>)>> {
        match self.inbox(to) {
            Some(inbox) => inbox.ask(shard, message, reply),
            None => Err(Undelivered::new(TransportError::UnknownAddress { address: to.to_owned() }, (message, reply))),
        }
    }

    /// Attaches the inbox under its address, replacing an earlier region of
    /// the same address (a restart).
    fn attach(&self, inbox: Inbox<M, R>) {
        self.regions.lock().unwrap_or_else(PoisonError::into_inner).insert(inbox.address().to_owned(), inbox);
    }

    /// Detaches the inbox, unless another region took its address since.
    fn detach(&self, inbox: &Inbox<M, R>) {
        let mut regions = self.regions.lock().unwrap_or_else(PoisonError::into_inner);
        if regions.get(inbox.address()).is_some_and(|current| current.same_inbox(inbox)) {
            regions.remove(inbox.address());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_reach_the_attached_region_in_order() {
        let network: InMemoryTransport<u32> = InMemoryTransport::new();
        let (inbox, mut receiver, _returned) = Inbox::new("b", 8);
        network.attach(inbox);
        assert_eq!(network.addresses(), ["b"]);
        for n in 0..5 {
            network.send("b", if n % 2 == 0 { "even" } else { "odd" }, n).unwrap();
        }
        let mut got = Vec::new();
        while let Ok(inbound) = receiver.try_recv() {
            got.push((inbound.shard, *inbound.parcel.message()));
        }
        let expected: Vec<(String, u32)> =
            [("even", 0), ("odd", 1), ("even", 2), ("odd", 3), ("even", 4)].map(|(s, n)| (s.to_owned(), n)).into();
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn a_full_or_closed_inbox_hands_the_message_back() {
        let network: InMemoryTransport<&str> = InMemoryTransport::new();
        let (inbox, receiver, _returned) = Inbox::new("b", 2);
        network.attach(inbox);
        network.send("b", "1", "first").unwrap();
        network.send("b", "1", "second").unwrap();
        let full = network.send("b", "1", "third").unwrap_err();
        assert_eq!(full.error, TransportError::InboxFull { address: "b".into(), capacity: 2 });
        assert_eq!(full.message, "third");
        assert_eq!(full.to_string(), "message not delivered: the inbox of region b is full (2 messages)");
        drop(receiver);
        let closed = network.send("b", "1", "fourth").unwrap_err();
        assert_eq!(closed.error, TransportError::Closed { address: "b".into() });
        assert_eq!(closed.message, "fourth");
    }

    #[tokio::test]
    async fn detach_leaves_a_newer_region_of_the_same_address() {
        let network: InMemoryTransport<u8> = InMemoryTransport::new();
        let (old, _old_receiver, _old_returned) = Inbox::new("b", 4);
        let (new, mut new_receiver, _new_returned) = Inbox::new("b", 4);
        network.attach(old.clone());
        network.attach(new.clone());
        network.detach(&old);
        network.send("b", "s", 1).unwrap();
        assert_eq!(*new_receiver.try_recv().unwrap().parcel.message(), 1);
        network.detach(&new);
        assert!(network.addresses().is_empty());
        let gone = network.send("b", "s", 2).unwrap_err();
        assert_eq!(gone.error.to_string(), "no region at address b");
    }

    #[tokio::test]
    async fn a_request_reaches_the_inbox_with_its_replier_or_comes_back_whole() {
        use std::time::Duration;
        let network: InMemoryTransport<u8, u8> = InMemoryTransport::new();
        let (inbox, mut receiver, _returned) = Inbox::new("b", 4);
        network.attach(inbox);
        let (answered, mut answer) = tokio::sync::mpsc::unbounded_channel();
        let replier = |answered: tokio::sync::mpsc::UnboundedSender<Result<u8, AskError>>| {
            Replier::new("s", Duration::from_secs(5), move |outcome| {
                let _ = answered.send(outcome);
            })
        };
        network.ask("b", "s", 1, replier(answered.clone())).unwrap();
        match receiver.try_recv().unwrap().parcel {
            Parcel::Ask(request, replier) => {
                assert_eq!(request, 1);
                replier.reply(request + 1);
            }
            Parcel::Tell(_) => panic!("a request arrived as a message"),
        }
        assert_eq!(answer.try_recv().unwrap(), Ok(2));
        let back = network.ask("nowhere", "s", 3, replier(answered)).unwrap_err();
        assert_eq!(back.error, TransportError::UnknownAddress { address: "nowhere".into() });
        let (request, replier) = back.message;
        assert_eq!(request, 3);
        assert!(answer.try_recv().is_err(), "handed back unanswered");
        drop(replier);
        assert!(matches!(answer.try_recv().unwrap(), Err(AskError::Failed { .. })));
    }

    struct TellsOnly;

    impl Transport<u8, u8> for TellsOnly {
        fn send(&self, _: &str, _: &str, _: u8) -> Result<(), Undelivered<u8>> {
            Ok(())
        }
    }

    #[test]
    fn a_transport_that_carries_no_requests_fails_them_by_name() {
        let (answered, answer) = std::sync::mpsc::channel();
        let replier = Replier::new("s", std::time::Duration::from_secs(1), move |outcome| {
            let _ = answered.send(outcome);
        });
        TellsOnly.ask("b", "s", 1, replier).unwrap();
        assert_eq!(
            answer.recv().unwrap(),
            Err(AskError::Failed { shard: "s".into(), reason: "the region's transport carries no requests".into() })
        );
    }
}
