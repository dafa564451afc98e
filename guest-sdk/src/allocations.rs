//! The shard table a strategy reads in `rebalance`: every shard in the view
//! by handle (hash, home, pinned, moving, load) and each region's shards in
//! allocation order.
//!
//! Each region's shards are a list threaded through the handles (`prev` and
//! `next` by handle), so a shard is homed, moved or retired in constant time:
//! the kept view of contract 0.2 ([`crate::kept`]) applies a batch of moves
//! without touching the rest of the table. Handles are the host's: dense
//! numbers, stable while the shard is in the view. [`Allocations::from_ids`]
//! numbers the shards itself, region by region (as contract 0.1 did).

use std::borrow::Cow;
use std::collections::HashMap;

use crate::attributes::Attributes;
use crate::shard_ids::IdTable;
use crate::view::{RegionId, Shard, shard_hash};

/// No handle: the end of a region's list.
const NIL: u32 = u32::MAX;
/// `homes[h]` of a shard in the view without a home (moving).
const HOMELESS: u32 = u32::MAX;
/// `homes[h]` of a handle with no shard in the view.
const ABSENT: u32 = u32::MAX - 1;

/// A shard's flag: an operator's placement pins it to its home.
pub(crate) const PINNED: u8 = 1;
/// A shard's flag: its hand-off is in progress.
pub(crate) const MOVING: u8 = 2;

/// The most handles a table holds: 2^26 (67,108,864 shards). A handle past
/// it is refused rather than allocating the table it would need.
pub const MAX_HANDLES: u32 = 1 << 26;

/// Where shard ids come from.
#[derive(Clone, Debug)]
pub(crate) enum ShardIds {
    /// Every id, indexed by handle, in one text.
    Known(IdTable),
    /// Asked of the host one at a time (components only).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        allow(dead_code, reason = "only a component asks the host for ids; natively every id is known up front")
    )]
    FromHost,
}

/// The current homes: each region's shards in allocation order (oldest
/// first), the shards whose hand-off is in progress, the shards pinned by
/// placements, and each shard's load.
#[derive(Clone, Debug)]
pub struct Allocations {
    hashes: Vec<u64>,
    homes: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    flags: Vec<u8>,
    loads: Vec<f64>,
    /// When each shard got its home (host milliseconds; 0 when unknown).
    since: Vec<u64>,
    heads: Vec<u32>,
    tails: Vec<u32>,
    counts: Vec<u32>,
    /// Each region's shards' loads together, kept as shards come, go and
    /// change load.
    region_loads: Vec<f64>,
    /// Shards in the view (homed or homeless).
    len: usize,
    /// Shards whose hand-off is in progress.
    moving: usize,
    ids: ShardIds,
    /// The attributes of the shards that have some (contract 0.3), by
    /// handle: natively always, in a component when the strategy asked for
    /// them with its view; `None`: asked of the host per shard.
    attributes: Option<HashMap<u32, Attributes>>,
}

/// One region's shards in allocation order: a walk along its list.
#[derive(Clone)]
pub struct RegionShards<'a> {
    table: &'a Allocations,
    front: u32,
    back: u32,
    left: usize,
}

impl Iterator for RegionShards<'_> {
    type Item = Shard;

    fn next(&mut self) -> Option<Shard> {
        if self.left == 0 {
            return None;
        }
        let handle = self.front;
        self.left -= 1;
        self.front = self.table.next[handle as usize];
        Some(self.table.shard(handle))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for RegionShards<'_> {
    fn next_back(&mut self) -> Option<Shard> {
        if self.left == 0 {
            return None;
        }
        let handle = self.back;
        self.left -= 1;
        self.back = self.table.prev[handle as usize];
        Some(self.table.shard(handle))
    }
}

impl ExactSizeIterator for RegionShards<'_> {}

