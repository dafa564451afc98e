//! How long a node that won the election but could not start waits
//! before it campaigns again.

use std::time::Duration;

/// The pause after a won campaign whose driver could not start (a store
/// that cannot load), doubled after each such failure in a row up to
/// [`START_BACKOFF_MAX`]: a node that cannot serve does not win and fail
/// several times a second.
pub const START_BACKOFF: Duration = Duration::from_millis(500);

/// The longest pause between failed starts.
pub const START_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The pause after `failures` failed starts in a row.
pub fn start_backoff(failures: u32) -> Duration {
    START_BACKOFF.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(START_BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_after_each_failed_start_up_to_its_bound() {
        let pauses: Vec<u64> = (1..=9).map(|n| start_backoff(n).as_millis() as u64).collect();
        assert_eq!(pauses, [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
        assert_eq!(start_backoff(u32::MAX), START_BACKOFF_MAX);
    }
}
