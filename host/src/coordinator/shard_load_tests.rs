//! Load reports step by step (`shard_load.rs`): averages of their own for
//! the named shards, one rest share per region, what the shard table, the
//! store and the hottest list see of both.

use super::state::ShardLoad;
use super::tests::{ack, get, home_set, least_shard, rebalance_now, register, settle, stopped};
use super::*;

fn load(now: Millis, region: &str, incarnation: u64, window_ms: Millis, shards: &[(&str, f64)], rest: f64) -> Event {
    let shards = shards.iter().map(|(s, l)| shardalloc_proto::protocol::ShardLoad { shard: (*s).into(), load: *l });
    let report = shardalloc_proto::protocol::LoadReport { window_ms, shards: shards.collect(), rest };
    Event::Load { now, address: region.into(), incarnation, report }
}

/// The loads each `LoadsSaved` in `out`'s persists saved.
fn saves(out: &[Command]) -> Vec<Vec<(String, Option<ShardLoad>)>> {
    out.iter()
        .filter_map(|c| match c {
            Command::Persist { changes, .. } => Some(changes),
            _ => None,
        })
        .flatten()
        .filter_map(|change| match change {
            Change::LoadsSaved { loads } => Some(loads.clone()),
            _ => None,
        })
        .collect()
}

/// Asserts every shard's current load and last move.
#[track_caller]
fn assert_loads(c: &Coordinator, expected: &[(&str, f64, Option<Millis>)], why: &str) {
    let loads: Vec<(String, f64, Option<Millis>)> =
        c.loads().into_iter().map(|(s, l)| (s, l.load, l.moved_at)).collect();
    let expected: Vec<(String, f64, Option<Millis>)> =
        expected.iter().map(|(s, l, m)| ((*s).to_owned(), *l, *m)).collect();
    assert_eq!(loads, expected, "{why}");
}

/// Regions a (s, t, u) and b, with a half-life of 1 s (a report over 1 s
/// keeps half of what was), no rebalance round of its own and regions
/// that need no heartbeat to stay.
fn loaded_regions() -> Coordinator {
    let config = Config {
        load_half_life_ms: 1_000,
        load_save_interval_ms: 30_000,
        rebalance_interval_ms: u64::MAX,
        unreachable_after_ms: 1 << 40,
        remove_after_ms: 1 << 40,
        ..Config::default()
    };
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    for shard in ["s", "t", "u"] {
        settle(&mut c, get(1, "a", shard));
    }
    settle(&mut c, register(3, "b", 1));
    c
}

#[test]
fn reports_are_smoothed_per_shard_and_the_rest_is_spread_over_the_unnamed_shards() {
    let mut c = loaded_regions();
    assert_eq!(
        settle(&mut c, load(10, "a", 1, 1_000, &[("s", 10.0)], 4.0)),
        [Command::Observe(Observation::RegionLoad { address: "a".into(), load: 14.0 })],
        "nothing persisted per report: only a sample for the event stream"
    );
    assert_loads(&c, &[("s", 10.0, None), ("t", 2.0, None), ("u", 2.0, None)], "first reports as they are");
    assert_eq!((c.region_load("a"), c.region_load("b")), (Some(14.0), None), "b never reported");
    settle(&mut c, load(1_010, "a", 1, 1_000, &[("s", 20.0), ("t", 6.0)], 0.0));
    assert_loads(&c, &[("s", 15.0, None), ("t", 4.0, None), ("u", 1.0, None)], "half of each");
    settle(&mut c, load(3_010, "a", 1, 2_000, &[("s", 15.0)], 0.0));
    assert_loads(&c, &[("s", 15.0, None), ("t", 1.0, None), ("u", 0.25, None)], "two half-lives");
    // b names a's shard: it moved during b's window, or b is wrong.
    settle(&mut c, load(3_020, "b", 1, 1_000, &[("s", 1_000.0)], 0.0));
    assert_eq!(c.loads()["s"].load, 15.0);
    // b holds no shard: its load is zero, not negative zero (an empty sum
    // of floats is -0.0, which REST and the events would show as "-0.0").
    let b = c.region_load("b").unwrap();
    assert!(b == 0.0 && b.is_sign_positive(), "{b:?}");
}

