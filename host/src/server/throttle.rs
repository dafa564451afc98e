//! [`Throttle`]: a warning repeated every turn of a loop (etcd unreachable
//! ten times a second) is logged at most once per period, with the count of
//! the ones left out.

use std::time::{Duration, Instant};

/// How often a repeated warning is logged by default.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Rate limit of one repeated warning. See the module documentation.
#[derive(Debug)]
pub struct Throttle {
    period: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// At most one warning per `period`.
    pub fn new(period: Duration) -> Self {
        Throttle { period, last: None, suppressed: 0 }
    }

    /// At `now`: `Some(n)` when the warning is to be logged, `n` being how
    /// many were left out since the last one logged; `None` to leave it out.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Forgets the warning (the trouble ended): the next one is logged.
    pub fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(PERIOD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_repeated_ten_times_a_second_is_logged_once_per_period_with_the_count() {
        let mut throttle = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        let logged: Vec<(u64, u64)> = (0..250u64)
            .filter_map(|tick| {
                throttle.allow(start + Duration::from_millis(tick * 100)).map(|left_out| (tick, left_out))
            })
            .collect();
        assert_eq!(logged, [(0, 0), (100, 99), (200, 99)]);
        throttle.reset();
        assert_eq!(throttle.allow(start + Duration::from_millis(20_100)), Some(0), "after a reset the next is logged");
    }
}
