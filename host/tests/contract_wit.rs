//! The strategy contract (`wit/strategy.wit`, `shardalloc:strategy@0.1.0`)
//! is what every deployed component was built against: a published version
//! never changes. Its shape (the WIT with comments and blank space taken
//! out) is pinned here by its SHA-256, and the guest SDK's copy must be the
//! same file. A change of shape goes into a new version beside this one,
//! with the host speaking both.

use sha2::{Digest, Sha256};

/// The published version.
const VERSION: &str = "shardalloc:strategy@0.1.0";

/// SHA-256 of the shape of [`VERSION`] (see [`shape`]).
const SHAPE_SHA256: &str = "f8f61931d1f5b63072bb43200bb4daaecb88f28266f4f1b7dc18ecc56bbbf357";

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The WIT without comments, with every run of blank space made one space.
fn shape(wit: &str) -> String {
    let code: Vec<&str> = wit.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
    code.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_published_strategy_contract_keeps_its_shape() {
    let wit = read("wit/strategy.wit");
    assert!(wit.contains(&format!("package {VERSION};")), "wit/strategy.wit is not {VERSION} any more");
    let found = sha256(&shape(&wit));
    assert_eq!(
        found, SHAPE_SHA256,
        "the strategy contract {VERSION} (wit/strategy.wit) changed shape: every deployed component was built \
         against it, so a published version never changes. Put the change in a new version beside it (the host \
         loads both); a change of comments alone does not count"
    );
}

#[test]
fn the_guest_sdk_builds_against_the_same_contract() {
    assert_eq!(
        read("guest-sdk/wit/strategy.wit"),
        read("wit/strategy.wit"),
        "guest-sdk/wit/strategy.wit differs from wit/strategy.wit: strategies would be built against another contract"
    );
}

#[test]
fn comments_and_blank_space_are_not_shape() {
    let a = "/// doc\ninterface x {\n    f: func(); // note\n}\n";
    let b = "interface x { f: func(); }";
    assert_eq!(shape(a), shape(b));
    assert_ne!(shape(a), shape("interface x { f: func(a: u32); }"));
}
