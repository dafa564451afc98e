//! Following docs/writing-a-strategy.md as a new author would, between its
//! `<!-- xtask guide: begin -->` and `<!-- xtask guide: end -->` markers,
//! in a scratch directory outside the repository: a block right after a
//! line that ends by naming a file (`` `src/lib.rs`: ``) is written to it,
//! `sh` lines are run (`cd DIR` moves the following ones), and `console`
//! transcripts are run and compared. The guide's `Cargo.toml` is used with
//! its `shardalloc-guest` dependency as a path to this checkout's
//! `guest-sdk/` (the form the guide shows commented out), so the crate
//! builds against the SDK of this commit.
//!
//! In a transcript, a line that is only `…` matches any lines (none
//! included), and `…` inside a line matches any text there: sizes and
//! timings vary.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

const GUIDE: &str = "docs/writing-a-strategy.md";
const BEGIN: &str = "<!-- xtask guide: begin -->";
const END: &str = "<!-- xtask guide: end -->";

/// One step of the guide.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Write this text to this path (relative to the current directory).
    File(String, String),
    /// Run these commands.
    Sh(Vec<String>),
    /// Run each command and compare what it prints.
    Console(Vec<(String, Vec<String>)>),
}

/// The steps between the markers, in order.
fn steps(markdown: &str) -> anyhow::Result<Vec<Step>> {
    let start = markdown.find(BEGIN).with_context(|| format!("{GUIDE} has no {BEGIN} marker"))?;
    let end = markdown.find(END).with_context(|| format!("{GUIDE} has no {END} marker"))?;
    let mut steps = Vec::new();
    let mut named: Option<String> = None;
    let mut lines = markdown[start..end].lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        let Some(kind) = trimmed.strip_prefix("```") else {
            if !trimmed.is_empty() {
                // A line ending in "`src/lib.rs`:" names the next block's file.
                named = trimmed
                    .strip_suffix("`:")
                    .and_then(|rest| rest.rsplit_once('`'))
                    .map(|(_, path)| path)
                    .filter(|path| !path.is_empty() && !path.contains(' '))
                    .map(str::to_owned);
            }
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
        match (kind, named.take()) {
            ("sh", _) => steps.push(Step::Sh(
                body.iter()
                    .map(|l| l.trim())
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned)
                    .collect(),
            )),
            ("console", _) => steps.push(Step::Console(crate::examples::readme::transcript(&body))),
            (_, Some(path)) => steps.push(Step::File(path, body.iter().map(|l| format!("{l}\n")).collect())),
            _ => {}
        }
    }
    Ok(steps)
}

/// Whether `got` is what `expected` shows (see the module documentation).
fn matches(expected: &[String], got: &[&str]) -> bool {
    match expected.split_first() {
        None => got.is_empty(),
        Some((first, rest)) if first.trim() == "…" => (0..=got.len()).any(|skip| matches(rest, &got[skip..])),
        Some((first, rest)) => {
            got.split_first().is_some_and(|(line, others)| line_matches(first, line) && matches(rest, others))
        }
    }
}

/// One line against a pattern in which `…` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split('…');
    let Some(first) = parts.next() else { return line.is_empty() };
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The guide's `Cargo.toml` with its SDK dependency on this checkout.
fn with_local_sdk(toml: &str, root: &Path) -> anyhow::Result<String> {
    let sdk = root.join("guest-sdk");
    let mut replaced = false;
    let text = toml
        .lines()
        .map(|line| {
            if line.starts_with("shardalloc-guest = ") {
                replaced = true;
                format!("shardalloc-guest = {{ path = {:?} }}\n", sdk.display().to_string())
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    if !replaced {
        bail!("the guide's Cargo.toml has no `shardalloc-guest = …` dependency line");
    }
    Ok(text)
}

/// The names the guide's type table (the one headed `| type | what it is |`)
/// gives in backticks, each with its row's type: `regions()`, `hash`…
fn table_names(markdown: &str) -> Vec<(String, String)> {
    let mut names = Vec::new();
    let rows = markdown.lines().skip_while(|l| !l.starts_with("| type | what it is |")).skip(2);
    for row in rows.take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(ty), Some(what)) = (cells.get(1), cells.get(2)) else { continue };
        let ty = ty.trim_matches('`').to_owned();
        for (i, token) in what.split('`').enumerate() {
            if i % 2 == 1 {
                let name = token.split('(').next().unwrap_or(token).trim();
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    names.push((ty.clone(), name.to_owned()));
                }
            }
        }
    }
    names
}

/// Checks that every name of the guide's type table is a public function
/// or field of the SDK (`guest-sdk/src/`).
fn check_table(root: &Path, markdown: &str) -> anyhow::Result<()> {
    let mut sdk = String::new();
    for entry in std::fs::read_dir(root.join("guest-sdk/src"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            sdk.push_str(&std::fs::read_to_string(&path)?);
        }
    }
    let names = table_names(markdown);
    if names.is_empty() {
        bail!("{GUIDE} has no type table (`| type | what it is |`) to check");
    }
    let missing: Vec<String> = names
        .iter()
        .filter(|(_, name)| {
            !sdk.contains(&format!("pub fn {name}("))
                && !sdk.contains(&format!("pub fn {name}<"))
                && !sdk.contains(&format!("pub {name}:"))
                && !sdk.contains(&format!("pub struct {name}"))
        })
        .map(|(ty, name)| format!("`{name}` (row `{ty}`)"))
        .collect();
    if !missing.is_empty() {
        bail!("{GUIDE}'s type table names what the SDK has no public function or field for: {}", missing.join(", "));
    }
    Ok(())
}

