//! The shard table: the literal batches each change makes, handles given
//! back and reused, the journal's reach, and random histories after which a
//! component's copy (kept from the journal or loaded whole) matches the
//! table.

use std::sync::Arc;

use proptest::prelude::*;
use shardalloc_guest::kept::{Changes, Homed, KeptView, ShardNames, view_checksum};
use shardalloc_guest::{Region, RegionId, Topology, shard_hash};

use super::*;
use crate::strategy::coalesce::coalesce;

fn topology(addresses: &[&str]) -> Arc<Topology> {
    let regions = addresses.iter().map(|a| Region { address: (*a).to_owned(), ..Region::default() }).collect();
    Arc::new(Topology::new(regions, Vec::new(), None))
}

fn table(addresses: &[&str]) -> ShardTable {
    ShardTable::new(&topology(addresses), Vec::new())
}

fn homed(entries: &[(u32, &str, u32, u64)]) -> Homed {
    let mut homed = Homed::default();
    for (handle, shard, region, since) in entries {
        homed.push(*handle, shard_hash(shard), *region, *since);
    }
    homed
}

fn named(entries: &[(u32, &str)]) -> ShardNames {
    let mut named = ShardNames::default();
    for (handle, shard) in entries {
        named.push(*handle, *shard);
    }
    named
}

/// The journal's batches, generations numbered from 1.
fn journal(table: &ShardTable) -> Vec<Changes> {
    table.batches_since(0).expect("the whole journal").cloned().collect()
}

fn same(a: &Changes, b: &Changes) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

#[test]
fn each_change_is_one_literal_batch() {
    let mut t = table(&["a", "b"]);
    t.home("s1", "a", 10).unwrap();
    t.home("s2", "a", 20).unwrap();
    t.set_moving("s1", true);
    t.unhome("s1");
    t.home("s1", "b", 30).unwrap();
    t.set_moving("s1", false);
    t.set_pinned("s2", true);
    t.unhome("s2");
    // A shard new to the view comes with its id; one already in it, not.
    let want = [
        Changes { generation: 1, homed: homed(&[(0, "s1", 0, 10)]), named: named(&[(0, "s1")]), ..Changes::default() },
        Changes { generation: 2, homed: homed(&[(1, "s2", 0, 20)]), named: named(&[(1, "s2")]), ..Changes::default() },
        Changes { generation: 3, moving: vec![0], ..Changes::default() },
        Changes { generation: 4, unhomed: vec![0], ..Changes::default() },
        Changes { generation: 5, homed: homed(&[(0, "s1", 1, 30)]), ..Changes::default() },
        Changes { generation: 6, settled: vec![0], ..Changes::default() },
        Changes { generation: 7, pinned: vec![1], ..Changes::default() },
        Changes { generation: 8, retired: vec![1], ..Changes::default() },
    ];
    let got = journal(&t);
    assert_eq!(got.len(), want.len());
    for (got, want) in got.iter().zip(&want) {
        assert!(same(got, want), "got {got:?}\nwant {want:?}");
    }
    assert_eq!(t.handle("s2"), None, "a shard without home or hand-off leaves the view");
    t.home("s3", "a", 0).unwrap();
    assert_eq!(t.handle("s3"), Some(1), "its handle is given to the next shard");
    assert_eq!(t.shard_id(1), Some("s3"));
}

#[test]
fn a_shard_being_allocated_is_named_by_a_handle_no_view_holds() {
    let mut t = table(&["a"]);
    t.home("x", "a", 0).unwrap();
    let handle = t.allocation_handle("s");
    assert_eq!(t.allocations().get(handle), None, "not in the view");
    t.home("s", "a", 0).unwrap();
    assert_eq!(t.handle("s"), Some(handle), "the next new shard gets it");
    assert_eq!(t.allocation_handle("s"), handle, "a shard in the view keeps its own");
    assert_eq!(t.shard_id(handle), Some("s"));
    assert_eq!(
        t.home("y", "nowhere", 0),
        Err(TableError::UnknownRegion { shard: "y".into(), region: "nowhere".into() })
    );
}

