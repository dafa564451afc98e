//! `cargo xtask examples`: every example strategy under
//! `examples/strategies/`, built and checked the way its README says, and
//! every example service under `examples/services/`, run and checked the
//! way its README says.
//!
//! Each example's README is the test: its ` ```sh ` blocks are run line by
//! line in the example's directory (with the `shardalloc` just built first
//! on `PATH`), and every `$ command` of its ` ```console ` blocks is run and
//! its output compared with the lines shown under it. So a broken doc
//! command breaks CI. Then the four components are asked the same questions
//! about the shared `snapshot.json` and must give the same answers.
//!
//! Language-specific parts: [`c`] (bindings and build driven from here);
//! the Rust, JavaScript and Python builds are plain commands in their READMEs.

pub mod c;
pub(crate) mod readme;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

/// The examples, by directory name, and the component each README builds.
pub const EXAMPLES: [(&str, &str); 4] = [
    ("rust", "build/latency-aware-rust.wasm"),
    ("c", "build/latency-aware-c.wasm"),
    ("javascript", "build/latency-aware-js.wasm"),
    ("python", "build/latency-aware-py.wasm"),
];

/// The example services (`examples/services/`), by directory name: each
/// README runs its service's processes behind a node and checks them.
pub const SERVICES: [&str; 2] = ["typescript-counter", "python-counter"];

/// Questions every example must answer identically.
const SAME_ANSWERS: [&[&str]; 4] = [
    &["eval", "allocate", "--shard", "42"],
    &["eval", "allocate", "--shard", "42", "--requester", "eu-2:2552"],
    &["eval", "rebalance"],
    &["simulate", "--rounds", "4"],
];

/// Builds and checks every example (or the ones named). `build`: build the
/// `shardalloc` binary first (`cargo xtask test` has just built it with
/// the tests, whose feature set differs: building again would recompile).
pub fn run(root: &Path, only: &[String], build: bool) -> anyhow::Result<()> {
    let failed: Vec<String> = checks(root, only, build)?
        .into_iter()
        .filter_map(|(name, outcome)| outcome.err().map(|e| format!("{name}: {e}")))
        .collect();
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// Every example followed as a check of its own (then one check that they
/// all answer alike): its name and outcome, so `cargo xtask test` counts
/// each in its summary. An error is returned only when nothing could start.
pub fn checks(root: &Path, only: &[String], build: bool) -> anyhow::Result<Vec<(String, Result<(), String>)>> {
    let started = Instant::now();
    super::packages::ensure("examples")?;
    let bin_dir = super::target_dir(root).join("debug");
    if build || !bin_dir.join("shardalloc").is_file() {
        super::run(root, &super::cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    }
    let examples_dir = root.join("examples/strategies");
    let mut built = Vec::new();
    let mut outcomes = Vec::new();
    for (name, component) in EXAMPLES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let dir = examples_dir.join(name);
        let step = Instant::now();
        eprintln!("xtask: example {name}: following {}", dir.join("README.md").display());
        let component = dir.join(component);
        let outcome = readme::follow(root, &dir, &bin_dir).map_err(|e| format!("{e:#}")).and_then(|()| {
            if component.is_file() { Ok(()) } else { Err(format!("its README did not build {}", component.display())) }
        });
        match &outcome {
            Ok(()) => {
                eprintln!("xtask: example {name}: done in {:.0?}", step.elapsed());
                built.push((name, component));
            }
            Err(error) => eprintln!("xtask: example {name}: FAILED: {error}"),
        }
        outcomes.push((format!("example {name}"), outcome));
    }
    if only.is_empty() || EXAMPLES.iter().any(|(name, _)| only.iter().any(|o| o == name)) {
        let agree = same_answers(&bin_dir, &examples_dir.join("snapshot.json"), &built).map_err(|e| format!("{e:#}"));
        outcomes.push(("the examples answer alike".to_owned(), agree));
    }
    for name in SERVICES {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let dir = root.join("examples/services").join(name);
        let step = Instant::now();
        eprintln!("xtask: example service {name}: following {}", dir.join("README.md").display());
        let outcome = readme::follow(root, &dir, &bin_dir).map_err(|e| format!("{e:#}"));
        match &outcome {
            Ok(()) => eprintln!("xtask: example service {name}: done in {:.0?}", step.elapsed()),
            Err(error) => eprintln!("xtask: example service {name}: FAILED: {error}"),
        }
        outcomes.push((format!("example service {name}"), outcome));
    }
    eprintln!("xtask: {} examples checked in {:.0?}", outcomes.len(), started.elapsed());
    Ok(outcomes)
}

/// Builds and checks the examples unless every component is already built
/// (the examples benchmark needs them).
pub fn ensure_built(root: &Path) -> anyhow::Result<()> {
    let examples_dir = root.join("examples/strategies");
    if EXAMPLES.iter().all(|(name, component)| examples_dir.join(name).join(component).is_file()) {
        return Ok(());
    }
    run(root, &[], false)
}

/// `cargo xtask c-example`: the C example's build, for its README.
pub fn c_example(root: &Path) -> anyhow::Result<()> {
    super::packages::ensure("c-example")?;
    let dir = root.join("examples/strategies/c");
    let out = dir.join("build");
    let component = c::build(root, &dir, &out)?;
    c::test_natively(&dir, &out)?;
    println!("{}", component.display());
    Ok(())
}

fn same_answers(bin_dir: &Path, snapshot: &Path, built: &[(&str, PathBuf)]) -> anyhow::Result<()> {
    for question in SAME_ANSWERS {
        let mut answers: Vec<(&str, String)> = Vec::new();
        for (name, component) in built {
            let output = Command::new(bin_dir.join("shardalloc"))
                .arg("strategy")
                .arg(question[0])
                .arg("--strategy")
                .arg(component)
                .arg("--snapshot")
                .arg(snapshot)
                .args(&question[1..])
                .output()
                .context("run shardalloc")?;
            if !output.status.success() {
                bail!("{name}: `{}` failed: {}", question.join(" "), String::from_utf8_lossy(&output.stderr));
            }
            answers.push((name, String::from_utf8_lossy(&output.stdout).into_owned()));
        }
        if let Some((name, answer)) = answers.iter().find(|(_, a)| *a != answers[0].1) {
            bail!(
                "the examples disagree on `{}`:\n{}: {}\n{name}: {answer}",
                question.join(" "),
                answers[0].0,
                answers[0].1
            );
        }
    }
    Ok(())
}
