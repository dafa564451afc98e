"""The region protocol's wire codec: its messages, and their frames.

A region and the node talk over a WebSocket at ``/v1/regions/connect``;
every binary frame holds one value in postcard 1.x encoding
(docs/protocol.md, "Encoding"). This module holds that protocol's values
as frozen dataclasses (the :class:`Hello` a region sends first, the
:data:`RegionMessage` variants it sends after, the :data:`NodeMessage`
variants the node sends) and turns them into frames and back. It refuses,
with :class:`FrameError`, every frame the node refuses and every value
that has no frame.

Field order and variant indices are the contract (``proto/src/protocol.rs``);
the golden frames in ``contracts/wire/`` pin them.
"""

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar, Union

from .errors import ShardallocError

__all__ = [
    "PROTOCOL_VERSION",
    "OLDEST_PROTOCOL_VERSION",
    "MAX_FRAME_BYTES",
    "FrameError",
    "Hello",
    "Register",
    "ShardLoad",
    "LoadReport",
    "Heartbeat",
    "GetShardHome",
    "GetShardHomeWithAttributes",
    "RegisterWithCapacity",
    "BeginHandOffAck",
    "ShardStopped",
    "Leave",
    "Drain",
    "Load",
    "RegionMessage",
    "Welcome",
    "Refused",
    "Registered",
    "RegisterRefused",
    "HeartbeatAck",
    "NotRegistered",
    "ShardHome",
    "ShardRefused",
    "BeginHandOff",
    "HandOff",
    "PlacementChanged",
    "LeaveDone",
    "ShuttingDown",
    "Redirect",
    "ShardHomeEpoch",
    "RegionRemoved",
    "NodeMessage",
    "encode_hello",
    "decode_hello",
    "encode_region",
    "decode_region",
    "encode_node",
    "decode_node",
]

PROTOCOL_VERSION: Final = 5
"""The protocol version this codec speaks. Version 2 added :class:`Load`;
version 3 :class:`ShardHomeEpoch`, which the node sends instead of
:class:`ShardHome`; version 4 :class:`RegionRemoved`."""

OLDEST_PROTOCOL_VERSION: Final = 1
"""The oldest protocol version a node still serves."""

MAX_FRAME_BYTES: Final = 1 << 20
"""The largest frame either side accepts, in bytes (1 MiB)."""


class FrameError(ShardallocError, ValueError):
    """A frame that cannot be decoded, or a value that cannot be encoded.

    The message names the problem, and the field where it is known.
    """


# The region's first frame.


@dataclass(frozen=True)
class Hello:
    """The first frame a region sends. A struct, not an enum: no variant
    index comes before it, and its layout never changes."""

    protocol: int
    """The protocol version the region speaks (a u32)."""
    entity_type: str
    """The entity type this session serves."""


# What a region sends after its Hello, in variant order.


@dataclass(frozen=True)
class Register:
    """Registers (first) or re-registers this session's region
    (``RegionMessage`` variant 0, which carries the ``Register`` struct)."""

    address: str
    """The region's address, unique in the cluster; other regions reach it by it."""
    incarnation: int
    """Chosen at start-up, greater for every restart (a u64)."""
    roles: tuple[str, ...]
    """Cluster roles."""
    app_version: str
    """The application's version."""
    labels: Mapping[str, str]
    """Labels (zone, dc…), handed to the strategy; written in key order."""
    proxy_only: bool
    """The region routes messages but never hosts shards."""
    sequence: int
    """Echoed in :class:`Registered`: the lease counts from this send (a u64)."""


@dataclass(frozen=True)
class Heartbeat:
    """The region is alive; renews its lease (``RegionMessage`` variant 1)."""

    sequence: int
    """Echoed in :class:`HeartbeatAck`; increases with every registration
    and heartbeat (a u64)."""
    metrics: Mapping[str, float]
    """Gauges for the strategy (``mem-used-ratio``, ``cpu``, custom ones);
    written in key order."""


@dataclass(frozen=True)
class GetShardHome:
    """Where does this shard live? (``RegionMessage`` variant 2)."""

    shard: str
    """The shard id."""


