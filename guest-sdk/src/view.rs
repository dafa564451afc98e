//! The plain types a strategy sees: the topology, the per-call view, the
//! shard being allocated and the current allocations.

use std::borrow::Cow;
use std::sync::Arc;

pub use crate::topology::{Ranks, Region, RegionId, RegionStatus, Topology, compare_versions};

/// What a strategy sees on every call: the topology plus each region's
/// current shard count and metrics.
#[derive(Clone, Debug)]
pub struct View {
    topology: Arc<Topology>,
    shard_counts: Vec<u32>,
    metrics: Vec<f64>,
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
        Ok(View { topology, shard_counts, metrics })
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
        let width = self.topology.metric_names().len();
        let value = self.metrics[id.index() * width + column];
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

    /// The entity type's signal (operator JSON), if any.
    pub fn signal(&self) -> Option<&str> {
        self.topology.signal()
    }
}

/// The shard `allocate` is asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardKey {
    /// The shard's id.
    pub id: String,
    /// [`shard_hash`] of the id.
    pub hash: u64,
}

impl ShardKey {
    /// A key with its hash computed.
    pub fn new(id: impl Into<String>) -> Self {
        let id = id.into();
        let hash = shard_hash(&id);
        ShardKey { id, hash }
    }
}

/// The stable 64-bit hash of a shard id: xxh3-64 with seed 0 over the id's
/// UTF-8 bytes. It is part of the contract; changing it would move shards.
pub fn shard_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// A shard in a `rebalance` call: its handle (valid for this call only) and
/// the stable hash of its id. Get its id with [`Allocations::shard_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    /// Index into the call's shard table.
    pub handle: u32,
    /// [`shard_hash`] of the id.
    pub hash: u64,
}

/// Where shard ids come from.
#[derive(Clone, Debug)]
pub(crate) enum ShardIds {
    /// Every id, indexed by handle.
    Known(Vec<String>),
    /// Asked of the host one at a time (components only).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    FromHost,
}

/// The current homes: each region's shards in allocation order (oldest
/// first), plus the shards whose hand-off is in progress.
#[derive(Clone, Debug)]
pub struct Allocations {
    hashes: Vec<u64>,
    /// `starts[r]..starts[r+1]` are region r's handles; the last entry is the
    /// number of allocated shards.
    starts: Vec<u32>,
    in_progress: Vec<bool>,
    ids: ShardIds,
}

impl Allocations {
    /// Builds the table from per-region shard ids (allocation order) and the
    /// ids of shards in progress. In-progress ids that are not allocated get
    /// handles after the allocated ones.
    pub fn from_ids<S: AsRef<str>>(per_region: &[Vec<S>], in_progress: &[S]) -> Self {
        let mut ids = Vec::new();
        let mut starts = Vec::with_capacity(per_region.len() + 1);
        for shards in per_region {
            starts.push(ids.len() as u32);
            ids.extend(shards.iter().map(|s| s.as_ref().to_owned()));
        }
        starts.push(ids.len() as u32);
        let mut moving = vec![false; ids.len()];
        let index: std::collections::HashMap<&str, usize> =
            ids.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let mut extra = Vec::new();
        for id in in_progress {
            match index.get(id.as_ref()) {
                Some(&i) => moving[i] = true,
                None => extra.push(id.as_ref().to_owned()),
            }
        }
        extra.sort();
        extra.dedup();
        moving.extend(extra.iter().map(|_| true));
        ids.extend(extra);
        let hashes = ids.iter().map(|s| shard_hash(s)).collect();
        Allocations { hashes, starts, in_progress: moving, ids: ShardIds::Known(ids) }
    }

    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    /// Builds the table from the contract's flat form (used by the export
    /// glue): hashes by handle, shard counts per region, in-progress handles.
    pub(crate) fn from_parts(
        hashes: Vec<u64>,
        shard_counts: &[u32],
        in_progress: &[u32],
        ids: ShardIds,
    ) -> Result<Self, String> {
        let mut starts = Vec::with_capacity(shard_counts.len() + 1);
        let mut total: u64 = 0;
        for count in shard_counts {
            starts.push(total as u32);
            total += u64::from(*count);
        }
        if total > hashes.len() as u64 {
            return Err(format!("{total} allocated shards but only {} hashes", hashes.len()));
        }
        starts.push(total as u32);
        let mut moving = vec![false; hashes.len()];
        for &h in in_progress {
            *moving.get_mut(h as usize).ok_or_else(|| format!("in-progress handle {h} out of range"))? = true;
        }
        if let ShardIds::Known(ids) = &ids
            && ids.len() != hashes.len()
        {
            return Err(format!("{} ids for {} shards", ids.len(), hashes.len()));
        }
        Ok(Allocations { hashes, starts, in_progress: moving, ids })
    }

