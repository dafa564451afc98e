//! The kept view against a plain model: literal batches with the orders
//! they must give, every refusal, and random histories where the view kept
//! batch by batch, a view loaded whole from the same state, and the model
//! agree (orders, counts, flags, loads, checksum).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::view::{Region, RegionId, RegionStatus, Shard};

fn topology(addresses: &[&str]) -> Topology {
    let regions = addresses.iter().map(|a| Region { address: (*a).to_owned(), ..Region::default() }).collect();
    Topology::new(regions, vec!["cpu".to_owned()], None)
}

fn empty(addresses: &[&str]) -> FullView {
    FullView { generation: 7, ..FullView::empty(topology(addresses), vec![f64::NAN; addresses.len()]) }
}

fn homed(entries: &[(u32, u32)]) -> Homed {
    let mut homed = Homed::default();
    for &(shard, region) in entries {
        homed.push(shard, u64::from(shard) * 1000, region, u64::from(shard) + 500);
    }
    homed
}

fn orders(kept: &KeptView) -> Vec<Vec<u32>> {
    let table = kept.allocations();
    (0..table.region_count() as u32).map(|r| table.region_shards(RegionId(r)).map(|s| s.handle).collect()).collect()
}

/// A literal case: what it shows, the batch, each region's shards after it,
/// each region's count.
type Case = (&'static str, Changes, Vec<Vec<u32>>, Vec<u32>);

fn batch(generation: u64) -> Changes {
    Changes { generation, ..Changes::default() }
}

#[test]
fn batches_give_the_orders_and_counts_they_describe() {
    let mut kept = KeptView::load(FullView { homed: homed(&[(0, 0), (1, 0), (2, 1)]), ..empty(&["a", "b"]) }).unwrap();
    assert_eq!(orders(&kept), [vec![0, 1], vec![2]]);
    let cases: Vec<Case> = vec![
        (
            "a new shard is appended",
            Changes { homed: homed(&[(5, 0)]), ..batch(8) },
            vec![vec![0, 1, 5], vec![2]],
            vec![3, 1],
        ),
        (
            "a move appends at the target",
            Changes { homed: homed(&[(0, 1)]), ..batch(9) },
            vec![vec![1, 5], vec![2, 0]],
            vec![2, 2],
        ),
        ("a retired shard leaves", Changes { retired: vec![1], ..batch(10) }, vec![vec![5], vec![2, 0]], vec![1, 2]),
        (
            "an unhomed shard leaves its region",
            Changes { unhomed: vec![2], moving: vec![2], ..batch(11) },
            vec![vec![5], vec![0]],
            vec![1, 1],
        ),
        (
            "a homeless shard gets a home",
            Changes { homed: homed(&[(2, 0)]), settled: vec![2], ..batch(12) },
            vec![vec![5, 2], vec![0]],
            vec![2, 1],
        ),
        (
            "a retired handle is reused",
            Changes { retired: vec![5], homed: homed(&[(5, 1)]), ..batch(13) },
            vec![vec![2], vec![0, 5]],
            vec![1, 2],
        ),
    ];
    for (what, changes, want, counts) in cases {
        let checksum = kept.apply(changes).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(orders(&kept), want, "{what}");
        assert_eq!(kept.view().shard_counts(), counts, "{what}");
        assert_eq!(checksum, view_checksum(kept.allocations()), "{what}: the kept checksum is the whole one");
    }
    assert_eq!(kept.generation(), 13);
    assert_eq!(kept.allocations().in_progress_count(), 0);
}

#[test]
fn flags_and_loads_change_the_checksum_and_read_back() {
    let mut kept = KeptView::load(FullView { homed: homed(&[(0, 0), (1, 0)]), ..empty(&["a"]) }).unwrap();
    let before = kept.checksum();
    let mut loads = ShardLoads::default();
    loads.push(1, 2.5);
    let after = kept.apply(Changes { pinned: vec![0], moving: vec![1], loads, ..batch(8) }).unwrap();
    assert_ne!(after, before);
    let table = kept.allocations();
    let (zero, one) = (table.get(0).unwrap(), table.get(1).unwrap());
    assert!(table.is_pinned(zero) && !table.is_in_progress(zero));
    assert!(table.is_in_progress(one) && !table.is_pinned(one));
    assert_eq!((table.load(zero), table.load(one)), (0.0, 2.5));
    let mut zero_load = ShardLoads::default();
    zero_load.push(1, 0.0);
    let back = kept.apply(Changes { unpinned: vec![0], settled: vec![1], loads: zero_load, ..batch(9) }).unwrap();
    assert_eq!(back, before, "the same view has the same checksum");
}

#[test]
fn a_new_topology_keeps_each_regions_shards_by_address() {
    let mut kept =
        KeptView::load(FullView { homed: homed(&[(0, 0), (1, 1), (2, 2)]), ..empty(&["a", "b", "c"]) }).unwrap();
    let changes = Changes {
        retired: vec![1],
        topology: Some(topology(&["c", "a", "d"])),
        metrics: Some(vec![0.5, f64::NAN, 1.0]),
        homed: homed(&[(3, 2)]),
        ..batch(8)
    };
    let checksum = kept.apply(changes).unwrap();
    assert_eq!(orders(&kept), [vec![2], vec![0], vec![3]]);
    assert_eq!(kept.view().shard_counts(), [1, 1, 1]);
    assert_eq!(kept.view().metric(RegionId(0), "cpu"), Some(0.5));
    assert_eq!(checksum, view_checksum(kept.allocations()));
    assert_eq!(kept.allocations().home(Shard { handle: 2, hash: 2000 }), Some(RegionId(0)));
}

#[test]
fn every_bad_batch_is_refused_by_name_and_the_view_must_be_loaded_again() {
    let base = || KeptView::load(FullView { homed: homed(&[(0, 0), (1, 1)]), ..empty(&["a", "b"]) }).unwrap();
    let mut nan = ShardLoads::default();
    nan.push(0, f64::NAN);
    let cases: Vec<(Changes, &str)> = vec![
        (batch(9), "a batch for generation 9 reached a view at generation 7"),
        (Changes { retired: vec![4], ..batch(8) }, "shard handle 4 is not in the view"),
        (Changes { moving: vec![4], ..batch(8) }, "shard handle 4 is not in the view"),
        (Changes { homed: homed(&[(2, 2)]), ..batch(8) }, "region index 2 out of range (2 regions)"),
        (
            Changes { homed: Homed { shards: vec![2], hashes: vec![], regions: vec![0], since: vec![] }, ..batch(8) },
            "homed shards come as columns of equal length: 1 handles, 0 hashes, 1 regions, 0 times",
        ),
        (
            Changes {
                homed: Homed { shards: vec![2], hashes: vec![2], regions: vec![0], since: vec![1, 2] },
                ..batch(8)
            },
            "homed shards come as columns of equal length: 1 handles, 1 hashes, 1 regions, 2 times",
        ),
        (
            Changes { named: ShardNames { shards: vec![2, 3], text: "x".into(), ends: vec![1] }, ..batch(8) },
            "2 named shards with 1 ids",
        ),
        (
            Changes { named: ShardNames { shards: vec![1 << 26], text: "x".into(), ends: vec![1] }, ..batch(8) },
            "shard handle 67108864 is past the table's limit of 67108864",
        ),
        (
            Changes { topology: Some(topology(&["a"])), metrics: Some(vec![0.0]), ..batch(8) },
            "a region that left the topology still has 1 shards",
        ),
        (
            Changes { topology: Some(topology(&["a", "b"])), ..batch(8) },
            "a new topology came without its metric matrix",
        ),
        (Changes { metrics: Some(vec![0.0]), ..batch(8) }, "metrics has 1 values, expected 2"),
        (Changes { loads: nan, ..batch(8) }, "shard handle 0 has load NaN: loads are finite and never negative"),
        (
            Changes { arrived_homeless: vec![0], arrived_hashes: vec![1], ..batch(8) },
            "shard handle 0 is in the view twice",
        ),
    ];
    for (changes, want) in cases {
        let mut kept = base();
        let error = kept.apply(changes).unwrap_err();
        assert!(error.contains(want), "{error:?} does not say {want:?}");
        if !want.starts_with("a batch for generation") {
            let again = kept.apply(batch(8)).unwrap_err();
            assert!(again.contains("must be loaded again"), "{again}");
        }
    }
}

/// The model: every shard by handle, with the allocation sequence number
/// that orders each region's shards.
#[derive(Clone, Debug, PartialEq)]
struct ModelShard {
    hash: u64,
    home: Option<String>,
    seq: u64,
    pinned: bool,
    moving: bool,
    load: f64,
}

#[derive(Clone, Debug)]
struct Model {
    regions: Vec<String>,
    shards: BTreeMap<u32, ModelShard>,
    seq: u64,
    free: Vec<u32>,
    next_handle: u32,
    generation: u64,
}

/// One random step of the host's truth.
#[derive(Clone, Debug)]
enum Step {
    Home { pick: usize, region: usize },
    New { region: usize, homeless: bool },
    Unhome { pick: usize },
    Retire { pick: usize },
    Moving { pick: usize, on: bool },
    Pin { pick: usize, on: bool },
    Load { pick: usize, load: u8 },
    Join { name: u8 },
    Leave { region: usize },
    Seal,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<usize>(), any::<usize>()).prop_map(|(pick, region)| Step::Home { pick, region }),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(region, h)| Step::New { region, homeless: h && region % 4 == 0 }),
        1 => any::<usize>().prop_map(|pick| Step::Unhome { pick }),
        2 => any::<usize>().prop_map(|pick| Step::Retire { pick }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, on)| Step::Moving { pick, on }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, on)| Step::Pin { pick, on }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(pick, load)| Step::Load { pick, load }),
        1 => any::<u8>().prop_map(|name| Step::Join { name }),
        1 => any::<usize>().prop_map(|region| Step::Leave { region }),
        3 => Just(Step::Seal),
    ]
}

