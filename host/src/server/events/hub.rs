//! The event hub: this leader's term's last [`BACKLOG`] decision events,
//! numbered from 1, that every stream reads at its own pace; their
//! publishing, the terms, and the bounds on streams and replays. The
//! reading side, each stream's cursor, is `subscription.rs`.
//!
//! The driver publishes a turn's events once the turn is committed
//! ([`EventHub::publish`], one lock per turn); each [`Subscription`] keeps
//! its own cursor into the backlog and waits on a `watch` for more. No
//! stream has a queue the node must fill: a stream that falls more than
//! the backlog behind gets [`Delivery::Missed`](super::Delivery::Missed)
//! and goes on from the oldest event kept, and the node never waits for it.
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
//!
//! And it bounds replays, the expensive reads of the stream: a stream that
//! starts more than [`REPLAY_FREE`] events behind the newest (`from=oldest`,
//! a `Last-Event-ID` far behind or of another term) holds one of
//! [`MAX_REPLAYS`] permits until it has read up to the newest event (or
//! ends); past them it is refused ([`Refused::ReplaysBusy`], `429
//! replays-busy`). Sixty clients looping replays of a full backlog once
//! spent a one-core node's only core on writing them, and a live region's
//! home answers waited 200–500 ms (issue 23). A reconnect that missed a
//! few events never needs a permit.
//!
//! A replay must reach the newest event within [`REPLAY_DEADLINE`] of its
//! start, or it is ended: its `close` token cancelled (closing its
//! connection, as for a stream that reads nothing) and its permit given
//! back. Else a client that starts a replay and never reads would keep its
//! permit until a backlog's worth of events passed, and four such clients
//! could hold every permit of a quiet node for hours. No timer runs per
//! stream: the deadlines are checked where a permit is wanted (a replay
//! that finds none free ends the overdue ones and tries again), at each
//! publish, and by the stream itself whenever it reads; so a quiet node
//! (no publishes) gives an unread replay's permit to the next replay once
//! the deadline has passed.
//!
//! Each event is kept with its SSE frame ([`frame::event`]), made by the
//! first stream that sends it (none is made while no stream reads), so
//! the other streams copy bytes rather than serialise the event again;
//! and a stream takes many events per lock ([`Subscription::next_frames`]).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::subscription::{Replay, Shared, Subscription};
use super::{DecisionEvent, frame};
use crate::server::api_error::ErrorCode;

/// Most events kept for streams that resume or fall behind. At a few
/// hundred bytes each, and as much again for their frames, about 6 MiB.
pub const BACKLOG: usize = 10_000;

/// How far behind the newest event a stream may start without a replay
/// permit: a tenth of the [`BACKLOG`] (a few hundred KiB to send), more
/// than a client that reconnects at once misses, far less than a replay
/// of everything kept.
pub const REPLAY_FREE: u64 = 1_000;

/// Most streams replaying at once, over the node (see the module
/// documentation): few enough that replays take a bounded share of one
/// core, enough for a few dashboards opening at once.
pub const MAX_REPLAYS: usize = 4;

/// How long a replay may take to reach the newest event before it is
/// ended and its permit given back (see the module documentation). A
/// whole backlog is a few MiB of frames, which a client that reads sends
/// in a second or two (30 s is ~100 KiB/s); a client that reads nothing
/// holds a permit this long at most, not until [`BACKLOG`] more events.
pub const REPLAY_DEADLINE: Duration = Duration::from_secs(30);

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

/// Why [`EventHub::subscribe`] refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The node already serves as many event streams as it allows.
    #[error("this node already serves {max} event streams, the most it allows (--max-event-streams); retry later")]
    TooManyStreams {
        /// The cap.
        max: usize,
    },
    /// The stream would replay, and as many streams replay already as may.
    #[error(
        "{max} event streams are replaying already, the most at once; this one would start {behind} events \
         behind the newest (a stream more than {free} behind replays): retry after the time Retry-After gives, \
         or start from now"
    )]
    ReplaysBusy {
        /// The most replays at once.
        max: usize,
        /// How far behind the newest the stream would start.
        behind: u64,
        /// How far behind a stream may start without replaying.
        free: u64,
    },
}

impl Refused {
    /// The error code the REST answer carries.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refused::TooManyStreams { .. } => ErrorCode::TooManyStreams,
            Refused::ReplaysBusy { .. } => ErrorCode::ReplaysBusy,
        }
    }
}

/// An event kept, and its SSE frame once a stream sent it.
pub(super) struct Kept {
    pub(super) event: Arc<DecisionEvent>,
    frame: OnceLock<Bytes>,
}

impl Kept {
    /// Its frame in `term` (the backlog's: it keeps one term's events).
    pub(super) fn frame(&self, term: u64) -> &Bytes {
        self.frame.get_or_init(|| frame::event(term, &self.event))
    }
}

pub(super) struct Backlog {
    /// The leadership's term; 0 before the first.
    pub(super) term: u64,
    /// False once the term's driver stopped: its streams end.
    pub(super) open: bool,
    /// The seq of `events[0]`.
    pub(super) first: u64,
    pub(super) events: VecDeque<Kept>,
    capacity: usize,
    /// The open streams (of every term), for the cap and the stall check.
    readers: Vec<Reader>,
}

