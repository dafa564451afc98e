"""The Server-Sent Events framing the decision stream uses.

Lines of ``id:`` and ``data:``, an event at each blank line, comments
(``: live``, ``: keep-alive``) ignored. Fed bytes as they come; a line
longer than 1 MiB, or one that is not UTF-8, is an :class:`SseError`
naming the problem. A port of the TypeScript client's ``admin/sse.ts``.
"""

from dataclasses import dataclass
from typing import Final

from .errors import ShardallocError

__all__ = ["MAX_EVENT_BYTES", "SseError", "SseEvent", "SseParser"]

MAX_EVENT_BYTES: Final = 1 << 20
"""Most bytes one line may take before the stream is refused as broken."""


class SseError(ShardallocError, ValueError):
    """The stream broke the framing (a line too long, or not UTF-8)."""


@dataclass(frozen=True)
class SseEvent:
    """One framed event: its ``id`` (``None`` when it had none) and its ``data`` text."""

    id: str | None
    data: str


class SseParser:
    """The SSE framing: feed it bytes, take whole events out."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._id: str | None = None
        self._data: str | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[SseEvent]:
        """Adds ``data``; answers the events it completes, in order. Raises
        :class:`SseError` for a line over :data:`MAX_EVENT_BYTES` bytes or
        one that is not UTF-8."""
        self._buffer += data
        events: list[SseEvent] = []
        start = 0
        while (end := self._buffer.find(b"\n", start)) >= 0:
            raw = bytes(self._buffer[start:end])
            start = end + 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                del self._buffer[:start]
                raise SseError("the stream sent a line that is not UTF-8") from None
            if line.endswith("\r"):
                line = line[:-1]
            if line == "":
                if self._data is not None:
                    events.append(SseEvent(self._id, self._data))
                self._id = None
                self._data = None
                continue
            if line.startswith(":"):
                continue
            field, colon, value = line.partition(":")
            if not colon:
                value = ""
            if value.startswith(" "):
                value = value[1:]
            if field == "id":
                self._id = value
            elif field == "data":
                self._data = value if self._data is None else f"{self._data}\n{value}"
        del self._buffer[:start]
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise SseError(f"the stream sent a line longer than {MAX_EVENT_BYTES} bytes")
        return events
