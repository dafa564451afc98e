//! The layout rules `cargo xtask test` enforces, so later work keeps the
//! shape the node-shell reshape gave the code:
//!
//! - no file under `host/src/server/` (tests aside) is over
//!   [`MAX_SERVER_FILE_LINES`] lines;
//! - the host's modules import only downwards: cli → server → {store →
//!   coordinator, engine} → strategy → clock (each module's forbidden
//!   imports are in [`LAYERS`]);
//! - no OpenAPI JSON is committed: the node generates its document;
//! - `shardalloc-proto`, the crate of types other programs depend on, has
//!   no I/O crate ([`IO_CRATES`]) among its normal dependencies at any
//!   depth, with every feature on (read from `cargo metadata`);
//! - the node's core ([`CORE_MODULES`]: coordinator, strategy layer,
//!   engine, store) never names the client crate (`shardalloc_client`): it
//!   takes the wire and REST types from `shardalloc_proto`;
//! - the sans-I/O modules ([`SANS_IO_MODULES`]: coordinator, strategy
//!   layer) name no I/O crate.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

/// The longest a file of the server may be.
pub const MAX_SERVER_FILE_LINES: usize = 400;

/// Each host module and the modules it must not import (`crate::NAME`).
pub const LAYERS: &[(&str, &[&str])] = &[
    ("clock", &["strategy", "engine", "coordinator", "store", "server", "cli"]),
    ("strategy", &["engine", "coordinator", "store", "server", "cli"]),
    ("engine", &["coordinator", "store", "server", "cli"]),
    ("coordinator", &["engine", "store", "server", "cli"]),
    ("store", &["engine", "server", "cli"]),
    ("server", &["cli"]),
];

/// The crate of types other programs depend on: no I/O below it.
pub const PROTO_CRATE: &str = "shardalloc-proto";

/// Crates that do I/O (sockets, async runtimes, HTTP, TLS, WebSockets,
/// WebAssembly, storage, etcd), by package name.
pub const IO_CRATES: &[&str] = &[
    "tokio",
    "mio",
    "reqwest",
    "hyper",
    "axum",
    "rustls",
    "tokio-tungstenite",
    "tungstenite",
    "wasmtime",
    "redb",
    "etcd-client",
    "shardalloc-etcd",
];

/// The client crate, as Rust code names it.
pub const CLIENT_CRATE: &str = "shardalloc_client";

/// The host's core modules: they take wire and REST types from
/// `shardalloc_proto`, never from [`CLIENT_CRATE`].
pub const CORE_MODULES: &[&str] = &["coordinator", "strategy", "engine", "store"];

/// The host's modules that do no I/O: no path of theirs names an
/// [`IO_CRATES`] crate.
pub const SANS_IO_MODULES: &[&str] = &["coordinator", "strategy"];

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
        let single = src.join(format!("{module}.rs"));
        if single.is_file() {
            files.push(single);
        } else {
            rust_files(&src.join(module), &mut files).with_context(|| format!("read host/src/{module}"))?;
        }
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
                            "{}:{}: {module} imports crate::{other}; dependencies run cli → server → {{store → coordinator, engine}} → strategy → clock",
                            path.strip_prefix(root).unwrap_or(path).display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    found.extend(core_names_client(root)?);
    found.extend(sans_io_names_io(root)?);
    found.extend(proto_io_dependencies(root)?);
    let listed = Command::new("git").args(["ls-files"]).current_dir(root).output();
    if let Ok(listed) = listed
        && listed.status.success()
    {
        for file in String::from_utf8_lossy(&listed.stdout).lines() {
            let name = file.rsplit('/').next().unwrap_or(file).to_ascii_lowercase();
            if name.contains("openapi") && name.ends_with(".json") {
                found.push(format!("{file}: a committed OpenAPI document; the node generates /v1/openapi.json"));
            }
            found.extend(outside_references(root, file));
        }
    }
    Ok(found)
}

/// The places where a source or document file points readers at a folder
/// beside the repository (`../shared/…`), which a clone does not have.
fn outside_references(root: &Path, file: &str) -> Vec<String> {
    const TEXT: [&str; 7] = [".rs", ".md", ".ts", ".py", ".js", ".toml", ".txt"];
    if !TEXT.iter().any(|ext| file.ends_with(ext)) || file.ends_with("xtask/src/shape.rs") {
        return Vec::new();
    }
    let Ok(text) = std::fs::read_to_string(root.join(file)) else { return Vec::new() };
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains("../shared/") || line.contains("../shared`"))
        .map(|(n, _)| format!("{file}:{}: points at ../shared, outside the repository; say what it is instead", n + 1))
        .collect()
}

