"""``PeerTransport``: the built-in transport between regions, speaking the
inter-region wire (:mod:`shardalloc_client.peer`, docs/protocol.md section
20) over WebSockets, as the Rust and TypeScript clients' ``PeerTransport``
do, so regions of any of the three languages carry each other's messages.

It listens where the region is reachable (its registered address is what
other regions dial) and dials a peer the first time it carries a message
there: one connection per pair (a connection the peer opened carries this
region's messages back too). Messages are the application's values as
JSON. Each stays with the transport until the peer acknowledges it; a
refusal, a failed connection or a peer that goes away hands it back to the
region (``Inbox.not_delivered``), which asks for the shard's home again and
resends it. At most :data:`~shardalloc_client.peer.MAX_UNACKED_BYTES` of
one peer's messages wait unacknowledged: past that, :meth:`send` raises a
``peer-busy`` :class:`TransportError` and the region keeps the message.

Everything runs on the event loop :meth:`PeerTransport.bind` was awaited
on; :meth:`send` never blocks.
"""

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.http11 import Request as HttpRequest
from websockets.http11 import Response

from ..peer import (
    MAX_UNACKED_BYTES,
    PEER_PATH,
    PEER_PROTOCOL_VERSION,
    Ack,
    Ask,
    AskFailed,
    Deliver,
    NotDelivered,
    PeerHello,
    PeerMessage,
    Refused,
    Reply,
    Welcome,
    decode_peer,
    decode_peer_hello,
    encode_peer,
    encode_peer_hello,
)
from .ask import Replier, Request
from .errors import AskError
from .session import _NO_PROXY
from .transport import Inbox, TransportError
from ..wire import MAX_FRAME_BYTES, FrameError

__all__ = ["PeerTransport"]

M = TypeVar("M")

_log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 5.0
"""How long dialling a peer (TCP, the upgrade, its ``Welcome``) may take
before its messages are handed back."""

Socket = ClientConnection | ServerConnection


@dataclass
class _Outgoing(Generic[M]):
    shard: str
    message: M
    payload: bytes
    replier: Replier | None = None
    """Set for a request: where its answer goes."""

    def frame(self, seq: int) -> PeerMessage:
        """Its frame, numbered ``seq``."""
        if self.replier is None:
            return Deliver(seq, self.shard, self.payload)
        return Ask(seq, self.shard, self.payload, self.replier.remaining_ms())


@dataclass
class _Link(Generic[M]):
    """One connection to a peer: what waits, what is unacknowledged and unanswered."""

    def take_request(self, seq: int) -> Replier | None:
        """Takes this region's request numbered ``seq``, acknowledged or not."""
        replier = self.awaiting.pop(seq, None)
        if replier is not None:
            return replier
        for index, (numbered, outgoing) in enumerate(self.unacked):
            if numbered == seq:
                del self.unacked[index]
                self.pending -= len(outgoing.payload)
                return outgoing.replier
        return None


    peer: str
    socket: Socket | None = None
    open: bool = False
    closed: bool = False
    next_seq: int = 1
    queued: deque[_Outgoing[M]] = field(default_factory=deque)
    unacked: deque[tuple[int, _Outgoing[M]]] = field(default_factory=deque)
    awaiting: dict[int, Replier] = field(default_factory=dict)
    """This region's requests the peer took and has not answered yet."""
    answers: deque[PeerMessage] = field(default_factory=deque)
    """Answers to the peer's requests, waiting to go out."""
    pending: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None


