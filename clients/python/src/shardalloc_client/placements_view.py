"""``PlacementsView``: an in-memory map of one type's explicit placements,
kept in step with the node, with a synchronous lookup.

What an actor framework's own allocation strategy consults before its
fallback (Akka's ``ExternalShardAllocationStrategy`` with its local cache;
the external allocation feature request). A port of the TypeScript
client's ``admin/placements-view.ts``.

How it stays in step: it opens the type's event stream first, then reads
every page of placements, then applies the events that arrived meanwhile,
in order, and every later ``placement-set`` / ``placement-removed``. When
the stream ends (the node restarted, the leader changed, a network cut) it
reconnects with ``Last-Event-ID``, with backoff; a ``missed`` event
(events it can no longer get) makes it read every page again. Placement
events carry the whole state of one shard's placement, so applying them in
order after a listing converges on the node's state.

Listeners (:meth:`PlacementsView.on_change`, :meth:`~PlacementsView.on_synced`,
:meth:`~PlacementsView.on_disconnected`) are plain callables run on the
event loop as things happen; one that has asynchronous work to do starts a
task. One that raises is logged (the ``shardalloc_client`` logger) and
does not stop the view.
"""

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from .admin import AdminClient, EventStream
from .admin_types import DecisionEvent, StreamedEvent

__all__ = ["PlacementsView"]

_log = logging.getLogger(__name__)

ChangeListener = Callable[[str, str | None], object]
"""Told ``(shard, target)`` when a placement was set, ``(shard, None)`` when removed."""
SyncedListener = Callable[[int], object]
"""Told the placement count when the view read every placement afresh
(first, or after missed events)."""
DisconnectedListener = Callable[[str], object]
"""Told why the stream broke; the view reconnects by itself."""


