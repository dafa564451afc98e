//! [`LeaseClock`]: until when this node may reveal decisions. The leader's
//! etcd lease is renewed in the background; every renewal moves the clock
//! to when it was *sent* plus the lease's TTL — no later than etcd's own
//! expiry — and the driver checks it before every turn's release: a
//! process paused past its lease (SIGSTOP, a long GC-like stall) that
//! wakes up stops before it answers anything, even from memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// See the module documentation. Clones share one clock.
#[derive(Clone, Debug)]
pub struct LeaseClock {
    origin: Instant,
    /// Milliseconds after `origin` the lease runs until; 0: expired.
    until_ms: Arc<AtomicU64>,
}

impl Default for LeaseClock {
    fn default() -> Self {
        LeaseClock { origin: Instant::now(), until_ms: Arc::new(AtomicU64::new(0)) }
    }
}

impl LeaseClock {
    /// An expired clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease runs until `at` (never moved backwards by a late answer).
    pub fn extend_to(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.origin).as_millis() as u64;
        self.until_ms.fetch_max(ms.max(1), Ordering::AcqRel);
    }

    /// The lease is over: nothing more may be revealed.
    pub fn expire(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    /// True while the lease holds.
    pub fn valid(&self) -> bool {
        Instant::now() < self.deadline()
    }

    /// When the lease ends (in the past once expired).
    pub fn deadline(&self) -> Instant {
        self.origin + Duration::from_millis(self.until_ms.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_holds_until_its_deadline_and_never_moves_back() {
        let clock = LeaseClock::new();
        assert!(!clock.valid(), "a new clock is expired");
        let later = Instant::now() + Duration::from_secs(60);
        clock.extend_to(later);
        assert!(clock.valid());
        clock.extend_to(Instant::now());
        assert!(clock.valid(), "an older renewal moved the deadline back");
        clock.clone().expire();
        assert!(!clock.valid(), "clones share the clock");
    }
}
