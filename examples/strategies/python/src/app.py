"""latency-aware-py: the component's entry point. It exports the WIT
interface ``shardalloc:strategy/allocator@0.1.0`` as the class ``Allocator``.
The logic is in latency.py (no bindings there, so unittest can test it)."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import Info

import latency

# State lives at module level. componentize-py creates a new Allocator for
# every call, so anything kept on `self` is gone by the next call. After a
# fault the host starts a fresh instance (fresh module state too) and calls
# `configure` and `set_topology` again.
_config = latency.DEFAULT_CONFIG
_view = None


def _log(level: str, message: str, fields) -> None:
    host.log(host.Level[level.upper()], message, list(fields))


class Allocator(exports.Allocator):
    # A WIT `result` error is returned by raising componentize_py_types.Err.
    # Any other exception traps: the host counts a fault and falls back to its
    # built-in strategy, and the message is lost.

    def describe(self) -> Info:
        return Info(
            name=latency.NAME,
            version=latency.VERSION,
            description=latency.DESCRIPTION,
            config_schema=latency.CONFIG_SCHEMA,
            needs_shard_names=False,
        )

    def configure(self, config: str) -> None:
        global _config
        try:
            parsed = latency.parse_config(config)
        except latency.StrategyError as e:
            raise Err(str(e)) from None
        # Only a valid configuration replaces the one in force.
        _config = parsed

    def set_topology(self, topology) -> None:
        global _view
        _view = latency.view_of(topology)

    def allocate(self, shard, requester, loads) -> int:
        try:
            return latency.allocate(_config, _view, shard, requester, loads)
        except latency.StrategyError as e:
            raise Err(str(e)) from None

    def rebalance(self, loads, allocations) -> list:
        try:
            return latency.rebalance(_config, _view, loads, allocations, _log)
        except latency.StrategyError as e:
            raise Err(str(e)) from None
