//! Running the test suite and counting it: `cargo test` prints one
//! `test result:` line per test binary (doc-tests included); the sum of
//! them is the summary `cargo xtask test` ends with.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;

/// What a test run counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests ignored or filtered out.
    pub skipped: u64,
}

impl Tally {
    /// Adds what a step counted, or one failure (named with `what`) when
    /// the step could not run at all.
    pub fn add_step(&mut self, what: &str, counted: anyhow::Result<Tally>) {
        match counted {
            Ok(counted) => {
                self.passed += counted.passed;
                self.failed += counted.failed;
                self.skipped += counted.skipped;
            }
            Err(error) => {
                self.failed += 1;
                eprintln!("xtask: {what} failed: {error:#}");
            }
        }
    }
}

impl Tally {
    /// Adds one `test result: …` line.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else { return };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let number = |word: &str| -> u64 {
            words.windows(2).find(|pair| pair[1].starts_with(word)).and_then(|pair| pair[0].parse().ok()).unwrap_or(0)
        };
        self.passed += number("passed");
        self.failed += number("failed");
        self.skipped += number("ignored") + number("filtered");
    }

    /// `N passed, N failed` (and `, N skipped`).
    pub fn summary(&self) -> String {
        let mut line = format!("{} passed, {} failed", self.passed, self.failed);
        if self.skipped > 0 {
            line.push_str(&format!(", {} skipped", self.skipped));
        }
        line
    }
}

/// Runs `cargo test ARGS`, echoing its output, and counts every result line.
/// `--no-fail-fast` is added so one failing binary does not hide the others.
pub fn run(root: &Path, cargo: &str, args: &[&str]) -> anyhow::Result<(Tally, bool)> {
    eprintln!("xtask: {cargo} test {} --no-fail-fast", args.join(" "));
    let mut child = Command::new(cargo)
        .arg("test")
        .args(args)
        .arg("--no-fail-fast")
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not run {cargo} test"))?;
    let mut tally = Tally::default();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line.context("read cargo test's output")?;
        println!("{line}");
        tally.add_line(&line);
    }
    let status = child.wait()?;
    Ok((tally, status.success()))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn result_lines_add_up() {
        let mut tally = Tally::default();
        tally
            .add_line("test result: ok. 32 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; finished in 1.71s");
        tally.add_line(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s",
        );
        tally.add_line("running 3 tests");
        tally.add_line("test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s");
        assert_eq!(tally, Tally { passed: 35, failed: 2, skipped: 3 });
        assert_eq!(tally.summary(), "35 passed, 2 failed, 3 skipped");
        assert_eq!(Tally { passed: 4, ..Tally::default() }.summary(), "4 passed, 0 failed");
    }
}