@dataclass(frozen=True)
class BeginHandOffAck:
    """The region stopped routing to the shard and buffers its messages
    (``RegionMessage`` variant 3)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class ShardStopped:
    """The region stopped the shard it was told to hand off
    (``RegionMessage`` variant 4)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class Leave:
    """The region wants to leave: its shards are handed off, then it gets
    :class:`LeaveDone` (``RegionMessage`` variant 5)."""


@dataclass(frozen=True)
class Drain:
    """The region asks to be drained or undrained (``RegionMessage`` variant 6)."""

    draining: bool
    """Drain (``True``) or undrain (``False``)."""


@dataclass(frozen=True)
class ShardLoad:
    """One shard's load in a :class:`LoadReport`."""

    shard: str
    """The shard id."""
    load: float
    """Its load over the report's window, in units per second."""


@dataclass(frozen=True)
class LoadReport:
    """The load a region carried over the window that ended when it sent
    the report: each named shard's own, and the rest together."""

    window_ms: int
    """How long the window was, in milliseconds of the region's clock (a u64)."""
    shards: tuple[ShardLoad, ...]
    """The most loaded shards, most loaded first."""
    rest: float
    """The load of the region's other shards together, in units per second."""


@dataclass(frozen=True)
class Load(LoadReport):
    """The load the region carried since its last report (protocol version
    2; ``RegionMessage`` variant 7, which carries a :class:`LoadReport`'s
    fields). Never answered."""


@dataclass(frozen=True)
class GetShardHomeWithAttributes:
    """``GetShardHome`` with the shard's attributes (protocol version 5;
    ``RegionMessage`` variant 8): the node keeps them when the shard has none
    yet. Answered as ``GetShardHome``."""

    shard: str
    """The shard id."""
    attributes: Mapping[str, str]
    """Its attributes (``tenant=acme``); written in key order."""


@dataclass(frozen=True)
class RegisterWithCapacity:
    """:class:`Register` with the region's declared capacity (protocol
    version 5; ``RegionMessage`` variant 9): named quantities it can carry,
    handed to strategies. Answered as ``Register``."""

    register: Register
    """The registration."""
    capacity: Mapping[str, float]
    """Its capacity (``load`` in the units of shard loads, ``memory-mb``…);
    written in name order."""


RegionMessage: TypeAlias = Union[
    Register, Heartbeat, GetShardHome, BeginHandOffAck, ShardStopped, Leave, Drain, Load,
    GetShardHomeWithAttributes, RegisterWithCapacity,
]
"""What a region sends after its :class:`Hello`, in variant order."""


# What the node sends, in variant order.


@dataclass(frozen=True)
class Welcome:
    """The :class:`Hello` was accepted (``NodeMessage`` variant 0)."""

    protocol: int
    """The protocol version of the session: the one the Hello named (a u32)."""


@dataclass(frozen=True)
class Refused:
    """The session is refused; the node closes it next (``NodeMessage`` variant 1)."""

    reason: str
    """Why."""


@dataclass(frozen=True)
class Registered:
    """Registration accepted (``NodeMessage`` variant 2): the region holds a
    lease of ``lease_ms`` from when it sent the registration numbered
    ``sequence``, and heartbeats every ``heartbeat_interval_ms``."""

    incarnation: int
    """The incarnation registered (a u64)."""
    sequence: int
    """The registration's sequence (a u64)."""
    lease_ms: int
    """The lease, in milliseconds (a u64)."""
    heartbeat_interval_ms: int
    """How often to heartbeat, in milliseconds (a u64)."""


@dataclass(frozen=True)
class RegisterRefused:
    """Registration refused; the session stays open (``NodeMessage`` variant 3)."""

    reason: str
    """Why."""


@dataclass(frozen=True)
class HeartbeatAck:
    """Heartbeat ``sequence`` arrived: the lease runs ``lease_ms`` from its
    send (``NodeMessage`` variant 4)."""

    incarnation: int
    """The incarnation (a u64)."""
    sequence: int
    """The heartbeat's sequence (a u64)."""
    lease_ms: int
    """The lease, in milliseconds (a u64)."""