impl Backlog {
    /// The seq the next event will get.
    pub(super) fn next_seq(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// The hub. See the module documentation.
pub struct EventHub {
    backlog: Mutex<Backlog>,
    /// Bumped on every publish and term change; streams wait on it.
    published: watch::Sender<u64>,
    /// The replay permits, [`MAX_REPLAYS`] of them by default.
    replays: Arc<Semaphore>,
    max_replays: usize,
    /// How far behind a stream may start without a permit.
    replay_free: u64,
    /// How long a stream may hold a permit.
    replay_deadline: Duration,
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
    /// A hub keeping the last `capacity` events (at least one), with
    /// [`MAX_REPLAYS`] replays of more than [`REPLAY_FREE`] events at once,
    /// each ended after [`REPLAY_DEADLINE`].
    pub fn new(capacity: usize) -> Self {
        Self::with_replays(capacity, MAX_REPLAYS, REPLAY_FREE, REPLAY_DEADLINE)
    }

    /// A hub keeping the last `capacity` events, letting `max_replays`
    /// streams at once start more than `replay_free` events behind, each
    /// for up to `replay_deadline`.
    pub fn with_replays(capacity: usize, max_replays: usize, replay_free: u64, replay_deadline: Duration) -> Self {
        let backlog = Backlog {
            term: 0,
            open: false,
            first: 1,
            events: VecDeque::new(),
            capacity: capacity.max(1),
            readers: Vec::new(),
        };
        EventHub {
            backlog: Mutex::new(backlog),
            published: watch::channel(0).0,
            replays: Arc::new(Semaphore::new(max_replays)),
            max_replays,
            replay_free,
            replay_deadline,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Backlog> {
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
    /// backlog's worth was published and the replays past their deadline.
    /// Called after the turn that made them is committed.
    pub fn publish(&self, events: Vec<DecisionEvent>) {
        if events.is_empty() {
            return;
        }
        {
            let mut backlog = self.lock();
            let count = events.len() as u64;
            for mut event in events {
                event.seq = backlog.next_seq();
                backlog.events.push_back(Kept { event: Arc::new(event), frame: OnceLock::new() });
            }
            let excess = backlog.events.len().saturating_sub(backlog.capacity);
            backlog.events.drain(..excess);
            backlog.first += excess as u64;
            let (head, bound, now) = (backlog.next_seq(), backlog.capacity as u64, Instant::now());
            backlog.readers.retain_mut(|reader| {
                let Some(shared) = reader.shared.upgrade() else { return false };
                if shared.end_if_overdue(now) {
                    tracing::info!("ended an event stream's replay past its deadline");
                    return false;
                }
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
    /// are open already, or it starts far enough behind to replay and no
    /// replay permit is free (once those past their deadline are ended).
    /// Cancelling `close` ends it; the hub cancels it to drop a stream that
    /// reads nothing or a replay past its deadline.
    pub fn subscribe(
        self: &Arc<Self>,
        start: Start,
        max_streams: usize,
        close: CancellationToken,
    ) -> Result<Subscription, Refused> {
        let mut published = self.published.subscribe();
        published.mark_unchanged();
        let mut backlog = self.lock();
        backlog.readers.retain(|reader| reader.shared.strong_count() > 0);
        if backlog.readers.len() >= max_streams {
            return Err(Refused::TooManyStreams { max: max_streams });
        }
        let head = backlog.next_seq();
        let (next, missed) = match start {
            Start::Now => (head, None),
            Start::Oldest => (backlog.first, None),
            Start::After { term, seq } if term == backlog.term => (seq.saturating_add(1).min(head), None),
            Start::After { .. } => (backlog.first, Some(0)),
        };
        // What it will be sent: from the oldest kept if it resumes from
        // before that.
        let behind = head - next.max(backlog.first);
        let replay = if behind > self.replay_free {
            let now = Instant::now();
            let permit = match self.replays.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    end_overdue_replays(&mut backlog, now);
                    let refused = Refused::ReplaysBusy { max: self.max_replays, behind, free: self.replay_free };
                    self.replays.clone().try_acquire_owned().map_err(|_| refused)?
                }
            };
            Some(Replay::new(permit, now + self.replay_deadline))
        } else {
            None
        };
        let shared = Arc::new(Shared::new(next, close, replay));
        let waiting = next < head;
        backlog.readers.push(Reader { shared: Arc::downgrade(&shared), seen: next, waiting, stalled: 0 });
        Ok(Subscription::new(self.clone(), published, backlog.term, missed, shared))
    }
}

/// Ends the streams still replaying past their deadline at `now`, giving
/// their permits back.
fn end_overdue_replays(backlog: &mut Backlog, now: Instant) {
    backlog.readers.retain(|reader| {
        let Some(shared) = reader.shared.upgrade() else { return false };
        if shared.end_if_overdue(now) {
            tracing::info!("ended an event stream's replay past its deadline, for a new replay");
            return false;
        }
        true
    });
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
