"""The region's deterministic, sans-I/O core: :class:`RegionCore`.

A port of the Rust client's ``client/src/region/core.rs``, decision for
decision. Events go in (a node message, an application send, a message
from another region, a tick, a finished stop, the session going up or
down), each carrying the time as an ``int`` of milliseconds of the
driver's monotonic clock; actions (:mod:`shardalloc_client.region.actions`)
come out, in the order the driver must perform them. The core has no
clock, no sockets, no tasks and no randomness, so every decision can be
tested with literal action lists::

     driver ──event(now)──▶ RegionCore ──▶ list[Action]
                                            ├─ Send(RegionMessage)     → the node session
                                            ├─ Start / Stop / Deliver  → the application (per-shard worker)
                                            ├─ AbandonStop             → give up on a stop past its deadline
                                            ├─ Forward                 → the transport, to another region
                                            ├─ Publish(Update)         → the updates stream
                                            └─ Reconnect               → hang up; the driver reconnects

Lease
    Registration and heartbeats share one sequence counter; the send time
    of the last :data:`SEQUENCE_WINDOW` of them is kept. ``Registered`` and
    ``HeartbeatAck`` extend the lease to *that message's* send time plus
    ``lease_ms``, and drop every entry up to the acknowledged sequence, so a
    late or lost acknowledgement never stretches the lease. When the lease
    runs out (checked at every event) the region fences itself: it stops
    every running shard and forgets every cached home. It starts shards
    again only after an acknowledgement renews the lease.

Per-shard state
    Each shard the region has heard of has a cached home (or none), a FIFO
    buffer of messages waiting for a home, whether a ``GetShardHome`` is
    out, whether someone waits for the home, and its local state (idle,
    running, stopping). Messages are buffered while the home is unknown
    (never asked, asked, or dropped by ``BeginHandOff``) and flushed in
    order when a ``ShardHome`` answer arrives, so one sender's messages to
    one shard keep their order across hand-offs.

Drain and leave
    :meth:`RegionCore.drain_and_leave` is a departure within a bound (for
    a Kubernetes preStop hook): ``Drain(draining=True)`` first, so the node
    hands the shards off to regions that can take them while this one still
    serves what it has; ``Leave`` once no shard runs here, or at half the
    bound when shards still run (the drain stalled); done at ``LeaveDone``.
    When the bound passes first, the core gives up: it stops every shard
    still running, undrains the region if it asked to leave, and reports
    what was left (a :class:`~shardalloc_client.region.errors.RegionError`
    of kind ``DrainAndLeaveTimedOut``).

Where several shards act at once (a fence, a shutdown, ticks), they act in
the order of their ids' UTF-8 bytes, as the Rust core's ``BTreeMap`` walks
them; Python orders ``str`` by code point, which is the same order.
"""

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Generic, Literal, TypeAlias, TypeVar, Union, get_args

from . import actions as actions
from .. import wire
from .actions import (
    AbandonStop,
    Action,
    Asked,
    Deliver,
    Forward,
    HomeLookup,
    Known,
    Publish,
    Reconnect,
    Send,
    Start,
    Stop,
)
from .errors import MAX_SHARD_ID_BYTES, DeliveryError, RegionError, SendError, check_shard

__all__ = [
    "SEQUENCE_WINDOW",
    "DEFAULT_SHARD_BUFFER_LIMIT",
    "DEFAULT_TOTAL_BUFFER_LIMIT",
    "MIN_SILENCE_MS",
    "CoreConfig",
    "Departed",
    "RegionCore",
]

M = TypeVar("M")

SEQUENCE_WINDOW: Final = 64
"""How many registration and heartbeat send times are kept for lease renewal."""

DEFAULT_SHARD_BUFFER_LIMIT: Final = 1_000
"""Default per-shard buffer limit, in messages."""

DEFAULT_TOTAL_BUFFER_LIMIT: Final = 100_000
"""Default region-wide buffer limit, in messages."""

DEFAULT_FORWARD_ATTEMPTS: Final = 10
"""Default number of failed forwards in a row after which a shard's
messages are given up."""

DEFAULT_FORWARD_DEADLINE_MS: Final = 30_000
"""Default time a shard's forwards may keep failing before its messages are
given up: twice the node's default removal time (15 s)."""

MAX_RETRY_DOUBLINGS: Final = 4
"""A lookup unanswered is asked again after ``home_retry_ms``, then after
twice that, four times, … up to ``2 ** MAX_RETRY_DOUBLINGS`` times that, so a
node slower than the retry is not sent every unanswered lookup again and
again."""

DEFAULT_MAX_LOOKUPS_IN_FLIGHT: Final = 256
"""Default most homes asked of the node at once: the node's own bound on one
session's lookups queued for its coordinator, so a region's lookups never
wait in its connection, where its heartbeats would queue behind them."""

MIN_SILENCE_MS: Final = 1_000
"""The shortest silence after which a registered region gives its session
up (three heartbeat intervals, when longer)."""

_U64_MAX: Final = (1 << 64) - 1

_log = logging.getLogger(__name__)


def _add(a: int, b: int) -> int:
    """``a + b``, saturating at the largest u64 as the Rust ``Millis`` does."""
    return min(a + b, _U64_MAX)


def _sub(a: int, b: int) -> int:
    """``a - b``, saturating at 0 as the Rust ``Millis`` does."""
    return max(a - b, 0)


