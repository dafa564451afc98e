//! The strategy contracts' deployed components: the built-ins as each
//! older contract's code built them (`contracts/strategy-0.1/*.wasm`, the
//! four of `shardalloc:strategy@0.1.0`; `contracts/strategy-0.2/*.wasm`,
//! the five of `@0.2.0`: the bytes the host embedded while that contract
//! was the current one) load in this host's engine, pass the conformance
//! suite, and answer exactly what they answered then (each directory's
//! `answers.json`: the inputs and every answer, written once by those
//! components). A host that stops loading a deployed component, or changes
//! what it is told, fails here.
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

/// Shards each case asks a home for, from no requester and from its last region.
const PROBES: &[&str] = &["new", "s1", "s17", "tenant/9", "3", "shard-42"];

/// One contract's committed components.
struct Fixtures {
    /// The contract they speak.
    contract: &'static str,
    /// Their directory under `contracts/`.
    dir: &'static str,
    /// The configurations answers are recorded for beyond the four 0.1
    /// built-ins' ([`CONFIGURATIONS`]), by strategy name.
    more: &'static [(&'static str, &'static str)],
}

const V0_1: Fixtures = Fixtures { contract: "shardalloc:strategy@0.1.0", dir: "strategy-0.1", more: &[] };

/// 0.2's built-ins: 0.1's four and load-balance.
const V0_2: Fixtures =
    Fixtures { contract: "shardalloc:strategy@0.2.0", dir: "strategy-0.2", more: &[("load-balance", "")] };

impl Fixtures {
    /// Every configuration answers are recorded for, in order.
    fn configurations(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        CONFIGURATIONS.iter().chain(self.more).copied()
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contracts").join(self.dir)
    }

    fn bytes(&self, name: &str) -> Vec<u8> {
        let path = self.path().join(format!("{name}.wasm"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn load(&self, name: &str, config: &str) -> Sandboxed {
        let contract = self.contract;
        engine()
            .load(&self.bytes(name), config, generous())
            .unwrap_or_else(|e| panic!("the {contract} fixture {name} ({config}) does not load: {e}"))
    }

    /// The strategies' names, each once.
    fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<&str> = self.configurations().map(|(name, _)| name).collect();
        names.dedup();
        names
    }
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

fn answer_as_they_did(fixtures: &Fixtures) {
    let contract = fixtures.contract;
    let path = fixtures.path().join("answers.json");
    let inputs = if blessing() {
        inputs()
    } else {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str::<Record>(&text).expect("answers.json reads").inputs
    };
    let mut answers = Vec::new();
    for configuration in fixtures.configurations() {
        let mut subject = HostSubject(fixtures.load(configuration.0, configuration.1));
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
            "the {contract} fixture {} ({}) on {:?} answers differently",
            want.strategy, want.config, want.scenario
        );
    }
    assert_eq!(got.to_text(), text, "answers.json is exactly what the fixtures answer");
}

fn pass_the_conformance_suite(fixtures: &Fixtures) {
    for (name, config) in fixtures.configurations() {
        let problems = conformance::run(&mut HostSubject(fixtures.load(name, config)));
        assert!(
            problems.is_empty(),
            "the {} fixture {name} ({config}): {}",
            fixtures.contract,
            problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}

fn describe_themselves(fixtures: &Fixtures) {
    for name in fixtures.names() {
        let info = shardalloc::strategy::AllocationStrategy::info(&fixtures.load(name, "")).clone();
        assert_eq!(info.name, name);
        let schema: serde_json::Value = serde_json::from_str(&info.config_schema).expect("its schema is JSON");
        assert!(schema.is_object(), "{name}: {schema}");
        let contract = shardalloc::engine::component::contract_of(&fixtures.bytes(name));
        assert_eq!(contract.map(|c| c.name()).as_deref(), Some(fixtures.contract), "{name}");
    }
}

#[test]
fn the_0_1_builtins_answer_as_they_did() {
    answer_as_they_did(&V0_1);
}

#[test]
fn the_0_1_builtins_pass_the_conformance_suite() {
    pass_the_conformance_suite(&V0_1);
}

#[test]
fn the_0_1_builtins_describe_themselves() {
    describe_themselves(&V0_1);
}

#[test]
fn the_0_2_builtins_answer_as_they_did() {
    answer_as_they_did(&V0_2);
}

#[test]
fn the_0_2_builtins_pass_the_conformance_suite() {
    pass_the_conformance_suite(&V0_2);
}

#[test]
fn the_0_2_builtins_describe_themselves() {
    describe_themselves(&V0_2);
}
