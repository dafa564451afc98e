//! The TypeScript client's README opens with a program; this runs it as
//! written. Its first ` ```ts ` block (plain JavaScript as much as
//! TypeScript, so Node runs it as a module) is saved beside the packed
//! package installed into an empty directory, a node of this build is
//! started on a free port, and the program runs with `SHARDALLOC_NODE`
//! pointing at it; what it prints must be what the README says it prints.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::children::Child;

/// How long the program may take (it runs about a second; 10× and more).
const PATIENCE: Duration = Duration::from_secs(120);

/// What the program prints, in order.
const EXPECTED: [&str; 3] = ["start tenant-7/order-42 1", "deliver tenant-7/order-42 hi", "stop tenant-7/order-42"];

/// The first fenced block of `language` in `markdown`.
fn first_block(markdown: &str, language: &str) -> Option<String> {
    let mut lines = markdown.lines();
    lines.by_ref().find(|line| line.trim() == format!("```{language}"))?;
    let body: Vec<&str> = lines.take_while(|line| line.trim() != "```").collect();
    Some(body.join("\n") + "\n")
}

/// Runs the README's first program in `app` (where the packed client is
/// installed) against a node started from `node`.
pub fn check(readme: &Path, app: &Path, node: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(readme).with_context(|| format!("read {}", readme.display()))?;
    let program = first_block(&text, "ts").with_context(|| format!("{} has no ```ts block", readme.display()))?;
    let script = app.join("quick-start.mjs");
    std::fs::write(&script, program)?;
    let data = app.join("node-data");
    let _ = std::fs::remove_dir_all(&data);
    let mut server = Child::spawn(
        Command::new(node)
            .args(["serve", "--listen", "127.0.0.1:0", "--type", "cart", "--data"])
            .arg(&data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )?;
    let stdout = server.take_stdout().context("the node's stdout")?;
    let url = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("shardalloc listening on ")?.split_whitespace().next().map(str::to_owned))
        .context("the node never said where it listens")?;
    let mut program = Command::new("node")
        .arg(&script)
        .env("SHARDALLOC_NODE", &url)
        .current_dir(app)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("run node")?;
    let deadline = Instant::now() + PATIENCE;
    while program.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = program.kill();
            bail!("the README's first program did not end within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = program.wait_with_output()?;
    drop(server);
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    if !out.status.success() || lines != EXPECTED {
        bail!(
            "the README's first program ({}) printed {lines:?} and exited {}, expected {EXPECTED:?}:\n{}",
            readme.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_block_of_a_language_is_read_whole() {
        let markdown = "# x\n```sh\nls\n```\n```ts\nconst a = 1;\n\nconst b = 2;\n```\n```ts\nlater\n```\n";
        assert_eq!(first_block(markdown, "ts").as_deref(), Some("const a = 1;\n\nconst b = 2;\n"));
        assert_eq!(first_block(markdown, "python"), None);
    }
}
