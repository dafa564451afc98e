//! The driver's clocks, behind one trait so tests can step them.
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
//! [`Clocks::wall`] is the wall clock: only for timestamps shown to people.
//! Nothing is ordered by either clock: placements are ordered by the order
//! they were committed in (see `Driver::stamp_time`).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::coordinator::Millis;

/// The driver's two clocks. See the module documentation.
pub trait Clocks: Send + Sync + std::fmt::Debug {
    /// Milliseconds that never step (anchored at the wall clock when the
    /// clocks were made).
    fn monotonic(&self) -> Millis;
    /// The wall clock, milliseconds since the Unix epoch.
    fn wall(&self) -> Millis;
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
}
