"""The region client's errors, one class per kind of failure:
:class:`RegionError` for lifecycle and home look-ups, :class:`SendError` for
messages the region cannot take, :class:`DeliveryError` for messages it
took but could not deliver, :class:`AskError` for requests without an
answer, and :func:`check_shard`, the shard id rule they apply.

Each family has a subclass per kind (``except ShardRefusedError``, or
``except RegionError`` for them all), and every one derives from
:class:`~shardalloc_client.errors.ShardallocError`. ``kind`` still names the
kind as the Rust client's variant does (``"ShardRefused"``), which the
shared scenarios of ``contracts/region-core/`` compare. Messages are plain
sentences (durations as ``380 ms`` or ``1.5 s``).
"""

from collections.abc import Iterable
from typing import Any, ClassVar, Final, Literal, TypeAlias, TypeVar

from ..errors import ShardallocError

__all__ = [
    "MAX_SHARD_ID_BYTES",
    "RegionErrorKind",
    "RegionError",
    "SendErrorKind",
    "SendError",
    "DeliveryErrorKind",
    "DeliveryError",
    "AskErrorKind",
    "AskError",
    "check_shard",
    "ConfigError",
    "NoRuntimeError",
    "InvalidShardError",
    "ShardRefusedError",
    "RegionRefusedError",
    "RegionLeftError",
    "RegionShutDownError",
    "LeaveTimedOutError",
    "DrainAndLeaveTimedOutError",
    "BufferFullError",
    "TotalBufferFullError",
    "InvalidShardSendError",
    "RegionStoppedSendError",
    "AttemptsExhaustedError",
    "DeadlinePassedError",
    "DeliveryRefusedError",
    "RegionStoppedError",
    "AskNotTakenError",
    "AskTimeoutError",
    "AskNotDeliveredError",
    "AskFailedError",
]

MAX_SHARD_ID_BYTES: Final = 256
"""The longest shard id, in bytes of UTF-8."""

RegionErrorKind: TypeAlias = Literal[
    "Config",
    "NoRuntime",
    "InvalidShard",
    "ShardRefused",
    "Refused",
    "Left",
    "ShutDown",
    "LeaveTimedOut",
    "DrainAndLeaveTimedOut",
]
"""The variants of the Rust ``RegionError``, by name."""

SendErrorKind: TypeAlias = Literal["BufferFull", "TotalBufferFull", "InvalidShard", "Stopped"]
"""The variants of the Rust ``SendError``, by name."""


def _duration(ms: int) -> str:
    """A duration in words: ``380 ms`` under a second, else seconds with
    as many decimals as it needs (``20 s``, ``1.5 s``)."""
    if ms < 1_000:
        return f"{ms} ms"
    seconds = f"{ms / 1_000:.3f}".rstrip("0").rstrip(".")
    return f"{seconds} s"


def _left_behind(shards: tuple[str, ...], leave_asked: bool) -> str:
    """What a drain-and-leave left behind, in words: at most ten shards
    named, the rest counted."""
    shown = 10
    if leave_asked:
        waiting = "the node had not confirmed its leave"
    else:
        waiting = "it had not reached the node to ask to leave"
    if not shards:
        return f"it ran no shard any more, but {waiting}"
    names = ", ".join(shards[:shown])
    if len(shards) > shown:
        names += f" and {len(shards) - shown} more"
    count = "1 shard" if len(shards) == 1 else f"{len(shards)} shards"
    return f"it still ran {count} ({names}), stopped there and then, and {waiting}"


K = TypeVar("K", bound="_Keyed")


class _Keyed(ShardallocError):
    """An error equal to another of its class with the same kind and fields,
    shown with its class and kind. A family's base class (``RegionError``)
    keeps a table of its subclasses by kind, which its class methods build."""

    kind: str
    _by_kind: ClassVar[dict[str, type["_Keyed"]]]

    def __init_subclass__(cls, kind: str | None = None, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if kind is None:
            cls._by_kind = {}
        else:
            cls._by_kind[kind] = cls

    @classmethod
    def _of(cls: type[K], kind: str, message: str, **fields: Any) -> K:
        """The error of ``kind``, as its subclass."""
        made = cls._by_kind[kind](kind, message, **fields)
        assert isinstance(made, cls)
        return made

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Keyed)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


