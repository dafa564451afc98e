//! A native test harness: build a cluster in one line, call a strategy, and
//! assert on addresses and shard ids instead of indexes and handles.
//!
//! ```
//! use shardalloc_guest::testing::Scenario;
//! # use shardalloc_guest::*;
//! # #[derive(Default)] struct First;
//! # impl Strategy for First {
//! #   fn info(&self) -> Info { unimplemented!() }
//! #   fn configure(&mut self, _: &str) -> Result<(), String> { Ok(()) }
//! #   fn allocate(&self, v: &View, _: &ShardKey, _: Option<RegionId>) -> Result<RegionId, String> {
//! #       v.allocatable().next().ok_or("none".into()) }
//! #   fn rebalance(&self, _: &View, _: &Allocations) -> Result<Vec<Move>, String> { Ok(vec![]) }
//! # }
//! let cluster = Scenario::parse("a=1,2,3 b= c=4").status("a", RegionStatus::Leaving);
//! assert_eq!(cluster.allocate(&First, "9").unwrap(), "b");
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::attributes::Attributes;
use crate::snapshot::{Snapshot, SnapshotRegion};
use crate::strategy::Strategy;
use crate::view::{Allocations, RegionStatus, ShardKey, View};

/// A cluster for tests, built fluently; a thin wrapper over a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scenario {
    /// The underlying snapshot.
    pub snapshot: Snapshot,
    /// Shard loads by id, as the host's view would carry them (a snapshot
    /// has none); a shard not named carries 0.
    pub loads: BTreeMap<String, f64>,
    /// When shards got their homes, by id (host milliseconds); a shard not
    /// named reads 0.
    pub since: BTreeMap<String, u64>,
    /// The host's time the strategy is called at ([`View::now`]).
    pub now: u64,
    /// Shard attributes by id (contract 0.3), for shards in the view and
    /// for the shards `allocate` is asked about.
    pub attributes: BTreeMap<String, Attributes>,
}

impl Scenario {
    /// Wraps a snapshot.
    pub fn new(snapshot: Snapshot) -> Self {
        Scenario { snapshot, ..Scenario::default() }
    }

    /// Shard `shard` got its home at `at` (host milliseconds).
    pub fn since(mut self, shard: &str, at: u64) -> Self {
        self.since.insert(shard.to_owned(), at);
        self
    }

    /// Shard `shard` has the attribute `key` = `value` (in the view, and
    /// when `allocate` is asked about it).
    pub fn attribute(mut self, shard: &str, key: &str, value: &str) -> Self {
        let entry = self.attributes.entry(shard.to_owned()).or_default();
        *entry = Attributes::new(entry.iter().filter(|(k, _)| *k != key).chain([(key, value)]));
        self
    }

    /// The key `allocate` is asked about: the shard's id, with its
    /// attributes.
    fn key(&self, shard: &str) -> ShardKey {
        ShardKey::new(shard).with_attributes(self.attributes.get(shard).cloned().unwrap_or_default())
    }

    /// The strategy is called at the host's time `now`.
    pub fn at(mut self, now: u64) -> Self {
        self.now = now;
        self
    }

    /// Parses `"a=1,2,3 b= c=4"`: regions separated by white space, each
    /// `address=shard,shard,…` in allocation order (oldest first).
    ///
    /// # Panics
    /// On a malformed spec or a duplicate; this is for tests.
    pub fn parse(spec: &str) -> Self {
        let regions = spec
            .split_whitespace()
            .map(|part| {
                let (address, shards) = part
                    .rsplit_once('=')
                    .unwrap_or_else(|| panic!("region {part:?} needs the form address=shard,shard"));
                SnapshotRegion {
                    address: address.to_owned(),
                    shards: shards.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
                    ..SnapshotRegion::default()
                }
            })
            .collect();
        let snapshot = Snapshot { regions, ..Snapshot::default() };
        snapshot.validate().unwrap_or_else(|e| panic!("{e}"));
        Scenario::new(snapshot)
    }

