"""One WebSocket session of a region with the node.

Connect (with the region token, over TLS with a private CA when asked),
``Hello``/``Welcome``, then frames both ways until either side hangs up. A
node that does not lead answers the ``Hello`` with ``Redirect``: the
session follows it once to the leader, and remembers the leader (in the
shared :class:`Leader`) for the next attempt until a session with it ends.
The region's driver hears everything as :data:`SessionEvent` values,
through a callback called on the event loop.

A port of the TypeScript client's ``region/session.ts`` (the Rust client's
``region/session.rs``) to :mod:`asyncio` and the ``websockets`` library.
"""

import asyncio
import inspect
import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, Union
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ..wire import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    FrameError,
    GetShardHome,
    GetShardHomeWithAttributes,
    Hello,
    NodeMessage,
    Redirect,
    Refused,
    RegionMessage,
    Register,
    RegisterWithCapacity,
    Welcome,
    decode_node,
    encode_hello,
    encode_region,
)

__all__ = [
    "CONNECT_PATH",
    "SessionConnected",
    "SessionMessage",
    "SessionRefused",
    "SessionClosed",
    "SessionEvent",
    "SessionParams",
    "Leader",
    "Session",
    "connect_url_of",
    "tls_context",
]

CONNECT_PATH: Final = "/v1/regions/connect"
"""The path of the region session's WebSocket on a node."""

_log = logging.getLogger(__name__)

# `proxy` appeared in websockets 15 (on by default, from the environment);
# the region connects straight to its nodes, as the Rust and TypeScript
# clients do.
_NO_PROXY: Final[dict[str, Any]] = (
    {"proxy": None} if "proxy" in inspect.signature(connect.__init__).parameters else {}
)


@dataclass(frozen=True)
class SessionConnected:
    """The node welcomed the region: send with :meth:`Session.send`."""


@dataclass(frozen=True)
class SessionMessage:
    """A message from the node."""

    message: NodeMessage
    """The message."""


@dataclass(frozen=True)
class SessionRefused:
    """The node refused the session (a wrong token, a refused ``Hello``);
    :class:`SessionClosed` follows."""

    reason: str
    """Why, in words."""


@dataclass(frozen=True)
class SessionClosed:
    """The session is over, or never started."""

    reason: str
    """Why, in words."""


SessionEvent: TypeAlias = Union[SessionConnected, SessionMessage, SessionRefused, SessionClosed]
"""What a session tells the region's driver."""


@dataclass(frozen=True)
class SessionParams:
    """Where and how a region connects."""

    urls: Sequence[str]
    """Every node's connect URL (``ws(s)://host:port/v1/regions/connect``);
    attempts go round them."""
    entity_type: str
    """The entity type the session serves."""
    token: str | None = None
    """The region token, sent as ``Authorization: Bearer …``."""
    ssl_context: ssl.SSLContext | None = None
    """What to trust for ``wss://`` (a private CA); the system's certificates when ``None``."""
    handshake_timeout_ms: int = 10_000
    """The bound of the WebSocket handshake and of the ``Welcome``."""
    shard_attributes: Callable[[str], Mapping[str, str]] | None = None
    """The application's attributes of a shard, sent with its home request
    to a node of protocol version 5 or later."""
    capacity: Mapping[str, float] = field(default_factory=dict)
    """The capacity the region declares, sent with its registration to a
    node of protocol version 5 or later."""


def tls_context(ca_file: str | None = None, ca_pem: str | None = None) -> ssl.SSLContext | None:
    """A TLS context trusting the PEM certificates in ``ca_file`` and/or
    ``ca_pem`` (a private CA); ``None`` when neither is given (the system's
    certificates are trusted). Raises :class:`ssl.SSLError` or
    :class:`OSError` for certificates that cannot be read."""
    if ca_file is None and ca_pem is None:
        return None
    return ssl.create_default_context(cafile=ca_file, cadata=ca_pem)


_SCHEMES: Final = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
_DEFAULT_PORTS: Final = {"ws": 80, "wss": 443}


def connect_url_of(node: str) -> str:
    """A node's connect URL from its base URL: ``http://h:p`` →
    ``ws://h:p/v1/regions/connect``, ``https`` → ``wss``; a ``ws(s)://``
    URL is kept, its path completed unless it already ends with the
    connect path. A port that is the scheme's default is left out. Raises
    :class:`ValueError` naming the problem."""
    not_a_url = ValueError(f"the node URL {node!r} is not a URL (e.g. http://127.0.0.1:7878)")
    try:
        parts = urlsplit(node.strip())
        port = parts.port
    except ValueError:
        raise not_a_url from None
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(
            f"the node URL {node!r} must start with http://, https://, ws:// or wss://"
        )
    if not parts.hostname:
        raise not_a_url
    netloc = parts.netloc
    if port is not None and port == _DEFAULT_PORTS[scheme]:
        netloc = netloc[: netloc.rindex(":")]
    path = parts.path
    if not path.endswith(CONNECT_PATH):
        path = path.rstrip("/") + CONNECT_PATH
    return urlunsplit((scheme, netloc, path, parts.query, ""))