    /// Number of shards in the table (allocated plus homeless in-progress).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when there are no shards at all.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Number of regions the table covers.
    pub fn region_count(&self) -> usize {
        self.starts.len() - 1
    }

    fn shard(&self, handle: u32) -> Shard {
        Shard { handle, hash: self.hashes[handle as usize] }
    }

    /// The region's shards in allocation order, oldest first.
    pub fn region_shards(&self, id: RegionId) -> impl DoubleEndedIterator<Item = Shard> + ExactSizeIterator + '_ {
        let (from, to) = (self.starts[id.index()], self.starts[id.index() + 1]);
        (from..to).map(|h| self.shard(h))
    }

    /// Every allocated shard, region by region.
    pub fn allocated(&self) -> impl Iterator<Item = Shard> + '_ {
        (0..*self.starts.last().unwrap_or(&0)).map(|h| self.shard(h))
    }

    /// The shard's current home; `None` for a homeless in-progress shard.
    pub fn home(&self, shard: Shard) -> Option<RegionId> {
        if shard.handle >= *self.starts.last()? {
            return None;
        }
        // The region whose range holds the handle: the last start <= handle.
        let region = self.starts.partition_point(|&s| s <= shard.handle) - 1;
        Some(RegionId(region as u32))
    }

    /// True when the shard's hand-off is in progress.
    pub fn is_in_progress(&self, shard: Shard) -> bool {
        self.in_progress.get(shard.handle as usize).copied().unwrap_or(false)
    }

    /// Number of shards whose hand-off is in progress.
    pub fn in_progress_count(&self) -> usize {
        self.in_progress.iter().filter(|m| **m).count()
    }

    /// The shards whose hand-off is in progress.
    pub fn in_progress(&self) -> impl Iterator<Item = Shard> + '_ {
        self.in_progress.iter().enumerate().filter(|(_, m)| **m).map(|(h, _)| self.shard(h as u32))
    }

    /// Every shard's hash, indexed by handle (the contract's flat form).
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// The handles of the shards in progress, ascending.
    pub fn in_progress_handles(&self) -> Vec<u32> {
        self.in_progress.iter().enumerate().filter(|(_, m)| **m).map(|(h, _)| h as u32).collect()
    }

    /// Every shard id indexed by handle, when known up front (always
    /// natively; in a component only with `needs_shard_names`).
    pub fn ids(&self) -> Option<&[String]> {
        match &self.ids {
            ShardIds::Known(ids) => Some(ids),
            ShardIds::FromHost => None,
        }
    }

    /// The hashes and the shard ids by handle, taken out of the table
    /// without a copy; the ids are `None` in a component without
    /// `needs_shard_names`.
    pub fn into_parts(self) -> (Vec<u64>, Option<Vec<String>>) {
        let ids = match self.ids {
            ShardIds::Known(ids) => Some(ids),
            ShardIds::FromHost => None,
        };
        (self.hashes, ids)
    }

    /// The shard with this handle, if the handle is in the table.
    pub fn get(&self, handle: u32) -> Option<Shard> {
        ((handle as usize) < self.hashes.len()).then(|| self.shard(handle))
    }

    /// The shard's id. In a component without `needs_shard_names` this asks
    /// the host, one call per id.
    pub fn shard_id(&self, shard: Shard) -> Cow<'_, str> {
        match &self.ids {
            ShardIds::Known(ids) => Cow::Borrowed(ids[shard.handle as usize].as_str()),
            ShardIds::FromHost => Cow::Owned(crate::host::shard_id(shard.handle)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_index_regions_and_in_progress() {
        let per_region = vec![vec!["a", "b"], vec![], vec!["c"]];
        let table = Allocations::from_ids(&per_region, &["b", "z"]);
        assert_eq!(table.len(), 4);
        let ids: Vec<_> = table.region_shards(RegionId(2)).map(|s| table.shard_id(s).into_owned()).collect();
        assert_eq!(ids, ["c"]);
        let b = table.get(1).unwrap();
        assert_eq!(table.home(b), Some(RegionId(0)));
        assert!(table.is_in_progress(b));
        let z = table.get(3).unwrap();
        assert_eq!(table.shard_id(z), "z");
        assert_eq!(table.home(z), None);
        assert_eq!(table.home(table.get(2).unwrap()), Some(RegionId(2)));
        assert_eq!(table.in_progress_count(), 2);
        assert_eq!(z.hash, shard_hash("z"));
    }

    #[test]
    fn hash_is_xxh3_seed_zero() {
        // Pinned: a change here would move every hash-placed shard.
        assert_eq!(shard_hash(""), 0x2d06_8005_38d3_94c2);
    }
}
