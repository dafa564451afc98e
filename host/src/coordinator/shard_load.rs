//! Shard load: what regions report (protocol version 2) smoothed into each
//! shard's moving average, handed to strategies through the shard table,
//! and saved to the store in batches.
//!
//! ```text
//!  Load{window, shards, rest} ──▶ on_load ──▶ loads.current[shard] (moving average)
//!                                                 ├─▶ the shard table, at the next view (one batch)
//!                                                 └─▶ LoadsSaved, every load_save_interval_ms
//!                                                      └─▶ durable.loads (as every change: applied, persisted)
//! ```
//!
//! ## Smoothing
//!
//! A report covers a window of `w` ms in which a shard carried `r` units a
//! second. With the type's half-life `h`, the shard's load becomes
//! `keep · load + (1 − keep) · r`, `keep = 2^(−w/h)`: a report covering one
//! half-life weighs as much as everything before it, whatever the report
//! interval. A shard whose load is 0 takes its first non-zero report as it is.
//! Named shards get their own rate; the region's other shards share its
//! `rest` evenly. A shard named by a region that is not its home is left
//! alone (it moved during the window). After a report the region's load
//! is its shards' averages together ([`Coordinator::region_load`]), as of
//! that report.
//!
//! ## What is ignored
//!
//! A report from an incarnation that is not the registered one (a fenced
//! region), and one outside the protocol's bounds
//! ([`LoadReport::check`]: a window too short to be more than noise or too
//! long to still describe the placement, too many shards, a load that is
//! not a finite non-negative number), each with an
//! [`Observation::Ignored`] naming why.
//!
//! ## Bounds
//!
//! The current loads live in the coordinator's [`LoadBook`], not in the
//! durable state: they change at every report, and the durable state
//! changes only by a [`Change`] it also persists. `durable.loads` is what
//! the last `LoadsSaved` batches said, as a store holds it.
//!
//! The current loads hold the shards with a load or a move. A shard keeps
//! its load while it has no home (a removed region's shards are homed again
//! on their next request, and their load follows them); past
//! `max_shards` entries those without a home are forgotten. A save writes
//! at most [`LOADS_PER_SAVE`] shards; more wait for the next ticks.

use std::collections::{BTreeMap, BTreeSet};

use shardalloc_proto::protocol::LoadReport;

use super::state::{Change, Durable, ShardLoad};
use super::{Coordinator, Observation};

/// Most shards one [`Change::LoadsSaved`] carries: a save of more shards
/// goes out over several ticks.
pub const LOADS_PER_SAVE: usize = 10_000;

/// A region's load is observed (for the event stream) at most once in this
/// long, and less often in a type of many regions: at most one sample per
/// [`SAMPLE_SPACING_MS`] per type.
pub const LOAD_SAMPLE_MS: u64 = 10_000;

/// The spacing of load samples over a type's regions: a type of `n`
/// regions samples each every `max(LOAD_SAMPLE_MS, n × this)`.
const SAMPLE_SPACING_MS: u64 = 100;

/// Loads below this are 0: a decayed average does not keep a shard's entry
/// alive forever.
const NEGLIGIBLE: f64 = 1e-9;

/// The coordinator's current loads and their bookkeeping.
#[derive(Debug, Default)]
pub(super) struct LoadBook {
    /// Each shard's current smoothed load and last move (those with
    /// either); `durable.loads` lags it by at most a save interval.
    pub(super) current: BTreeMap<String, ShardLoad>,
    /// Shards whose load changed since it was last saved.
    unsaved: BTreeSet<String>,
    /// Shards whose load the shard table has not seen yet.
    unseen: BTreeSet<String>,
    /// When the last save finished.
    last_save: u64,
    /// The shards with a load by (load's bits, shard): a load is finite and
    /// not negative, so its bits sort as it does; the hottest are last.
    ranked: BTreeSet<(u64, String)>,
}

impl LoadBook {
    /// Bookkeeping for a coordinator recovered at `now` with `durable`'s
    /// loads: they are saved, they are the current ones, and the table
    /// sees them when it is built.
    pub(super) fn new(now: u64, durable: &Durable) -> Self {
        let ranked =
            durable.loads.iter().filter(|(_, l)| l.load > 0.0).map(|(s, l)| (l.load.to_bits(), s.clone())).collect();
        LoadBook { current: durable.loads.clone(), last_save: now, ranked, ..LoadBook::default() }
    }

    fn rank(&mut self, shard: &str, old: f64, new: f64) {
        if old > 0.0 {
            self.ranked.remove(&(old.to_bits(), shard.to_owned()));
        }
        if new > 0.0 {
            self.ranked.insert((new.to_bits(), shard.to_owned()));
        }
    }

    /// The shards the shard table has not seen the load of, emptied.
    pub(super) fn take_unseen(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.unseen)
    }

    /// The shard table must see this shard's load (it just entered it).
    pub(super) fn show(&mut self, shard: &str) {
        if !self.unseen.contains(shard) {
            self.unseen.insert(shard.to_owned());
        }
    }
}

