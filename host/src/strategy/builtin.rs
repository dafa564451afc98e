//! The table of built-in strategies: compiled natively into the host and
//! embedded as components (built by `build.rs` from the crates under
//! `strategies/`). Loading a component from this table, a file or the store
//! is the engine's job (`crate::engine::source`).

use super::native::NativeStrategy;
use super::{AllocationStrategy, StrategyError};

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The built-in strategies' names.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTIN_COMPONENTS.iter().map(|(name, _)| *name)
}

/// The embedded component of a built-in.
pub fn component_bytes(name: &str) -> Option<&'static [u8]> {
    BUILTIN_COMPONENTS.iter().find(|(n, _)| *n == name).map(|(_, bytes)| *bytes)
}

/// A built-in compiled into the host, configured.
pub fn native(name: &str, config: &str) -> Option<Result<Box<dyn AllocationStrategy>, StrategyError>> {
    fn boxed<S: shardalloc_guest::Strategy + Send + 'static>(
        s: S,
        config: &str,
    ) -> Result<Box<dyn AllocationStrategy>, StrategyError> {
        Ok(Box::new(NativeStrategy::new(s, config)?))
    }
    Some(match name {
        "least-shard" => boxed(shardalloc_strategy_least_shard::LeastShard::default(), config),
        "hash" => boxed(shardalloc_strategy_hash::RendezvousHash::default(), config),
        "capacity" => boxed(shardalloc_strategy_capacity::Capacity::default(), config),
        "zone" => boxed(shardalloc_strategy_zone::Zone::default(), config),
        "load-balance" => boxed(shardalloc_strategy_load_balance::LoadBalance::default(), config),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    fn workspace() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ sits in the workspace")
    }

    /// Adding a built-in is one line in `host/build.rs`'s list; everything
    /// else it needs is checked here against that list.
    #[test]
    fn every_builtin_is_a_strategies_crate_with_a_native_twin_and_a_section_in_the_docs() {
        let listed: BTreeSet<&str> = BUILTIN_PACKAGES.iter().map(|(_, package)| *package).collect();
        let mut crates = BTreeSet::new();
        for entry in std::fs::read_dir(workspace().join("strategies")).expect("read strategies/") {
            let manifest = std::fs::read_to_string(entry.expect("an entry").path().join("Cargo.toml"))
                .expect("every directory under strategies/ is a crate");
            let name = manifest
                .lines()
                .find_map(|line| line.strip_prefix("name = \"")?.strip_suffix('"'))
                .expect("a package name")
                .to_owned();
            crates.insert(name);
        }
        let listed_owned: BTreeSet<String> = listed.iter().map(|p| p.to_string()).collect();
        assert_eq!(crates, listed_owned, "the crates under strategies/ and host/build.rs's BUILTINS differ");

        let root = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("read Cargo.toml");
        let host = std::fs::read_to_string(workspace().join("host/Cargo.toml")).expect("read host/Cargo.toml");
        let docs = std::fs::read_to_string(workspace().join("docs/strategies.md")).expect("read docs/strategies.md");
        for (name, package) in BUILTIN_PACKAGES {
            let dir = package.strip_prefix("shardalloc-strategy-").expect("a strategy package's name");
            assert!(root.contains(&format!("\"strategies/{dir}\"")), "{package} is not a workspace member");
            assert!(host.contains(&format!("{package} = ")), "{package} is not a dependency of the host");
            assert!(component_bytes(name).is_some(), "{name} is not embedded");
            assert!(native(name, "").is_some(), "{name} has no native twin in builtin::native");
            assert!(docs.contains(&format!("\n## {name}\n")), "docs/strategies.md has no section `## {name}`");
        }
        assert_eq!(names().collect::<BTreeSet<_>>(), BUILTIN_PACKAGES.iter().map(|(n, _)| *n).collect());
    }
}