impl Allocations {
    /// An empty table over `regions` regions.
    pub(crate) fn empty(regions: usize, ids: ShardIds) -> Self {
        Allocations {
            hashes: Vec::new(),
            homes: Vec::new(),
            prev: Vec::new(),
            next: Vec::new(),
            flags: Vec::new(),
            loads: Vec::new(),
            since: Vec::new(),
            heads: vec![NIL; regions],
            tails: vec![NIL; regions],
            counts: vec![0; regions],
            region_loads: vec![0.0; regions],
            len: 0,
            moving: 0,
            ids,
            attributes: Some(HashMap::new()),
        }
    }

    /// Builds the table from per-region shard ids (allocation order) and the
    /// ids of shards in progress. Handles are given region by region; the
    /// in-progress ids that are not allocated get handles after the
    /// allocated ones.
    pub fn from_ids<S: AsRef<str>>(per_region: &[Vec<S>], in_progress: &[S]) -> Self {
        let mut ids: Vec<String> = Vec::new();
        let mut counts = Vec::with_capacity(per_region.len());
        for shards in per_region {
            counts.push(shards.len() as u32);
            ids.extend(shards.iter().map(|s| s.as_ref().to_owned()));
        }
        let allocated = ids.len();
        let index: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let mut moving = Vec::new();
        let mut extra = Vec::new();
        for id in in_progress {
            match index.get(id.as_ref()) {
                Some(&i) => moving.push(i as u32),
                None => extra.push(id.as_ref().to_owned()),
            }
        }
        extra.sort();
        extra.dedup();
        moving.extend((0..extra.len()).map(|i| (allocated + i) as u32));
        ids.extend(extra);
        let hashes = ids.iter().map(|s| shard_hash(s)).collect();
        let mut table = IdTable::default();
        for (handle, id) in ids.iter().enumerate() {
            table.set(handle as u32, id);
        }
        Self::from_parts(hashes, &counts, &moving, ShardIds::Known(table)).expect("consistent by construction")
    }

    /// Builds the table from contract 0.1's flat form: hashes by handle,
    /// shard counts per region (handles given region by region), in-progress
    /// handles.
    pub(crate) fn from_parts(
        hashes: Vec<u64>,
        shard_counts: &[u32],
        in_progress: &[u32],
        ids: ShardIds,
    ) -> Result<Self, String> {
        let total: u64 = shard_counts.iter().map(|c| u64::from(*c)).sum();
        if total > hashes.len() as u64 {
            return Err(format!("{total} allocated shards but only {} hashes", hashes.len()));
        }
        if hashes.len() > MAX_HANDLES as usize {
            return Err(format!("{} shards, more than the table's {MAX_HANDLES}", hashes.len()));
        }
        if let ShardIds::Known(ids) = &ids
            && ids.len() != hashes.len()
        {
            return Err(format!("{} ids for {} shards", ids.len(), hashes.len()));
        }
        let n = hashes.len();
        let mut table = Allocations::empty(shard_counts.len(), ids);
        table.hashes = hashes;
        table.homes = vec![HOMELESS; n];
        table.prev = vec![NIL; n];
        table.next = vec![NIL; n];
        table.flags = vec![0; n];
        table.loads = vec![0.0; n];
        table.since = vec![0; n];
        table.len = n;
        let mut handle = 0u32;
        for (region, count) in shard_counts.iter().enumerate() {
            for _ in 0..*count {
                table.link(handle, region as u32);
                handle += 1;
            }
        }
        for &h in in_progress {
            if h as usize >= n {
                return Err(format!("in-progress handle {h} out of range"));
            }
            table.set_flag(h, MOVING, true);
        }
        Ok(table)
    }

    /// Makes room for `handle`.
    pub(crate) fn reserve(&mut self, handle: u32) -> Result<(), String> {
        if handle >= MAX_HANDLES {
            return Err(format!("shard handle {handle} is past the table's limit of {MAX_HANDLES}"));
        }
        let need = handle as usize + 1;
        if self.homes.len() < need {
            self.hashes.resize(need, 0);
            self.homes.resize(need, ABSENT);
            self.prev.resize(need, NIL);
            self.next.resize(need, NIL);
            self.flags.resize(need, 0);
            self.loads.resize(need, 0.0);
            self.since.resize(need, 0);
        }
        Ok(())
    }

