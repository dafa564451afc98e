"""latency-aware-py: the decision logic, with no generated bindings, so that
``python3 -m unittest`` can test it without a host.

- allocate: among the allocatable regions (up, not proxy-only, not
  draining), only those in the requester's zone when it has one and any of
  them shares it; of those, only the ones within ``max_imbalance`` shards of
  the emptiest; of those, the lowest latency metric, then the fewest shards,
  then the lowest region index.
- rebalance: when the fullest allocatable region holds more than
  ``max_imbalance`` shards above the emptiest one, move
  ``min(max_moves, gap // 2)`` of its oldest shards. One round at a time.

Both read the strategy's copy of the view (kept.py): its regions, metric
matrix, each region's count, the hand-offs in progress and each region's
shards in allocation order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from kept import KeptView

NAME = "latency-aware-py"
VERSION = "0.3.0"
DESCRIPTION = (
    "Places a shard on the lowest-latency region near the emptiest, preferring the requester's zone, "
    "and moves a few of the oldest shards off the fullest region when the imbalance exceeds a limit."
)

U32_MAX = 4294967295

CONFIG_SCHEMA = json.dumps(
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "metric": {"type": "string", "minLength": 1, "default": "latency_ms", "description": "the metric column to read"},
            "zone_label": {"type": "string", "minLength": 1, "default": "zone", "description": "the region label compared with the requester's"},
            "max_imbalance": {"type": "integer", "minimum": 1, "maximum": U32_MAX, "default": 2, "description": "rebalance when the gap is larger"},
            "max_moves": {"type": "integer", "minimum": 1, "maximum": U32_MAX, "default": 5, "description": "most shards one round moves"},
        },
    },
    separators=(",", ":"),
)


class StrategyError(Exception):
    """An error the strategy returns to the host (the ``err`` case of a WIT
    ``result``). app.py turns it into ``componentize_py_types.Err``; any other
    exception is a bug and traps."""


@dataclass(frozen=True)
class Config:
    metric: str = "latency_ms"
    zone_label: str = "zone"
    max_imbalance: int = 2
    max_moves: int = 5


DEFAULT_CONFIG = Config()

_STRING_KEYS = ("metric", "zone_label")
_INTEGER_KEYS = ("max_imbalance", "max_moves")
_KNOWN_KEYS = _STRING_KEYS + _INTEGER_KEYS


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def parse_config(text: str) -> Config:
    """Parses a configuration. Empty text or ``null`` means the defaults;
    anything else must be a JSON object of known keys. Raises StrategyError
    naming the first bad key (unknown keys first, in sorted order, then the
    known keys in schema order), so the answer does not depend on key order."""
    trimmed = text.strip()
    if trimmed in ("", "null"):
        return DEFAULT_CONFIG
    try:
        value = json.loads(trimmed)
    except ValueError as e:
        raise StrategyError(f"invalid config: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise StrategyError(f"invalid config: must be a JSON object, got {_json(value)}")
    unknown = sorted(k for k in value if k not in _KNOWN_KEYS)
    if unknown:
        raise StrategyError(f'invalid config: unknown key "{unknown[0]}" (known keys: {", ".join(_KNOWN_KEYS)})')
    settings = {}
    for key in _STRING_KEYS:
        if key in value:
            v = value[key]
            if not isinstance(v, str) or v == "":
                raise StrategyError(f"invalid config: {key} must be a non-empty string, got {_json(v)}")
            settings[key] = v
    for key in _INTEGER_KEYS:
        if key in value:
            v = value[key]
            # JSON Schema's "integer" accepts 3.0; bool is an int in Python but not in JSON.
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= U32_MAX:
                raise StrategyError(f"invalid config: {key} must be an integer from 1 to {U32_MAX}, got {_json(value[key])}")
            settings[key] = v
    return Config(**settings)


def _candidates(view: KeptView) -> list:
    return [i for i, r in enumerate(view.regions) if r.allocatable]


def latency_of(view: KeptView, metric: str, index: int) -> float:
    """The region's value of ``metric``; +inf when absent or NaN."""
    if metric not in view.metric_names:
        return math.inf
    column = view.metric_names.index(metric)
    position = index * len(view.metric_names) + column
    if position >= len(view.metrics):
        return math.inf
    value = view.metrics[position]
    return math.inf if math.isnan(value) else value


def _best(config: Config, view: KeptView, pool: list) -> Optional[int]:
    """The best of ``pool``: only regions within ``max_imbalance`` shards of
    the emptiest of the pool take part (so allocation never undoes what
    rebalance evens out), and of those the lowest (latency, shard count,
    index)."""
    if not pool:
        return None
    ceiling = min(view.counts[i] for i in pool) + config.max_imbalance
    near = [i for i in pool if view.counts[i] <= ceiling]
    return min(near, key=lambda i: (latency_of(view, config.metric, i), view.counts[i], i))


def _loaded(view: KeptView) -> KeptView:
    if view.generation is None:
        raise StrategyError("no view yet")
    return view


def allocate(config: Config, view: KeptView, requester: Optional[int]) -> int:
    """Picks a home: the region index. Raises StrategyError when no region
    is allocatable."""
    view = _loaded(view)
    pool = _candidates(view)
    label = config.zone_label
    zone = None
    if requester is not None and requester < len(view.regions):
        zone = view.regions[requester].labels.get(label)
    if zone is not None:
        in_zone = _best(config, view, [i for i in pool if view.regions[i].labels.get(label) == zone])
        if in_zone is not None:
            return in_zone
    best = _best(config, view, pool)
    if best is None:
        raise StrategyError("no allocatable region")
    return best


Log = Callable[[str, str, Sequence], None]


def rebalance(config: Config, view: KeptView, log: Log = lambda *_: None) -> list:
    """Picks shard handles to move: the fullest region's oldest shards that
    are not pinned. ``log(level, message, fields)`` receives one "debug"
    record when shards move. Raises StrategyError before the first view."""
    view = _loaded(view)
    if view.moving > 0:
        return []
    pool = _candidates(view)
    if len(pool) < 2:
        return []
    counts = view.counts
    most = min(pool, key=lambda i: (-counts[i], i))
    least = min(pool, key=lambda i: (counts[i], i))
    diff = counts[most] - counts[least]
    if diff <= config.max_imbalance:
        return []
    n = min(config.max_moves, diff // 2)
    handles = view.unpinned_shards(most)[:n]
    log(
        "debug",
        "moving the oldest shards of the fullest region",
        [("from", view.regions[most].address), ("count", str(len(handles))), ("gap", str(diff))],
    )
    return handles
