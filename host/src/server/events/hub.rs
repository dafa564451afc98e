//! The event hub: this leader's term's last [`BACKLOG`] decision events,
//! numbered from 1, that every stream reads at its own pace.
//!
//! The driver publishes a turn's events once the turn is committed
//! ([`EventHub::publish`], one lock per turn); each [`Subscription`] keeps
//! its own cursor into the backlog and waits on a `watch` for more. No
//! stream has a queue the node must fill: a stream that falls more than
//! the backlog behind gets [`Delivery::Missed`] and goes on from the oldest
//! event kept, and the node never waits for it.
//!
//! A new leadership ([`EventHub::begin_term`]) starts numbering again and
//! ends the streams of the old term ([`EventHub::end_term`] when a driver
//! stops), so their clients reconnect to whoever leads now.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::DecisionEvent;

/// Most events kept for streams that resume or fall behind. At a few
/// hundred bytes each, about 3 MiB.
pub const BACKLOG: usize = 10_000;

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With the next event published.
    Now,
    /// With the oldest event kept.
    Oldest,
    /// After the event `<term>-<seq>` (a `Last-Event-ID`): from the next one
    /// if it is still kept, else told what was missed first.
    After {
        /// The term the client saw.
        term: u64,
        /// The last event it saw.
        seq: u64,
    },
}

/// What a stream reads next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The next event.
    Event(Arc<DecisionEvent>),
    /// This many events are lost to the stream (0: unknown, from another
    /// term); it goes on with the oldest one kept.
    Missed(u64),
}

struct Backlog {
    /// The leadership's term; 0 before the first.
    term: u64,
    /// False once the term's driver stopped: its streams end.
    open: bool,
    /// The seq of `events[0]`.
    first: u64,
    events: VecDeque<Arc<DecisionEvent>>,
    capacity: usize,
}

impl Backlog {
    /// The seq the next event will get.
    fn next_seq(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// The hub. See the module documentation.
pub struct EventHub {
    backlog: Mutex<Backlog>,
    /// Bumped on every publish and term change; streams wait on it.
    published: watch::Sender<u64>,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub::new(BACKLOG)
    }
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backlog = self.lock();
        f.debug_struct("EventHub").field("term", &backlog.term).field("next_seq", &backlog.next_seq()).finish()
    }
}

impl EventHub {
    /// A hub keeping the last `capacity` events (at least one).
    pub fn new(capacity: usize) -> Self {
        let backlog = Backlog { term: 0, open: false, first: 1, events: VecDeque::new(), capacity: capacity.max(1) };
        EventHub { backlog: Mutex::new(backlog), published: watch::channel(0).0 }
    }

    fn lock(&self) -> MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn wake(&self) {
        self.published.send_modify(|version| *version += 1);
    }

    /// A leadership of `term` begins (a node alone: term 1): numbering
    /// starts at 1 again, the old term's events and streams are gone.
    pub fn begin_term(&self, term: u64) {
        {
            let mut backlog = self.lock();
            backlog.term = term;
            backlog.open = true;
            backlog.first = 1;
            backlog.events.clear();
        }
        self.wake();
    }

    /// The leadership of `term` ended (its driver stopped): its streams
    /// end once they have read what was published. A later term is left alone.
    pub fn end_term(&self, term: u64) {
        {
            let mut backlog = self.lock();
            if backlog.term != term {
                return;
            }
            backlog.open = false;
        }
        self.wake();
    }

    /// The current term (0 before the first).
    pub fn term(&self) -> u64 {
        self.lock().term
    }

    /// Numbers `events` in order and keeps them, dropping the oldest past
    /// the capacity. Called after the turn that made them is committed.
    pub fn publish(&self, events: Vec<DecisionEvent>) {
        if events.is_empty() {
            return;
        }
        {
            let mut backlog = self.lock();
            for mut event in events {
                event.seq = backlog.next_seq();
                backlog.events.push_back(Arc::new(event));
            }
            let excess = backlog.events.len().saturating_sub(backlog.capacity);
            backlog.events.drain(..excess);
            backlog.first += excess as u64;
        }
        self.wake();
    }

    /// A stream of this term's events from `start`.
    pub fn subscribe(self: &Arc<Self>, start: Start) -> Subscription {
        let mut published = self.published.subscribe();
        published.mark_unchanged();
        let backlog = self.lock();
        let (next, missed) = match start {
            Start::Now => (backlog.next_seq(), None),
            Start::Oldest => (backlog.first, None),
            Start::After { term, seq } if term == backlog.term => (seq.saturating_add(1).min(backlog.next_seq()), None),
            Start::After { .. } => (backlog.first, Some(0)),
        };
        Subscription { hub: self.clone(), published, term: backlog.term, next, missed }
    }
}

