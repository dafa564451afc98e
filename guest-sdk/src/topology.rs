//! The slow-changing part of the view: regions, the topology that lists
//! them, the order of application versions, and the topology's part of the
//! suitability order ([`Ranks`]), computed once per topology.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// Index of a region in `View::regions`. Valid for the view it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u32);

impl RegionId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Cluster membership status of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RegionStatus {
    /// A full member.
    #[default]
    Up,
    /// Joining the cluster, not yet a full member.
    Joining,
    /// Leaving the cluster gracefully.
    Leaving,
    /// Missed its heartbeats.
    Unreachable,
}

impl RegionStatus {
    /// The lowercase name used in JSON and in the contract.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionStatus::Up => "up",
            RegionStatus::Joining => "joining",
            RegionStatus::Leaving => "leaving",
            RegionStatus::Unreachable => "unreachable",
        }
    }
}

/// The slow-changing description of a region.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Region {
    /// Its address (`host:port` or any URI the application uses).
    pub address: String,
    /// Membership status.
    pub status: RegionStatus,
    /// Application version; compare with [`compare_versions`].
    pub app_version: String,
    /// Join order: lower is older.
    pub join_order: u64,
    /// Labels (zone, dc, role…).
    pub labels: BTreeMap<String, String>,
    /// Routes messages, never hosts shards.
    pub proxy_only: bool,
    /// Keeps its shards until they are moved, gets no new ones.
    pub draining: bool,
    /// How much shard load it can carry (in the units shard loads are
    /// reported in): its declared quantity named `load`; `None` when it
    /// declared none. Contract 0.2.
    pub capacity: Option<f64>,
    /// Every quantity of the capacity it declared when it registered, by
    /// name (`memory-mb`, `connections`, `load`…); empty when it declared
    /// none. Contract 0.3.
    pub quantities: BTreeMap<String, f64>,
}

impl Region {
    /// A region that may receive a shard: up, not proxy-only, not draining.
    /// The host refuses any other answer.
    pub fn is_allocatable(&self) -> bool {
        self.status == RegionStatus::Up && !self.proxy_only && !self.draining
    }

    /// The amount of a declared capacity quantity (contract 0.3).
    pub fn quantity(&self, name: &str) -> Option<f64> {
        self.quantities.get(name).copied()
    }

    /// The value of a label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Everything about the cluster that changes slowly. Shared (`Arc`) between
/// views while it does not change; its generation tells topologies apart.
#[derive(Clone, Debug)]
pub struct Topology {
    generation: u64,
    regions: Vec<Region>,
    metric_names: Vec<String>,
    signal: Option<String>,
    /// The suitability ranks, computed on first use.
    ranks: OnceLock<Ranks>,
}

impl PartialEq for Topology {
    /// The ranks are derived from the rest, so they are not compared.
    fn eq(&self, other: &Self) -> bool {
        self.generation == other.generation
            && self.regions == other.regions
            && self.metric_names == other.metric_names
            && self.signal == other.signal
    }
}

impl Topology {
    /// A new topology with a process-unique generation number.
    pub fn new(regions: Vec<Region>, metric_names: Vec<String>, signal: Option<String>) -> Self {
        let generation = NEXT_GENERATION.fetch_add(1, AtomicOrdering::Relaxed);
        Self::with_generation(generation, regions, metric_names, signal)
    }

    /// A topology with a generation chosen by the caller (the host's).
    pub fn with_generation(
        generation: u64,
        regions: Vec<Region>,
        metric_names: Vec<String>,
        signal: Option<String>,
    ) -> Self {
        Topology { generation, regions, metric_names, signal, ranks: OnceLock::new() }
    }

    /// The regions' suitability ranks ([`crate::order`]), computed on the
    /// first call and kept with the topology.
    pub fn ranks(&self) -> &Ranks {
        self.ranks.get_or_init(|| Ranks::of(self))
    }

    /// Changes whenever anything else in the topology changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every known region, allocatable or not.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Names of the metrics, in column order.
    pub fn metric_names(&self) -> &[String] {
        &self.metric_names
    }

