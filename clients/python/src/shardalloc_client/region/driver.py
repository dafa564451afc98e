"""The region: ``await Region.start(config, app)`` connects to the node and
serves the application's shards.

The asyncio driver around the sans-I/O :class:`~shardalloc_client.region.core.RegionCore`
(a port of the TypeScript client's ``region/region.ts``, itself a port of
the Rust client's ``region/driver.rs``). It owns the clock and the I/O,
feeds the core and performs the actions the core returns, in order, all on
one event loop::

    session events (session.py)     → core.connected / on_message / disconnected
    other regions (the inbox)        → core.inbound
    a shard's stop finished          → core.stop_finished
    a tick every 50 ms               → core.tick_with_load, reconnect when due, the leave deadline
    send / home_of / leave / …       → the core's matching call

Each running shard has a worker: one asyncio task calling the application
in order (``start_shard``, ``deliver`` per message, ``stop_shard``) and
reporting the stop back, even when the application raised. A stop past its
deadline is abandoned: its task is cancelled and the shard counts as
stopped.
"""

import asyncio
import logging
import math
import random
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, Protocol, TypeAlias, TypeVar, Union

from . import actions as up
from .actions import (
    AbandonStop,
    Action,
    Deliver,
    Forward,
    Known,
    Publish,
    Reconnect,
    Send,
    Start,
    Stop,
    Undelivered,
    Update,
)
from .core import DEFAULT_FORWARD_ATTEMPTS, DEFAULT_FORWARD_DEADLINE_MS, CoreConfig, RegionCore
from .ask import Replier, Request
from .errors import AskError, DeliveryError, RegionError, SendError
from .load import MAX_LOAD_SHARDS, LoadMeter
from .session import (
    Leader,
    Session,
    SessionClosed,
    SessionConnected,
    SessionEvent,
    SessionMessage,
    SessionParams,
    SessionRefused,
    connect_url_of,
    tls_context,
)
from .transport import InMemoryTransport, Transport, TransportError
from ..wire import Register

__all__ = [
    "TICK_MS",
    "MAX_ADDRESS_BYTES",
    "DEFAULT_ASK_TIMEOUT",
    "Application",
    "RegionConfig",
    "Region",
    "Updates",
]

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)

TICK_MS: Final = 50
"""How often the region ticks its core, in milliseconds."""

DEFAULT_ASK_TIMEOUT: Final = 5.0
"""How long :meth:`Region.ask` waits for an answer by default, in seconds."""

MAX_ADDRESS_BYTES: Final = 256
"""The longest region address, in bytes (printable ASCII, no spaces)."""

_ENTITY_TYPE: Final = re.compile(r"[A-Za-z0-9._-]{1,128}")
_ADDRESS: Final = re.compile(r"[\x21-\x7e]+")
_U64_MAX: Final = (1 << 64) - 1

_log = logging.getLogger(__name__)


class Application(Protocol[M_contra]):
    """The application a region serves.

    For each shard the region calls :meth:`start_shard` first, then
    :meth:`deliver` for each message (and ``answer`` for each request) in
    order, then :meth:`stop_shard`; the
    calls of one shard never overlap, each is awaited before the next.
    Different shards run concurrently.

    An application may also define ``metrics(self) -> Mapping[str, float]``:
    gauges sent with every heartbeat (``cpu``, ``mem-used-ratio``, custom
    ones). It is called on the event loop; keep it quick.

    And ``undelivered(self, shard, message, error)``: a message the region
    took was given up, its forwards having kept failing past
    ``forward_attempts`` or ``forward_deadline_ms`` (``error`` is a
    :class:`~shardalloc_client.region.errors.DeliveryError`). Every message
    :meth:`Region.send` accepted is delivered or handed there; without it,
    the region logs a warning. Called on the event loop; keep it quick.
    """

    async def start_shard(self, shard: str, epoch: int) -> None:
        """Starts the shard here, at ``epoch``: every change of the shard's
        home gives it a greater epoch, so a write to the application's own
        storage made only while no greater epoch is stored there cannot come
        from a stale run elsewhere (docs/operations.md, "Fencing writes with
        shard epochs"). 0 from a node older than protocol version 3."""
        ...

    async def stop_shard(self, shard: str) -> None:
        """Stops the shard (a hand-off, an expired lease, leaving, shutting
        down), after every delivery queued before it. The region tells the
        node the shard stopped when this returns or raises, or when the stop
        deadline passes (then this call is cancelled)."""
        ...

    async def deliver(self, shard: str, message: M_contra) -> None:
        """Delivers a message to a running shard."""
        ...

    # An application that answers requests (``Region.ask``) also defines
    # ``async def answer(self, shard, request) -> reply``: called in order
    # with the shard's deliveries; what it raises fails the ask with its
    # text (an ``AskError`` of kind ``Failed``). Without it, every request
    # is failed so.


