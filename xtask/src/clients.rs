//! The clients in other languages (`clients/`), as `cargo xtask test` and
//! `cargo xtask clients` check them: the TypeScript client's `npm ci`,
//! `npm test` (tsc's strict type check, then Node's test runner) and
//! `npm run test:node` (against this build's node), and its tarball
//! (`npm pack`) installed into an empty directory and imported; the Python
//! client installed into a fresh venv under `target/` (with its one
//! dependency, websockets), its unit tests and its tests against this
//! build's node run against the installed package, and mypy's strict
//! check. Both clients' REST types are checked against the node's bodies
//! (`contracts/rest/`): `npm test` writes every body as a literal of the
//! TypeScript type of the same name, which tsc refuses when a field is on
//! one side only; the Python unit tests read every body strictly as the
//! dataclass of the same name (`tests/test_rest_contract.py`). Each client's
//! tests are counted into the summary one by one.

mod quick_start;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::tests::Tally;

/// mypy, pinned: the type checker the Python client is held to.
const MYPY: &str = "mypy==1.13.0";

/// `cargo xtask clients`: every client's checks, and one summary line.
pub fn run(root: &Path) -> anyhow::Result<()> {
    crate::packages::ensure("clients")?;
    let mut tally = Tally { passed: 0, failed: 0, skipped: 0 };
    let mut failed = Vec::new();
    for (name, outcome) in checks(root) {
        match outcome {
            Ok(counted) => {
                tally.passed += counted.passed;
                tally.failed += counted.failed;
                tally.skipped += counted.skipped;
            }
            Err(error) => failed.push(format!("{name}: {error:#}")),
        }
    }
    println!("{}", tally.summary());
    if !failed.is_empty() {
        bail!("{}", failed.join("\n"));
    }
    Ok(())
}

/// Runs every client's checks; one outcome per client, with its tests
/// counted.
pub fn checks(root: &Path) -> Vec<(String, anyhow::Result<Tally>)> {
    let mut outcomes = Vec::new();
    for (name, check) in [("typescript", typescript as fn(&Path) -> anyhow::Result<Tally>), ("python", python)] {
        let started = Instant::now();
        eprintln!("xtask: client {name}: checking clients/{name}");
        let outcome = check(root);
        match &outcome {
            Ok(tally) => eprintln!("xtask: client {name}: {} in {:.0?}", tally.summary(), started.elapsed()),
            Err(error) => eprintln!("xtask: client {name}: FAILED: {error:#}"),
        }
        outcomes.push((format!("client {name}"), outcome));
    }
    outcomes
}

/// Runs `command` and answers whether it succeeded and what it printed
/// (stdout, then stderr); the output is echoed when it failed.
fn captured(command: &mut Command) -> anyhow::Result<(bool, String)> {
    eprintln!("xtask: {command:?}");
    let out = command.output().with_context(|| format!("could not run {:?}", command.get_program()))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        eprintln!("{text}");
    }
    Ok((out.status.success(), text))
}

/// Runs `command` and answers what it printed; fails naming the command
/// when it fails.
fn output(command: &mut Command) -> anyhow::Result<String> {
    let (ok, text) = captured(command)?;
    if !ok {
        bail!("{command:?} failed");
    }
    Ok(text)
}

/// The number that begins what follows `prefix` on the first line
/// starting with it (`# pass 44`, `Ran 44 tests in 0.1s`).
fn count(text: &str, prefix: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix(prefix))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

