//! The guard against a build that needs system tools: `cargo xtask test`
//! checks that the node builds with `protoc` and protobuf's include files
//! hidden (docs/development.md).
//!
//! 1. From `cargo metadata`, every package the node depends on (normal or
//!    build) whose build script depends on a crate that runs a system tool
//!    (protobuf compilers, pkg-config, cmake, bindgen, …) is named.
//! 2. Those packages, and `shardalloc-etcd` (where etcd's protocol lives,
//!    generated in advance), are built with `cargo check` in their own
//!    target directory (`target/sysfree`, kept between runs so only changed
//!    crates build again) with protoc hidden: `PROTOC` and the `PATH` lead
//!    to a `protoc` that fails naming the guard, and, as root, a private
//!    mount namespace also covers `/usr/bin/protoc` and `/usr/include/google`.
//!
//! The guard fails when a build reaches for them, naming what did.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

/// Crates whose use in a build script means the build runs a system tool
/// or reads system files.
pub const TOOL_CRATES: [&str; 12] = [
    "prost-build",
    "tonic-build",
    "tonic-prost-build",
    "protobuf-codegen",
    "protobuf-build",
    "protoc-rust",
    "grpcio-compiler",
    "cmake",
    "pkg-config",
    "bindgen",
    "system-deps",
    "vcpkg",
];

/// The crate that holds etcd's generated protocol code: always checked.
pub const PROTOCOL_CRATE: &str = "shardalloc-etcd";

/// What the hidden `protoc` says when anything runs it.
pub const HIDDEN: &str = "protoc is hidden by `cargo xtask test`'s guard: the build must not need it \
                          (docs/development.md); keep generated code in the repository instead";

/// Files hidden in the mount namespace, when there.
const HIDDEN_PATHS: [&str; 3] = ["/usr/bin/protoc", "/usr/include/google", "/usr/local/include/google"];

/// Runs the guard. See the module documentation.
pub fn check(root: &Path, target: &Path) -> anyhow::Result<()> {
    let reaching = reaching_packages(root)?;
    if !reaching.is_empty() {
        eprintln!(
            "xtask: the node depends on packages whose build scripts may run system tools: {}; \
             checking they build with protoc hidden",
            reaching.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let dir = target.join("sysfree");
    let shim = write_shim(&dir)?;
    let mut packages: Vec<String> = vec![PROTOCOL_CRATE.to_owned()];
    packages.extend(reaching.iter().cloned());
    // One check per package: cargo resolves `-p` against the first
    // package's graph when several are named.
    for package in &packages {
        let args: Vec<String> = vec![
            "check".into(),
            "--locked".into(),
            "--target-dir".into(),
            dir.join("target").display().to_string(),
            "-p".into(),
            package.clone(),
        ];
        if reaching.contains(package) {
            // Its build script runs again, whatever ran it before.
            let target_dir = dir.join("target");
            let target_dir = target_dir.to_str().context("a UTF-8 path")?;
            crate::run(root, &crate::cargo(), &["clean", "--target-dir", target_dir, "-p", package])?;
        }
        let mut command = hidden(&crate::cargo(), &args, &shim)?;
        command.current_dir(root);
        eprintln!("xtask: cargo {} (protoc hidden)", args.join(" "));
        let output = command.output().context("run cargo check with protoc hidden")?;
        if output.status.success() {
            continue;
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{stderr}");
        if stderr.contains("hidden by `cargo xtask test`") || stderr.to_lowercase().contains("protoc") {
            bail!(
                "the node's build reaches for protoc or protobuf's include files, which a fresh machine lacks: \
                 building {package} needs them (see the error above and docs/development.md)"
            );
        }
        bail!("`cargo check -p {package}` with protoc hidden failed ({}); see the error above", output.status);
    }
    eprintln!("xtask: the node builds with protoc and protobuf's include files hidden");
    Ok(())
}

/// Writes the failing `protoc` into `dir/bin`; its path.
fn write_shim(dir: &Path) -> anyhow::Result<PathBuf> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("create {}", bin.display()))?;
    let shim = bin.join("protoc");
    std::fs::write(&shim, format!("#!/bin/sh\ncat >&2 <<'END'\n{HIDDEN}\nEND\nexit 1\n"))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))?;
    Ok(shim)
}

/// `program args` with protoc hidden: the shim first on the PATH and as
/// `PROTOC`, no `PROTOC_INCLUDE`; as root (when `unshare` works) inside a
/// private mount namespace where the system's protoc and protobuf include
/// directories are covered too.
pub fn hidden(program: &str, args: &[String], shim: &Path) -> anyhow::Result<Command> {
    let bin = shim.parent().context("the shim is in a directory")?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)))?;
    let covered: Vec<&str> = HIDDEN_PATHS.iter().copied().filter(|p| Path::new(p).exists()).collect();
    let mut command = if !covered.is_empty() && namespaces_work() {
        // The shim over the program, an empty tmpfs over include dirs.
        let mut script = String::from("set -e\n");
        for path in &covered {
            if Path::new(path).is_dir() {
                script.push_str(&format!("mount -t tmpfs -o ro,size=4k shardalloc-guard {path}\n"));
            } else {
                script.push_str(&format!("mount --bind {} {path}\n", shim.display()));
            }
        }
        script.push_str("exec \"$@\"\n");
        let mut command = Command::new("unshare");
        command.args(["--mount", "--propagation", "private", "sh", "-c", &script, "guard", program]).args(args);
        command
    } else {
        let mut command = Command::new(program);
        command.args(args);
        command
    };
    command.env("PATH", path).env("PROTOC", shim).env_remove("PROTOC_INCLUDE");
    Ok(command)
}