    /// Appends a shard with no home to its region's list.
    fn link(&mut self, handle: u32, region: u32) {
        let h = handle as usize;
        let r = region as usize;
        self.homes[h] = region;
        self.prev[h] = self.tails[r];
        self.next[h] = NIL;
        match self.tails[r] {
            NIL => self.heads[r] = handle,
            tail => self.next[tail as usize] = handle,
        }
        self.tails[r] = handle;
        self.counts[r] += 1;
        self.region_loads[r] += self.loads[h];
    }

    /// Takes a homed shard out of its region's list; it stays in the view.
    fn unlink(&mut self, handle: u32) {
        let h = handle as usize;
        let r = self.homes[h] as usize;
        let (prev, next) = (self.prev[h], self.next[h]);
        match prev {
            NIL => self.heads[r] = next,
            p => self.next[p as usize] = next,
        }
        match next {
            NIL => self.tails[r] = prev,
            n => self.prev[n as usize] = prev,
        }
        self.counts[r] -= 1;
        // An empty region carries exactly nothing: no rounding left behind.
        self.region_loads[r] = if self.counts[r] == 0 { 0.0 } else { self.region_loads[r] - self.loads[h] };
        self.homes[h] = HOMELESS;
        self.prev[h] = NIL;
        self.next[h] = NIL;
    }

    /// Names a shard, when the table knows ids (natively, or a component
    /// with `needs_shard_names`).
    pub(crate) fn name(&mut self, handle: u32, id: &str) {
        if let ShardIds::Known(ids) = &mut self.ids {
            ids.set(handle, id);
        }
    }

    /// Names shards 0, 1, … in one go, taking `text` (their ids one after
    /// another, each ending at its `ends`) as it is: a table that knows ids
    /// and has none yet. `false` when it cannot (the caller names them one
    /// by one).
    pub(crate) fn adopt_names(&mut self, text: &mut String, ends: &[u32]) -> bool {
        match &mut self.ids {
            ShardIds::Known(ids) if ids.is_empty() => {
                *ids = IdTable::adopt(std::mem::take(text), ends);
                true
            }
            _ => false,
        }
    }

    /// Checks a handle names a shard in the view.
    pub(crate) fn present(&self, handle: u32) -> Result<(), String> {
        match self.homes.get(handle as usize) {
            Some(&home) if home != ABSENT => Ok(()),
            _ => Err(format!("shard handle {handle} is not in the view")),
        }
    }

    /// Homes a shard (new in the view, homeless, or moving from another
    /// region) at the end of `region`'s list.
    pub(crate) fn home_at(&mut self, handle: u32, hash: u64, region: u32) -> Result<(), String> {
        if region as usize >= self.heads.len() {
            return Err(format!("region index {region} out of range ({} regions)", self.heads.len()));
        }
        self.reserve(handle)?;
        let h = handle as usize;
        match self.homes[h] {
            ABSENT => {
                self.len += 1;
                self.flags[h] = 0;
                self.loads[h] = 0.0;
            }
            HOMELESS => {}
            _ => self.unlink(handle),
        }
        self.hashes[h] = hash;
        self.link(handle, region);
        Ok(())
    }

    /// Adds a shard to the view without a home.
    pub(crate) fn add_homeless(&mut self, handle: u32, hash: u64) -> Result<(), String> {
        self.reserve(handle)?;
        let h = handle as usize;
        if self.homes[h] != ABSENT {
            return Err(format!("shard handle {handle} is in the view twice"));
        }
        self.len += 1;
        self.homes[h] = HOMELESS;
        self.hashes[h] = hash;
        self.flags[h] = 0;
        self.loads[h] = 0.0;
        Ok(())
    }

    /// Takes a shard's home away; it stays in the view, without a time
    /// of a home.
    pub(crate) fn unhome(&mut self, handle: u32) -> Result<(), String> {
        self.present(handle)?;
        if self.homes[handle as usize] != HOMELESS {
            self.unlink(handle);
            self.since[handle as usize] = 0;
        }
        Ok(())
    }

