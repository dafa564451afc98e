"""latency-aware-py: the component's entry point. It exports the WIT
interface ``shardalloc:strategy/allocator@0.3.0`` as the class ``Allocator``.
The logic is in latency.py and kept.py (no bindings there, so unittest can
test it)."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import Info, Move

import latency
from kept import KeptView

# State lives at module level. componentize-py creates a new Allocator for
# every call, so anything kept on `self` is gone by the next call. After a
# fault the host starts a fresh instance (fresh module state too), calls
# `configure` and sends it the whole view again (`load_view`).
_config = latency.DEFAULT_CONFIG
_view = KeptView()
_last_error = ""


def _log(level: str, message: str, fields) -> None:
    host.log(host.Level[level.upper()], message, list(fields))


class Allocator(exports.Allocator):
    # A WIT `result` error is returned by raising componentize_py_types.Err.
    # Any other exception (a bug, or a kept.ViewError from a batch that does
    # not fit the copy) traps: the host counts a fault, falls back to its
    # built-in strategy for that call and rebuilds the instance.

    def describe(self) -> Info:
        return Info(
            name=latency.NAME,
            version=latency.VERSION,
            description=latency.DESCRIPTION,
            config_schema=latency.CONFIG_SCHEMA,
            # It reads no shard id and no attribute: the host sends neither.
            needs_shard_ids=False,
            needs_shard_attributes=False,
        )

    def configure(self, config: str) -> None:
        global _config
        try:
            parsed = latency.parse_config(config)
        except latency.StrategyError as e:
            raise Err(str(e)) from None
        # Only a valid configuration replaces the one in force.
        _config = parsed

    def load_view(self, view) -> int:
        return _view.load(view)

    def apply(self, changes) -> int:
        return _view.apply(changes)

    def allocate(self, shard: int, hash: int, requester, cause, now: int) -> int:
        # Scalars in, one s64 out: the region index, or -1 with the reason
        # kept for `last_error`. Why the shard needs a home (`cause`) and the
        # host's time (`now`) do not change this strategy's choice.
        global _last_error
        try:
            return latency.allocate(_config, _view, requester)
        except latency.StrategyError as e:
            _last_error = str(e)
            return -1

    def last_error(self) -> str:
        return _last_error

    def rebalance(self, now: int) -> list:
        # The shards to move, each without a destination: `allocate` places
        # it again once it stopped.
        try:
            return [Move(shard=h, to=None) for h in latency.rebalance(_config, _view, _log)]
        except latency.StrategyError as e:
            raise Err(str(e)) from None