#[test]
fn reports_of_a_fenced_incarnation_or_outside_the_bounds_are_ignored_with_the_reason() {
    let mut c = loaded_regions();
    let ignored = |what: &str| [Command::Observe(Observation::Ignored { what: what.into() })];
    assert_eq!(
        c.handle(load(10, "a", 2, 1_000, &[("s", 1.0)], 0.0)),
        ignored("Load from a: incarnation 2 is not the registered 1")
    );
    assert_eq!(
        c.handle(load(10, "a", 1, 499, &[("s", 1.0)], 0.0)),
        ignored("Load from a: a window of 499 ms is shorter than 500 ms")
    );
    assert_eq!(
        c.handle(load(10, "a", 1, 60_001, &[("s", 1.0)], 0.0)),
        ignored("Load from a: a window of 60001 ms is longer than 60000 ms: the loads are too old")
    );
    assert_eq!(
        c.handle(load(10, "a", 1, 1_000, &[("s", f64::NAN)], 0.0)),
        ignored("Load from a: shard \"s\" has load NaN; a load is finite and not negative")
    );
    assert_eq!(c.handle(load(10, "z", 1, 1_000, &[], 1.0)), ignored("Load from z: not registered"));
    assert!(c.loads().is_empty());
}

#[test]
fn a_shards_load_follows_it_through_a_hand_off_and_the_move_is_timed() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 8.0)], 0.0));
    settle(&mut c, rebalance_now(20, &["s"]));
    c.handle(ack(21, "a", "s"));
    c.handle(ack(22, "b", "s"));
    settle(&mut c, stopped(23, "a", "s"));
    assert_eq!(&*c.home("s").unwrap().region, "b");
    assert_eq!(c.loads()["s"], ShardLoad { load: 8.0, moved_at: Some(23) });
    // b's reports go on from a's average.
    settle(&mut c, load(1_023, "b", 1, 1_000, &[("s", 4.0)], 0.0));
    assert_eq!(c.loads()["s"], ShardLoad { load: 6.0, moved_at: Some(23) });
}

#[test]
fn loads_are_saved_in_one_batch_per_interval_and_recovered_into_the_strategys_view() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 8.0), ("t", 2.0)], 0.0));
    // The coordinator was made at 0: the first save is due at 30 s.
    assert_eq!(saves(&settle(&mut c, Event::Tick { now: 29_999 })), Vec::<Vec<_>>::new());
    // The durable state changes only by a persisted change: until the save,
    // the loads are current in the coordinator and absent from it.
    assert!(c.durable().loads.is_empty() && c.loads().len() == 2, "{:?}", c.durable().loads);
    let at = |load| Some(ShardLoad { load, moved_at: None });
    assert_eq!(
        saves(&settle(&mut c, Event::Tick { now: 30_000 })),
        [vec![("s".to_owned(), at(8.0)), ("t".to_owned(), at(2.0))]],
        "u carries nothing: never stored"
    );
    assert_eq!(c.durable().loads, c.loads(), "saved: the durable state holds what was persisted");
    assert_eq!(saves(&settle(&mut c, Event::Tick { now: 30_100 })), Vec::<Vec<_>>::new(), "nothing changed");
    settle(&mut c, load(30_200, "a", 1, 1_000, &[("s", 8.0), ("t", 0.0)], 0.0));
    assert_eq!(saves(&settle(&mut c, Event::Tick { now: 59_999 })), Vec::<Vec<_>>::new(), "not yet due");
    assert_eq!(saves(&settle(&mut c, Event::Tick { now: 60_000 })), [vec![("t".to_owned(), at(1.0))]]);

    // A coordinator recovered from the saved state shows the loads to strategies.
    let mut durable = Durable::default();
    for change in c.durable().regions.values().cloned().map(Change::RegionRegistered) {
        durable.apply(&change);
    }
    durable.apply(&home_set("s", "a", 1, 1));
    durable.apply(&Change::LoadsSaved { loads: vec![("s".into(), at(8.0)), ("gone".into(), None)] });
    let (mut recovered, _) = Coordinator::recover(c.config().clone(), least_shard(), durable, 70_000).unwrap();
    let view = recovered.view();
    let table = view.table().expect("a coordinator's view carries its table");
    let handle = table.handle("s").unwrap();
    assert_eq!(table.allocations().load(table.allocations().get(handle).unwrap()), 8.0);
    let generation = table.generation();
    drop(view);
    // A load that changes reaches the kept table in one batch at the next view.
    settle(&mut recovered, load(71_000, "a", 1, 1_000, &[("s", 4.0)], 0.0));
    let view = recovered.view();
    let table = view.table().unwrap();
    assert_eq!(table.generation(), generation + 1);
    assert_eq!(table.allocations().load(table.allocations().get(handle).unwrap()), 6.0);
    drop(view);
    assert_eq!(recovered.table_differs(), None);
}

