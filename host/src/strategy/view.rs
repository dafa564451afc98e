//! The host's view of one entity type's cluster, handed to strategies.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use shardalloc_guest::{AllocationCause, Allocations, Attributes, Region, Snapshot, Topology, View};

use super::table::ShardTable;

/// Checks that per-region data (`per_region` entries of `what`) and the
/// metric matrix fit the topology.
fn check_shape(topology: &Topology, metrics: &[f64], per_region: usize, what: &str) -> Result<(), String> {
    let regions = topology.regions().len();
    if per_region != regions {
        return Err(format!("{per_region} {what} for {regions} regions"));
    }
    if metrics.len() != regions * topology.metric_names().len() {
        return Err(format!("{} metric values for {regions} regions", metrics.len()));
    }
    Ok(())
}

/// The strategy view of parts [`check_shape`] has accepted.
fn consistent(topology: Arc<Topology>, counts: Vec<u32>, metrics: Vec<f64>) -> View {
    View::new(topology, counts, metrics).expect("checked by check_shape")
}

/// Regions (the shared, slow-changing [`Topology`]), their metrics, their
/// shards in allocation order, and the shards moving now.
///
/// The topology is shared by `Arc` while it does not change; its generation
/// tells a component whether it must be sent again, so `allocate` costs only
/// the per-region numbers.
///
/// A view made with [`ClusterView::for_allocation`] carries only each
/// region's shard count, so `allocate` costs nothing per shard; it has no
/// shard lists and must not be used for `rebalance`.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// The strategy-facing part (topology, per-region counts and metrics),
    /// built once and lent to every call.
    view: View,
    homes: Vec<Vec<String>>,
    in_progress: BTreeSet<String>,
    has_homes: bool,
    /// The coordinator's shard table at this view, when the view comes from
    /// one: a contract 0.2 component's copy follows it batch by batch.
    table: Option<Arc<ShardTable>>,
    /// Why the shard `allocate` is asked about needs a home.
    cause: AllocationCause,
    /// The attributes of the shard `allocate` is asked about.
    attributes: Attributes,
}

impl ClusterView {
    /// A view; `metrics` is row-major (regions × metric names, NaN = not
    /// reported) and `homes` has one shard list per region.
    pub fn new(
        topology: Arc<Topology>,
        metrics: Vec<f64>,
        homes: Vec<Vec<String>>,
        in_progress: BTreeSet<String>,
    ) -> Result<Self, String> {
        check_shape(&topology, &metrics, homes.len(), "shard lists")?;
        let counts = homes.iter().map(|h| h.len() as u32).collect();
        Ok(ClusterView {
            view: consistent(topology, counts, metrics),
            homes,
            in_progress,
            has_homes: true,
            table: None,
            cause: AllocationCause::NewShard,
            attributes: Attributes::default(),
        })
    }

    /// A view for `allocate` only: per-region shard counts, no shard lists.
    pub fn for_allocation(topology: Arc<Topology>, metrics: Vec<f64>, counts: Vec<u32>) -> Result<Self, String> {
        check_shape(&topology, &metrics, counts.len(), "shard counts")?;
        let homes = vec![Vec::new(); counts.len()];
        Ok(ClusterView {
            view: consistent(topology, counts, metrics),
            homes,
            in_progress: BTreeSet::new(),
            has_homes: false,
            table: None,
            cause: AllocationCause::NewShard,
            attributes: Attributes::default(),
        })
    }

