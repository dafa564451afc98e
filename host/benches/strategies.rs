//! The same built-in called natively and through the engine, on identical
//! inputs, in one run, beside the floor of one crossing (an empty
//! component call); `docs/performance.md` reports the ratios.
//!
//! `cargo bench -p shardalloc --bench strategies`; in smoke mode
//! (`common`), every group at one cluster of 10 regions × 1,000 shards.

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shardalloc::engine::limits::{DEFAULT_MEMORY_LIMIT, Limits};
use shardalloc::engine::slot::{AutoRollback, Slot};
use shardalloc::engine::{Engine, EngineConfig};
use shardalloc::strategy::table::ShardTable;
use shardalloc::strategy::{AllocationStrategy, ClusterView, StrategySource, builtin};
use shardalloc_guest::testing::{Shape, generate};

/// The node's allocator, so that what is measured here is what it does.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The smoke mode's one cluster: (regions, shards).
const TINY: (usize, usize) = (10, 1_000);

fn cluster(regions: usize, shards: usize) -> ClusterView {
    // As the coordinator's views do, the view carries its shard table, so
    // a 0.2 component keeps its copy between calls.
    let view = ClusterView::from_snapshot(&generate(7, &Shape::healthy(regions, shards)).snapshot);
    let table = std::sync::Arc::new(view.built_table().expect("a view with homes"));
    view.with_table(table)
}

/// Benchmarks must not trip the decision deadline on a busy machine.
fn limits() -> Limits {
    Limits { deadline: Duration::from_secs(10), ..Limits::default() }
}

fn engine() -> Arc<Engine> {
    Engine::new(EngineConfig::default()).expect("engine")
}

/// The floor of one crossing into a component, under the engine's own
/// configuration: an export that does nothing (`empty`), and one with the
/// shape a scalar `allocate` would have (a shard handle, its hash and a
/// requester in; a region index out) that answers a constant (`scalar`).
/// Neither touches linear memory, so no `cabi_realloc` and no post-return.
const FLOOR: &str = r#"
(component
  (core module $m
    (func (export "empty"))
    (func (export "scalar") (param i32 i64 i32) (result i64) (i64.const 3)))
  (core instance $i (instantiate $m))
  (func (export "empty") (canon lift (core func $i "empty")))
  (func (export "scalar") (param "shard" u32) (param "hash" u64) (param "requester" s32) (result s64)
    (canon lift (core func $i "scalar")))
)
"#;

/// Measures [`FLOOR`]'s two calls in `group`, each with the epoch
/// deadline set as the engine sets it before every strategy call.
fn crossing_floor(engine: &Engine, group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    use wasmtime::component::{Component, Linker};
    let wasmtime = engine.wasmtime();
    let component = Component::new(wasmtime, wat::parse_str(FLOOR).expect("the floor's text")).expect("compile");
    let mut store = wasmtime::Store::new(wasmtime, ());
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = Linker::new(wasmtime).instantiate(&mut store, &component).expect("instantiate");
    let empty = instance.get_typed_func::<(), ()>(&mut store, "empty").unwrap();
    let scalar = instance.get_typed_func::<(u32, u64, i32), (i64,)>(&mut store, "scalar").unwrap();
    assert_eq!(scalar.call(&mut store, (1, 2, -1)).unwrap(), (3,));
    group.bench_function("floor/empty-call", |b| {
        b.iter(|| {
            store.set_epoch_deadline(u64::MAX / 2);
            empty.call(&mut store, ()).unwrap()
        })
    });
    group.bench_function("floor/scalar-call", |b| {
        b.iter(|| {
            store.set_epoch_deadline(u64::MAX / 2);
            scalar.call(&mut store, black_box((7, 0x9e37_79b9_7f4a_7c15, -1))).unwrap()
        })
    });
}

