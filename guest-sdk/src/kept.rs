//! The view a component of contract 0.2 or 0.3 keeps between calls: loaded whole
//! once ([`KeptView::load`]), then changed batch by batch
//! ([`KeptView::apply`]), with the checksum both sides compute
//! ([`view_checksum`] defines it).
//!
//! The types here are the contract's `view` and `changes` as plain Rust, so
//! the same code runs in a component (behind the export glue) and natively
//! (the host's record of what a component holds, and tests).

use std::sync::Arc;

use crate::Attributes;
use crate::allocations::{Allocations, MOVING, PINNED, ShardIds};
use crate::view::{Topology, View};

/// Shards that get a home, as four columns of equal length: shard
/// `shards[i]`, whose id hashes to `hashes[i]`, now lives on region
/// `regions[i]` since `since[i]`, appended to its region's shards in list
/// order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Homed {
    /// Handles.
    pub shards: Vec<u32>,
    /// [`crate::shard_hash`] of each id.
    pub hashes: Vec<u64>,
    /// Region indexes in the topology the batch ends with.
    pub regions: Vec<u32>,
    /// When each shard got this home (allocated, or arrived from a move),
    /// in the host's milliseconds (contract 0.3; a 0.2 host sends none and
    /// a 0.2 component reads 0).
    pub since: Vec<u64>,
}

impl Homed {
    /// Adds one shard, homed at `since`.
    pub fn push(&mut self, shard: u32, hash: u64, region: u32, since: u64) {
        self.shards.push(shard);
        self.hashes.push(hash);
        self.regions.push(region);
        self.since.push(since);
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }
}

/// Per-shard loads as two columns of equal length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardLoads {
    /// Handles.
    pub shards: Vec<u32>,
    /// Each shard's load: finite, never negative.
    pub loads: Vec<f64>,
}

impl ShardLoads {
    /// Adds one shard's load.
    pub fn push(&mut self, shard: u32, load: f64) {
        self.shards.push(shard);
        self.loads.push(load);
    }
}

/// Shard ids by handle (contract 0.3's `shard-ids`): shard `shards[i]`
/// has the id that ends at `ends[i]` in `text` (and starts where the one
/// before ends): one text for every id, as the host sends them, so a
/// million ids are two allocations, not a million. Sent only to a strategy
/// that asked for ids ([`crate::Info::needs_shard_names`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardNames {
    /// Handles.
    pub shards: Vec<u32>,
    /// Their ids, one after another.
    pub text: String,
    /// Where each id ends in `text` (byte offsets, rising), in the order
    /// of `shards`.
    pub ends: Vec<u32>,
}

impl ShardNames {
    /// Adds one shard's id.
    pub fn push(&mut self, shard: u32, id: impl AsRef<str>) {
        self.shards.push(shard);
        self.text.push_str(id.as_ref());
        let end = u32::try_from(self.text.len()).expect("shard ids of one batch within 4 GiB");
        self.ends.push(end);
    }

    /// How many shards are named.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Each shard with its id, in order. Call [`ShardNames::check`] first
    /// on names from elsewhere: an end out of place panics here.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        (self.shards.iter().copied().zip(starts.zip(self.ends.iter().copied())))
            .map(|(shard, (start, end))| (shard, &self.text[start as usize..end as usize]))
    }

    /// Adds another batch's names after these.
    pub fn extend(&mut self, other: &ShardNames) {
        for (shard, id) in other.iter() {
            self.push(shard, id);
        }
    }

    /// Checks that there is an end per shard, each at or after the one
    /// before, within the text and between characters; the error names
    /// the first that is not.
    pub fn check(&self) -> Result<(), String> {
        if self.shards.len() != self.ends.len() {
            return Err(format!("{} named shards with {} ids", self.shards.len(), self.ends.len()));
        }
        let mut start = 0;
        for (i, &end) in self.ends.iter().enumerate() {
            if end < start || end as usize > self.text.len() || !self.text.is_char_boundary(end as usize) {
                return Err(format!(
                    "id {i} ends at byte {end}: not after {start}, within the text and on a character"
                ));
            }
            start = end;
        }
        Ok(())
    }
}

