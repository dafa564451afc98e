"""The inter-region wire (docs/protocol.md, "The inter-region wire"): the
frames regions exchange directly to carry the application's messages to a
shard's home and ``ask`` replies back. Versioned on its own
(:data:`PEER_PROTOCOL_VERSION`); postcard like the region session. Field
order and variant indices are the contract (``proto/src/peer.rs``); the
golden frames in ``contracts/wire/`` (``peer-*.hex``) pin them, and
``tests/test_wire.py`` checks this module against every one."""

from dataclasses import dataclass
from typing import Final, TypeAlias, Union

from .wire import FrameError, _Reader, _Writer

__all__ = [
    "PEER_PROTOCOL_VERSION",
    "PEER_PATH",
    "MAX_UNACKED_BYTES",
    "PeerHello",
    "Welcome",
    "Refused",
    "Deliver",
    "Ask",
    "Reply",
    "Ack",
    "NotDelivered",
    "AskFailed",
    "PeerMessage",
    "encode_peer_hello",
    "decode_peer_hello",
    "encode_peer",
    "decode_peer",
]

PEER_PROTOCOL_VERSION: Final = 1
"""The inter-region wire version this client speaks."""

PEER_PATH: Final = "/shardalloc/v1/peer"
"""The path of the inter-region WebSocket on a region's address."""

MAX_UNACKED_BYTES: Final = 8 << 20
"""Most payload bytes kept unacknowledged for one peer (the wire's back-pressure)."""


@dataclass(frozen=True)
class PeerHello:
    """The dialling region's first frame."""

    protocol: int
    entity_type: str
    from_: str
    """The dialler's address (``from`` on the wire)."""
    incarnation: int


@dataclass(frozen=True)
class Welcome:
    """The listener accepts the connection (variant 0)."""

    protocol: int
    address: str
    incarnation: int


@dataclass(frozen=True)
class Refused:
    """The listener refuses the connection; it closes next (variant 1)."""

    reason: str


@dataclass(frozen=True)
class Deliver:
    """An application message for ``shard`` (variant 2)."""

    seq: int
    shard: str
    payload: bytes


@dataclass(frozen=True)
class Ask:
    """A request for ``shard`` that wants one :class:`Reply` (variant 3)."""

    seq: int
    shard: str
    payload: bytes
    timeout_ms: int


@dataclass(frozen=True)
class Reply:
    """The answer to the :class:`Ask` numbered ``seq`` (variant 4)."""

    seq: int
    payload: bytes


@dataclass(frozen=True)
class Ack:
    """Every ``Deliver`` and ``Ask`` up to ``through`` was handed to the region (variant 5)."""

    through: int


@dataclass(frozen=True)
class NotDelivered:
    """The ``Deliver`` numbered ``seq`` was not taken (variant 6)."""

    seq: int
    reason: str


@dataclass(frozen=True)
class AskFailed:
    """The ``Ask`` numbered ``seq`` will not be answered (variant 7)."""

    seq: int
    reason: str


PeerMessage: TypeAlias = Union[Welcome, Refused, Deliver, Ask, Reply, Ack, NotDelivered, AskFailed]
"""Every frame after the :class:`PeerHello`, in variant order."""


def _bytes_of(w: _Writer, value: bytes, what: str) -> None:
    w.u64(len(value), f"the length of {what}")
    w.raw(value)


def encode_peer_hello(hello: PeerHello) -> bytes:
    """Encodes a dialler's first frame."""
    if not isinstance(hello, PeerHello):
        raise FrameError(f"{type(hello).__name__} is not a PeerHello")
    w = _Writer()
    w.u32(hello.protocol, "PeerHello.protocol")
    w.string(hello.entity_type, "PeerHello.entity_type")
    w.string(hello.from_, "PeerHello.from")
    w.u64(hello.incarnation, "PeerHello.incarnation")
    return w.frame()


def decode_peer_hello(frame: bytes) -> PeerHello:
    """Decodes a dialler's first frame; the whole frame must be the hello."""
    r = _Reader(frame)
    hello = PeerHello(
        protocol=r.u32("PeerHello.protocol"),
        entity_type=r.string("PeerHello.entity_type"),
        from_=r.string("PeerHello.from"),
        incarnation=r.u64("PeerHello.incarnation"),
    )
    r.end("PeerHello")
    return hello


def encode_peer(message: PeerMessage) -> bytes:
    """Encodes an inter-region message as one frame."""
    w = _Writer()
    match message:
        case Welcome():
            w.variant(0)
            w.u32(message.protocol, "Welcome.protocol")
            w.string(message.address, "Welcome.address")
            w.u64(message.incarnation, "Welcome.incarnation")
        case Refused():
            w.variant(1)
            w.string(message.reason, "Refused.reason")
        case Deliver():
            w.variant(2)
            w.u64(message.seq, "Deliver.seq")
            w.string(message.shard, "Deliver.shard")
            _bytes_of(w, message.payload, "Deliver.payload")
        case Ask():
            w.variant(3)
            w.u64(message.seq, "Ask.seq")
            w.string(message.shard, "Ask.shard")
            _bytes_of(w, message.payload, "Ask.payload")
            w.u64(message.timeout_ms, "Ask.timeout_ms")
        case Reply():
            w.variant(4)
            w.u64(message.seq, "Reply.seq")
            _bytes_of(w, message.payload, "Reply.payload")
        case Ack():
            w.variant(5)
            w.u64(message.through, "Ack.through")
        case NotDelivered():
            w.variant(6)
            w.u64(message.seq, "NotDelivered.seq")
            w.string(message.reason, "NotDelivered.reason")
        case AskFailed():
            w.variant(7)
            w.u64(message.seq, "AskFailed.seq")
            w.string(message.reason, "AskFailed.reason")
        case _:
            raise FrameError(f"{type(message).__name__} is not a PeerMessage")
    return w.frame()


def decode_peer(frame: bytes) -> PeerMessage:
    """Decodes an inter-region frame; the whole frame must be one message."""
    r = _Reader(frame)
    index = r.u32("the variant")
    message: PeerMessage
    match index:
        case 0:
            message = Welcome(
                protocol=r.u32("Welcome.protocol"),
                address=r.string("Welcome.address"),
                incarnation=r.u64("Welcome.incarnation"),
            )
        case 1:
            message = Refused(reason=r.string("Refused.reason"))
        case 2:
            message = Deliver(
                seq=r.u64("Deliver.seq"), shard=r.string("Deliver.shard"), payload=r.bytes_of("Deliver.payload")
            )
        case 3:
            message = Ask(
                seq=r.u64("Ask.seq"),
                shard=r.string("Ask.shard"),
                payload=r.bytes_of("Ask.payload"),
                timeout_ms=r.u64("Ask.timeout_ms"),
            )
        case 4:
            message = Reply(seq=r.u64("Reply.seq"), payload=r.bytes_of("Reply.payload"))
        case 5:
            message = Ack(through=r.u64("Ack.through"))
        case 6:
            message = NotDelivered(seq=r.u64("NotDelivered.seq"), reason=r.string("NotDelivered.reason"))
        case 7:
            message = AskFailed(seq=r.u64("AskFailed.seq"), reason=r.string("AskFailed.reason"))
        case _:
            raise FrameError(f"unknown PeerMessage variant {index}")
    r.end(type(message).__name__)
    return message