/// True when this process can make a private mount namespace (root, and
/// `unshare` there).
fn namespaces_work() -> bool {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The packages in the node's dependencies (normal and build, any depth)
/// whose build script depends on one of [`TOOL_CRATES`] at any depth.
pub fn reaching_packages(root: &Path) -> anyhow::Result<BTreeSet<String>> {
    let metadata = crate::cargo_metadata(root, &[])?;
    reaching_in(&metadata, "shardalloc")
}

/// [`reaching_packages`] over a parsed `cargo metadata` document.
pub fn reaching_in(metadata: &Value, top: &str) -> anyhow::Result<BTreeSet<String>> {
    let packages = metadata["packages"].as_array().context("metadata has packages")?;
    let name_of: HashMap<&str, &str> =
        packages.iter().filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?))).collect();
    let has_build_script: BTreeSet<&str> = packages
        .iter()
        .filter(|p| {
            p["targets"].as_array().is_some_and(|targets| {
                targets.iter().any(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "custom-build")))
            })
        })
        .filter_map(|p| p["id"].as_str())
        .collect();
    // Each node's dependencies, split into build-only and the rest.
    let mut deps: HashMap<&str, Vec<(&str, bool)>> = HashMap::new();
    for node in metadata["resolve"]["nodes"].as_array().context("metadata has a resolve graph")? {
        let id = node["id"].as_str().context("a node has an id")?;
        let mut list = Vec::new();
        for dep in node["deps"].as_array().into_iter().flatten() {
            let Some(pkg) = dep["pkg"].as_str() else { continue };
            let kinds = dep["dep_kinds"].as_array().cloned().unwrap_or_default();
            let build = kinds.iter().any(|k| k["kind"] == "build");
            let normal = kinds.iter().any(|k| k["kind"].is_null());
            if build || normal {
                list.push((pkg, build && !normal));
            }
        }
        deps.insert(id, list);
    }
    let top_id = name_of.iter().find(|(_, name)| **name == top).map(|(id, _)| *id).context("the node's package")?;
    // Everything the node builds with: normal and build dependencies.
    let closure = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_owned()];
        while let Some(id) = stack.pop() {
            for (dep, _) in deps.get(id.as_str()).into_iter().flatten() {
                if seen.insert((*dep).to_owned()) {
                    stack.push((*dep).to_owned());
                }
            }
        }
        seen
    };
    let mut reaching = BTreeSet::new();
    for id in closure(top_id).iter().chain(std::iter::once(&top_id.to_owned())) {
        if !has_build_script.contains(id.as_str()) {
            continue;
        }
        let build_deps = deps.get(id.as_str()).into_iter().flatten().filter(|(_, build_only)| *build_only);
        let tools = build_deps.flat_map(|(dep, _)| {
            let mut all = closure(dep);
            all.insert((*dep).to_owned());
            all
        });
        if tools.into_iter().any(|dep| name_of.get(dep.as_str()).is_some_and(|name| TOOL_CRATES.contains(name))) {
            reaching.insert(name_of[id.as_str()].to_owned());
        }
    }
    Ok(reaching)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(id: &str, build_script: bool) -> Value {
        let mut targets = vec![serde_json::json!({"kind": ["lib"]})];
        if build_script {
            targets.push(serde_json::json!({"kind": ["custom-build"]}));
        }
        serde_json::json!({"id": id, "name": id, "targets": targets})
    }

    fn dep(id: &str, build: bool) -> Value {
        serde_json::json!({"pkg": id, "dep_kinds": [{"kind": if build { Value::from("build") } else { Value::Null }}]})
    }

    #[test]
    fn a_build_script_that_uses_a_protobuf_compiler_is_found_at_any_depth() {
        let metadata = serde_json::json!({
            "packages": [package("shardalloc", true), package("etcd-client", true), package("tonic", false),
                         package("tonic-prost-build", false), package("prost-build", false), package("ring", true),
                         package("cc", false)],
            "resolve": {"nodes": [
                {"id": "shardalloc", "deps": [dep("etcd-client", false), dep("ring", false)]},
                {"id": "etcd-client", "deps": [dep("tonic", false), dep("tonic-prost-build", true)]},
                {"id": "tonic-prost-build", "deps": [dep("prost-build", false)]},
                {"id": "ring", "deps": [dep("cc", true)]},
                {"id": "tonic", "deps": []}, {"id": "prost-build", "deps": []}, {"id": "cc", "deps": []},
            ]}
        });
        let found = reaching_in(&metadata, "shardalloc").unwrap();
        assert_eq!(found.into_iter().collect::<Vec<_>>(), ["etcd-client"]);
    }

    #[test]
    fn the_node_as_it_is_has_no_build_script_that_reaches_for_system_tools() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let found = reaching_packages(root).unwrap();
        assert!(found.is_empty(), "these build scripts may run system tools: {found:?}");
    }

    #[test]
    fn protoc_run_under_the_guard_fails_naming_it() {
        let dir = std::env::temp_dir().join(format!("shardalloc-guard-{}", std::process::id()));
        let shim = write_shim(&dir).unwrap();
        let args = vec!["-c".to_owned(), "protoc --version && ls /usr/include/google/protobuf 2>/dev/null".to_owned()];
        let output = hidden("sh", &args, &shim).unwrap().output().unwrap();
        assert!(!output.status.success(), "protoc ran under the guard");
        assert!(String::from_utf8_lossy(&output.stderr).contains("hidden by `cargo xtask test`"));
        let args = vec!["-c".to_owned(), "cat /usr/include/google/protobuf/descriptor.proto".to_owned()];
        let output = hidden("sh", &args, &shim).unwrap().output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!output.status.success(), "protobuf's include files were readable under the guard");
    }
}
