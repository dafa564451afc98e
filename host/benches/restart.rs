//! A restart with many stored components against one with none, side by
//! side in one run: the node's start from a redb store (open the file, load
//! every row, declare the type, first commit), with 0 and with 100 uploaded
//! components of 512 KiB each stored. A restart reads the components' rows,
//! never their bytes, so the two should take the same time; before issue
//! 23 it grew with the bytes stored (the attack's 1.28 GB: 69 s).
//! `docs/operations.md` (Uploads) reports the ratio.
//!
//! `cargo bench -p shardalloc --bench restart` (or `cargo xtask bench restart`)

#![allow(missing_docs, reason = "criterion's macros define undocumented public functions")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{TYPE, least_shard};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shardalloc::engine::{Engine, EngineConfig};
use shardalloc::server::driver::{Driver, DriverSettings, TypeDeclaration};
use shardalloc::server::metrics::Metrics;
use shardalloc::store::{ComponentRecord, RedbStore, Store, Turn, TypeRecord};

/// Bytes of each stored component.
const COMPONENT_BYTES: usize = 512 * 1024;

/// A redb store in `dir` with the type declared and `count` components.
fn stored(dir: &Path, count: usize) {
    let store = RedbStore::open(dir).unwrap();
    let mut revision = store.load().unwrap().revision;
    let record = TypeRecord { strategy: least_shard(), config: String::new() };
    let mut turn = Turn { types: [(TYPE.to_string(), record)].into(), ..Turn::default() };
    for i in 0..count {
        let digest = format!("sha256:{i:064x}");
        let bytes: Vec<u8> = (0..COMPONENT_BYTES).map(|b| (b * 31 + i) as u8).collect();
        store.put_blob(&digest, &bytes).unwrap();
        turn.components.push(ComponentRecord {
            digest,
            name: format!("strategy-{i}"),
            version: "1.0.0".into(),
            size: COMPONENT_BYTES as u64,
            uploaded_at_ms: 1,
        });
    }
    revision = store.commit(revision, &turn).unwrap();
    assert!(revision > 0);
}

fn restart(c: &mut Criterion) {
    let engine = Engine::new(EngineConfig { cache_dir: None, ..Default::default() }).unwrap();
    let mut group = c.benchmark_group("restart");
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    // Smoke mode: 3 components, enough to show the restart counts them.
    for count in [0, common::sized(100, 3)] {
        let dir = tempfile::tempdir().unwrap();
        stored(dir.path(), count);
        group.bench_function(BenchmarkId::new("components", count), |b| {
            b.iter(|| {
                let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path()).unwrap());
                let mut settings = DriverSettings::default();
                let declaration = TypeDeclaration { strategy: least_shard(), config: String::new() };
                settings.types.insert(TYPE.into(), declaration);
                let driver = Driver::load(store, engine.clone(), settings, Arc::new(Metrics::new()), 1).unwrap();
                assert_eq!(driver.catalog().components().len(), count);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, restart);
criterion_main!(benches);