/// Follows the guide in a fresh directory with `bin_dir` first on `PATH`,
/// after checking its type table against the SDK.
pub fn follow(root: &Path, bin_dir: &Path) -> anyhow::Result<()> {
    let markdown = std::fs::read_to_string(root.join(GUIDE)).with_context(|| format!("read {GUIDE}"))?;
    check_table(root, &markdown)?;
    let scratch = std::env::temp_dir().join(format!("shardalloc-guide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).context("a scratch directory")?;
    follow_in(root, bin_dir, &markdown, &scratch)
        .with_context(|| format!("following {GUIDE} (its crate is kept in {})", scratch.display()))?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn follow_in(root: &Path, bin_dir: &Path, markdown: &str, scratch: &Path) -> anyhow::Result<()> {
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_owned()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let mut cwd: PathBuf = scratch.to_owned();
    let shell = |command: &str, cwd: &Path| {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(command)
            .current_dir(cwd)
            .env("PATH", &path)
            .env_remove("CARGO_TARGET_DIR")
            .env("SHARDALLOC_CACHE_DIR", crate::target_dir(root).join("examples-cache"))
            .env("SHARDALLOC_LOG", "warn");
        sh
    };
    for step in steps(markdown)? {
        match step {
            Step::File(name, text) => {
                let text = if name == "Cargo.toml" { with_local_sdk(&text, root)? } else { text };
                let file = cwd.join(&name);
                if let Some(parent) = file.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                eprintln!("xtask:   (writes {name})");
                std::fs::write(&file, text).with_context(|| format!("write {}", file.display()))?;
            }
            Step::Sh(commands) => {
                for command in commands {
                    eprintln!("xtask:   $ {command}");
                    if let Some(dir) = command.strip_prefix("cd ") {
                        cwd = cwd.join(dir.trim());
                        continue;
                    }
                    let status = shell(&command, &cwd).status().with_context(|| format!("run `{command}`"))?;
                    if !status.success() {
                        bail!("{GUIDE}: `{command}` failed ({status})");
                    }
                }
            }
            Step::Console(transcript) => {
                for (command, expected) in transcript {
                    eprintln!("xtask:   $ {command}");
                    let output = shell(&command, &cwd).output().with_context(|| format!("run `{command}`"))?;
                    // A failing command's transcript shows its error; a
                    // command whose output the guide shows from stderr
                    // (logs) shows both.
                    let stdout = String::from_utf8_lossy(&output.stdout);
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    let shown = if output.status.success() { format!("{stderr}{stdout}") } else { stderr.into_owned() };
                    let got: Vec<&str> = shown.lines().filter(|l| !l.starts_with("compiling ")).collect();
                    let only_stdout: Vec<&str> = stdout.lines().collect();
                    let shown_right =
                        matches(&expected, &got) || (output.status.success() && matches(&expected, &only_stdout));
                    if !shown_right {
                        bail!(
                            "{GUIDE}: `{command}` printed\n{}\nbut the guide shows\n{}",
                            got.join("\n"),
                            expected.join("\n")
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_blocks_become_files_and_the_rest_steps() {
        let text = format!(
            "intro\n```sh\nnot run\n```\n{BEGIN}\n```sh\ncargo new x\ncd x\n```\nThen `src/lib.rs`:\n\n```rust\nfn a() {{}}\n```\n\
             ```rust\nillustration\n```\n```console\n$ cargo test\n…\nok\n```\n{END}\n```sh\nafter\n```\n"
        );
        assert_eq!(
            steps(&text).unwrap(),
            vec![
                Step::Sh(vec!["cargo new x".into(), "cd x".into()]),
                Step::File("src/lib.rs".into(), "fn a() {}\n".into()),
                Step::Console(vec![("cargo test".into(), vec!["…".into(), "ok".into()])]),
            ]
        );
    }

    #[test]
    fn the_type_tables_names_are_read_by_row() {
        let text = "| type | what it is |\n| --- | --- |\n| `View` | regions (`regions()`, `find(address)`) |\n\
                    | `ShardKey` | `id()` and `hash` |\n\nafter `not_this()`\n";
        let names: Vec<(String, String)> = ["View regions", "View find", "ShardKey id", "ShardKey hash"]
            .iter()
            .map(|p| p.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())).unwrap())
            .collect();
        assert_eq!(table_names(text), names);
    }

    #[test]
    fn the_guides_type_table_matches_the_sdk() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let guide = std::fs::read_to_string(root.join(GUIDE)).unwrap();
        check_table(&root, &guide).unwrap();
        let wrong = guide.replace("`shard_id(shard)`", "`shard_name(shard)`");
        let error = check_table(&root, &wrong).unwrap_err().to_string();
        assert!(error.ends_with("`shard_name` (row `Allocations`)"), "{error}");
    }

    #[test]
    fn an_ellipsis_stands_for_lines_or_text() {
        let expected = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
        assert!(matches(&expected(&["…", "result: ok", "…"]), &["a", "b", "result: ok"]));
        assert!(matches(&expected(&["finished in …s"]), &["finished in 0.59s"]));
        assert!(matches(&expected(&["{\"bytes\":…}"]), &["{\"bytes\":137622}"]));
        assert!(!matches(&expected(&["result: ok"]), &["result: FAILED"]));
        assert!(!matches(&expected(&["a"]), &["a", "b"]));
        assert!(matches(&expected(&["… DEBUG x: …", "{}"]), &["2026 DEBUG x: moving", "{}"]));
    }
}
