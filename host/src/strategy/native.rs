//! Strategies compiled into the host, called directly.

use std::sync::Arc;

use shardalloc_guest::host::LogSink;
use shardalloc_guest::{LogRecord, RegionId, ShardKey, Strategy};

use super::{AllocationStrategy, ClusterView, Info, RebalanceMove, StrategyError};

/// A [`Strategy`] linked into the node, behind [`AllocationStrategy`].
/// Its log records go to the node's log.
pub struct NativeStrategy<S> {
    strategy: S,
    info: Info,
    /// Forwards the strategy's records to the node's log under its name.
    sink: LogSink,
}

impl<S: Strategy> NativeStrategy<S> {
    /// Wraps a strategy and applies its configuration.
    pub fn new(mut strategy: S, config: &str) -> Result<Self, StrategyError> {
        strategy.configure(config).map_err(StrategyError::Refused)?;
        let info = strategy.info();
        let name = info.name.clone();
        let sink: LogSink =
            Arc::new(move |r: &LogRecord| crate::strategy::emit_strategy_log(&name, r.level, &r.message, &r.fields));
        Ok(NativeStrategy { strategy, info, sink })
    }

    fn logged<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        let previous = shardalloc_guest::host::set_log_sink(Some(self.sink.clone()));
        let result = f(&self.strategy);
        shardalloc_guest::host::set_log_sink(previous);
        result
    }
}

impl<S: Strategy + Send> AllocationStrategy for NativeStrategy<S> {
    fn info(&self) -> &Info {
        &self.info
    }

    fn allocate(&mut self, view: &ClusterView, shard: &str, requester: Option<&str>) -> Result<String, StrategyError> {
        let requester = match requester {
            Some(address) => Some(RegionId(
                view.region_index(address)
                    .ok_or_else(|| StrategyError::Invalid(format!("requester {address} is not a known region")))?
                    as u32,
            )),
            None => None,
        };
        let key = ShardKey::new(shard).with_cause(view.cause()).with_attributes(view.attributes().clone());
        let region =
            self.logged(|s| s.allocate(view.strategy_view(), &key, requester)).map_err(StrategyError::Refused)?;
        view.regions().get(region.index()).map(|r| r.address.clone()).ok_or_else(|| {
            StrategyError::Invalid(format!("region index {} out of range ({} regions)", region.0, view.regions().len()))
        })
    }

    fn rebalance(&mut self, view: &ClusterView) -> Result<Vec<RebalanceMove>, StrategyError> {
        let table = view.allocations();
        let moves = self.logged(|s| s.rebalance(view.strategy_view(), &table)).map_err(StrategyError::Refused)?;
        moves
            .into_iter()
            .map(|m| {
                let Some(shard) = table.get(m.shard.handle) else {
                    let (handle, len) = (m.shard.handle, table.len());
                    return Err(StrategyError::Invalid(format!("shard handle {handle} out of range ({len} shards)")));
                };
                let to = match m.to {
                    None => None,
                    Some(region) => {
                        Some(view.regions().get(region.index()).map(|r| r.address.clone()).ok_or_else(|| {
                            let regions = view.regions().len();
                            StrategyError::Invalid(format!(
                                "region index {} out of range ({regions} regions)",
                                region.0
                            ))
                        })?)
                    }
                };
                Ok(RebalanceMove { shard: table.shard_id(shard).into_owned(), to })
            })
            .collect()
    }
}