/// Calls `visit(module, shown path, line number, line)` for every line of
/// every Rust file under `host/src/{module}`, for each of `modules`, in
/// path order.
fn module_lines(root: &Path, modules: &[&str], mut visit: impl FnMut(&str, String, usize, &str)) -> anyhow::Result<()> {
    for module in modules {
        let mut files = Vec::new();
        rust_files(&root.join("host/src").join(module), &mut files)
            .with_context(|| format!("read host/src/{module}"))?;
        files.sort();
        for path in &files {
            let text = std::fs::read_to_string(path)?;
            let shown = path.strip_prefix(root).unwrap_or(path).display().to_string();
            for (n, line) in text.lines().enumerate() {
                visit(module, shown.clone(), n + 1, line);
            }
        }
    }
    Ok(())
}

/// The rule that the core takes wire types from proto: every line of a file
/// under `host/src/{CORE_MODULES}` that names [`CLIENT_CRATE`] (comments
/// too: a path in a doc link is a dependency as well).
pub fn core_names_client(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    module_lines(root, CORE_MODULES, |module, path, n, line| {
        if line.contains(CLIENT_CRATE) {
            found.push(format!(
                "{path}:{n}: {module} names {CLIENT_CRATE}; the core (coordinator, strategy, engine, store) \
                 takes wire and REST types from shardalloc_proto, never from the client crate"
            ));
        }
    })?;
    Ok(found)
}

/// Whether `code` names the crate `name` as a path (`name::`, not
/// `other_name::` or `a::name::`).
fn names_crate(code: &str, name: &str) -> bool {
    let needle = format!("{name}::");
    code.match_indices(&needle)
        .any(|(at, _)| !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':'))
}

/// The rule that the sans-I/O modules stay so: every code line (comments
/// aside) of a file under `host/src/{SANS_IO_MODULES}` that names an
/// [`IO_CRATES`] crate's path.
pub fn sans_io_names_io(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    module_lines(root, SANS_IO_MODULES, |module, path, n, line| {
        let code = line.trim_start();
        if code.starts_with("//") {
            return;
        }
        for io in IO_CRATES {
            let name = io.replace('-', "_");
            if names_crate(code, &name) {
                found.push(format!(
                    "{path}:{n}: {module} names the I/O crate {name}; the coordinator and the strategy layer \
                     do no I/O (the server does it for them)"
                ));
            }
        }
    })?;
    Ok(found)
}

/// The rule that proto does no I/O, from `cargo metadata` (every feature
/// on): one line per [`IO_CRATES`] crate among [`PROTO_CRATE`]'s normal
/// dependencies, with the path that brings it in.
pub fn proto_io_dependencies(root: &Path) -> anyhow::Result<Vec<String>> {
    let metadata = crate::cargo_metadata(root, &["--all-features"])?;
    let paths = forbidden_dependencies(&metadata, PROTO_CRATE, IO_CRATES)?;
    Ok(paths
        .into_iter()
        .map(|(name, path)| {
            format!(
                "{PROTO_CRATE} depends on the I/O crate {name} ({}); proto holds types only: serde and \
                 postcard, no I/O at any depth",
                path.join(" → ")
            )
        })
        .collect())
}

