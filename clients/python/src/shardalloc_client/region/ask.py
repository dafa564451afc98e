"""Request and reply between regions: a :class:`Request` is what the region
routes for :meth:`Region.ask <shardalloc_client.region.Region.ask>` (the
request and its :class:`Replier`), exactly as it routes a sent message (in
order with the sends to the same shard, buffered across hand-offs, resent
after a lost home). The :class:`Replier` answers once: a second answer, or
one after the asker gave up, is dropped. A port of the Rust client's
``region/ask.rs`` (the TypeScript client's ``region/ask.ts``).
"""

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .errors import AskError

__all__ = ["Replier", "Request"]

M = TypeVar("M")

Answer = Callable[[Any, AskError | None], None]
"""Called once with the reply and ``None``, or ``None`` and why there is none."""


class Replier:
    """Answers one request, once: to the asker in process, or over the
    inter-region wire."""

    def __init__(self, shard: str, timeout_ms: int, answer: Answer) -> None:
        """A replier for a request to ``shard`` that its asker waits
        ``timeout_ms`` for; ``answer`` is called once with the outcome."""
        self.shard = shard
        """The shard asked."""
        self._deadline = time.monotonic() + timeout_ms / 1000
        self._answer: Answer | None = answer

    def remaining_ms(self) -> int:
        """How long the asker still waits, in milliseconds (0 once it gave up)."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    @property
    def answered(self) -> bool:
        """True once answered."""
        return self._answer is None

    def reply(self, reply: Any) -> None:
        """Answers the request."""
        answer, self._answer = self._answer, None
        if answer is not None:
            answer(reply, None)

    def fail(self, error: AskError) -> None:
        """Answers the request with why it cannot be answered."""
        answer, self._answer = self._answer, None
        if answer is not None:
            answer(None, error)

    def fail_with(self, reason: str) -> None:
        """Fails the request with ``reason`` (an :class:`AskError` of kind ``Failed``)."""
        self.fail(AskError.failed(self.shard, reason))


class Request(Generic[M]):
    """A request on its way to a shard's home; what a transport hands back
    with ``Inbox.not_delivered`` in place of a message."""

    __slots__ = ("message", "replier")

    def __init__(self, message: M, replier: Replier) -> None:
        """``message``, answered through ``replier``."""
        self.message = message
        """The request."""
        self.replier = replier
        """Where its answer goes."""