#[test]
fn hand_offs_merge_into_one_batch_and_changes_out_of_field_order_do_not() {
    let mut t = table(&["a", "b"]);
    for shard in ["s1", "s2", "s3"] {
        t.home(shard, "a", 0).unwrap();
    }
    let start = t.generation();
    for shard in ["s1", "s2"] {
        t.set_moving(shard, true);
        t.unhome(shard);
        t.home(shard, "b", 0).unwrap();
        t.set_moving(shard, false);
    }
    let merged = coalesce(t.batches_since(start).unwrap());
    assert_eq!(merged.len(), 1, "{merged:?}");
    let (s1, s2) = (t.handle("s1").unwrap(), t.handle("s2").unwrap());
    let one = &merged[0];
    assert_eq!(
        (one.generation, &one.unhomed, &one.moving, &one.settled),
        (t.generation(), &vec![s1, s2], &vec![s1, s2], &vec![s1, s2])
    );
    assert_eq!((&one.homed.shards, &one.homed.regions), (&vec![s1, s2], &vec![1, 1]));
    // Homed, then retired: applied in field order the retirement would
    // come first, so the two stay apart.
    let start = t.generation();
    t.home("s4", "a", 0).unwrap();
    t.unhome("s4");
    assert_eq!(coalesce(t.batches_since(start).unwrap()).len(), 2);
    // A new topology stands alone: region indexes change with it.
    let start = t.generation();
    t.home("s5", "a", 0).unwrap();
    t.set_topology(&topology(&["b", "a"]), &[], &[]);
    t.home("s6", "a", 0).unwrap();
    t.home("s7", "b", 0).unwrap();
    let merged = coalesce(t.batches_since(start).unwrap());
    assert_eq!(merged.iter().map(|b| b.topology.is_some()).collect::<Vec<_>>(), [false, true, false]);
}

#[test]
fn the_journal_reaches_back_a_bounded_number_of_batches() {
    let mut t = table(&["a", "b"]);
    t.home("s", "a", 0).unwrap();
    assert_eq!(t.batches_since(0).map(|b| b.count()), Some(1));
    assert_eq!(t.batches_since(1).map(|b| b.count()), Some(0));
    assert!(t.batches_since(2).is_none(), "a generation the table has not reached");
    for i in 0..MAX_JOURNAL_BATCHES {
        t.home("s", if i % 2 == 0 { "b" } else { "a" }, 0).unwrap();
    }
    assert!(t.batches_since(0).is_none(), "too far behind: load the whole view");
    assert_eq!(t.batches_since(1).map(|b| b.count()), Some(MAX_JOURNAL_BATCHES));
}

#[test]
fn a_new_topology_is_one_batch_and_unhomes_what_a_gone_region_held() {
    let mut t = table(&["a", "b"]);
    t.home("s", "b", 0).unwrap();
    t.set_moving("s", true);
    let before = t.generation();
    t.set_topology(&topology(&["a", "b"]), &[], &[]);
    assert_eq!(t.generation(), before, "the same regions are no change");
    t.set_topology(&topology(&["a", "c"]), &[], &[]);
    let last = journal(&t).pop().unwrap();
    assert_eq!(last.unhomed, [0]);
    assert_eq!(last.topology.as_ref().map(|t| t.regions().len()), Some(2));
    t.home("s", "c", 0).unwrap();
    assert_eq!(t.allocations().home(t.allocations().get(0).unwrap()), Some(RegionId(1)));
}

/// One step of a coordinator's history.
#[derive(Clone, Debug)]
enum Step {
    Home { shard: u8, region: u8 },
    Unhome { shard: u8 },
    Moving { shard: u8, on: bool },
    Pin { shard: u8, on: bool },
    Allocating { shard: u8 },
    Regions { mask: u8 },
    Sync,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0u8..40, 0u8..5).prop_map(|(shard, region)| Step::Home { shard, region }),
        2 => (0u8..40).prop_map(|shard| Step::Unhome { shard }),
        2 => (0u8..40, any::<bool>()).prop_map(|(shard, on)| Step::Moving { shard, on }),
        2 => (0u8..40, any::<bool>()).prop_map(|(shard, on)| Step::Pin { shard, on }),
        1 => (0u8..40).prop_map(|shard| Step::Allocating { shard }),
        1 => (1u8..32).prop_map(|mask| Step::Regions { mask }),
        2 => Just(Step::Sync),
    ]
}

