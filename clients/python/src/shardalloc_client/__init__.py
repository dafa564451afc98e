"""A Python client of shardalloc, the shard placement service.

The public API is exported here::

    from shardalloc_client import Region, RegionConfig, AdminClient, ShardallocError

- a region (:class:`Region`, :class:`RegionConfig`, the :class:`Application`
  protocol, the updates it publishes, :class:`PeerTransport` between
  processes) from :mod:`shardalloc_client.region`, whose modules hold its
  parts (the sans-I/O core, the session, the transports);
- the admin REST client (:class:`AdminClient`), its bodies as dataclasses
  (:mod:`shardalloc_client.admin_types`) and the decision event stream;
- :class:`PlacementsView`, a live in-memory map of one type's placements;
- the external allocation feature request's API
  (:class:`ExternalAllocationController`, :func:`external_allocation_strategy`,
  :func:`least_shard`);
- every error, under :class:`ShardallocError`: one class per kind of
  failure (:class:`ShardRefusedError`, :class:`NotFoundError`, …).

The wire codecs (:mod:`shardalloc_client.wire` for the region protocol,
:mod:`shardalloc_client.peer` between regions) are modules of their own.

The package logs warnings (a fence, a stale run stopped, a placement passed over) through
:mod:`logging` under the ``shardalloc_client`` logger, which has a
``NullHandler`` so nothing is printed unless the application configures
logging.
"""

import logging

from .admin import (
    AdminClient,
    AdminError,
    BadAnswerError,
    ConflictError,
    EventStream,
    InvalidClientConfigError,
    InvalidRequestError,
    NodeRefusedError,
    NodeUnreachableError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)
from .admin_types import (
    ActivateRequest,
    Activation,
    DecisionEvent,
    DrainState,
    Placement,
    Placements,
    ShardState,
    AttributesWritten,
    StrategyState,
    StreamedEvent,
)
from .errors import ShardallocError
from .external import (
    ExternalAllocationController,
    LeastShard,
    PlacementMap,
    external_allocation_strategy,
    least_shard,
)
from .placements_view import PlacementsView
from .region import (
    Application,
    AskError,
    DeliveryError,
    Disconnected,
    Fenced,
    InMemoryTransport,
    Left,
    PeerTransport,
    Region,
    RegionConfig,
    RegionError,
    RegionRemoved,
    Registered,
    SendError,
    ShardStarted,
    ShardStopped,
    Transport,
    TransportError,
    Update,
    Updates,
)
from .region.errors import (
    AskFailedError,
    AskNotDeliveredError,
    AskNotTakenError,
    AskTimeoutError,
    AttemptsExhaustedError,
    BufferFullError,
    ConfigError,
    DeadlinePassedError,
    DeliveryRefusedError,
    DrainAndLeaveTimedOutError,
    InvalidShardError,
    InvalidShardSendError,
    LeaveTimedOutError,
    RegionLeftError,
    RegionRefusedError,
    RegionShutDownError,
    RegionStoppedError,
    RegionStoppedSendError,
    ShardRefusedError,
    TotalBufferFullError,
)
from .sse import SseError
from .wire import FrameError

__all__ = [
    "ActivateRequest",
    "Activation",
    "AdminClient",
    "AdminError",
    "Application",
    "AskError",
    "AskFailedError",
    "AskNotDeliveredError",
    "AskNotTakenError",
    "AskTimeoutError",
    "AttemptsExhaustedError",
    "BadAnswerError",
    "BufferFullError",
    "ConfigError",
    "ConflictError",
    "DeadlinePassedError",
    "DecisionEvent",
    "DeliveryError",
    "DeliveryRefusedError",
    "Disconnected",
    "DrainAndLeaveTimedOutError",
    "DrainState",
    "EventStream",
    "ExternalAllocationController",
    "Fenced",
    "FrameError",
    "InMemoryTransport",
    "InvalidClientConfigError",
    "InvalidRequestError",
    "InvalidShardError",
    "InvalidShardSendError",
    "LeastShard",
    "LeaveTimedOutError",
    "Left",
    "NodeRefusedError",
    "NodeUnreachableError",
    "NotFoundError",
    "PeerTransport",
    "Placement",
    "PlacementMap",
    "Placements",
    "PlacementsView",
    "Region",
    "RegionConfig",
    "RegionError",
    "RegionLeftError",
    "RegionRefusedError",
    "RegionRemoved",
    "RegionShutDownError",
    "RegionStoppedError",
    "RegionStoppedSendError",
    "Registered",
    "SendError",
    "ShardRefusedError",
    "ShardStarted",
    "ShardState",
    "AttributesWritten",
    "ShardStopped",
    "ShardallocError",
    "SseError",
    "StrategyState",
    "StreamedEvent",
    "TotalBufferFullError",
    "Transport",
    "TransportError",
    "UnauthorizedError",
    "UnavailableError",
    "Update",
    "Updates",
    "external_allocation_strategy",
    "least_shard",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