@dataclass(frozen=True)
class NotRegistered:
    """The node does not know this region's incarnation: register again
    (``NodeMessage`` variant 5)."""


@dataclass(frozen=True)
class ShardHome:
    """Where a shard lives (``NodeMessage`` variant 6; protocol versions 1 and 2)."""

    shard: str
    """The shard."""
    home: str
    """Its home region's address."""


@dataclass(frozen=True)
class ShardRefused:
    """The node will not give the shard a home (``NodeMessage`` variant 7)."""

    shard: str
    """The shard."""
    reason: str
    """Why."""


@dataclass(frozen=True)
class BeginHandOff:
    """Stop routing to the shard, buffer its messages, acknowledge with
    :class:`BeginHandOffAck` (``NodeMessage`` variant 8)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class HandOff:
    """Stop the shard, then send :class:`ShardStopped` (``NodeMessage`` variant 9)."""

    shard: str
    """The shard."""


@dataclass(frozen=True)
class PlacementChanged:
    """An operator's placement of the shard changed (``NodeMessage`` variant 10)."""

    shard: str
    """The shard."""
    target: str | None
    """Its target region's address, or ``None`` if the placement was removed."""


@dataclass(frozen=True)
class LeaveDone:
    """The leaving region holds no shards any more and may stop
    (``NodeMessage`` variant 11)."""


@dataclass(frozen=True)
class ShuttingDown:
    """The node is shutting down; reconnect with backoff (``NodeMessage`` variant 12)."""


@dataclass(frozen=True)
class Redirect:
    """This node does not lead: connect to the leader instead; the node
    closes the session next (``NodeMessage`` variant 13)."""

    leader: str
    """The leader's base URL (``http(s)://host:port``)."""


@dataclass(frozen=True)
class ShardHomeEpoch:
    """Where a shard lives, and its epoch there (``NodeMessage`` variant 14;
    protocol version 3, which gets it instead of :class:`ShardHome`)."""

    shard: str
    """The shard."""
    home: str
    """Its home region's address."""
    epoch: int
    """The shard's epoch on that home; greater for every change of home (a u64)."""


@dataclass(frozen=True)
class RegionRemoved:
    """A region of the type was removed: it left, was silent past the
    removal timeout, or restarted (``NodeMessage`` variant 15; protocol
    version 4). Drop every cached home on ``address``."""

    address: str
    """The removed region's address."""


NodeMessage: TypeAlias = Union[
    Welcome,
    Refused,
    Registered,
    RegisterRefused,
    HeartbeatAck,
    NotRegistered,
    ShardHome,
    ShardRefused,
    BeginHandOff,
    HandOff,
    PlacementChanged,
    LeaveDone,
    ShuttingDown,
    Redirect,
    ShardHomeEpoch,
    RegionRemoved,
]
"""What the node sends, in variant order."""


# Postcard, the part of it the protocol uses.

_T = TypeVar("_T")


def _bytes(count: int) -> str:
    return f"{count} byte" if count == 1 else f"{count} bytes"


def _check_size(frame_bytes: int) -> None:
    if frame_bytes > MAX_FRAME_BYTES:
        raise FrameError(
            f"frame of {frame_bytes} bytes over the 1 MiB limit ({MAX_FRAME_BYTES} bytes)"
        )


