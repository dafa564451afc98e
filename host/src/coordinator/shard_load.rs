//! Shard load: what regions report (protocol version 2) smoothed into each
//! shard's moving average, handed to strategies through the shard table,
//! and saved to the store in batches.
//!
//! ```text
//!  Load{window, shards, rest} ──▶ on_load ──▶ named shards: loads.current[shard] (an average of their own)
//!                                    │         the others: the region's rest share (one number)
//!                                    ├─▶ the shard table: averages at the next view, shares folded
//!                                    │   at most once a second (at once for a whole view)
//!                                    └─▶ LoadsSaved (averages of their own), every load_save_interval_ms
//!                                         └─▶ durable.loads (as every change: applied, persisted)
//! ```
//!
//! ## Smoothing
//!
//! A report covers a window of `w` ms in which a shard carried `r` units a
//! second. With the type's half-life `h`, a load becomes
//! `keep · load + (1 − keep) · r`, `keep = 2^(−w/h)`: a report covering one
//! half-life weighs as much as everything before it, whatever the report
//! interval. A load of 0 takes its first non-zero report as it is.
//!
//! Named shards get their own average. The region's other shards share its
//! `rest` evenly, and carry one number, the region's **rest share**,
//! smoothed the same way: a report costs the shards it names (and those
//! with an average of their own), never the shards the region holds. A
//! shard named once keeps its own average, which goes towards the share at
//! every report that does not name it, until it is within a thousandth of
//! the share ([`CONVERGED`]: then it carries the share again) or the region
//! has more than [`OWN_LOADS_PER_REGION`] of them (those named longest ago
//! carry the share again). A shard named by a region that is not its home
//! is left alone (it moved during the window). A shard that leaves a region
//! takes its load along: the share it carried becomes its own average. A
//! shard homed on a region without a load of its own carries the region's
//! share at once. After a report the region's load is its shards' loads
//! together ([`Coordinator::region_load`]), as of that report.
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
//! ## What strategies and the store see
//!
//! The shard table learns a changed average at the next view. A changed
//! share means a new load for every shard carrying it, so it reaches the
//! table at most once in [`SHARE_FOLD_MS`] through allocation views, and at
//! once through a whole view (a rebalance, a dry run), which walks every
//! shard anyway.
//!
//! The current loads live in the coordinator's [`LoadBook`], not in the
//! durable state: they change at every report, and the durable state
//! changes only by a [`Change`] it also persists. `durable.loads` is what
//! the last `LoadsSaved` batches said, as a store holds it: the averages of
//! their own and the moves. Shares are not stored: a coordinator recovered
//! from the store starts every region's share at 0 until its next report
//! (about a second with the clients' default pace).
//!
//! ## Bounds
//!
//! The averages of their own are at most [`OWN_LOADS_PER_REGION`] per
//! region, plus the shards without a home: a shard keeps its load while it
//! has no home (a removed region's shards are homed again on their next
//! request, and their load follows them); past `max_shards` entries those
//! without a home are forgotten. A save writes at most [`LOADS_PER_SAVE`]
//! shards; more wait for the next ticks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shardalloc_proto::protocol::LoadReport;

use super::state::{Change, Durable, ShardLoad};
use super::{Coordinator, Observation};

/// Most shards one [`Change::LoadsSaved`] carries: a save of more shards
/// goes out over several ticks.
pub const LOADS_PER_SAVE: usize = 10_000;

/// Most shards of one region with an average of their own: four reports'
/// worth of named shards. Past it, those named longest ago carry the
/// region's rest share again.
pub const OWN_LOADS_PER_REGION: usize = 4 * shardalloc_proto::protocol::MAX_LOAD_SHARDS;

/// A region's rest share reaches the shard table (strategies) at most once
/// in this long: the fold walks the region's shards.
pub const SHARE_FOLD_MS: u64 = 1_000;

/// An average of its own within this fraction of its region's rest share
/// is dropped: the shard carries the share again.
const CONVERGED: f64 = 1e-3;

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
    /// The shards with an average of their own (named lately, or without
    /// a home) or a move; `durable.loads` lags it by at most a save
    /// interval. A homed shard's entry has a load only while it is one of
    /// its region's `own`.
    pub(super) current: BTreeMap<String, ShardLoad>,
    /// Each reporting region's rest share and the shards it named lately.
    pub(super) shares: HashMap<String, RegionShare>,
    /// Shards whose load changed since it was last saved.
    pub(super) unsaved: BTreeSet<String>,
    /// Shards whose load the shard table has not seen yet.
    pub(super) unseen: BTreeSet<String>,
    /// Regions whose rest share the shard table has not seen yet.
    unseen_shares: BTreeSet<String>,
    /// When the shard table last saw the rest shares.
    last_fold: u64,
    /// When the last save finished.
    last_save: u64,
    /// The shards with a load of their own by (load's bits, shard): a load
    /// is finite and not negative, so its bits sort as it does; the
    /// hottest are last.
    ranked: BTreeSet<(u64, String)>,
}