impl Coordinator {
    /// A region's load report. See the module documentation.
    pub(super) fn on_load(&mut self, address: String, incarnation: u64, report: LoadReport) {
        if !self.is_current(&address, incarnation, "Load") {
            return;
        }
        if let Err(rule) = report.check() {
            return self.observe(Observation::Ignored { what: format!("Load from {address}: {rule}") });
        }
        let keep = (-(report.window_ms as f64) / self.config.load_half_life_ms as f64).exp2();
        let mut named = BTreeSet::new();
        let mut rates = Vec::with_capacity(report.shards.len());
        for entry in report.shards {
            let here = self.durable.homes.get(&entry.shard).is_some_and(|home| *home.region == *address);
            if here && named.insert(entry.shard.clone()) {
                rates.push((entry.shard, entry.load));
            }
        }
        let others: Vec<String> = match self.durable.regions.get(&address) {
            Some(region) => region.shards.iter().filter(|s| !named.contains(*s)).cloned().collect(),
            None => Vec::new(),
        };
        let each = if others.is_empty() { 0.0 } else { report.rest / others.len() as f64 };
        rates.extend(others.into_iter().map(|shard| (shard, each)));
        for (shard, rate) in rates {
            self.smooth(shard, rate, keep);
        }
        let loads = &self.loads.current;
        // `+ 0.0`: an empty sum of floats is -0.0, shown as "-0.0".
        let total = (self.durable.regions.get(&address).map(|r| r.shards.as_slice()).unwrap_or_default().iter())
            .filter_map(|shard| loads.get(shard))
            .map(|l| l.load)
            .sum::<f64>()
            + 0.0;
        let every = LOAD_SAMPLE_MS.max(self.live.len() as u64 * SAMPLE_SPACING_MS);
        let now = self.now;
        if let Some(live) = self.live.get_mut(&address) {
            live.load = Some(total);
            if live.load_sampled_at.is_none_or(|at| now >= at.saturating_add(every)) {
                live.load_sampled_at = Some(now);
                self.observe(Observation::RegionLoad { address, load: total });
            }
        }
    }

    fn smooth(&mut self, shard: String, rate: f64, keep: f64) {
        let old = self.loads.current.get(&shard).copied().unwrap_or_default();
        let mut load = if old.load == 0.0 { rate } else { keep * old.load + (1.0 - keep) * rate };
        if load < NEGLIGIBLE {
            load = 0.0;
        }
        if load.to_bits() == old.load.to_bits() {
            return;
        }
        let new = ShardLoad { load, ..old };
        self.loads.rank(&shard, old.load, load);
        if new.is_empty() {
            self.loads.current.remove(&shard);
        } else {
            self.loads.current.insert(shard.clone(), new);
        }
        self.loads.show(&shard);
        self.loads.unsaved.insert(shard);
    }

    /// A shard's hand-off ended with it stopped on its old home: its load
    /// stays with it, and the move's time is kept.
    pub(super) fn record_move(&mut self, shard: &str) {
        let now = self.now;
        self.loads.current.entry(shard.to_owned()).or_default().moved_at = Some(now);
        self.loads.unsaved.insert(shard.to_owned());
    }

    /// On a tick: the loads changed since the last save go to the store,
    /// at most [`LOADS_PER_SAVE`] a tick, once `load_save_interval_ms` has
    /// passed since the last save finished.
    pub(super) fn save_loads(&mut self) {
        let due = self.now.saturating_sub(self.loads.last_save) >= self.config.load_save_interval_ms;
        if self.loads.unsaved.is_empty() || !due {
            return;
        }
        self.forget_homeless_loads();
        let mut loads = Vec::with_capacity(self.loads.unsaved.len().min(LOADS_PER_SAVE));
        while loads.len() < LOADS_PER_SAVE {
            let Some(shard) = self.loads.unsaved.pop_first() else { break };
            let load = self.loads.current.get(&shard).copied();
            loads.push((shard, load));
        }
        if self.loads.unsaved.is_empty() {
            self.loads.last_save = self.now;
        }
        self.change(Change::LoadsSaved { loads });
    }

    /// Past `max_shards` entries, the loads of shards without a home are
    /// forgotten (they are saved as forgotten).
    fn forget_homeless_loads(&mut self) {
        if self.loads.current.len() <= self.config.max_shards {
            return;
        }
        let homes = &self.durable.homes;
        let homeless: Vec<String> = self.loads.current.keys().filter(|s| !homes.contains_key(*s)).cloned().collect();
        for shard in homeless {
            if let Some(old) = self.loads.current.remove(&shard) {
                self.loads.rank(&shard, old.load, 0.0);
            }
            self.loads.unsaved.insert(shard);
        }
    }

    /// The most loaded shards, most loaded first (ties by shard id, last
    /// first), at most `limit`, after `after` (the last (load, shard) of
    /// the page before): a cost per shard listed, not per shard.
    pub fn hottest(&self, after: Option<(f64, &str)>, limit: usize) -> Vec<(String, ShardLoad)> {
        let ranked = &self.loads.ranked;
        let page: Box<dyn Iterator<Item = &(u64, String)>> = match after {
            Some((load, shard)) => Box::new(ranked.range(..(load.to_bits(), shard.to_owned())).rev()),
            None => Box::new(ranked.iter().rev()),
        };
        page.take(limit).map(|(_, shard)| (shard.clone(), self.load_of(shard))).collect()
    }

    /// Every shard's current load and last move (those with either); the
    /// durable state's `loads` are those last saved.
    pub fn loads(&self) -> &BTreeMap<String, ShardLoad> {
        &self.loads.current
    }

    /// A shard's current load and last move (zero and none when it has
    /// neither).
    pub fn load_of(&self, shard: &str) -> ShardLoad {
        self.loads.current.get(shard).copied().unwrap_or_default()
    }
}
