"""The programmatic API the external allocation feature request asks for.

- :class:`ExternalAllocationController`: explicit placements set, removed
  and read, and shards re-evaluated now, backed by a shardalloc node.
  Placements are durable on the node (its store, across restarts and
  failovers) and pushed to every region of the type at once.
- :func:`external_allocation_strategy`: the allocation strategy the request
  sketches for an actor framework's own coordinator — explicit placements
  first, a fallback strategy for everything else. Its state can be a
  :class:`~shardalloc_client.placements_view.PlacementsView`, which keeps a
  node's placements in memory, so a framework that places its shards
  itself can still let operators steer them through shardalloc's REST API,
  CLI and dashboard.

A port of the TypeScript client's ``external/controller.ts`` and
``external/strategy.ts``.
"""

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Protocol

from .admin import AdminClient
from .admin_types import Rejected

__all__ = [
    "AllocationStrategy",
    "ExternalAllocationController",
    "ExternalAllocationState",
    "PlacementWarning",
    "ShardIdLike",
    "LeastShard",
    "PlacementMap",
    "external_allocation_strategy",
    "least_shard",
    "warn_in_log",
]

_log = logging.getLogger(__name__)

ShardIdLike = str | int
"""A shard id as the feature request writes it (a number) or as shardalloc does (a string)."""


