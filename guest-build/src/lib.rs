//! # shardalloc-guest-build: strategy crates → WebAssembly components
//!
//! Shared by the node's build script (which embeds the built-in strategies)
//! and by `cargo xtask` (which builds any strategy crate on request):
//!
//! - [`Toolchain::detect`]: finds a Rust toolchain that can build
//!   `wasm32-unknown-unknown`: the rustup toolchain (adding the target with a
//!   time limit when missing), else Debian's `rustc-web` driven as
//!   `/usr/bin/cargo` with `-Zbuild-std`;
//! - [`build_components`]: runs a nested `cargo build --profile guest` with
//!   its own target directory and wraps each core module into a component
//!   with the `wit-component` crate (no external CLI);
//! - [`wrap_core_module`]: the wrapping step alone.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The target strategies are compiled for.
pub const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// The cargo profile for guests (declared in the workspace manifest).
pub const GUEST_PROFILE: &str = "guest";

/// How long `rustup target add` may take before the Debian fallback is tried.
pub const RUSTUP_TIME_LIMIT: Duration = Duration::from_secs(180);

/// A failure to build components, with what to do about it.
#[derive(Debug)]
pub struct BuildError(pub String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

fn err(message: impl Into<String>) -> BuildError {
    BuildError(message.into())
}

/// How to invoke cargo for the wasm target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Toolchain {
    /// The rustup toolchain with the wasm32 target installed.
    Rustup {
        /// The cargo to run.
        cargo: PathBuf,
    },
    /// Debian's rustc-web: `/usr/bin/cargo`, `RUSTC=/usr/bin/rustc`,
    /// `RUSTC_BOOTSTRAP=1` and `-Zbuild-std=std,panic_abort`.
    DebianWeb,
}

impl Toolchain {
    /// Finds a toolchain that can build for wasm32, adding the rustup target
    /// when it is missing. Installs nothing else: `cargo xtask setup`
    /// installs Debian's fallback packages (listed in docs/development.md)
    /// when this fails, and calls it again.
    pub fn detect() -> Result<Self, BuildError> {
        let cargo = std::env::var_os("CARGO").map(PathBuf::from).unwrap_or_else(|| "cargo".into());
        if rustup_has_target() {
            return Ok(Toolchain::Rustup { cargo });
        }
        if rustup_add_target() && rustup_has_target() {
            return Ok(Toolchain::Rustup { cargo });
        }
        if debian_web_ready() {
            return Ok(Toolchain::DebianWeb);
        }
        Err(err(format!(
            "no toolchain can build {WASM_TARGET}: `rustup target add {WASM_TARGET}` failed and Debian's \
             rustc-web is not installed; run `cargo xtask setup` (or `rustup target add {WASM_TARGET}`, or \
             install the `wasm-fallback` packages of docs/development.md)"
        )))
    }

    fn command(&self) -> Command {
        match self {
            Toolchain::Rustup { cargo } => {
                let mut cmd = Command::new(cargo);
                cmd.arg("build");
                cmd
            }
            Toolchain::DebianWeb => {
                let mut cmd = Command::new("/usr/bin/cargo");
                cmd.arg("build")
                    .arg("-Zbuild-std=std,panic_abort")
                    .env("RUSTC", "/usr/bin/rustc")
                    .env("RUSTC_BOOTSTRAP", "1")
                    .env_remove("RUSTUP_TOOLCHAIN");
                cmd
            }
        }
    }
}

fn rustc() -> PathBuf {
    std::env::var_os("RUSTC").map(PathBuf::from).unwrap_or_else(|| "rustc".into())
}

fn rustup_has_target() -> bool {
    let Ok(out) = Command::new(rustc()).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    sysroot.join("lib/rustlib").join(WASM_TARGET).join("lib").is_dir()
}

fn rustup_add_target() -> bool {
    let Ok(mut child) =
        Command::new("rustup").args(["target", "add", WASM_TARGET]).stdout(Stdio::null()).stderr(Stdio::null()).spawn()
    else {
        return false;
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if started.elapsed() < RUSTUP_TIME_LIMIT => std::thread::sleep(Duration::from_millis(200)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

fn debian_web_ready() -> bool {
    Path::new("/usr/bin/cargo").exists()
        && Path::new("/usr/bin/rustc").exists()
        && Command::new("/usr/bin/rustc")
            .args(["--print", "target-list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l == WASM_TARGET))
            .unwrap_or(false)
        && Path::new("/usr/lib/rustlib/src/rust/library").is_dir()
}

/// Wraps a core module built with the SDK (which embeds the contract's
/// component type) into a component. The result has no imports beyond the
/// contract's `host` interface.
pub fn wrap_core_module(core: &[u8]) -> Result<Vec<u8>, BuildError> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|e| e.validate(true).encode())
        .map_err(|e| err(format!("wrapping the core module into a component failed: {e:#}")))
}

/// One built component.
#[derive(Clone, Debug)]
pub struct Built {
    /// The package it was built from.
    pub package: String,
    /// The component file.
    pub path: PathBuf,
}

/// Builds `packages` of the workspace at `workspace` for wasm32 with the
/// guest profile, in `target_dir`, and writes each as a component to
/// `target_dir/components/<package>.wasm`.
pub fn build_components(
    toolchain: &Toolchain,
    workspace: &Path,
    packages: &[&str],
    target_dir: &Path,
) -> Result<Vec<Built>, BuildError> {
    let mut cmd = toolchain.command();
    cmd.current_dir(workspace)
        .arg("--target")
        .arg(WASM_TARGET)
        .arg("--profile")
        .arg(GUEST_PROFILE)
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--locked")
        // The outer build's settings are for the host, not for the guests.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        .env_remove("CARGO_MANIFEST_DIR")
        // Under `cargo clippy` the outer build runs clippy-driver as a
        // wrapper; the guests are built, not linted.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CLIPPY_CONF_DIR");
    for package in packages {
        cmd.arg("-p").arg(package);
    }
    let output = cmd.output().map_err(|e| err(format!("could not run cargo for the wasm build: {e}")))?;
    if !output.status.success() {
        return Err(err(format!(
            "building strategies for {WASM_TARGET} failed ({:?}):\n{}",
            toolchain,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let core_dir = target_dir.join(WASM_TARGET).join(GUEST_PROFILE);
    let out_dir = target_dir.join("components");
    std::fs::create_dir_all(&out_dir).map_err(|e| err(format!("creating {}: {e}", out_dir.display())))?;
    packages
        .iter()
        .map(|package| {
            let core_path = core_dir.join(format!("{}.wasm", package.replace('-', "_")));
            let core = std::fs::read(&core_path).map_err(|e| err(format!("reading {}: {e}", core_path.display())))?;
            let component = wrap_core_module(&core)?;
            let path = out_dir.join(format!("{package}.wasm"));
            std::fs::write(&path, component).map_err(|e| err(format!("writing {}: {e}", path.display())))?;
            Ok(Built { package: (*package).to_owned(), path })
        })
        .collect()
}

/// The root of the cargo target directory that holds `out_dir` (a build
/// script's `OUT_DIR`): the nearest ancestor with cargo's `CACHEDIR.TAG`.
pub fn target_root(out_dir: &Path) -> Option<PathBuf> {
    out_dir.ancestors().find(|p| p.join("CACHEDIR.TAG").is_file()).map(Path::to_path_buf)
}
