//! [`Progress`]: the driver thread's heartbeat for `/livez`. The thread
//! stamps it at every turn of its loop, idle tick wake-ups included (at
//! least every [`TICK_MS`](super::TICK_MS) while it waits), and
//! [`Progress::check`] tells whether the last stamp is older than
//! [`STALL_BOUND`]: a thread stuck in a turn or gone stops stamping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the driver thread may go without finishing a turn before
/// `/livez` answers 503. An idle driver wakes up every 100 ms; a busy turn
/// (a batch of inputs, strategy calls bounded by their deadline, one store
/// commit: an fsync, or etcd requests of at most 5 s each with retries)
/// ends within a few seconds even on a loaded machine. 30 s is far above
/// any of those and short enough that a stuck node is restarted within a
/// minute by a liveness probe.
pub const STALL_BOUND: Duration = Duration::from_secs(30);

/// The driver's last sign of progress, on a monotonic clock.
#[derive(Debug)]
pub struct Progress {
    /// The clock's origin.
    epoch: Instant,
    /// Milliseconds from `epoch` to the last stamp.
    last_ms: AtomicU64,
}

/// The driver has made no progress for longer than the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the coordinator driver has made no progress for {:.1} s (the bound is {:.0} s)",
    silent.as_secs_f64(),
    bound.as_secs_f64()
)]
pub struct Stalled {
    /// Time since the last stamp.
    pub silent: Duration,
    /// The bound it exceeded.
    pub bound: Duration,
}

impl Progress {
    /// A heartbeat stamped now.
    pub fn new() -> Self {
        Self::stamped_at(Instant::now())
    }

    /// A heartbeat whose clock starts, and is stamped, at `epoch`.
    pub fn stamped_at(epoch: Instant) -> Self {
        Progress { epoch, last_ms: AtomicU64::new(0) }
    }

    /// Records progress now.
    pub fn stamp(&self) {
        self.stamp_at(Instant::now());
    }

    /// Records progress at `now` (never moves the stamp backwards).
    pub fn stamp_at(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Time from the last stamp to `now`.
    pub fn silent_at(&self, now: Instant) -> Duration {
        let last = self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last)
    }

    /// `Err` when the last stamp is more than `bound` before `now`.
    pub fn check(&self, now: Instant, bound: Duration) -> Result<(), Stalled> {
        let silent = self.silent_at(now);
        if silent > bound { Err(Stalled { silent, bound }) } else { Ok(()) }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_older_than_the_bound_is_a_stall() {
        let start = Instant::now();
        let progress = Progress::stamped_at(start);
        let bound = Duration::from_secs(30);
        assert_eq!(progress.check(start + Duration::from_secs(30), bound), Ok(()));
        let stalled = progress.check(start + Duration::from_secs(31), bound).unwrap_err();
        assert_eq!(stalled, Stalled { silent: Duration::from_secs(31), bound });
        assert_eq!(stalled.to_string(), "the coordinator driver has made no progress for 31.0 s (the bound is 30 s)");
        progress.stamp_at(start + Duration::from_secs(20));
        assert_eq!(progress.check(start + Duration::from_secs(31), bound), Ok(()));
        assert!(progress.check(start + Duration::from_secs(51), bound).is_err());
    }

    #[test]
    fn a_stamp_never_moves_backwards() {
        let start = Instant::now();
        let progress = Progress::stamped_at(start);
        progress.stamp_at(start + Duration::from_secs(10));
        progress.stamp_at(start + Duration::from_secs(5));
        assert_eq!(progress.silent_at(start + Duration::from_secs(12)), Duration::from_secs(2));
    }
}
