//! Every input kept for a fuzz target — its corpus (`corpus/NAME/`) and the
//! crashes found and fixed (`regressions/NAME/`) — replayed through the
//! target's function, uninstrumented: an ordinary test of `cargo xtask
//! test`. One test per target, so the summary counts each.

use std::path::Path;

fn replay(name: &str) {
    let target = shardalloc_fuzz::target(name).expect("a target");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = 0;
    for kind in ["corpus", "regressions"] {
        let dir = root.join(kind).join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut paths: Vec<_> = entries.map(|e| e.expect("a directory entry").path()).collect();
        paths.sort();
        for path in paths {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("{}", path.display());
            target(&bytes);
            inputs += 1;
        }
    }
    assert!(inputs > 0, "no input kept for {name}: seed its corpus (cargo xtask fuzz --target {name})");
}

#[test]
fn region_frames() {
    replay("region_frames");
}

#[test]
fn node_frames() {
    replay("node_frames");
}

#[test]
fn rest_bodies() {
    replay("rest_bodies");
}

#[test]
fn strategy_configs() {
    replay("strategy_configs");
}

#[test]
fn component() {
    replay("component");
}

#[test]
fn coordinator() {
    replay("coordinator");
}

#[test]
fn every_target_is_replayed() {
    let replayed = ["region_frames", "node_frames", "rest_bodies", "strategy_configs", "component", "coordinator"];
    let targets: Vec<&str> = shardalloc_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(targets, replayed, "a target without its replay test");
}