/// What a region's reports left beside its named shards' averages.
#[derive(Debug, Default)]
pub(super) struct RegionShare {
    /// The smoothed load of each of its shards without an average of its
    /// own: its reports' rest spread over the shards they did not name.
    pub(super) share: f64,
    /// Its shards with an average of their own, by the report that last
    /// named them.
    pub(super) own: HashMap<String, u64>,
    /// Its reports since this coordinator started (or the region
    /// restarted).
    pub(super) reports: u64,
}

impl LoadBook {
    /// Bookkeeping for a coordinator recovered at `now` with `durable`'s
    /// loads: they are saved, they are the current ones (each homed one its
    /// region's own), and the table sees them when it is built. The rest
    /// shares start at 0, until each region's next report.
    pub(super) fn new(now: u64, durable: &Durable) -> Self {
        let ranked =
            durable.loads.iter().filter(|(_, l)| l.load > 0.0).map(|(s, l)| (l.load.to_bits(), s.clone())).collect();
        let mut shares: HashMap<String, RegionShare> = HashMap::new();
        for (shard, _) in durable.loads.iter().filter(|(_, l)| l.load > 0.0) {
            if let Some(home) = durable.homes.get(shard) {
                shares.entry(home.region.to_string()).or_default().own.insert(shard.clone(), 0);
            }
        }
        LoadBook {
            current: durable.loads.clone(),
            shares,
            last_save: now,
            last_fold: now,
            ranked,
            ..LoadBook::default()
        }
    }

    fn rank(&mut self, shard: &str, old: f64, new: f64) {
        if old > 0.0 {
            self.ranked.remove(&(old.to_bits(), shard.to_owned()));
        }
        if new > 0.0 {
            self.ranked.insert((new.to_bits(), shard.to_owned()));
        }
    }

    /// The shard table must see this shard's load (it just entered it).
    pub(super) fn show(&mut self, shard: &str) {
        if !self.unseen.contains(shard) {
            self.unseen.insert(shard.to_owned());
        }
    }

    /// Sets a shard's own average (its move kept), with its bookkeeping.
    fn set(&mut self, shard: &str, load: f64) {
        let old = self.current.get(shard).copied().unwrap_or_default();
        if load.to_bits() == old.load.to_bits() {
            return;
        }
        let new = ShardLoad { load, ..old };
        self.rank(shard, old.load, load);
        if new.is_empty() {
            self.current.remove(shard);
        } else {
            self.current.insert(shard.to_owned(), new);
        }
        self.show(shard);
        if !self.unsaved.contains(shard) {
            self.unsaved.insert(shard.to_owned());
        }
    }

    /// A shard's current load, homed on `region` (or on none).
    fn load_at(&self, shard: &str, region: Option<&str>) -> f64 {
        let share = region.and_then(|r| self.shares.get(r)).filter(|s| !s.own.contains_key(shard));
        match share {
            Some(share) => share.share,
            None => self.current.get(shard).map_or(0.0, |l| l.load),
        }
    }
}