class RegionError(_Keyed):
    """Why a region operation failed. ``kind`` names the Rust variant; the
    fields that variant does not carry are ``None``. Two errors are equal
    when their kinds and fields are."""

    kind: RegionErrorKind
    """Which variant."""
    detail: str | None
    """What is wrong with the configuration (``Config``)."""
    shard: str | None
    """The shard (``InvalidShard``, ``ShardRefused``)."""
    reason: str | None
    """What is wrong with the shard id (``InvalidShard``), or the node's
    reason (``ShardRefused``, ``Refused``)."""
    bound_ms: int | None
    """The bound, in milliseconds (``LeaveTimedOut``, ``DrainAndLeaveTimedOut``)."""
    shards: tuple[str, ...] | None
    """The shards still running here when the bound passed (``DrainAndLeaveTimedOut``)."""
    leave_asked: bool | None
    """Whether the region had asked the node to let it go; false when the
    node could not be reached for it (``DrainAndLeaveTimedOut``)."""

    def __init__(
        self,
        kind: RegionErrorKind,
        message: str,
        *,
        detail: str | None = None,
        shard: str | None = None,
        reason: str | None = None,
        bound_ms: int | None = None,
        shards: tuple[str, ...] | None = None,
        leave_asked: bool | None = None,
    ) -> None:
        """Use the class methods, one per kind, which write the message."""
        super().__init__(message)
        self.kind = kind
        self.detail = detail
        self.shard = shard
        self.reason = reason
        self.bound_ms = bound_ms
        self.shards = shards
        self.leave_asked = leave_asked

    def _key(self) -> tuple[object, ...]:
        return (
            self.kind,
            self.detail,
            self.shard,
            self.reason,
            self.bound_ms,
            self.shards,
            self.leave_asked,
        )


    @classmethod
    def config(cls, detail: str) -> "RegionError":
        """The region's configuration cannot work."""
        return cls._of("Config", f"invalid region configuration: {detail}", detail=detail)

    @classmethod
    def no_runtime(cls) -> "RegionError":
        """The Rust client's region was started outside a Tokio runtime. Kept
        so the kinds match the Rust variants one for one; the sans-I/O core
        never raises it."""
        return cls._of("NoRuntime", "a region must be started inside a Tokio runtime")

    @classmethod
    def invalid_shard(cls, shard: str, reason: str) -> "RegionError":
        """The shard id is empty or too long."""
        return cls._of(
            "InvalidShard",
            f"invalid shard id {shard!r}: {reason}",
            shard=shard,
            reason=reason,
        )

    @classmethod
    def shard_refused(cls, shard: str, reason: str) -> "RegionError":
        """The node would not give the shard a home (a limit)."""
        return cls._of(
            "ShardRefused", f"the node refused shard {shard}: {reason}", shard=shard, reason=reason
        )

    @classmethod
    def refused(cls, reason: str) -> "RegionError":
        """The node refused the session or the registration (version, entity
        type, token, a stale incarnation, too many regions)."""
        return cls._of("Refused", f"the node refused the region: {reason}", reason=reason)

    @classmethod
    def left(cls) -> "RegionError":
        """The region left the cluster."""
        return cls._of("Left", "the region has left the cluster")

    @classmethod
    def shut_down(cls) -> "RegionError":
        """The region was shut down."""
        return cls._of("ShutDown", "the region has shut down")

    @classmethod
    def leave_timed_out(cls, bound_ms: int) -> "RegionError":
        """The node did not confirm the leave within ``bound_ms``; the region
        stopped its shards and closed anyway."""
        return cls._of(
            "LeaveTimedOut",
            f"the node did not confirm the leave within {_duration(bound_ms)}; "
            "the region stopped its shards and closed anyway",
            bound_ms=bound_ms,
        )

    @classmethod
    def drain_and_leave_timed_out(
        cls, bound_ms: int, shards: Iterable[str], leave_asked: bool
    ) -> "RegionError":
        """A drain-and-leave ran out of its bound: the shards named still ran
        here (they were stopped then), or none did but the node had not let
        the region go."""
        names = tuple(shards)
        return cls._of(
            "DrainAndLeaveTimedOut",
            f"the region did not drain and leave within {_duration(bound_ms)}: "
            f"{_left_behind(names, leave_asked)}",
            bound_ms=bound_ms,
            shards=names,
            leave_asked=leave_asked,
        )


