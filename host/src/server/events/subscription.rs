//! The reading side of the event hub: a stream's [`Subscription`], its
//! cursor into the backlog, how it waits for more and takes what is there
//! (an event at a time, [`Subscription::next`], or many events' frames
//! per lock, [`Subscription::next_frames`]), and its replay permit: given
//! back once it has read up to the newest event, or taken from it, with
//! the stream ended, once its [`REPLAY_DEADLINE`](super::REPLAY_DEADLINE)
//! has passed (`hub.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_util::sync::CancellationToken;

use super::hub::{Backlog, EventHub};
use super::{DecisionEvent, frame};

/// Most events a stream takes per lock of the hub, whatever `?type=`
/// skips: the lock is held for a bounded time.
const MAX_TAKEN: usize = 1_024;

/// What a stream reads next.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// The next event.
    Event(Arc<DecisionEvent>),
    /// This many events are lost to the stream (0: unknown, from another
    /// term); it goes on with the oldest one kept.
    Missed(u64),
}

/// A replay permit, held while the stream replays, and when it must have
/// read up to the newest event.
pub(super) struct Replay {
    _permit: OwnedSemaphorePermit,
    until: Instant,
}

impl Replay {
    pub(super) fn new(permit: OwnedSemaphorePermit, until: Instant) -> Self {
        Replay { _permit: permit, until }
    }
}

/// What a stream and the hub share: how far the stream has read, how to
/// close it, and its replay permit (so the hub can take it back from a
/// stream nothing polls).
pub(super) struct Shared {
    /// The seq of the next event the stream takes.
    pub(super) next: AtomicU64,
    /// Cancelled to drop the stream (and close its connection).
    pub(super) close: CancellationToken,
    replay: Mutex<Option<Replay>>,
}

impl Shared {
    pub(super) fn new(next: u64, close: CancellationToken, replay: Option<Replay>) -> Self {
        Shared { next: AtomicU64::new(next), close, replay: Mutex::new(replay) }
    }

    fn replay(&self) -> MutexGuard<'_, Option<Replay>> {
        self.replay.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends the stream if it still holds a replay permit at `now`, past
    /// its deadline: gives the permit back and cancels `close`. Whether it
    /// did.
    pub(super) fn end_if_overdue(&self, now: Instant) -> bool {
        let mut replay = self.replay();
        if replay.as_ref().is_none_or(|replay| now < replay.until) {
            return false;
        }
        *replay = None;
        self.close.cancel();
        true
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
    /// Whether events waited past the last frames it took.
    behind: bool,
    shared: Arc<Shared>,
}

impl Subscription {
    pub(super) fn new(
        hub: Arc<EventHub>,
        published: watch::Receiver<u64>,
        term: u64,
        missed: Option<u64>,
        shared: Arc<Shared>,
    ) -> Self {
        let next = shared.next.load(Ordering::Relaxed);
        Subscription { hub, published, term, next, missed, behind: false, shared }
    }

    /// The term this stream reads.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// True when the stream has read every event published so far.
    pub fn caught_up(&self) -> bool {
        let backlog = self.hub.lock();
        self.missed.is_none() && self.next >= backlog.next_seq()
    }

    /// Whether events waited past the frames it took last
    /// ([`Subscription::next_frames`]): more is there to take at once.
    pub fn behind(&self) -> bool {
        self.behind
    }

    /// Whether it holds a replay permit (it starts far behind and has not
    /// read up to the newest event yet, nor been ended for its deadline).
    pub fn replaying(&self) -> bool {
        self.shared.replay().is_some()
    }

    /// What comes next, waiting for it; `None` once the term is over or
    /// the stream was dropped.
    pub async fn next(&mut self) -> Option<Delivery> {
        self.wait(Self::try_next).await
    }

    /// The frames of what comes next, waiting for it: as many events as
    /// are there, up to about `budget` bytes (at least one event) and
    /// [`MAX_TAKEN`] events, those of another type than `only` skipped (so
    /// the bytes may be empty); `None` once the term is over or the stream
    /// was dropped.
    pub async fn next_frames(&mut self, only: Option<&str>, budget: usize) -> Option<Bytes> {
        self.wait(|subscription| subscription.try_frames(only, budget)).await
    }

    /// Waits until `take` finds something: `Some(None)` ends the stream,
    /// as does a replay past its deadline.
    async fn wait<T>(&mut self, mut take: impl FnMut(&mut Self) -> Option<Option<T>>) -> Option<T> {
        loop {
            if self.shared.close.is_cancelled() || self.shared.end_if_overdue(Instant::now()) {
                return None;
            }
            self.published.borrow_and_update();
            if let Some(taken) = take(self) {
                self.shared.next.store(self.next, Ordering::Relaxed);
                return taken;
            }
            tokio::select! {
                changed = self.published.changed() => if changed.is_err() { return None },
                _ = self.shared.close.cancelled() => return None,
            }
        }
    }

    /// A loss to tell first, if any: the one found at the start, or the
    /// events dropped from the backlog before the stream took them.
    fn take_missed(&mut self, backlog: &Backlog) -> Option<u64> {
        if let Some(missed) = self.missed.take() {
            return Some(missed);
        }
        if self.next < backlog.first {
            let missed = backlog.first - self.next;
            self.next = backlog.first;
            return Some(missed);
        }
        None
    }

    /// Gives the replay permit back once the stream has read up to the newest.
    fn release_at_head(&mut self, backlog: &Backlog) {
        if self.missed.is_none() && self.next >= backlog.next_seq() {
            *self.shared.replay() = None;
        }
    }

    /// What comes next if it is there: `Some(None)` once the term is over.
    fn try_next(&mut self) -> Option<Option<Delivery>> {
        let hub = self.hub.clone();
        let backlog = hub.lock();
        if backlog.term != self.term {
            return Some(None);
        }
        if let Some(missed) = self.take_missed(&backlog) {
            return Some(Some(Delivery::Missed(missed)));
        }
        let delivery = match backlog.events.get((self.next - backlog.first) as usize) {
            Some(kept) => {
                self.next += 1;
                Some(Some(Delivery::Event(kept.event.clone())))
            }
            None if !backlog.open => Some(None),
            None => None,
        };
        self.release_at_head(&backlog);
        delivery
    }

    /// The frames of what is there (see [`Subscription::next_frames`]):
    /// `Some(None)` once the term is over, `None` if nothing is there.
    fn try_frames(&mut self, only: Option<&str>, budget: usize) -> Option<Option<Bytes>> {
        let hub = self.hub.clone();
        let backlog = hub.lock();
        if backlog.term != self.term {
            return Some(None);
        }
        let mut out = BytesMut::new();
        let mut took = false;
        if let Some(missed) = self.take_missed(&backlog) {
            out.extend_from_slice(&frame::missed(missed));
            took = true;
        }
        let from = (self.next - backlog.first) as usize;
        for kept in backlog.events.range(from..).take(MAX_TAKEN) {
            if only.is_some_and(|only| kept.event.entity_type != only) {
                self.next += 1;
                took = true;
                continue;
            }
            let frame = kept.frame(backlog.term);
            if !out.is_empty() && out.len() + frame.len() > budget {
                break;
            }
            self.next += 1;
            took = true;
            out.extend_from_slice(frame);
        }
        self.release_at_head(&backlog);
        self.behind = self.next < backlog.next_seq();
        match took {
            true => Some(Some(out.freeze())),
            false if !backlog.open => Some(None),
            false => None,
        }
    }
}