class PlacementsView:
    """A live map of one type's placements. See the module's comment."""

    def __init__(
        self, admin: AdminClient, entity_type: str, reconnect_min_ms: int, reconnect_max_ms: int
    ) -> None:
        """Use :meth:`open`."""
        self._admin = admin
        self.entity_type = entity_type
        """The entity type."""
        self._map: dict[str, str] = {}
        self._stream: EventStream | None = None
        self._last_event_id: str | None = None
        self._closed = False
        self._min_ms = reconnect_min_ms
        self._max_ms = reconnect_max_ms
        self._delay = reconnect_min_ms
        self._tasks: set[asyncio.Task[None]] = set()
        self._listeners: dict[str, list[Callable[..., object]]] = {
            "change": [], "synced": [], "disconnected": []
        }

    @classmethod
    async def open(
        cls,
        admin: AdminClient,
        entity_type: str,
        *,
        reconnect_min_ms: int = 200,
        reconnect_max_ms: int = 5_000,
    ) -> "PlacementsView":
        """Opens a view of ``entity_type``'s placements: returns once it
        holds every one. Raises :class:`~shardalloc_client.admin.AdminError`
        naming the problem (an unknown type, a wrong token, no node). A lost
        stream is reconnected after ``reconnect_min_ms`` (jittered),
        doubling up to ``reconnect_max_ms``."""
        if not 0 < reconnect_min_ms <= reconnect_max_ms:
            raise ValueError(
                f"reconnect_min_ms ({reconnect_min_ms}) must be positive and at most"
                f" reconnect_max_ms ({reconnect_max_ms})"
            )
        view = cls(admin, entity_type, reconnect_min_ms, reconnect_max_ms)
        await view._connect(first=True)
        return view

    def get(self, shard: str) -> str | None:
        """The region ``shard`` is placed on, or ``None``: synchronous, from memory."""
        return self._map.get(shard)

    @property
    def size(self) -> int:
        """How many placements the view holds."""
        return len(self._map)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def explicit_placements(self) -> Mapping[str, str]:
        """The placements as an external allocation strategy reads them
        (``external_allocation_strategy(fallback, lambda: view)``): a
        read-only, live mapping."""
        return MappingProxyType(self._map)

    def entries(self) -> dict[str, str]:
        """Every placement the view holds: shard → target (a copy)."""
        return dict(self._map)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def on_change(self, listener: ChangeListener) -> Callable[[], None]:
        """Calls ``listener(shard, target)`` at every change (``target``
        ``None``: removed). Answers a function that removes the listener."""
        return self._listen("change", listener)

    def on_synced(self, listener: SyncedListener) -> Callable[[], None]:
        """Calls ``listener(count)`` whenever the view has read every
        placement afresh. Answers a function that removes the listener."""
        return self._listen("synced", listener)

    def on_disconnected(self, listener: DisconnectedListener) -> Callable[[], None]:
        """Calls ``listener(reason)`` when the stream breaks (the view
        reconnects by itself). Answers a function that removes the listener."""
        return self._listen("disconnected", listener)

    def close(self) -> None:
        """Stops following the node."""
        self._closed = True
        if self._stream is not None:
            self._stream.close()
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()

    # Inside.

    def _listen(
        self, kind: Literal["change", "synced", "disconnected"], listener: Callable[..., object]
    ) -> Callable[[], None]:
        listeners = self._listeners[kind]
        listeners.append(listener)

        def remove() -> None:
            if listener in listeners:
                listeners.remove(listener)

        return remove

    def _emit(self, kind: str, *args: Any) -> None:
        for listener in list(self._listeners[kind]):
            try:
                listener(*args)
            except Exception:
                _log.exception("placements view of %s: a %s listener raised", self.entity_type, kind)

    def _spawn(self, work: Any) -> "asyncio.Task[None]":
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _connect(self, first: bool) -> None:
        """Opens the stream, reads every page, applies what came meanwhile,
        then follows the stream in the background."""
        stream = await self._admin.events(self.entity_type, self._last_event_id)
        if self._closed:
            stream.close()
            return
        self._stream = stream
        # Read the stream while listing, so nothing that happens meanwhile is lost.
        early: list[StreamedEvent] = []
        listing = first or self._last_event_id is None
        ended: list[str] = []

        async def pump() -> None:
            try:
                async for item in stream:
                    if listing:
                        early.append(item)
                    else:
                        await self._apply(item.id, item.event)
                ended.append("the node ended the event stream")
            except Exception as error:
                ended.append(str(error) or type(error).__name__)
            finally:
                stream.close()

        pumping = self._spawn(pump())
        if listing:
            try:
                await self._resync()
                while early:
                    item = early.pop(0)
                    await self._apply(item.id, item.event)
            except BaseException:
                # The caller reconnects, unless this was the first open.
                if first:
                    self._closed = True
                stream.close()
                pumping.cancel()
                raise
            # No await between the last early event and here: nothing is
            # appended to `early` after it was emptied.
            listing = False
        self._delay = self._min_ms

        def after(task: "asyncio.Task[None]") -> None:
            if not task.cancelled():
                self._reconnect(ended[0] if ended else "the event stream ended")

        pumping.add_done_callback(after)

    async def _resync(self) -> None:
        """Reads every page of placements into the map, replacing what it held."""
        everything = await self._admin.placements(self.entity_type)
        fresh = {p.shard_id: p.target for p in everything.placements}
        changes: list[tuple[str, str | None]] = [
            (shard, target) for shard, target in fresh.items() if self._map.get(shard) != target
        ]
        changes += [(shard, None) for shard in self._map if shard not in fresh]
        self._map.clear()
        self._map.update(fresh)
        for shard, now in changes:
            self._emit("change", shard, now)
        self._emit("synced", len(self._map))

    async def _apply(self, id: str | None, event: DecisionEvent) -> None:
        if id is not None:
            self._last_event_id = id
        kind = event.kind
        shard = event.shard_id
        target = event.target
        if kind == "placement-set" and shard is not None and target is not None:
            if self._map.get(shard) != target:
                self._map[shard] = target
                self._emit("change", shard, target)
        elif kind == "placement-removed" and shard is not None:
            if self._map.pop(shard, None) is not None:
                self._emit("change", shard, None)
        elif kind == "missed":
            await self._resync()

    def _reconnect(self, reason: str) -> None:
        if self._closed:
            return
        self._stream = None
        self._emit("disconnected", reason)
        wait = self._delay / 2 + random.random() * (self._delay / 2)
        self._delay = min(self._delay * 2, self._max_ms)

        async def again() -> None:
            await asyncio.sleep(wait / 1000)
            if self._closed:
                return
            try:
                await self._connect(False)
            except Exception as error:
                self._reconnect(str(error) or type(error).__name__)

        self._spawn(again())