class SendError(_Keyed):
    """Why the region did not take a message. ``kind`` names the Rust
    variant; the fields that variant does not carry are ``None``. Two
    errors are equal when their kinds and fields are."""

    kind: SendErrorKind
    """Which variant."""
    shard: str | None
    """The shard (``BufferFull``, ``InvalidShard``)."""
    limit: int | None
    """The per-shard (``BufferFull``) or region-wide (``TotalBufferFull``) limit, in messages."""
    reason: str | None
    """What is wrong with the shard id (``InvalidShard``)."""

    def __init__(
        self,
        kind: SendErrorKind,
        message: str,
        *,
        shard: str | None = None,
        limit: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Use the class methods, one per kind, which write the message."""
        super().__init__(message)
        self.kind = kind
        self.shard = shard
        self.limit = limit
        self.reason = reason

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.shard, self.limit, self.reason)


    @classmethod
    def buffer_full(cls, shard: str, limit: int) -> "SendError":
        """The shard already has ``limit`` messages waiting (for its home, or
        for the application to take them)."""
        return cls._of(
            "BufferFull",
            f"the buffer of shard {shard} is full ({limit} messages)",
            shard=shard,
            limit=limit,
        )

    @classmethod
    def total_buffer_full(cls, limit: int) -> "SendError":
        """The region holds ``limit`` buffered messages over all shards."""
        return cls._of(
            "TotalBufferFull",
            f"the region's buffers are full ({limit} messages over all shards)",
            limit=limit,
        )

    @classmethod
    def invalid_shard(cls, shard: str, reason: str) -> "SendError":
        """The shard id is empty or too long."""
        return cls._of(
            "InvalidShard",
            f"invalid shard id {shard!r}: {reason}",
            shard=shard,
            reason=reason,
        )

    @classmethod
    def stopped(cls) -> "SendError":
        """The region has left or shut down."""
        return cls._of("Stopped", "the region has stopped; it takes no more messages")


DeliveryErrorKind: TypeAlias = Literal["AttemptsExhausted", "DeadlinePassed", "ShardRefused", "RegionStopped"]
"""The variants of the Rust ``DeliveryError``, by name."""


class DeliveryError(_Keyed):
    """Why a message the region took was never delivered: its forwards kept
    failing, the node refused its shard, or the region stopped while it
    waited for a home. Handed to the application's ``undelivered`` with the message.
    ``kind`` names the Rust variant; the field the other variant carries is
    ``None``."""

    kind: DeliveryErrorKind
    """Which variant."""
    shard: str
    """The shard."""
    to: str | None
    """The home the last attempt went to (``AttemptsExhausted``, ``DeadlinePassed``)."""
    reason: str | None
    """Why the last attempt failed, or the node's reason (``ShardRefused``)."""
    attempts: int | None
    """The failed attempts in a row (``AttemptsExhausted``)."""
    waited_ms: int | None
    """How long since the run's first failure (``DeadlinePassed``)."""

    def __init__(
        self,
        kind: DeliveryErrorKind,
        message: str,
        *,
        shard: str,
        to: str | None = None,
        reason: str | None = None,
        attempts: int | None = None,
        waited_ms: int | None = None,
    ) -> None:
        """Use the class methods, one per kind, which write the message."""
        super().__init__(message)
        self.kind = kind
        self.shard = shard
        self.to = to
        self.reason = reason
        self.attempts = attempts
        self.waited_ms = waited_ms

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.shard, self.to, self.reason, self.attempts, self.waited_ms)

    @classmethod
    def attempts_exhausted(cls, shard: str, to: str, attempts: int, reason: str) -> "DeliveryError":
        """The shard's forwards failed ``attempts`` times in a row."""
        return cls._of(
            "AttemptsExhausted",
            f"a message for shard {shard} was not delivered: {attempts} forwards in a row failed "
            f"(the last to {to}: {reason})",
            shard=shard,
            to=to,
            reason=reason,
            attempts=attempts,
        )

    @classmethod
    def shard_refused(cls, shard: str, reason: str) -> "DeliveryError":
        """The node refused the shard a home: its waiting messages have nowhere to go."""
        return cls._of(
            "ShardRefused",
            f"a message for shard {shard} was not delivered: the node refused the shard ({reason})",
            shard=shard,
            reason=reason,
        )

    @classmethod
    def region_stopped(cls, shard: str) -> "DeliveryError":
        """The region left or shut down while the message waited for the shard's home."""
        return cls._of(
            "RegionStopped",
            f"a message for shard {shard} was not delivered: the region stopped while it waited for the shard's home",
            shard=shard,
        )

    @classmethod
    def deadline_passed(cls, shard: str, to: str, waited_ms: int, reason: str) -> "DeliveryError":
        """The shard's forwards kept failing for longer than the deadline."""
        return cls._of(
            "DeadlinePassed",
            f"a message for shard {shard} was not delivered: its forwards kept failing for {waited_ms} ms "
            f"(the last to {to}: {reason})",
            shard=shard,
            to=to,
            reason=reason,
            waited_ms=waited_ms,
        )


AskErrorKind: TypeAlias = Literal["Send", "Timeout", "NotDelivered", "Failed"]
"""The variants of the Rust ``AskError``, by name."""