impl Model {
    fn new() -> Self {
        Model {
            regions: vec!["a".into(), "b".into(), "c".into()],
            shards: BTreeMap::new(),
            seq: 0,
            free: Vec::new(),
            next_handle: 0,
            generation: 1,
        }
    }

    fn pick(&self, pick: usize) -> Option<u32> {
        (!self.shards.is_empty()).then(|| *self.shards.keys().nth(pick % self.shards.len()).expect("in range"))
    }

    fn handle(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next_handle += 1;
            self.next_handle - 1
        })
    }

    /// Applies a step; handles retired are reusable only after the batch
    /// is sealed (`retired` collects them until then).
    fn step(&mut self, step: &Step, retired: &mut Vec<u32>) {
        self.seq += 1;
        let seq = self.seq;
        match *step {
            Step::Home { pick, region } => {
                if let (Some(h), false) = (self.pick(pick), self.regions.is_empty()) {
                    let address = self.regions[region % self.regions.len()].clone();
                    let shard = self.shards.get_mut(&h).expect("picked");
                    shard.home = Some(address);
                    shard.seq = seq;
                }
            }
            Step::New { region, homeless } => {
                if self.regions.is_empty() {
                    return;
                }
                let home = (!homeless).then(|| self.regions[region % self.regions.len()].clone());
                let handle = self.handle();
                let shard = ModelShard {
                    hash: u64::from(handle) ^ 0xabc,
                    home,
                    seq,
                    pinned: false,
                    moving: homeless,
                    load: 0.0,
                };
                self.shards.insert(handle, shard);
            }
            Step::Unhome { pick } => {
                if let Some(h) = self.pick(pick) {
                    let shard = self.shards.get_mut(&h).expect("picked");
                    shard.home = None;
                    shard.moving = true;
                    shard.pinned = false;
                }
            }
            Step::Retire { pick } => {
                if let Some(h) = self.pick(pick) {
                    self.shards.remove(&h);
                    retired.push(h);
                }
            }
            Step::Moving { pick, on } => {
                if let Some(h) = self.pick(pick) {
                    let shard = self.shards.get_mut(&h).expect("picked");
                    shard.moving = on || shard.home.is_none();
                }
            }
            Step::Pin { pick, on } => {
                if let Some(h) = self.pick(pick) {
                    let shard = self.shards.get_mut(&h).expect("picked");
                    shard.pinned = on && shard.home.is_some();
                }
            }
            Step::Load { pick, load } => {
                if let Some(h) = self.pick(pick) {
                    self.shards.get_mut(&h).expect("picked").load = f64::from(load) / 4.0;
                }
            }
            Step::Join { name } => {
                let address = format!("r{name}");
                if !self.regions.contains(&address) {
                    self.regions.push(address);
                }
            }
            Step::Leave { region } => {
                if self.regions.is_empty() {
                    return;
                }
                let gone = self.regions.remove(region % self.regions.len());
                for shard in self.shards.values_mut() {
                    if shard.home.as_deref() == Some(gone.as_str()) {
                        shard.home = None;
                        shard.moving = true;
                        shard.pinned = false;
                    }
                }
            }
            Step::Seal => {}
        }
    }

    /// The regions differ in what the suitability order looks at, each by
    /// a property of its address (so a region keeps it across topologies):
    /// some are draining, leaving or proxy-only, versions and join orders
    /// differ.
    fn topology(&self) -> Topology {
        let regions = self
            .regions
            .iter()
            .map(|a| {
                let b = a.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                Region {
                    address: a.clone(),
                    app_version: format!("1.{}", b % 3),
                    join_order: u64::from(b % 4),
                    draining: b % 5 == 1,
                    proxy_only: b % 7 == 2,
                    status: if b % 6 == 3 { RegionStatus::Leaving } else { RegionStatus::Up },
                    ..Region::default()
                }
            })
            .collect();
        Topology::new(regions, vec!["cpu".to_owned()], None)
    }

    fn metrics(&self) -> Vec<f64> {
        (0..self.regions.len()).map(|i| i as f64).collect()
    }

    fn index(&self, address: &str) -> u32 {
        self.regions.iter().position(|r| r == address).expect("a known region") as u32
    }

    /// Homed shards in allocation order (by sequence number).
    fn homed_in_order(&self) -> Vec<(u32, &ModelShard)> {
        let mut homed: Vec<(u32, &ModelShard)> =
            self.shards.iter().filter(|(_, s)| s.home.is_some()).map(|(h, s)| (*h, s)).collect();
        homed.sort_by_key(|(_, s)| s.seq);
        homed
    }

    fn full(&self) -> FullView {
        let mut full =
            FullView { generation: self.generation, topology: self.topology(), metrics: self.metrics(), ..empty(&[]) };
        for (h, s) in self.homed_in_order() {
            full.homed.push(h, s.hash, self.index(s.home.as_deref().expect("homed")), s.seq * 10);
        }
        for (h, s) in &self.shards {
            if s.home.is_none() {
                full.homeless.push(*h);
                full.homeless_hashes.push(s.hash);
            }
            if s.moving {
                full.moving.push(*h);
            }
            if s.pinned {
                full.pinned.push(*h);
            }
            if s.load != 0.0 {
                full.loads.push(*h, s.load);
            }
        }
        full
    }

    /// The batch that takes a view of `old` to this state, as the host
    /// computes it from its record of what the component holds.
    fn diff(&self, old: &Model, retired: &[u32]) -> Changes {
        let mut changes = batch(self.generation);
        // A handle retired in this interval left the view, even when a new
        // shard took it (reuse waits for the next batch, as in the host).
        let mut gone: Vec<u32> = retired.iter().copied().filter(|h| old.shards.contains_key(h)).collect();
        gone.extend(old.shards.keys().filter(|h| !self.shards.contains_key(h)));
        gone.sort_unstable();
        gone.dedup();
        changes.retired = gone.clone();
        let before = |h: &u32| old.shards.get(h).filter(|_| !gone.contains(h));
        for (h, s) in &self.shards {
            // A shard whose old region is gone leaves it before the new
            // topology, even when it has a new home already.
            let region_gone = |o: &ModelShard| o.home.as_ref().is_some_and(|a| !self.regions.contains(a));
            if s.home.is_some() && before(h).is_some_and(region_gone) {
                changes.unhomed.push(*h);
            }
            if s.home.is_none() {
                match before(h) {
                    Some(o) if o.home.is_some() => changes.unhomed.push(*h),
                    Some(_) => {}
                    None => {
                        changes.arrived_homeless.push(*h);
                        changes.arrived_hashes.push(s.hash);
                    }
                }
            }
        }
        if self.regions != old.regions {
            changes.topology = Some(self.topology());
            changes.metrics = Some(self.metrics());
        }
        for (h, s) in self.homed_in_order() {
            let moved = match before(&h) {
                Some(o) => o.seq != s.seq || o.home != s.home,
                None => true,
            };
            if moved {
                changes.homed.push(h, s.hash, self.index(s.home.as_deref().expect("homed")), s.seq * 10);
            }
        }
        for (h, s) in &self.shards {
            let (was_moving, was_pinned, was_load) =
                before(h).map_or((false, false, 0.0), |o| (o.moving, o.pinned, o.load));
            match (was_moving, s.moving) {
                (false, true) => changes.moving.push(*h),
                (true, false) => changes.settled.push(*h),
                _ => {}
            }
            match (was_pinned, s.pinned) {
                (false, true) => changes.pinned.push(*h),
                (true, false) => changes.unpinned.push(*h),
                _ => {}
            }
            if was_load != s.load {
                changes.loads.push(*h, s.load);
            }
        }
        changes
    }

    fn checksum(&self) -> u64 {
        self.shards.iter().fold(0u64, |sum, (h, s)| {
            let home = s.home.as_deref().map_or(0, |a| self.index(a) + 1);
            let flags = u8::from(s.pinned) | (u8::from(s.moving) << 1);
            sum.wrapping_add(shard_term(*h, s.hash, home, flags, s.load))
        })
    }
}

