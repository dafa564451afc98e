"""``AdminClient``: the node's admin REST API from asyncio.

Placements, rebalance, regions and drains, shards, strategies (upload,
activate, roll back) and the decision event stream — a port of the
TypeScript client's ``admin/client.ts``. Every path is built from the base
URL with percent-encoded segments. Every non-2xx answer carries
``{"error":{"code","message"}}`` and becomes a :class:`NodeRefusedError`
(one subclass per kind of status: :class:`NotFoundError`,
:class:`ConflictError`, …) with that status, code and message; a request
that got no answer is a :class:`NodeUnreachableError` naming the URL, an
answer that does not read a :class:`BadAnswerError`. All are
:class:`AdminError`\ s. Answers are dataclasses
(:mod:`shardalloc_client.admin_types`) with snake_case fields. ``https://`` nodes may be signed by a
private CA (``ca_file`` / ``ca_pem``).

HTTP is spoken here, over asyncio streams (``asyncio.open_connection``,
with an :class:`ssl.SSLContext` for ``https://``): HTTP/1.1, one
connection per request (``Connection: close``), bodies by
``Content-Length``, chunked or to the end of the connection. So no
dependency is added, every call is cancellable, and the event stream is
read as it comes and hung up at once by :meth:`EventStream.close`.
"""

import asyncio
import json
import re
import ssl
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeVar
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from .admin_types import (
    ActivateRequest,
    DecisionEvent,
    DrainState,
    Placement,
    Placements,
    PlacementsWritten,
    RebalanceResponse,
    Regions,
    ShardState,
    AttributesWritten,
    Strategies,
    StoredStrategy,
    StrategyState,
    StreamedEvent,
)
from ._json import JsonError, from_json, to_json
from .errors import ShardallocError
from .region.session import tls_context
from .sse import SseError, SseParser

__all__ = [
    "REQUEST_TIMEOUT_MS",
    "AdminClient",
    "AdminError",
    "BadAnswerError",
    "ConflictError",
    "EventStream",
    "InvalidClientConfigError",
    "InvalidRequestError",
    "NodeRefusedError",
    "NodeUnreachableError",
    "NotFoundError",
    "UnauthorizedError",
    "UnavailableError",
]

T = TypeVar("T")

REQUEST_TIMEOUT_MS: Final = 60_000
"""How long a request may take before it is given up (ms); for the event
stream, until its headers arrive."""

_READ_SIZE: Final = 64 * 1024
_MAX_HEADER_LINES: Final = 200
_UNTRUSTED: Final = re.compile(r"certificate|self.signed|CERT_", re.IGNORECASE)


class AdminError(ShardallocError):
    """Why an admin request failed. ``str(error)`` is the whole sentence;
    the subclasses say what kind of failure it was."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str | None = None,
        node_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        """The whole sentence."""
        self.status = status
        """The HTTP status, when the node answered."""
        self.code = code
        """The node's error code (``unknown-type``, ``invalid-placement``, …), when it sent one."""
        self.node_message = node_message
        """The node's own sentence (its ``error.message``), when it sent one."""


class InvalidClientConfigError(AdminError):
    """The client cannot be made as given: a bad base URL, unreadable CA
    certificates, or a call on a closed client."""


class NodeUnreachableError(AdminError):
    """No answer: the connection failed, the node's certificate is not
    trusted, no answer came in time, or an event stream broke."""


class BadAnswerError(AdminError):
    """The node answered with something this client cannot read."""


class NodeRefusedError(AdminError):
    """The node answered with an error status (``status``, ``code``,
    ``node_message``)."""


class InvalidRequestError(NodeRefusedError):
    """400, 413 or 422: the request is wrong (the node's message says how)."""


class UnauthorizedError(NodeRefusedError):
    """401 or 403: no token, a wrong one, or a request from a foreign origin."""


class NotFoundError(NodeRefusedError):
    """404: no such type, shard, region or strategy."""


class ConflictError(NodeRefusedError):
    """409: the state does not allow it now (a freeze, a hand-off, …)."""


class UnavailableError(NodeRefusedError):
    """429, 503 or 507: the node cannot take it now (no leader, a limit);
    worth retrying later."""


