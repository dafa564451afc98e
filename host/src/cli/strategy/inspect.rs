//! `shardalloc strategy inspect`: a strategy's name, version, description,
//! configuration schema and contract, as one JSON line.

use serde_json::json;
use shardalloc::engine::limits::Limits;

use super::load;

/// Prints what the strategy says about itself.
pub(super) fn run(strategy: &str, config: Option<&str>) -> anyhow::Result<()> {
    let loaded = load(strategy, config, Limits::default())?;
    let info = shardalloc::strategy::AllocationStrategy::info(&loaded);
    let schema: serde_json::Value =
        serde_json::from_str(&info.config_schema).unwrap_or_else(|_| info.config_schema.clone().into());
    println!(
        "{}",
        json!({
            "name": info.name,
            "version": info.version,
            "description": info.description,
            "needs_shard_names": info.needs_shard_names,
            "needs_shard_attributes": info.needs_shard_attributes,
            "config_schema": schema,
            "contract": loaded.compiled().contract.name(),
        })
    );
    Ok(())
}
