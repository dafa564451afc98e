"""The load a region's shards carry: :class:`LoadMeter`.

A port of the Rust client's ``client/src/region/load.rs``: the load is
gathered between two heartbeats and turned into one
:class:`~shardalloc_client.wire.LoadReport` (protocol version 2).

Two forms, which add up:

- work done, :meth:`LoadMeter.record`: units (requests weighted by their
  cost, bytes, CPU milliseconds) summed over the window and reported as
  units per second;
- a gauge, :meth:`LoadMeter.set`: a rate the application measures itself,
  reported as it stands until it is set again or cleared.

A report names the ``top`` most loaded shards running here, most loaded
first, and sums the others into ``rest``. Shards that no longer run here
are dropped at each report, so the meter holds at most the shards recorded
in one window (and at most :data:`MAX_METERED_SHARDS`; more go into the
rest). Sans-I/O: the time (milliseconds) is given.
"""

import math
from collections.abc import Callable
from typing import Final

from ..wire import LoadReport, ShardLoad

__all__ = [
    "MAX_METERED_SHARDS",
    "MIN_LOAD_WINDOW_MS",
    "MAX_LOAD_WINDOW_MS",
    "MAX_LOAD_SHARDS",
    "LoadMeter",
]

MAX_METERED_SHARDS: Final = 100_000
"""Most shards the meter keeps apart in one window; the units of further
shards are counted in the report's ``rest``."""

MIN_LOAD_WINDOW_MS: Final = 500
"""The shortest window a load report may cover (the node refuses shorter ones)."""

MAX_LOAD_WINDOW_MS: Final = 60_000
"""The longest window a load report may cover."""

MAX_LOAD_SHARDS: Final = 1_024
"""Most shards a load report names one by one; the others go into its ``rest``."""


def _usable(value: float) -> bool:
    return math.isfinite(value) and value > 0.0


class LoadMeter:
    """Gathers a region's shard loads between reports. See the module
    documentation."""

    def __init__(self) -> None:
        """An unused meter: it reports nothing until first used."""
        self._work: dict[str, float] = {}
        """Units of work per shard in this window."""
        self._gauges: dict[str, float] = {}
        """Gauges per shard (units per second)."""
        self._overflow = 0.0
        """Units of shards past :data:`MAX_METERED_SHARDS` in this window."""
        self._since: int | None = None
        """When the window began; ``None`` until the meter is first used."""

    @property
    def since(self) -> int | None:
        """When the current window began; ``None`` until the meter is first used."""
        return self._since

    def gauges(self) -> dict[str, float]:
        """A copy of the gauges standing (shard → units per second)."""
        return dict(self._gauges)

    def record(self, shard: str, units: float, now: int) -> None:
        """Adds ``units`` of work done by ``shard`` (ignored unless finite and positive)."""
        if not _usable(units):
            return
        if self._since is None:
            self._since = now
        total = self._work.get(shard)
        if total is not None:
            self._work[shard] = total + units
        elif len(self._work) < MAX_METERED_SHARDS:
            self._work[shard] = units
        else:
            self._overflow += units

    def set(self, shard: str, rate: float, now: int) -> None:
        """Sets ``shard``'s gauge to ``rate`` units per second (0, or a value
        that is not finite and positive, clears it)."""
        if self._since is None:
            self._since = now
        if not _usable(rate):
            self._gauges.pop(shard, None)
        elif len(self._gauges) < MAX_METERED_SHARDS or shard in self._gauges:
            self._gauges[shard] = rate

    def report(self, now: int, runs: Callable[[str], bool], top: int) -> LoadReport | None:
        """The report of the window ending ``now``, over the shards ``runs``
        says run here, naming at most ``top``; the window starts again.

        ``None`` when the meter was never used, or the window is shorter
        than :data:`MIN_LOAD_WINDOW_MS` (it goes on). A window longer than
        :data:`MAX_LOAD_WINDOW_MS` (the region was cut off or paused) is
        dropped unreported: its work describes a placement that may be gone.
        """
        if self._since is None:
            return None
        window_ms = max(now - self._since, 0)
        if window_ms < MIN_LOAD_WINDOW_MS:
            return None
        work, overflow = self._work, self._overflow
        self._work, self._overflow, self._since = {}, 0.0, now
        self._gauges = {shard: rate for shard, rate in self._gauges.items() if runs(shard)}
        if window_ms > MAX_LOAD_WINDOW_MS:
            return None
        seconds = window_ms / 1000
        rates = dict(self._gauges)
        for shard, units in work.items():
            if runs(shard):
                rates[shard] = rates.get(shard, 0.0) + units / seconds
        # Most loaded first; ties by id (code point order is UTF-8 byte
        # order), so a report is a function of its input.
        ranked = sorted(rates.items(), key=lambda item: (-item[1], item[0]))
        named = min(len(ranked), max(top, 0))
        rest = sum(rate for _, rate in ranked[named:]) + overflow / seconds
        return LoadReport(
            window_ms=window_ms,
            shards=tuple(ShardLoad(shard=shard, load=load) for shard, load in ranked[:named]),
            rest=rest,
        )