class PeerTransport(Generic[M]):
    """The built-in transport between regions. See the module documentation."""

    def __init__(
        self, server: Server, address: str, entity_type: str, incarnation: int, token: str | None
    ) -> None:
        """Use :meth:`bind`."""
        self._server = server
        self.address = address
        """The region's registered address: the one to give ``RegionConfig``."""
        self._entity_type = entity_type
        self._incarnation = incarnation
        self._token = token
        self._inbox: Inbox[M] | None = None
        self._links: dict[str, _Link[M]] = {}

    @classmethod
    async def bind(
        cls,
        *,
        entity_type: str,
        incarnation: int,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        address: str | None = None,
    ) -> "PeerTransport[M]":
        """Listens on ``host:port`` (0: any free port) and answers once bound;
        its :attr:`address` (``address``, else ``host:port`` as bound) is
        what the region registers with."""
        holder: list[PeerTransport[M]] = []

        def check(connection: ServerConnection, request: HttpRequest) -> Response | None:
            if request.path != PEER_PATH:
                return connection.respond(404, "not the inter-region path\n")
            if token is not None and request.headers.get("Authorization") != f"Bearer {token}":
                return connection.respond(401, "a missing or wrong region token\n")
            return None

        async def handler(connection: ServerConnection) -> None:
            await holder[0]._accepted(connection)

        server = await serve(
            handler,
            host,
            port,
            process_request=check,
            max_size=MAX_FRAME_BYTES,
            compression=None,
            ping_interval=None,
        )
        bound = next(iter(server.sockets)).getsockname()[1]
        transport: PeerTransport[M] = cls(server, address or f"{host}:{bound}", entity_type, incarnation, token)
        holder.append(transport)
        return transport

    def send(self, to: str, shard: str, message: M) -> None:
        """Carries ``message`` for ``shard`` to the region at ``to``; raises
        :class:`TransportError` when it cannot take it now."""
        self._carry(to, shard, message, None)

    def ask(self, to: str, shard: str, message: M, replier: Replier) -> None:
        """Carries a request for ``shard`` to the region at ``to``, answered
        through ``replier``; raises :class:`TransportError` when it cannot
        take it now."""
        self._carry(to, shard, message, replier)

    def _carry(self, to: str, shard: str, message: M, replier: Replier | None) -> None:
        try:
            payload = json.dumps(message).encode("utf-8")
        except (TypeError, ValueError) as error:
            raise TransportError("unreachable", f"the message is not JSON: {error}") from None
        if len(payload) + len(shard) + 32 > MAX_FRAME_BYTES:
            raise TransportError("unreachable", f"a message of {len(payload)} bytes does not fit a 1 MiB frame")
        link = self._links.get(to)
        if link is None or link.closed:
            link = self._dial(to)
        if link.pending + len(payload) > MAX_UNACKED_BYTES:
            raise TransportError(
                "peer-busy", f"region {to} has {link.pending} bytes of messages unacknowledged; waiting for it"
            )
        link.pending += len(payload)
        link.queued.append(_Outgoing(shard, message, payload, replier))
        link.wake.set()

    def attach(self, inbox: Inbox[M]) -> None:
        """The region receives at ``inbox``."""
        self._inbox = inbox

    def detach(self, inbox: Inbox[M]) -> None:
        """The region stopped: stop listening and close every connection."""
        if self._inbox is inbox:
            self._inbox = None
            self.close()

    def close(self) -> None:
        """Stops listening and closes every connection."""
        for link in list(self._links.values()):
            link.closed = True
            if link.task is not None:
                link.task.cancel()
        self._links.clear()
        self._server.close()

    def _dial(self, to: str) -> _Link[M]:
        link: _Link[M] = _Link(peer=to)
        self._links[to] = link
        link.task = asyncio.get_running_loop().create_task(self._dial_and_run(link))
        return link

    async def _dial_and_run(self, link: _Link[M]) -> None:
        to = link.peer
        headers = {} if self._token is None else {"Authorization": f"Bearer {self._token}"}
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                socket = await connect(
                    f"ws://{to}{PEER_PATH}",
                    additional_headers=headers,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,
                    open_timeout=None,
                    ping_interval=None,
                    **_NO_PROXY,
                )
                hello = PeerHello(PEER_PROTOCOL_VERSION, self._entity_type, self.address, self._incarnation)
                await socket.send(encode_peer_hello(hello))
                answer = decode_peer(_as_bytes(await socket.recv()))
        except InvalidStatus as refused:
            self._fail(link, f"cannot connect to {to}: {refused.response.status_code}")
            return
        except TimeoutError:
            self._fail(link, f"no answer from {to} within {CONNECT_TIMEOUT_S} s")
            return
        except (OSError, ConnectionClosed, FrameError) as error:
            self._fail(link, f"cannot connect to {to}: {error}")
            return
        if not isinstance(answer, Welcome):
            reason = answer.reason if isinstance(answer, Refused) else f"answered with {type(answer).__name__}"
            self._fail(link, f"{to} refused the connection: {reason}")
            await socket.close()
            return
        await self._run(link, socket)

    async def _accepted(self, socket: ServerConnection) -> None:
        """A peer dialled this region: its ``PeerHello``, then the connection both ways."""
        try:
            hello = decode_peer_hello(_as_bytes(await asyncio.wait_for(socket.recv(), CONNECT_TIMEOUT_S)))
        except (TimeoutError, ConnectionClosed, FrameError):
            return
        refusal = None
        if hello.protocol != PEER_PROTOCOL_VERSION:
            refusal = (
                f"inter-region wire version {hello.protocol} is not supported; "
                f"this region speaks {PEER_PROTOCOL_VERSION}"
            )
        elif hello.entity_type != self._entity_type:
            refusal = f"this region serves {self._entity_type}, not {hello.entity_type}"
        if refusal is not None:
            await socket.send(encode_peer(Refused(refusal)))
            await socket.close()
            return
        await socket.send(encode_peer(Welcome(PEER_PROTOCOL_VERSION, self.address, self._incarnation)))
        link: _Link[M] = _Link(peer=hello.from_)
        existing = self._links.get(hello.from_)
        if existing is None or existing.closed:
            # This connection carries this region's messages to the dialler too.
            self._links[hello.from_] = link
        link.task = asyncio.current_task()
        await self._run(link, socket)

    async def _run(self, link: _Link[M], socket: Socket) -> None:
        """The connection both ways until it ends; then what was not
        acknowledged goes back to the region."""
        link.socket = socket
        link.open = True
        writer = asyncio.get_running_loop().create_task(self._write(link, socket))
        reason = f"{link.peer} closed the connection"
        try:
            async for data in socket:
                await self._on_frame(link, socket, decode_peer(_as_bytes(data)))
        except ConnectionClosed:
            pass
        except FrameError as error:
            reason = f"{link.peer} sent a malformed frame: {error}"
        except asyncio.CancelledError:
            reason = "the region stopped"
        finally:
            writer.cancel()
            self._fail(link, reason)
            await socket.close()

    async def _write(self, link: _Link[M], socket: Socket) -> None:
        """Sends what waits, numbered, until the connection closes (the
        reader then ends the connection and hands back what is left)."""
        try:
            while True:
                while link.answers or link.queued:
                    if link.answers:
                        await socket.send(encode_peer(link.answers.popleft()))
                        continue
                    outgoing = link.queued.popleft()
                    seq = link.next_seq
                    link.next_seq += 1
                    link.unacked.append((seq, outgoing))
                    await socket.send(encode_peer(outgoing.frame(seq)))
                link.wake.clear()
                await link.wake.wait()
        except ConnectionClosed:
            return

    async def _on_frame(self, link: _Link[M], socket: Socket, frame: PeerMessage) -> None:
        if isinstance(frame, Deliver):
            answer: PeerMessage
            try:
                message = json.loads(frame.payload)
                if self._inbox is None:
                    raise TransportError("closed", "the region has stopped")
                self._inbox.deliver(frame.shard, message)
                answer = Ack(frame.seq)
            except (TransportError, ValueError) as error:
                answer = NotDelivered(frame.seq, str(error))
            await socket.send(encode_peer(answer))
        elif isinstance(frame, Ask):
            await socket.send(encode_peer(self._on_ask(link, frame)))
        elif isinstance(frame, Ack):
            while link.unacked and link.unacked[0][0] <= frame.through:
                seq, done = link.unacked.popleft()
                link.pending -= len(done.payload)
                if done.replier is not None:
                    link.awaiting[seq] = done.replier
        elif isinstance(frame, NotDelivered):
            for index, (seq, refused) in enumerate(link.unacked):
                if seq == frame.seq:
                    del link.unacked[index]
                    self._hand_back(link, [refused], frame.reason)
                    break
        elif isinstance(frame, (Welcome, Refused)):
            raise FrameError(f"a {type(frame).__name__} after the handshake")
        elif isinstance(frame, Reply):
            replier = link.take_request(frame.seq)
            if replier is not None:
                try:
                    reply = json.loads(frame.payload)
                except ValueError as error:
                    replier.fail_with(f"the answer is not a reply: {error}")
                else:
                    replier.reply(reply)
        elif isinstance(frame, AskFailed):
            replier = link.take_request(frame.seq)
            if replier is not None:
                replier.fail_with(frame.reason)

    def _on_ask(self, link: _Link[M], frame: Ask) -> PeerMessage:
        """Hands the peer's request to the region; the frame to answer with now."""
        seq = frame.seq
        try:
            message = json.loads(frame.payload)
        except ValueError as error:
            return AskFailed(seq, f"not a request: {error}")

        def answer(reply: Any, error: AskError | None) -> None:
            if link.closed:
                return
            link.answers.append(_answer_frame(seq, reply, error))
            link.wake.set()

        try:
            if self._inbox is None:
                raise TransportError("closed", "the region has stopped")
            self._inbox.ask(frame.shard, message, Replier(frame.shard, frame.timeout_ms, answer))
        except TransportError as error:
            return NotDelivered(seq, str(error))
        return Ack(seq)

    def _fail(self, link: _Link[M], reason: str) -> None:
        """The connection is over: what was not acknowledged goes back, in order."""
        if link.closed and not link.unacked and not link.queued and not link.awaiting:
            return
        link.closed = True
        if self._links.get(link.peer) is link:
            del self._links[link.peer]
        left = [outgoing for _, outgoing in link.unacked] + list(link.queued)
        link.unacked.clear()
        link.queued.clear()
        awaiting = list(link.awaiting.values())
        link.awaiting.clear()
        for replier in awaiting:
            replier.fail_with(f"the connection to its home {link.peer} ended before the answer: {reason}")
        self._hand_back(link, left, reason)

    def _hand_back(self, link: _Link[M], messages: list[_Outgoing[M]], reason: str) -> None:
        """Hands messages back to the region, each shard's in the order sent."""
        by_shard: dict[str, list[M | Request[M]]] = {}
        for outgoing in messages:
            link.pending -= len(outgoing.payload)
            parcel = outgoing.message if outgoing.replier is None else Request(outgoing.message, outgoing.replier)
            by_shard.setdefault(outgoing.shard, []).append(parcel)
        inbox = self._inbox
        if inbox is None or not by_shard:
            return
        error = TransportError("unreachable", f"cannot reach region {link.peer}: {reason}")
        for shard, listed in by_shard.items():
            inbox.not_delivered(link.peer, shard, listed, error)


def _answer_frame(seq: int, reply: Any, error: AskError | None) -> PeerMessage:
    """The frame answering the peer's request numbered ``seq``."""
    if error is not None:
        return AskFailed(seq, error.reason if error.kind == "Failed" and error.reason is not None else str(error))
    try:
        payload = json.dumps(reply).encode("utf-8")
    except (TypeError, ValueError) as failure:
        return AskFailed(seq, f"the answer is not JSON: {failure}")
    if len(payload) + 32 > MAX_FRAME_BYTES:
        return AskFailed(seq, f"an answer of {len(payload)} bytes does not fit a 1 MiB frame")
    return Reply(seq, payload)


def _as_bytes(data: str | bytes) -> bytes:
    if isinstance(data, str):
        raise FrameError("a text frame; the inter-region wire is binary")
    return data

