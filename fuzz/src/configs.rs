//! Each built-in strategy's configuration parser, and the zone strategy's
//! signal parser: any text is a configuration or an error naming the
//! problem, never a panic. The first byte chooses the parser.

/// Configuration text for one of the parsers.
pub fn strategy_configs(data: &[u8]) {
    let Some((choice, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let error = match choice % 6 {
        0 => shardalloc_strategy_least_shard::Config::parse(&text).err(),
        1 => shardalloc_strategy_hash::HashConfig::parse(&text).err(),
        2 => shardalloc_strategy_capacity::CapacityConfig::parse(&text).err(),
        3 => shardalloc_strategy_zone::ZoneConfig::parse(&text).err(),
        4 => shardalloc_strategy_zone::ZoneMap::parse(&text).err(),
        _ => shardalloc_strategy_load_balance::LoadBalanceConfig::parse(&text).err(),
    };
    if let Some(error) = error {
        assert!(!error.is_empty(), "an empty error for {text:?}");
    }
}
