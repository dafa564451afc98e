"""How a region carries messages to a shard whose home is another region.

The application gives its :class:`~shardalloc_client.region.Region` a
:class:`Transport`; :class:`InMemoryTransport` links regions of one process
(tests, examples); :class:`~shardalloc_client.region.peer_transport.PeerTransport`
links processes. A service may carry messages over its own network (HTTP,
gRPC, a queue) and hand what arrives to the home region's :class:`Inbox`
(``Region.inbox()``). Requests (``Region.ask``) travel with a
:class:`~shardalloc_client.region.ask.Replier` that answers them. A port of the TypeScript client's
``region/transport.ts`` (the Rust client's ``region/transport.rs``).

Everything here is called on the region's event loop, synchronously: a
transport that needs I/O queues the message and returns.
"""

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias, TypeVar

from ..errors import ShardallocError
from .ask import Replier, Request

__all__ = ["TransportErrorKind", "TransportError", "Inbox", "Transport", "InMemoryTransport"]

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)

TransportErrorKind: TypeAlias = Literal["unknown-address", "inbox-full", "closed", "unreachable", "peer-busy"]
"""Why a message could not be carried."""


class TransportError(ShardallocError):
    """A message could not be carried; the region buffers it again and asks
    for the shard's home anew."""

    kind: TransportErrorKind
    """``unknown-address``, ``inbox-full``, ``closed``, ``unreachable`` or
    ``peer-busy`` (back-pressure)."""

    def __init__(self, kind: TransportErrorKind, message: str) -> None:
        """An error of ``kind``, explained by ``message``."""
        super().__init__(message)
        self.kind = kind

    def __repr__(self) -> str:
        return f"TransportError({self.kind}: {self})"


class Inbox(Protocol[M_contra]):
    """Where a region receives the messages other regions forward to it."""

    @property
    def address(self) -> str:
        """The region's address."""
        ...

    def deliver(self, shard: str, message: M_contra) -> None:
        """Hands a message for ``shard`` to the region; raises
        :class:`TransportError` when it cannot take it."""
        ...

    def ask(self, shard: str, message: M_contra, replier: Replier) -> None:
        """Hands a request for ``shard`` to the region, answered through
        ``replier``; raises :class:`TransportError` when it cannot take it."""
        ...

    def not_delivered(
        self, to: str, shard: str, messages: "Sequence[M_contra | Request[M_contra]]", error: TransportError
    ) -> None:
        """For a transport that learns only later that messages this region
        gave its ``send`` were not delivered to ``to`` (a connection refused
        or reset, a time-out, the far region answering that it is not the
        shard's home): hands them back in the order sent, with why. The
        region asks for the home again and resends them, or gives them up to
        the application's ``undelivered`` past its limits. Requests
        (:class:`~shardalloc_client.region.ask.Request`) come back the same
        way, among the messages in the order sent, and are resent too.
        Ignored once the region has stopped."""
        ...


class Transport(Protocol[M]):
    """Carries messages between regions."""

    def send(self, to: str, shard: str, message: M) -> None:
        """Carries ``message`` for ``shard`` to the region at ``to``; raises
        :class:`TransportError` when it cannot."""
        ...

    def ask(self, to: str, shard: str, message: M, replier: Replier) -> None:
        """Carries a request for ``shard`` to the region at ``to`` (in order
        with :meth:`send`'s messages), which answers through ``replier``;
        raises :class:`TransportError` when it cannot. A transport without
        it (an older one) makes the region fail asks that must leave the
        process."""
        ...

    def attach(self, inbox: Inbox[M]) -> None:
        """The region started and receives at ``inbox`` (a no-op for a
        transport that does not need to know)."""
        ...

    def detach(self, inbox: Inbox[M]) -> None:
        """The region stopped (a no-op for a transport that does not need to know)."""
        ...


class InMemoryTransport(Transport[M]):
    """Regions of one process and one event loop, reaching each other's
    inboxes directly."""

    def __init__(self) -> None:
        """A transport with no region attached."""
        self._inboxes: dict[str, Inbox[M]] = {}

    def send(self, to: str, shard: str, message: M) -> None:
        """Hands ``message`` to the inbox of the region at ``to``."""
        self._inbox_of(to).deliver(shard, message)

    def ask(self, to: str, shard: str, message: M, replier: Replier) -> None:
        """Hands a request to the inbox of the region at ``to``."""
        self._inbox_of(to).ask(shard, message, replier)

    def _inbox_of(self, to: str) -> Inbox[M]:
        inbox = self._inboxes.get(to)
        if inbox is None:
            raise TransportError("unknown-address", f"no region at address {to}")
        return inbox

    def attach(self, inbox: Inbox[M]) -> None:
        """Makes the region reachable at its address."""
        self._inboxes[inbox.address] = inbox

    def detach(self, inbox: Inbox[M]) -> None:
        """Makes the region unreachable, unless another took its address since."""
        if self._inboxes.get(inbox.address) is inbox:
            del self._inboxes[inbox.address]

    def addresses(self) -> list[str]:
        """The addresses attached, sorted."""
        return sorted(self._inboxes)
