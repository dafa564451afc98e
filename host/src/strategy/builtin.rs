//! The built-in strategies: compiled natively into the host and embedded as
//! components (built by `build.rs` from the crates under `strategies/`).

use std::path::Path;
use std::sync::Arc;

use super::native::NativeStrategy;
use super::{AllocationStrategy, StrategyError};
use crate::engine::Engine;
use crate::engine::instance::Sandboxed;
use crate::engine::limits::Limits;
use crate::engine::load::{Compiled, LoadError};

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
        _ => return None,
    })
}

/// Why `--strategy NAME|FILE.wasm` could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadStrategyError {
    /// Neither a built-in nor a file.
    #[error("unknown strategy {0:?}: the built-ins are {list}; or give the path of a .wasm component", list = names().collect::<Vec<_>>().join(", "))]
    Unknown(String),
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The component could not be loaded.
    #[error("{source_name}: {error}")]
    Load {
        /// The built-in name or path.
        source_name: String,
        /// What went wrong.
        error: LoadError,
    },
}

/// Reads a built-in by name, or a component file by path.
pub fn bytes(spec: &str) -> Result<std::borrow::Cow<'static, [u8]>, LoadStrategyError> {
    if let Some(bytes) = component_bytes(spec) {
        return Ok(bytes.into());
    }
    let path = Path::new(spec);
    let looks_like_path = spec.ends_with(".wasm") || spec.contains('/') || path.exists();
    if !looks_like_path {
        return Err(LoadStrategyError::Unknown(spec.to_owned()));
    }
    Ok(std::fs::read(path).map_err(|error| LoadStrategyError::Read { path: spec.to_owned(), error })?.into())
}

/// Compiles a built-in (by name) or a component file (by path).
pub fn compile(engine: &Engine, spec: &str) -> Result<Arc<Compiled>, LoadStrategyError> {
    engine.compile(&bytes(spec)?).map_err(|error| LoadStrategyError::Load { source_name: spec.to_owned(), error })
}

/// Loads a built-in (by name) or a component file (by path), configured and
/// sandboxed with `limits`.
pub fn load(engine: &Arc<Engine>, spec: &str, config: &str, limits: Limits) -> Result<Sandboxed, LoadStrategyError> {
    let compiled = compile(engine, spec)?;
    engine
        .instantiate(&compiled, config, limits)
        .map_err(|error| LoadStrategyError::Load { source_name: spec.to_owned(), error })
}