fn allocate(c: &mut Criterion) {
    let engine = engine();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../contracts/strategy-0.1/least-shard.wasm");
    let fixture_0_1 = engine.compile(&std::fs::read(fixture).unwrap()).unwrap();
    let mut group = c.benchmark_group("allocate");
    group.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    crossing_floor(&engine, &mut group);
    let sizes = common::sized(
        vec![(10, 100_000), (100, 100_000), (1_000, 100_000), (10_000, 100_000), (1_000, 1_000)],
        vec![TINY],
    );
    for (regions, shards) in sizes {
        let view = cluster(regions, shards);
        let label = format!("{regions}r-{shards}s");
        let mut native = builtin::native("least-shard", "").unwrap().unwrap();
        let mut wasm = engine.load_source(&StrategySource::Builtin("least-shard".into()), "", limits(), None).unwrap();
        wasm.allocate(&view, "warm-up", None).unwrap();
        group.bench_with_input(BenchmarkId::new("native", &label), &view, |b, view| {
            b.iter(|| native.allocate(black_box(view), "shard-x", None).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("engine", &label), &view, |b, view| {
            b.iter(|| wasm.allocate(black_box(view), "shard-x", None).unwrap())
        });
        // The committed 0.1 build of least-shard through this host: 0.1
        // components must be no slower than before 0.2 came.
        let mut old = engine.instantiate(&fixture_0_1, "", limits()).unwrap();
        old.allocate(&view, "warm-up", None).unwrap();
        group.bench_with_input(BenchmarkId::new("engine-0.1", &label), &view, |b, view| {
            b.iter(|| old.allocate(black_box(view), "shard-x", None).unwrap())
        });
    }
    group.finish();
}

fn rebalance(c: &mut Criterion) {
    let engine = engine();
    let mut group = c.benchmark_group("rebalance");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for (regions, shards) in common::sized(vec![(100, 10_000), (1_000, 100_000)], vec![TINY]) {
        let view = cluster(regions, shards);
        let label = format!("{regions}r-{shards}s");
        let mut native = builtin::native("least-shard", "").unwrap().unwrap();
        let mut wasm = engine.load_source(&StrategySource::Builtin("least-shard".into()), "", limits(), None).unwrap();
        assert_eq!(native.rebalance(&view).unwrap(), wasm.rebalance(&view).unwrap());
        group.bench_with_input(BenchmarkId::new("native", &label), &view, |b, view| {
            b.iter(|| native.rebalance(black_box(view)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("engine", &label), &view, |b, view| {
            b.iter(|| wasm.rebalance(black_box(view)).unwrap())
        });
    }
    group.finish();
}

fn loading(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    let bytes = builtin::component_bytes("least-shard").unwrap();
    let uncached = Engine::new(EngineConfig { cache_dir: None, ..Default::default() }).unwrap();
    group.bench_function("compile", |b| b.iter(|| uncached.compile(black_box(bytes)).unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let cached = Engine::new(EngineConfig { cache_dir: Some(dir.path().to_owned()), ..Default::default() }).unwrap();
    cached.compile(bytes).unwrap();
    group.bench_function("load-precompiled", |b| b.iter(|| cached.compile(black_box(bytes)).unwrap()));
    let compiled = cached.compile(bytes).unwrap();
    group.bench_function("instantiate", |b| b.iter(|| cached.instantiate(&compiled, "", limits()).unwrap()));
    group.finish();
}

fn swaps(c: &mut Criterion) {
    let engine = engine();
    let mut group = c.benchmark_group("swap");
    group.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    let (regions, shards) = common::sized((100, 10_000), TINY);
    let view = cluster(regions, shards);
    let least = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let hash = engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap();
    let slot = Slot::new("Counter", engine.clone(), AutoRollback::default(), least.clone(), "", limits()).unwrap();
    let mut handle = slot.handle();
    group.bench_function("allocate-no-swaps", |b| b.iter(|| handle.allocate(black_box(&view), "s", None).unwrap()));
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (slot, stop) = (slot.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let next = if n.is_multiple_of(2) { &hash } else { &least };
                slot.activate(next.clone(), "", limits()).unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            n
        })
    };
    group.bench_function("allocate-during-swaps", |b| b.iter(|| handle.allocate(black_box(&view), "s", None).unwrap()));
    stop.store(true, Ordering::Relaxed);
    let swapped = swapper.join().unwrap();
    eprintln!("swaps made during the measurement: {swapped}");
    let compiled = engine.compile_source(&StrategySource::Builtin("hash".into()), None).unwrap();
    group.bench_function("activate", |b| b.iter(|| slot.activate(compiled.clone(), "", limits()).unwrap()));
    group.finish();
}

/// A swap of a strategy that reads every shard's id, at 10,000, 100,000
/// and 1,000,000 shards: a fresh instance configured, the whole view loaded
/// and its first rebalance (where it reads every id), with the ids in bulk
/// (contract 0.3, `needs-shard-ids`) against one host call per id (as 0.2
/// must), beside least-shard (which reads no id) and the same strategy
/// already active (its next rebalance).
fn swap_reading_ids(c: &mut Criterion) {
    let engine = engine();
    let fixture: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let reader = engine.compile(fixture).unwrap();
    let least = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let bulk = r#"{"rebalance":"read-ids","needs_ids":true}"#;
    let one_each = r#"{"rebalance":"read-ids"}"#;
    // Measured, not refused: no call budget, room for a million ids.
    let roomy = Limits { deadline: Duration::from_secs(600), view_load: Duration::from_secs(600), memory: 512 << 20 };
    let mut group = c.benchmark_group("swap-reading-ids");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_millis(100));
    for shards in common::sized(vec![10_000usize, 100_000, 1_000_000], vec![200, 2_000]) {
        let view = cluster(100.min(shards / 10), shards);
        let label = format!("{shards}s");
        let mut swap = |name: &str, compiled: &Arc<shardalloc::engine::component::Compiled>, config: &str| {
            group.bench_with_input(BenchmarkId::new(name, &label), &view, |b, view| {
                b.iter(|| {
                    let mut fresh = engine.instantiate(compiled, config, roomy).unwrap();
                    fresh.rebalance(black_box(view)).unwrap()
                })
            });
        };
        swap("least-shard", &least, "");
        swap("ids-in-bulk", &reader, bulk);
        swap("ids-one-call-each", &reader, one_each);
        let mut active = engine.instantiate(&reader, bulk, roomy).unwrap();
        active.rebalance(&view).unwrap();
        group.bench_with_input(BenchmarkId::new("already-active", &label), &view, |b, view| {
            b.iter(|| active.rebalance(black_box(view)).unwrap())
        });
    }
    group.finish();
}

/// A swap (a fresh instance and its first rebalance) of a strategy that
/// reads every shard's attributes (two each: `tenant`, `tier`), at 10,000,
/// 100,000 and 1,000,000 shards: with the attributes in bulk with the view
/// (`needs_attributes`) and with one host call per shard, beside the same
/// strategy already active (its next rebalance, reading its copy). Within
/// the node's default memory limit; the view-load budget is lifted, so a
/// swap slower than its default (2 s) is measured rather than refused.
fn swap_reading_attributes(c: &mut Criterion) {
    let engine = engine();
    let fixture: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let reader = engine.compile(fixture).unwrap();
    let bulk = r#"{"rebalance":"read-attributes","needs_attributes":true}"#;
    let one_each = r#"{"rebalance":"read-attributes"}"#;
    let roomy = Limits {
        deadline: Duration::from_secs(600),
        view_load: Duration::from_secs(600),
        memory: DEFAULT_MEMORY_LIMIT,
    };
    let mut group = c.benchmark_group("swap-reading-attributes");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_millis(100));
    for shards in common::sized(vec![10_000usize, 100_000, 1_000_000], vec![200, 2_000]) {
        let view = attributed_cluster(100.min(shards / 10), shards);
        let label = format!("{shards}s");
        for (name, config) in [("attributes-in-bulk", bulk), ("attributes-one-call-each", one_each)] {
            group.bench_with_input(BenchmarkId::new(name, &label), &view, |b, view| {
                b.iter(|| {
                    let mut fresh = engine.instantiate(&reader, config, roomy).unwrap();
                    fresh.rebalance(black_box(view)).unwrap()
                })
            });
        }
        let mut active = engine.instantiate(&reader, bulk, roomy).unwrap();
        active.rebalance(&view).unwrap();
        group.bench_with_input(BenchmarkId::new("already-active", &label), &view, |b, view| {
            b.iter(|| active.rebalance(black_box(view)).unwrap())
        });
    }
    group.finish();
}

/// [`cluster`] with every shard carrying two attributes in its table.
fn attributed_cluster(regions: usize, shards: usize) -> ClusterView {
    let view = ClusterView::from_snapshot(&generate(7, &Shape::healthy(regions, shards)).snapshot);
    let homes = view
        .homes()
        .iter()
        .enumerate()
        .flat_map(|(region, shards)| shards.iter().map(move |shard| (shard.as_str(), region as u32, 0)));
    let attributes = view.homes().iter().flatten().enumerate().map(|(i, shard)| {
        let tenant = format!("tenant-{}", i % 1_000);
        (shard.as_str(), shardalloc_guest::Attributes::new([("tenant", tenant.as_str()), ("tier", "gold")]))
    });
    let table = ShardTable::build(view.topology(), view.metrics().to_vec(), homes, [], [], [], attributes);
    view.with_table(Arc::new(table))
}

/// Not a timing by criterion: the first call after a swap against a steady
/// call, for two built-ins.
fn first_calls(_: &mut Criterion) {
    let engine = engine();
    let compiled: Vec<_> = ["least-shard", "hash"]
        .into_iter()
        .map(|name| (name, engine.compile_source(&StrategySource::Builtin(name.into()), None).unwrap()))
        .collect();
    let (regions, shards) = common::sized((100, 10_000), TINY);
    common::first_call::print_first_calls(&engine, &compiled, &cluster(regions, shards), limits());
}

/// The heap bytes this process holds live, by jemalloc's count (the node's
/// allocator, this benchmark's too). Not the resident set: memory an
/// earlier group freed and the allocator kept is reused by the next, which
/// hid most of a table from the resident set's difference.
fn live_heap_bytes() -> usize {
    tikv_jemalloc_ctl::epoch::advance().expect("advance jemalloc's statistics");
    tikv_jemalloc_ctl::stats::allocated::read().expect("jemalloc's allocated bytes")
}

/// A table of `regions` × `shards` built in one pass, as a coordinator's
/// first view builds it, and an allocation view lending it.
fn table_of(regions: usize, shards: usize, ids: &[String]) -> (Arc<ShardTable>, ClusterView) {
    let topology = Arc::new(shardalloc_guest::Topology::new(
        (0..regions)
            .map(|i| shardalloc_guest::Region {
                address: format!("region-{i}"),
                join_order: i as u64,
                ..Default::default()
            })
            .collect(),
        Vec::new(),
        None,
    ));
    let homes = ids.iter().take(shards).enumerate().map(|(i, id)| (id.as_str(), (i % regions) as u32, 0));
    let table = Arc::new(ShardTable::build(&topology, Vec::new(), homes, [], [], [], []));
    let counts = (0..regions).map(|r| (shards / regions + usize::from(r < shards % regions)) as u32).collect();
    let view = ClusterView::for_allocation(topology, Vec::new(), counts).unwrap().with_table(table.clone());
    (table, view)
}

/// Contract 0.2's kept view (least-shard through the engine): a component's
/// copy brought up to date after 1,000 hand-offs (each four batches:
/// moving, unhomed, homed elsewhere, settled), against one allocation with
/// nothing to bring; and a whole view loaded at 1,000 regions × 1,000,000
/// shards. Also prints what the host's table holds per shard. Smoke mode:
/// the hand-offs over 10 regions × 1,000 shards, a whole view of 10 × 2,000.
fn kept_view(c: &mut Criterion) {
    let engine = engine();
    let compiled = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let roomy = Limits { memory: 512 << 20, ..limits() };
    let (regions, shards) = common::sized((100, 10_000), TINY);
    let (whole_regions, whole_shards) = common::sized((1_000, 1_000_000), (10, 2_000));
    let whole = common::sized("1,000 regions × 1,000,000 shards", "10 regions × 2,000 shards");
    let ids: Vec<String> = (0..whole_shards).map(|i| format!("shard-{i:07}")).collect();
    let mut group = c.benchmark_group("view");
    group.sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_millis(500));

    let (mut table, _) = table_of(regions, shards, &ids);
    let mut component = engine.instantiate(&compiled, "", roomy).unwrap();
    let lend = |table: &Arc<ShardTable>| {
        let counts = vec![(shards / regions) as u32; regions];
        ClusterView::for_allocation(table.view().topology().clone(), Vec::new(), counts)
            .unwrap()
            .with_table(table.clone())
    };
    component.allocate(&lend(&table), "first", None).unwrap();
    group.bench_function("allocate-nothing-to-bring", |b| {
        let view = lend(&table);
        b.iter(|| component.allocate(black_box(&view), "s", None).unwrap())
    });
    let mut round = 0usize;
    // 1,000 hand-offs, each as the coordinator journals it: four batches.
    let hand_offs = |table: &mut Arc<ShardTable>, round: usize| {
        let table = Arc::make_mut(table);
        for n in 0..1000 {
            let shard = &ids[(round * 1000 + n) % shards];
            let to = format!("region-{}", (round + n + 1) % regions);
            table.set_moving(shard, true);
            table.unhome(shard);
            table.home(shard, &to, 0).unwrap();
            table.set_moving(shard, false);
        }
    };
    group.bench_function("allocate-after-1000-hand-offs", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                hand_offs(&mut table, round);
                round += 1;
                let view = lend(&table);
                let started = std::time::Instant::now();
                component.allocate(black_box(&view), "s", None).unwrap();
                took += started.elapsed();
            }
            took
        })
    });
    // The host's share of the above: merging the 4,000 batches of 1,000
    // hand-offs into the one `apply` that crosses.
    hand_offs(&mut table, round);
    let since = table.generation() - 4000;
    group.bench_function("merge-4000-batches", |b| {
        b.iter(|| shardalloc::strategy::coalesce::coalesce(table.batches_since(black_box(since)).unwrap()))
    });
    drop(table);

    let before = live_heap_bytes();
    let (first, first_view) = table_of(whole_regions, whole_shards, &ids);
    let per_shard = live_heap_bytes().saturating_sub(before) as f64 / whole_shards as f64;
    println!("the host's shard table at {whole}: about {per_shard:.0} bytes per shard (live heap)");
    let (_second, second_view) = table_of(whole_regions, whole_shards, &ids);
    drop(first);
    let mut component = engine.instantiate(&compiled, "", roomy).unwrap();
    let mut flip = false;
    group.bench_function(format!("load-whole-view-{whole_regions}x{whole_shards}"), |b| {
        b.iter(|| {
            // Each call is lent the other table: the copy is loaded whole.
            flip = !flip;
            let view = if flip { &first_view } else { &second_view };
            component.allocate(black_box(view), "s", None).unwrap()
        })
    });
    group.finish();
}

