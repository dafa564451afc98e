//! [`LoadMeter`]: the load a region's shards carry, gathered between two
//! heartbeats and turned into one [`LoadReport`] (protocol version 2).
//!
//! Two forms, which add up:
//! - work done, [`LoadMeter::record`]: units (requests weighted by their
//!   cost, bytes, CPU milliseconds) summed over the window and reported as
//!   units per second;
//! - a gauge, [`LoadMeter::set`]: a rate the application measures itself,
//!   reported as it stands until it is set again or cleared.
//!
//! A report names the `top` most loaded shards running here, most loaded
//! first, and sums the others into `rest`. Shards that no longer run here
//! are dropped at each report, so the meter holds at most the shards
//! recorded in one window (and at most [`MAX_METERED_SHARDS`]; more go
//! into the rest). Sans-I/O: the time is given.

use std::collections::HashMap;

use crate::protocol::{LoadReport, MAX_LOAD_WINDOW_MS, MIN_LOAD_WINDOW_MS, Millis, ShardLoad};

/// Most shards the meter keeps apart in one window; the units of further
/// shards are counted in the report's `rest`.
pub const MAX_METERED_SHARDS: usize = 100_000;

/// Gathers a region's shard loads between reports. See the module
/// documentation.
#[derive(Debug, Default)]
pub struct LoadMeter {
    /// Units of work per shard in this window.
    work: HashMap<String, f64>,
    /// Gauges per shard (units per second).
    gauges: HashMap<String, f64>,
    /// Units of shards past [`MAX_METERED_SHARDS`] in this window.
    overflow: f64,
    /// When the window began; `None` until the meter is first used.
    since: Option<Millis>,
}

impl LoadMeter {
    /// Adds `units` of work done by `shard` (ignored unless finite and
    /// positive).
    pub fn record(&mut self, shard: &str, units: f64, now: Millis) {
        if !(units.is_finite() && units > 0.0) {
            return;
        }
        self.since.get_or_insert(now);
        let room = self.work.len() < MAX_METERED_SHARDS;
        match self.work.get_mut(shard) {
            Some(sum) => *sum += units,
            None if room => {
                self.work.insert(shard.to_owned(), units);
            }
            None => self.overflow += units,
        }
    }

    /// Sets `shard`'s gauge to `rate` units per second (0 or a value that
    /// is not finite and positive clears it).
    pub fn set(&mut self, shard: &str, rate: f64, now: Millis) {
        self.since.get_or_insert(now);
        if !(rate.is_finite() && rate > 0.0) {
            self.gauges.remove(shard);
        } else if self.gauges.len() < MAX_METERED_SHARDS || self.gauges.contains_key(shard) {
            self.gauges.insert(shard.to_owned(), rate);
        }
    }