class PlacementMap(dict[str, str]):
    """Explicit placements by shard id, looked up by the id as a string or as
    the number it was set with: ``set_placement(42, …)`` then ``[42]`` or
    ``.get(42)`` finds it (shard ids are kept as strings; iteration yields
    strings)."""

    def __getitem__(self, shard_id: ShardIdLike) -> str:
        return super().__getitem__(str(shard_id))

    def __contains__(self, shard_id: object) -> bool:
        return super().__contains__(str(shard_id) if isinstance(shard_id, int) else shard_id)

    def get(self, shard_id: ShardIdLike, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(str(shard_id), default)


class ExternalAllocationController:
    """Set, remove, read explicit placements of one type; re-evaluate shards now."""

    def __init__(self, admin: AdminClient, type_name: str) -> None:
        self._admin = admin
        self.type_name = type_name
        """The entity type."""

    async def set_placement(self, shard_id: ShardIdLike, target: str) -> None:
        """Sets or updates the explicit placement of ``shard_id`` on the region ``target``."""
        await self._admin.set_placement(self.type_name, str(shard_id), target)

    async def remove_placement(self, shard_id: ShardIdLike) -> None:
        """Removes the explicit placement: the shard's strategy decides
        again from the next rebalance. Removing none is no error."""
        await self._admin.remove_placement(self.type_name, str(shard_id))

    async def get_placements(self) -> "PlacementMap":
        """The current explicit placements: shard id → region, looked up by
        the id as a string or as the number it was set with."""
        everything = await self._admin.placements(self.type_name)
        return PlacementMap({p.shard_id: p.target for p in everything.placements})

    async def rebalance_now(self, shard_ids: Iterable[ShardIdLike]) -> list[Rejected]:
        """Re-evaluates these shards now (hand-off, then allocation): with a
        placement set, this moves them to it without waiting for the next
        rebalance tick. Answers the shards the node refused to move, with
        why (``already-moving``, ``no-home``, ``frozen``, …)."""
        answer = await self._admin.rebalance(self.type_name, [str(s) for s in shard_ids], True)
        return answer.rejected


class ExternalAllocationState(Protocol):
    """What the strategy consults: shard id → the region it should live on."""

    @property
    def explicit_placements(self) -> Mapping[str, str]: ...


class AllocationStrategy(Protocol):
    """An actor framework's allocation strategy, over region addresses."""

    def allocate(
        self, shard_id: str, candidates: Sequence[str], current: Mapping[str, Sequence[str]]
    ) -> str:
        """The region that gets ``shard_id``, among ``candidates``;
        ``current`` is every region's shards."""
        ...

    def rebalance(self, current: Mapping[str, Sequence[str]], in_progress: Set[str]) -> list[str]:
        """The shards to move now; ``in_progress`` are being moved already."""
        ...


PlacementWarning = Callable[[str, str, Sequence[str]], object]
"""Told ``(shard_id, target, candidates)`` when an explicit placement cannot
be honoured (its target is not a candidate)."""


def warn_in_log(shard_id: str, target: str, candidates: Sequence[str]) -> None:
    """The default :data:`PlacementWarning`: a warning on the
    ``shardalloc_client.external`` logger."""
    _log.warning(
        "shard %s is placed on %s, which is not among the regions that can take it (%s):"
        " the fallback strategy decides",
        shard_id, target, ", ".join(candidates),
    )


class _External:
    def __init__(
        self,
        fallback: AllocationStrategy,
        get_state: Callable[[], ExternalAllocationState],
        warn: PlacementWarning,
    ) -> None:
        self._fallback = fallback
        self._get_state = get_state
        self._warn = warn

    def allocate(
        self, shard_id: str, candidates: Sequence[str], current: Mapping[str, Sequence[str]]
    ) -> str:
        target = self._get_state().explicit_placements.get(shard_id)
        if target is not None:
            if target in candidates:
                return target
            self._warn(shard_id, target, candidates)
        return self._fallback.allocate(shard_id, candidates, current)

    def rebalance(self, current: Mapping[str, Sequence[str]], in_progress: Set[str]) -> list[str]:
        placements = self._get_state().explicit_placements
        moves: dict[str, None] = {}
        for region, shards in current.items():
            for shard in shards:
                target = placements.get(shard)
                if (target is not None and target != region and target in current
                        and shard not in in_progress):
                    moves[shard] = None
        for shard in self._fallback.rebalance(current, in_progress):
            if shard not in placements:
                moves[shard] = None
        return list(moves)


def external_allocation_strategy(
    fallback: AllocationStrategy,
    get_state: Callable[[], ExternalAllocationState],
    warn: PlacementWarning = warn_in_log,
) -> AllocationStrategy:
    """Explicit placements before ``fallback``:

    - ``allocate``: the placement's target when it is a candidate;
      otherwise (no placement, or its target unreachable) the fallback's
      choice, and ``warn`` is told when a placement was passed over (a
      preference, not a constraint, as the feature request recommends);
    - ``rebalance``: every shard not on its placement's target (when that
      target holds shards or is a known region), not already moving, and
      the fallback's picks among shards without a placement, in that order,
      each once.
    """
    return _External(fallback, get_state, warn)


class LeastShard:
    """Akka's least-shard allocation over :class:`AllocationStrategy`, the
    fallback :func:`external_allocation_strategy` is most often given. A new
    shard goes to the candidate holding the fewest shards (the first such
    candidate on a tie); a rebalance moves shards from the most loaded
    region towards the least loaded one while they differ by two or more,
    at most ``max_simultaneous`` moves in flight (those in progress
    included). :data:`least_shard` has the defaults."""

    def __init__(self, max_simultaneous: int = 3) -> None:
        if isinstance(max_simultaneous, bool) or not isinstance(max_simultaneous, int) or max_simultaneous < 1:
            raise ValueError(f"max_simultaneous is {max_simultaneous!r}; it must be a whole number of at least 1")
        self.max_simultaneous = max_simultaneous

    def allocate(self, shard_id: str, candidates: Sequence[str], current: Mapping[str, Sequence[str]]) -> str:
        """The candidate with the fewest shards in ``current``."""
        if not candidates:
            raise ValueError(f"no candidate region for shard {shard_id}")
        return min(candidates, key=lambda region: len(current.get(region, ())))

    def rebalance(self, current: Mapping[str, Sequence[str]], in_progress: Set[str]) -> list[str]:
        """Shards of the most loaded region, while it holds two or more than the least loaded."""
        room = self.max_simultaneous - len(in_progress)
        if room <= 0 or len(current) < 2:
            return []
        least = min(current, key=lambda region: len(current[region]))
        most = max(current, key=lambda region: len(current[region]))
        excess = (len(current[most]) - len(current[least])) // 2
        movable = [shard for shard in current[most] if shard not in in_progress]
        return movable[: min(room, excess)]


least_shard: AllocationStrategy = LeastShard()
"""Least-shard allocation with the default settings."""
