//! The layout rules `cargo xtask test` enforces, so later work keeps the
//! shape the node-shell reshape gave the code:
//!
//! - no file under `host/src/server/` (tests aside) is over
//!   [`MAX_SERVER_FILE_LINES`] lines;
//! - the host's modules import only downwards: cli → server → {store →
//!   coordinator, engine} → strategy (each module's forbidden imports are in
//!   [`LAYERS`]);
//! - no OpenAPI JSON is committed: the node generates its document.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The longest a file of the server may be.
pub const MAX_SERVER_FILE_LINES: usize = 400;

/// Each host module and the modules it must not import (`crate::NAME`).
pub const LAYERS: &[(&str, &[&str])] = &[
    ("strategy", &["engine", "coordinator", "store", "server", "cli"]),
    ("engine", &["coordinator", "store", "server", "cli"]),
    ("coordinator", &["engine", "store", "server", "cli"]),
    ("store", &["engine", "server", "cli"]),
    ("server", &["cli"]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn is_test_file(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == "tests")
        || path.file_stem().is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
}

/// Every rule broken in the tree at `root`, as lines naming file and rule.
pub fn violations(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let src = root.join("host/src");
    let mut server = Vec::new();
    rust_files(&src.join("server"), &mut server).context("read host/src/server")?;
    for path in server.iter().filter(|p| !is_test_file(p)) {
        let lines = std::fs::read_to_string(path)?.lines().count();
        if lines > MAX_SERVER_FILE_LINES {
            found.push(format!(
                "{}: {lines} lines; files of the server stay under {MAX_SERVER_FILE_LINES} (split it by job)",
                path.strip_prefix(root).unwrap_or(path).display()
            ));
        }
    }
    for (module, forbidden) in LAYERS {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files).with_context(|| format!("read host/src/{module}"))?;
        for path in &files {
            let text = std::fs::read_to_string(path)?;
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for other in *forbidden {
                    if code.contains(&format!("crate::{other}::")) || code.contains(&format!("crate::{other};")) {
                        found.push(format!(
                            "{}:{}: {module} imports crate::{other}; dependencies run cli → server → {{store → coordinator, engine}} → strategy",
                            path.strip_prefix(root).unwrap_or(path).display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    let listed = Command::new("git").args(["ls-files"]).current_dir(root).output();
    if let Ok(listed) = listed
        && listed.status.success()
    {
        for file in String::from_utf8_lossy(&listed.stdout).lines() {
            let name = file.rsplit('/').next().unwrap_or(file).to_ascii_lowercase();
            if name.contains("openapi") && name.ends_with(".json") {
                found.push(format!("{file}: a committed OpenAPI document; the node generates /v1/openapi.json"));
            }
        }
    }
    Ok(found)
}

/// Fails naming every broken rule.
pub fn check(root: &Path) -> anyhow::Result<()> {
    let found = violations(root)?;
    if !found.is_empty() {
        bail!("the code's shape breaks {} rule(s):\n  {}", found.len(), found.join("\n  "));
    }
    eprintln!("xtask: shape ok (server files ≤ {MAX_SERVER_FILE_LINES} lines, imports downwards, no OpenAPI JSON)");
    Ok(())
}
