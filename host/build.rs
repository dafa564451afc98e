//! Builds the built-in strategies as WebAssembly components and embeds
//! them: a nested cargo build (own target directory under the workspace
//! target, `guest` profile), wrapped with wit-component. The generated
//! `builtins.rs` lists them for `strategy::builtin`. Test fixtures are
//! built alongside and left in `OUT_DIR` for the host's tests only.

use std::path::PathBuf;

use shardalloc_guest_build::{Toolchain, build_components, target_root};

/// The one list of built-in strategies: (name, package under
/// `strategies/`). `strategy::builtin`'s table is generated from it, and a
/// test (`builtin::tests`) checks it against the workspace's `strategies/`
/// crates, the host's native table and docs/strategies.md.
const BUILTINS: &[(&str, &str)] = &[
    ("least-shard", "shardalloc-strategy-least-shard"),
    ("hash", "shardalloc-strategy-hash"),
    ("capacity", "shardalloc-strategy-capacity"),
    ("zone", "shardalloc-strategy-zone"),
    ("load-balance", "shardalloc-strategy-load-balance"),
];

/// Built with the built-ins but not embedded: components for the host's tests.
const FIXTURES: &[(&str, &str)] = &[("misbehaving", "shardalloc-test-misbehaving")];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().expect("host/ sits in the workspace").to_path_buf();
    for watched in ["wit", "guest-sdk", "strategies", "tests/misbehaving-strategy", "Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let guest_target = target_root(&out_dir).unwrap_or_else(|| out_dir.clone()).join("guest");
    let toolchain = Toolchain::detect().unwrap_or_else(|e| panic!("{e}"));
    let packages: Vec<&str> = BUILTINS.iter().chain(FIXTURES).map(|(_, p)| *p).collect();
    let built = build_components(&toolchain, &workspace, &packages, &guest_target).unwrap_or_else(|e| panic!("{e}"));
    let mut listing = String::from(
        "/// The built-in strategies: (name, component bytes).\npub const BUILTIN_COMPONENTS: &[(&str, &[u8])] = &[\n",
    );
    for ((name, _), built) in BUILTINS.iter().chain(FIXTURES).zip(&built) {
        let dest = out_dir.join(format!("{name}.wasm"));
        std::fs::copy(&built.path, &dest).unwrap_or_else(|e| panic!("copying {}: {e}", built.path.display()));
        if FIXTURES.iter().any(|(n, _)| n == name) {
            continue;
        }
        listing.push_str(&format!("    ({name:?}, include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{name}.wasm\"))),\n"));
    }
    listing.push_str("];\n");
    listing.push_str(
        "/// The built-in strategies' packages: (name, package).\npub const BUILTIN_PACKAGES: &[(&str, &str)] = &[\n",
    );
    for (name, package) in BUILTINS {
        listing.push_str(&format!("    ({name:?}, {package:?}),\n"));
    }
    listing.push_str("];\n");
    std::fs::write(out_dir.join("builtins.rs"), listing).expect("writing builtins.rs");
}
