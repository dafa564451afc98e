//! Placement writes in slices. One `POST …/placements` may name 10,000
//! shards, and sixteen may arrive at once; written in one turn, each is
//! ten thousand placement changes, region pushes and events before the
//! turn can commit and the next heartbeat be answered. So every placement
//! write (set or remove) joins one queue, and each turn writes at most
//! [`PLACEMENTS_PER_TURN`] placements from its head, after that turn's
//! region inputs were committed and answered (`Driver::step` commits twice
//! then): a heartbeat or home answer waits for at most a slice already under
//! way, never for the slice of its own turn.
//!
//! A write is checked as a whole when it reaches the head (ids, targets,
//! duplicates, the type's placement limit), so a refused write changes
//! nothing. While one runs, the queue holds every later write behind it:
//! no other placement write interleaves, so the room the check saw stays.
//! Its answer (every shard written, the type's live count) is released
//! after the commit of its last slice. Readers may see a large write partly
//! applied while it runs, and a node that stops midway keeps the slices it
//! committed; the write got no answer then, and sending it again is safe
//! (a placement write sets, it does not add). A write whose client has
//! gone before it reaches the head is dropped unwritten; a write a follower
//! forwarded is waited for in a task of its own (`rest/placements.rs`), so
//! the follower's shorter forward timeout never drops it.
//!
//! Every placement written is pushed to every region of its type, and a
//! region's session is one ordered queue: a home answer waits behind every
//! push queued before it. So a slice is sized to keep the type's slowest
//! session at most [`PUSH_DEPTH`] messages deep: writes wait for the
//! regions to read their pushes (up to [`STALL_MS`] for a region that does
//! not read at all), home answers never wait behind a burst of writes, and
//! no session is closed because its queue filled. And a slice pushes at
//! most [`PUSHES_PER_TURN`] messages over the type's sessions, so a type
//! with many regions gets smaller slices and a turn stays cheap. The
//! driver's thread paces the slices too (`Driver::pace_slices`): after a
//! turn that wrote one, the next waits as long as that turn took, so on a
//! busy core writes take about half of it and the sessions the rest.

use std::collections::{BTreeMap, VecDeque};

use super::request::{Operated, Operation, Refusal, Reply};
use super::{Driver, Waiter};
use crate::coordinator::{Millis, OperatorRequest, PlacementError, Reply as CoordinatorReply, RequestId, Stamp};

/// Most placements written in one turn, over every queued write.
pub const PLACEMENTS_PER_TURN: usize = 500;

/// Most placement pushes (placements times the type's region sessions) one
/// turn may send: a type with many regions gets smaller slices, so a turn's
/// cost stays bounded whatever the fan-out.
pub const PUSHES_PER_TURN: usize = 10_000;

/// Most placement pushes the node sends a second (the pace of the slices):
/// encoding and writing them to the regions' sockets is the work of the
/// threads that also serve the sessions.
pub const PUSHES_PER_SECOND: usize = 100_000;

/// Most placement writes waiting; past it the answer is `429 writes-busy`.
pub const QUEUED_WRITES: usize = 256;

/// Most messages a slice may leave queued in a region's session: a home
/// answer sent after a slice waits behind at most this many pushes. A
/// slice is written only when every session of the type has at most half
/// of it queued, and fills it to this depth.
pub const PUSH_DEPTH: usize = 500;

/// How long a write waits for a region that does not read before it goes
/// on anyway (that region's session is then closed, and it is told). The
/// slices that follow keep to [`PUSHES_PER_TURN`] all the same.
pub const STALL_MS: Millis = 10_000;

/// What a queued write does.
enum Change {
    /// Set these placements (shard, target); the next slice is at the front.
    Set(VecDeque<(String, String)>),
    /// Remove one shard's placement.
    Remove(String),
}

/// A placement write waiting or under way.
struct Write {
    entity_type: String,
    change: Change,
    /// Checked as a whole: its first slice was written.
    started: bool,
    applied: Vec<String>,
    stale: Vec<String>,
    reply: Reply<Result<Operated, Refusal>>,
}