    fn region_mut(&mut self, address: &str) -> &mut SnapshotRegion {
        self.snapshot
            .regions
            .iter_mut()
            .find(|r| r.address == address)
            .unwrap_or_else(|| panic!("no region {address:?} in the scenario"))
    }

    /// Sets a region's status.
    pub fn status(mut self, address: &str, status: RegionStatus) -> Self {
        self.region_mut(address).status = status;
        self
    }

    /// Sets a region's application version.
    pub fn version(mut self, address: &str, version: &str) -> Self {
        self.region_mut(address).app_version = version.to_owned();
        self
    }

    /// Sets a region's join order.
    pub fn join_order(mut self, address: &str, order: u64) -> Self {
        self.region_mut(address).join_order = Some(order);
        self
    }

    /// Sets a region's label.
    pub fn label(mut self, address: &str, key: &str, value: &str) -> Self {
        self.region_mut(address).labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets a region's metric.
    pub fn metric(mut self, address: &str, name: &str, value: f64) -> Self {
        self.region_mut(address).metrics.insert(name.to_owned(), value);
        self
    }

    /// Declares a quantity of a region's capacity (as a region does when it
    /// registers); the one named `load` is also its `capacity`.
    pub fn quantity(mut self, address: &str, name: &str, amount: f64) -> Self {
        let region = self.region_mut(address);
        region.quantities.insert(name.to_owned(), amount);
        if name == "load" {
            region.capacity = Some(amount);
        }
        self
    }

    /// Marks a region draining.
    pub fn draining(mut self, address: &str) -> Self {
        self.region_mut(address).draining = true;
        self
    }

    /// Marks a region proxy-only.
    pub fn proxy_only(mut self, address: &str) -> Self {
        self.region_mut(address).proxy_only = true;
        self
    }

    /// Marks shards as moving.
    pub fn in_progress(mut self, shards: &[&str]) -> Self {
        self.snapshot.in_progress.extend(shards.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Sets the signal (JSON text).
    ///
    /// # Panics
    /// When the text is not JSON.
    pub fn signal(mut self, json: &str) -> Self {
        self.snapshot.signal = Some(serde_json::from_str(json).expect("signal must be JSON"));
        self
    }

    /// An operator's placement of `shard` on `address`: the shard is pinned
    /// when it sits there.
    pub fn placement(mut self, shard: &str, address: &str) -> Self {
        self.snapshot.placements.insert(shard.to_owned(), address.to_owned());
        self
    }

    /// The view a strategy would see (with each region's load when shards
    /// carry loads).
    pub fn view(&self) -> View {
        let mut view = self.snapshot.view(Arc::new(self.snapshot.topology()));
        if !self.loads.is_empty() {
            let table = self.allocations();
            let loads = view.region_ids().map(|id| table.region_load(id)).collect();
            view.set_region_loads(loads).expect("one load per region");
        }
        view.set_now(self.now);
        view
    }

    /// Shard `shard` carries `load` (finite, not negative).
    pub fn load(mut self, shard: &str, load: f64) -> Self {
        assert!(load.is_finite() && load >= 0.0, "a load is finite and not negative, not {load}");
        self.loads.insert(shard.to_owned(), load);
        self
    }

    /// The allocation table a strategy would see.
    pub fn allocations(&self) -> Allocations {
        let mut table = self.snapshot.allocations();
        table.load_ids(self.loads.iter().map(|(shard, load)| (shard.as_str(), *load)));
        table.since_ids(self.since.iter().map(|(shard, at)| (shard.as_str(), *at)));
        table.attributes_ids(self.attributes.iter().map(|(shard, a)| (shard.as_str(), a.clone())));
        table
    }

    /// Calls `allocate` without a requester and returns the chosen address.
    pub fn allocate<S: Strategy + ?Sized>(&self, strategy: &S, shard: &str) -> Result<String, String> {
        self.allocate_from(strategy, shard, None)
    }

    /// Calls `allocate` with a requester (by address) and returns the chosen address.
    pub fn allocate_from<S: Strategy + ?Sized>(
        &self,
        strategy: &S,
        shard: &str,
        requester: Option<&str>,
    ) -> Result<String, String> {
        let view = self.view();
        let requester = requester.map(|a| view.find(a).unwrap_or_else(|| panic!("no region {a:?}")));
        let region = strategy.allocate(&view, &self.key(shard), requester)?;
        let address = view
            .regions()
            .get(region.index())
            .ok_or_else(|| format!("strategy answered region index {} of {}", region.0, view.regions().len()))?;
        Ok(address.address.clone())
    }

    /// Calls `rebalance` and returns the shard ids in the strategy's order
    /// ([`Scenario::moves`] gives their destinations too).
    pub fn rebalance<S: Strategy + ?Sized>(&self, strategy: &S) -> Result<Vec<String>, String> {
        Ok(self.moves(strategy)?.into_iter().map(|(shard, _)| shard).collect())
    }

    /// Calls `rebalance` and returns each move as the shard id and the
    /// destination's address (`None`: left to `allocate`).
    pub fn moves<S: Strategy + ?Sized>(&self, strategy: &S) -> Result<Vec<(String, Option<String>)>, String> {
        let view = self.view();
        let table = self.allocations();
        let moves = strategy.rebalance(&view, &table)?;
        moves
            .into_iter()
            .map(|m| {
                let shard = match table.get(m.shard.handle) {
                    Some(s) => table.shard_id(s).into_owned(),
                    None => {
                        return Err(format!("strategy answered shard handle {} of {}", m.shard.handle, table.len()));
                    }
                };
                let to = match m.to {
                    None => None,
                    Some(region) => Some(
                        view.regions()
                            .get(region.index())
                            .ok_or_else(|| {
                                format!(
                                    "strategy moved {shard} to region index {} of {}",
                                    region.0,
                                    view.regions().len()
                                )
                            })?
                            .address
                            .clone(),
                    ),
                };
                Ok((shard, to))
            })
            .collect()
    }

    /// Calls `allocate` for a shard with a cause other than a new shard's,
    /// without a requester, and returns the chosen address.
    pub fn allocate_because<S: Strategy + ?Sized>(
        &self,
        strategy: &S,
        shard: &str,
        cause: crate::AllocationCause,
    ) -> Result<String, String> {
        let view = self.view();
        let region = strategy.allocate(&view, &self.key(shard).with_cause(cause), None)?;
        let address = view
            .regions()
            .get(region.index())
            .ok_or_else(|| format!("strategy answered region index {} of {}", region.0, view.regions().len()))?;
        Ok(address.address.clone())
    }

    /// Shard counts per address.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.snapshot.regions.iter().map(|r| (r.address.clone(), r.shards.len())).collect()
    }
}

/// A small deterministic random number generator (SplitMix64) for
/// generated clusters; the same seed gives the same cluster everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// How [`generate`] shapes a random cluster.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Number of regions.
    pub regions: usize,
    /// Number of shards spread over them.
    pub shards: usize,
    /// Percent of regions not up (joining, leaving or unreachable).
    pub not_up_percent: u64,
    /// Percent of regions draining or proxy-only.
    pub excluded_percent: u64,
    /// Percent of shards marked in progress.
    pub in_progress_percent: u64,
    /// Whether regions run mixed application versions.
    pub mixed_versions: bool,
}

impl Shape {
    /// All regions up, same version, nothing moving.
    pub fn healthy(regions: usize, shards: usize) -> Self {
        Shape { regions, shards, not_up_percent: 0, excluded_percent: 0, in_progress_percent: 0, mixed_versions: false }
    }