/// Shard attributes, packed (contract 0.3's `attributed`): shard
/// `shards[i]` has `counts[i]` pairs, after those of the shards before it;
/// each pair is a key and a value, one after another in `text`, each
/// ending at its entry of `ends`. Sent only to a strategy that asked for
/// attributes ([`crate::Info::needs_shard_attributes`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributed {
    /// Handles.
    pub shards: Vec<u32>,
    /// How many pairs each shard has.
    pub counts: Vec<u32>,
    /// Keys and values, one after another.
    pub text: String,
    /// Where each key and each value ends in `text` (byte offsets, rising).
    pub ends: Vec<u32>,
}

impl Attributed {
    /// Adds one shard with all its attributes (none: it has none left).
    pub fn push<'a>(&mut self, shard: u32, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut count = 0;
        for (key, value) in pairs {
            for part in [key, value] {
                self.text.push_str(part);
                self.ends.push(u32::try_from(self.text.len()).expect("attributes of one batch within 4 GiB"));
            }
            count += 1;
        }
        self.shards.push(shard);
        self.counts.push(count);
    }

    /// How many shards are listed.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Adds another batch's shards after these.
    pub fn extend(&mut self, other: &Attributed) {
        for (shard, attributes) in other.iter() {
            self.push(shard, attributes.iter());
        }
    }

    /// Each shard with its attributes, in order, taken as they come (sorted
    /// by key: no map is built per shard). Call [`Attributed::check`] first
    /// on attributes from elsewhere: an end out of place panics here.
    pub fn iter(&self) -> impl Iterator<Item = (u32, Attributes)> + '_ {
        self.pairs().map(|(shard, pairs)| (shard, Attributes::sorted(pairs)))
    }

    /// Each shard with its (key, value) pairs as the columns hold them.
    fn pairs(&self) -> impl Iterator<Item = (u32, impl Iterator<Item = (&str, &str)> + '_)> + '_ {
        let mut at = 0usize;
        self.shards.iter().zip(&self.counts).map(move |(&shard, &count)| {
            let first = at;
            at += 2 * count as usize;
            let pairs = (first..at).step_by(2).map(move |i| {
                let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
                let (key_end, value_end) = (self.ends[i] as usize, self.ends[i + 1] as usize);
                (&self.text[start..key_end], &self.text[key_end..value_end])
            });
            (shard, pairs)
        })
    }

    /// Checks that the columns agree: a count per shard, a key end and a
    /// value end per pair, each at or after the one before, within the
    /// text and between characters, and each shard's keys in increasing
    /// order; the error names the first that is not.
    pub fn check(&self) -> Result<(), String> {
        if self.shards.len() != self.counts.len() {
            return Err(format!("{} attributed shards with {} counts", self.shards.len(), self.counts.len()));
        }
        let pairs: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        if pairs.saturating_mul(2) != self.ends.len() as u64 {
            return Err(format!("{pairs} attribute pairs with {} ends", self.ends.len()));
        }
        let mut start = 0;
        for (i, &end) in self.ends.iter().enumerate() {
            if end < start || end as usize > self.text.len() || !self.text.is_char_boundary(end as usize) {
                return Err(format!(
                    "attribute end {i} is at byte {end}: not after {start}, within the text and on a character"
                ));
            }
            start = end;
        }
        for (shard, pairs) in self.pairs() {
            let mut last: Option<&str> = None;
            for (key, _) in pairs {
                if last.is_some_and(|last| last >= key) {
                    return Err(format!("the attributes of shard {shard} are not sorted by key, keys unique: {key:?}"));
                }
                last = Some(key);
            }
        }
        Ok(())
    }
}

