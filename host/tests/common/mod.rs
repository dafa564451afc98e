//! Shared helpers for the host's integration tests.

#![allow(dead_code, reason = "shared by several test files, each using a part")]

use std::sync::{Arc, OnceLock};

use shardalloc::engine::Engine;
use shardalloc::engine::instance::Sandboxed;
use shardalloc::strategy::{AllocationStrategy, ClusterView, StrategySource, builtin};
use shardalloc_guest::Snapshot;
use shardalloc_guest::conformance::Subject;

/// Any host-side strategy as a conformance [`Subject`].
pub struct HostSubject<T>(pub T);

impl<T: AllocationStrategy> Subject for HostSubject<T> {
    fn allocate(&mut self, snapshot: &Snapshot, shard: &str, requester: Option<&str>) -> Result<String, String> {
        self.0.allocate(&ClusterView::from_snapshot(snapshot), shard, requester).map_err(|e| e.to_string())
    }

    fn rebalance(&mut self, snapshot: &Snapshot) -> Result<Vec<String>, String> {
        let moves = self.0.rebalance(&ClusterView::from_snapshot(snapshot)).map_err(|e| e.to_string())?;
        Ok(moves.into_iter().map(|m| m.shard).collect())
    }
}

/// One engine per test binary, with an artifact cache shared by all test
/// binaries so each built-in is compiled once per build.
pub fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifact-cache");
            Engine::new(shardalloc::engine::EngineConfig { cache_dir: Some(dir), ..Default::default() }).unwrap()
        })
        .clone()
}

/// A built-in, loaded from its embedded component.
pub fn component(name: &str, config: &str) -> Sandboxed {
    engine()
        .load_source(&StrategySource::Builtin(name.into()), config, generous(), None)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A built-in, compiled into the host.
pub fn native(name: &str, config: &str) -> Box<dyn AllocationStrategy> {
    builtin::native(name, config).expect("a built-in").unwrap_or_else(|e| panic!("{e}"))
}

/// The misbehaving fixture component's bytes.
pub fn misbehaving_bytes() -> &'static [u8] {
    include_bytes!(concat!(env!("OUT_DIR"), "/misbehaving.wasm"))
}

/// Every built-in with the configurations worth testing.
pub const CONFIGURATIONS: &[(&str, &str)] = &[
    ("least-shard", ""),
    ("least-shard", r#"{"algorithm":"classic"}"#),
    ("least-shard", r#"{"absolute_limit":1000,"relative_limit":1.0}"#),
    ("hash", ""),
    ("hash", r#"{"rebalance_limit":0}"#),
    ("capacity", ""),
    ("capacity", r#"{"metric":"cpu","threshold":0.5}"#),
    ("zone", ""),
    ("zone", r#"{"label":"dc"}"#),
];

/// Configurations only the current built-ins take (the committed fixtures
/// of frozen contracts predate them): checked with [`CONFIGURATIONS`] by
/// the built-ins' own tests.
pub const CURRENT_ONLY: &[(&str, &str)] = &[("capacity", r#"{"metric":"sessions","of":"sessions"}"#)];

/// Every configuration of the current built-ins.
pub fn current_configurations() -> Vec<(&'static str, &'static str)> {
    CONFIGURATIONS.iter().chain(CURRENT_ONLY).copied().collect()
}

/// Limits for tests that do not test limits: a deadline far above any real
/// call, so a descheduled test thread on a busy machine does not time out.
pub fn generous() -> shardalloc::engine::limits::Limits {
    shardalloc::engine::limits::Limits { deadline: std::time::Duration::from_secs(10), ..Default::default() }
}

/// The shards of a rebalance answer, in order (their destinations left out).
pub fn shards(moves: Vec<shardalloc::strategy::RebalanceMove>) -> Vec<String> {
    moves.into_iter().map(|m| m.shard).collect()
}