const ADDRESSES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// A component's copy, with the table's generation it holds: kept from the
/// journal (batch by batch, or merged as the engine sends them), or loaded
/// whole when the journal no longer reaches it.
fn sync(copy: &mut Option<(KeptView, u64)>, t: &ShardTable, merged: bool) -> Result<(), TestCaseError> {
    let batches = copy.as_ref().and_then(|(_, at)| t.batches_since(*at));
    match (copy.as_mut(), batches) {
        (Some((kept, _)), Some(batches)) if merged => {
            for mut batch in coalesce(batches) {
                batch.generation = kept.generation() + 1;
                kept.apply(batch).map_err(TestCaseError::fail)?;
            }
        }
        (Some((kept, _)), Some(batches)) => {
            for batch in batches {
                kept.apply(batch.clone()).map_err(TestCaseError::fail)?;
            }
        }
        _ => *copy = Some((KeptView::load_named(t.full_view(true)).map_err(TestCaseError::fail)?, 0)),
    }
    let (kept, at) = copy.as_mut().expect("synced");
    *at = t.generation();
    let kept = &*kept;
    prop_assert_eq!(kept.checksum(), t.checksum());
    prop_assert_eq!(kept.checksum(), view_checksum(kept.allocations()));
    prop_assert_eq!(kept.view().shard_counts(), t.view().shard_counts());
    for region in t.view().region_ids() {
        let a: Vec<u32> = kept.allocations().region_shards(region).map(|s| s.handle).collect();
        let b: Vec<u32> = t.allocations().region_shards(region).map(|s| s.handle).collect();
        prop_assert_eq!(a, b);
    }
    // Each shard's id came with the batch that brought it (or the whole
    // view), and its time with its home.
    let (mine, theirs) = (kept.allocations(), t.allocations());
    for shard in theirs.allocated().chain(theirs.in_progress()) {
        let copied = mine.get(shard.handle).expect("the copy holds every shard");
        prop_assert_eq!(mine.shard_id(copied), theirs.shard_id(shard));
        prop_assert_eq!(mine.since(copied), theirs.since(shard));
    }
    let whole = KeptView::load(t.full_view(false)).map_err(TestCaseError::fail)?;
    prop_assert_eq!(whole.checksum(), t.checksum());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_components_copy_follows_the_table(steps in prop::collection::vec(step(), 1..150)) {
        let mut t = table(&ADDRESSES);
        let mut regions: Vec<&str> = ADDRESSES.to_vec();
        let mut copy: Option<(KeptView, u64)> = None;
        let mut merged: Option<(KeptView, u64)> = None;
        for step in steps.iter().chain([Step::Sync].iter()) {
            match *step {
                Step::Home { shard, region } => {
                    let address = ADDRESSES[region as usize];
                    let result = t.home(&format!("s{shard}"), address, u64::from(shard) * 100 + u64::from(region));
                    prop_assert_eq!(result.is_ok(), regions.contains(&address));
                }
                Step::Unhome { shard } => t.unhome(&format!("s{shard}")),
                Step::Moving { shard, on } => t.set_moving(&format!("s{shard}"), on),
                Step::Pin { shard, on } => t.set_pinned(&format!("s{shard}"), on),
                Step::Allocating { shard } => {
                    let id = format!("s{shard}");
                    let handle = t.allocation_handle(&id);
                    match t.handle(&id) {
                        Some(own) => prop_assert_eq!(handle, own),
                        None => prop_assert!(t.allocations().get(handle).is_none()),
                    }
                }
                Step::Regions { mask } => {
                    regions = ADDRESSES.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, a)| *a).collect();
                    t.set_topology(&topology(&regions), &[], &[]);
                }
                Step::Sync => {
                    sync(&mut copy, &t, false)?;
                    sync(&mut merged, &t, true)?;
                }
            }
            // The index by id holds exactly the view's shards, each found
            // by the id the view names it by.
            prop_assert_eq!(t.handles.len(), t.allocations().len());
            for handle in (0..t.next).filter(|h| t.allocations().get(*h).is_some()) {
                let id = t.allocations().known_id(handle).expect("the host's table knows its ids").to_owned();
                prop_assert_eq!(t.handle(&id), Some(handle), "{}", id);
            }
        }
    }
}
