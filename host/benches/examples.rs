//! The example strategies (`examples/strategies/`, one strategy written in
//! Rust, C, JavaScript and Python) through the engine, next to the built-in
//! least-shard, on identical inputs in one run; `docs/performance.md`
//! reports the figures.
//!
//! Build the examples first: `cargo xtask examples`, then
//! `cargo bench -p shardalloc --bench examples`. In smoke mode (`common`)
//! one cluster of 10 regions × 1,000 shards, and when the examples are not
//! built it says so and skips (`cargo xtask test` runs it after building
//! them, in its example strategies step).

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shardalloc::engine::instance::Sandboxed;
use shardalloc::engine::limits::Limits;
use shardalloc::engine::{Engine, EngineConfig};
use shardalloc::strategy::{AllocationStrategy, ClusterView, StrategySource};
use shardalloc_guest::testing::{Shape, generate};

/// Each example's component, as its README builds it.
const EXAMPLES: [(&str, &str); 4] = [
    ("rust", "rust/build/latency-aware-rust.wasm"),
    ("c", "c/build/latency-aware-c.wasm"),
    ("javascript", "javascript/build/latency-aware-js.wasm"),
    ("python", "python/build/latency-aware-py.wasm"),
];

/// Clusters: (regions, shards).
const SIZES: [(usize, usize); 2] = [(100, 10_000), (1_000, 100_000)];

/// The smoke mode's one cluster.
const TINY: (usize, usize) = (10, 1_000);

/// [`SIZES`], or [`TINY`] alone in smoke mode.
fn sizes() -> Vec<(usize, usize)> {
    common::sized(SIZES.to_vec(), vec![TINY])
}

/// In smoke mode, true (after saying why) when an example's component is
/// not built: `what` is skipped. Otherwise false, and a missing component
/// fails where it is read, saying how to build it.
fn skipped(what: &str) -> bool {
    if !common::smoke() {
        return false;
    }
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/strategies");
    let Some(missing) = EXAMPLES.iter().map(|(_, path)| examples.join(path)).find(|path| !path.is_file()) else {
        return false;
    };
    println!("examples: {what} skipped in smoke mode: {} is not built (cargo xtask examples)", missing.display());
    true
}

/// A generated cluster where every region reports `latency_ms` and has a
/// `zone` label, so the examples read both.
fn cluster(regions: usize, shards: usize) -> ClusterView {
    let mut snapshot = generate(7, &Shape::healthy(regions, shards)).snapshot;
    for (i, region) in snapshot.regions.iter_mut().enumerate() {
        region.metrics.insert("latency_ms".into(), 5.0 + (i * 37 % 101) as f64);
        region.labels.insert("zone".into(), format!("z{}", i % 3));
    }
    // As the coordinator's views do, the view carries its shard table, so
    // a 0.2 component keeps its copy between calls.
    let view = ClusterView::from_snapshot(&snapshot);
    let table = std::sync::Arc::new(view.built_table().expect("a view with homes"));
    view.with_table(table)
}

/// Generous: a busy machine must not trip the deadline, and the JavaScript
/// and Python runtimes need more than the default 64 MiB for 100,000 shards.
fn limits() -> Limits {
    Limits { deadline: Duration::from_secs(10), memory: 512 << 20, ..Limits::default() }
}

fn engine() -> Arc<Engine> {
    // The offline tools' cache: a second run does not compile again.
    let cache_dir = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/shardalloc/artifacts"));
    Engine::new(EngineConfig { cache_dir, max_instances: 0 }).expect("engine")
}

fn strategies(engine: &Arc<Engine>) -> Vec<(&'static str, Sandboxed)> {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/strategies");
    let mut loaded = vec![(
        "least-shard",
        engine.load_source(&StrategySource::Builtin("least-shard".into()), "", limits(), None).unwrap(),
    )];
    for (name, path) in EXAMPLES {
        let path = examples.join(path);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; build the examples first: cargo xtask examples", path.display()));
        loaded.push((name, engine.load(&bytes, "", limits()).unwrap_or_else(|e| panic!("{name}: {e}"))));
    }
    loaded
}

/// Not a timing by criterion: the first call after a swap against a steady
/// call, for every example (the JavaScript and Python components are 12 and
/// 18 MB).
fn first_calls(_: &mut Criterion) {
    if skipped("first_calls") {
        return;
    }
    let engine = engine();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/strategies");
    let compiled: Vec<_> = EXAMPLES
        .iter()
        .map(|(name, path)| {
            let bytes = std::fs::read(examples.join(path)).expect("built by cargo xtask examples");
            (*name, engine.compile(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")))
        })
        .collect();
    let (regions, shards) = common::sized((100, 10_000), TINY);
    common::first_call::print_first_calls(&engine, &compiled, &cluster(regions, shards), limits());
}

fn allocate(c: &mut Criterion) {
    if skipped("examples_allocate") {
        return;
    }
    let engine = engine();
    let mut strategies = strategies(&engine);
    let mut group = c.benchmark_group("examples_allocate");
    group.sample_size(20).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    for (regions, shards) in sizes() {
        let view = cluster(regions, shards);
        let requester = view.regions()[1].address.clone();
        // The four examples are one strategy: they must agree.
        let answers: Vec<String> =
            strategies[1..].iter_mut().map(|(_, s)| s.allocate(&view, "shard-x", Some(&requester)).unwrap()).collect();
        assert!(answers.iter().all(|a| *a == answers[0]), "the examples disagree: {answers:?}");
        for (name, strategy) in strategies.iter_mut() {
            group.bench_with_input(BenchmarkId::new(*name, format!("{regions}r")), &view, |b, view| {
                b.iter(|| strategy.allocate(black_box(view), "shard-x", Some(&requester)).unwrap())
            });
        }
    }
    group.finish();
}

fn rebalance(c: &mut Criterion) {
    if skipped("examples_rebalance") {
        return;
    }
    let engine = engine();
    let mut strategies = strategies(&engine);
    let mut group = c.benchmark_group("examples_rebalance");
    group.sample_size(10).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for (regions, shards) in sizes() {
        let view = cluster(regions, shards);
        let label = format!("{regions}r-{shards}s");
        let answers: Vec<Vec<shardalloc::strategy::RebalanceMove>> =
            strategies[1..].iter_mut().map(|(_, s)| s.rebalance(&view).unwrap()).collect();
        assert!(answers.iter().all(|a| *a == answers[0]), "the examples disagree");
        for (name, strategy) in strategies.iter_mut() {
            group.bench_with_input(BenchmarkId::new(*name, &label), &view, |b, view| {
                b.iter(|| strategy.rebalance(black_box(view)).unwrap())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, first_calls, allocate, rebalance);
criterion_main!(benches);