    /// The report of the window ending `now`, over the shards `runs` says
    /// run here, naming at most `top`; the window starts again. `None`
    /// when the meter was never used, or the window is shorter than
    /// [`MIN_LOAD_WINDOW_MS`] (it goes on). A window longer than
    /// [`MAX_LOAD_WINDOW_MS`] (the region was cut off or paused) is
    /// dropped unreported: its work describes a placement that may be gone.
    pub fn report(&mut self, now: Millis, runs: impl Fn(&str) -> bool, top: usize) -> Option<LoadReport> {
        let since = self.since?;
        let window_ms = now.saturating_sub(since);
        if window_ms < MIN_LOAD_WINDOW_MS {
            return None;
        }
        let work = std::mem::take(&mut self.work);
        let overflow = std::mem::take(&mut self.overflow);
        self.since = Some(now);
        self.gauges.retain(|shard, _| runs(shard));
        if window_ms > MAX_LOAD_WINDOW_MS {
            return None;
        }
        let seconds = window_ms as f64 / 1000.0;
        let mut rates: HashMap<&str, f64> = self.gauges.iter().map(|(s, r)| (s.as_str(), *r)).collect();
        for (shard, units) in &work {
            if runs(shard) {
                *rates.entry(shard.as_str()).or_default() += units / seconds;
            }
        }
        let mut rates: Vec<(&str, f64)> = rates.into_iter().collect();
        // Most loaded first; ties by id, so a report is a function of its input.
        rates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let named = rates.len().min(top);
        let rest = rates[named..].iter().map(|(_, rate)| rate).sum::<f64>() + overflow / seconds;
        let shards = rates[..named].iter().map(|(shard, load)| ShardLoad { shard: (*shard).to_owned(), load: *load });
        Some(LoadReport { window_ms, shards: shards.collect(), rest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(report: &LoadReport) -> Vec<(&str, f64)> {
        report.shards.iter().map(|s| (s.shard.as_str(), s.load)).collect()
    }

    #[test]
    fn work_becomes_a_rate_over_the_window_and_gauges_add_to_it() {
        let mut meter = LoadMeter::default();
        assert_eq!(meter.report(5_000, |_| true, 10), None, "never used: no report");
        meter.record("a", 30.0, 1_000);
        meter.record("a", 10.0, 1_200);
        meter.record("b", 5.0, 1_300);
        meter.set("c", 7.5, 1_400);
        meter.set("a", 1.0, 1_400);
        let report = meter.report(3_000, |_| true, 10).unwrap();
        assert_eq!(report.window_ms, 2_000);
        assert_eq!(loads(&report), [("a", 21.0), ("c", 7.5), ("b", 2.5)]);
        assert_eq!(report.rest, 0.0);
        // The next window: work starts from nothing, the gauges stand.
        meter.record("b", 100.0, 3_500);
        let report = meter.report(4_000, |_| true, 10).unwrap();
        assert_eq!((report.window_ms, loads(&report)), (1_000, vec![("b", 100.0), ("c", 7.5), ("a", 1.0)]));
    }

    #[test]
    fn the_top_shards_are_named_and_the_others_summed() {
        let mut meter = LoadMeter::default();
        for (shard, units) in [("a", 1.0), ("b", 4.0), ("c", 3.0), ("d", 2.0), ("e", 3.0)] {
            meter.record(shard, units, 0);
        }
        let report = meter.report(1_000, |_| true, 2).unwrap();
        assert_eq!(loads(&report), [("b", 4.0), ("c", 3.0)], "ties broken by id");
        assert_eq!(report.rest, 6.0);
    }

    #[test]
    fn shards_that_do_not_run_here_are_left_out_and_their_gauges_forgotten() {
        let mut meter = LoadMeter::default();
        meter.record("here", 2.0, 0);
        meter.record("gone", 50.0, 0);
        meter.set("gone", 9.0, 0);
        let report = meter.report(1_000, |s| s == "here", 10).unwrap();
        assert_eq!((loads(&report), report.rest), (vec![("here", 2.0)], 0.0));
        assert!(meter.gauges.is_empty(), "a stopped shard's gauge is dropped");
    }

    #[test]
    fn a_window_too_short_goes_on_and_one_too_long_is_dropped() {
        let mut meter = LoadMeter::default();
        meter.record("a", 1.0, 0);
        assert_eq!(meter.report(MIN_LOAD_WINDOW_MS - 1, |_| true, 10), None);
        meter.record("a", 1.0, 400);
        let report = meter.report(MIN_LOAD_WINDOW_MS, |_| true, 10).unwrap();
        assert_eq!(loads(&report), [("a", 4.0)], "both records, over the longer window");

        meter.record("a", 1.0, 1_000);
        let late = MIN_LOAD_WINDOW_MS + MAX_LOAD_WINDOW_MS + 1;
        assert_eq!(meter.report(late, |_| true, 10), None, "a window past the limit is dropped");
        meter.record("a", 3.0, late + 10);
        let report = meter.report(late + 1_000, |_| true, 10).unwrap();
        assert_eq!((report.window_ms, loads(&report)), (1_000, vec![("a", 3.0)]), "a new window began");
    }

    #[test]
    fn bad_numbers_are_ignored_and_shards_past_the_limit_go_into_the_rest() {
        let mut meter = LoadMeter::default();
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
            meter.record("a", bad, 0);
        }
        assert_eq!(meter.since, None, "nothing recorded");
        for i in 0..MAX_METERED_SHARDS {
            meter.record(&format!("s{i}"), 1.0, 0);
        }
        meter.record("one-too-many", 1_000.0, 0);
        let report = meter.report(1_000, |_| true, 1).unwrap();
        assert_eq!(report.shards.len(), 1);
        assert_eq!(report.rest, (MAX_METERED_SHARDS - 1) as f64 + 1_000.0);
    }
}
