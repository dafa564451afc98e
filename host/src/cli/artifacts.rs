//! The offline tools' engine: compiled strategies are cached in the user's
//! cache directory, as the node caches them in its data directory, so only
//! the first `inspect`, `conform`, `eval` or `simulate` of a component pays
//! for compiling it, and that first compile says so on stderr.
//!
//! The directory is `$SHARDALLOC_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/shardalloc/artifacts`, else
//! `~/.cache/shardalloc/artifacts`; `SHARDALLOC_CACHE_DIR=off` compiles
//! every time. A directory that cannot be used is reported once and the
//! tool goes on without it.

use std::path::PathBuf;
use std::sync::Arc;

use shardalloc::engine::component::sniff;
use shardalloc::engine::limits::MAX_COMPONENT_SIZE;
use shardalloc::engine::{Engine, EngineConfig};

/// Components from this size up are announced before their first compile
/// (a Rust or C strategy of a few hundred KB compiles in well under a second).
pub const ANNOUNCED_SIZE: usize = 1 << 20;
use shardalloc::strategy::StrategySource;

/// The cache directory the offline tools use, `None` when turned off or
/// when there is no home directory.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    match var("SHARDALLOC_CACHE_DIR") {
        Some(dir) if dir.as_os_str() == "off" => None,
        Some(dir) => Some(dir),
        None => var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|home| home.join(".cache")))
            .map(|base| base.join("shardalloc").join("artifacts")),
    }
}

/// An engine for one offline command, with the artifact cache when it can
/// be opened.
pub fn tool_engine() -> anyhow::Result<Arc<Engine>> {
    if let Some(dir) = cache_dir() {
        match Engine::new(EngineConfig { cache_dir: Some(dir.clone()), max_instances: 0 }) {
            Ok(engine) => return Ok(engine),
            Err(error) => eprintln!("warning: compiling without a cache: {error}"),
        }
    }
    Ok(Engine::for_tool()?)
}

/// Says on stderr that a component file of [`ANNOUNCED_SIZE`] or more is
/// about to be compiled (not found in the cache), with its size, since a
/// large one takes a while.
pub fn announce_compile(engine: &Engine, source: &StrategySource) {
    let StrategySource::File(path) = source else { return };
    let Ok(bytes) = std::fs::read(path) else { return };
    // Small or broken files compile in no time or not at all: no notice.
    let loadable = sniff(&bytes, MAX_COMPONENT_SIZE).is_ok();
    if !loadable || bytes.len() < ANNOUNCED_SIZE || engine.is_cached(&bytes) {
        return;
    }
    let mib = bytes.len() as f64 / (1024.0 * 1024.0);
    let later = match engine.cache_dir() {
        Some(dir) => format!("cached in {}, later runs skip this", dir.display()),
        None => "not cached (SHARDALLOC_CACHE_DIR=off)".to_owned(),
    };
    eprintln!("compiling {} ({mib:.1} MiB) with Cranelift; {later}", path.display());
}