fn same(kept: &KeptView, model: &Model) -> Result<(), TestCaseError> {
    let table = kept.allocations();
    let want: Vec<Vec<u32>> = (0..model.regions.len())
        .map(|r| {
            model
                .homed_in_order()
                .into_iter()
                .filter(|(_, s)| s.home.as_deref() == Some(&model.regions[r]))
                .map(|(h, _)| h)
                .collect()
        })
        .collect();
    prop_assert_eq!(orders(kept), want.clone());
    let counts: Vec<u32> = want.iter().map(|w| w.len() as u32).collect();
    prop_assert_eq!(kept.view().shard_counts(), &counts[..]);
    // The suitability order the view keeps through the batches is the one
    // a scan finds.
    prop_assert_eq!(
        kept.view().most_suitable_allocatable(),
        crate::order::least_loaded(kept.view(), kept.view().allocatable())
    );
    prop_assert_eq!(table.len(), model.shards.len());
    for (h, s) in &model.shards {
        let shard = table.get(*h).expect("in the view");
        prop_assert_eq!(shard.hash, s.hash);
        prop_assert_eq!(table.is_pinned(shard), s.pinned);
        prop_assert_eq!(table.is_in_progress(shard), s.moving);
        prop_assert_eq!(table.load(shard), s.load);
        if s.home.is_some() {
            prop_assert_eq!(table.since(shard), s.seq * 10, "when shard {} got its home", h);
        }
    }
    for (r, shards) in want.iter().enumerate() {
        // Kept change by change, the region's load is its shards' sum (up
        // to rounding in the order of the changes).
        let sum: f64 = shards.iter().map(|h| model.shards[h].load).sum();
        let kept_load = table.region_load(crate::RegionId(r as u32));
        prop_assert!(
            (kept_load - sum).abs() <= 1e-9 * sum.max(1.0),
            "region {}: {} kept, {} summed",
            r,
            kept_load,
            sum
        );
        // The view allocate reads carries the same figure, kept region by region.
        prop_assert_eq!(kept.view().region_load(crate::RegionId(r as u32)), kept_load);
    }
    prop_assert_eq!(kept.checksum(), model.checksum());
    prop_assert_eq!(kept.checksum(), view_checksum(table));
    Ok(())
}