    /// Every kind of region and some moving shards.
    pub fn messy(regions: usize, shards: usize) -> Self {
        Shape {
            regions,
            shards,
            not_up_percent: 20,
            excluded_percent: 15,
            in_progress_percent: 5,
            mixed_versions: true,
        }
    }
}

/// Zones that [`generate`] labels regions with.
pub const ZONES: [&str; 3] = ["eu", "us", "ap"];

/// A random cluster: regions `r1…rN` with zone labels, `mem-used-ratio`
/// metrics and uneven shard counts; shards `s1…sM`; and a zone signal
/// mapping some shards and the prefix `s1` to zones.
pub fn generate(seed: u64, shape: &Shape) -> Scenario {
    let mut rng = Rng::new(seed);
    let mut regions: Vec<SnapshotRegion> = (0..shape.regions)
        .map(|i| {
            let status = if rng.chance(shape.not_up_percent) {
                [RegionStatus::Joining, RegionStatus::Leaving, RegionStatus::Unreachable][rng.below(3) as usize]
            } else {
                RegionStatus::Up
            };
            let excluded = rng.chance(shape.excluded_percent);
            let mut labels = BTreeMap::new();
            labels.insert("zone".to_owned(), ZONES[rng.below(3) as usize].to_owned());
            let mut metrics = BTreeMap::new();
            if rng.chance(90) {
                metrics.insert("mem-used-ratio".to_owned(), rng.below(101) as f64 / 100.0);
            }
            // Two regions in three declare a capacity (derived, drawing
            // nothing more from `rng`): `load`, and `sessions` against which
            // they report a `sessions` count.
            let mut quantities = BTreeMap::new();
            if i % 3 != 2 {
                quantities.insert("load".to_owned(), 50.0 * (i + 1) as f64);
                quantities.insert("sessions".to_owned(), 2_000.0);
                if let Some(ratio) = metrics.get("mem-used-ratio") {
                    metrics.insert("sessions".to_owned(), (ratio * 2_500.0).round());
                }
            }
            SnapshotRegion {
                address: format!("r{}", i + 1),
                shards: Vec::new(),
                status,
                app_version: if shape.mixed_versions && rng.chance(30) { "1.1.0" } else { "1.0.0" }.to_owned(),
                join_order: Some(rng.below(1_000)),
                labels,
                metrics,
                proxy_only: excluded && rng.chance(50),
                draining: excluded,
                capacity: quantities.get("load").copied(),
                quantities,
            }
        })
        .collect();
    let mut in_progress = Vec::new();
    if !regions.is_empty() {
        // Skewed: a few regions hold most shards.
        for s in 0..shape.shards {
            let r =
                if rng.chance(50) { rng.below(regions.len().min(3) as u64) } else { rng.below(regions.len() as u64) };
            let region = &mut regions[r as usize];
            if region.proxy_only {
                continue;
            }
            let id = format!("s{}", s + 1);
            if rng.chance(shape.in_progress_percent) {
                in_progress.push(id.clone());
            }
            region.shards.push(id);
        }
    }
    let mut exact = serde_json::Map::new();
    for s in 0..shape.shards.min(20) {
        exact.insert(format!("s{}", s * 7 + 2), ZONES[rng.below(3) as usize].into());
    }
    let signal = serde_json::json!({ "shards": exact, "prefixes": { "s1": ZONES[rng.below(3) as usize] } });
    Scenario::new(Snapshot { regions, in_progress, placements: BTreeMap::new(), signal: Some(signal) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_clusters_are_valid_and_repeatable() {
        for seed in 0..20 {
            let a = generate(seed, &Shape::messy(12, 200));
            a.snapshot.validate().unwrap();
            assert_eq!(a, generate(seed, &Shape::messy(12, 200)));
        }
        let total: usize = generate(1, &Shape::healthy(5, 100)).counts().values().sum();
        assert_eq!(total, 100);
    }

    #[test]
    fn parse_builds_regions_in_order() {
        let s = Scenario::parse("a=1,2 127.0.0.1:2552= c=3");
        assert_eq!(s.snapshot.regions[1].address, "127.0.0.1:2552");
        assert_eq!(s.counts()["a"], 2);
        assert_eq!(s.snapshot.join_order(2), 3);
    }
}