/// Not a timing by criterion: the linear memory a fresh component holds
/// after its first rebalance over a view of 100 regions × 1,000,000 shards
/// (smoke: 20 × 2,000), in bytes a shard: least-shard (its copy of the
/// view without ids) and a strategy that reads every id in bulk (its copy
/// with every id). Issue 40's bound for the second: 200 bytes a shard.
fn view_memory(_: &mut Criterion) {
    let engine = engine();
    let fixture: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"));
    let reader = engine.compile(fixture).unwrap();
    let least = engine.compile_source(&StrategySource::Builtin("least-shard".into()), None).unwrap();
    let roomy = Limits { deadline: Duration::from_secs(600), view_load: Duration::from_secs(600), memory: 512 << 20 };
    let (regions, shards) = common::sized((100, 1_000_000), (20, 2_000));
    let view = cluster(regions, shards);
    for (name, compiled, config) in
        [("least-shard", &least, ""), ("ids-in-bulk", &reader, r#"{"rebalance":"read-ids","needs_ids":true}"#)]
    {
        let mut fresh = engine.instantiate(compiled, config, roomy).unwrap();
        fresh.rebalance(&view).unwrap();
        let bytes = fresh.memory_bytes();
        println!(
            "view memory: {name} holds {:.1} MiB of linear memory after its first rebalance over {regions} regions \
             × {shards} shards: {:.0} bytes a shard",
            bytes as f64 / 1_048_576.0,
            bytes as f64 / shards as f64
        );
    }
}

criterion_group!(
    benches,
    allocate,
    rebalance,
    loading,
    swaps,
    swap_reading_ids,
    swap_reading_attributes,
    view_memory,
    kept_view,
    first_calls
);
criterion_main!(benches);
