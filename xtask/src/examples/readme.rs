//! Following a README: its ` ```sh ` lines are run, and its ` ```console `
//! transcripts (`$ command` and the output under it) are replayed and
//! compared.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// One fenced block of a README.
#[derive(Debug, PartialEq, Eq)]
pub enum Block {
    /// Commands to run, one per line.
    Sh(Vec<String>),
    /// `$ command` lines, each followed by the output it must print.
    Console(Vec<(String, Vec<String>)>),
}

/// The `sh` and `console` blocks of a Markdown text, in order.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let fence = line.trim_start();
        let kind = match fence.strip_prefix("```") {
            Some("sh") => "sh",
            Some("console") => "console",
            _ => continue,
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
        if kind == "sh" {
            let commands =
                body.iter().map(|l| l.trim()).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned);
            blocks.push(Block::Sh(commands.collect()));
        } else {
            blocks.push(Block::Console(transcript(&body)));
        }
    }
    blocks
}

/// A `console` block's lines as `$ command` lines, each with the output
/// under it.
pub fn transcript(body: &[&str]) -> Vec<(String, Vec<String>)> {
    let mut transcript: Vec<(String, Vec<String>)> = Vec::new();
    for line in body {
        match line.strip_prefix("$ ") {
            Some(command) => transcript.push((command.to_owned(), Vec::new())),
            None => {
                if let Some((_, output)) = transcript.last_mut() {
                    output.push((*line).to_owned());
                }
            }
        }
    }
    transcript
}

/// Follows `dir/README.md`: runs its commands in `dir` with `bin_dir` first
/// on `PATH` and compares every transcript.
pub fn follow(root: &Path, dir: &Path, bin_dir: &Path) -> anyhow::Result<()> {
    let readme = std::fs::read_to_string(dir.join("README.md")).context("read README.md")?;
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_owned()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let shell = |command: &str| {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(command)
            .current_dir(dir)
            .env("PATH", &path)
            // Commands say `target/…` as an author's shell would.
            .env_remove("CARGO_TARGET_DIR")
            // Compiled components are cached inside the build tree.
            .env("SHARDALLOC_CACHE_DIR", crate::target_dir(root).join("examples-cache"))
            .env("SHARDALLOC_LOG", "warn");
        sh
    };
    for block in blocks(&readme) {
        match block {
            Block::Sh(commands) => {
                for command in commands {
                    eprintln!("xtask:   $ {command}");
                    let status = shell(&command).status().with_context(|| format!("run `{command}`"))?;
                    if !status.success() {
                        bail!("`{command}` failed ({status})");
                    }
                }
            }
            Block::Console(transcript) => {
                for (command, expected) in transcript {
                    eprintln!("xtask:   $ {command}");
                    let output = shell(&command).output().with_context(|| format!("run `{command}`"))?;
                    // A failing command's transcript shows its error.
                    let shown = if output.status.success() {
                        String::from_utf8_lossy(&output.stdout).into_owned()
                    } else {
                        String::from_utf8_lossy(&output.stderr)
                            .lines()
                            .filter(|l| !l.starts_with("compiling "))
                            .map(|l| format!("{l}\n"))
                            .collect()
                    };
                    let got: Vec<&str> = shown.lines().collect();
                    if got != expected {
                        bail!(
                            "`{command}` printed\n{}\nbut the README shows\n{}\n(stderr: {})",
                            got.join("\n"),
                            expected.join("\n"),
                            String::from_utf8_lossy(&output.stderr)
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn blocks_are_read_in_order() {
        let text = "# T\n```sh\n# a comment\nnpm ci\n\nnpm test\n```\ntext\n```console\n$ shardalloc strategy eval\n{\"region\":\"a\"}\n$ true\n```\n```json\n{}\n```\n";
        assert_eq!(
            blocks(text),
            vec![
                Block::Sh(vec!["npm ci".to_owned(), "npm test".to_owned()]),
                Block::Console(vec![
                    ("shardalloc strategy eval".to_owned(), vec!["{\"region\":\"a\"}".to_owned()]),
                    ("true".to_owned(), vec![]),
                ]),
            ]
        );
    }
}
