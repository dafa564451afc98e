//! The node's clocks, behind one trait so tests can step them: the one
//! home of time for the driver and the strategy slots.
//!
//! Every duration the coordinators measure (leases, heartbeat and removal
//! timeouts, hand-off deadlines, rebalance intervals, tombstone retention)
//! comes from [`Clocks::monotonic`]: milliseconds that never step, whatever
//! the wall clock does (an NTP step, an operator's `date -s`). It reads
//! like the wall clock at the driver's start — it is anchored there — so
//! the times the coordinators persist (when a shard was homed, when a
//! placement was written) stay readable, but it then moves only with
//! `Instant`. A new leader anchors its own, and gives every region a whole
//! lease from its start.
//!
//! The strategy slots (`engine::slot`) read the same clocks: the
//! auto-rollback window on the monotonic one, activation times on the wall
//! clock.
//!
//! [`Clocks::wall`] is the wall clock: only for timestamps shown to people.
//! Nothing is ordered by either clock: placements are ordered by the order
//! they were committed in ([`StampSequence`]).
//!
//! The driver's thread turns its clocks into the coordinators' time with
//! [`coordinator_time`] and stamps placement writes from a
//! [`StampSequence`]; the seeded simulation (`host/tests/coordinator_sim.rs`)
//! does both through the same two, over [`ManualClocks`] whose wall clock
//! it steps both ways, so a driver that took its leases or its stamps from
//! the wall clock would fail it.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use shardalloc_proto::protocol::Millis;

/// The driver's two clocks. See the module documentation.
pub trait Clocks: Send + Sync + std::fmt::Debug {
    /// Milliseconds that never step (anchored at the wall clock when the
    /// clocks were made).
    fn monotonic(&self) -> Millis;
    /// The wall clock, milliseconds since the Unix epoch.
    fn wall(&self) -> Millis;
}

/// The time the coordinators are given (every event's `now`, the first
/// tick's): the monotonic clock, never the wall clock.
pub fn coordinator_time(clocks: &dyn Clocks) -> Millis {
    clocks.monotonic()
}

/// The order of placement writes: each one past every stamp the store held
/// when the driver loaded and every one written since. Commit order, never a
/// clock: a write made under a clock an hour ahead does not outrank the
/// writes after it, and a write made after the clock stepped back does not
/// lose to the ones before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StampSequence {
    last: u64,
}

impl StampSequence {
    /// A sequence past every stamp in `stored`.
    pub fn after(stored: impl IntoIterator<Item = u64>) -> Self {
        StampSequence { last: stored.into_iter().max().unwrap_or(0) }
    }

    /// The next write's stamp.
    pub fn stamp(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

/// The wall clock now, milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The system's clocks: `Instant` anchored at the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClocks {
    started: Instant,
    anchor: Millis,
}

impl SystemClocks {
    /// Clocks anchored now.
    pub fn new() -> Self {
        SystemClocks { started: Instant::now(), anchor: wall_clock_ms() }
    }
}

impl Default for SystemClocks {
    fn default() -> Self {
        SystemClocks::new()
    }
}

impl Clocks for SystemClocks {
    fn monotonic(&self) -> Millis {
        self.anchor.saturating_add(self.started.elapsed().as_millis() as Millis)
    }

    fn wall(&self) -> Millis {
        wall_clock_ms()
    }
}

/// The system's clocks with a wall clock that tests step forwards and
/// backwards ([`SteppedClocks::step_wall`]), as NTP or an operator would.
#[derive(Debug, Default)]
pub struct SteppedClocks {
    system: SystemClocks,
    offset: AtomicI64,
}

impl SteppedClocks {
    /// Clocks with the wall clock not yet stepped.
    pub fn new() -> Self {
        SteppedClocks::default()
    }

    /// Steps the wall clock by `ms` (negative: backwards).
    pub fn step_wall(&self, ms: i64) {
        self.offset.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clocks for SteppedClocks {
    fn monotonic(&self) -> Millis {
        self.system.monotonic()
    }

    fn wall(&self) -> Millis {
        self.system.wall().saturating_add_signed(self.offset.load(Ordering::SeqCst))
    }
}

/// Clocks a simulation moves by hand: both advance together
/// ([`ManualClocks::advance`]) and the wall clock also steps alone
/// ([`ManualClocks::step_wall`]). The monotonic reading is anchored at the
/// wall clock when the clocks are made, as [`SystemClocks`]' is.
#[derive(Debug, Default)]
pub struct ManualClocks {
    anchor: Millis,
    elapsed: AtomicU64,
    offset: AtomicI64,
}

impl ManualClocks {
    /// Clocks whose wall clock reads `wall` now.
    pub fn anchored_at(wall: Millis) -> Self {
        ManualClocks { anchor: wall, ..ManualClocks::default() }
    }

    /// `ms` pass.
    pub fn advance(&self, ms: Millis) {
        self.elapsed.fetch_add(ms, Ordering::SeqCst);
    }

    /// Steps the wall clock by `ms` (negative: backwards).
    pub fn step_wall(&self, ms: i64) {
        self.offset.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clocks for ManualClocks {
    fn monotonic(&self) -> Millis {
        self.anchor.saturating_add(self.elapsed.load(Ordering::SeqCst))
    }

    fn wall(&self) -> Millis {
        self.monotonic().saturating_add_signed(self.offset.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_step_moves_the_wall_clock_and_never_the_monotonic_one() {
        let clocks = SteppedClocks::new();
        let (mono, wall) = (clocks.monotonic(), clocks.wall());
        clocks.step_wall(30_000);
        assert!(clocks.wall() >= wall + 30_000);
        assert!(clocks.monotonic() < mono + 10_000, "the monotonic clock followed the step");
        clocks.step_wall(-600_000);
        assert!(clocks.wall() < wall);
        assert!(clocks.monotonic() >= mono, "the monotonic clock went back");
    }

    #[test]
    fn manual_clocks_advance_together_and_only_the_wall_clock_steps() {
        let clocks = ManualClocks::anchored_at(1_000_000);
        clocks.advance(500);
        clocks.step_wall(-600_000);
        assert_eq!((coordinator_time(&clocks), clocks.wall()), (1_000_500, 400_500));
        clocks.step_wall(3_600_000);
        clocks.advance(100);
        assert_eq!((coordinator_time(&clocks), clocks.wall()), (1_000_600, 4_000_600));
    }

    #[test]
    fn stamps_follow_the_stored_ones_in_the_order_written() {
        let mut stamps = StampSequence::after([7, 42, 3]);
        assert_eq!((stamps.stamp(), stamps.stamp()), (43, 44));
        assert_eq!(StampSequence::after([]).stamp(), 1);
    }
}