fn typescript(root: &Path) -> anyhow::Result<Tally> {
    let dir = root.join("clients/typescript");
    output(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir))?;
    let mut tally = Tally { passed: 0, failed: 0, skipped: 0 };
    // The unit tests, then the tests against a real node (this build's).
    let node = node_binary(root)?;
    for script in [["test"].as_slice(), ["run", "test:node"].as_slice()] {
        let (ok, text) = captured(Command::new("npm").args(script).env("SHARDALLOC_BIN", &node).current_dir(&dir))?;
        let counted = Tally {
            passed: count(&text, "# pass ").unwrap_or(0),
            failed: count(&text, "# fail ").unwrap_or(0),
            skipped: count(&text, "# skipped ").unwrap_or(0),
        };
        if !ok {
            bail!("npm {} failed: {}", script.join(" "), counted.summary());
        }
        if counted.passed == 0 {
            bail!("npm {} ran no test", script.join(" "));
        }
        tally.passed += counted.passed;
        tally.skipped += counted.skipped;
    }
    // The tarball installs into an empty directory and imports.
    let scratch = crate::target_dir(root).join("clients/typescript-pack");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).context("a scratch directory")?;
    pack_before_install_says_what_to_do(&dir, &scratch)?;
    output(Command::new("npm").args(["pack", "--pack-destination"]).arg(&scratch).current_dir(&dir))?;
    let tarball = std::fs::read_dir(&scratch)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|e| e == "tgz"))
        .context("npm pack made no tarball")?;
    let app = scratch.join("app");
    std::fs::create_dir_all(&app)?;
    std::fs::write(app.join("package.json"), r#"{"name":"app","private":true,"type":"module"}"#)?;
    output(Command::new("npm").args(["install", "--no-audit", "--no-fund"]).arg(&tarball).current_dir(&app))?;
    // The main entry holds the application's API only; the codecs and the
    // core are subpaths.
    let script = "import * as main from '@shardalloc/client';\n\
                  import { decodeNode, encodeNode } from '@shardalloc/client/wire';\n\
                  import { RegionCore } from '@shardalloc/client/core';\n\
                  import { encodePeer } from '@shardalloc/client/peer';\n\
                  const m = { type: 'ShardHomeEpoch', shard: 's', home: 'r', epoch: 7 };\n\
                  if (JSON.stringify(decodeNode(encodeNode(m))) !== JSON.stringify(m)) process.exit(1);\n\
                  if (typeof main.Region !== 'function' || typeof main.AdminClient !== 'function') process.exit(2);\n\
                  if ('RegionCore' in main || 'encodeNode' in main) process.exit(3);\n\
                  if (typeof RegionCore !== 'function' || typeof encodePeer !== 'function') process.exit(4);\n";
    output(Command::new("node").args(["--input-type=module", "-e", script]).current_dir(&app)).context(
        "the packed client does not import in an empty directory (its main entry with the public API only, \
         its wire, peer and core subpaths)",
    )?;
    quick_start::check(&dir.join("README.md"), &app, &node_binary(root)?)?;
    tally.passed += 1;
    Ok(tally)
}

/// `npm pack` in a copy without `node_modules` (a fresh checkout, as the
/// README's install steps begin) fails naming `npm ci`, not with a bare
/// "tsc: not found".
fn pack_before_install_says_what_to_do(dir: &Path, scratch: &Path) -> anyhow::Result<()> {
    let copy = scratch.join("fresh");
    std::fs::create_dir_all(&copy)?;
    for entry in ["package.json", "package-lock.json", "tsconfig.json", "src", "scripts"] {
        output(Command::new("cp").arg("-r").arg(dir.join(entry)).arg(&copy))?;
    }
    // Its failure is the expected outcome: not echoed as `captured` would.
    let out = Command::new("npm").args(["pack", "--dry-run"]).current_dir(&copy).output().context("npm pack")?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() || !text.contains("run `npm ci` first") {
        bail!("npm pack before npm ci should fail naming `npm ci`; it printed:\n{text}");
    }
    std::fs::remove_dir_all(&copy)?;
    Ok(())
}

/// The node the clients' tests start: this workspace's debug build, built
/// when missing (`cargo xtask test` has built it by then).
fn node_binary(root: &Path) -> anyhow::Result<std::path::PathBuf> {
    let binary = crate::target_dir(root).join("debug/shardalloc");
    if !binary.is_file() {
        crate::run(root, &crate::cargo(), &["build", "--locked", "-p", "shardalloc"])?;
    }
    Ok(binary)
}

fn python(root: &Path) -> anyhow::Result<Tally> {
    let dir = root.join("clients/python");
    let venv = crate::target_dir(root).join("clients/python-venv");
    let _ = std::fs::remove_dir_all(&venv);
    output(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        .context("python3 -m venv (Debian: python3-venv) could not make a venv")?;
    let pip = venv.join("bin/pip");
    output(Command::new(&pip).args(["install", "--quiet", "--disable-pip-version-check", MYPY]))?;
    output(Command::new(&pip).args(["install", "--quiet", "--disable-pip-version-check"]).arg(&dir))
        .context("pip install clients/python")?;
    // The tests run from their directories against the installed package:
    // the unit tests, then those against this build's node (and, for the
    // type served in three languages, the Rust client's region example and
    // the TypeScript client built above).
    let node = node_binary(root)?;
    crate::run(root, &crate::cargo(), &["build", "--locked", "-p", "shardalloc-client", "--example", "peer_region"])?;
    let mut ran = 0;
    for tests in ["tests", "tests_node"] {
        let (ok, text) = captured(
            Command::new(venv.join("bin/python"))
                .args(["-m", "unittest", "discover", "-s", ".", "-v"])
                .env("SHARDALLOC_BIN", &node)
                .current_dir(dir.join(tests)),
        )?;
        let counted = count(&text, "Ran ").unwrap_or(0);
        if !ok {
            bail!("the Python client's {tests} failed ({counted} ran)");
        }
        if counted == 0 {
            bail!("unittest ran nothing in clients/python/{tests}");
        }
        ran += counted;
    }
    output(Command::new(venv.join("bin/mypy")).args(["--strict", "src", "tests", "tests_node"]).current_dir(&dir))
        .context("mypy --strict found problems")?;
    Ok(Tally { passed: ran, failed: 0, skipped: 0 })
}
