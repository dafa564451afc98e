"""The REST API's bodies the admin client reads and writes, as TypedDicts.

The same JSON the node serves (its OpenAPI document at
``/v1/openapi.json``; golden bodies in ``contracts/rest/``), keys in the
node's camelCase. The client does not check answers against these types
(as the TypeScript client's ``admin/types.ts``): they document what the
node sends and let a type checker follow it.
"""

from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

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
    "Strategies",
    "StoredStrategy",
    "ShadowCounts",
    "StrategyState",
    "StreamedEvent",
]


class Placement(TypedDict):
    """One placement: ``shardId`` pinned to the region ``target``."""

    shardId: str
    target: str


class Placements(TypedDict):
    """A page of placements; ``next`` is the cursor of the next page, ``None`` on the last."""

    placements: list[Placement]
    next: NotRequired[str | None]


class PlacementsWritten(TypedDict):
    """What a placement write stored, and the type's placement count after it."""

    written: list[Placement]
    total: int


class Rejected(TypedDict):
    """A shard a rebalance request did not accept, and why (``already-moving``, ``no-home``, …)."""

    shardId: str
    reason: str


class RebalanceResponse(TypedDict):
    """The answer to a rebalance request."""

    accepted: list[str]
    rejected: list[Rejected]


class ShardState(TypedDict):
    """Where a shard is and why."""

    shardId: str
    home: str | None
    reason: Literal["placement", "strategy", "fallback"] | None
    detail: str | None
    sinceMs: int | None
    moving: bool
    placement: str | None
    load: float
    movedMs: int | None
    epoch: int | None
    """The home's epoch (rises at every change of home); ``None`` without a home."""


class RegionSummary(TypedDict):
    """A region in brief: its status per type, its shard count, whether it drains."""

    address: str
    types: dict[str, str]
    shards: int
    draining: bool


class Regions(TypedDict):
    """A page of regions."""

    regions: list[RegionSummary]
    next: NotRequired[str | None]


class DrainOfType(TypedDict):
    """A drain's progress in one type."""

    type: str
    draining: bool
    shardsLeft: int
    handOffsInFlight: int
    startedAtMs: int | None


class DrainState(TypedDict):
    """A drain's progress."""

    address: str
    draining: bool
    shardsLeft: int
    handOffsInFlight: int
    startedAtMs: int | None
    types: list[DrainOfType]


class StoredStrategy(TypedDict):
    """An uploaded strategy component (or a built-in one)."""

    digest: str
    name: str
    version: str
    size: int
    activeIn: list[str]
    contract: str


class Strategies(TypedDict):
    """A page of strategies."""

    strategies: list[StoredStrategy]
    next: NotRequired[str | None]


class ActivateRequest(TypedDict):
    """What to activate: a built-in's name or an upload's digest, its configuration."""

    strategy: str
    config: NotRequired[Any]
    force: NotRequired[bool]


class Activation(TypedDict):
    """One activation of a strategy."""

    name: str
    version: str
    digest: NotRequired[str | None]
    config: NotRequired[Any]
    cause: str
    atMs: int


class ShadowCounts(TypedDict):
    """What one past shadow candidate saw."""

    candidate: str
    calls: int
    disagreements: int


class StrategyState(TypedDict):
    """A type's strategy: the active one and its history (and a shadow, when one is set)."""

    active: Activation
    history: list[Activation]
    next: NotRequired[str | None]
    shadow: NotRequired[Activation | None]
    shadowCalls: NotRequired[int]
    shadowDisagreements: NotRequired[int]
    shadowHistory: NotRequired[list[ShadowCounts]]


class DecisionEvent(TypedDict):
    """One decision on the event stream (``GET /v1/events``; docs/dashboard.md)."""

    seq: int
    kind: str
    atMs: int
    type: str
    shardId: NotRequired[str]
    region: NotRequired[str]
    reason: NotRequired[str]
    strategy: NotRequired[str]
    target: NotRequired[str]
    cause: NotRequired[str]
    by: NotRequired[str]
    detail: NotRequired[str]
    missed: NotRequired[int]
    load: NotRequired[float]
    untilMs: NotRequired[int]


class StreamedEvent(NamedTuple):
    """An event as the stream framed it: its id (``<term>-<seq>``, ``None``
    for ``missed``) and the decision. A tuple: ``for id, event in stream``."""

    id: str | None
    event: DecisionEvent
