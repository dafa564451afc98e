//! One region session's load reports, paced: at most one reaches the
//! driver per [`LOAD_REPORT_SPACING`]; those that come sooner are folded
//! into one waiting report ([`LoadReport::coalesce`]), never queued, so a
//! region that reports in a loop costs the driver what one reporting at the
//! pacing's rate does, and loses no load (the folded report covers every
//! window it took in).
//!
//! Time is passed in: the session's loop owns the clock and the timer.

use std::time::Duration;

use shardalloc_proto::protocol::LoadReport;
use tokio::time::Instant;

/// The least time between two load reports of one session reaching the
/// driver: four a second, four times the clients' default pace (one per
/// heartbeat, a second apart).
pub const LOAD_REPORT_SPACING: Duration = Duration::from_millis(250);

/// A session's load reports on their way to the driver.
#[derive(Debug, Default)]
pub struct LoadPacer {
    /// When the next report may go.
    next: Option<Instant>,
    /// The reports that came too soon, folded into one.
    waiting: Option<LoadReport>,
}

impl LoadPacer {
    /// A report the region sent at `now`: `Some` when it goes to the driver
    /// now, `None` when it waits (folded into the one waiting); the bool
    /// says whether it was folded into another. A report outside the
    /// protocol's bounds goes at once, as it is: the coordinator refuses it
    /// by name, and it is not mixed into a good one.
    pub fn offer(&mut self, now: Instant, report: LoadReport) -> (Option<LoadReport>, bool) {
        if report.check().is_err() {
            return (Some(report), false);
        }
        if let Some(waiting) = &mut self.waiting {
            waiting.coalesce(report);
            return (None, true);
        }
        if self.next.is_some_and(|next| now < next) {
            self.waiting = Some(report);
            return (None, false);
        }
        self.next = Some(now + LOAD_REPORT_SPACING);
        (Some(report), false)
    }

    /// When the waiting report is due (`None`: none waits).
    pub fn due(&self) -> Option<Instant> {
        self.waiting.as_ref().and(self.next)
    }

    /// The waiting report, when it is due at `now`.
    pub fn take_due(&mut self, now: Instant) -> Option<LoadReport> {
        if self.due().is_none_or(|due| now < due) {
            return None;
        }
        self.next = Some(now + LOAD_REPORT_SPACING);
        self.waiting.take()
    }

    /// The waiting report, due or not: the session is ending and what the
    /// region measured still counts.
    pub fn take(&mut self) -> Option<LoadReport> {
        self.waiting.take()
    }
}

#[cfg(test)]
mod tests {
    use shardalloc_proto::protocol::ShardLoad;

    use super::*;

    fn report(window_ms: u64, load: f64) -> LoadReport {
        LoadReport { window_ms, shards: vec![ShardLoad { shard: "s".into(), load }], rest: 0.0 }
    }

    #[test]
    fn reports_sooner_than_the_spacing_are_folded_into_one_that_goes_when_due() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut pacer = LoadPacer::default();
        assert_eq!(pacer.offer(at(0), report(1_000, 4.0)), (Some(report(1_000, 4.0)), false), "the first goes");
        assert_eq!(pacer.due(), None);
        assert_eq!(pacer.offer(at(10), report(1_000, 8.0)), (None, false), "too soon: it waits");
        assert_eq!(pacer.due(), Some(at(250)));
        assert_eq!(pacer.offer(at(20), report(1_000, 2.0)), (None, true), "folded into the waiting one");
        assert_eq!(pacer.take_due(at(249)), None);
        assert_eq!(pacer.take_due(at(250)), Some(report(2_000, 5.0)), "one report over both windows");
        assert_eq!((pacer.due(), pacer.take_due(at(600))), (None, None));
        assert_eq!(pacer.offer(at(499), report(1_000, 1.0)), (None, false), "a spacing after the last one sent");
        assert_eq!(pacer.take_due(at(500)), Some(report(1_000, 1.0)));
        assert_eq!(pacer.offer(at(800), report(1_000, 3.0)), (Some(report(1_000, 3.0)), false));
    }

    #[test]
    fn a_report_out_of_bounds_goes_as_it_is_and_is_not_mixed_in() {
        let start = Instant::now();
        let mut pacer = LoadPacer::default();
        pacer.offer(start, report(1_000, 4.0));
        let bad = report(1_000, f64::NAN);
        let (sent, folded) = pacer.offer(start, bad);
        assert!(sent.is_some_and(|r| r.shards[0].load.is_nan()) && !folded);
        assert_eq!(pacer.due(), None, "nothing waits");
    }
}
