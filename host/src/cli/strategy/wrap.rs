//! `shardalloc strategy wrap`: a core module built with the SDK for
//! wasm32-unknown-unknown, wrapped into a strategy component (proved to load
//! before it is written).

use std::path::Path;

use anyhow::Context;
use serde_json::json;
use shardalloc::engine::Engine;

/// Wraps `module` into the component `out`.
pub(super) fn run(module: &Path, out: &Path) -> anyhow::Result<()> {
    let core = std::fs::read(module).with_context(|| format!("cannot read {}", module.display()))?;
    let component = shardalloc_guest_build::wrap_core_module(&core)?;
    // Prove it loads before writing it.
    let loaded = Engine::for_tool()?
        .load(&component, "", Default::default())
        .with_context(|| format!("the wrapped {} is not a usable strategy", module.display()))?;
    std::fs::write(out, &component).with_context(|| format!("cannot write {}", out.display()))?;
    let info = shardalloc::strategy::AllocationStrategy::info(&loaded);
    println!("{}", json!({ "component": out, "name": info.name, "version": info.version, "bytes": component.len() }));
    Ok(())
}