/// One stream's cursor into the hub.
pub struct Subscription {
    hub: Arc<EventHub>,
    published: watch::Receiver<u64>,
    term: u64,
    next: u64,
    /// A loss to tell before the next event.
    missed: Option<u64>,
}

impl Subscription {
    /// The term this stream reads.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// True when the stream has read every event published so far.
    pub fn caught_up(&self) -> bool {
        let backlog = self.hub.lock();
        self.missed.is_none() && self.next >= backlog.next_seq()
    }

    /// What comes next, waiting for it; `None` once the term is over.
    pub async fn next(&mut self) -> Option<Delivery> {
        loop {
            self.published.borrow_and_update();
            if let Some(delivery) = self.try_next() {
                return delivery;
            }
            if self.published.changed().await.is_err() {
                return None;
            }
        }
    }

    /// What comes next if it is there: `Some(None)` once the term is over.
    fn try_next(&mut self) -> Option<Option<Delivery>> {
        let backlog = self.hub.lock();
        if backlog.term != self.term {
            return Some(None);
        }
        if let Some(missed) = self.missed.take() {
            return Some(Some(Delivery::Missed(missed)));
        }
        if self.next < backlog.first {
            let missed = backlog.first - self.next;
            self.next = backlog.first;
            return Some(Some(Delivery::Missed(missed)));
        }
        match backlog.events.get((self.next - backlog.first) as usize) {
            Some(event) => {
                self.next += 1;
                Some(Some(Delivery::Event(event.clone())))
            }
            None if !backlog.open => Some(None),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::server::events::EventKind;

    fn homed(shard: &str) -> DecisionEvent {
        DecisionEvent { shard_id: Some(shard.into()), ..DecisionEvent::new(EventKind::ShardHomed, "cart", 1) }
    }

    fn shard(delivery: Option<Delivery>) -> String {
        match delivery {
            Some(Delivery::Event(event)) => format!("{}:{}", event.seq, event.shard_id.as_deref().unwrap()),
            other => format!("{other:?}"),
        }
    }

    async fn next(subscription: &mut Subscription) -> Option<Delivery> {
        tokio::time::timeout(Duration::from_secs(30), subscription.next()).await.expect("a delivery in time")
    }

    #[tokio::test]
    async fn events_are_numbered_in_order_and_streams_start_where_asked() {
        let hub = Arc::new(EventHub::new(10));
        hub.begin_term(3);
        hub.publish(vec![homed("a"), homed("b")]);
        let mut now = hub.subscribe(Start::Now);
        let mut oldest = hub.subscribe(Start::Oldest);
        let mut resumed = hub.subscribe(Start::After { term: 3, seq: 1 });
        assert!(now.caught_up() && !oldest.caught_up() && !resumed.caught_up());
        hub.publish(vec![homed("c")]);
        assert_eq!(shard(next(&mut now).await), "3:c");
        assert_eq!(shard(next(&mut oldest).await), "1:a");
        assert_eq!(shard(next(&mut oldest).await), "2:b");
        assert_eq!(shard(next(&mut oldest).await), "3:c");
        assert_eq!(shard(next(&mut resumed).await), "2:b");
        assert_eq!(now.term(), 3);
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_the_backlog_is_told_what_it_missed() {
        let hub = Arc::new(EventHub::new(4));
        hub.begin_term(1);
        let mut slow = hub.subscribe(Start::Now);
        hub.publish((0..10).map(|i| homed(&i.to_string())).collect());
        assert_eq!(next(&mut slow).await, Some(Delivery::Missed(6)));
        assert_eq!(shard(next(&mut slow).await), "7:6");
        let mut old = hub.subscribe(Start::After { term: 1, seq: 2 });
        assert_eq!(next(&mut old).await, Some(Delivery::Missed(4)), "events 3 to 6 are gone");
    }

    #[tokio::test]
    async fn another_terms_resume_is_a_loss_of_unknown_size_and_a_new_term_ends_streams() {
        let hub = Arc::new(EventHub::new(4));
        hub.begin_term(7);
        hub.publish(vec![homed("a")]);
        let mut stale = hub.subscribe(Start::After { term: 5, seq: 99 });
        assert_eq!(next(&mut stale).await, Some(Delivery::Missed(0)));
        assert_eq!(shard(next(&mut stale).await), "1:a");
        let mut live = hub.subscribe(Start::Now);
        hub.end_term(6);
        hub.publish(vec![homed("b")]);
        assert_eq!(shard(next(&mut live).await), "2:b", "ending another term changes nothing");
        hub.end_term(7);
        assert_eq!(next(&mut live).await, None);
        let mut before = hub.subscribe(Start::Now);
        hub.begin_term(8);
        assert_eq!(next(&mut before).await, None, "a new term ends the old term's streams");
    }
}