class _Writer:
    """Writes postcard values into a frame; ``what`` names the field in errors."""

    def __init__(self) -> None:
        self._out = bytearray()

    def frame(self) -> bytes:
        _check_size(len(self._out))
        return bytes(self._out)

    def varint(self, value: int, bits: int, what: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FrameError(f"{what} must be an int, not {type(value).__name__}")
        if not 0 <= value < 1 << bits:
            raise FrameError(
                f"{what} of {value} is out of range for a u{bits} (0 to {(1 << bits) - 1})"
            )
        while value >= 0x80:
            self._out.append(value & 0x7F | 0x80)
            value >>= 7
        self._out.append(value)

    def u32(self, value: int, what: str) -> None:
        self.varint(value, 32, what)

    def u64(self, value: int, what: str) -> None:
        self.varint(value, 64, what)

    def variant(self, index: int) -> None:
        self.varint(index, 32, "the variant index")

    def bool(self, value: bool, what: str) -> None:
        if not isinstance(value, bool):
            raise FrameError(f"{what} must be a bool, not {type(value).__name__}")
        self._out.append(1 if value else 0)

    def f64(self, value: float, what: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FrameError(f"{what} must be a float, not {type(value).__name__}")
        try:
            self._out += struct.pack("<d", value)
        except OverflowError:
            raise FrameError(f"{what} of {value} is out of range for an f64") from None

    def string(self, value: str, what: str) -> None:
        self._utf8(_to_utf8(value, what), what)

    def _utf8(self, encoded: bytes, what: str) -> None:
        self.u64(len(encoded), f"the length of {what}")
        self._out += encoded

    def raw(self, value: bytes) -> None:
        """Bytes as they are (after a length the caller wrote)."""
        self._out.extend(value)

    def option(self, value: _T | None, write: Callable[[_T], None]) -> None:
        if value is None:
            self._out.append(0)
        else:
            self._out.append(1)
            write(value)

    def seq(self, items: tuple[_T, ...], write: Callable[[_T], None], what: str) -> None:
        if not isinstance(items, (tuple, list)):
            raise FrameError(f"{what} must be a tuple, not {type(items).__name__}")
        self.u64(len(items), f"the length of {what}")
        for item in items:
            write(item)

    def map(self, entries: Mapping[str, _T], write: Callable[[_T], None], what: str) -> None:
        """Writes the entries in key order, as Rust's BTreeMap does: by the
        keys' UTF-8 bytes."""
        if not isinstance(entries, Mapping):
            raise FrameError(f"{what} must be a mapping, not {type(entries).__name__}")
        keys = sorted((_to_utf8(key, f"a key of {what}"), key) for key in entries)
        self.u64(len(keys), f"the length of {what}")
        for encoded, key in keys:
            self._utf8(encoded, f"a key of {what}")
            write(entries[key])


def _to_utf8(value: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise FrameError(f"{what} must be a str, not {type(value).__name__}")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise FrameError(f"invalid UTF-8 in a string: {error.reason} ({what})") from None


class _Reader:
    """Reads postcard values from a frame, front to back; ``what`` names the
    field in errors."""

    def __init__(self, frame: bytes) -> None:
        _check_size(len(frame))
        self._frame = bytes(frame)
        self._at = 0

    def end(self, what: str) -> None:
        left = len(self._frame) - self._at
        if left:
            raise FrameError(f"{_bytes(left)} left after the message ({what})")

    def _take(self, count: int, what: str, part: str) -> bytes:
        left = len(self._frame) - self._at
        if count > left:
            missing = count - left
            more = "1 more byte" if missing == 1 else f"{missing} more bytes"
            raise FrameError(f"truncated frame: {part} needs {more} ({what})")
        taken = self._frame[self._at : self._at + count]
        self._at += count
        return taken

    def varint(self, bits: int, what: str) -> int:
        """Reads an unsigned varint of ``bits`` bits as postcard does: at
        most 5 bytes for a u32 and 10 for a u64, never a bit past ``bits``."""
        longest = (bits + 6) // 7
        value = 0
        for group in range(longest):
            byte = self._take(1, what, "a varint")[0]
            value |= (byte & 0x7F) << (7 * group)
            if byte < 0x80:
                if value >> bits:
                    raise FrameError(f"a varint overflowing u{bits} ({what})")
                return value
        raise FrameError(f"a varint longer than {longest} bytes, the most a u{bits} takes ({what})")

    def u32(self, what: str) -> int:
        return self.varint(32, what)

    def u64(self, what: str) -> int:
        return self.varint(64, what)

    def bool(self, what: str) -> bool:
        byte = self._take(1, what, "a bool")[0]
        if byte > 1:
            raise FrameError(f"a bool byte must be 0 or 1, not {byte} ({what})")
        return byte == 1

    def f64(self, what: str) -> float:
        value: float = struct.unpack("<d", self._take(8, what, "an f64 of 8 bytes"))[0]
        return value

    def bytes_of(self, what: str) -> bytes:
        """Bytes as serde writes a ``Vec<u8>``: the length, then the bytes."""
        length = self.u64(f"the length of {what}")
        return bytes(self._take(length, what, f"a byte string of {_bytes(length)}"))

    def string(self, what: str) -> str:
        length = self.u64(f"the length of {what}")
        raw = self._take(length, what, f"a string of {_bytes(length)}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise FrameError(
                f"invalid UTF-8 in a string: {error.reason} at its byte {error.start} ({what})"
            ) from None

    def option(self, read: Callable[[], _T], what: str) -> _T | None:
        tag = self._take(1, what, "an option tag")[0]
        if tag > 1:
            raise FrameError(f"an option tag must be 0 or 1, not {tag} ({what})")
        return read() if tag == 1 else None

    def _count(self, what: str, unit: str) -> int:
        """Reads a length. Every item takes a byte at least, so a length
        over the bytes left is a truncated frame."""
        count = self.u64(f"the length of {what}")
        left = len(self._frame) - self._at
        if count > left:
            raise FrameError(f"truncated frame: {count} {unit} in {_bytes(left)} ({what})")
        return count

    def seq(self, read: Callable[[], _T], what: str) -> tuple[_T, ...]:
        return tuple(read() for _ in range(self._count(what, "items")))

    def map(self, read: Callable[[], _T], what: str) -> dict[str, _T]:
        """Reads a map; a repeated key keeps the last value, as in Rust."""
        entries: dict[str, _T] = {}
        for _ in range(self._count(what, "entries")):
            key = self.string(f"a key of {what}")
            entries[key] = read()
        return entries


# Frames.


def encode_hello(hello: Hello) -> bytes:
    """Encodes a region's first frame."""
    if not isinstance(hello, Hello):
        raise FrameError(f"{type(hello).__name__} is not a Hello")
    w = _Writer()
    w.u32(hello.protocol, "Hello.protocol")
    w.string(hello.entity_type, "Hello.entity_type")
    return w.frame()


def decode_hello(frame: bytes) -> Hello:
    """Decodes a region's first frame; the whole frame must be the Hello."""
    r = _Reader(frame)
    hello = Hello(protocol=r.u32("Hello.protocol"), entity_type=r.string("Hello.entity_type"))
    r.end("Hello")
    return hello


def encode_region(message: RegionMessage) -> bytes:
    """Encodes a message from the region as one frame."""
    w = _Writer()
    match message:
        case Register():
            w.variant(0)
            _write_register(w, message)
        case Heartbeat():
            w.variant(1)
            w.u64(message.sequence, "Heartbeat.sequence")
            w.map(message.metrics, lambda v: w.f64(v, "a metric"), "Heartbeat.metrics")
        case GetShardHome():
            w.variant(2)
            w.string(message.shard, "GetShardHome.shard")
        case BeginHandOffAck():
            w.variant(3)
            w.string(message.shard, "BeginHandOffAck.shard")
        case ShardStopped():
            w.variant(4)
            w.string(message.shard, "ShardStopped.shard")
        case Leave():
            w.variant(5)
        case Drain():
            w.variant(6)
            w.bool(message.draining, "Drain.draining")
        case Load():
            w.variant(7)
            w.u64(message.window_ms, "Load.window_ms")
            w.seq(message.shards, lambda s: _write_shard_load(w, s), "Load.shards")
            w.f64(message.rest, "Load.rest")
        case GetShardHomeWithAttributes():
            w.variant(8)
            w.string(message.shard, "GetShardHomeWithAttributes.shard")
            w.map(
                message.attributes,
                lambda v: w.string(v, "an attribute value"),
                "GetShardHomeWithAttributes.attributes",
            )
        case RegisterWithCapacity():
            w.variant(9)
            if not isinstance(message.register, Register):
                raise FrameError(
                    f"RegisterWithCapacity.register must be a Register, not {type(message.register).__name__}"
                )
            _write_register(w, message.register)
            w.map(message.capacity, lambda v: w.f64(v, "a capacity amount"), "RegisterWithCapacity.capacity")
        case _:
            raise FrameError(f"{type(message).__name__} is not a RegionMessage")
    return w.frame()


def _write_register(w: _Writer, message: Register) -> None:
    w.string(message.address, "Register.address")
    w.u64(message.incarnation, "Register.incarnation")
    w.seq(message.roles, lambda role: w.string(role, "a role"), "Register.roles")
    w.string(message.app_version, "Register.app_version")
    w.map(message.labels, lambda v: w.string(v, "a label value"), "Register.labels")
    w.bool(message.proxy_only, "Register.proxy_only")
    w.u64(message.sequence, "Register.sequence")


def _read_register(r: _Reader) -> Register:
    return Register(
        address=r.string("Register.address"),
        incarnation=r.u64("Register.incarnation"),
        roles=r.seq(lambda: r.string("a role"), "Register.roles"),
        app_version=r.string("Register.app_version"),
        labels=r.map(lambda: r.string("a label value"), "Register.labels"),
        proxy_only=r.bool("Register.proxy_only"),
        sequence=r.u64("Register.sequence"),
    )


def _write_shard_load(w: _Writer, entry: ShardLoad) -> None:
    if not isinstance(entry, ShardLoad):
        raise FrameError(f"an entry of Load.shards must be a ShardLoad, not {type(entry).__name__}")
    w.string(entry.shard, "ShardLoad.shard")
    w.f64(entry.load, "ShardLoad.load")


def decode_region(frame: bytes) -> RegionMessage:
    """Decodes a frame from a region; the whole frame must be one message."""
    r = _Reader(frame)
    index = r.u32("the RegionMessage variant index")
    message: RegionMessage
    match index:
        case 0:
            message = _read_register(r)
        case 1:
            message = Heartbeat(
                sequence=r.u64("Heartbeat.sequence"),
                metrics=r.map(lambda: r.f64("a metric"), "Heartbeat.metrics"),
            )
        case 2:
            message = GetShardHome(shard=r.string("GetShardHome.shard"))
        case 3:
            message = BeginHandOffAck(shard=r.string("BeginHandOffAck.shard"))
        case 4:
            message = ShardStopped(shard=r.string("ShardStopped.shard"))
        case 5:
            message = Leave()
        case 6:
            message = Drain(draining=r.bool("Drain.draining"))
        case 7:
            message = Load(
                window_ms=r.u64("Load.window_ms"),
                shards=r.seq(
                    lambda: ShardLoad(shard=r.string("ShardLoad.shard"), load=r.f64("ShardLoad.load")),
                    "Load.shards",
                ),
                rest=r.f64("Load.rest"),
            )
        case 8:
            message = GetShardHomeWithAttributes(
                shard=r.string("GetShardHomeWithAttributes.shard"),
                attributes=r.map(
                    lambda: r.string("an attribute value"), "GetShardHomeWithAttributes.attributes"
                ),
            )
        case 9:
            message = RegisterWithCapacity(
                register=_read_register(r),
                capacity=r.map(lambda: r.f64("a capacity amount"), "RegisterWithCapacity.capacity"),
            )
        case _:
            raise FrameError(f"unknown RegionMessage variant {index}")
    r.end(type(message).__name__)
    return message


def encode_node(message: NodeMessage) -> bytes:
    """Encodes a message from the node as one frame."""
    w = _Writer()
    match message:
        case Welcome():
            w.variant(0)
            w.u32(message.protocol, "Welcome.protocol")
        case Refused():
            w.variant(1)
            w.string(message.reason, "Refused.reason")
        case Registered():
            w.variant(2)
            w.u64(message.incarnation, "Registered.incarnation")
            w.u64(message.sequence, "Registered.sequence")
            w.u64(message.lease_ms, "Registered.lease_ms")
            w.u64(message.heartbeat_interval_ms, "Registered.heartbeat_interval_ms")
        case RegisterRefused():
            w.variant(3)
            w.string(message.reason, "RegisterRefused.reason")
        case HeartbeatAck():
            w.variant(4)
            w.u64(message.incarnation, "HeartbeatAck.incarnation")
            w.u64(message.sequence, "HeartbeatAck.sequence")
            w.u64(message.lease_ms, "HeartbeatAck.lease_ms")
        case NotRegistered():
            w.variant(5)
        case ShardHome():
            w.variant(6)
            w.string(message.shard, "ShardHome.shard")
            w.string(message.home, "ShardHome.home")
        case ShardRefused():
            w.variant(7)
            w.string(message.shard, "ShardRefused.shard")
            w.string(message.reason, "ShardRefused.reason")
        case BeginHandOff():
            w.variant(8)
            w.string(message.shard, "BeginHandOff.shard")
        case HandOff():
            w.variant(9)
            w.string(message.shard, "HandOff.shard")
        case PlacementChanged():
            w.variant(10)
            w.string(message.shard, "PlacementChanged.shard")
            w.option(message.target, lambda target: w.string(target, "PlacementChanged.target"))
        case LeaveDone():
            w.variant(11)
        case ShuttingDown():
            w.variant(12)
        case Redirect():
            w.variant(13)
            w.string(message.leader, "Redirect.leader")
        case ShardHomeEpoch():
            w.variant(14)
            w.string(message.shard, "ShardHomeEpoch.shard")
            w.string(message.home, "ShardHomeEpoch.home")
            w.u64(message.epoch, "ShardHomeEpoch.epoch")
        case RegionRemoved():
            w.variant(15)
            w.string(message.address, "RegionRemoved.address")
        case _:
            raise FrameError(f"{type(message).__name__} is not a NodeMessage")
    return w.frame()


def decode_node(frame: bytes) -> NodeMessage:
    """Decodes a frame from the node; the whole frame must be one message."""
    r = _Reader(frame)
    index = r.u32("the NodeMessage variant index")
    message: NodeMessage
    match index:
        case 0:
            message = Welcome(protocol=r.u32("Welcome.protocol"))
        case 1:
            message = Refused(reason=r.string("Refused.reason"))
        case 2:
            message = Registered(
                incarnation=r.u64("Registered.incarnation"),
                sequence=r.u64("Registered.sequence"),
                lease_ms=r.u64("Registered.lease_ms"),
                heartbeat_interval_ms=r.u64("Registered.heartbeat_interval_ms"),
            )
        case 3:
            message = RegisterRefused(reason=r.string("RegisterRefused.reason"))
        case 4:
            message = HeartbeatAck(
                incarnation=r.u64("HeartbeatAck.incarnation"),
                sequence=r.u64("HeartbeatAck.sequence"),
                lease_ms=r.u64("HeartbeatAck.lease_ms"),
            )
        case 5:
            message = NotRegistered()
        case 6:
            message = ShardHome(shard=r.string("ShardHome.shard"), home=r.string("ShardHome.home"))
        case 7:
            message = ShardRefused(
                shard=r.string("ShardRefused.shard"), reason=r.string("ShardRefused.reason")
            )
        case 8:
            message = BeginHandOff(shard=r.string("BeginHandOff.shard"))
        case 9:
            message = HandOff(shard=r.string("HandOff.shard"))
        case 10:
            message = PlacementChanged(
                shard=r.string("PlacementChanged.shard"),
                target=r.option(lambda: r.string("PlacementChanged.target"), "PlacementChanged.target"),
            )
        case 11:
            message = LeaveDone()
        case 12:
            message = ShuttingDown()
        case 13:
            message = Redirect(leader=r.string("Redirect.leader"))
        case 14:
            message = ShardHomeEpoch(
                shard=r.string("ShardHomeEpoch.shard"),
                home=r.string("ShardHomeEpoch.home"),
                epoch=r.u64("ShardHomeEpoch.epoch"),
            )
        case 15:
            message = RegionRemoved(address=r.string("RegionRemoved.address"))
        case _:
            raise FrameError(f"unknown NodeMessage variant {index}")
    r.end(type(message).__name__)
    return message
