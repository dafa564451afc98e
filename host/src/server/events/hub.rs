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
//!
//! The hub also bounds the streams themselves: at most as many as the
//! caller of [`EventHub::subscribe`] allows are open at once (the node's
//! `--max-event-streams`), and a stream whose client takes nothing while
//! a whole backlog's worth of events is published (it has lost events by
//! then anyway) is dropped: its `close` token is cancelled, which closes
//! its connection (`conn.rs`) even though nothing polls the stream, and
//! the stream ends if polled. Its client reconnects with `Last-Event-ID`
//! and is told what it missed. The unread output a stream can leave in the
//! node meanwhile is bounded by the connection's write queue (`conn.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

/// What a stream and the hub share: how far the stream has read, and how
/// to close it.
struct Shared {
    /// The seq of the next event the stream takes.
    next: AtomicU64,
    /// Cancelled to drop the stream (and close its connection).
    close: CancellationToken,
}

/// The hub's view of one open stream, checked at each publish.
struct Reader {
    shared: Weak<Shared>,
    /// The stream's cursor at the previous publish.
    seen: u64,
    /// Whether events were waiting for it at the previous publish.
    waiting: bool,
    /// Events published since it last took one while events waited for it.
    stalled: u64,
}

/// Refused: the node already serves as many event streams as it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this node already serves {max} event streams, the most it allows (--max-event-streams); retry later")]
pub struct TooManyStreams {
    /// The cap.
    pub max: usize,
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
    /// The open streams (of every term), for the cap and the stall check.
    readers: Vec<Reader>,
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
        let backlog = Backlog {
            term: 0,
            open: false,
            first: 1,
            events: VecDeque::new(),
            capacity: capacity.max(1),
            readers: Vec::new(),
        };
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
    /// the capacity, and drops the streams that took nothing while a
    /// backlog's worth was published. Called after the turn that made them
    /// is committed.
    pub fn publish(&self, events: Vec<DecisionEvent>) {
        if events.is_empty() {
            return;
        }
        {
            let mut backlog = self.lock();
            let count = events.len() as u64;
            for mut event in events {
                event.seq = backlog.next_seq();
                backlog.events.push_back(Arc::new(event));
            }
            let excess = backlog.events.len().saturating_sub(backlog.capacity);
            backlog.events.drain(..excess);
            backlog.first += excess as u64;
            let (head, bound) = (backlog.next_seq(), backlog.capacity as u64);
            backlog.readers.retain_mut(|reader| {
                let Some(shared) = reader.shared.upgrade() else { return false };
                let next = shared.next.load(Ordering::Relaxed);
                if next != reader.seen {
                    reader.seen = next;
                    reader.stalled = 0;
                } else if reader.waiting {
                    reader.stalled += count;
                }
                reader.waiting = next < head;
                if reader.stalled >= bound {
                    tracing::info!(unread = head - next, "dropped an event stream whose client reads nothing");
                    shared.close.cancel();
                    return false;
                }
                true
            });
        }
        self.wake();
    }

    /// A stream of this term's events from `start`, unless `max_streams`
    /// are open already. Cancelling `close` ends it; the hub cancels it to
    /// drop a stream that reads nothing.
    pub fn subscribe(
        self: &Arc<Self>,
        start: Start,
        max_streams: usize,
        close: CancellationToken,
    ) -> Result<Subscription, TooManyStreams> {
        let mut published = self.published.subscribe();
        published.mark_unchanged();
        let mut backlog = self.lock();
        backlog.readers.retain(|reader| reader.shared.strong_count() > 0);
        if backlog.readers.len() >= max_streams {
            return Err(TooManyStreams { max: max_streams });
        }
        let (next, missed) = match start {
            Start::Now => (backlog.next_seq(), None),
            Start::Oldest => (backlog.first, None),
            Start::After { term, seq } if term == backlog.term => (seq.saturating_add(1).min(backlog.next_seq()), None),
            Start::After { .. } => (backlog.first, Some(0)),
        };
        let shared = Arc::new(Shared { next: AtomicU64::new(next), close });
        let waiting = next < backlog.next_seq();
        backlog.readers.push(Reader { shared: Arc::downgrade(&shared), seen: next, waiting, stalled: 0 });
        Ok(Subscription { hub: self.clone(), published, term: backlog.term, next, missed, shared })
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
    shared: Arc<Shared>,
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

    /// What comes next, waiting for it; `None` once the term is over or
    /// the stream was dropped.
    pub async fn next(&mut self) -> Option<Delivery> {
        loop {
            if self.shared.close.is_cancelled() {
                return None;
            }
            self.published.borrow_and_update();
            if let Some(delivery) = self.try_next() {
                self.shared.next.store(self.next, Ordering::Relaxed);
                return delivery;
            }
            tokio::select! {
                changed = self.published.changed() => if changed.is_err() { return None },
                _ = self.shared.close.cancelled() => return None,
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
#[path = "hub_tests.rs"]
mod tests;
