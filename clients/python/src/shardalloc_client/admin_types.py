"""The REST API's bodies the admin client reads and writes, as dataclasses.

The same JSON the node serves (its OpenAPI document at
``/v1/openapi.json``; golden bodies in ``contracts/rest/``), with the
node's camelCase keys as snake_case fields (``shardId`` is ``shard_id``;
a decision event's ``type`` is ``entity_type``). The client reads each
answer into its dataclass (:mod:`shardalloc_client._json`), skipping keys a
newer node may add; ``tests/test_rest_contract.py`` reads every golden body
strictly, so a field the node has and a class lacks fails the client's
tests.
"""

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

__all__ = [
    "ActivateRequest",
    "Activation",
    "DecisionEvent",
    "DrainOfType",
    "DrainState",
    "Placement",
    "Placements",
    "PlacementsWritten",
    "RebalanceResponse",
    "Regions",
    "RegionSummary",
    "Rejected",
    "ShardState",
    "AttributesWritten",
    "Strategies",
    "StoredStrategy",
    "ShadowCounts",
    "StrategyState",
    "StreamedEvent",
]


@dataclass(frozen=True)
class Placement:
    """One placement: ``shard_id`` pinned to the region ``target``."""

    shard_id: str
    target: str


@dataclass(frozen=True)
class Placements:
    """A page of placements; ``next`` is the cursor of the next page, ``None`` on the last."""

    placements: list[Placement]
    next: str | None = None


@dataclass(frozen=True)
class PlacementsWritten:
    """What a placement write stored, and the type's placement count after it."""

    written: list[Placement]
    total: int


@dataclass(frozen=True)
class Rejected:
    """A shard a rebalance request did not accept, and why (``already-moving``, ``no-home``, …)."""

    shard_id: str
    reason: str


@dataclass(frozen=True)
class RebalanceResponse:
    """The answer to a rebalance request."""

    accepted: list[str]
    rejected: list[Rejected]


@dataclass(frozen=True)
class ShardState:
    """Where a shard is and why."""

    shard_id: str
    home: str | None
    reason: Literal["placement", "strategy", "fallback"] | None
    detail: str | None
    since_ms: int | None
    moving: bool
    placement: str | None
    load: float
    moved_ms: int | None
    epoch: int | None
    """The home's epoch (rises at every change of home); ``None`` without a home."""
    attributes: dict[str, str] = field(default_factory=dict)
    """Its attributes (``tenant``, ``tier``, …): what operators wrote; empty when none."""


@dataclass(frozen=True)
class AttributesWritten:
    """The answer to an attribute write: the shards whose attributes changed."""

    changed: list[str]


@dataclass(frozen=True)
class RegionSummary:
    """A region in brief: its status per type, its shard count, whether it drains."""

    address: str
    types: dict[str, str]
    shards: int
    draining: bool


@dataclass(frozen=True)
class Regions:
    """A page of regions."""

    regions: list[RegionSummary]
    next: str | None = None


@dataclass(frozen=True)
class DrainOfType:
    """A drain's progress in one type."""

    entity_type: str = field(metadata={"json": "type"})
    draining: bool
    shards_left: int
    hand_offs_in_flight: int
    started_at_ms: int | None


@dataclass(frozen=True)
class DrainState:
    """A drain's progress."""

    address: str
    draining: bool
    shards_left: int
    hand_offs_in_flight: int
    started_at_ms: int | None
    types: list[DrainOfType]


@dataclass(frozen=True)
class StoredStrategy:
    """An uploaded strategy component (or a built-in one)."""

    digest: str
    name: str
    version: str
    size: int
    active_in: list[str]
    contract: str


@dataclass(frozen=True)
class Strategies:
    """A page of strategies."""

    strategies: list[StoredStrategy]
    next: str | None = None


@dataclass(frozen=True)
class ActivateRequest:
    """What to activate: a built-in's name or an upload's digest, its configuration."""

    strategy: str
    config: Any = None
    force: bool | None = None


@dataclass(frozen=True)
class Activation:
    """One activation of a strategy."""

    name: str
    version: str
    cause: str
    at_ms: int
    digest: str | None = None
    config: Any = None


@dataclass(frozen=True)
class ShadowCounts:
    """What one past shadow candidate saw."""

    candidate: str
    calls: int
    disagreements: int


@dataclass(frozen=True)
class StrategyState:
    """A type's strategy: the active one and its history (and a shadow, when one is set)."""

    active: Activation
    history: list[Activation]
    next: str | None = None
    shadow: Activation | None = None
    shadow_calls: int | None = None
    shadow_disagreements: int | None = None
    shadow_history: list[ShadowCounts] = field(default_factory=list)


@dataclass(frozen=True)
class DecisionEvent:
    """One decision on the event stream (``GET /v1/events``; docs/dashboard.md)."""

    seq: int
    kind: str
    at_ms: int
    entity_type: str = field(metadata={"json": "type"})
    shard_id: str | None = None
    region: str | None = None
    reason: str | None = None
    strategy: str | None = None
    target: str | None = None
    cause: str | None = None
    by: str | None = None
    detail: str | None = None
    missed: int | None = None
    load: float | None = None
    until_ms: int | None = None


class StreamedEvent(NamedTuple):
    """An event as the stream framed it: its id (``<term>-<seq>``, ``None``
    for ``missed``) and the decision. A tuple: ``for id, event in stream``."""

    id: str | None
    event: DecisionEvent
