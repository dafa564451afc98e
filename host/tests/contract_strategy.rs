//! The strategy contract's deployed components: the four built-ins as
//! `shardalloc:strategy@0.1.0` built them (`contracts/strategy-0.1/*.wasm`,
//! the bytes today's code embedded when 0.1 was the only contract) load in
//! this host's engine, pass the conformance suite, and answer exactly what
//! they answered then (`contracts/strategy-0.1/answers.json`: the inputs
//! and every answer, written once by those components). A host that stops
//! loading a deployed component, or changes what it is told, fails here.
//!
//! The answers are regenerated only on purpose (the components never
//! are): `SHARDALLOC_BLESS=1 cargo test -p shardalloc --test
//! in_process -- contract_strategy::` (ignored when `CI` is set).

use crate::bless;
use crate::common;

use std::path::PathBuf;

use bless::blessing;
use common::{CONFIGURATIONS, HostSubject, engine, generous};
use serde::{Deserialize, Serialize};
use shardalloc::engine::instance::Sandboxed;
use shardalloc_guest::Snapshot;
use shardalloc_guest::conformance::{self, Subject};
use shardalloc_guest::testing::{Shape, generate};

/// The contract these components speak.
const CONTRACT: &str = "shardalloc:strategy@0.1.0";

/// Shards each case asks a home for, from no requester and from its last region.
const PROBES: &[&str] = &["new", "s1", "s17", "tenant/9", "3", "shard-42"];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contracts/strategy-0.1")
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = fixtures().join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load(name: &str, config: &str) -> Sandboxed {
    engine()
        .load(&fixture_bytes(name), config, generous())
        .unwrap_or_else(|e| panic!("the {CONTRACT} fixture {name} ({config}) does not load: {e}"))
}

/// What a component answered on one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Answers {
    strategy: String,
    config: String,
    scenario: String,
    /// (shard, requester, answer) for every probe.
    allocations: Vec<(String, Option<String>, Result<String, String>)>,
    rebalance: Result<Vec<String>, String>,
}

/// `answers.json`: the inputs, once, and every configuration's answers
/// on each; one input or answer a line, so a change reads as a diff.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    inputs: Vec<(String, Snapshot)>,
    answers: Vec<Answers>,
}

impl Record {
    fn to_text(&self) -> String {
        let lines = |items: Vec<String>| items.join(",\n    ");
        format!(
            "{{\n  \"inputs\": [\n    {}\n  ],\n  \"answers\": [\n    {}\n  ]\n}}\n",
            lines(self.inputs.iter().map(|i| serde_json::to_string(i).unwrap()).collect()),
            lines(self.answers.iter().map(|a| serde_json::to_string(a).unwrap()).collect())
        )
    }
}

/// The inputs: the conformance suite's scenarios and seeded random
/// clusters, healthy and messy. Read back from the file when comparing,
/// so a later change of the suite or the generator changes no input.
fn inputs() -> Vec<(String, Snapshot)> {
    let mut all = conformance::scenarios();
    for seed in 1..=4u64 {
        let shape = if seed % 2 == 0 { Shape::messy(6, 60) } else { Shape::healthy(5, 50) };
        all.push((format!("seed {seed}"), generate(seed, &shape).snapshot));
    }
    // As the comparison will read them.
    serde_json::from_value(serde_json::to_value(all).unwrap()).unwrap()
}

fn answer(
    subject: &mut impl Subject,
    (name, config): (&str, &str),
    (scenario, snapshot): &(String, Snapshot),
) -> Answers {
    let last = snapshot.regions.last().map(|r| r.address.clone());
    let mut allocations = Vec::new();
    for shard in PROBES {
        for requester in [None, last.clone()] {
            let answer = subject.allocate(snapshot, shard, requester.as_deref());
            allocations.push(((*shard).to_owned(), requester, answer));
        }
    }
    Answers {
        strategy: name.into(),
        config: config.into(),
        scenario: scenario.clone(),
        allocations,
        rebalance: subject.rebalance(snapshot),
    }
}

#[test]
fn the_0_1_builtins_answer_as_they_did() {
    let path = fixtures().join("answers.json");
    let inputs = if blessing() {
        inputs()
    } else {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str::<Record>(&text).expect("answers.json reads").inputs
    };
    let mut answers = Vec::new();
    for &configuration in CONFIGURATIONS {
        let mut subject = HostSubject(load(configuration.0, configuration.1));
        answers.extend(inputs.iter().map(|input| answer(&mut subject, configuration, input)));
    }
    let got = Record { inputs, answers };
    if blessing() {
        std::fs::write(&path, got.to_text()).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let want: Record = serde_json::from_str(&text).unwrap();
    assert_eq!(got.answers.len(), want.answers.len(), "an answer for every configuration and input");
    for (got, want) in got.answers.iter().zip(&want.answers) {
        assert_eq!(
            got, want,
            "the {CONTRACT} fixture {} ({}) on {:?} answers differently",
            want.strategy, want.config, want.scenario
        );
    }
    assert_eq!(got.to_text(), text, "answers.json is exactly what the fixtures answer");
}

#[test]
fn the_0_1_builtins_pass_the_conformance_suite() {
    for (name, config) in CONFIGURATIONS {
        let problems = conformance::run(&mut HostSubject(load(name, config)));
        assert!(
            problems.is_empty(),
            "the {CONTRACT} fixture {name} ({config}): {}",
            problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}

#[test]
fn the_0_1_builtins_describe_themselves() {
    for name in ["least-shard", "hash", "capacity", "zone"] {
        let info = shardalloc::strategy::AllocationStrategy::info(&load(name, "")).clone();
        assert_eq!(info.name, name);
        let schema: serde_json::Value = serde_json::from_str(&info.config_schema).expect("its schema is JSON");
        assert!(schema.is_object(), "{name}: {schema}");
    }
}