    /// Takes a shard out of the view.
    pub(crate) fn retire(&mut self, handle: u32) -> Result<(), String> {
        self.unhome(handle)?;
        let h = handle as usize;
        if self.flags[h] & MOVING != 0 {
            self.moving -= 1;
        }
        self.flags[h] = 0;
        self.loads[h] = 0.0;
        self.since[h] = 0;
        self.homes[h] = ABSENT;
        self.len -= 1;
        if let ShardIds::Known(ids) = &mut self.ids {
            ids.clear(handle);
        }
        if let Some(attributes) = &mut self.attributes {
            attributes.remove(&handle);
        }
        Ok(())
    }

    /// Sets a shard's attributes (empty: it has none).
    pub(crate) fn set_attributes(&mut self, handle: u32, attributes: Attributes) -> Result<(), String> {
        self.present(handle)?;
        if let Some(kept) = &mut self.attributes {
            match attributes.is_empty() {
                true => kept.remove(&handle),
                false => kept.insert(handle, attributes),
            };
        }
        Ok(())
    }

    /// From now on a shard's attributes are asked of the host (a component
    /// whose strategy did not ask for them with its view).
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code, reason = "only a component asks the host for attributes"))]
    pub(crate) fn attributes_from_host(&mut self) {
        self.attributes = None;
    }

    /// Gives the shards with these ids their attributes (for a host or a
    /// test that built the table with [`Allocations::from_ids`]); ids not
    /// in the table are passed over.
    pub fn attributes_ids<'a>(&mut self, attributes: impl IntoIterator<Item = (&'a str, Attributes)>) {
        for (handle, given) in self.handles_of(attributes.into_iter().filter(|(_, a)| !a.is_empty())) {
            if let Some(kept) = &mut self.attributes {
                kept.insert(handle, given);
            }
        }
    }

    /// Marks the shards with these ids pinned where they are (for a host or
    /// a test that built the table with [`Allocations::from_ids`]); ids not
    /// in the table are passed over.
    pub fn pin_ids<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for (handle, ()) in self.handles_of(ids.into_iter().map(|id| (id, ()))) {
            self.set_flag(handle, PINNED, true);
        }
    }

    /// Gives the shards with these ids their loads (for a host or a test
    /// that built the table with [`Allocations::from_ids`]); ids not in the
    /// table are passed over. A load is finite and not negative.
    pub fn load_ids<'a>(&mut self, loads: impl IntoIterator<Item = (&'a str, f64)>) {
        for (handle, load) in self.handles_of(loads.into_iter().filter(|(_, load)| *load != 0.0)) {
            self.set_load(handle, load);
        }
    }

    /// Sets when the shards with these ids got their homes (for a host or a
    /// test that built the table with [`Allocations::from_ids`]); ids not in
    /// the table are passed over.
    pub fn since_ids<'a>(&mut self, since: impl IntoIterator<Item = (&'a str, u64)>) {
        for (handle, at) in self.handles_of(since.into_iter().filter(|(_, at)| *at != 0)) {
            self.set_since(handle, at);
        }
    }

    /// The handles of the shards in the view with these ids (when the table
    /// knows ids), each with what came with its id; ids not in the view are
    /// passed over. Builds no index of every id when none is asked for
    /// (no pins, no loads: the usual case).
    fn handles_of<'a, T>(&self, items: impl IntoIterator<Item = (&'a str, T)>) -> Vec<(u32, T)> {
        let ShardIds::Known(known) = &self.ids else { return Vec::new() };
        let wanted: Vec<(&str, T)> = items.into_iter().collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let index: HashMap<&str, u32> = (0..known.len() as u32).map(|h| (known.get(h), h)).collect();
        (wanted.into_iter())
            .filter_map(|(id, item)| index.get(id).map(|h| (*h, item)))
            .filter(|(handle, _)| self.homes[*handle as usize] != ABSENT)
            .collect()
    }

    /// Sets or clears one of a shard's flags.
    pub(crate) fn set_flag(&mut self, handle: u32, flag: u8, on: bool) {
        let h = handle as usize;
        let was = self.flags[h] & flag != 0;
        if was == on {
            return;
        }
        self.flags[h] ^= flag;
        if flag == MOVING {
            if on {
                self.moving += 1;
            } else {
                self.moving -= 1;
            }
        }
    }

    /// Sets when a shard got its home.
    pub(crate) fn set_since(&mut self, handle: u32, since: u64) {
        self.since[handle as usize] = since;
    }

    /// Sets a shard's load.
    pub(crate) fn set_load(&mut self, handle: u32, load: f64) {
        let h = handle as usize;
        let old = std::mem::replace(&mut self.loads[h], load);
        if let Some(total) = self.region_loads.get_mut(self.homes[h] as usize) {
            *total += load - old;
        }
    }

    /// Moves every region's list to its index in a new topology of
    /// `regions` regions; `to[old]` is the new index, or `None` for a
    /// region that is gone (it must have no shards left). Returns the
    /// shards whose home index changed, each with its old index.
    pub(crate) fn renumber(&mut self, to: &[Option<u32>], regions: usize) -> Result<Vec<(u32, u32)>, String> {
        let mut heads = vec![NIL; regions];
        let mut tails = vec![NIL; regions];
        let mut counts = vec![0; regions];
        let mut region_loads = vec![0.0; regions];
        let mut changed = Vec::new();
        for (old, target) in to.iter().enumerate() {
            match target {
                None if self.counts[old] > 0 => {
                    return Err(format!(
                        "a region that left the topology still has {} shards: they must be retired or unhomed in \
                         the same batch",
                        self.counts[old]
                    ));
                }
                None => {}
                Some(new) => {
                    let new = *new as usize;
                    heads[new] = self.heads[old];
                    tails[new] = self.tails[old];
                    counts[new] = self.counts[old];
                    region_loads[new] = self.region_loads[old];
                    if new != old {
                        let mut h = self.heads[old];
                        while h != NIL {
                            self.homes[h as usize] = new as u32;
                            changed.push((h, old as u32));
                            h = self.next[h as usize];
                        }
                    }
                }
            }
        }
        self.heads = heads;
        self.tails = tails;
        self.counts = counts;
        self.region_loads = region_loads;
        Ok(changed)
    }

    pub(crate) fn flags_of(&self, handle: u32) -> u8 {
        self.flags[handle as usize]
    }

    /// The home as the checksum counts it: the region index + 1, 0 when homeless.
    pub(crate) fn home_code(&self, handle: u32) -> u32 {
        match self.homes[handle as usize] {
            HOMELESS | ABSENT => 0,
            region => region + 1,
        }
    }

    pub(crate) fn hash_of(&self, handle: u32) -> u64 {
        self.hashes[handle as usize]
    }

    /// Every handle in the view, ascending.
    pub(crate) fn handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.homes.iter().enumerate().filter(|(_, home)| **home != ABSENT).map(|(h, _)| h as u32)
    }

    /// Number of shards in the table (allocated plus homeless in-progress).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no shards at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of regions the table covers.
    pub fn region_count(&self) -> usize {
        self.heads.len()
    }

    fn shard(&self, handle: u32) -> Shard {
        Shard { handle, hash: self.hashes[handle as usize] }
    }

    /// The region's shards in allocation order, oldest first.
    pub fn region_shards(&self, id: RegionId) -> RegionShards<'_> {
        let r = id.index();
        RegionShards { table: self, front: self.heads[r], back: self.tails[r], left: self.counts[r] as usize }
    }

    /// How many shards the region owns.
    pub fn region_len(&self, id: RegionId) -> usize {
        self.counts[id.index()] as usize
    }

    /// The region's shards' loads together (0 when none carries load):
    /// kept as shards come, go and change load, so asking costs nothing.
    pub fn region_load(&self, id: RegionId) -> f64 {
        self.region_loads.get(id.index()).map_or(0.0, |load| load.max(0.0))
    }

    /// Every allocated shard, region by region.
    pub fn allocated(&self) -> impl Iterator<Item = Shard> + '_ {
        (0..self.heads.len() as u32).flat_map(|r| self.region_shards(RegionId(r)))
    }

    /// The shard's current home; `None` for a homeless in-progress shard.
    pub fn home(&self, shard: Shard) -> Option<RegionId> {
        match self.homes.get(shard.handle as usize) {
            Some(&HOMELESS) | Some(&ABSENT) | None => None,
            Some(&region) => Some(RegionId(region)),
        }
    }

    /// True when the shard's hand-off is in progress.
    pub fn is_in_progress(&self, shard: Shard) -> bool {
        self.flags.get(shard.handle as usize).is_some_and(|f| f & MOVING != 0)
    }

    /// True when an operator's placement pins the shard to its home: the
    /// host moves it nowhere, so a strategy should not pick it.
    pub fn is_pinned(&self, shard: Shard) -> bool {
        self.flags.get(shard.handle as usize).is_some_and(|f| f & PINNED != 0)
    }

    /// The shard's load (smoothed, in the units regions report); 0 when
    /// none was reported.
    pub fn load(&self, shard: Shard) -> f64 {
        self.loads.get(shard.handle as usize).copied().unwrap_or(0.0)
    }

    /// Number of shards whose hand-off is in progress.
    pub fn in_progress_count(&self) -> usize {
        self.moving
    }

    /// The shards whose hand-off is in progress, by handle.
    pub fn in_progress(&self) -> impl Iterator<Item = Shard> + '_ {
        self.flags.iter().enumerate().filter(|(_, f)| **f & MOVING != 0).map(|(h, _)| self.shard(h as u32))
    }

    /// The shards pinned by placements, by handle.
    pub fn pinned(&self) -> impl Iterator<Item = Shard> + '_ {
        self.flags.iter().enumerate().filter(|(_, f)| **f & PINNED != 0).map(|(h, _)| self.shard(h as u32))
    }

    /// When the shard got its home: its allocation, or its arrival from
    /// its last move, in the host's milliseconds (the clock of the `now`
    /// `rebalance` is given: [`crate::View::now`]); 0 when the host did not
    /// say (contract 0.2, or a table built natively from ids).
    pub fn since(&self, shard: Shard) -> u64 {
        self.since.get(shard.handle as usize).copied().unwrap_or(0)
    }

    /// Every shard's hash, indexed by handle (the contract's flat form;
    /// a handle not in the view has hash 0).
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// The handles of the shards in progress, ascending.
    pub fn in_progress_handles(&self) -> Vec<u32> {
        self.in_progress().map(|s| s.handle).collect()
    }

    /// The id of the shard with this handle when ids are known up front
    /// (always natively; in a component only with `needs_shard_names`):
    /// `None` when they are not, "" for a handle no shard has.
    pub fn known_id(&self, handle: u32) -> Option<&str> {
        match &self.ids {
            ShardIds::Known(ids) => Some(ids.get(handle)),
            ShardIds::FromHost => None,
        }
    }

    /// The hashes, taken out of the table without a copy, and the shard
    /// ids by handle (one `String` each: contract 0.1's host answers
    /// `shard-id` from them); the ids are `None` in a component without
    /// `needs_shard_names`.
    pub fn into_parts(self) -> (Vec<u64>, Option<Vec<String>>) {
        let ids = match self.ids {
            ShardIds::Known(ids) => Some((0..ids.len() as u32).map(|h| ids.get(h).to_owned()).collect()),
            ShardIds::FromHost => None,
        };
        (self.hashes, ids)
    }

    /// The shard with this handle, if it is in the table.
    pub fn get(&self, handle: u32) -> Option<Shard> {
        self.homes.get(handle as usize).is_some_and(|home| *home != ABSENT).then(|| self.shard(handle))
    }

    /// The shard's attributes (contract 0.3; none when it has none). In a
    /// component whose strategy did not set `needs_shard_attributes` this
    /// asks the host, one call per shard.
    pub fn attributes(&self, shard: Shard) -> Cow<'_, Attributes> {
        match &self.attributes {
            Some(kept) => Cow::Borrowed(kept.get(&shard.handle).unwrap_or(&crate::attributes::NONE)),
            None => Cow::Owned(crate::host::shard_attributes(shard.handle)),
        }
    }

    /// The value of one of the shard's attributes ([`Allocations::attributes`]).
    pub fn attribute(&self, shard: Shard, key: &str) -> Option<Cow<'_, str>> {
        match self.attributes(shard) {
            Cow::Borrowed(attributes) => attributes.get(key).map(Cow::Borrowed),
            Cow::Owned(attributes) => attributes.get(key).map(|v| Cow::Owned(v.to_owned())),
        }
    }

    /// The shard's id. In a component without `needs_shard_names` this asks
    /// the host, one call per id.
    pub fn shard_id(&self, shard: Shard) -> Cow<'_, str> {
        match &self.ids {
            ShardIds::Known(ids) => Cow::Borrowed(ids.get(shard.handle)),
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

    fn order(table: &Allocations, region: u32) -> (Vec<u32>, Vec<u32>) {
        let forward = table.region_shards(RegionId(region)).map(|s| s.handle).collect();
        let mut backward: Vec<u32> = table.region_shards(RegionId(region)).rev().map(|s| s.handle).collect();
        backward.reverse();
        (forward, backward)
    }

    #[test]
    fn a_region_keeps_allocation_order_through_moves_and_retirements() {
        let mut table = Allocations::empty(2, ShardIds::FromHost);
        for h in 0..5 {
            table.home_at(h, u64::from(h), 0).unwrap();
        }
        table.home_at(2, 2, 1).unwrap(); // moved from the middle
        table.retire(0).unwrap(); // the head
        table.retire(4).unwrap(); // the tail
        table.home_at(7, 7, 0).unwrap(); // new, appended
        table.home_at(2, 2, 0).unwrap(); // moved back: now the newest
        for r in 0..2 {
            let (forward, backward) = order(&table, r);
            assert_eq!(forward, backward, "region {r} reads the same both ways");
        }
        assert_eq!(order(&table, 0).0, [1, 3, 7, 2]);
        assert_eq!(order(&table, 1).0, Vec::<u32>::new());
        assert_eq!(table.region_shards(RegionId(0)).len(), 4);
        assert_eq!(table.len(), 4);
        assert_eq!(table.get(0), None);
        assert_eq!(table.home(Shard { handle: 4, hash: 4 }), None);
    }

    #[test]
    fn an_unhomed_shard_stays_in_the_view_until_retired() {
        let mut table = Allocations::empty(1, ShardIds::FromHost);
        table.home_at(3, 33, 0).unwrap();
        table.set_flag(3, MOVING, true);
        table.unhome(3).unwrap();
        let shard = table.get(3).expect("still in the view");
        assert_eq!((table.home(shard), table.is_in_progress(shard), table.len()), (None, true, 1));
        table.retire(3).unwrap();
        assert_eq!((table.get(3), table.in_progress_count(), table.len()), (None, 0, 0));
        assert_eq!(table.retire(3), Err("shard handle 3 is not in the view".into()));
    }

    #[test]
    fn renumbering_follows_regions_and_refuses_to_drop_shards() {
        let mut table = Allocations::empty(3, ShardIds::FromHost);
        table.home_at(0, 0, 0).unwrap();
        table.home_at(1, 1, 2).unwrap();
        // Region 1 (empty) left; region 2 is now 1.
        let changed = table.renumber(&[Some(0), None, Some(1)], 2).unwrap();
        assert_eq!(changed, [(1, 2)]);
        assert_eq!(table.home(table.get(1).unwrap()), Some(RegionId(1)));
        assert_eq!(order(&table, 1).0, [1]);
        let refused = table.clone().renumber(&[Some(0), None], 1).unwrap_err();
        assert!(refused.contains("still has 1 shards"), "{refused}");
    }

    #[test]
    fn handles_past_the_limit_are_refused() {
        let mut table = Allocations::empty(1, ShardIds::FromHost);
        let refused = table.home_at(MAX_HANDLES, 0, 0).unwrap_err();
        assert!(refused.contains("past the table's limit"), "{refused}");
        assert!(table.home_at(0, 0, 1).unwrap_err().contains("region index 1 out of range"));
    }
}