/// The whole view (the contract's `view`).
#[derive(Clone, Debug)]
pub struct FullView {
    /// The view's generation; the next batch carries the one after.
    pub generation: u64,
    /// Regions, metric names, signal.
    pub topology: Topology,
    /// Row-major, one row per region, NaN = not reported.
    pub metrics: Vec<f64>,
    /// The same matrix smoothed by the host (contract 0.3); `None`: the
    /// raw one.
    pub smoothed_metrics: Option<Vec<f64>>,
    /// Every shard with a home, each region's in allocation order.
    pub homed: Homed,
    /// Shards in the view without a home (moving).
    pub homeless: Vec<u32>,
    /// Hashes of `homeless`, in the same order.
    pub homeless_hashes: Vec<u64>,
    /// Shards whose hand-off is in progress.
    pub moving: Vec<u32>,
    /// Shards pinned where they are by placements.
    pub pinned: Vec<u32>,
    /// Shards with a non-zero load.
    pub loads: ShardLoads,
    /// Every shard's id, when the strategy asked for ids (else empty).
    pub ids: ShardNames,
    /// The attributes of every shard that has some, when the strategy
    /// asked for them (else empty).
    pub attributes: Attributed,
}

impl FullView {
    /// A view of `topology` with no shards, at generation 0.
    pub fn empty(topology: Topology, metrics: Vec<f64>) -> Self {
        FullView {
            generation: 0,
            topology,
            metrics,
            smoothed_metrics: None,
            homed: Homed::default(),
            homeless: Vec::new(),
            homeless_hashes: Vec::new(),
            moving: Vec::new(),
            pinned: Vec::new(),
            loads: ShardLoads::default(),
            ids: ShardNames::default(),
            attributes: Attributed::default(),
        }
    }
}

/// One batch of changes (the contract's `changes`), applied in field order.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    /// The view's generation after the batch: the one before + 1.
    pub generation: u64,
    /// Shards that leave the view.
    pub retired: Vec<u32>,
    /// Shards that lose their home and stay in the view.
    pub unhomed: Vec<u32>,
    /// Shards new to the view without a home (moving).
    pub arrived_homeless: Vec<u32>,
    /// Hashes of `arrived_homeless`, in the same order.
    pub arrived_hashes: Vec<u64>,
    /// A new topology (regions matched by address).
    pub topology: Option<Topology>,
    /// A new metric matrix; always present with a new topology.
    pub metrics: Option<Vec<f64>>,
    /// A new smoothed matrix (contract 0.3), with a new metric matrix;
    /// `None` with one: the same as the raw.
    pub smoothed_metrics: Option<Vec<f64>>,
    /// Shards that get a home.
    pub homed: Homed,
    /// Shards whose hand-off started.
    pub moving: Vec<u32>,
    /// Shards whose hand-off ended.
    pub settled: Vec<u32>,
    /// Shards now pinned.
    pub pinned: Vec<u32>,
    /// Shards no longer pinned.
    pub unpinned: Vec<u32>,
    /// Shards whose load changed.
    pub loads: ShardLoads,
    /// The ids of the shards new to the view in this batch (in
    /// `arrived_homeless` or `homed` without having been in the view),
    /// when the strategy asked for ids; applied after `unhomed`, before
    /// the shards arrive. The host's table always names them.
    pub named: ShardNames,
    /// Shards whose attributes changed, or that enter the view with some,
    /// each with all of its attributes now; applied last. The host's table
    /// always lists them; a strategy that did not ask is sent none.
    pub attributes: Attributed,
}