/// The queue of placement writes. See the module documentation.
#[derive(Default)]
pub(super) struct PlacementWrites {
    queue: VecDeque<Write>,
    /// Writes whose slice this turn holds, by the coordinator request that
    /// carries it; its reply comes with the turn's commit.
    in_flight: BTreeMap<RequestId, Write>,
    /// Since when the head write has waited for a session's room.
    stalled_since: Option<Millis>,
    /// The pushes the last turn's slices sent (0: it wrote none).
    pushed: usize,
    /// No slice before this time (`Driver::pace_slices`).
    next_slice_at: Millis,
}

impl PlacementWrites {
    /// True while a write waits: the driver does not sleep until its next
    /// tick then.
    pub(super) fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The time of the next slice.
    pub(super) fn next_slice_at(&self) -> Millis {
        self.next_slice_at
    }

    /// After a turn that took `spent`: if it wrote a slice, the next one
    /// waits as long, and long enough to keep the node's pushes under
    /// [`PUSHES_PER_SECOND`] (1 ms to 1 s).
    pub(super) fn pace(&mut self, now: Millis, spent: std::time::Duration) {
        let pushed = std::mem::take(&mut self.pushed);
        if pushed > 0 {
            let sending = (pushed * 1_000 / PUSHES_PER_SECOND) as Millis;
            self.next_slice_at = now + (spent.as_millis() as Millis).max(sending).clamp(1, 1_000);
        }
    }

    /// True while the head write waits for a session to read.
    pub(super) fn stalled(&self) -> bool {
        self.stalled_since.is_some()
    }
}

impl Driver {
    /// Queues a placement write (`operation` is `SetPlacements` or
    /// `RemovePlacement`); its answer comes after its last slice.
    pub(super) fn queue_write(
        &mut self,
        entity_type: String,
        operation: Operation,
        reply: Reply<Result<Operated, Refusal>>,
    ) {
        if self.writes.queue.len() >= QUEUED_WRITES {
            return self.answer(reply, Err(Refusal::WritesBusy { queued: QUEUED_WRITES }));
        }
        let change = match operation {
            Operation::SetPlacements(placements) => Change::Set(placements.into()),
            Operation::RemovePlacement(shard) => Change::Remove(shard),
            other => unreachable!("not a placement write: {other:?}"),
        };
        let write = Write { entity_type, change, started: false, applied: vec![], stale: vec![], reply };
        self.writes.queue.push_back(write);
    }

