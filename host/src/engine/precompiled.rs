//! Compiling in one process and loading in another: the node compiles an
//! upload in a child process it can kill (Cranelift cannot be stopped
//! midway), which returns wasmtime's precompiled artifact; the node loads
//! that artifact into its own engine (and its artifact cache) and checks
//! and describes the component as it does any other.
//!
//! Safety: an artifact is machine code that wasmtime maps without
//! validating it. Only artifacts written by this binary's own compiler
//! process, read from a pipe the node holds, are loaded; wasmtime refuses
//! one built by an incompatible engine (another version or settings).

use std::sync::Arc;

use wasmtime::component::Component;

use super::Engine;
use super::cache::CacheOutcome;
use super::component::{Compiled, LoadError, sniff};
use super::limits::MAX_COMPONENT_SIZE;
use crate::strategy::source::digest_of as digest;

impl Engine {
    /// Compiles `bytes` to a precompiled artifact (the compiler process's
    /// job): nothing is loaded, checked or cached here.
    pub fn precompile(&self, bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
        sniff(bytes, MAX_COMPONENT_SIZE)?;
        self.wasmtime.precompile_component(bytes).map_err(|e| LoadError::Invalid(format!("{e:#}")))
    }

    /// Whether [`Engine::compile`] of `bytes` would run the compiler: the
    /// engine does not hold them and its cache has no artifact for them.
    pub fn needs_compiling(&self, bytes: &[u8]) -> bool {
        let digest = digest(bytes);
        self.held(&digest).is_none() && !self.cache.as_ref().is_some_and(|c| c.contains(&self.engine_hash, &digest))
    }

    /// Whether something in this process holds the compiled component of
    /// `digest`: a type's slot (active, history, shadow), a dry run or an
    /// activation under way.
    pub fn holds(&self, digest: &str) -> bool {
        self.held(digest).is_some()
    }

    /// Loads `bytes` from `artifact`, the output of [`Engine::precompile`]
    /// in this binary's compiler process: kept in the artifact cache when
    /// there is one, then checked and described like a compiled component.
    pub fn load_precompiled(&self, bytes: &[u8], artifact: &[u8]) -> Result<Arc<Compiled>, LoadError> {
        sniff(bytes, MAX_COMPONENT_SIZE)?;
        let digest = digest(bytes);
        if let Some(held) = self.held(&digest) {
            return Ok(held);
        }
        let refused = |e: wasmtime::Error| LoadError::Invalid(format!("the compiled artifact does not load: {e:#}"));
        let component = match &self.cache {
            Some(cache) => cache.store(&self.wasmtime, &self.engine_hash, &digest, artifact).map_err(|e| {
                if e.downcast_ref::<std::io::Error>().is_some() {
                    LoadError::Cache(format!("{e:#}"))
                } else {
                    refused(e)
                }
            })?,
            // SAFETY: see the module documentation: the artifact comes from
            // this binary's compiler process; wasmtime checks it was built
            // by a compatible engine.
            None => unsafe { Component::deserialize(&self.wasmtime, artifact) }.map_err(refused)?,
        };
        let compiled = self.finish(component, CacheOutcome::Compiled, digest, bytes.len())?;
        Ok(self.share(compiled))
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{Engine, EngineConfig};

    #[test]
    fn an_artifact_from_a_tool_engine_loads_into_a_node_engine_and_its_cache() {
        let bytes = crate::strategy::builtin::component_bytes("hash").unwrap();
        let artifact = Engine::for_tool().unwrap().precompile(bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let node = Engine::new(EngineConfig { cache_dir: Some(dir.path().into()), max_instances: 4 }).unwrap();
        assert!(node.needs_compiling(bytes));
        let compiled = node.load_precompiled(bytes, &artifact).unwrap();
        assert_eq!(compiled.info.name, "hash");
        assert!(node.holds(&compiled.digest));
        drop(compiled);
        assert!(!node.needs_compiling(bytes), "the artifact is in the cache");
        let again = Engine::new(EngineConfig { cache_dir: Some(dir.path().into()), max_instances: 4 }).unwrap();
        assert_eq!(again.compile(bytes).unwrap().cache, crate::engine::cache::CacheOutcome::Hit);
        assert!(node.load_precompiled(bytes, b"not an artifact").is_err());
    }
}