/// The splitmix64 finalizer: the contract's mixing function.
pub fn mix(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 27;
    z = z.wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One shard's part of the view checksum: `home` is its region index + 1
/// (0 when homeless), `flags` 1 when pinned plus 2 when moving.
pub fn shard_term(handle: u32, hash: u64, home: u32, flags: u8, load: f64) -> u64 {
    let handle = u64::from(handle);
    mix(hash ^ (handle << 32) ^ (u64::from(home) << 2) ^ u64::from(flags)).wrapping_add(mix(load.to_bits() ^ handle))
}

/// The view checksum of a table, computed from scratch: the wrapping sum of
/// [`shard_term`] over every shard in it. [`KeptView`] keeps it up to date
/// batch by batch instead.
pub fn view_checksum(table: &Allocations) -> u64 {
    table.handles().fold(0u64, |sum, h| sum.wrapping_add(term(table, h)))
}

fn term(table: &Allocations, handle: u32) -> u64 {
    let shard = table.get(handle).expect("a shard in the view");
    shard_term(handle, shard.hash, table.home_code(handle), table.flags_of(handle), table.load(shard))
}

/// A view kept from a full load and batches of changes.
#[derive(Clone, Debug)]
pub struct KeptView {
    view: View,
    table: Allocations,
    generation: u64,
    checksum: u64,
    /// Set while a batch is applied; still set after one that failed.
    poisoned: bool,
}

impl KeptView {
    /// The view of a full load. Shard ids come from the host on request
    /// (in a component), or from [`KeptView::name`] (natively).
    pub fn load(full: FullView) -> Result<Self, String> {
        Self::load_with(full, ShardIds::FromHost)
    }

    /// [`KeptView::load`] for a native caller that names every shard it
    /// adds with [`KeptView::name`].
    pub fn load_named(full: FullView) -> Result<Self, String> {
        Self::load_with(full, ShardIds::Known(Default::default()))
    }

    fn load_with(full: FullView, ids: ShardIds) -> Result<Self, String> {
        let regions = full.topology.regions().len();
        let topology = Arc::new(full.topology);
        let mut view = View::new(topology, vec![0; regions], full.metrics)?;
        if let Some(smoothed) = full.smoothed_metrics {
            view.set_smoothed_metrics(smoothed)?;
        }
        let mut kept = KeptView {
            view,
            table: Allocations::empty(regions, ids),
            generation: full.generation,
            checksum: 0,
            poisoned: false,
        };
        kept.name_all(full.ids)?;
        kept.home_all(&full.homed)?;
        kept.add_homeless(&full.homeless, &full.homeless_hashes)?;
        kept.flag_all(&full.moving, MOVING, true)?;
        kept.flag_all(&full.pinned, PINNED, true)?;
        kept.load_all(&full.loads)?;
        kept.sync_region_loads()?;
        kept.attribute_all(&full.attributes)?;
        Ok(kept)
    }

    /// One region's load in the view from the table's, where a change
    /// touched it (as `add_count` keeps its shard count): a call costs the
    /// regions its batch changed, not every region.
    fn sync_region(&mut self, region: u32) {
        self.view.set_region_load(region, self.table.region_load(crate::RegionId(region)));
    }

    /// Every region's load in the view from the table's (a whole load, a
    /// new topology).
    fn sync_region_loads(&mut self) -> Result<(), String> {
        let regions = self.view.regions().len() as u32;
        let loads = (0..regions).map(|r| self.table.region_load(crate::RegionId(r))).collect();
        self.view.set_region_loads(loads)
    }

    /// Applies one batch and returns the checksum. An error names the
    /// first problem and leaves the view unusable (half-applied): load it
    /// anew. A component traps instead, and the host rebuilds it.
    pub fn apply(&mut self, changes: Changes) -> Result<u64, String> {
        if self.poisoned {
            return Err("an earlier batch failed half-way: the view must be loaded again".to_owned());
        }
        if changes.generation != self.generation.wrapping_add(1) {
            return Err(format!(
                "a batch for generation {} reached a view at generation {}",
                changes.generation, self.generation
            ));
        }
        self.poisoned = true;
        self.apply_in_place(changes)?;
        self.poisoned = false;
        Ok(self.checksum)
    }

    fn apply_in_place(&mut self, c: Changes) -> Result<(), String> {
        if c.retired.len() + c.unhomed.len() + c.homed.shards.len() > self.view.regions().len() {
            // Building the suitability order again on its next use costs
            // less than keeping it through this many count changes.
            self.view.forget_suitable();
        }
        for &shard in &c.retired {
            self.table.present(shard)?;
            self.checksum = self.checksum.wrapping_sub(term(&self.table, shard));
            let home = self.table.home(self.table.get(shard).expect("present"));
            if let Some(home) = home {
                self.view.add_count(home.0, -1);
            }
            self.table.retire(shard)?;
            if let Some(home) = home {
                self.sync_region(home.0);
            }
        }
        for &shard in &c.unhomed {
            self.change(shard, |kept| {
                let home = kept.table.home(kept.table.get(shard).expect("present"));
                if let Some(home) = home {
                    kept.view.add_count(home.0, -1);
                }
                kept.table.unhome(shard)?;
                if let Some(home) = home {
                    kept.sync_region(home.0);
                }
                Ok(())
            })?;
        }
        self.name_all(c.named)?;
        self.add_homeless(&c.arrived_homeless, &c.arrived_hashes)?;
        if let Some(topology) = c.topology {
            let metrics = c.metrics.ok_or("a new topology came without its metric matrix")?;
            self.replace_topology(topology, metrics)?;
        } else if let Some(metrics) = c.metrics {
            self.view.set_metrics(metrics)?;
        }
        if let Some(smoothed) = c.smoothed_metrics {
            self.view.set_smoothed_metrics(smoothed)?;
        }
        self.home_all(&c.homed)?;
        self.flag_all(&c.moving, MOVING, true)?;
        self.flag_all(&c.settled, MOVING, false)?;
        self.flag_all(&c.pinned, PINNED, true)?;
        self.flag_all(&c.unpinned, PINNED, false)?;
        self.load_all(&c.loads)?;
        self.attribute_all(&c.attributes)?;
        self.generation = c.generation;
        Ok(())
    }

    /// Changes one shard in the view, keeping the checksum.
    fn change(&mut self, shard: u32, f: impl FnOnce(&mut Self) -> Result<(), String>) -> Result<(), String> {
        self.table.present(shard)?;
        self.checksum = self.checksum.wrapping_sub(term(&self.table, shard));
        f(self)?;
        self.checksum = self.checksum.wrapping_add(term(&self.table, shard));
        Ok(())
    }

    /// Names shards about to enter the view (a table that knows ids; a
    /// table whose ids come from the host passes them over).
    fn name_all(&mut self, mut names: ShardNames) -> Result<(), String> {
        names.check()?;
        let limit = crate::allocations::MAX_HANDLES;
        if let Some(shard) = names.shards.iter().find(|&&shard| shard >= limit) {
            return Err(format!("shard handle {shard} is past the table's limit of {limit}"));
        }
        // A whole view names handles 0, 1, …: its text becomes the table's.
        let in_order = names.shards.iter().enumerate().all(|(i, &shard)| shard as usize == i);
        if in_order && self.table.adopt_names(&mut names.text, &names.ends) {
            return Ok(());
        }
        for (shard, id) in names.iter() {
            self.table.name(shard, id);
        }
        Ok(())
    }

    fn add_homeless(&mut self, shards: &[u32], hashes: &[u64]) -> Result<(), String> {
        if shards.len() != hashes.len() {
            return Err(format!("{} homeless shards with {} hashes", shards.len(), hashes.len()));
        }
        for (&shard, &hash) in shards.iter().zip(hashes) {
            self.table.add_homeless(shard, hash)?;
            self.checksum = self.checksum.wrapping_add(term(&self.table, shard));
        }
        Ok(())
    }

    fn home_all(&mut self, homed: &Homed) -> Result<(), String> {
        let n = homed.shards.len();
        // `since` is contract 0.3's: empty from a 0.2 host.
        if homed.hashes.len() != n || homed.regions.len() != n || (homed.since.len() != n && !homed.since.is_empty()) {
            return Err(format!(
                "homed shards come as columns of equal length: {n} handles, {} hashes, {} regions, {} times",
                homed.hashes.len(),
                homed.regions.len(),
                homed.since.len()
            ));
        }
        for i in 0..n {
            let (shard, hash, region) = (homed.shards[i], homed.hashes[i], homed.regions[i]);
            let mut left = None;
            if let Some(old) = self.table.get(shard) {
                self.checksum = self.checksum.wrapping_sub(term(&self.table, shard));
                left = self.table.home(old);
                if let Some(home) = left {
                    self.view.add_count(home.0, -1);
                }
            }
            self.table.home_at(shard, hash, region)?;
            self.table.set_since(shard, homed.since.get(i).copied().unwrap_or(0));
            self.view.add_count(region, 1);
            if let Some(home) = left {
                self.sync_region(home.0);
            }
            self.sync_region(region);
            self.checksum = self.checksum.wrapping_add(term(&self.table, shard));
        }
        Ok(())
    }

    fn flag_all(&mut self, shards: &[u32], flag: u8, on: bool) -> Result<(), String> {
        for &shard in shards {
            self.change(shard, |kept| {
                kept.table.set_flag(shard, flag, on);
                Ok(())
            })?;
        }
        Ok(())
    }

    fn load_all(&mut self, loads: &ShardLoads) -> Result<(), String> {
        if loads.shards.len() != loads.loads.len() {
            return Err(format!("{} shards with {} loads", loads.shards.len(), loads.loads.len()));
        }
        for (&shard, &load) in loads.shards.iter().zip(&loads.loads) {
            if !load.is_finite() || load < 0.0 {
                return Err(format!("shard handle {shard} has load {load}: loads are finite and never negative"));
            }
            self.change(shard, |kept| {
                kept.table.set_load(shard, load);
                if let Some(home) = kept.table.home(kept.table.get(shard).expect("present")) {
                    kept.sync_region(home.0);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Gives shards their attributes (not part of the checksum).
    fn attribute_all(&mut self, attributed: &Attributed) -> Result<(), String> {
        attributed.check()?;
        for (shard, attributes) in attributed.iter() {
            self.table.set_attributes(shard, attributes)?;
        }
        Ok(())
    }

    /// From now on the table asks the host for attributes, one shard at a
    /// time (a component whose strategy did not ask for them in bulk).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code, reason = "only a component asks the host for attributes"))]
    pub(crate) fn attributes_from_host(&mut self) {
        self.table.attributes_from_host();
    }

    fn replace_topology(&mut self, topology: Topology, metrics: Vec<f64>) -> Result<(), String> {
        let index: std::collections::HashMap<&str, u32> =
            topology.regions().iter().enumerate().map(|(i, r)| (r.address.as_str(), i as u32)).collect();
        let to: Vec<Option<u32>> = self.view.regions().iter().map(|r| index.get(r.address.as_str()).copied()).collect();
        let regions = topology.regions().len();
        let mut counts = vec![0u32; regions];
        for (old, new) in to.iter().enumerate() {
            if let Some(new) = new {
                counts[*new as usize] = self.view.shard_counts()[old];
            }
        }
        let renumbered = self.table.renumber(&to, regions)?;
        for (shard, old_region) in renumbered {
            let (hash, flags, load) = (
                self.table.hash_of(shard),
                self.table.flags_of(shard),
                self.table.load(self.table.get(shard).expect("homed")),
            );
            self.checksum = self.checksum.wrapping_sub(shard_term(shard, hash, old_region + 1, flags, load));
            self.checksum = self.checksum.wrapping_add(term(&self.table, shard));
        }
        self.view = View::new(Arc::new(topology), counts, metrics)?;
        self.sync_region_loads()
    }

    /// Names a shard (native callers that loaded with [`KeptView::load_named`]).
    pub fn name(&mut self, handle: u32, id: impl AsRef<str>) {
        self.table.name(handle, id.as_ref());
    }

    /// Sets the host's time for the next call ([`View::now`]).
    pub fn set_now(&mut self, now: u64) {
        self.view.set_now(now);
    }

    /// The view the strategy reads: topology, counts, metrics.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The shard table the strategy reads.
    pub fn allocations(&self) -> &Allocations {
        &self.table
    }

    /// The view's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The view checksum, kept batch by batch.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