    /// Writes at most [`PLACEMENTS_PER_TURN`] placements from the head of
    /// the queue; each write's reply comes with the turn's commit
    /// ([`Driver::on_slice_written`]).
    pub(super) fn write_slices(&mut self) {
        let mut budget = PLACEMENTS_PER_TURN;
        while budget > 0 {
            let Some(mut write) = self.writes.queue.pop_front() else { return };
            if !write.started && write.reply.is_closed() {
                // Its client left before it began: nothing of it is written,
                // and nobody waits for its answer (a client that retries
                // after a timeout does not queue the same work twice).
                tracing::debug!(r#type = %write.entity_type, "a placement write whose client left is dropped unstarted");
                continue;
            }
            if !write.started
                && let Err(refusal) = self.check_write(&mut write)
            {
                self.answer(write.reply, Err(refusal));
                continue;
            }
            if !self.catalog.contains(&write.entity_type) {
                // Deleted under the write: what it wrote went with the type.
                let refusal = Refusal::UnknownType(write.entity_type.clone());
                self.answer(write.reply, Err(refusal));
                continue;
            }
            let (room, sessions) = self.room_for(&write.entity_type, budget);
            if room == 0 {
                self.writes.queue.push_front(write);
                return;
            }
            write.started = true;
            let stamp = Stamp::new(self.stamp_time(), self.origin.clone());
            let (op, size) = match &mut write.change {
                Change::Set(rest) => {
                    let slice: Vec<_> = rest.drain(..room.min(rest.len())).collect();
                    let size = slice.len();
                    (OperatorRequest::SetPlacements { placements: slice, stamp }, size)
                }
                Change::Remove(shard) => (OperatorRequest::RemovePlacements { shards: vec![shard.clone()], stamp }, 1),
            };
            budget -= size;
            self.writes.pushed += size * sessions;
            let entity_type = write.entity_type.clone();
            let request = self.next_request;
            self.writes.in_flight.insert(request, write);
            self.operate(&entity_type, op, Waiter::Slice);
        }
    }

    /// The coordinator's reply to a slice, with the commit that holds it:
    /// the write goes back to the head of the queue for its next slice, or
    /// is answered.
    pub(super) fn on_slice_written(&mut self, request: RequestId, reply: CoordinatorReply) {
        let Some(mut write) = self.writes.in_flight.remove(&request) else { return };
        match reply {
            CoordinatorReply::PlacementsWritten { applied, stale } => {
                write.applied.extend(applied);
                write.stale.extend(stale);
            }
            CoordinatorReply::PlacementRefused(error) => return self.refuse_midway(write, error),
            other => return self.answer(write.reply, Err(Refusal::Unexpected(format!("{other:?}")))),
        }
        if matches!(&write.change, Change::Set(rest) if !rest.is_empty()) {
            // Only the turn's last write can be cut short by the budget.
            self.writes.queue.push_front(write);
            return;
        }
        let live_placements = self.catalog.get(&write.entity_type).map_or(0, |e| e.coordinator.live_placement_count());
        let reply = CoordinatorReply::PlacementsWritten { applied: write.applied, stale: write.stale };
        self.answer(write.reply, Ok(Operated { reply, live_placements }));
    }

    /// How many placements of `entity_type` this turn may write: the
    /// budget left, bounded by what keeps its slowest session at most
    /// [`PUSH_DEPTH`] deep; 0 while that session must read first (then the
    /// write stalls, for at most [`STALL_MS`]). With the sessions each
    /// placement is pushed to (at least 1).
    fn room_for(&mut self, entity_type: &str, budget: usize) -> (usize, usize) {
        let queued = self.sessions.deepest(entity_type);
        let sessions = self.sessions.count(entity_type).max(1);
        let fan_out = (PUSHES_PER_TURN / sessions).max(1);
        let room = if queued <= PUSH_DEPTH / 2 { (PUSH_DEPTH - queued).min(budget).min(fan_out) } else { 0 };
        if room > 0 {
            self.writes.stalled_since = None;
            return (room, sessions);
        }
        let since = *self.writes.stalled_since.get_or_insert(self.now);
        if self.now.saturating_sub(since) < STALL_MS {
            return (0, sessions);
        }
        tracing::warn!(
            r#type = entity_type,
            waited_ms = STALL_MS,
            "a region does not read its session; placement writes go on without it"
        );
        self.writes.stalled_since = None;
        (budget.min(fan_out), sessions)
    }

    /// The whole write's check, when it reaches the head of the queue.
    fn check_write(&self, write: &mut Write) -> Result<(), Refusal> {
        let entry = self.catalog.get(&write.entity_type)?;
        match &mut write.change {
            Change::Set(placements) => {
                entry.coordinator.check_placements(placements.make_contiguous()).map_err(Refusal::Placement)
            }
            Change::Remove(shard) => {
                if entry.coordinator.durable().placements.get(shard).is_none_or(|p| p.target.is_none()) {
                    return Err(Refusal::NoPlacement { entity_type: write.entity_type.clone(), shard: shard.clone() });
                }
                Ok(())
            }
        }
    }

    /// A slice refused: checked as a whole first, with no other write
    /// between, so only a change of the type's limits under the write gets
    /// here. The answer says so; the slices before it stay written.
    fn refuse_midway(&mut self, write: Write, error: PlacementError) {
        tracing::warn!(r#type = %write.entity_type, written = write.applied.len(), %error, "a placement write stopped midway");
        self.answer(write.reply, Err(Refusal::Placement(error)));
    }
}
