"""latency-aware-py: the strategy's copy of the view (contract 0.3), kept
from the host's ``load-view`` and ``apply`` calls, with no generated
bindings so that ``python3 -m unittest`` can test it.

The copy holds, by shard handle, each shard's home, flags, hash, load and
when it was homed (a region's shards in allocation order), each region's
count, and the view checksum the WIT defines, kept term by term: a shard's
term is taken out before it changes and put back after.

It asks for no ids and no attributes (``describe``), so ``named`` and
``attributes`` come empty and are not read; ``since`` and the smoothed
metrics are kept, but this strategy decides without them.

Values arrive as componentize-py passes them: records as dataclasses with
snake_case fields, u32/u64 as int, f64 as float, lists as list, an absent
option as None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PINNED = 1
MOVING = 2
MASK = (1 << 64) - 1


class ViewError(Exception):
    """A batch that does not fit the copy (a handle not in it, a generation
    out of turn). app.py lets it trap: the host falls back for that call and
    sends a new instance the whole view."""


def mix(z: int) -> int:
    """The contract's mixing function: splitmix64's finalizer."""
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


@dataclass
class Shard:
    hash: int
    home: int = 0  # region index + 1; 0 when homeless
    flags: int = 0  # PINNED | MOVING
    load: float = 0.0
    order: int = 0  # when it was homed
    since: int = 0  # the host's time it got this home (contract 0.3)


def term(handle: int, shard: Shard) -> int:
    """One shard's part of the view checksum, as wit/0.3/strategy.wit defines it (the same as 0.2's)."""
    (load_bits,) = struct.unpack("<Q", struct.pack("<d", shard.load))
    place = mix(shard.hash ^ (handle << 32) ^ (shard.home << 2) ^ shard.flags)
    return (place + mix(load_bits ^ handle)) & MASK


@dataclass(frozen=True)
class RegionView:
    address: str
    allocatable: bool
    labels: dict


class KeptView:
    """The copy of the view."""

    def __init__(self) -> None:
        self.generation: int | None = None
        self.regions: tuple = ()
        self.metric_names: tuple = ()
        self.metrics: list = []
        self.smoothed_metrics: list = []
        self.counts: list = []
        self.shards: dict = {}
        self.moving = 0
        self.checksum = 0
        self._next_order = 0

    def load(self, view) -> int:
        """Replaces the copy with a whole view; returns the checksum."""
        self.__init__()
        self._set_topology(view.topology)
        self.metrics = list(view.metrics)
        self.smoothed_metrics = list(getattr(view, "smoothed_metrics", view.metrics))
        self._home_all(view.homed)
        self._arrive_all(view.homeless, view.homeless_hashes)
        for h in view.moving:
            self._flag(h, MOVING, True)
        for h in view.pinned:
            self._flag(h, PINNED, True)
        self._load_all(view.loads)
        self.generation = view.generation
        return self.checksum

    def apply(self, c) -> int:
        """Applies a batch in the contract's field order; returns the checksum."""
        if self.generation is None or c.generation != self.generation + 1:
            raise ViewError(f"a batch for generation {c.generation} reached a copy at generation {self.generation}")
        for h in c.retired:
            shard = self._present(h)
            self.checksum = (self.checksum - term(h, shard)) & MASK
            self._unhome(shard)
            if shard.flags & MOVING:
                self.moving -= 1
            del self.shards[h]
        for h in c.unhomed:
            self._change(h, self._unhome)
        self._arrive_all(c.arrived_homeless, c.arrived_hashes)
        if c.topology is not None:
            if c.metrics is None:
                raise ViewError("a new topology came without its metric matrix")
            self._set_topology(c.topology)
        if c.metrics is not None:
            self.metrics = list(c.metrics)
            smoothed = getattr(c, "smoothed_metrics", None)
            self.smoothed_metrics = list(c.metrics if smoothed is None else smoothed)
        self._home_all(c.homed)
        for h in c.moving:
            self._flag(h, MOVING, True)
        for h in c.settled:
            self._flag(h, MOVING, False)
        for h in c.pinned:
            self._flag(h, PINNED, True)
        for h in c.unpinned:
            self._flag(h, PINNED, False)
        self._load_all(c.loads)
        self.generation = c.generation
        return self.checksum

    def unpinned_shards(self, region: int) -> list:
        """A region's shards that are not pinned, oldest first, as handles."""
        found = [(s.order, h) for h, s in self.shards.items() if s.home == region + 1 and not s.flags & PINNED]
        return [h for _, h in sorted(found)]

    def _present(self, h: int) -> Shard:
        shard = self.shards.get(h)
        if shard is None:
            raise ViewError(f"shard handle {h} is not in the view")
        return shard

    def _change(self, h: int, f) -> None:
        shard = self._present(h)
        self.checksum = (self.checksum - term(h, shard)) & MASK
        f(shard)
        self.checksum = (self.checksum + term(h, shard)) & MASK

    def _unhome(self, shard: Shard) -> None:
        if shard.home:
            self.counts[shard.home - 1] -= 1
        shard.home = 0

    def _arrive(self, h: int, hash_: int) -> None:
        if h in self.shards:
            raise ViewError(f"shard handle {h} is already in the view")
        shard = self.shards[h] = Shard(hash=hash_)
        self.checksum = (self.checksum + term(h, shard)) & MASK

    def _arrive_all(self, handles, hashes) -> None:
        if len(handles) != len(hashes):
            raise ViewError("shards and hashes differ in length")
        for h, hash_ in zip(handles, hashes):
            self._arrive(h, hash_)

    def _home_all(self, homed) -> None:
        since = getattr(homed, "since", None)
        if since is None:
            since = [0] * len(homed.shards)
        if not len(homed.shards) == len(homed.hashes) == len(homed.regions) == len(since):
            raise ViewError("homed columns differ in length")
        for h, hash_, region, at in zip(homed.shards, homed.hashes, homed.regions, since):
            if region >= len(self.regions):
                raise ViewError(f"region index {region} out of range")
            if h not in self.shards:
                self._arrive(h, hash_)

            def home(shard: Shard, hash_=hash_, region=region, at=at) -> None:
                self._unhome(shard)
                shard.hash = hash_
                shard.home = region + 1
                shard.since = at
                shard.order = self._next_order
                self._next_order += 1
                self.counts[region] += 1

            self._change(h, home)

    def _flag(self, h: int, which: int, on: bool) -> None:
        shard = self._present(h)
        if bool(shard.flags & which) == on:
            return

        def flip(s: Shard) -> None:
            s.flags = s.flags | which if on else s.flags & ~which

        self._change(h, flip)
        if which == MOVING:
            self.moving += 1 if on else -1

    def _load_all(self, loads) -> None:
        if len(loads.shards) != len(loads.loads):
            raise ViewError("loads columns differ in length")
        for h, load in zip(loads.shards, loads.loads):

            def set_load(s: Shard, load=load) -> None:
                s.load = load

            self._change(h, set_load)

    def _set_topology(self, topology) -> None:
        """Takes a topology: regions matched by address keep their shards
        (``region.status.name`` is ``"UP"`` for the enum member
        ``RegionStatus.UP``)."""
        regions = tuple(
            RegionView(
                address=r.address,
                allocatable=r.status.name == "UP" and not r.proxy_only and not r.draining,
                labels={label.key: label.value for label in r.labels},
            )
            for r in topology.regions
        )
        index = {r.address: i + 1 for i, r in enumerate(regions)}
        moved = [index.get(r.address, 0) for r in self.regions]
        self.counts = [0] * len(regions)
        self.checksum = 0
        for h, shard in self.shards.items():
            if shard.home:
                shard.home = moved[shard.home - 1]
                if not shard.home:
                    raise ViewError(f"shard handle {h} is on a region that left")
                self.counts[shard.home - 1] += 1
            self.checksum = (self.checksum + term(h, shard)) & MASK
        self.regions = regions
        self.metric_names = tuple(topology.metric_names)
