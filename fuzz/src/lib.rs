//! # shardalloc-fuzz
//!
//! Fuzz targets for every decoder and state machine the node exposes to
//! the outside, written as plain functions over bytes so that one body
//! serves two runners:
//!
//! - the libFuzzer binaries in `fuzz_targets/` (feature `libfuzzer`), built
//!   and run by `cargo xtask fuzz [--target NAME] [--minutes N]` with
//!   coverage instrumentation on the stable toolchain (no nightly: the
//!   flags are stable `-C passes=sancov-module` and `-C llvm-args`);
//! - `tests/replay.rs`, an ordinary test in `cargo xtask test`, which runs
//!   every input kept in `corpus/NAME/` and `regressions/NAME/` through the
//!   same function, uninstrumented.
//!
//! Each target panics only on a bug: a decoder that panics, a value that
//! does not survive its own encoding, a coordinator invariant broken.
//!
//! | module | target | what it feeds |
//! | --- | --- | --- |
//! | [`frames`] | `region_frames`, `node_frames` | postcard frames both ways, the `Hello` handshake included |
//! | [`bodies`] | `rest_bodies` | every REST request and answer body, and the snapshot `strategy eval` reads |
//! | [`configs`] | `strategy_configs` | each built-in strategy's configuration parser (and the zone signal) |
//! | [`components`] | `component` | the component loader on arbitrary bytes, and random components of the strategy world (wasm-smith bodies) run in the sandbox |
//! | [`coordinator`] | `coordinator` | the coordinator fed event sequences, its invariants checked after each |

pub mod bodies;
pub mod components;
pub mod configs;
pub mod coordinator;
pub mod frames;

/// A target's body: bytes in, a panic only for a bug.
pub type Target = fn(&[u8]);

/// Every target: its name (the directory of its corpus) and its function.
pub const TARGETS: &[(&str, Target)] = &[
    ("region_frames", frames::region_frames),
    ("node_frames", frames::node_frames),
    ("rest_bodies", bodies::rest_bodies),
    ("strategy_configs", configs::strategy_configs),
    ("component", components::component),
    ("coordinator", coordinator::coordinator),
];

/// The function of the target `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