#[test]
fn the_hottest_shards_come_most_loaded_first_in_pages() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 5.0), ("t", 9.0), ("u", 5.0)], 0.0));
    let names = |page: Vec<(String, ShardLoad)>| page.into_iter().map(|(s, l)| (s, l.load)).collect::<Vec<_>>();
    let all = names(c.hottest(None, 10));
    assert_eq!(all, [("t".into(), 9.0), ("u".into(), 5.0), ("s".into(), 5.0)]);
    assert_eq!(names(c.hottest(None, 2)), all[..2]);
    assert_eq!(names(c.hottest(Some((5.0, "u")), 2)), all[2..], "the next page starts after the cursor");
    // A shard whose load falls leaves its old rank.
    settle(&mut c, load(1_010, "a", 1, 1_000, &[("t", 1.0)], 0.0));
    assert_eq!(names(c.hottest(None, 1)), [("t".to_owned(), 5.0)]);
    assert_eq!(c.hottest(None, 10).len(), 3);
}

#[test]
fn a_regions_load_is_sampled_at_most_once_in_ten_seconds() {
    let mut c = loaded_regions();
    let sample = |out: &[Command]| {
        out.iter().find_map(|c| match c {
            Command::Observe(Observation::RegionLoad { address, load }) => Some((address.clone(), *load)),
            _ => None,
        })
    };
    assert_eq!(sample(&settle(&mut c, load(10, "a", 1, 1_000, &[("s", 8.0)], 0.0))), Some(("a".into(), 8.0)));
    assert_eq!(sample(&settle(&mut c, load(5_000, "a", 1, 1_000, &[("s", 8.0)], 0.0))), None);
    assert_eq!(sample(&settle(&mut c, load(6_000, "b", 1, 1_000, &[], 0.0))), Some(("b".into(), 0.0)), "per region");
    assert_eq!(sample(&settle(&mut c, load(10_010, "a", 1, 1_000, &[("s", 8.0)], 0.0))), Some(("a".into(), 8.0)));
}

/// Region a alone, holding `shards` shards x0, x1, …, with the loads'
/// settings of [`loaded_regions`]; its table built at 5.
fn one_big_region(shards: usize) -> Coordinator {
    let config = Config {
        load_half_life_ms: 1_000,
        rebalance_interval_ms: u64::MAX,
        unreachable_after_ms: 1 << 40,
        remove_after_ms: 1 << 40,
        max_shards: 1 << 20,
        ..Config::default()
    };
    let mut c = Coordinator::new(config, least_shard()).unwrap();
    settle(&mut c, register(0, "a", 1));
    for i in 0..shards {
        settle(&mut c, get(1, "a", &format!("x{i}")));
    }
    c.handle(Event::Tick { now: 5 });
    drop(c.allocation_view());
    c
}