#[test]
fn ids_come_with_the_view_and_with_each_new_shard() {
    let mut full = FullView { homed: homed(&[(0, 0), (1, 1)]), ..empty(&["a", "b"]) };
    full.ids.push(0, "tenant-0");
    full.ids.push(1, "tenant-1");
    let mut kept = KeptView::load_named(full).unwrap();
    let id = |kept: &KeptView, h: u32| kept.allocations().shard_id(kept.allocations().get(h).unwrap()).into_owned();
    assert_eq!((id(&kept, 0), id(&kept, 1)), ("tenant-0".to_owned(), "tenant-1".to_owned()));
    // Shard 0 leaves and its handle is given to a new shard in the same
    // batch; a new shard arrives homeless.
    let mut named = ShardNames::default();
    named.push(0, "tenant-7");
    named.push(2, "tenant-8");
    let changes = Changes {
        retired: vec![0],
        named,
        arrived_homeless: vec![2],
        arrived_hashes: vec![8],
        homed: homed(&[(0, 1)]),
        ..batch(8)
    };
    kept.apply(changes).unwrap();
    assert_eq!((id(&kept, 0), id(&kept, 2)), ("tenant-7".to_owned(), "tenant-8".to_owned()));
    assert_eq!(kept.allocations().since(kept.allocations().get(0).unwrap()), 500);
    // A retired shard's id is dropped with it.
    kept.apply(Changes { retired: vec![1], ..batch(9) }).unwrap();
    assert_eq!(kept.allocations().known_id(1), Some(""));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_kept_view_matches_a_whole_one_after_any_history(steps in prop::collection::vec(step(), 1..120)) {
        let mut model = Model::new();
        let mut kept = KeptView::load(model.full()).unwrap();
        let mut old = model.clone();
        let mut retired = Vec::new();
        for step in steps.iter().chain([Step::Seal].iter()) {
            if matches!(step, Step::Seal) {
                model.generation += 1;
                let changes = model.diff(&old, &retired);
                kept.apply(changes).map_err(TestCaseError::fail)?;
                same(&kept, &model)?;
                let whole = KeptView::load(model.full()).map_err(TestCaseError::fail)?;
                same(&whole, &model)?;
                model.free.append(&mut retired);
                old = model.clone();
            } else {
                model.step(step, &mut retired);
            }
        }
    }
}