    /// The entity type's signal (operator JSON), if any.
    pub fn signal(&self) -> Option<&str> {
        self.signal.as_deref()
    }
}

/// The topology's part of `order::region_order`, computed once per topology (it
/// is kept in the [`Topology`], so a strategy pays for it when the topology
/// changes, not on every call), and the allocatable regions.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranks {
    /// Per region: its standing (dense rank of not-leaving-first, then
    /// version, newest first) in bits 96–127, its seniority (dense rank of
    /// join order, then address) in bits 32–63 and its index in bits 0–31;
    /// the shard count goes in bits 64–95 on each call.
    places: Vec<u128>,
    /// With at most [`NARROW_REGIONS`] regions, the same in 64 bits:
    /// standing in bits 48–63, seniority in bits 0–15, the shard count in
    /// bits 16–47 on each call. WebAssembly has no 128-bit integers, so a
    /// component's scan compares one 64-bit word per region instead of two
    /// (the difference was not measured apart from the rest).
    narrow: Option<Narrow>,
    allocatable: Vec<RegionId>,
}

/// Topologies up to this many regions rank with 64-bit keys.
pub const NARROW_REGIONS: usize = 1 << 16;

#[derive(Clone, Debug, PartialEq)]
struct Narrow {
    places: Vec<u64>,
    /// Region index by seniority (regions the order cannot tell apart share
    /// a seniority: the first of them).
    by_seniority: Vec<u32>,
}

impl Ranks {
    /// Ranks the regions of `topology`.
    pub fn of(topology: &Topology) -> Self {
        let regions = topology.regions();
        let leaving = |i: usize| regions[i].status == RegionStatus::Leaving;
        let standing = |a: usize, b: usize| {
            leaving(a).cmp(&leaving(b)).then_with(|| {
                let (va, vb) = (&regions[a].app_version, &regions[b].app_version);
                if va == vb { Ordering::Equal } else { compare_versions(vb, va) }
            })
        };
        let seniority = |a: usize, b: usize| {
            let (ra, rb) = (&regions[a], &regions[b]);
            ra.join_order.cmp(&rb.join_order).then_with(|| ra.address.as_bytes().cmp(rb.address.as_bytes()))
        };
        let standings = dense_ranks(regions.len(), standing);
        let seniorities = dense_ranks(regions.len(), seniority);
        let places = (0..regions.len())
            .map(|i| (u128::from(standings[i]) << 96) | (u128::from(seniorities[i]) << 32) | i as u128)
            .collect();
        let narrow = (regions.len() <= NARROW_REGIONS).then(|| {
            let mut by_seniority = vec![u32::MAX; regions.len()];
            for i in (0..regions.len()).rev() {
                by_seniority[seniorities[i] as usize] = i as u32;
            }
            let places =
                (0..regions.len()).map(|i| (u64::from(standings[i]) << 48) | u64::from(seniorities[i])).collect();
            Narrow { places, by_seniority }
        });
        let allocatable =
            (0..regions.len()).filter(|&i| regions[i].is_allocatable()).map(|i| RegionId(i as u32)).collect();
        Ranks { places, narrow, allocatable }
    }

    /// The most suitable of `candidates` with these shard counts (the
    /// first in topology order among regions the order cannot tell apart).
    pub fn most_suitable(&self, candidates: impl Iterator<Item = RegionId>, counts: &[u32]) -> Option<RegionId> {
        match &self.narrow {
            Some(narrow) => candidates
                .map(|id| narrow.places[id.index()] | (u64::from(counts[id.index()]) << 16))
                .min()
                .map(|key| RegionId(narrow.by_seniority[(key & 0xffff) as usize])),
            None => candidates.map(|id| self.key(id, counts)).min().map(Ranks::region),
        }
    }

    /// The region's place in the suitability order with these shard
    /// counts: smaller is more suitable; equal only for the same region.
    /// The low 32 bits are the region's index ([`Ranks::region`]).
    #[inline]
    pub fn key(&self, id: RegionId, counts: &[u32]) -> u128 {
        self.key_with(id, counts[id.index()])
    }

