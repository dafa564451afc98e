//! The host's shard table of one entity type, as contracts 0.2 and 0.3
//! share it: every shard strategies see, by handle, kept as the same
//! [`KeptView`] a component keeps, and the journal of batches that brings
//! a component's copy up to date. Each batch names the shards it brings
//! into the view (`Changes::named`), so a 0.3 component that reads ids has
//! them with its batches, and when each homed shard got its home.
//!
//! Every change here is one batch: applied to the table's own view at once
//! (so its generation and checksum are always current) and kept in the
//! journal, at most [`MAX_JOURNAL_BATCHES`] of them. A component whose copy
//! is at an older generation still in the journal is sent the batches after
//! it; one further behind (or new) is sent the whole view.
//!
//! Handles are dense: a retired shard's handle goes back to a free list and
//! is given to the next new shard. A shard being allocated, not yet in the
//! view, is named by the handle the next new shard would get
//! ([`ShardTable::allocation_handle`]): one no copy of the view holds.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::handles::Handles;

use shardalloc_guest::kept::{Attributed, Changes, FullView, Homed, KeptView, ShardLoads, ShardNames};
use shardalloc_guest::{Allocations, Attributes, Topology, View, shard_hash};

type Fold = foldhash::fast::RandomState;

/// Most batches kept in the journal: a component further behind is sent
/// the whole view instead.
pub const MAX_JOURNAL_BATCHES: usize = 4096;

/// Tells tables apart: a component's copy follows one table's history.
static NEXT_TABLE: AtomicU64 = AtomicU64::new(1);

/// Why the table refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// A shard was homed on a region the table's topology does not have.
    #[error("shard {shard} was homed on region {region}, which is not in the topology")]
    UnknownRegion {
        /// The shard.
        shard: String,
        /// The region's address.
        region: String,
    },
}

/// Every shard of one entity type that strategies see, by handle.
#[derive(Clone, Debug)]
pub struct ShardTable {
    id: u64,
    kept: KeptView,
    regions: HashMap<String, u32, Fold>,
    /// Each shard's handle by its id, the id read from `kept` (held once).
    handles: Handles,
    free: Vec<u32>,
    next: u32,
    journal: VecDeque<Changes>,
}

impl ShardTable {
    /// An empty table over a topology and its metric matrix.
    pub fn new(topology: &Topology, metrics: Vec<f64>) -> Self {
        let full = FullView::empty(topology.clone(), metrics);
        let kept = KeptView::load_named(full).expect("an empty view over a topology is consistent");
        let mut table = ShardTable {
            id: NEXT_TABLE.fetch_add(1, Ordering::Relaxed),
            kept,
            regions: HashMap::default(),
            handles: Handles::default(),
            free: Vec::new(),
            next: 0,
            journal: VecDeque::new(),
        };
        table.index_regions();
        table
    }