    /// The view of a (validated) snapshot.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        let topology = Arc::new(snapshot.topology());
        let metrics = snapshot.view(topology.clone()).metrics().to_vec();
        let homes = snapshot.regions.iter().map(|r| r.shards.clone()).collect();
        let in_progress = snapshot.in_progress.iter().cloned().collect();
        ClusterView::new(topology, metrics, homes, in_progress).expect("a snapshot's view has one list per region")
    }

    /// The same view for an allocation with this cause.
    pub fn because(mut self, cause: AllocationCause) -> Self {
        self.cause = cause;
        self
    }

    /// The same view for an allocation of a shard with these attributes.
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
    }

    /// The attributes of the shard being allocated (none unless the view
    /// was made [`with_attributes`](Self::with_attributes)).
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    /// Why the shard being allocated needs a home (a new shard's, unless
    /// the view was made [`because`](Self::because) of another).
    pub fn cause(&self) -> AllocationCause {
        self.cause
    }

    /// The same view at the host's time `now` (milliseconds, the clock of
    /// the shards' `since`).
    pub fn at(mut self, now: u64) -> Self {
        self.view.set_now(now);
        self
    }

    /// The host's time at this view (0 when not given).
    pub fn now(&self) -> u64 {
        self.view.now()
    }

    /// True when the view has each region's shard list (not made
    /// [`for_allocation`](Self::for_allocation)).
    pub fn has_homes(&self) -> bool {
        self.has_homes
    }

    /// The same view, with the shard table it was taken from.
    pub fn with_table(mut self, table: Arc<ShardTable>) -> Self {
        // Native strategies read each region's load from the view, as
        // components read it from their own copy of the table.
        let kept = table.allocations();
        let loads: Vec<f64> = self.view.region_ids().map(|id| kept.region_load(id)).collect();
        if kept.region_count() == loads.len() && loads.iter().any(|l| *l != 0.0) {
            self.view.set_region_loads(loads).expect("one load per region");
        }
        // And the metrics the host smoothed, when the table's are of this
        // view's matrix.
        let smoothed = table.view().smoothed_metrics();
        if Arc::ptr_eq(table.view().topology(), self.view.topology())
            || table.view().topology().regions() == self.view.topology().regions()
                && table.view().topology().metric_names() == self.view.topology().metric_names()
        {
            self.view.set_smoothed_metrics(smoothed.to_vec()).expect("the same regions and metric names");
        }
        self.table = Some(table);
        self
    }

    /// A shard table built from this view's own homes and hand-offs (for a
    /// view made without one: a snapshot's). `None` for a view made
    /// [`for_allocation`](Self::for_allocation), which has no homes.
    pub fn built_table(&self) -> Option<ShardTable> {
        self.built_table_with_loads(&BTreeMap::new())
    }

    /// [`built_table`](Self::built_table), its shards carrying `loads`
    /// (shard → load; a shard without one carries none).
    pub fn built_table_with_loads(&self, loads: &BTreeMap<String, f64>) -> Option<ShardTable> {
        if !self.has_homes {
            return None;
        }
        let homes = self
            .homes
            .iter()
            .enumerate()
            .flat_map(|(region, shards)| shards.iter().map(move |shard| (shard.as_str(), region as u32, 0)));
        let moving = self.in_progress.iter().map(String::as_str);
        let loads = loads.iter().filter(|(_, l)| **l != 0.0).map(|(shard, load)| (shard.as_str(), *load));
        let (pinned, attributes) = (std::iter::empty(), std::iter::empty());
        Some(ShardTable::build(self.topology(), self.metrics().to_vec(), homes, moving, pinned, loads, attributes))
    }

    /// The shard table this view was taken from, if any.
    pub fn table(&self) -> Option<&Arc<ShardTable>> {
        self.table.as_ref()
    }

    /// The shared topology.
    pub fn topology(&self) -> &Arc<Topology> {
        self.view.topology()
    }

    /// Every region, in topology order.
    pub fn regions(&self) -> &[Region] {
        self.view.regions()
    }

    /// The metric matrix (row-major, NaN = not reported).
    pub fn metrics(&self) -> &[f64] {
        self.view.metrics()
    }

    /// Each region's shards, in allocation order (empty lists in a view
    /// made [`for_allocation`](Self::for_allocation)).
    pub fn homes(&self) -> &[Vec<String>] {
        debug_assert!(self.has_homes, "an allocation-only view has no shard lists");
        &self.homes
    }

    /// The shards whose hand-off is in progress.
    pub fn in_progress(&self) -> &BTreeSet<String> {
        &self.in_progress
    }

    /// Index of the region with this address.
    pub fn region_index(&self, address: &str) -> Option<usize> {
        self.regions().iter().position(|r| r.address == address)
    }

    /// Why `address` cannot receive a shard, or `None` when it can.
    pub fn not_allocatable_reason(&self, address: &str) -> Option<String> {
        let Some(index) = self.region_index(address) else {
            return Some(format!("region {address} is not a known region"));
        };
        let region = &self.regions()[index];
        if region.proxy_only {
            Some(format!("region {address} is proxy-only"))
        } else if region.draining {
            Some(format!("region {address} is draining"))
        } else if !region.is_allocatable() {
            Some(format!("region {address} is {}", region.status.as_str()))
        } else {
            None
        }
    }

    /// True when `address` may receive a shard.
    pub fn is_allocatable(&self, address: &str) -> bool {
        self.not_allocatable_reason(address).is_none()
    }

    /// Shard id → index of its home region.
    pub fn home_index(&self) -> HashMap<&str, usize> {
        debug_assert!(self.has_homes, "an allocation-only view has no shard lists");
        self.homes.iter().enumerate().flat_map(|(r, shards)| shards.iter().map(move |s| (s.as_str(), r))).collect()
    }

    /// Each region's shard count.
    pub fn shard_counts(&self) -> &[u32] {
        self.view.shard_counts()
    }

    /// The strategy-facing view (per-call numbers only; no shard lists).
    pub fn strategy_view(&self) -> &View {
        &self.view
    }

    /// The same view with the shards `last` names (by region index and
    /// shard) after the others in their region's list, each part in its
    /// own order; `None` when `last` names none.
    pub fn with_last(&self, last: impl Fn(usize, &str) -> bool) -> Option<ClusterView> {
        debug_assert!(self.has_homes, "an allocation-only view has no shard lists");
        if !self.homes.iter().enumerate().any(|(region, shards)| shards.iter().any(|shard| last(region, shard))) {
            return None;
        }
        let homes = self
            .homes
            .iter()
            .enumerate()
            .map(|(region, shards)| {
                let (mut first, rest): (Vec<String>, Vec<String>) =
                    shards.iter().cloned().partition(|shard| !last(region, shard));
                first.extend(rest);
                first
            })
            .collect();
        Some(ClusterView {
            view: self.view.clone(),
            homes,
            in_progress: self.in_progress.clone(),
            has_homes: true,
            table: self.table.clone(),
            cause: self.cause,
            attributes: self.attributes.clone(),
        })
    }

    /// The strategy-facing allocation table (handles in contract order).
    pub fn allocations(&self) -> Allocations {
        debug_assert!(self.has_homes, "an allocation-only view has no shard lists");
        let in_progress: Vec<&str> = self.in_progress.iter().map(String::as_str).collect();
        let homes: Vec<Vec<&str>> = self.homes.iter().map(|h| h.iter().map(String::as_str).collect()).collect();
        let mut allocations = Allocations::from_ids(&homes, &in_progress);
        // The pins the coordinator's table marks (placements on the shard's
        // own region) and the shards' loads, for native strategies as for
        // components.
        if let Some(table) = &self.table {
            let kept = table.allocations();
            allocations.pin_ids(kept.pinned().map(|s| kept.shard_id(s)).collect::<Vec<_>>().iter().map(|s| &**s));
            let loads: Vec<(std::borrow::Cow<'_, str>, f64)> = (kept.allocated().chain(kept.in_progress()))
                .filter(|s| kept.load(*s) != 0.0)
                .map(|s| (kept.shard_id(s), kept.load(s)))
                .collect();
            allocations.load_ids(loads.iter().map(|(id, load)| (&**id, *load)));
            let since: Vec<(std::borrow::Cow<'_, str>, u64)> =
                kept.allocated().filter(|s| kept.since(*s) != 0).map(|s| (kept.shard_id(s), kept.since(s))).collect();
            allocations.since_ids(since.iter().map(|(id, at)| (&**id, *at)));
            let attributed: Vec<(std::borrow::Cow<'_, str>, Attributes)> = (kept.allocated().chain(kept.in_progress()))
                .filter_map(|s| {
                    let attributes = kept.attributes(s);
                    (!attributes.is_empty()).then(|| (kept.shard_id(s), attributes.into_owned()))
                })
                .collect();
            allocations.attributes_ids(attributed.iter().map(|(id, a)| (&**id, a.clone())));
        }
        allocations
    }
}
