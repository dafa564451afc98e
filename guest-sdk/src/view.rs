//! The plain types a strategy sees: the topology, the per-call view and
//! the shard being allocated ([`Allocations`], the shard table, is in
//! [`crate::allocations`]).

use std::sync::{Arc, OnceLock};

use crate::attributes::Attributes;
use crate::suitable::Suitable;

pub use crate::allocations::Allocations;

pub use crate::topology::{Ranks, Region, RegionId, RegionStatus, Topology, compare_versions};

/// What a strategy sees on every call: the topology plus each region's
/// current shard count and metrics.
#[derive(Clone, Debug)]
pub struct View {
    topology: Arc<Topology>,
    shard_counts: Vec<u32>,
    metrics: Vec<f64>,
    /// The metric matrix smoothed by the host (the raw one until it says).
    smoothed: Vec<f64>,
    /// Each region's shards' loads together (zeros when no load is known).
    region_loads: Vec<f64>,
    /// The host's time at this call, in milliseconds (0 when not given).
    now: u64,
    /// The allocatable regions in suitability order, built on the second
    /// use and kept by [`View::add_count`] after that.
    suitable: OnceLock<Suitable>,
    /// Set at the first use: a view used once (made for one call) scans,
    /// which costs less than building the order.
    asked: OnceLock<()>,
}

impl View {
    /// Builds a view; `shard_counts` has one entry per region and `metrics`
    /// is row-major, one row per region, one column per metric name.
    pub fn new(topology: Arc<Topology>, shard_counts: Vec<u32>, metrics: Vec<f64>) -> Result<Self, String> {
        let regions = topology.regions().len();
        if shard_counts.len() != regions {
            return Err(format!("shard counts has {} entries for {regions} regions", shard_counts.len()));
        }
        let expected = regions * topology.metric_names().len();
        if metrics.len() != expected {
            return Err(format!("metrics has {} values, expected {expected}", metrics.len()));
        }
        let smoothed = metrics.clone();
        Ok(View {
            topology,
            region_loads: vec![0.0; shard_counts.len()],
            shard_counts,
            metrics,
            smoothed,
            now: 0,
            suitable: OnceLock::new(),
            asked: OnceLock::new(),
        })
    }

    /// Sets the smoothed metric matrix (same layout as the raw one); until
    /// it is set, the smoothed values are the raw ones.
    pub fn set_smoothed_metrics(&mut self, smoothed: Vec<f64>) -> Result<(), String> {
        if smoothed.len() != self.metrics.len() {
            return Err(format!("smoothed metrics has {} values, expected {}", smoothed.len(), self.metrics.len()));
        }
        self.smoothed = smoothed;
        Ok(())
    }

    /// Sets the host's time at this call (the host does, before each
    /// call; a test sets the time it wants).
    pub fn set_now(&mut self, now: u64) {
        self.now = now;
    }

    /// The host's time at this call, in milliseconds: the clock of
    /// [`Allocations::since`], so `view.now() - allocations.since(shard)` is
    /// how long the shard has been on its home. 0 when the host did not
    /// say (contract 0.2).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Sets each region's load (the shards' loads together), one per
    /// region: what a host or a kept view knows of the loads.
    pub fn set_region_loads(&mut self, loads: Vec<f64>) -> Result<(), String> {
        if loads.len() != self.shard_counts.len() {
            return Err(format!("{} region loads for {} regions", loads.len(), self.shard_counts.len()));
        }
        self.region_loads = loads;
        Ok(())
    }

    /// Sets one region's load (the kept view's bookkeeping).
    pub(crate) fn set_region_load(&mut self, region: u32, load: f64) {
        self.region_loads[region as usize] = load;
    }

    /// A region's load: its shards' loads together, as the host reported
    /// them (0 when none is known). Cheap: `allocate` may read it.
    pub fn region_load(&self, id: RegionId) -> f64 {
        self.region_loads.get(id.index()).copied().unwrap_or(0.0)
    }

    /// Adds `delta` to a region's shard count (the kept view's bookkeeping).
    pub(crate) fn add_count(&mut self, region: u32, delta: i32) {
        let count = &mut self.shard_counts[region as usize];
        let old = *count;
        *count = old.wrapping_add_signed(delta);
        let new = *count;
        if let Some(suitable) = self.suitable.get_mut() {
            suitable.recount(self.topology.ranks(), RegionId(region), old, new);
        }
    }

    /// Drops the suitability order, to be built again on its next use: for
    /// a batch that changes more counts than there are regions, where
    /// building once is cheaper than keeping it through every change.
    pub(crate) fn forget_suitable(&mut self) {
        self.suitable = OnceLock::new();
    }

    /// Replaces the metric matrix, which must fit the topology (the
    /// smoothed one becomes the same until it is set).
    pub(crate) fn set_metrics(&mut self, metrics: Vec<f64>) -> Result<(), String> {
        let expected = self.topology.regions().len() * self.topology.metric_names().len();
        if metrics.len() != expected {
            return Err(format!("metrics has {} values, expected {expected}", metrics.len()));
        }
        self.smoothed.clone_from(&metrics);
        self.metrics = metrics;
        Ok(())
    }