@dataclass(frozen=True)
class CoreConfig:
    """What the core needs to know about its region. ``CoreConfig(registration)``
    has the default limits and timings (the Rust ``CoreConfig::new``)."""

    registration: wire.Register
    """The registration sent to the node (its ``sequence`` is filled in per send)."""
    shard_buffer_limit: int = DEFAULT_SHARD_BUFFER_LIMIT
    """Most messages buffered for one shard."""
    total_buffer_limit: int = DEFAULT_TOTAL_BUFFER_LIMIT
    """Most messages buffered over all shards."""
    stop_deadline_ms: int = 10_000
    """How long the application may take to stop a shard (including the
    deliveries queued before the stop); past it the stop is abandoned and
    reported anyway."""
    home_retry_ms: int = 2_000
    """How long to wait for a ``ShardHome`` answer before asking again (the
    node may drop an answer overtaken by a change, or forget a waiting
    request when it restarts)."""
    response_timeout_ms: int = 10_000
    """How long the node may stay silent (no ``Welcome``, no registration
    answer) before the session is given up. Once registered, the limit is
    three heartbeat intervals (at least :data:`MIN_SILENCE_MS`) instead."""
    forward_attempts: int = DEFAULT_FORWARD_ATTEMPTS
    """How many forwards of one shard may fail in a row (against homes the
    node keeps naming) before its messages are given up: each one given back
    or waiting goes to the application as an ``Undelivered`` action. A home
    the node names anew starts a new run."""
    forward_deadline_ms: int = DEFAULT_FORWARD_DEADLINE_MS
    """How long a shard's forwards may keep failing, from the run's first
    failure, before its messages are given up the same way."""
    max_lookups_in_flight: int = DEFAULT_MAX_LOOKUPS_IN_FLIGHT
    """Most homes asked of the node and not yet answered (a failed forward's
    wait for its retry counts too); more wait their turn, in the order they
    were needed, and go out as answers come. At least 1."""


@dataclass(frozen=True)
class Departed:
    """How a :meth:`RegionCore.drain_and_leave` ended (the Rust
    ``Result<(), RegionError>``): ``error`` is ``None`` once the node let the
    region go, else the ``DrainAndLeaveTimedOut`` error of the bound passing
    first."""

    error: RegionError | None = None
    """Why the departure failed, or ``None`` when it succeeded."""

    @property
    def ok(self) -> bool:
        """True when the node let the region go."""
        return self.error is None


# The application's side of a shard on this region (the Rust `Local`).


@dataclass(frozen=True)
class _Stopping:
    deadline: int
    report: bool
    """Send ``ShardStopped`` when done (a hand-off asked for the stop)."""


_Local: TypeAlias = Union[Literal["idle", "running"], _Stopping]


@dataclass
class _ShardEntry(Generic[M]):
    home: str | None = None
    buffer: deque[M] = field(default_factory=deque)
    asked_at: int | None = None
    """When ``GetShardHome`` was last sent (or a failed forward deferred it);
    ``None`` when no answer is expected."""
    wanted: bool = False
    """Someone awaits the home (:meth:`RegionCore.request_home`)."""
    queued: bool = False
    """In the core's waiting queue for a place among the lookups in flight."""
    repeats: int = 0
    """How many times the lookup out was sent again unanswered."""
    deferred: bool = False
    """``asked_at`` is a failed forward's wait, not a lookup sent: the ask
    after it is the first."""
    local: _Local = "idle"
    epoch: int = 0
    """The epoch of the run here, while it runs."""
    unreported_stop: bool = False
    """A hand-off stop finished while the session was down."""
    failing: "_Failing | None" = None
    """The run of failed forwards under way, if any."""
    returned: int = 0
    """How many messages at the front of ``buffer`` came back from failed
    forwards: later ones come back behind them, ahead of the messages never
    sent, so reports arriving one by one keep the send order."""
    round_failed: bool = False
    """A failure was already counted since the last home answer: the
    forwards of one round count as one attempt, however many reports they
    come back in."""

    def needs_home(self) -> bool:
        return self.home is None and (self.wanted or bool(self.buffer))

    def is_empty(self) -> bool:
        return (
            self.home is None
            and not self.buffer
            and self.asked_at is None
            and not self.wanted
            and self.local == "idle"
            and not self.unreported_stop
        )


@dataclass
class _Failing:
    """A shard's run of failed forwards: since when, how many, the last one."""

    since: int
    attempts: int
    to: str
    reason: str


@dataclass
class _Departure:
    """A :meth:`RegionCore.drain_and_leave` under way."""

    bound_ms: int
    leave_at: int
    """Send ``Leave`` from then on even if shards still run here."""
    give_up_at: int
    outcome: Departed | None = None


@dataclass(frozen=True)
class _Registering:
    """A ``Register`` with this sequence is out."""

    sequence: int


# The session's registration state: no session, registering, registered.
_Link: TypeAlias = Union[Literal["down", "registered"], _Registering]