/// The load of `shard` the shard table shows strategies.
fn table_load(c: &mut Coordinator, shard: &str) -> f64 {
    let view = c.allocation_view();
    let table = view.table().expect("a coordinator's view carries its table");
    let entry = table.allocations().get(table.handle(shard).expect("in the view")).expect("in the view");
    table.allocations().load(entry)
}

#[test]
fn a_report_costs_the_shards_it_names_not_every_shard_the_region_holds() {
    let mut c = one_big_region(5_000);
    settle(&mut c, load(10, "a", 1, 1_000, &[("x0", 10.0), ("x1", 20.0)], 624.75));
    // One average of its own per named shard, one share for the 4,998 others.
    assert_eq!(c.loads.current.len(), 2, "only the named shards have an entry");
    assert_eq!((c.loads.unsaved.len(), c.loads.unseen.len()), (2, 2), "only the named shards are to save and show");
    assert_eq!(c.load_of("x2").load, 0.125, "the rest spread over the shards not named");
    assert_eq!(c.load_of("x4999").load, 0.125);
    assert_eq!(c.region_load("a"), Some(10.0 + 20.0 + 624.75));
    assert_eq!(c.loads().len(), 5_000, "every shard carries a load");
    // Strategies see the named shards at the next view, the share within a second.
    assert_eq!((table_load(&mut c, "x0"), table_load(&mut c, "x2")), (10.0, 0.0));
    c.handle(Event::Tick { now: 1_005 });
    assert_eq!((table_load(&mut c, "x0"), table_load(&mut c, "x2")), (10.0, 0.125), "folded a second after the last");
    // A second report: x0 falls to the share's side, x2 gets its own.
    settle(&mut c, load(1_010, "a", 1, 1_000, &[("x2", 4.125)], 1_000.0));
    assert_eq!(c.loads.current.len(), 3);
    assert_eq!(c.load_of("x2").load, 2.125, "half its share, half its rate");
    assert_eq!(c.load_of("x1").load, 0.5 * 20.0 + 0.5 * (1_000.0 / 4_999.0));
    assert_eq!(c.load_of("x3").load, 0.5 * 0.125 + 0.5 * (1_000.0 / 4_999.0));
    // A whole view folds at once; the kept table matches one built afresh.
    let view = c.view();
    let table = view.table().unwrap();
    let x3 = table.allocations().get(table.handle("x3").unwrap()).unwrap();
    assert_eq!(table.allocations().load(x3), 0.5 * 0.125 + 0.5 * (1_000.0 / 4_999.0));
    drop(view);
    assert_eq!(c.table_differs(), None);
}

#[test]
fn a_region_keeps_averages_of_its_own_for_the_shards_it_named_lately_at_most() {
    let mut c = one_big_region(6_000);
    // Five reports, each naming 1,024 other shards.
    for round in 0..5 {
        let names: Vec<String> = (0..1_024).map(|i| format!("x{}", round * 1_024 + i)).collect();
        let named: Vec<(&str, f64)> = names.iter().map(|s| (s.as_str(), 8.0)).collect();
        settle(&mut c, load(10 + round as u64 * 1_000, "a", 1, 1_000, &named, 0.0));
    }
    let own = &c.loads.shares["a"].own;
    assert_eq!(own.len(), shard_load::OWN_LOADS_PER_REGION);
    assert!(!own.contains_key("x0") && !own.contains_key("x1023"), "the first report's are dropped first");
    assert!(own.contains_key("x1024") && own.contains_key("x5119"));
    assert_eq!(c.load_of("x0").load, 0.0, "a dropped shard carries the share");
    assert_eq!(c.load_of("x5119").load, 8.0);
    assert_eq!(c.loads.current.len(), shard_load::OWN_LOADS_PER_REGION, "the dropped entries are gone");
    assert!(c.loads.unsaved.contains("x0"), "and saved as gone");
    assert_eq!(c.table_differs(), None);
}