@dataclass(frozen=True)
class RegionConfig:
    """How a region connects and behaves. Only ``node``, ``entity_type``
    and ``address`` have no default; :meth:`Region.start` checks the rest."""

    node: str | Sequence[str]
    """The node's URL (``http(s)://host:port`` or ``ws(s)://…``), or every
    node's of an HA cluster (a sequence, or one string separated by commas)."""
    entity_type: str
    """The entity type this region serves."""
    address: str
    """This region's address, unique in the cluster; other regions reach it by it."""
    incarnation: int | None = None
    """Greater for every restart; default: milliseconds since the Unix epoch at start."""
    roles: Sequence[str] = ()
    """Cluster roles."""
    app_version: str = ""
    """The application's version, shown to operators and strategies."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels (``zone``, …) strategies place by."""
    proxy_only: bool = False
    """Routes messages only; never a shard's home."""
    token: str | None = None
    """The region token, if the node wants one."""
    ca_file: str | None = None
    """A file of PEM certificates to trust for ``wss://`` nodes (a private CA)."""
    ca_pem: str | None = None
    """PEM certificates to trust for ``wss://`` nodes (a private CA)."""
    shard_buffer_limit: int = 1_000
    """Most messages buffered for one shard."""
    total_buffer_limit: int = 100_000
    """Most messages buffered over all shards."""
    stop_deadline_ms: int = 10_000
    """How long ``stop_shard`` may take before the stop is abandoned."""
    leave_timeout_ms: int = 60_000
    """How long :meth:`Region.leave` waits for the node's ``LeaveDone``."""
    drain_and_leave_timeout_ms: int = 20_000
    """The bound of :meth:`Region.drain_and_leave`."""
    reconnect_min_ms: int = 100
    """The first reconnect delay; it doubles up to ``reconnect_max_ms``."""
    reconnect_max_ms: int = 5_000
    """The longest reconnect delay."""
    home_retry_ms: int = 2_000
    """How long to wait for a home before asking again."""
    response_timeout_ms: int = 10_000
    """How long the node may stay silent before registering."""
    connect_timeout_ms: int = 10_000
    """The bound of the WebSocket handshake and of the ``Welcome``."""
    load_report_shards: int = 256
    """Most shards a load report names (at most 1,024)."""
    forward_attempts: int = DEFAULT_FORWARD_ATTEMPTS
    """How many forwards of one shard may fail in a row before its waiting
    messages go to the application's ``undelivered``."""
    forward_deadline_ms: int = DEFAULT_FORWARD_DEADLINE_MS
    """How long a shard's forwards may keep failing before its waiting
    messages go to the application's ``undelivered``."""
    shard_attributes: Callable[[str], Mapping[str, str]] | None = None
    """The attributes the application gives a shard (``{"tenant": "acme"}``),
    sent with each request for its home (protocol version 5): the node keeps
    them when the shard has none yet, and strategies read them. Called once
    per request: keep it quick. Default none."""
    capacity: Mapping[str, float] = field(default_factory=dict)
    """The capacity this region declares when it registers (protocol version
    5): named quantities, ``{"load": 800, "memory-mb": 4096}`` (``load`` in
    the units of its shard loads), handed to strategies. At most 16; names 1
    to 64 characters of ``A-Z a-z 0-9 . _ - /``; amounts finite, zero or
    more. Default none."""


@dataclass(frozen=True)
class _Settled:
    """A checked configuration and what follows from it."""

    config: RegionConfig
    urls: tuple[str, ...]
    incarnation: int
    params: SessionParams


_MAX_QUANTITIES = 16
"""Most quantities a region's capacity declares."""

_QUANTITY_NAME = re.compile(r"[A-Za-z0-9._/-]{1,64}")


def _check_capacity(capacity: Mapping[str, float], problem: Callable[[str], RegionError]) -> None:
    """Refuses a capacity the node would refuse, naming the rule."""
    if len(capacity) > _MAX_QUANTITIES:
        raise problem(f"{len(capacity)} capacity quantities; a region declares at most {_MAX_QUANTITIES}")
    for name, amount in capacity.items():
        if not isinstance(name, str) or not _QUANTITY_NAME.fullmatch(name):
            raise problem(
                f"a capacity quantity's name is 1 to 64 characters of A-Z a-z 0-9 . _ - /, not {name!r}"
            )
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < math.inf:
            raise problem(f"capacity quantity {name!r} is {amount!r}; an amount is a finite number, zero or more")


