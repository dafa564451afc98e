//! The facts docs/design.md quotes about the code (contract versions, the
//! built-ins), checked against the code, so the intent cannot silently go
//! stale where it names them. Test-only.

use crate::engine::component::Contract;
use crate::store::SCHEMA_VERSION;
use crate::strategy::builtin;
use shardalloc_proto::peer::PEER_PROTOCOL_VERSION;
use shardalloc_proto::protocol::PROTOCOL_VERSION;

const DESIGN: &str = include_str!("../../docs/design.md");

/// The design document as one line of words (its lines wrap anywhere).
fn design() -> String {
    DESIGN.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn assert_says(text: &str, fact: &str) {
    assert!(text.contains(fact), "docs/design.md does not say {fact:?}: fix the document or the code");
}

#[test]
fn design_md_quotes_the_contract_versions_of_the_code() {
    let text = design();
    let packages: Vec<String> = Contract::ACCEPTED.iter().map(|c| format!("`{}`", c.version())).collect();
    assert_says(&text, &format!("WIT packages are {}", packages.join(" and ")));
    assert_says(
        &text,
        &format!("the region protocol is version {PROTOCOL_VERSION} (a node serves 1 to {PROTOCOL_VERSION};"),
    );
    assert_says(&text, &format!("the inter-region wire is version {PEER_PROTOCOL_VERSION}"));
    assert_says(&text, &format!("the store is schema {SCHEMA_VERSION}"));
    let newest = Contract::ACCEPTED.last().expect("a contract");
    assert_says(&text, &format!("**The contract** is the WIT package `{}`", newest.name()));
}

#[test]
fn design_md_names_every_built_in() {
    let text = design();
    let names: Vec<String> = builtin::names().map(|n| format!("`{n}`")).collect();
    let count = ["One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight"][names.len() - 1];
    let (last, rest) = names.split_last().expect("built-ins");
    assert_says(&text, &format!("{count} built-ins ship in the binary: {} and {last}", rest.join(", ")));
}
