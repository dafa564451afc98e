//! The strategy contracts (`wit/0.1/strategy.wit`, `shardalloc:strategy@0.1.0`,
//! `wit/0.2/strategy.wit`, `@0.2.0`, and `wit/0.3/strategy.wit`, `@0.3.0`)
//! are what deployed components are built against: a published version
//! never changes. Each shape (the WIT
//! with comments and blank space taken out) is pinned here by its SHA-256,
//! and the guest SDK's copy must be the same file. A change of shape goes
//! into a new version beside these, with the host speaking every one.

use sha2::{Digest, Sha256};

/// The published versions: each one's file and the SHA-256 of its shape
/// (see [`shape`]).
const PUBLISHED: &[(&str, &str, &str)] = &[
    (
        "shardalloc:strategy@0.1.0",
        "wit/0.1/strategy.wit",
        "f8f61931d1f5b63072bb43200bb4daaecb88f28266f4f1b7dc18ecc56bbbf357",
    ),
    (
        "shardalloc:strategy@0.2.0",
        "wit/0.2/strategy.wit",
        "4510eb6424faca58d2bdd70b3856826b3d07082bbc27ed0ba47ca51c1ac9780a",
    ),
];

/// The version being built: its shape is pinned as well, so that no change
/// to it goes unnoticed; until it is published, a deliberate change
/// updates this pin in the same commit.
const NEXT_VERSION: &str = "shardalloc:strategy@0.3.0";
/// Its file, which the guest SDK builds against.
const NEXT_PATH: &str = "wit/0.3/strategy.wit";
/// SHA-256 of the shape of [`NEXT_VERSION`].
const NEXT_SHAPE_SHA256: &str = "b9ba670799c6e72ebef6821f7cc76d0f78a462a003a4ea2d4d3543cd7c1b6615";

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
fn the_published_strategy_contracts_keep_their_shape() {
    for (version, path, pinned) in PUBLISHED {
        let wit = read(path);
        assert!(wit.contains(&format!("package {version};")), "{path} is not {version} any more");
        let found = sha256(&shape(&wit));
        assert_eq!(
            &found, pinned,
            "the strategy contract {version} ({path}) changed shape: every deployed component was built against it, \
             so a published version never changes. Put the change in a new version beside it (the host loads every \
             one); a change of comments alone does not count"
        );
    }
}

#[test]
fn the_next_strategy_contract_changes_only_deliberately() {
    let wit = read(NEXT_PATH);
    assert!(wit.contains(&format!("package {NEXT_VERSION};")), "{NEXT_PATH} is not {NEXT_VERSION}");
    assert_eq!(
        sha256(&shape(&wit)),
        NEXT_SHAPE_SHA256,
        "the strategy contract {NEXT_VERSION} ({NEXT_PATH}) changed shape: if that was meant, pin the new shape here"
    );
}

#[test]
fn the_guest_sdk_builds_against_the_same_contract() {
    assert_eq!(
        read("guest-sdk/wit/strategy.wit"),
        read(NEXT_PATH),
        "guest-sdk/wit/strategy.wit differs from {NEXT_PATH}: strategies would be built against another contract"
    );
}

#[test]
fn comments_and_blank_space_are_not_shape() {
    let a = "/// doc\ninterface x {\n    f: func(); // note\n}\n";
    let b = "interface x { f: func(); }";
    assert_eq!(shape(a), shape(b));
    assert_ne!(shape(a), shape("interface x { f: func(a: u32); }"));
}