    /// The topology this view is based on.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// Every known region, allocatable or not; index with [`RegionId`].
    pub fn regions(&self) -> &[Region] {
        self.topology.regions()
    }

    /// One region.
    ///
    /// # Panics
    /// When `id` is not from this view.
    pub fn region(&self, id: RegionId) -> &Region {
        &self.topology.regions()[id.index()]
    }

    /// Every region id, in topology order.
    pub fn region_ids(&self) -> impl Iterator<Item = RegionId> + '_ {
        (0..self.topology.regions().len() as u32).map(RegionId)
    }

    /// The ids of the regions that may receive a shard, in topology order
    /// (listed once per topology, not filtered on every call).
    pub fn allocatable(&self) -> impl Iterator<Item = RegionId> + Clone + '_ {
        self.topology.ranks().allocatable().iter().copied()
    }

    /// The most suitable allocatable region by [`crate::order::region_order`]
    /// (the same answer as `least_loaded(view, view.allocatable())`), `None`
    /// when no region is allocatable. A lookup, not a scan, on a view used
    /// more than once (a kept view): the regions are kept in order as their
    /// counts change, so the second call on a view costs O(regions × log
    /// regions) and each after it O(1) plus O(log regions) a shard the
    /// view's bookkeeping moved. The first call scans, so a view made for
    /// one call costs what a scan does.
    pub fn most_suitable_allocatable(&self) -> Option<RegionId> {
        if let Some(suitable) = self.suitable.get() {
            return suitable.first();
        }
        let ranks = self.topology.ranks();
        if self.asked.set(()).is_ok() {
            return ranks.most_suitable(self.allocatable(), &self.shard_counts);
        }
        self.suitable.get_or_init(|| Suitable::build(ranks, &self.shard_counts)).first()
    }

    /// The first region that would keep a hand-off from completing, if any:
    /// one that is joining or unreachable (every region and proxy must
    /// acknowledge a hand-off). Strategies hold rebalancing while there is one.
    pub fn hand_off_blocker(&self) -> Option<RegionId> {
        self.region_ids()
            .find(|id| matches!(self.region(*id).status, RegionStatus::Joining | RegionStatus::Unreachable))
    }

    /// The region with this address.
    pub fn find(&self, address: &str) -> Option<RegionId> {
        self.topology.regions().iter().position(|r| r.address == address).map(|i| RegionId(i as u32))
    }

    /// How many shards the region owns now.
    pub fn shard_count(&self, id: RegionId) -> u32 {
        self.shard_counts[id.index()]
    }

    /// Every region's shard count, in topology order.
    pub fn shard_counts(&self) -> &[u32] {
        &self.shard_counts
    }

    /// The column of a metric, to read many regions' values with
    /// [`View::metric_at`] without looking the name up each time.
    pub fn metric_column(&self, name: &str) -> Option<usize> {
        self.topology.metric_names().iter().position(|n| n == name)
    }

    /// A region's value in a metric column; `None` when not reported.
    pub fn metric_at(&self, id: RegionId, column: usize) -> Option<f64> {
        self.cell(&self.metrics, id, column)
    }

    /// A region's value in a column of `matrix` (this view's raw or
    /// smoothed one); `None` for NaN.
    fn cell(&self, matrix: &[f64], id: RegionId, column: usize) -> Option<f64> {
        let value = matrix[id.index() * self.topology.metric_names().len() + column];
        (!value.is_nan()).then_some(value)
    }

    /// A region's reported metric; `None` when not reported.
    pub fn metric(&self, id: RegionId, name: &str) -> Option<f64> {
        self.metric_column(name).and_then(|c| self.metric_at(id, c))
    }

    /// The raw metric matrix (row-major, NaN = not reported).
    pub fn metrics(&self) -> &[f64] {
        &self.metrics
    }

    /// A region's value in a metric column, smoothed by the host (an
    /// exponential moving average with the half-life of shard loads, over
    /// the time between its reports); `None` when it never reported it.
    /// Where the host smooths nothing (a snapshot, a native test), the raw
    /// value.
    pub fn smoothed_metric_at(&self, id: RegionId, column: usize) -> Option<f64> {
        self.cell(&self.smoothed, id, column)
    }

    /// A region's smoothed metric ([`View::smoothed_metric_at`] by name).
    pub fn smoothed_metric(&self, id: RegionId, name: &str) -> Option<f64> {
        self.metric_column(name).and_then(|c| self.smoothed_metric_at(id, c))
    }

    /// The smoothed metric matrix (row-major, NaN = never reported).
    pub fn smoothed_metrics(&self) -> &[f64] {
        &self.smoothed
    }

    /// The entity type's signal (operator JSON), if any.
    pub fn signal(&self) -> Option<&str> {
        self.topology.signal()
    }
}