fn attributed(entries: &[(u32, &[(&str, &str)])]) -> Attributed {
    let mut attributed = Attributed::default();
    for (shard, pairs) in entries {
        attributed.push(*shard, pairs.iter().copied());
    }
    attributed
}

fn attributes_of(kept: &KeptView, handle: u32) -> Vec<(String, String)> {
    let table = kept.allocations();
    let shard = table.get(handle).expect("in the view");
    table.attributes(shard).iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

#[test]
fn attributes_come_with_the_view_change_by_batch_and_leave_with_the_shard() {
    let full = FullView {
        homed: homed(&[(0, 0), (1, 0), (2, 1)]),
        attributes: attributed(&[(0, &[("tenant", "acme"), ("tier", "gold")]), (2, &[("tenant", "globex")])]),
        ..empty(&["a", "b"])
    };
    let mut kept = KeptView::load_named(full.clone()).unwrap();
    let checksum = kept.checksum();
    let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    assert_eq!(attributes_of(&kept, 0), pairs(&[("tenant", "acme"), ("tier", "gold")]));
    assert_eq!(attributes_of(&kept, 1), pairs(&[]));
    assert_eq!(kept.allocations().attribute(kept.allocations().get(2).unwrap(), "tenant").as_deref(), Some("globex"));
    // A batch replaces a shard's attributes whole; no pairs clears them;
    // a shard new to the view brings its own; attributes are not part of the checksum.
    let changes = Changes {
        homed: homed(&[(5, 1)]),
        attributes: attributed(&[(0, &[("tenant", "initech")]), (2, &[]), (5, &[("tenant", "hooli")])]),
        ..batch(8)
    };
    assert_eq!(kept.apply(changes).unwrap(), kept.checksum());
    assert_eq!(attributes_of(&kept, 0), pairs(&[("tenant", "initech")]));
    assert_eq!(attributes_of(&kept, 2), pairs(&[]));
    assert_eq!(attributes_of(&kept, 5), pairs(&[("tenant", "hooli")]));
    let without_new = KeptView::load_named(FullView { attributes: Attributed::default(), ..full }).unwrap();
    assert_eq!(without_new.checksum(), checksum, "attributes do not change the checksum");
    // A retired shard's handle comes back without them.
    kept.apply(Changes { retired: vec![5], ..batch(9) }).unwrap();
    kept.apply(Changes { homed: homed(&[(5, 0)]), ..batch(10) }).unwrap();
    assert_eq!(attributes_of(&kept, 5), pairs(&[]));
    // Merged batches read the same as the batches one by one.
    let mut merged = attributed(&[(0, &[("a", "1")])]);
    merged.extend(&attributed(&[(1, &[("b", "2"), ("c", "3")])]));
    assert_eq!(merged, attributed(&[(0, &[("a", "1")]), (1, &[("b", "2"), ("c", "3")])]));
}

#[test]
fn bad_attribute_columns_are_refused_by_name() {
    let good = attributed(&[(0, &[("tenant", "acme")])]);
    let cases = [
        (Attributed { counts: vec![], ..good.clone() }, "1 attributed shards with 0 counts"),
        (Attributed { counts: vec![2], ..good.clone() }, "2 attribute pairs with 2 ends"),
        (Attributed { ends: vec![6, 99], ..good.clone() }, "attribute end 1 is at byte 99"),
        (Attributed { ends: vec![7, 6], ..good.clone() }, "attribute end 1 is at byte 6: not after 7"),
        (Attributed { shards: vec![9], ..good.clone() }, "9"),
        (
            attributed(&[(0, &[("tier", "gold"), ("tenant", "acme")])]),
            r#"the attributes of shard 0 are not sorted by key, keys unique: "tenant""#,
        ),
        (attributed(&[(0, &[("tenant", "a"), ("tenant", "b")])]), "not sorted by key, keys unique"),
    ];
    for (bad, expected) in cases {
        let full = FullView { homed: homed(&[(0, 0)]), attributes: bad.clone(), ..empty(&["a"]) };
        let error = KeptView::load_named(full).unwrap_err();
        assert!(error.contains(expected), "{bad:?}: {error}");
    }
}