#[test]
fn an_average_that_reached_the_share_is_dropped_and_saved_as_gone() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 4.0)], 2.0));
    assert_loads(&c, &[("s", 4.0, None), ("t", 1.0, None), ("u", 1.0, None)], "t and u share the rest");
    let mut now = 10;
    // s goes half the way to the share at every report; 12 half-lives
    // bring it within a thousandth.
    for _ in 0..11 {
        now += 1_000;
        settle(&mut c, load(now, "a", 1, 1_000, &[], 3.0));
    }
    assert!(c.loads.shares["a"].own.contains_key("s"), "{} is not within a thousandth yet", c.load_of("s").load);
    settle(&mut c, load(now + 1_000, "a", 1, 1_000, &[], 3.0));
    assert!(c.loads.shares["a"].own.is_empty());
    assert_loads(&c, &[("s", 1.0, None), ("t", 1.0, None), ("u", 1.0, None)], "s carries the share");
    let saved = saves(&settle(&mut c, Event::Tick { now: 30_000 }));
    assert_eq!(saved, [vec![("s".to_owned(), None)]], "shares are not stored: a new leader hears them again");
}

#[test]
fn a_shard_carrying_the_share_takes_it_along_when_it_moves() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 8.0)], 6.0));
    assert_eq!(c.load_of("u").load, 3.0);
    settle(&mut c, rebalance_now(20, &["u"]));
    c.handle(ack(21, "a", "u"));
    c.handle(ack(22, "b", "u"));
    settle(&mut c, stopped(23, "a", "u"));
    assert_eq!(&*c.home("u").unwrap().region, "b");
    assert_eq!(c.load_of("u"), ShardLoad { load: 3.0, moved_at: Some(23) }, "the share became its own");
    assert_eq!(c.load_of("t").load, 3.0, "the others keep the share until a's next report");
    // b's rest goes to u from its own average; a's is now t's alone.
    settle(&mut c, load(1_023, "b", 1, 1_000, &[], 1.0));
    settle(&mut c, load(1_023, "a", 1, 1_000, &[("s", 8.0)], 1.0));
    assert_eq!((c.load_of("u").load, c.load_of("t").load), (2.0, 2.0));
    assert_eq!((c.region_load("a"), c.region_load("b")), (Some(10.0), Some(2.0)));
    assert_eq!(c.table_differs(), None);
    // A restarted region starts its share again; its shards keep theirs.
    settle(&mut c, register(2_000, "a", 2));
    assert!(c.loads.shares.get("a").is_none_or(|a| a.share == 0.0 && a.reports == 0));
    assert_eq!(c.load_of("t").load, 2.0, "t's share became its own as it lost its home");
}

#[test]
fn shards_carrying_a_share_are_listed_among_the_hottest_in_order() {
    let mut c = loaded_regions();
    settle(&mut c, load(10, "a", 1, 1_000, &[("s", 5.0)], 6.0));
    let names = |page: Vec<(String, ShardLoad)>| page.into_iter().map(|(s, l)| (s, l.load)).collect::<Vec<_>>();
    let all = names(c.hottest(None, 10));
    assert_eq!(all, [("s".into(), 5.0), ("u".into(), 3.0), ("t".into(), 3.0)]);
    assert_eq!(names(c.hottest(None, 2)), all[..2]);
    assert_eq!(names(c.hottest(Some((3.0, "u")), 2)), all[2..], "the next page starts after the cursor");
    assert_eq!(names(c.hottest(Some((3.0, "t")), 2)), []);
    // A share above an average of its own comes first.
    settle(&mut c, load(1_010, "a", 1, 1_000, &[("s", 1.0)], 20.0));
    assert_eq!(names(c.hottest(None, 10)), [("u".into(), 6.5), ("t".into(), 6.5), ("s".into(), 3.0)]);
    assert_eq!(names(c.hottest(None, 1)), [("u".into(), 6.5)]);
}