    /// A table built in one pass (at a coordinator's first view): `homes`
    /// names each homed shard with its region's index and when it got that
    /// home, region by region in allocation order; `moving` the shards whose hand-off is in progress
    /// (those not homed enter the view homeless); `pinned` the shards pinned
    /// where they are; `loads` the loads of shards and `attributes` their
    /// attributes (those not in the view are left out).
    pub fn build<'a>(
        topology: &Topology,
        metrics: Vec<f64>,
        homes: impl IntoIterator<Item = (&'a str, u32, u64)>,
        moving: impl IntoIterator<Item = &'a str>,
        pinned: impl IntoIterator<Item = &'a str>,
        loads: impl IntoIterator<Item = (&'a str, f64)>,
        attributes: impl IntoIterator<Item = (&'a str, Attributes)>,
    ) -> Self {
        let mut full = FullView::empty(topology.clone(), metrics);
        // Borrowed ids while building: the table's own index reads them
        // from its view once it has one.
        let mut handles: HashMap<&'a str, u32, Fold> = HashMap::default();
        let mut names: Vec<&str> = Vec::new();
        let mut add = |shard: &'a str, handles: &mut HashMap<&'a str, u32, Fold>| {
            let handle = names.len() as u32;
            names.push(shard);
            handles.insert(shard, handle);
            handle
        };
        for (shard, region, since) in homes {
            let handle = add(shard, &mut handles);
            full.homed.push(handle, shard_hash(shard), region, since);
        }
        for shard in moving {
            let handle = match handles.get(shard) {
                Some(handle) => *handle,
                None => {
                    let handle = add(shard, &mut handles);
                    full.homeless.push(handle);
                    full.homeless_hashes.push(shard_hash(shard));
                    handle
                }
            };
            full.moving.push(handle);
        }
        full.pinned.extend(pinned.into_iter().filter_map(|shard| handles.get(shard).copied()));
        for (shard, load) in loads {
            if let Some(handle) = handles.get(shard)
                && load != 0.0
            {
                full.loads.push(*handle, load);
            }
        }
        for (shard, given) in attributes {
            if let Some(handle) = handles.get(shard)
                && !given.is_empty()
            {
                full.attributes.push(*handle, given.iter());
            }
        }
        let mut kept = KeptView::load_named(full).expect("a view built from consistent parts");
        for (handle, shard) in names.iter().enumerate() {
            kept.name(handle as u32, *shard);
        }
        // One handle an id: where an id came twice (a durable state that
        // lists a shard twice), the last one, as the map had it.
        let mut index = Handles::default();
        for handle in handles.into_values() {
            index.insert(handle, kept.allocations());
        }
        let mut table = ShardTable {
            id: NEXT_TABLE.fetch_add(1, Ordering::Relaxed),
            kept,
            regions: HashMap::default(),
            next: names.len() as u32,
            handles: index,
            free: Vec::new(),
            journal: VecDeque::new(),
        };
        table.index_regions();
        table
    }

    /// Where this table differs from `other` in what strategies see
    /// (regions, each region's shards by id in order, hand-offs, pins), or
    /// `None`: a check for tests and simulations, costing a walk of both.
    pub fn differs_from(&self, other: &ShardTable) -> Option<String> {
        let ids = |t: &ShardTable, shards: &mut dyn Iterator<Item = shardalloc_guest::Shard>| -> Vec<String> {
            shards.map(|s| t.allocations().shard_id(s).into_owned()).collect()
        };
        if !same_regions(self.view().topology(), other.view().topology()) {
            return Some("the regions differ".to_owned());
        }
        for region in self.view().region_ids() {
            let (a, b) = (
                ids(self, &mut self.allocations().region_shards(region)),
                ids(other, &mut other.allocations().region_shards(region)),
            );
            if a != b {
                return Some(format!("region {} holds {a:?} here and {b:?} there", self.view().region(region).address));
            }
        }
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let moving = |t: &ShardTable| sorted(ids(t, &mut t.allocations().in_progress()));
        if moving(self) != moving(other) {
            return Some(format!("hand-offs {:?} here and {:?} there", moving(self), moving(other)));
        }
        let pinned = |t: &ShardTable| sorted(ids(t, &mut t.allocations().pinned()));
        if pinned(self) != pinned(other) {
            return Some(format!("pins {:?} here and {:?} there", pinned(self), pinned(other)));
        }
        let loads = |t: &ShardTable| {
            let mut loads: Vec<(String, u64)> = (t.allocations().allocated().chain(t.allocations().in_progress()))
                .filter(|s| t.allocations().load(*s) != 0.0)
                .map(|s| (t.allocations().shard_id(s).into_owned(), t.allocations().load(s).to_bits()))
                .collect();
            loads.sort();
            loads.dedup();
            loads
        };
        if loads(self) != loads(other) {
            return Some(format!("loads {:?} here and {:?} there", loads(self), loads(other)));
        }
        None
    }

    fn index_regions(&mut self) {
        self.regions =
            self.kept.view().regions().iter().enumerate().map(|(i, r)| (r.address.clone(), i as u32)).collect();
    }

    /// This table's identity: a component's copy follows one table.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The generation of the table's view.
    pub fn generation(&self) -> u64 {
        self.kept.generation()
    }

    /// The view checksum at [`ShardTable::generation`].
    pub fn checksum(&self) -> u64 {
        self.kept.checksum()
    }

    /// The strategy-facing view: topology, counts, metrics.
    pub fn view(&self) -> &View {
        self.kept.view()
    }

    /// The shard table strategies read (ids known by handle).
    pub fn allocations(&self) -> &Allocations {
        self.kept.allocations()
    }

    /// The handle of a shard in the view.
    pub fn handle(&self, shard: &str) -> Option<u32> {
        self.handles.get(shard, self.kept.allocations())
    }

    /// The id of a shard in the view.
    pub fn shard_id(&self, handle: u32) -> Option<&str> {
        let shard = self.kept.allocations().get(handle)?;
        self.kept.allocations().known_id(shard.handle)
    }

    /// The handle `allocate` names a shard by: its own when it is in the
    /// view (homeless, moving), otherwise the one the next new shard would
    /// get, which no copy of the view holds.
    pub fn allocation_handle(&self, shard: &str) -> u32 {
        self.handle(shard).unwrap_or_else(|| self.free.last().copied().unwrap_or(self.next))
    }

    fn take_handle(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Applies one batch to the table's view and keeps it in the journal.
    fn commit(&mut self, mut changes: Changes) {
        changes.generation = self.kept.generation() + 1;
        self.kept.apply(changes.clone()).expect("the table builds only batches its view accepts");
        if self.journal.len() == MAX_JOURNAL_BATCHES {
            self.journal.pop_front();
        }
        self.journal.push_back(changes);
    }

    /// Takes a new topology, metric matrix and smoothed matrix (the same
    /// layout) when they differ from the view's. Shards of regions that
    /// left lose their home first (the coordinator removes them before the
    /// region, so this is a guard).
    pub fn set_topology(&mut self, topology: &Arc<Topology>, metrics: &[f64], smoothed: &[f64]) {
        let same_topology =
            Arc::ptr_eq(self.kept.view().topology(), topology) || same_regions(self.kept.view().topology(), topology);
        let same = |a: &[f64], b: &[f64]| a.iter().map(|m| m.to_bits()).eq(b.iter().map(|m| m.to_bits()));
        let same_metrics = same(self.kept.view().metrics(), metrics);
        let same_smoothed = same(self.kept.view().smoothed_metrics(), smoothed);
        if same_topology && same_metrics && same_smoothed {
            return;
        }
        let mut changes = Changes {
            metrics: Some(metrics.to_vec()),
            smoothed_metrics: Some(smoothed.to_vec()),
            ..Changes::default()
        };
        let mut retired = Vec::new();
        if !same_topology {
            // A gone region's shards leave it: those in a hand-off stay in
            // the view without a home, the others leave the view.
            let staying: std::collections::HashSet<&str> =
                topology.regions().iter().map(|r| r.address.as_str()).collect();
            let allocations = self.kept.allocations();
            for (index, region) in self.kept.view().regions().iter().enumerate() {
                if !staying.contains(region.address.as_str()) {
                    for shard in allocations.region_shards(shardalloc_guest::RegionId(index as u32)) {
                        if allocations.is_in_progress(shard) {
                            changes.unhomed.push(shard.handle);
                        } else {
                            changes.retired.push(shard.handle);
                            retired.push((allocations.shard_id(shard).into_owned(), shard.handle));
                        }
                    }
                }
            }
            changes.topology = Some((**topology).clone());
        }
        self.commit(changes);
        for (shard, handle) in retired {
            self.forget(&shard, handle);
        }
        if !same_topology {
            self.index_regions();
        }
    }

    /// Homes a shard (new, homeless or moving) on `region`, the newest
    /// there, since `since` (the host's milliseconds).
    pub fn home(&mut self, shard: &str, region: &str, since: u64) -> Result<(), TableError> {
        let Some(&index) = self.regions.get(region) else {
            return Err(TableError::UnknownRegion { shard: shard.to_owned(), region: region.to_owned() });
        };
        let mut named = ShardNames::default();
        let (handle, new) = match self.handle(shard) {
            Some(handle) => (handle, false),
            None => {
                let handle = self.take_handle();
                named.push(handle, shard);
                (handle, true)
            }
        };
        let mut homed = Homed::default();
        homed.push(handle, shard_hash(shard), index, since);
        self.commit(Changes { homed, named, ..Changes::default() });
        if new {
            self.handles.insert(handle, self.kept.allocations());
        }
        Ok(())
    }

    /// Takes a shard's home away: it stays in the view while its hand-off
    /// is in progress, and leaves it otherwise.
    pub fn unhome(&mut self, shard: &str) {
        let Some(handle) = self.handle(shard) else { return };
        let table = self.kept.allocations();
        let entry = table.get(handle).expect("a handle in the view");
        if table.is_in_progress(entry) {
            if table.home(entry).is_some() {
                self.commit(Changes { unhomed: vec![handle], ..Changes::default() });
            }
        } else {
            self.retire(shard, handle);
        }
    }

    fn retire(&mut self, shard: &str, handle: u32) {
        self.commit(Changes { retired: vec![handle], ..Changes::default() });
        self.forget(shard, handle);
    }

    /// Gives a retired shard's handle back (the view dropped its id when
    /// it retired).
    fn forget(&mut self, shard: &str, handle: u32) {
        if self.handles.remove(shard, handle) {
            self.free.push(handle);
        }
    }

    /// Marks a shard's hand-off started or ended. A shard that ends its
    /// hand-off without a home leaves the view; one that starts it without
    /// being in the view enters it, homeless.
    pub fn set_moving(&mut self, shard: &str, moving: bool) {
        match (self.handle(shard), moving) {
            (Some(handle), true) => {
                if !self.kept.allocations().is_in_progress(self.kept.allocations().get(handle).expect("in the view")) {
                    self.commit(Changes { moving: vec![handle], ..Changes::default() });
                }
            }
            (Some(handle), false) => {
                let table = self.kept.allocations();
                let entry = table.get(handle).expect("in the view");
                if table.home(entry).is_none() {
                    self.retire(shard, handle);
                } else if table.is_in_progress(entry) {
                    self.commit(Changes { settled: vec![handle], ..Changes::default() });
                }
            }
            (None, true) => {
                let handle = self.take_handle();
                let mut named = ShardNames::default();
                named.push(handle, shard);
                self.commit(Changes {
                    named,
                    arrived_homeless: vec![handle],
                    arrived_hashes: vec![shard_hash(shard)],
                    moving: vec![handle],
                    ..Changes::default()
                });
                self.handles.insert(handle, self.kept.allocations());
            }
            (None, false) => {}
        }
    }

    /// Pins a shard where it is, or unpins it.
    pub fn set_pinned(&mut self, shard: &str, pinned: bool) {
        let Some(handle) = self.handle(shard) else { return };
        let table = self.kept.allocations();
        if table.is_pinned(table.get(handle).expect("in the view")) == pinned {
            return;
        }
        let changes = if pinned {
            Changes { pinned: vec![handle], ..Changes::default() }
        } else {
            Changes { unpinned: vec![handle], ..Changes::default() }
        };
        self.commit(changes);
    }

    /// Sets the loads of shards in the view, in one batch (shards not in
    /// the view and loads already held are left out). A load is finite and
    /// never negative.
    pub fn set_loads<'a>(&mut self, loads: impl IntoIterator<Item = (&'a str, f64)>) {
        let mut changes = ShardLoads::default();
        let table = self.kept.allocations();
        for (shard, load) in loads {
            debug_assert!(load.is_finite() && load >= 0.0, "a load of {load}");
            let Some(handle) = self.handles.get(shard, table) else { continue };
            let entry = table.get(handle).expect("a named handle is in the view");
            if table.load(entry).to_bits() != load.to_bits() {
                changes.push(handle, load);
            }
        }
        if !changes.shards.is_empty() {
            self.commit(Changes { loads: changes, ..Changes::default() });
        }
    }

    /// Sets a shard's attributes (all of them; empty: none), in one batch
    /// when the shard is in the view and they changed.
    pub fn set_attributes(&mut self, shard: &str, attributes: &Attributes) {
        let table = self.kept.allocations();
        let Some(handle) = self.handles.get(shard, table) else { return };
        let entry = table.get(handle).expect("a named handle is in the view");
        if *table.attributes(entry) == *attributes {
            return;
        }
        let mut attributed = Attributed::default();
        attributed.push(handle, attributes.iter());
        self.commit(Changes { attributes: attributed, ..Changes::default() });
    }

    /// The batches after `generation`, oldest first; `None` when the
    /// journal no longer reaches back that far (or `generation` is not one
    /// of this table's).
    pub fn batches_since(&self, generation: u64) -> Option<impl Iterator<Item = &Changes>> {
        let current = self.kept.generation();
        let behind = current.checked_sub(generation)? as usize;
        (behind <= self.journal.len()).then(|| self.journal.range(self.journal.len() - behind..))
    }

    /// The whole view, for a component with no copy of it; with every
    /// shard's id when `with_ids` (a component that reads ids).
    pub fn full_view(&self, with_ids: bool) -> FullView {
        let view = self.kept.view();
        let table = self.kept.allocations();
        let mut full = FullView::empty((**view.topology()).clone(), view.metrics().to_vec());
        full.smoothed_metrics = Some(view.smoothed_metrics().to_vec());
        full.generation = self.kept.generation();
        for region in view.region_ids() {
            for shard in table.region_shards(region) {
                full.homed.push(shard.handle, shard.hash, region.0, table.since(shard));
            }
        }
        for shard in table.in_progress() {
            if table.home(shard).is_none() {
                full.homeless.push(shard.handle);
                full.homeless_hashes.push(shard.hash);
            }
            full.moving.push(shard.handle);
        }
        full.pinned.extend(table.pinned().map(|s| s.handle));
        for shard in self.shards() {
            let load = table.load(shard);
            if load != 0.0 {
                full.loads.push(shard.handle, load);
            }
        }
        if with_ids {
            for shard in self.shards() {
                full.ids.push(shard.handle, table.shard_id(shard));
            }
        }
        full
    }

    /// Every shard in the view: the homed ones, then those moving without
    /// a home.
    pub fn shards(&self) -> impl Iterator<Item = shardalloc_guest::Shard> + '_ {
        let table = self.kept.allocations();
        table.allocated().chain(table.in_progress().filter(|s| table.home(*s).is_none()))
    }
}

/// True when two topologies describe the same regions (everything a
/// strategy reads of them).
fn same_regions(a: &Topology, b: &Topology) -> bool {
    a.regions() == b.regions() && a.metric_names() == b.metric_names() && a.signal() == b.signal()
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