class AskError(_Keyed):
    """Why an ``ask`` got no answer (:meth:`Region.ask`). ``kind`` names the
    Rust variant; the fields other variants carry are ``None``."""

    kind: AskErrorKind
    """Which variant."""
    shard: str
    """The shard asked."""
    cause: SendError | DeliveryError | None
    """Why the region did not take it (``Send``) or it never reached the home (``NotDelivered``)."""
    timeout_ms: int | None
    """The timeout that passed (``Timeout``)."""
    reason: str | None
    """Why the home did not answer (``Failed``)."""

    def __init__(
        self,
        kind: AskErrorKind,
        message: str,
        *,
        shard: str,
        cause: SendError | DeliveryError | None = None,
        timeout_ms: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Use the class methods, one per kind, which write the message."""
        super().__init__(message)
        self.kind = kind
        self.shard = shard
        self.cause = cause
        self.timeout_ms = timeout_ms
        self.reason = reason

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.shard, self.cause, self.timeout_ms, self.reason)

    @classmethod
    def send(cls, shard: str, cause: SendError) -> "AskError":
        """The region did not take the request."""
        return cls._of("Send", str(cause), shard=shard, cause=cause)

    @classmethod
    def timeout(cls, shard: str, timeout_ms: int) -> "AskError":
        """No answer came within the timeout; the request may still run at the home."""
        return cls._of(
            "Timeout",
            f"no answer from shard {shard} within {_duration(timeout_ms)}",
            shard=shard,
            timeout_ms=timeout_ms,
        )

    @classmethod
    def not_delivered(cls, cause: DeliveryError) -> "AskError":
        """The request never reached the shard's home."""
        return cls._of("NotDelivered", str(cause), shard=cause.shard, cause=cause)

    @classmethod
    def failed(cls, shard: str, reason: str) -> "AskError":
        """The home failed the request, or the connection to it was lost after it took it."""
        return cls._of("Failed", f"shard {shard} did not answer: {reason}", shard=shard, reason=reason)


# RegionError's kinds.

class ConfigError(RegionError, kind="Config"):
    """The region's configuration cannot work."""


class NoRuntimeError(RegionError, kind="NoRuntime"):
    """Kept so the kinds match the Rust client's; never raised here."""


class InvalidShardError(RegionError, kind="InvalidShard"):
    """A shard id is empty, too long or not UTF-8."""


class ShardRefusedError(RegionError, kind="ShardRefused"):
    """The node would not give the shard a home (a limit)."""


class RegionRefusedError(RegionError, kind="Refused"):
    """The node refused the session or the registration."""


class RegionLeftError(RegionError, kind="Left"):
    """The region has left the cluster."""


class RegionShutDownError(RegionError, kind="ShutDown"):
    """The region has shut down."""


class LeaveTimedOutError(RegionError, kind="LeaveTimedOut"):
    """The node did not confirm the leave in time."""


class DrainAndLeaveTimedOutError(RegionError, kind="DrainAndLeaveTimedOut"):
    """A drain-and-leave ran out of its bound."""


# SendError's kinds.

class BufferFullError(SendError, kind="BufferFull"):
    """The shard's buffer is full."""


class TotalBufferFullError(SendError, kind="TotalBufferFull"):
    """The region's buffers are full over all shards."""


class InvalidShardSendError(SendError, kind="InvalidShard"):
    """A message named a shard id that is empty, too long or not UTF-8."""


class RegionStoppedSendError(SendError, kind="Stopped"):
    """The region has stopped; it takes no more messages."""


# DeliveryError's kinds.

class AttemptsExhaustedError(DeliveryError, kind="AttemptsExhausted"):
    """The shard's forwards failed too many times in a row."""


class DeadlinePassedError(DeliveryError, kind="DeadlinePassed"):
    """The shard's forwards kept failing past the deadline."""


class DeliveryRefusedError(DeliveryError, kind="ShardRefused"):
    """The node refused the shard a home."""


class RegionStoppedError(DeliveryError, kind="RegionStopped"):
    """The region stopped while the message waited for a home."""


# AskError's kinds.

class AskNotTakenError(AskError, kind="Send"):
    """The region did not take the request (``cause`` says why)."""


class AskTimeoutError(AskError, kind="Timeout"):
    """No answer came within the timeout."""


class AskNotDeliveredError(AskError, kind="NotDelivered"):
    """The request never reached the shard's home (``cause`` says why)."""


class AskFailedError(AskError, kind="Failed"):
    """The home failed the request."""


def check_shard(shard: str) -> str | None:
    """Checks a shard id: 1 to :data:`MAX_SHARD_ID_BYTES` bytes of UTF-8.
    Returns what is wrong with it, or ``None`` when it is fine.

    A ``str`` that has no UTF-8 form (a lone surrogate) is refused too; a
    Rust ``&str`` cannot hold one, and no frame could carry it.
    """
    try:
        length = len(shard.encode("utf-8"))
    except UnicodeEncodeError:
        return "a shard id must be valid UTF-8 (it holds a lone surrogate)"
    if length == 0:
        return "a shard id is empty"
    if length > MAX_SHARD_ID_BYTES:
        return f"a shard id of {length} bytes is longer than {MAX_SHARD_ID_BYTES} bytes"
    return None
