"""A region of shardalloc: ``async with Region.start(config, app) as region``
connects to the node and serves the application's shards.

The public API is here; the modules below hold the parts:

- :mod:`.driver`: the asyncio :class:`Region` and its :class:`RegionConfig`;
- :mod:`.core`: the deterministic, sans-I/O state machine the driver feeds
  (:class:`RegionCore`), run against ``contracts/region-core/``;
- :mod:`.actions`: what the core hands its driver, and the updates a region
  publishes (:class:`Registered`, :class:`Fenced`, …);
- :mod:`.errors`: the errors a region raises, one class per kind;
- :mod:`.transport` and :mod:`.peer_transport`: how messages reach other
  regions (in one process, or the built-in :class:`PeerTransport`);
- :mod:`.session` (the WebSocket session to the node), :mod:`.ask` (request
  and reply) and :mod:`.load` (the load meter).
"""

from .actions import (
    Disconnected,
    Fenced,
    HomeChanged,
    LeaseRegained,
    Left,
    PlacementChanged,
    Refused,
    RegionRemoved,
    Registered,
    ShardRefused,
    ShardStarted,
    ShardStopped,
    Update,
)
from .ask import Replier, Request
from .core import CoreConfig, RegionCore
from .driver import DEFAULT_ASK_TIMEOUT, Application, Region, RegionConfig, Updates
from .errors import (
    MAX_SHARD_ID_BYTES,
    AskError,
    DeliveryError,
    RegionError,
    SendError,
    check_shard,
)
from .load import LoadMeter
from .peer_transport import PeerTransport
from .transport import InMemoryTransport, Inbox, Transport, TransportError

__all__ = [
    "Application",
    "AskError",
    "CoreConfig",
    "DEFAULT_ASK_TIMEOUT",
    "DeliveryError",
    "Disconnected",
    "Fenced",
    "HomeChanged",
    "InMemoryTransport",
    "Inbox",
    "LeaseRegained",
    "Left",
    "LoadMeter",
    "MAX_SHARD_ID_BYTES",
    "PeerTransport",
    "PlacementChanged",
    "Refused",
    "Region",
    "RegionConfig",
    "RegionCore",
    "RegionError",
    "RegionRemoved",
    "Registered",
    "Replier",
    "Request",
    "SendError",
    "ShardRefused",
    "ShardStarted",
    "ShardStopped",
    "Transport",
    "TransportError",
    "Update",
    "Updates",
    "check_shard",
]