_BY_STATUS: Final[dict[int, type[NodeRefusedError]]] = {
    400: InvalidRequestError,
    413: InvalidRequestError,
    422: InvalidRequestError,
    401: UnauthorizedError,
    403: UnauthorizedError,
    404: NotFoundError,
    409: ConflictError,
    429: UnavailableError,
    503: UnavailableError,
    507: UnavailableError,
}


def _read(kind: type[T], answer: Any) -> T:
    """An answer as its dataclass; a :class:`BadAnswerError` when it does not fit."""
    try:
        return from_json(kind, answer)
    except JsonError as error:
        raise BadAnswerError(f"cannot read the node's answer as {kind.__name__}: {error}") from None


class _Response:
    """An answer's status and headers, and its body read piece by piece."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        method: str,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.status = status
        self.headers = headers
        self._mode: Literal["length", "chunked", "eof"]
        self._left = 0
        self._crlf = False
        self._done = False
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._mode, self._done = "length", True
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in headers:
            self._mode = "length"
            self._left = int(headers["content-length"])
            if self._left < 0:
                raise ValueError(f"a negative Content-Length: {self._left}")
        else:
            self._mode = "eof"

    async def read(self) -> bytes:
        """The next piece of the body; ``b""`` at its end."""
        if self._done:
            return b""
        if self._mode == "eof":
            data = await self._reader.read(_READ_SIZE)
            if not data:
                self._done = True
            return data
        if self._mode == "chunked":
            while self._left == 0:
                if self._crlf:
                    await self._reader.readexactly(2)
                    self._crlf = False
                line = await self._reader.readline()
                if not line.endswith(b"\n"):
                    raise ConnectionError("the connection closed in the middle of the answer")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (trailer := await self._reader.readline()) not in (b"\r\n", b"\n", b""):
                        del trailer
                    self._done = True
                    return b""
                self._left = size
        elif self._left == 0:
            self._done = True
            return b""
        data = await self._reader.read(min(self._left, _READ_SIZE))
        if not data:
            raise ConnectionError("the connection closed in the middle of the answer")
        self._left -= len(data)
        if self._mode == "chunked" and self._left == 0:
            self._crlf = True
        return data

    async def read_all(self) -> bytes:
        """The rest of the body."""
        pieces: list[bytes] = []
        while piece := await self.read():
            pieces.append(piece)
        return b"".join(pieces)

    def close(self) -> None:
        """Hangs up at once."""
        self._done = True
        self._writer.transport.abort()


class AdminClient:
    """A client of one node's admin API. ``async with AdminClient(url) as
    admin:`` closes it, and the event streams it opened, at the end."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        ca_file: str | None = None,
        ca_pem: str | None = None,
    ) -> None:
        """A client of the node at ``base_url`` (``http(s)://host:port``,
        optionally with a path prefix), sending ``Authorization: Bearer
        <token>`` when a token is given; the PEM certificates in
        ``ca_file`` and/or ``ca_pem`` (a private CA) are trusted for an
        ``https://`` node instead of the system's. Raises
        :class:`AdminError` naming a bad base URL or an unreadable CA."""
        shown = json.dumps(base_url)
        try:
            parts = urlsplit(base_url)
            port = parts.port
        except ValueError:
            raise InvalidClientConfigError(f"invalid admin base URL {shown}: not a URL") from None
        if not parts.scheme:
            raise InvalidClientConfigError(f"invalid admin base URL {shown}: not a URL")
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise InvalidClientConfigError(
                f"invalid admin base URL {shown}: scheme {scheme}: is not http or https"
            )
        if not parts.hostname:
            raise InvalidClientConfigError(f"invalid admin base URL {shown}: not a URL")
        if parts.query or parts.fragment or "@" in parts.netloc:
            raise InvalidClientConfigError(
                f"invalid admin base URL {shown}: it must be a plain http(s)://host[:port][/path] URL"
            )
        self._scheme = scheme
        self._host = parts.hostname
        self._port = port if port is not None else (443 if scheme == "https" else 80)
        self._netloc = parts.netloc
        self._path = parts.path.rstrip("/")
        self._token = token
        self._closed = False
        self._streams: weakref.WeakSet[EventStream] = weakref.WeakSet()
        self._ssl: ssl.SSLContext | None = None
        if scheme == "https":
            try:
                self._ssl = tls_context(ca_file, ca_pem) or ssl.create_default_context()
            except (OSError, ssl.SSLError) as error:
                raise InvalidClientConfigError(f"cannot read the CA certificates: {error}") from None

    @property
    def origin(self) -> str:
        """``http(s)://host:port`` of the node."""
        return f"{self._scheme}://{self._netloc}"

    def url(self, segments: Iterable[str], query: Mapping[str, str | None] | None = None) -> str:
        """The URL of ``segments`` under the base URL, each percent-encoded, with ``query``."""
        path = self._path + "/" + "/".join(quote(segment, safe="") for segment in segments)
        pairs = [(key, value) for key, value in (query or {}).items() if value is not None]
        return urlunsplit((self._scheme, self._netloc, path, urlencode(pairs), ""))

    async def _open(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None = None
    ) -> _Response:
        """Sends a request and reads the answer's status and headers. Raises
        :class:`AdminError` when no answer came."""
        if self._closed:
            raise InvalidClientConfigError(f"the admin client of {self.origin} is closed")
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if self._token is not None:
            lines.append(f"Authorization: Bearer {self._token}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_MS / 1000):
                reader, writer = await asyncio.open_connection(
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                    limit=_READ_SIZE,
                )
                writer.write(head + (body or b""))
                await writer.drain()
                status_line = await reader.readline()
                if not status_line:
                    raise ConnectionError("the node closed the connection without an answer")
                version, _, rest = status_line.decode("latin-1").strip().partition(" ")
                if not version.startswith("HTTP/"):
                    raise ValueError(f"not an HTTP answer: {status_line[:100]!r}")
                status = int(rest.split(" ", 1)[0])
                answer_headers: dict[str, str] = {}
                for _ in range(_MAX_HEADER_LINES):
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n"):
                        break
                    if not line:
                        raise ConnectionError("the node closed the connection in the headers")
                    name, _, value = line.decode("latin-1").partition(":")
                    answer_headers[name.strip().lower()] = value.strip()
                else:
                    raise ValueError(f"more than {_MAX_HEADER_LINES} header lines")
                return _Response(reader, writer, status, answer_headers, method)
        except BaseException as error:
            if writer is not None:
                writer.transport.abort()
            if not isinstance(error, Exception):
                raise
            raise self._no_answer(url, error) from None

    def _no_answer(self, url: str, error: Exception) -> NodeUnreachableError:
        if isinstance(error, TimeoutError):
            return NodeUnreachableError(f"request to {url} failed: no answer within {REQUEST_TIMEOUT_MS} ms")
        text = str(error) or type(error).__name__
        if isinstance(error, ssl.SSLCertVerificationError) or (
            isinstance(error, ssl.SSLError) and _UNTRUSTED.search(text)
        ):
            return NodeUnreachableError(
                f"the node at {self.origin} presented a certificate this client does not trust"
                f" ({text}); give the CA that signed it as `ca_file` or `ca_pem`"
            )
        return NodeUnreachableError(f"request to {url} failed: {text}")

    async def _call(
        self,
        method: str,
        url: str,
        body: object = None,
        content_type: str = "application/json",
    ) -> tuple[int, str]:
        """A whole request: the status and text of a 2xx answer; an
        :class:`AdminError` for any other."""
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, (bytes, bytearray, memoryview)):
            data = bytes(body)
        else:
            data = json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        response = await self._open(method, url, headers, data)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_MS / 1000):
                raw = await response.read_all()
        except Exception as error:
            raise self._no_answer(url, error) from None
        finally:
            response.close()
        text = raw.decode("utf-8", "replace")
        if not 200 <= response.status < 300:
            raise _error_from(url, response.status, text)
        return response.status, text

    async def _json(
        self,
        method: str,
        segments: list[str],
        body: object = None,
        query: Mapping[str, str | None] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        url = self.url(segments, query)
        _, text = await self._call(method, url, body, content_type)
        try:
            return json.loads(text)
        except ValueError as error:
            raise BadAnswerError(f"cannot read the answer from {url}: {error}") from None

    async def _all_pages(self, segments: list[str], key: str) -> Any:
        """Every page of a list, following ``next`` to the last."""
        everything = await self._json("GET", segments)
        following = everything.get("next")
        while following is not None:
            page = await self._json("GET", segments, query={"after": following})
            everything[key].extend(page[key])
            following = page.get("next")
        everything["next"] = None
        return everything

    async def placements_page(
        self, entity_type: str, after: str | None = None, limit: int | None = None
    ) -> Placements:
        """One page of a type's placements, after the cursor ``after``."""
        query = {"after": after, "limit": None if limit is None else str(limit)}
        answer = await self._json("GET", ["v1", "cluster", "shards", entity_type, "placements"],
                                  query=query)
        return _read(Placements, answer)

    async def placements(self, entity_type: str) -> Placements:
        """Every live placement of a type (every page)."""
        answer = await self._all_pages(["v1", "cluster", "shards", entity_type, "placements"],
                                       "placements")
        return _read(Placements, answer)

    async def set_placement(self, entity_type: str, shard: str, target: str) -> PlacementsWritten:
        """Pins ``shard`` to the region ``target``."""
        answer = await self._json("POST", ["v1", "cluster", "shards", entity_type, "placements"],
                                  to_json(Placement(shard, target)))
        return _read(PlacementsWritten, answer)

    async def set_placements(
        self, entity_type: str, placements: Iterable[Placement]
    ) -> PlacementsWritten:
        """Pins many shards at once, all or nothing."""
        answer = await self._json("POST", ["v1", "cluster", "shards", entity_type, "placements"],
                                  {"placements": to_json(list(placements))})
        return _read(PlacementsWritten, answer)

    async def remove_placement(self, entity_type: str, shard: str) -> bool:
        """Removes a shard's placement: ``True`` when one was removed,
        ``False`` when it had none."""
        url = self.url(["v1", "cluster", "shards", entity_type, "placements", shard])
        try:
            await self._call("DELETE", url)
        except AdminError as error:
            if error.status == 404 and error.code != "unknown-type":
                return False
            raise
        return True

    async def rebalance(
        self, entity_type: str, shards: Iterable[str], immediate: bool = False
    ) -> RebalanceResponse:
        """Moves the shards at the next rebalance tick, or at once when ``immediate``."""
        answer = await self._json("POST", ["v1", "cluster", "shards", entity_type, "rebalance"],
                                  {"shardIds": list(shards), "immediate": immediate})
        return _read(RebalanceResponse, answer)

    async def shard(self, entity_type: str, shard: str) -> ShardState:
        """Where a shard is and why."""
        answer = await self._json("GET", ["v1", "cluster", "shards", entity_type, "shards", shard])
        return _read(ShardState, answer)

    async def write_attributes(
        self, entity_type: str, shards: Mapping[str, Mapping[str, str]]
    ) -> AttributesWritten:
        """Writes many shards' attributes at once, all or nothing: each shard's
        whole map (an empty one clears it); at most 10,000 shards."""
        body = {"shards": {shard: dict(pairs) for shard, pairs in shards.items()}}
        answer = await self._json("POST", ["v1", "cluster", "shards", entity_type, "attributes"], body)
        return _read(AttributesWritten, answer)

    async def set_shard_attributes(
        self, entity_type: str, shard: str, attributes: Mapping[str, str]
    ) -> AttributesWritten:
        """Sets one shard's attributes (an empty map clears them)."""
        path = ["v1", "cluster", "shards", entity_type, "shards", shard, "attributes"]
        answer = await self._json("PUT", path, dict(attributes))
        return _read(AttributesWritten, answer)

    async def regions(self) -> Regions:
        """Every region in brief (every page)."""
        return _read(Regions, await self._all_pages(["v1", "cluster", "regions"], "regions"))

    async def drain(self, address: str) -> None:
        """Drains a region: its shards are handed off, a batch at a time."""
        await self._call("POST", self.url(["v1", "cluster", "regions", address, "drain"]))

    async def undrain(self, address: str) -> None:
        """Stops draining a region."""
        await self._call("DELETE", self.url(["v1", "cluster", "regions", address, "drain"]))

    async def drain_state(self, address: str) -> DrainState:
        """A drain's progress."""
        answer = await self._json("GET", ["v1", "cluster", "regions", address, "drain"])
        return _read(DrainState, answer)

    async def upload_strategy(self, component: bytes) -> StoredStrategy:
        """Uploads a strategy component (the bytes of a ``.wasm``)."""
        answer = await self._json("POST", ["v1", "strategies"], bytes(component),
                                  content_type="application/wasm")
        return _read(StoredStrategy, answer)

    async def strategies(self) -> Strategies:
        """Every strategy, built-in and uploaded (every page)."""
        return _read(Strategies, await self._all_pages(["v1", "strategies"], "strategies"))

    async def strategy(self, entity_type: str) -> StrategyState:
        """A type's strategy: the active one and its history."""
        answer = await self._json("GET", ["v1", "cluster", "shards", entity_type, "strategy"])
        return _read(StrategyState, answer)

    async def activate(self, entity_type: str, request: ActivateRequest) -> StrategyState:
        """Activates a strategy for a type (a built-in's name or an upload's digest)."""
        answer = await self._json("PUT", ["v1", "cluster", "shards", entity_type, "strategy"],
                                  to_json(request))
        return _read(StrategyState, answer)

    async def rollback(self, entity_type: str) -> StrategyState:
        """Rolls a type's strategy back to the one before."""
        answer = await self._json(
            "POST", ["v1", "cluster", "shards", entity_type, "strategy", "rollback"]
        )
        return _read(StrategyState, answer)

    async def events(
        self, entity_type: str | None = None, last_event_id: str | None = None
    ) -> "EventStream":
        """The decision event stream (``GET /v1/events``), of one type when
        ``entity_type`` is given, resuming after ``last_event_id``. Iterate
        it (``async for id, event in stream``) for :class:`StreamedEvent`\\ s;
        :meth:`EventStream.close` it when done. The iteration ends when the
        node ends the stream."""
        url = self.url(["v1", "events"], {"type": entity_type})
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        response = await self._open("GET", url, headers)
        if not 200 <= response.status < 300:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_MS / 1000):
                    raw = await response.read_all()
            except Exception as error:
                raise self._no_answer(url, error) from None
            finally:
                response.close()
            raise _error_from(url, response.status, raw.decode("utf-8", "replace"))
        stream = EventStream(url, response)
        self._streams.add(stream)
        return stream

    def close(self) -> None:
        """Closes the event streams this client opened; later calls raise
        :class:`InvalidClientConfigError`."""
        self._closed = True
        for stream in list(self._streams):
            stream.close()
        self._streams.clear()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def __aenter__(self) -> "AdminClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class EventStream:
    """An open decision event stream: an async iterator of
    :class:`StreamedEvent`. Usable as ``async with``, which closes it."""

    def __init__(self, url: str, response: _Response) -> None:
        """Use :meth:`AdminClient.events`."""
        self._url = url
        self._response = response
        self._parser = SseParser()
        self._pending: list[StreamedEvent] = []
        self._closed = False

    def __aiter__(self) -> "EventStream":
        return self

    async def __anext__(self) -> StreamedEvent:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            try:
                piece = await self._response.read()
            except Exception as error:
                if self._closed:
                    raise StopAsyncIteration from None
                self.close()
                raise NodeUnreachableError(f"the event stream from {self._url} broke: {error}") from None
            if not piece:
                self.close()
                raise StopAsyncIteration
            try:
                framed = self._parser.feed(piece)
            except SseError as error:
                self.close()
                raise BadAnswerError(f"cannot read an event from {self._url}: {error}") from None
            for sse in framed:
                try:
                    event = from_json(DecisionEvent, json.loads(sse.data))
                except ValueError as error:
                    self.close()
                    raise BadAnswerError(f"cannot read an event from {self._url}: {error}") from None
                self._pending.append(StreamedEvent(sse.id, event))
        return self._pending.pop(0)

    @property
    def closed(self) -> bool:
        """Whether the stream ended or was closed."""
        return self._closed

    def close(self) -> None:
        """Hangs up; an iteration waiting for an event ends."""
        self._closed = True
        self._response.close()

    async def __aenter__(self) -> "EventStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _error_from(url: str, status: int, text: str) -> NodeRefusedError:
    """The error of a non-2xx answer: the node's code and message when it sent them."""
    kind = _BY_STATUS.get(status, NodeRefusedError)
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        if isinstance(code, str) and isinstance(message, str):
            return kind(f"the node answered {status} {code}: {message}", status, code, message)
    return kind(f"the node answered {status} to {url} without an error body: {text[:200]}", status)