/// `rate` folded into the average `old` with weight `1 − keep`; an average
/// of 0 takes the rate as it is, and one below [`NEGLIGIBLE`] is 0.
fn smoothed(old: f64, rate: f64, keep: f64) -> f64 {
    let load = if old == 0.0 { rate } else { keep * old + (1.0 - keep) * rate };
    if load < NEGLIGIBLE { 0.0 } else { load }
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
        let held = self.durable.regions.get(&address).map_or(0, |r| r.shards.len());
        let mut named: Vec<(String, f64)> = Vec::with_capacity(report.shards.len());
        {
            let mut seen = BTreeSet::new();
            for entry in report.shards {
                let here = self.durable.homes.get(&entry.shard).is_some_and(|home| *home.region == *address);
                if here && seen.insert(entry.shard.clone()) {
                    named.push((entry.shard, entry.load));
                }
            }
        }
        let region = self.loads.shares.entry(address.clone()).or_default();
        region.reports += 1;
        let report_number = region.reports;
        let before = region.share;
        let unnamed = held.saturating_sub(named.len());
        let each = if unnamed == 0 { 0.0 } else { report.rest / unnamed as f64 };
        // The named shards: each from its own average, or from the share.
        for (shard, rate) in named {
            let old = self.loads.load_at(&shard, Some(&address));
            self.loads.shares.get_mut(&address).expect("entered above").own.insert(shard.clone(), report_number);
            self.loads.set(&shard, smoothed(old, rate, keep));
        }
        // The others with an average of their own go towards the share.
        let region = &self.loads.shares[&address];
        let share = smoothed(before, each, keep);
        let others: Vec<(u64, String)> =
            region.own.iter().filter(|(_, n)| **n != report_number).map(|(s, n)| (*n, s.clone())).collect();
        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(others.len());
        for (named_in, shard) in others {
            let old = self.loads.current.get(&shard).map_or(0.0, |l| l.load);
            let load = smoothed(old, each, keep);
            if (load - share).abs() <= CONVERGED * load.max(share) {
                dropped.push(shard);
            } else {
                self.loads.set(&shard, load);
                kept.push((named_in, shard));
            }
        }
        let region = self.loads.shares.get_mut(&address).expect("entered above");
        let over = (region.own.len() - dropped.len()).saturating_sub(OWN_LOADS_PER_REGION);
        if over > 0 {
            // Those named longest ago (ties by shard) carry the share again.
            kept.sort_unstable();
            dropped.extend(kept.into_iter().take(over).map(|(_, s)| s));
        }
        region.share = share;
        for shard in &dropped {
            region.own.remove(shard);
        }
        for shard in dropped {
            self.loads.set(&shard, 0.0);
        }
        if share.to_bits() != before.to_bits() {
            self.loads.unseen_shares.insert(address.clone());
        }
        let region = &self.loads.shares[&address];
        let own: f64 = region.own.keys().filter_map(|s| self.loads.current.get(s)).map(|l| l.load).sum();
        // `+ 0.0`: an empty sum of floats is -0.0, shown as "-0.0".
        let total = own + held.saturating_sub(region.own.len()) as f64 * region.share + 0.0;
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

    /// Keeps the loads in step with a change about to be applied
    /// (`applied` false) and just applied (true): a shard leaving a region
    /// takes its load with it (the share it carried becomes its own), one
    /// arriving with a load of its own keeps it there, and a restarted or
    /// removed region's share is gone.
    pub(super) fn follow_homes(&mut self, change: &Change, applied: bool) {
        match (change, applied) {
            (Change::HomeSet { shard, .. } | Change::HomeRemoved { shard }, false) => self.leave(shard),
            (Change::HomeSet { shard, home }, true) => {
                if self.loads.current.get(shard).is_some_and(|l| l.load > 0.0) {
                    let region = self.loads.shares.entry(home.region.to_string()).or_default();
                    region.own.insert(shard.clone(), region.reports);
                } else if self.loads.shares.get(&*home.region).is_some_and(|r| r.share > 0.0) {
                    self.loads.show(shard);
                }
            }
            (Change::RegionRemoved { address }, false) => {
                let shards = self.durable.regions.get(address).map(|r| r.shards.clone()).unwrap_or_default();
                for shard in shards {
                    self.leave(&shard);
                }
                self.loads.shares.remove(address);
            }
            (Change::RegionRegistered(record), false) => {
                let restarted =
                    self.durable.regions.get(&record.address).is_some_and(|old| old.incarnation != record.incarnation);
                if restarted {
                    self.loads.shares.remove(&record.address);
                }
            }
            _ => {}
        }
    }

    /// A homed shard is about to lose its home: what it carries becomes
    /// its own.
    fn leave(&mut self, shard: &str) {
        let Some(home) = self.durable.homes.get(shard) else { return };
        let Some(region) = self.loads.shares.get_mut(&*home.region) else { return };
        if region.own.remove(shard).is_none() {
            let share = region.share;
            self.loads.set(shard, share);
        }
    }

    /// The loads the shard table has yet to see: the shards whose own
    /// average changed, and the shares of regions whose share changed (at
    /// most once in [`SHARE_FOLD_MS`], or now when `fold`).
    pub(super) fn loads_for_table(&mut self, fold: bool) -> Vec<(String, f64)> {
        let unseen = std::mem::take(&mut self.loads.unseen);
        let mut loads: Vec<(String, f64)> = (unseen.into_iter())
            .map(|s| {
                let load = self.load_of(&s).load;
                (s, load)
            })
            .collect();
        let due = fold || self.now.saturating_sub(self.loads.last_fold) >= SHARE_FOLD_MS;
        if due && !self.loads.unseen_shares.is_empty() {
            self.loads.last_fold = self.now;
            for address in std::mem::take(&mut self.loads.unseen_shares) {
                let Some(region) = self.loads.shares.get(&address) else { continue };
                loads.extend(self.carriers(&address, region).map(|s| (s.clone(), region.share)));
            }
        }
        loads
    }

    /// The table was just built with every load: nothing is left unseen.
    pub(super) fn loads_all_seen(&mut self) {
        self.loads.unseen.clear();
        self.loads.unseen_shares.clear();
        self.loads.last_fold = self.now;
    }

    /// Every shard with a load, and its load: the own averages, and each
    /// homed shard's share (a walk over every shard).
    pub(super) fn every_load(&self) -> impl Iterator<Item = (&str, f64)> {
        let own = self.loads.current.iter().filter(|(_, l)| l.load > 0.0).map(|(s, l)| (s.as_str(), l.load));
        let shares = (self.loads.shares.iter().filter(|(_, r)| r.share > 0.0))
            .flat_map(move |(address, region)| self.carriers(address, region).map(|s| (s.as_str(), region.share)));
        own.chain(shares)
    }

    /// The shards of the region at `address` that carry its rest share
    /// (those without an average of their own).
    fn carriers<'a>(&'a self, address: &str, region: &'a RegionShare) -> impl Iterator<Item = &'a String> {
        let shards = self.durable.regions.get(address).map(|r| r.shards.as_slice()).unwrap_or_default();
        shards.iter().filter(|s| !region.own.contains_key(*s))
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
    /// the page before). The shards with an average of their own are
    /// ranked; a region's shards carrying its rest share are walked only
    /// when the share could make the page.
    pub fn hottest(&self, after: Option<(f64, &str)>, limit: usize) -> Vec<(String, ShardLoad)> {
        let ranked = &self.loads.ranked;
        let page: Box<dyn Iterator<Item = &(u64, String)>> = match after {
            Some((load, shard)) => Box::new(ranked.range(..(load.to_bits(), shard.to_owned())).rev()),
            None => Box::new(ranked.iter().rev()),
        };
        let mut page: Vec<(u64, &str)> = page.take(limit).map(|(load, shard)| (*load, shard.as_str())).collect();
        let before = |key: (u64, &str)| after.is_none_or(|(load, shard)| key < (load.to_bits(), shard));
        let mut shares: Vec<(&String, &RegionShare)> =
            self.loads.shares.iter().filter(|(_, r)| r.share > 0.0).collect();
        shares.sort_unstable_by(|a, b| b.1.share.total_cmp(&a.1.share));
        for (address, region) in shares {
            let bits = region.share.to_bits();
            page.sort_unstable_by(|a, b| b.cmp(a));
            page.truncate(limit);
            if page.len() >= limit && page.last().is_some_and(|(last, _)| bits < *last) {
                break;
            }
            for shard in self.carriers(address, region) {
                if before((bits, shard)) {
                    page.push((bits, shard));
                }
                if page.len() >= 2 * limit.max(1) {
                    page.sort_unstable_by(|a, b| b.cmp(a));
                    page.truncate(limit);
                }
            }
        }
        page.sort_unstable_by(|a, b| b.cmp(a));
        page.truncate(limit);
        page.into_iter().map(|(_, shard)| (shard.to_owned(), self.load_of(shard))).collect()
    }

    /// Every shard's current load and last move (those with either), a
    /// walk over every shard; the durable state's `loads` are those last
    /// saved.
    pub fn loads(&self) -> BTreeMap<String, ShardLoad> {
        let mut loads: BTreeMap<String, ShardLoad> =
            self.loads.current.iter().filter(|(_, l)| !l.is_empty()).map(|(s, l)| (s.clone(), *l)).collect();
        for (shard, load) in self.every_load() {
            loads.entry(shard.to_owned()).or_default().load = load;
        }
        loads
    }

    /// A shard's current load and last move (zero and none when it has
    /// neither).
    pub fn load_of(&self, shard: &str) -> ShardLoad {
        let moved_at = self.loads.current.get(shard).and_then(|l| l.moved_at);
        let region = self.durable.homes.get(shard).map(|h| &*h.region);
        ShardLoad { load: self.loads.load_at(shard, region), moved_at }
    }
}