def _settle(config: RegionConfig) -> _Settled:
    """Checks ``config``; raises a ``Config`` :class:`RegionError` naming the problem."""

    def problem(text: str) -> RegionError:
        return RegionError.config(text)

    if isinstance(config.node, str):
        nodes = [node.strip() for node in config.node.split(",")]
    else:
        nodes = list(config.node)
    if not nodes or any(not isinstance(node, str) or not node for node in nodes):
        raise problem("name at least one node URL (e.g. http://127.0.0.1:7878)")
    urls = []
    for node in nodes:
        try:
            urls.append(connect_url_of(node))
        except ValueError as error:
            raise problem(str(error)) from None
    if not config.address:
        raise problem("the address is empty")
    if not config.entity_type:
        raise problem("the entity type is empty")
    if len(config.address) > MAX_ADDRESS_BYTES or not _ADDRESS.fullmatch(config.address):
        raise problem(
            f"an address is 1 to {MAX_ADDRESS_BYTES} bytes of printable ASCII without spaces, "
            f"not {config.address!r}"
        )
    if not _ENTITY_TYPE.fullmatch(config.entity_type):
        raise problem(
            "an entity type name is 1 to 128 characters of A-Z a-z 0-9 . _ -, "
            f"not {config.entity_type!r}"
        )
    if config.shard_buffer_limit < 1 or config.total_buffer_limit < 1:
        raise problem("buffer limits must be at least 1")
    if not 1 <= config.load_report_shards <= MAX_LOAD_SHARDS:
        raise problem(
            f"load_report_shards is {config.load_report_shards}; it must be 1 to {MAX_LOAD_SHARDS}"
        )
    if not config.connect_timeout_ms > 0:
        raise problem("the connect timeout must be greater than zero")
    attempts, deadline = config.forward_attempts, config.forward_deadline_ms
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1 or not deadline > 0:
        raise problem(
            f"forward_attempts ({attempts!r}) must be a whole number of at least 1 "
            f"and forward_deadline_ms ({deadline!r}) greater than zero"
        )
    if not 0 < config.reconnect_min_ms <= config.reconnect_max_ms:
        raise problem(
            f"the reconnect delays must satisfy 0 < min ({config.reconnect_min_ms} ms) "
            f"<= max ({config.reconnect_max_ms} ms)"
        )
    for name in ("stop_deadline_ms", "leave_timeout_ms", "drain_and_leave_timeout_ms",
                 "home_retry_ms", "response_timeout_ms"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 0:
            raise problem(f"{name} must be a whole number of milliseconds from 0, not {value!r}")
    _check_capacity(config.capacity, problem)
    incarnation = config.incarnation if config.incarnation is not None else time.time_ns() // 1_000_000
    if isinstance(incarnation, bool) or not isinstance(incarnation, int) or not 0 <= incarnation <= _U64_MAX:
        raise problem(f"the incarnation must be a whole number from 0, not {incarnation!r}")
    try:
        context = tls_context(config.ca_file, config.ca_pem)
    except (OSError, ValueError) as error:
        raise problem(f"cannot read the CA certificates: {error}") from None
    params = SessionParams(
        urls=tuple(urls),
        entity_type=config.entity_type,
        token=config.token,
        ssl_context=context,
        handshake_timeout_ms=config.connect_timeout_ms,
        shard_attributes=config.shard_attributes,
        capacity=dict(config.capacity),
    )
    return _Settled(config=config, urls=tuple(urls), incarnation=incarnation, params=params)


HEALTHY_SESSION_MS = 10_000
"""How long a session must stay registered before its end restarts the
reconnect delays from the minimum: a node that registers the region and
then breaks the session is retried ever more slowly."""


class _Backoff:
    """Reconnect delays: doubling from min to max, each drawn from the upper half of the step."""

    def __init__(self, minimum: int, maximum: int) -> None:
        self._min = minimum
        self._max = maximum
        self._step = minimum
        self._registered_at: int | None = None

    def registered(self, now: int) -> None:
        """The session is registered (kept from its first time)."""
        if self._registered_at is None:
            self._registered_at = now

    def closed(self, now: int) -> int:
        """The delay after a session ended at `now`: from the minimum again only after a healthy session."""
        if self._registered_at is not None and now - self._registered_at >= HEALTHY_SESSION_MS:
            self.reset()
        self._registered_at = None
        return self.next()

    def next(self) -> int:
        step = self._step
        self._step = min(self._step * 2, self._max)
        return math.floor(step / 2 + random.random() * (step / 2))

    def reset(self) -> None:
        self._step = self._min


@dataclass
class _Worker:
    """One shard's worker: the application's calls for one run, in order."""

    calls: "asyncio.Queue[tuple[Callable[[], Awaitable[None]], bool]]" = field(
        default_factory=asyncio.Queue
    )
    """Calls queued, each with whether it is the run's last (the stop)."""
    backlog: int = 0
    """Deliveries queued and not yet done."""
    abandoned: bool = False
    """Set when the run was given up: later calls are skipped."""
    task: "asyncio.Task[None] | None" = None


@dataclass
class _Leaving:
    deadline: int
    timed_out: bool = False


_Ending: TypeAlias = Union[_Leaving, Literal["drain-and-leave", "shutdown"]]


class Updates(AsyncIterator[Update]):
    """What a region publishes (:mod:`shardalloc_client.region.actions`'s
    updates), from :meth:`Region.updates` on, in order; it ends when the
    region stops or :meth:`close` is called. Unbounded: read it, or close it."""

    def __init__(self, unsubscribe: Callable[["Updates"], None]) -> None:
        """Use :meth:`Region.updates`."""
        self._queue: asyncio.Queue[Update | None] = asyncio.Queue()
        self._unsubscribe = unsubscribe
        self._closed = False

    def _put(self, update: Update | None) -> None:
        if not self._closed:
            self._queue.put_nowait(update)
            if update is None:
                self._closed = True

    def close(self) -> None:
        """Stops receiving; the iteration ends after what is already queued."""
        self._unsubscribe(self)
        self._put(None)

    def __aiter__(self) -> "Updates":
        return self

    async def __anext__(self) -> Update:
        update = await self._queue.get()
        if update is None:
            self._queue.put_nowait(None)
            raise StopAsyncIteration
        return update


class _RegionInbox(Generic[M]):
    """The region's :class:`~shardalloc_client.region.transport.Inbox`."""

    def __init__(self, region: "Region[M]") -> None:
        self._region = region

    @property
    def address(self) -> str:
        """The region's address."""
        return self._region.address

    def deliver(self, shard: str, message: M) -> None:
        """Hands a forwarded message to the region."""
        self._region._on_inbound(shard, message)

    def ask(self, shard: str, message: M, replier: Replier) -> None:
        """Hands a forwarded request to the region."""
        self._region._on_inbound(shard, Request(message, replier))

    def not_delivered(
        self, to: str, shard: str, messages: "Sequence[M | Request[M]]", error: TransportError
    ) -> None:
        """Hands back forwards the transport found later were not delivered."""
        self._region._on_not_delivered(to, shard, list(messages), str(error))


class _Starting(Generic[M]):
    """What :meth:`Region.start` returns: await it for the region, or enter
    it with ``async with`` (the region ends with the block)."""

    def __init__(self, starting: Coroutine[Any, Any, "Region[M]"]) -> None:
        self._starting = starting
        self._region: Region[M] | None = None

    def __await__(self) -> Generator[Any, None, "Region[M]"]:
        return self._starting.__await__()

    async def __aenter__(self) -> "Region[M]":
        self._region = await self._starting
        return self._region

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        assert self._region is not None
        await self._region.__aexit__(kind, *rest)


class Region(Generic[M]):
    """A region serving ``M`` messages. See the module documentation.

    Start it with ``async with Region.start(…) as region:`` (the block's end
    drains and leaves, or shuts down when the block raised) or ``region =
    await Region.start(…)`` (then end it yourself); every method is called
    on the event loop it was started on."""

    def __init__(
        self, settled: _Settled, app: Application[M], transport: Transport[M]
    ) -> None:
        """Use :meth:`start`."""
        config = settled.config
        self._config = config
        self._incarnation = settled.incarnation
        self._app = app
        self._transport = transport
        self._loop = asyncio.get_running_loop()
        self._started = time.monotonic()
        self._core: RegionCore[M | Request[M]] = RegionCore(
            CoreConfig(
                registration=Register(
                    address=config.address,
                    incarnation=settled.incarnation,
                    roles=tuple(config.roles),
                    app_version=config.app_version,
                    labels=dict(config.labels),
                    proxy_only=config.proxy_only,
                    sequence=0,
                ),
                shard_buffer_limit=config.shard_buffer_limit,
                total_buffer_limit=config.total_buffer_limit,
                stop_deadline_ms=config.stop_deadline_ms,
                home_retry_ms=config.home_retry_ms,
                response_timeout_ms=config.response_timeout_ms,
                forward_attempts=config.forward_attempts,
                forward_deadline_ms=config.forward_deadline_ms,
            )
        )
        self._params = settled.params
        self._leader = Leader()
        self._backoff = _Backoff(config.reconnect_min_ms, config.reconnect_max_ms)
        self._meter = LoadMeter()
        self._workers: dict[str, _Worker] = {}
        self._waiters: dict[str, list[asyncio.Future[str]]] = {}
        self._done: list[asyncio.Future[None]] = []
        self._registered_waiters: list[asyncio.Future[None]] = []
        self._subscribers: list[Updates] = []
        self._inbox = _RegionInbox(self)
        self._session: Session | None = None
        self._closing_session: Session | None = None
        self._generation = 0
        self._link: Literal["waiting", "connecting", "up"] = "waiting"
        self._reconnect_at = 0
        self._ending: _Ending | None = None
        self._ended: RegionError | None = None
        self._refused: str | None = None
        transport.attach(self._inbox)
        self._ticker = self._loop.create_task(self._ticking(), name=f"shardalloc region {config.address}")

    @classmethod
    def start(
        cls,
        config: RegionConfig,
        app: Application[M],
        transport: Transport[M] | None = None,
    ) -> "_Starting[M]":
        """Starts a region on the running event loop: it connects, registers
        and serves ``app``'s shards, forwarding messages for shards homed
        elsewhere over ``transport`` (a fresh :class:`InMemoryTransport` by
        default, which reaches no other region). Await it for the region,
        or use it in ``async with``. The region is returned at once, before
        it registers (:meth:`wait_registered`). Raises a
        :class:`~shardalloc_client.region.errors.ConfigError` naming a bad
        setting."""

        async def started() -> "Region[M]":
            settled = _settle(config)
            return cls(settled, app, transport if transport is not None else InMemoryTransport())

        return _Starting(started())

    async def __aenter__(self) -> "Region[M]":
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """The end of an ``async with`` block: drains and leaves (within
        ``drain_and_leave_timeout_ms``), or shuts down at once when the
        block raised. Does nothing once the region has ended."""
        if self._ended is not None:
            return
        if kind is None:
            await self.drain_and_leave()
        else:
            await self.shutdown()

    @property
    def address(self) -> str:
        """This region's address."""
        return self._config.address

    @property
    def incarnation(self) -> int:
        """This region's incarnation."""
        return self._incarnation

    def _now(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    async def home_of(self, shard: str) -> str:
        """Where ``shard`` lives: at once when cached, else once the node
        answers. Raises a :class:`RegionError` (``InvalidShard``,
        ``ShardRefused``, or how the region ended)."""
        if self._ended is not None:
            raise self._ended
        lookup = self._core.request_home(shard, self._now())
        if isinstance(lookup, Known):
            return lookup.home
        future: asyncio.Future[str] = self._loop.create_future()
        self._waiters.setdefault(shard, []).append(future)
        self._execute(lookup.actions)
        return await future

    def send(self, shard: str, message: M) -> None:
        """Sends ``message`` to ``shard``, wherever it lives. Raises a
        :class:`SendError` when the region cannot take it."""
        self._route(shard, message)

    def _route(self, shard: str, parcel: "M | Request[M]") -> None:
        """Hands a message or request to the core now, unless the region
        has ended or the shard's worker here has a full backlog
        (:class:`SendError`)."""
        if self._ended is not None:
            raise SendError.stopped()
        limit = self._config.shard_buffer_limit
        worker = self._workers.get(shard)
        if self._core.delivers_locally(shard) and worker is not None and worker.backlog >= limit:
            raise SendError.buffer_full(shard, limit)
        self._execute(self._core.send(shard, parcel, self._now()))

    def ask(self, shard: str, message: M, timeout: float = DEFAULT_ASK_TIMEOUT) -> Coroutine[Any, Any, Any]:
        """Asks ``shard``, wherever it lives; awaiting what this returns
        gives its answer (the application's ``answer`` at its home), waiting
        at most ``timeout`` seconds. The request is routed at the call,
        before the await, like :meth:`send` (in order with this caller's
        sends and asks to the same shard, buffered across hand-offs, resent
        after a lost home) and answered at most once. The await raises an
        :class:`~shardalloc_client.region.errors.AskError` naming why there
        is no answer: ``Send`` (the region did not take it), ``Timeout``,
        ``NotDelivered`` (it never reached the home), ``Failed`` (the home
        failed it)."""
        timeout_ms = max(0, int(timeout * 1000))
        future: asyncio.Future[Any] = self._loop.create_future()

        def answer(reply: Any, error: AskError | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(reply)

        replier = Replier(shard, timeout_ms, answer)
        refused: AskError | None = None
        try:
            self._route(shard, Request(message, replier))
        except SendError as error:
            refused = AskError.send(shard, error)
        return self._answer_of(shard, future, replier, refused, timeout, timeout_ms)

    async def _answer_of(
        self,
        shard: str,
        future: "asyncio.Future[Any]",
        replier: Replier,
        refused: AskError | None,
        timeout: float,
        timeout_ms: int,
    ) -> Any:
        """Waits for a routed request's answer (see :meth:`ask`)."""
        if refused is not None:
            raise refused
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            # Answered now, so a late answer is dropped (the future is done).
            future.cancel()
            replier.fail(AskError.timeout(shard, timeout_ms))
            raise AskError.timeout(shard, timeout_ms) from None

    def record_load(self, shard: str, units: float) -> None:
        """``units`` of work done by ``shard`` (requests weighted by their
        cost, bytes…): reported per second."""
        self._meter.record(shard, units, self._now())

    def set_load(self, shard: str, rate: float) -> None:
        """The shard's load is ``rate`` per second until set again (0 clears it)."""
        self._meter.set(shard, rate, self._now())

    async def wait_registered(self) -> None:
        """Returns once registered; raises a :class:`RegionError` when the
        node refuses the region (``Refused``) or it stops first."""
        if self._ended is not None:
            raise self._ended
        if self._core.is_registered():
            return
        if self._refused is not None:
            raise RegionError.refused(self._refused)
        future: asyncio.Future[None] = self._loop.create_future()
        self._registered_waiters.append(future)
        await future

    def is_registered(self) -> bool:
        """True while registered with the node (never once the region has stopped)."""
        return self._ended is None and self._core.is_registered()

    def is_fenced(self) -> bool:
        """True while fenced (the lease ran out unrenewed)."""
        return self._core.is_fenced()

    def running_shards(self) -> list[str]:
        """The shards running here, sorted."""
        return self._core.running()

    def epoch_of(self, shard: str) -> int | None:
        """The epoch ``shard`` runs here at, while it runs."""
        return self._core.epoch_of(shard)

    def buffered(self) -> int:
        """Messages sent that went nowhere yet (buffered for a home)."""
        return self._core.buffered()

    def inbox(self) -> _RegionInbox[M]:
        """Where a transport with its own network hands forwarded messages in."""
        return self._inbox

    def updates(self) -> Updates:
        """The updates published from now on, as an async iterator that
        ends when the region stops (or it is closed)."""
        updates = Updates(self._unsubscribe)
        if self._ended is not None:
            updates._put(None)
        else:
            self._subscribers.append(updates)
        return updates

    def _unsubscribe(self, updates: Updates) -> None:
        if updates in self._subscribers:
            self._subscribers.remove(updates)

    def request_drain(self, draining: bool) -> None:
        """Asks the node to drain this region (``True``) or stop draining it."""
        self._execute(self._core.request_drain(draining, self._now()))

    async def leave(self) -> None:
        """Leaves: the node hands every shard off, then the region stops.
        Raises a ``LeaveTimedOut`` :class:`RegionError` when the node does
        not confirm within ``leave_timeout_ms`` (the region stops anyway)."""

        def begin() -> None:
            if self._ending is None:
                self._ending = _Leaving(deadline=self._now() + self._config.leave_timeout_ms)
                self._execute(self._core.leave(self._now()))

        await self._control(begin)

    async def drain_and_leave(self) -> None:
        """Drains, then leaves, within ``drain_and_leave_timeout_ms``: for a
        Kubernetes preStop hook. Raises a ``DrainAndLeaveTimedOut``
        :class:`RegionError` when the bound passes first."""

        def begin() -> None:
            if self._ending is None:
                self._ending = "drain-and-leave"
                self._execute(
                    self._core.drain_and_leave(self._config.drain_and_leave_timeout_ms, self._now())
                )

        await self._control(begin)

    async def shutdown(self) -> None:
        """Stops every shard and closes the session, without handing shards
        off. Returns once stopped; does nothing once the region has ended."""
        if self._ended is not None:
            return
        try:
            await self._control(self._shut_down)
        except RegionError:
            pass

    async def _control(self, begin: Callable[[], None]) -> None:
        if self._ended is not None:
            raise self._ended
        future: asyncio.Future[None] = self._loop.create_future()
        self._done.append(future)
        begin()
        self._check_finished()
        try:
            await future
        finally:
            await self._wind_down()

    async def _wind_down(self) -> None:
        """Waits (briefly) for the session to close and the ticker to stop."""
        session = self._closing_session
        if session is not None:
            try:
                async with asyncio.timeout(3):
                    await session.wait_closed()
            except TimeoutError:
                pass
        if self._ended is not None:
            await asyncio.gather(self._ticker, return_exceptions=True)

    def _shut_down(self) -> None:
        if self._ending != "shutdown":
            self._ending = "shutdown"
            self._execute(self._core.shutdown(self._now()))

    # The actions.

    def _execute(self, actions: "list[Action[M | Request[M]]]") -> None:
        """Performs the core's actions in order; forwards the transport
        could not carry go back to the core."""
        queue: "deque[Action[M | Request[M]]]" = deque(actions)
        failed: "dict[str, tuple[str, list[M | Request[M]], str]]" = {}
        while True:
            while queue:
                action = queue.popleft()
                if isinstance(action, Send):
                    if self._session is not None:
                        self._session.send(action.message)
                elif isinstance(action, Start):
                    self._start_worker(action.shard, action.epoch)
                elif isinstance(action, Deliver):
                    self._deliver(action.shard, action.message)
                elif isinstance(action, Stop):
                    self._stop(action.shard)
                elif isinstance(action, AbandonStop):
                    worker = self._workers.pop(action.shard, None)
                    if worker is not None:
                        self._abandon(worker)
                elif isinstance(action, Forward):
                    pending = failed.get(action.shard)
                    if pending is not None:
                        pending[1].append(action.message)
                    else:
                        refused = self._forward(action.to, action.shard, action.message)
                        if refused is not None:
                            failed[action.shard] = (action.to, [action.message], refused)
                elif isinstance(action, Undelivered):
                    if isinstance(action.message, Request):
                        action.message.replier.fail(AskError.not_delivered(action.error))
                    else:
                        self._give_up(action.shard, action.message, action.error)
                elif isinstance(action, Publish):
                    self._publish(action.update)
                elif isinstance(action, Reconnect):
                    if self._session is not None:
                        self._session.close(action.reason)
            if not failed:
                return
            for shard, (to, messages, reason) in failed.items():
                queue.extend(self._core.forward_failed(shard, to, messages, reason, self._now()))
            failed.clear()

    def _forward(self, to: str, shard: str, message: "M | Request[M]") -> str | None:
        """Hands ``message`` (or a request) to the transport; why it could
        not carry it, or ``None`` when it took it."""
        try:
            if not isinstance(message, Request):
                self._transport.send(to, shard, message)
                return None
            ask = getattr(self._transport, "ask", None)
            if ask is None:
                message.replier.fail_with("the region's transport carries no requests")
            else:
                ask(to, shard, message.message, message.replier)
            return None
        except TransportError as error:
            return str(error)
        except Exception as error:
            _log.exception(
                "region %s: the transport raised forwarding shard %s to %s", self.address, shard, to
            )
            return f"the transport raised {type(error).__name__}: {error}"

    def _give_up(self, shard: str, message: M, error: DeliveryError) -> None:
        """Hands a given-up message to the application's ``undelivered``
        (or the log when it has none)."""
        undelivered = getattr(self._app, "undelivered", None)
        if undelivered is None:
            _log.warning("region %s: %s", self.address, error)
            return
        try:
            undelivered(shard, message, error)
        except Exception:
            _log.exception("region %s: the application raised in undelivered for shard %s", self.address, shard)

    def _on_not_delivered(self, to: str, shard: str, messages: "list[M | Request[M]]", reason: str) -> None:
        """The transport found later that these forwards never arrived."""
        if self._ended is not None or not messages:
            return
        self._execute(self._core.forward_failed(shard, to, messages, reason, self._now()))

    async def _work(self, worker: _Worker, shard: str) -> None:
        """The worker's task: its calls, one after another, until the stop."""
        while True:
            call, last = await worker.calls.get()
            if worker.abandoned:
                return
            try:
                await call()
            except Exception:
                _log.exception(
                    "region %s: the application raised on shard %s", self.address, shard
                )
            if last:
                return

    def _start_worker(self, shard: str, epoch: int) -> None:
        old = self._workers.get(shard)
        if old is not None:
            self._abandon(old)
        worker = _Worker()
        self._workers[shard] = worker
        worker.task = self._loop.create_task(self._work(worker, shard), name=f"shard {shard}")

        async def start() -> None:
            await self._app.start_shard(shard, epoch)

        worker.calls.put_nowait((start, False))

    def _deliver(self, shard: str, message: "M | Request[M]") -> None:
        worker = self._workers.get(shard)
        if worker is None:
            if isinstance(message, Request):
                message.replier.fail_with("the shard stopped before the request reached it")
            return
        worker.backlog += 1

        async def deliver() -> None:
            try:
                if isinstance(message, Request):
                    await self._answer(shard, message)
                else:
                    await self._app.deliver(shard, message)
            finally:
                worker.backlog -= 1

        worker.calls.put_nowait((deliver, False))

    async def _answer(self, shard: str, request: "Request[M]") -> None:
        """Answers a request with the application's ``answer``, or fails it by name."""
        replier = request.replier
        if replier.answered:
            return
        answer = getattr(self._app, "answer", None)
        if answer is None:
            replier.fail_with("this application answers no requests")
            return
        try:
            replier.reply(await answer(shard, request.message))
        except Exception as error:
            replier.fail_with(str(error) or type(error).__name__)

    def _stop(self, shard: str) -> None:
        worker = self._workers.get(shard)
        if worker is None:
            return

        async def stop() -> None:
            try:
                await self._app.stop_shard(shard)
            finally:
                # Reported even when the application raised: the shard is not
                # running. Not when the stop was abandoned (cancelled).
                if self._workers.get(shard) is worker and self._ended is None:
                    del self._workers[shard]
                    self._execute(self._core.stop_finished(shard, self._now()))
                    self._check_finished()

        worker.calls.put_nowait((stop, True))

    def _abandon(self, worker: _Worker) -> None:
        worker.abandoned = True
        if worker.task is not None and worker.task is not asyncio.current_task():
            worker.task.cancel()

    def _publish(self, update: Update) -> None:
        if isinstance(update, up.HomeChanged):
            for future in self._waiters.pop(update.shard, []):
                if not future.done():
                    future.set_result(update.home)
        elif isinstance(update, up.ShardRefused):
            error = RegionError.shard_refused(update.shard, update.reason)
            for future in self._waiters.pop(update.shard, []):
                if not future.done():
                    future.set_exception(error)
        elif isinstance(update, up.Registered):
            self._refused = None
            waiters, self._registered_waiters = self._registered_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        elif isinstance(update, up.Refused):
            self._refused = update.reason
            refused = RegionError.refused(update.reason)
            waiters, self._registered_waiters = self._registered_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(refused)
        for updates in list(self._subscribers):
            updates._put(update)

    # Events.

    def _on_inbound(self, shard: str, message: "M | Request[M]") -> None:
        if self._ended is not None:
            raise TransportError("closed", f"region {self.address} has stopped")
        try:
            self._execute(self._core.inbound(shard, message, self._now()))
        except SendError as error:
            if error.kind in ("TotalBufferFull", "BufferFull"):
                raise TransportError(
                    "inbox-full", f"the inbox of region {self.address} is full: {error}"
                ) from error
            raise

    def _on_session(self, generation: int, event: SessionEvent) -> None:
        if generation != self._generation or self._ended is not None:
            return
        if isinstance(event, SessionConnected):
            self._link = "up"
            self._execute(self._core.connected(self._now()))
        elif isinstance(event, SessionMessage):
            self._execute(self._core.on_message(event.message, self._now()))
            if self._core.is_registered():
                self._backoff.registered(self._now())
        elif isinstance(event, SessionRefused):
            self._publish(up.Refused(reason=event.reason))
        elif isinstance(event, SessionClosed):
            connected = self._link == "up"
            self._session = None
            self._link = "waiting"
            self._reconnect_at = self._now() + self._backoff.closed(self._now())
            self._execute(self._core.disconnected(self._now(), event.reason))
            if not connected:
                # An attempt that never connected: the core had no session to
                # lose, but the application hears why (a wrong URL, an
                # untrusted certificate).
                self._publish(up.Disconnected(reason=event.reason))
        self._check_finished()

    def _metrics(self) -> Mapping[str, float]:
        metrics = getattr(self._app, "metrics", None)
        if metrics is None:
            return {}
        try:
            return dict(metrics())
        except Exception:
            _log.exception("region %s: the application's metrics() raised", self.address)
            return {}

    async def _ticking(self) -> None:
        while self._ended is None:
            try:
                self._on_tick()
            except Exception:
                _log.exception("region %s: a tick failed", self.address)
            await asyncio.sleep(TICK_MS / 1000)

    def _on_tick(self) -> None:
        if self._ended is not None:
            return
        now = self._now()
        top = self._config.load_report_shards
        self._execute(
            self._core.tick_with_load(
                now, self._metrics, lambda runs: self._meter.report(now, runs, top)
            )
        )
        if self._link == "waiting" and now >= self._reconnect_at and self._ending != "shutdown":
            self._generation += 1
            generation = self._generation
            self._link = "connecting"
            self._session = Session.open(
                self._params,
                self._leader,
                generation,
                lambda event: self._on_session(generation, event),
            )
        ending = self._ending
        if (
            isinstance(ending, _Leaving)
            and not ending.timed_out
            and now >= ending.deadline
            and not self._core.has_left()
        ):
            ending.timed_out = True
            self._execute(self._core.shutdown(now))
        self._check_finished()

    def _check_finished(self) -> None:
        ending = self._ending
        if self._ended is not None or ending is None or not self._core.is_idle():
            return
        outcome: RegionError | None
        if ending == "shutdown":
            outcome = None
        elif isinstance(ending, _Leaving):
            if not ending.timed_out and not self._core.has_left():
                return
            outcome = (
                RegionError.leave_timed_out(self._config.leave_timeout_ms)
                if ending.timed_out
                else None
            )
        else:
            departure = self._core.departure()
            if departure is None:
                return
            outcome = departure.error
        self._finish(
            RegionError.shut_down() if ending == "shutdown" else RegionError.left(), outcome
        )

    def _finish(self, ended: RegionError, outcome: RegionError | None) -> None:
        self._ended = ended
        homes = [future for futures in self._waiters.values() for future in futures]
        registered, self._registered_waiters = self._registered_waiters, []
        self._waiters.clear()
        for home in homes:
            if not home.done():
                home.set_exception(ended)
        for waiter in registered:
            if not waiter.done():
                waiter.set_exception(ended)
        workers = list(self._workers.values())
        self._workers.clear()
        for worker in workers:
            self._abandon(worker)
        self._transport.detach(self._inbox)
        session, self._session = self._session, None
        if session is not None:
            # Queued frames (a `Leave`) go first, then the close frame.
            self._closing_session = session
            session.close("the region stopped")
        subscribers, self._subscribers = self._subscribers, []
        for updates in subscribers:
            updates._put(None)
        done, self._done = self._done, []
        for future in done:
            if future.done():
                continue
            if outcome is not None:
                future.set_exception(outcome)
            else:
                future.set_result(None)