/// Why a shard is being allocated (contract 0.3's `allocation-cause`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocationCause {
    /// A region asked for a shard that has no home: new, or never placed.
    #[default]
    NewShard,
    /// Its region left the type, was removed after a silence, or restarted.
    RegionRemoved,
    /// It was moved off a draining region.
    Drained,
    /// It was moving to honour an operator's placement that was lifted, or
    /// whose region cannot take it, before it arrived.
    PlacementLifted,
    /// The strategy's `rebalance` moved it.
    Rebalance,
    /// An operator's rebalance (`rebalance-now`) moved it.
    Operator,
}

impl AllocationCause {
    /// Every cause, in the contract's order.
    pub const ALL: [AllocationCause; 6] = [
        AllocationCause::NewShard,
        AllocationCause::RegionRemoved,
        AllocationCause::Drained,
        AllocationCause::PlacementLifted,
        AllocationCause::Rebalance,
        AllocationCause::Operator,
    ];

    /// Its word, as the contract and the REST API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AllocationCause::NewShard => "new-shard",
            AllocationCause::RegionRemoved => "region-removed",
            AllocationCause::Drained => "drained",
            AllocationCause::PlacementLifted => "placement-lifted",
            AllocationCause::Rebalance => "rebalance",
            AllocationCause::Operator => "operator",
        }
    }
}

impl std::fmt::Display for AllocationCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The shard `allocate` is asked about: the stable hash of its id, the id
/// itself (which a component asks the host for only when the strategy
/// reads it, [`ShardKey::id`]), and why it needs a home
/// ([`ShardKey::cause`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardKey {
    /// [`shard_hash`] of the id.
    pub hash: u64,
    id: std::cell::OnceCell<String>,
    /// The host's handle of the shard, to ask for its id.
    handle: u32,
    cause: AllocationCause,
    attributes: std::cell::OnceCell<Attributes>,
}

impl ShardKey {
    /// A key with its hash computed, for a new shard.
    pub fn new(id: impl Into<String>) -> Self {
        let id = id.into();
        let hash = shard_hash(&id);
        ShardKey {
            hash,
            id: std::cell::OnceCell::from(id),
            handle: u32::MAX,
            cause: AllocationCause::NewShard,
            attributes: std::cell::OnceCell::new(),
        }
    }

    /// The same key with the shard's attributes (natively: a key without
    /// them reads none).
    pub fn with_attributes(self, attributes: Attributes) -> Self {
        ShardKey { attributes: std::cell::OnceCell::from(attributes), ..self }
    }

    /// The same key with another cause.
    pub fn with_cause(mut self, cause: AllocationCause) -> Self {
        self.cause = cause;
        self
    }

    /// A key whose id the host gives on request (a component).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        allow(dead_code, reason = "only a component asks the host for ids; natively every id is known up front")
    )]
    pub(crate) fn from_host(handle: u32, hash: u64, cause: AllocationCause) -> Self {
        ShardKey { hash, id: std::cell::OnceCell::new(), handle, cause, attributes: std::cell::OnceCell::new() }
    }

    /// The shard's id. In a component it is asked of the host the first
    /// time it is read, so a strategy that places by hash pays nothing.
    pub fn id(&self) -> &str {
        self.id.get_or_init(|| crate::host::shard_id(self.handle))
    }

    /// The shard's attributes (`tenant=acme`; contract 0.3). In a component
    /// they are asked of the host the first time they are read.
    pub fn attributes(&self) -> &Attributes {
        self.attributes.get_or_init(|| match self.handle {
            u32::MAX => Attributes::default(),
            handle => crate::host::shard_attributes(handle),
        })
    }

    /// The value of one of the shard's attributes.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes().get(key)
    }

    /// Why the shard needs a home: new, its region gone, drained, a
    /// placement lifted, or moved by a rebalance (the strategy's or an
    /// operator's).
    pub fn cause(&self) -> AllocationCause {
        self.cause
    }
}

/// The stable 64-bit hash of a shard id: xxh3-64 with seed 0 over the id's
/// UTF-8 bytes. It is part of the contract; changing it would move shards.
pub fn shard_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// A shard in the table: its handle and the stable hash of its id. Get its
/// id with [`Allocations::shard_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    /// Its handle in the table: in a component of contract 0.2 the host's,
    /// stable while the shard is in the view.
    pub handle: u32,
    /// [`shard_hash`] of the id.
    pub hash: u64,
}

/// One shard `rebalance` wants moved, and where to, if it has a say: the
/// host honours `to` when that region is allocatable when the shard
/// arrives (up, not draining, not proxy-only), and otherwise asks
/// `allocate`, as it does for a move without a destination. A [`Shard`]
/// is a move without one (`Move::from(shard)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Move {
    /// The shard to move.
    pub shard: Shard,
    /// Its destination, or `None` to let `allocate` decide.
    pub to: Option<RegionId>,
}

impl Move {
    /// A move of `shard` to the region `to`.
    pub fn to(shard: Shard, to: RegionId) -> Self {
        Move { shard, to: Some(to) }
    }
}

impl From<Shard> for Move {
    fn from(shard: Shard) -> Self {
        Move { shard, to: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_xxh3_seed_zero() {
        // Pinned: a change here would move every hash-placed shard.
        assert_eq!(shard_hash(""), 0x2d06_8005_38d3_94c2);
    }
}