    /// [`Ranks::key`] of a region holding `count` shards.
    #[inline]
    pub fn key_with(&self, id: RegionId, count: u32) -> u128 {
        self.places[id.index()] | (u128::from(count) << 64)
    }

    /// The order of two keys without the tie-break by index: `Equal` for
    /// regions the suitability order cannot tell apart.
    #[inline]
    pub fn compare(a: u128, b: u128) -> Ordering {
        (a >> 32).cmp(&(b >> 32))
    }

    /// The region a key belongs to.
    #[inline]
    pub fn region(key: u128) -> RegionId {
        RegionId(key as u32)
    }

    /// The regions that may receive a shard, in topology order.
    pub fn allocatable(&self) -> &[RegionId] {
        &self.allocatable
    }
}

/// Each of `n` items' rank under `order`: 0 for the least, equal items equal.
fn dense_ranks(n: usize, order: impl Fn(usize, usize) -> Ordering) -> Vec<u32> {
    let mut sorted: Vec<usize> = (0..n).collect();
    sorted.sort_by(|&a, &b| order(a, b));
    let mut ranks = vec![0; n];
    let mut rank = 0;
    for pair in 0..sorted.len() {
        if pair > 0 && order(sorted[pair - 1], sorted[pair]) != Ordering::Equal {
            rank += 1;
        }
        ranks[sorted[pair]] = rank;
    }
    ranks
}

/// Compares application versions: dot-separated parts, numeric parts
/// numerically (so 1.10 > 1.9), other parts bytewise, a numeric part below a
/// non-numeric one, a missing part below a present one; the empty version is
/// the lowest of all.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = compare_part(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_part(x: &str, y: &str) -> Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match (numeric(x), numeric(y)) {
        (true, true) => {
            let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            x.len().cmp(&y.len()).then_with(|| x.cmp(y))
        }
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.as_bytes().cmp(y.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically_by_part() {
        let cases = [
            ("1.10", "1.9", Ordering::Greater),
            ("1.9", "1.10", Ordering::Less),
            ("", "0", Ordering::Less),
            ("", "", Ordering::Equal),
            ("1.0", "1.0.0", Ordering::Less),
            ("2", "10", Ordering::Less),
            ("1.01", "1.1", Ordering::Equal),
            ("1.a", "1.1", Ordering::Greater),
            ("1.b", "1.a", Ordering::Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_versions(a, b), want, "{a} vs {b}");
        }
    }

    #[test]
    fn narrow_and_wide_keys_pick_the_same_region() {
        let region = |address: &str, version: &str, join_order: u64, status: RegionStatus| Region {
            address: address.into(),
            app_version: version.into(),
            join_order,
            status,
            ..Region::default()
        };
        let topology = Topology::new(
            vec![
                region("a", "1.9", 3, RegionStatus::Up),
                region("b", "1.10", 2, RegionStatus::Up),
                region("c", "1.10", 1, RegionStatus::Leaving),
                region("d", "1.10", 2, RegionStatus::Up),
                region("e", "", 0, RegionStatus::Up),
            ],
            vec![],
            None,
        );
        let narrow = Ranks::of(&topology);
        assert!(narrow.narrow.is_some());
        let wide = Ranks { narrow: None, ..narrow.clone() };
        let all = || (0..5).map(RegionId);
        for counts in [[0, 0, 0, 0, 0], [5, 4, 0, 4, 0], [1, 2, 3, 1, 0], [0, 9, 0, 9, 9], [7, 7, 7, 7, 7]] {
            let picked = narrow.most_suitable(all(), &counts);
            assert_eq!(picked, wide.most_suitable(all(), &counts), "{counts:?}");
            let mut sorted: Vec<RegionId> = all().collect();
            sorted.sort_by(|a, b| Ranks::compare(wide.key(*a, &counts), wide.key(*b, &counts)));
            assert_eq!(picked, sorted.first().copied(), "{counts:?}");
        }
        // Newest version first: b and d (1.10, not leaving) before a (1.9).
        assert_eq!(narrow.most_suitable(all(), &[0, 1, 0, 1, 0]), Some(RegionId(1)));
        assert_eq!(narrow.most_suitable(std::iter::empty(), &[0; 5]), None);
    }
}
