"""What the region core hands its driver: the :data:`Action` variants, the
:data:`Update` variants it publishes, and :data:`HomeLookup`, the answer to
a home request.

Frozen dataclasses, one per variant of the Rust client's ``Action``,
``Update`` and ``HomeLookup`` enums (``client/src/region/core.rs`` and
``client/src/region/mod.rs``), with the same names and fields. Some update
names are also message names in :mod:`shardalloc_client.wire`
(``Registered``, ``Refused``, ``ShardRefused``, ``PlacementChanged``,
``ShardStopped``): import one of the two modules by its name where both
are used.

``M`` is the application's message type: the core carries its messages
without looking at them.
"""

from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar, Union

from .errors import DeliveryError
from ..wire import RegionMessage

__all__ = [
    "Registered",
    "Refused",
    "Disconnected",
    "Fenced",
    "LeaseRegained",
    "HomeChanged",
    "ShardRefused",
    "PlacementChanged",
    "ShardStarted",
    "ShardStopped",
    "Left",
    "RegionRemoved",
    "Update",
    "Send",
    "Start",
    "Stop",
    "AbandonStop",
    "Deliver",
    "Forward",
    "Undelivered",
    "Publish",
    "Reconnect",
    "Action",
    "Known",
    "Asked",
    "HomeLookup",
]

M = TypeVar("M")

# What a region publishes on its updates stream (the Rust `Update`).


@dataclass(frozen=True)
class Registered:
    """The node accepted the registration (first, or after a reconnect)."""

    incarnation: int
    """The incarnation registered."""


@dataclass(frozen=True)
class Refused:
    """The node refused the session or the registration; the region retries
    with backoff."""

    reason: str
    """The node's reason."""


@dataclass(frozen=True)
class Disconnected:
    """The session with the node is down; the region reconnects with backoff."""

    reason: str
    """Why."""


@dataclass(frozen=True)
class Fenced:
    """The lease ran out: every shard was told to stop, cached homes are forgotten."""


@dataclass(frozen=True)
class LeaseRegained:
    """A renewal lifted the fence; shards start again as their homes are learnt."""


@dataclass(frozen=True)
class HomeChanged:
    """The region learnt where a shard lives (it was unknown, or moved)."""

    shard: str
    """The shard."""
    home: str
    """Its home's address."""


@dataclass(frozen=True)
class ShardRefused:
    """The node refused to give a shard a home; its buffered messages were dropped."""

    shard: str
    """The shard."""
    reason: str
    """The node's reason."""
    dropped: int
    """How many buffered messages were dropped."""


@dataclass(frozen=True)
class PlacementChanged:
    """An operator changed a shard's placement (``target`` ``None``: removed)."""

    shard: str
    """The shard."""
    target: str | None
    """Its target region."""


@dataclass(frozen=True)
class ShardStarted:
    """A shard was started here."""

    shard: str
    """The shard."""
    epoch: int
    """Its epoch here: greater than any earlier home's of the shard, for
    fencing writes to the application's storage."""


@dataclass(frozen=True)
class ShardStopped:
    """A shard stopped here (or its stop was abandoned at the deadline)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class Left:
    """The node confirmed the leave; the region stops."""


@dataclass(frozen=True)
class RegionRemoved:
    """Another region of the type was removed (it left, or was silent past
    the node's removal timeout): every cached home on it was dropped, and
    its shards' homes are asked again when next needed."""

    address: str
    """The removed region's address."""


Update: TypeAlias = Union[
    Registered,
    Refused,
    Disconnected,
    Fenced,
    LeaseRegained,
    HomeChanged,
    ShardRefused,
    PlacementChanged,
    ShardStarted,
    ShardStopped,
    Left,
    RegionRemoved,
]
"""What a region publishes on its updates stream."""

# What the driver must do, in order (the Rust `Action`).


@dataclass(frozen=True)
class Send:
    """Send a message to the node over the session."""

    message: RegionMessage
    """The message."""


@dataclass(frozen=True)
class Start:
    """Start the shard in the application (before any delivery to it)."""

    shard: str
    """The shard."""
    epoch: int
    """Its epoch here (0 from a node speaking protocol 1 or 2)."""


@dataclass(frozen=True)
class Stop:
    """Stop the shard in the application, after the deliveries queued so
    far; then feed back ``RegionCore.stop_finished``."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class AbandonStop:
    """The stop ran past its deadline: give up on it (the core already
    counts the shard as stopped)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class Deliver(Generic[M]):
    """Deliver a message to the shard, which runs here."""

    shard: str
    """The shard."""
    message: M
    """The message."""


@dataclass(frozen=True)
class Forward(Generic[M]):
    """Carry a message to the shard's home, another region. If the
    transport fails, feed the message back with ``RegionCore.forward_failed``."""

    to: str
    """The home's address."""
    shard: str
    """The shard."""
    message: M
    """The message."""


@dataclass(frozen=True)
class Undelivered(Generic[M]):
    """A message the region took is given up: its shard's forwards kept
    failing. Hand it to the application with the error."""

    shard: str
    """The shard."""
    message: M
    """The message."""
    error: DeliveryError
    """Why it was given up."""


@dataclass(frozen=True)
class Publish:
    """Publish on the updates stream."""

    update: Update
    """The update."""


@dataclass(frozen=True)
class Reconnect:
    """Hang up the session; the driver reconnects with backoff and feeds
    ``RegionCore.disconnected`` once the session is down."""

    reason: str
    """Why."""


Action: TypeAlias = Union[
    Send, Start, Stop, AbandonStop, Deliver[M], Forward[M], Undelivered[M], Publish, Reconnect
]
"""Something the driver must do; the core returns them in the order they
must be done."""

# The answer to `RegionCore.request_home` (the Rust `HomeLookup`).


@dataclass(frozen=True)
class Known:
    """The home is cached."""

    home: str
    """The home's address."""


@dataclass(frozen=True)
class Asked(Generic[M]):
    """The home is unknown; it has been (or will be) asked for. A
    :class:`HomeChanged` or :class:`ShardRefused` update answers it."""

    actions: list[Action[M]]
    """What the driver must do now (the request, when it could be sent)."""


HomeLookup: TypeAlias = Union[Known, Asked[M]]
"""The answer to ``RegionCore.request_home``."""