class RegionCore(Generic[M]):
    """The region's state machine; ``M`` is the application's message type.
    See the module documentation.

    Every event method takes ``now``, the driver's monotonic clock in
    milliseconds, and returns the actions to perform, in order.
    """

    def __init__(self, config: CoreConfig) -> None:
        """A region that has not connected yet."""
        self._config = config
        self._link: _Link = "down"
        self._sent: dict[int, int] = {}
        """Send time of recent registrations and heartbeats, by sequence
        (inserted in increasing order, so the first is the oldest)."""
        self._next_sequence = 1
        self._lease_until: int | None = None
        self._fenced = False
        self._heartbeat_interval_ms = 1_000
        self._next_heartbeat = 0
        self._last_heard = 0
        self._shards: dict[str, _ShardEntry[M]] = {}
        self._buffered = 0
        self._asking = 0
        """Shards whose ``asked_at`` is set: homes asked and not answered."""
        self._waiting: deque[str] = deque()
        """Shards that needed a home while ``_asking`` was at its bound, in
        that order (each is checked when its turn comes)."""
        self._leaving = False
        self._leave_sent = False
        """``Leave`` was sent (on some session)."""
        self._left = False
        self._closing = False
        """Shutting down or left: nothing starts any more."""
        self._drain_request: bool | None = None
        """A drain request to send once registered."""
        self._departure: _Departure | None = None
        # What a call found to do before it failed (the lease ran out in a
        # send the buffers then refused): done first at the next call, so a
        # fence's stops are never lost.
        self._deferred: list[Action[M]] = []

    # Accessors.

    def config(self) -> CoreConfig:
        """The configuration."""
        return self._config

    @property
    def _address(self) -> str:
        return self._config.registration.address

    def is_registered(self) -> bool:
        """True while registered on the current session."""
        return self._link == "registered"

    def is_fenced(self) -> bool:
        """True while the region is fenced: its lease ran out and was not renewed since."""
        return self._fenced

    def lease_until(self) -> int | None:
        """When the lease runs out (if the region ever held one)."""
        return self._lease_until

    def has_left(self) -> bool:
        """True once the node let the region go (``LeaveDone``, or
        ``NotRegistered`` while leaving)."""
        return self._left

    def is_idle(self) -> bool:
        """True when no shard runs or is stopping."""
        return all(entry.local == "idle" for entry in self._shards.values())

    def running(self) -> list[str]:
        """The shards the application runs (started, and not yet stopped), in order."""
        return sorted(shard for shard, entry in self._shards.items() if entry.local != "idle")

    def epoch_of(self, shard: str) -> int | None:
        """The epoch a shard runs here at, while it runs (not while stopping)."""
        entry = self._shards.get(shard)
        return entry.epoch if entry is not None and entry.local == "running" else None

    def buffered(self) -> int:
        """Messages buffered over all shards."""
        return self._buffered

    def cached_home(self, shard: str) -> str | None:
        """The cached home of a shard."""
        entry = self._shards.get(shard)
        return entry.home if entry is not None else None

    def delivers_locally(self, shard: str) -> bool:
        """True when a message sent to the shard now would be delivered here."""
        entry = self._shards.get(shard)
        return entry is not None and entry.local == "running" and entry.home == self._address

    # Helpers.

    def _lease_valid(self, now: int) -> bool:
        return not self._fenced and self._lease_until is not None and now < self._lease_until

    def _can_ask(self) -> bool:
        return self._link == "registered" and not self._fenced and not self._left

    def _entry(self, shard: str) -> _ShardEntry[M]:
        entry = self._shards.get(shard)
        if entry is None:
            entry = self._shards[shard] = _ShardEntry()
        return entry

    def _forget_if_empty(self, shard: str) -> None:
        entry = self._shards.get(shard)
        if entry is not None and entry.is_empty():
            del self._shards[shard]

    def _forget_empty(self) -> None:
        self._shards = {s: e for s, e in self._shards.items() if not e.is_empty()}

    def _in_order(self, select: Callable[[_ShardEntry[M]], bool]) -> list[str]:
        """The shards ``select`` picks, in the Rust ``BTreeMap``'s order."""
        return sorted(shard for shard, entry in self._shards.items() if select(entry))

    def _take_sequence(self, now: int) -> int:
        sequence = self._next_sequence
        self._next_sequence += 1
        self._sent[sequence] = now
        while len(self._sent) > SEQUENCE_WINDOW:
            del self._sent[next(iter(self._sent))]
        return sequence

    def _register(self, now: int, out: list[Action[M]]) -> None:
        sequence = self._take_sequence(now)
        self._link = _Registering(sequence)
        self._forget_asked()
        self._forget_empty()
        out.append(Send(replace(self._config.registration, sequence=sequence)))

    def _renew(self, sequence: int, lease_ms: int, now: int, out: list[Action[M]]) -> bool:
        """Extends the lease to ``sent_at + lease_ms``; true when that lifts a fence."""
        sent_at = self._sent.get(sequence)
        if sent_at is None:
            return False
        self._sent = {s: at for s, at in self._sent.items() if s > sequence}
        until = _add(sent_at, lease_ms)
        self._lease_until = until if self._lease_until is None else max(self._lease_until, until)
        if self._fenced and now < until:
            self._fenced = False
            out.append(Publish(actions.LeaseRegained()))
            return True
        return False

    def _check_lease(self, now: int, out: list[Action[M]]) -> None:
        """Fences the region when its lease has run out (after what a failed call deferred)."""
        out.extend(self._deferred)
        self._deferred = []
        if self._fenced or self._lease_until is None or now < self._lease_until:
            return
        _log.warning(
            "region %s: the lease ran out: stopping every shard and forgetting cached homes",
            self._address,
        )
        self._fenced = True
        deadline = _add(now, self._config.stop_deadline_ms)
        for shard in sorted(self._shards):
            entry = self._shards[shard]
            entry.home = None
            if entry.local == "running":
                entry.local = _Stopping(deadline, report=False)
                out.append(Stop(shard))
        self._forget_empty()
        out.append(Publish(actions.Fenced()))

    def _ask(self, shard: str, now: int, out: list[Action[M]]) -> None:
        if not self._can_ask():
            return
        entry = self._entry(shard)
        if entry.asked_at is None:
            if self._asking >= max(1, self._config.max_lookups_in_flight):
                # Its turn comes with an answer (`_ask_waiting`).
                if not entry.queued:
                    entry.queued = True
                    self._waiting.append(shard)
                return
            self._asking += 1
            entry.repeats = 0
        elif not entry.deferred:
            entry.repeats += 1
        entry.deferred = False
        entry.asked_at = now
        out.append(Send(wire.GetShardHome(shard=shard)))

    def _answered(self, shard: str) -> None:
        """The shard's home is no longer awaited."""
        entry = self._shards.get(shard)
        if entry is not None and entry.asked_at is not None:
            entry.asked_at = None
            self._asking -= 1

    def _forget_asked(self) -> None:
        """Nothing asked is awaited any more (the session ended or registers
        anew, which asks again for every home still needed)."""
        for entry in self._shards.values():
            entry.asked_at = None
            entry.queued = False
        self._asking = 0
        self._waiting.clear()

    def _ask_waiting(self, now: int, out: list[Action[M]]) -> None:
        """Asks for the homes that waited their turn, as far as the bound on
        lookups in flight allows."""
        while self._can_ask() and self._asking < max(1, self._config.max_lookups_in_flight):
            if not self._waiting:
                return
            shard = self._waiting.popleft()
            entry = self._shards.get(shard)
            if entry is None:
                continue
            entry.queued = False
            if entry.needs_home() and entry.asked_at is None:
                self._ask(shard, now, out)

    def _ask_missing(self, now: int, out: list[Action[M]]) -> None:
        """Asks for every home that is needed and not asked for."""
        if not self._can_ask():
            return
        for shard in self._in_order(lambda e: e.needs_home() and e.asked_at is None):
            self._ask(shard, now, out)

    def _stop_all(self, now: int, out: list[Action[M]]) -> None:
        """Stops every running shard without reporting it to the node."""
        deadline = _add(now, self._config.stop_deadline_ms)
        for shard in self._in_order(lambda e: e.local == "running"):
            entry = self._shards[shard]
            entry.local = _Stopping(deadline, report=False)
            if entry.home == self._address:
                entry.home = None
            out.append(Stop(shard))

    # The session.

    def connected(self, now: int) -> list[Action[M]]:
        """The session is up (the node welcomed the region): register."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        self._last_heard = now
        if not self._left:
            self._register(now, out)
        return out

    def disconnected(self, now: int, reason: str) -> list[Action[M]]:
        """The session is down. The lease keeps running out; cached homes stay
        (they are valid while the lease is); outstanding home requests are
        asked again after the next registration."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        if self._link == "down":
            return out
        self._link = "down"
        self._forget_asked()
        self._forget_empty()
        out.append(Publish(actions.Disconnected(reason=reason)))
        return out

    def on_message(self, message: wire.NodeMessage, now: int) -> list[Action[M]]:
        """A message from the node.

        Raises ``TypeError`` (before anything changes) when ``message`` is
        not a :data:`~shardalloc_client.wire.NodeMessage`.
        """
        if not isinstance(message, _NODE_MESSAGES):
            raise TypeError(f"{type(message).__name__} is not a NodeMessage")
        out: list[Action[M]] = []
        self._check_lease(now, out)
        violation = check_limits(message)
        if violation is not None:
            # Nothing of it is believed: hang up (the driver reconnects with a growing delay).
            out.append(Reconnect(f"protocol violation: {violation}"))
            return out
        self._last_heard = now
        match message:
            case wire.Welcome() | wire.Redirect():
                # The session handles both in its handshake.
                pass
            case wire.Refused(reason=reason):
                out.append(Publish(actions.Refused(reason=reason)))
                out.append(Reconnect(f"the node refused the session: {reason}"))
            case wire.Registered():
                self._on_registered(message, now, out)
            case wire.RegisterRefused(reason=reason):
                out.append(Publish(actions.Refused(reason=reason)))
                out.append(Reconnect(f"the node refused the registration: {reason}"))
            case wire.HeartbeatAck(incarnation=incarnation, sequence=sequence, lease_ms=lease_ms):
                # Also while re-registering: the node granted this lease.
                if (
                    incarnation == self._config.registration.incarnation
                    and self._link != "down"
                    and self._renew(sequence, lease_ms, now, out)
                ):
                    self._ask_missing(now, out)
            case wire.NotRegistered() if self._leaving:
                # The node removes a leaving region before its LeaveDone is
                # out (that waits for a persist), so a NotRegistered can
                # overtake it: the region is gone either way.
                self._finish_leave(now, out)
            case wire.NotRegistered():
                if not self._left and self._link == "registered":
                    self._register(now, out)
            case wire.ShardHome(shard=shard, home=home):
                self._on_home(shard, home, 0, now, out)
            case wire.ShardHomeEpoch(shard=shard, home=home, epoch=epoch):
                self._on_home(shard, home, epoch, now, out)
            case wire.ShardRefused(shard=shard, reason=reason):
                entry = self._shards.get(shard)
                dropped = len(entry.buffer) if entry is not None else 0
                if entry is not None:
                    entry.wanted = False
                self._give_up(shard, DeliveryError.shard_refused(shard, reason), out)
                out.append(
                    Publish(actions.ShardRefused(shard=shard, reason=reason, dropped=dropped))
                )
            case wire.BeginHandOff(shard=shard):
                # Messages for the shard wait here from now on; a home
                # request made now is answered when the hand-off ends.
                ask = False
                entry = self._shards.get(shard)
                if entry is not None:
                    entry.home = None
                    ask = entry.needs_home() and entry.asked_at is None
                    self._forget_if_empty(shard)
                out.append(Send(wire.BeginHandOffAck(shard=shard)))
                if ask:
                    self._ask(shard, now, out)
            case wire.HandOff(shard=shard):
                deadline = _add(now, self._config.stop_deadline_ms)
                entry = self._entry(shard)
                entry.home = None
                if entry.local == "running":
                    entry.local = _Stopping(deadline, report=True)
                    out.append(Stop(shard))
                elif isinstance(entry.local, _Stopping):
                    entry.local = _Stopping(entry.local.deadline, report=True)
                else:
                    self._forget_if_empty(shard)
                    out.append(Send(wire.ShardStopped(shard=shard)))
            case wire.PlacementChanged(shard=shard, target=target):
                out.append(Publish(actions.PlacementChanged(shard=shard, target=target)))
            case wire.LeaveDone():
                self._finish_leave(now, out)
            case wire.RegionRemoved(address=address):
                self._on_region_removed(address, now, out)
            case wire.ShuttingDown():
                out.append(Reconnect("the node is shutting down"))
        self._ask_waiting(now, out)
        self._advance_departure(now, out)
        return out

    def _on_region_removed(self, address: str, now: int, out: list[Action[M]]) -> None:
        """Another region was removed: every cached home on it is dropped;
        shards with messages waiting (or a home wanted) ask again at once,
        the others at their next send. The region's own removal is left to
        the node's ``NotRegistered``."""
        if address == self._address:
            _log.warning("the node says this region (%s) was removed; waiting for NotRegistered", address)
            return
        for shard in self._in_order(lambda e: e.home == address):
            entry = self._entry(shard)
            entry.home = None
            if entry.needs_home() and entry.asked_at is None:
                self._ask(shard, now, out)
            self._forget_if_empty(shard)
        out.append(Publish(actions.RegionRemoved(address=address)))

    def _finish_leave(self, now: int, out: list[Action[M]]) -> None:
        """The node let the region go: stop everything, start nothing."""
        if self._leaving and not self._left:
            self._left = True
            self._closing = True
            self._stop_all(now, out)
            self._give_up_all(out)
            out.append(Publish(actions.Left()))

    def _give_up_all(self, out: list[Action[M]]) -> None:
        """The region stops: every message still waiting for a home is given
        up (``RegionStopped``), in order per shard."""
        for shard in self._in_order(lambda e: bool(e.buffer)):
            self._give_up(shard, DeliveryError.region_stopped(shard), out)

    def _on_registered(self, message: wire.Registered, now: int, out: list[Action[M]]) -> None:
        incarnation, sequence = message.incarnation, message.sequence
        if (
            incarnation != self._config.registration.incarnation
            or self._link != _Registering(sequence)
        ):
            _log.warning(
                "ignoring a registration answer (incarnation %d, sequence %d) "
                "that is not for the registration in flight",
                incarnation,
                sequence,
            )
            return
        self._link = "registered"
        self._heartbeat_interval_ms = max(message.heartbeat_interval_ms, 1)
        self._next_heartbeat = _add(now, self._heartbeat_interval_ms)
        out.append(Publish(actions.Registered(incarnation=incarnation)))
        self._renew(sequence, message.lease_ms, now, out)
        # Hand-off stops that finished while the session was down.
        reported = self._in_order(lambda e: e.unreported_stop)
        for shard in reported:
            self._shards[shard].unreported_stop = False
        for shard in reported:
            out.append(Send(wire.ShardStopped(shard=shard)))
            self._forget_if_empty(shard)
        if self._drain_request is not None:
            draining, self._drain_request = self._drain_request, None
            out.append(Send(wire.Drain(draining=draining)))
        self._ask_missing(now, out)
        if self._leaving:
            self._leave_sent = True
            out.append(Send(wire.Leave()))

    def _on_home(self, shard: str, home: str, epoch: int, now: int, out: list[Action[M]]) -> None:
        own = home == self._address
        may_start = not self._closing and self._lease_valid(now)
        stop_deadline = _add(now, self._config.stop_deadline_ms)
        self._answered(shard)
        entry = self._entry(shard)
        if own:
            if not may_start:
                # Not while fenced or closing: asked again after renewal.
                self._forget_if_empty(shard)
                return
            if isinstance(entry.local, _Stopping):
                # Not before the last run stopped: asked again after the stop.
                return
            if entry.local == "idle":
                entry.local = "running"
                entry.epoch = epoch
                out.append(Start(shard, epoch))
                out.append(Publish(actions.ShardStarted(shard=shard, epoch=epoch)))
            elif epoch > entry.epoch:
                # Homed here again with a greater epoch: the node moved it
                # away and back meanwhile; this run's epoch is stale.
                _log.warning(
                    "shard %s runs here at epoch %d, older than %d: stopping it",
                    shard,
                    entry.epoch,
                    epoch,
                )
                entry.local = _Stopping(stop_deadline, report=False)
                out.append(Stop(shard))
        elif entry.local == "running":
            # The node homes it elsewhere: this run is stale.
            _log.warning(
                "shard %s runs here but its home is %s: stopping it", shard, home
            )
            entry.local = _Stopping(stop_deadline, report=False)
            out.append(Stop(shard))
        entry.wanted = False
        entry.round_failed = False
        if entry.failing is not None and entry.failing.to != home:
            # A home other than the failing one: a new run of attempts.
            entry.failing = None
        if entry.home != home:
            entry.home = home
            out.append(Publish(actions.HomeChanged(shard=shard, home=home)))
        flushed = len(entry.buffer)
        for message in entry.buffer:
            if own:
                out.append(Deliver(shard, message))
            else:
                out.append(Forward(home, shard, message))
        entry.buffer.clear()
        entry.returned = 0
        self._buffered -= flushed

    # Messages.

    def send(self, shard: str, message: M, now: int) -> list[Action[M]]:
        """The application sends ``message`` to ``shard``.

        Raises :class:`~shardalloc_client.region.errors.SendError` when the
        shard id is invalid (``InvalidShard``) or the message has no room
        (``BufferFull``, ``TotalBufferFull``).
        """
        reason = check_shard(shard)
        if reason is not None:
            raise SendError.invalid_shard(shard, reason)
        out: list[Action[M]] = []
        self._check_lease(now, out)
        self._route_or_defer(shard, message, now, out)
        return out

    def inbound(self, shard: str, message: M, now: int) -> list[Action[M]]:
        """Another region carried ``message`` for ``shard`` here. Delivered
        when the shard runs here (the sender sent it before the shard's
        hand-off began); otherwise routed again like a local send, raising
        :class:`~shardalloc_client.region.errors.SendError` as :meth:`send` does."""
        reason = check_shard(shard)
        if reason is not None:
            raise SendError.invalid_shard(shard, reason)
        out: list[Action[M]] = []
        self._check_lease(now, out)
        entry = self._shards.get(shard)
        if entry is not None and entry.local == "running":
            out.append(Deliver(shard, message))
        else:
            self._route_or_defer(shard, message, now, out)
        return out

    def _route_or_defer(self, shard: str, message: M, now: int, out: list[Action[M]]) -> None:
        """Routes ``message``; when that raises, keeps what ``out`` holds for the next call."""
        try:
            self._route(shard, message, now, out)
        except SendError:
            self._deferred = out
            raise

    def _route(self, shard: str, message: M, now: int, out: list[Action[M]]) -> None:
        own = self._address
        entry = self._shards.get(shard)
        if entry is not None and entry.home is not None:
            if entry.home == own and entry.local == "running":
                out.append(Deliver(shard, message))
                return
            if entry.home != own:
                out.append(Forward(entry.home, shard, message))
                return
        queued = len(entry.buffer) if entry is not None else 0
        if queued >= self._config.shard_buffer_limit:
            raise SendError.buffer_full(shard, self._config.shard_buffer_limit)
        if self._buffered >= self._config.total_buffer_limit:
            raise SendError.total_buffer_full(self._config.total_buffer_limit)
        entry = self._entry(shard)
        entry.buffer.append(message)
        ask = entry.asked_at is None
        self._buffered += 1
        if ask:
            self._ask(shard, now, out)

    def request_home(self, shard: str, now: int) -> HomeLookup[M]:
        """Someone wants the shard's home: the cached one (:class:`Known`), or
        it is asked for (:class:`Asked`, with the actions to perform).

        Raises :class:`~shardalloc_client.region.errors.RegionError`
        (``InvalidShard``) when the shard id is invalid.
        """
        reason = check_shard(shard)
        if reason is not None:
            raise RegionError.invalid_shard(shard, reason)
        out: list[Action[M]] = []
        self._check_lease(now, out)
        home = self.cached_home(shard)
        if home is not None and not out:
            return Known(home)
        entry = self._entry(shard)
        entry.wanted = True
        if entry.home is None and entry.asked_at is None:
            self._ask(shard, now, out)
        return Asked(out)

    def stop_finished(self, shard: str, now: int) -> list[Action[M]]:
        """The application finished stopping the shard (after a :class:`Stop`).
        A hand-off's stop is reported to the node."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        self._finish_stop(shard, now, out)
        self._advance_departure(now, out)
        return out

    def _finish_stop(self, shard: str, now: int, out: list[Action[M]]) -> None:
        connected = self._link != "down"
        entry = self._shards.get(shard)
        if entry is None or not isinstance(entry.local, _Stopping):
            return
        report = entry.local.report
        entry.local = "idle"
        if report:
            if connected:
                out.append(Send(wire.ShardStopped(shard=shard)))
            else:
                entry.unreported_stop = True
        out.append(Publish(actions.ShardStopped(shard=shard)))
        if entry.needs_home() and entry.asked_at is None:
            self._ask(shard, now, out)
        self._forget_if_empty(shard)

    def forward_failed(
        self, shard: str, to: str, messages: Iterable[M], reason: str, now: int
    ) -> list[Action[M]]:
        """The transport could not carry these messages (in order) to ``to``,
        at once or later (``reason`` says why): one more failed attempt in the
        shard's run. Within ``forward_attempts`` and ``forward_deadline_ms``
        they go back to the front of the shard's buffer, the cached home is
        dropped and asked for again after ``home_retry_ms``; past either, they
        and every message waiting for the shard are given up
        (:class:`~shardalloc_client.region.actions.Undelivered`, in order)."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        returned = list(messages)
        can_ask = self._can_ask()
        self._buffered += len(returned)
        entry = self._entry(shard)
        if entry.home is not None and entry.home != to:
            _log.warning(
                "a failed forward of shard %s to %s, which is no longer its cached home", shard, to
            )
        # Dropped even when another home is cached: the messages given back
        # wait in the buffer, flushed in order by the next answer.
        entry.home = None
        failing = entry.failing or _Failing(since=now, attempts=0, to=to, reason=reason)
        if not entry.round_failed:
            failing.attempts += 1
        entry.round_failed = True
        failing.to = to
        failing.reason = reason
        entry.failing = failing
        for message in returned:
            entry.buffer.insert(entry.returned, message)
            entry.returned += 1
        if failing.attempts >= self._config.forward_attempts:
            self._give_up(shard, DeliveryError.attempts_exhausted(shard, to, failing.attempts, reason), out)
        elif now - failing.since >= self._config.forward_deadline_ms:
            self._give_up(shard, _deadline_passed(shard, failing, now), out)
        elif can_ask and entry.asked_at is None:
            # Asked again after ``home_retry_ms`` (:meth:`tick`): the wait
            # holds a place among the lookups in flight.
            entry.asked_at = now
            entry.repeats = 0
            entry.deferred = True
            self._asking += 1
        self._ask_waiting(now, out)
        return out

    def _give_up(self, shard: str, error: DeliveryError, out: list[Action[M]]) -> None:
        """Gives up every message waiting for ``shard``, in order; its next
        message starts a new run."""
        self._answered(shard)
        entry = self._shards.get(shard)
        if entry is None:
            return
        if entry.buffer:
            _log.warning("giving up %d waiting messages: %s", len(entry.buffer), error)
        entry.failing = None
        entry.returned = 0
        self._buffered -= len(entry.buffer)
        for message in entry.buffer:
            out.append(actions.Undelivered(shard=shard, message=message, error=error))
        entry.buffer.clear()
        self._forget_if_empty(shard)

    # Time.

    def tick(self, now: int, metrics: Callable[[], Mapping[str, float]]) -> list[Action[M]]:
        """Time passes: the lease, stop deadlines, heartbeats, the node's
        silence and home requests to repeat. ``metrics`` is called only when
        a heartbeat is due."""
        return self.tick_with_load(now, metrics, lambda runs: None)

    def tick_with_load(
        self,
        now: int,
        metrics: Callable[[], Mapping[str, float]],
        load: Callable[[Callable[[str], bool]], wire.LoadReport | None],
    ) -> list[Action[M]]:
        """:meth:`tick`, with a load report after each heartbeat: ``load`` is
        called only when a heartbeat is due, with what tells the shards
        running here (running or stopping) from the others, and its report
        (if any) is sent right after the heartbeat, as a
        :class:`~shardalloc_client.wire.Load`."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        late = self._in_order(
            lambda e: isinstance(e.local, _Stopping) and e.local.deadline <= now
        )
        for shard in late:
            _log.warning(
                "the application did not stop shard %s within %d ms; reporting it stopped anyway",
                shard,
                self._config.stop_deadline_ms,
            )
            out.append(AbandonStop(shard))
            self._finish_stop(shard, now, out)
        deadline = self._config.forward_deadline_ms
        for shard in self._in_order(lambda e: e.failing is not None and now - e.failing.since >= deadline):
            failing = self._shards[shard].failing
            assert failing is not None
            self._give_up(shard, _deadline_passed(shard, failing, now), out)
        if self._link == "registered" and now >= self._next_heartbeat:
            sequence = self._take_sequence(now)
            self._next_heartbeat = _add(now, self._heartbeat_interval_ms)
            out.append(Send(wire.Heartbeat(sequence=sequence, metrics=dict(metrics()))))

            def runs(shard: str) -> bool:
                entry = self._shards.get(shard)
                return entry is not None and entry.local != "idle"

            report = load(runs)
            if report is not None:
                out.append(Send(_as_load(report)))
        if self._link != "down":
            if self._link == "registered":
                # Three missed acknowledgements: a paused or cut-off node is
                # left well within the lease, so a failover costs no shard.
                limit = max(min(self._heartbeat_interval_ms * 3, _U64_MAX), MIN_SILENCE_MS)
            else:
                limit = self._config.response_timeout_ms
            silent = _sub(now, self._last_heard)
            if silent >= limit:
                self._last_heard = now
                out.append(Reconnect(f"the node has been silent for {silent} ms"))
        if self._can_ask():
            retry = self._config.home_retry_ms
            due = self._in_order(
                lambda e: e.needs_home()
                and e.asked_at is not None
                and now >= _add(e.asked_at, retry * 2 ** min(e.repeats, MAX_RETRY_DOUBLINGS))
            )
            for shard in due:
                self._ask(shard, now, out)
            self._ask_waiting(now, out)
        self._advance_departure(now, out)
        return out

    # Leaving, draining, shutting down.

    def leave(self, now: int) -> list[Action[M]]:
        """The region wants to leave: ``Leave`` now if registered, else after
        the next registration. The node hands its shards off, then answers
        ``LeaveDone``."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        if self._left or self._leaving:
            return out
        self._start_leaving(out)
        return out

    def _start_leaving(self, out: list[Action[M]]) -> None:
        self._leaving = True
        if self._link == "registered":
            self._leave_sent = True
            out.append(Send(wire.Leave()))

    def drain_and_leave(self, bound_ms: int, now: int) -> list[Action[M]]:
        """The region drains, then leaves, within ``bound_ms`` (see the module
        documentation). Ignored when the region already leaves, has left or
        departs. Its end is :meth:`departure`."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        if self._left or self._leaving or self._departure is not None:
            return out
        self._departure = _Departure(
            bound_ms=bound_ms,
            leave_at=_add(now, bound_ms // 2),
            give_up_at=_add(now, bound_ms),
        )
        out.extend(self.request_drain(True, now))
        self._advance_departure(now, out)
        return out

    def departure(self) -> Departed | None:
        """How a :meth:`drain_and_leave` ended: ``None`` while it runs (or when
        none was asked for), ``Departed()`` once the node let the region go,
        ``Departed(error)`` once the bound passed first (the shards still
        running were told to stop: wait for :meth:`is_idle`)."""
        return self._departure.outcome if self._departure is not None else None

    def _advance_departure(self, now: int, out: list[Action[M]]) -> None:
        """Moves a drain-and-leave on: done once left; ``Leave`` once nothing
        runs here (or at half the bound); gives up at the bound."""
        departure = self._departure
        if departure is None or departure.outcome is not None:
            return
        if self._left:
            departure.outcome = Departed()
        elif now >= departure.give_up_at:
            shards = self.running()
            leave_asked = self._leave_sent
            _log.warning(
                "region %s did not drain and leave within %d ms (%d shards running, leave %s): "
                "stopping what still runs",
                self._address,
                departure.bound_ms,
                len(shards),
                "asked" if leave_asked else "not asked",
            )
            if leave_asked and self._link == "registered":
                # Leaving, it gets no new shards; undrained, a restart at
                # this address is not left draining.
                out.append(Send(wire.Drain(draining=False)))
            self._closing = True
            self._stop_all(now, out)
            self._give_up_all(out)
            departure.outcome = Departed(
                RegionError.drain_and_leave_timed_out(departure.bound_ms, shards, leave_asked)
            )
        elif not self._leaving and (self.is_idle() or now >= departure.leave_at):
            self._start_leaving(out)

    def shutdown(self, now: int) -> list[Action[M]]:
        """The region shuts down without leaving: every running shard stops
        and nothing starts any more."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        self._closing = True
        self._stop_all(now, out)
        self._give_up_all(out)
        return out

    def request_drain(self, draining: bool, now: int) -> list[Action[M]]:
        """Asks the node to drain (``True``) or undrain (``False``) this
        region; sent once, now or after the next registration."""
        out: list[Action[M]] = []
        self._check_lease(now, out)
        if self._link == "registered":
            self._drain_request = None
            out.append(Send(wire.Drain(draining=draining)))
        else:
            self._drain_request = draining
        return out