class Leader:
    """The attempts' shared memory: the leader a node redirected to."""

    def __init__(self) -> None:
        """No leader known."""
        self.url: str | None = None
        """The leader's connect URL, while known."""


class _Redirected(Exception):
    """The node redirected to ``url`` (a connect URL)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


class _Ended(Exception):
    """The attempt ends, for the reason given."""

    def __init__(self, reason: str, *, forget_leader: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.forget_leader = forget_leader


_CLOSE: Final = None
"""In the outbox: close the WebSocket after the frames before it."""


class Session:
    """One session attempt. Open it with :meth:`open`, on a running event
    loop; it reports through the callback until :class:`SessionClosed`,
    its last event."""

    def __init__(
        self,
        params: SessionParams,
        leader: Leader,
        on_event: Callable[[SessionEvent], None],
    ) -> None:
        """Use :meth:`open`."""
        self._params = params
        self._leader = leader
        self._on_event = on_event
        self._welcomed = False
        self._node_protocol = 0
        self._ended = False
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def open(
        cls,
        params: SessionParams,
        leader: Leader,
        generation: int,
        on_event: Callable[[SessionEvent], None],
    ) -> "Session":
        """Starts attempt number ``generation``: to the leader's URL when
        known, else to the nodes in turn. Needs a running event loop."""
        session = cls(params, leader, on_event)
        url = leader.url or params.urls[generation % len(params.urls)]
        session._task = asyncio.get_running_loop().create_task(
            session._run(url), name=f"shardalloc region session {generation}"
        )
        return session

    @property
    def welcomed(self) -> bool:
        """True once the node welcomed the session."""
        return self._welcomed

    def send(self, message: RegionMessage) -> None:
        """Sends a message to the node, after those sent before; dropped
        unless the session is welcomed and not over."""
        if self._welcomed and not self._ended:
            self._outbox.put_nowait(encode_region(self._as_sent(message)))

    def _as_sent(self, message: RegionMessage) -> RegionMessage:
        """A home request carries the shard's attributes when the
        application has some, and a registration the region's capacity when
        it declares one, if the node reads them (version 5)."""
        if isinstance(message, Register):
            if self._node_protocol < 5 or not self._params.capacity:
                return message
            return RegisterWithCapacity(register=message, capacity=dict(self._params.capacity))
        attributes_of = self._params.shard_attributes
        if not isinstance(message, GetShardHome) or attributes_of is None or self._node_protocol < 5:
            return message
        attributes = dict(attributes_of(message.shard))
        if not attributes:
            return message
        return GetShardHomeWithAttributes(shard=message.shard, attributes=attributes)

    def close(self, reason: str = "the region hung up") -> None:
        """Hangs up: the frames already sent go first, then a close frame.
        :class:`SessionClosed` is reported at once (unless it already was)."""
        if self._welcomed:
            self._outbox.put_nowait(_CLOSE)
        elif self._task is not None:
            self._task.cancel()
        self._end(reason)

    async def wait_closed(self) -> None:
        """Waits until the session's task is done (the WebSocket closed)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def _emit(self, event: SessionEvent) -> None:
        try:
            self._on_event(event)
        except Exception:
            _log.exception("the region's session handler raised on %r", event)

    def _end(self, reason: str) -> None:
        if not self._ended:
            self._ended = True
            if self._welcomed:
                # The node may have stopped leading: ask the nodes in turn again.
                self._leader.url = None
            self._emit(SessionClosed(reason))

    async def _run(self, url: str) -> None:
        redirected = False
        try:
            while True:
                try:
                    socket = await self._handshake(url, redirected)
                    break
                except _Redirected as redirect:
                    self._leader.url = redirect.url
                    url, redirected = redirect.url, True
            if socket is None:
                return
            try:
                await self._serve(socket)
            finally:
                if not self._ended:
                    self._end("the node closed the session")
        except _Ended as ended:
            if ended.forget_leader:
                self._leader.url = None
            self._end(ended.reason)
        except asyncio.CancelledError:
            self._end("the region hung up")
            raise
        except Exception as error:
            _log.exception("the region session failed")
            self._end(f"the session failed: {error}")

    async def _handshake(self, url: str, redirected: bool) -> ClientConnection | None:
        """Connects, says ``Hello`` and reads the answer: the socket once
        welcomed, ``None`` when refused; raises :class:`_Redirected` or
        :class:`_Ended`."""
        params = self._params
        timeout = params.handshake_timeout_ms / 1000
        headers = {} if params.token is None else {"Authorization": f"Bearer {params.token}"}
        tls: dict[str, Any] = {}
        if url.startswith("wss:") and params.ssl_context is not None:
            tls["ssl"] = params.ssl_context
        try:
            async with asyncio.timeout(timeout):
                socket = await connect(
                    url,
                    additional_headers=headers,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    open_timeout=None,
                    ping_interval=None,
                    **_NO_PROXY,
                    **tls,
                )
        except InvalidStatus as refused:
            status = refused.response.status_code
            body = refused.response.body.decode("utf-8", "replace") if refused.response.body else ""
            if status in (401, 403):
                reason = f"the node refused the region token ({status}): {body}"
                self._emit(SessionRefused(reason))
                raise _Ended(reason) from None
            raise _Ended(
                f"cannot connect to {url}: HTTP {status} {body}", forget_leader=True
            ) from None
        except TimeoutError:
            raise _Ended(
                f"no answer from {url} within {params.handshake_timeout_ms} ms", forget_leader=True
            ) from None
        except (OSError, ssl.SSLError, ValueError, ConnectionClosed) as error:
            raise _Ended(f"cannot connect to {url}: {error}", forget_leader=True) from None
        except Exception as error:
            # websockets' handshake errors (InvalidHandshake, InvalidURI, …).
            raise _Ended(f"cannot connect to {url}: {error}", forget_leader=True) from None
        try:
            async with asyncio.timeout(timeout):
                await socket.send(encode_hello(Hello(protocol=PROTOCOL_VERSION, entity_type=params.entity_type)))
                frame = await socket.recv()
        except TimeoutError:
            await _abort(socket)
            raise _Ended(
                f"no answer from {url} within {params.handshake_timeout_ms} ms", forget_leader=True
            ) from None
        except ConnectionClosed:
            raise _Ended(
                "the node closed the connection during the handshake", forget_leader=True
            ) from None
        except BaseException:
            await _abort(socket)
            raise
        message = await self._decode(socket, frame)
        if isinstance(message, Welcome):
            self._welcomed = True
            self._node_protocol = message.protocol
            self._emit(SessionConnected())
            return socket
        if isinstance(message, Refused):
            self._emit(SessionRefused(message.reason))
            await _close(socket)
            raise _Ended(f"the node refused the session: {message.reason}")
        if isinstance(message, Redirect):
            await _close(socket)
            if redirected:
                raise _Ended(
                    f"{url} redirected to the leader at {message.leader}, which redirected again",
                    forget_leader=True,
                )
            try:
                next_url = connect_url_of(message.leader)
            except ValueError as error:
                raise _Ended(
                    f"{url} redirected to {message.leader!r}, which is not a node URL: {error}"
                ) from None
            raise _Redirected(next_url)
        await _abort(socket)
        raise _Ended(
            f"the node answered the Hello with {type(message).__name__} instead of Welcome or Refused"
        )

    async def _decode(self, socket: ClientConnection, frame: str | bytes) -> NodeMessage:
        """The message in ``frame``; raises :class:`_Ended` (after closing
        the socket) for a text frame or a bad one."""
        if isinstance(frame, str):
            await _abort(socket)
            raise _Ended("the node sent a text frame; the protocol uses binary frames")
        try:
            return decode_node(frame)
        except FrameError as error:
            await _abort(socket)
            raise _Ended(f"bad frame from the node: {error}") from None

    async def _serve(self, socket: ClientConnection) -> None:
        """Frames both ways until either side hangs up."""
        writer = asyncio.get_running_loop().create_task(self._write(socket))
        try:
            while not self._ended:
                try:
                    frame = await socket.recv()
                except ConnectionClosed as closed:
                    if closed.rcvd is None and closed.sent is None:
                        raise _Ended(f"the WebSocket failed: {closed}") from None
                    return
                message = await self._decode(socket, frame)
                if not self._ended:
                    self._emit(SessionMessage(message))
        finally:
            if self._ended and not writer.done():
                # Closed by the region: let the writer send what is queued
                # and the close frame.
                await asyncio.gather(writer, return_exceptions=True)
            else:
                writer.cancel()
                await _abort(socket)

    async def _write(self, socket: ClientConnection) -> None:
        while True:
            frame = await self._outbox.get()
            if frame is _CLOSE:
                await _close(socket)
                return
            try:
                await socket.send(frame)
            except ConnectionClosed:
                return


async def _close(socket: ClientConnection) -> None:
    """Closes with a normal close frame, not waiting long for the answer."""
    try:
        async with asyncio.timeout(2):
            await socket.close(1000, "session closed")
    except (TimeoutError, OSError, ConnectionClosed):
        pass


async def _abort(socket: ClientConnection) -> None:
    """Drops the connection without a closing handshake."""
    transport = socket.transport
    if transport is not None:
        transport.abort()