/// Each crate of `forbidden` among `top`'s normal dependencies at any depth
/// (through `resolve.nodes` of a parsed `cargo metadata` document; dev and
/// build dependencies aside), with the shortest path to it from `top`. The
/// walk stops at a forbidden crate: what it brings in is its own matter.
pub fn forbidden_dependencies(
    metadata: &Value,
    top: &str,
    forbidden: &[&str],
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let packages = metadata["packages"].as_array().context("metadata has packages")?;
    let name_of: HashMap<&str, &str> =
        packages.iter().filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?))).collect();
    let mut normal: HashMap<&str, Vec<&str>> = HashMap::new();
    for node in metadata["resolve"]["nodes"].as_array().context("metadata has a resolve graph")? {
        let id = node["id"].as_str().context("a node has an id")?;
        let deps =
            node["deps"].as_array().into_iter().flatten().filter(|dep| {
                dep["dep_kinds"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
            });
        normal.insert(id, deps.filter_map(|dep| dep["pkg"].as_str()).collect());
    }
    let top_id = name_of
        .iter()
        .filter(|(_, name)| **name == top)
        .map(|(id, _)| *id)
        .min()
        .with_context(|| format!("no package {top} in cargo metadata"))?;
    // Breadth first, so each crate is reached by a shortest path.
    let mut parent: HashMap<&str, &str> = HashMap::new();
    let mut queue = VecDeque::from([top_id]);
    let mut found = BTreeMap::new();
    while let Some(id) = queue.pop_front() {
        for dep in normal.get(id).into_iter().flatten() {
            if *dep == top_id || parent.contains_key(dep) {
                continue;
            }
            parent.insert(*dep, id);
            let name = name_of.get(dep).copied().unwrap_or(*dep);
            if !forbidden.contains(&name) {
                queue.push_back(*dep);
                continue;
            }
            let mut path = vec![name.to_owned()];
            let mut at = *dep;
            while let Some(up) = parent.get(at) {
                path.push(name_of.get(up).copied().unwrap_or(up).to_owned());
                at = up;
            }
            path.reverse();
            found.entry(name.to_owned()).or_insert(path);
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
    eprintln!(
        "xtask: shape ok (server files ≤ {MAX_SERVER_FILE_LINES} lines, imports downwards, no OpenAPI JSON, \
         no I/O under {PROTO_CRATE}, the core free of {CLIENT_CRATE})"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(id: &str) -> Value {
        serde_json::json!({"id": id, "name": id})
    }

    fn dep(id: &str, kind: Option<&str>) -> Value {
        serde_json::json!({"pkg": id, "dep_kinds": [{"kind": kind}]})
    }

    #[test]
    fn the_dependency_walk_finds_an_io_crate_at_any_depth_through_normal_dependencies_only() {
        let metadata = serde_json::json!({
            "packages": [package("shardalloc-proto"), package("serde"), package("utoipa"), package("axum"),
                         package("tokio"), package("proptest"), package("cc"), package("reqwest"), package("mio")],
            "resolve": {"nodes": [
                {"id": "shardalloc-proto", "deps": [dep("serde", None), dep("utoipa", None),
                                                    dep("proptest", Some("dev")), dep("cc", Some("build"))]},
                {"id": "utoipa", "deps": [dep("serde", None), dep("axum", None)]},
                {"id": "serde", "deps": [dep("mio", None)]},
                {"id": "axum", "deps": [dep("tokio", None)]},
                {"id": "proptest", "deps": [dep("reqwest", None)]},
                {"id": "cc", "deps": [dep("reqwest", None)]},
                {"id": "mio", "deps": []}, {"id": "tokio", "deps": []}, {"id": "reqwest", "deps": []},
            ]}
        });
        let found = forbidden_dependencies(&metadata, "shardalloc-proto", IO_CRATES).unwrap();
        // reqwest only under dev and build dependencies; tokio only under axum.
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [
                ("axum".to_owned(), vec!["shardalloc-proto".to_owned(), "utoipa".into(), "axum".into()]),
                ("mio".to_owned(), vec!["shardalloc-proto".to_owned(), "serde".into(), "mio".into()]),
            ]
        );
        let clean = serde_json::json!({
            "packages": [package("shardalloc-proto"), package("serde")],
            "resolve": {"nodes": [{"id": "shardalloc-proto", "deps": [dep("serde", None)]}, {"id": "serde", "deps": []}]}
        });
        assert!(forbidden_dependencies(&clean, "shardalloc-proto", IO_CRATES).unwrap().is_empty());
    }

    #[test]
    fn a_core_module_naming_the_client_crate_or_an_io_crate_is_found() {
        let root = std::env::temp_dir().join(format!("shardalloc-shape-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for module in CORE_MODULES {
            std::fs::create_dir_all(root.join("host/src").join(module)).unwrap();
        }
        std::fs::write(
            root.join("host/src/coordinator/event.rs"),
            "use shardalloc_proto::protocol::Millis;\n// tokio:: in a comment is fine\nuse tokio::sync::mpsc;\n",
        )
        .unwrap();
        std::fs::write(root.join("host/src/store/mod.rs"), "\npub use shardalloc_client::api::ShardId;\n").unwrap();
        std::fs::write(root.join("host/src/strategy/mod.rs"), "let a = my_tokio::x(); let b = crate::redb::y();\n")
            .unwrap();
        let client = core_names_client(&root).unwrap();
        let io = sans_io_names_io(&root).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(client.len(), 1, "{client:?}");
        assert!(client[0].starts_with("host/src/store/mod.rs:2: store names shardalloc_client"), "{client:?}");
        assert_eq!(io.len(), 1, "{io:?}");
        assert!(io[0].starts_with("host/src/coordinator/event.rs:3: coordinator names the I/O crate tokio"), "{io:?}");
    }

    #[test]
    fn the_tree_as_it_is_keeps_proto_and_the_core_free_of_io_and_the_client() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut found = proto_io_dependencies(root).unwrap();
        found.extend(core_names_client(root).unwrap());
        found.extend(sans_io_names_io(root).unwrap());
        assert!(found.is_empty(), "{found:#?}");
    }
}