def _deadline_passed(shard: str, failing: _Failing, now: int) -> DeliveryError:
    """The error of a run of failed forwards past its deadline."""
    return DeliveryError.deadline_passed(shard, failing.to, max(0, now - failing.since), failing.reason)


_NODE_MESSAGES: Final = get_args(wire.NodeMessage)
"""The classes of :data:`~shardalloc_client.wire.NodeMessage`."""


def _as_load(report: wire.LoadReport) -> wire.Load:
    """The ``Load`` message carrying ``report``."""
    if isinstance(report, wire.Load):
        return report
    return wire.Load(window_ms=report.window_ms, shards=report.shards, rest=report.rest)


MAX_LEASE_MS: Final = 86_400_000
"""The longest lease (and heartbeat interval) a node may grant: one day."""


def check_limits(message: wire.NodeMessage) -> str | None:
    """What a region relies on in a message from the node, the same in every
    client (contracts/region-core/limits.txt): a lease and a heartbeat
    interval of 1 ms to :data:`MAX_LEASE_MS`, a shard id of 1 to 256 bytes, no
    empty home or region address. The rule broken, or ``None``."""

    def duration(what: str, value: int) -> str | None:
        return None if 1 <= value <= MAX_LEASE_MS else f"{what} {value} is out of range 1..={MAX_LEASE_MS}"

    def shard(what: str, shard_id: str) -> str | None:
        size = len(shard_id.encode("utf-8"))
        if 1 <= size <= MAX_SHARD_ID_BYTES:
            return None
        return f"{what} of {size} bytes is out of range 1..={MAX_SHARD_ID_BYTES}"

    def address(what: str, value: str) -> str | None:
        return f"{what} is empty" if value == "" else None

    match message:
        case wire.Registered():
            return duration("Registered.lease_ms", message.lease_ms) or duration(
                "Registered.heartbeat_interval_ms", message.heartbeat_interval_ms
            )
        case wire.HeartbeatAck():
            return duration("HeartbeatAck.lease_ms", message.lease_ms)
        case wire.ShardHome():
            return shard("ShardHome.shard", message.shard) or address("ShardHome.home", message.home)
        case wire.ShardHomeEpoch():
            return shard("ShardHomeEpoch.shard", message.shard) or address("ShardHomeEpoch.home", message.home)
        case wire.ShardRefused():
            return shard("ShardRefused.shard", message.shard)
        case wire.BeginHandOff():
            return shard("BeginHandOff.shard", message.shard)
        case wire.HandOff():
            return shard("HandOff.shard", message.shard)
        case wire.PlacementChanged():
            return shard("PlacementChanged.shard", message.shard)
        case wire.RegionRemoved():
            return address("RegionRemoved.address", message.address)
        case _:
            return None
