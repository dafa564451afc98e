"""A Python client of shardalloc, the shard placement service.

So far it holds:

- :mod:`shardalloc_client.wire`, the region protocol's wire codec: the
  messages a region and the node exchange on ``/v1/regions/connect``
  (docs/protocol.md) and their postcard encoding;
- :mod:`shardalloc_client.region_core`, the region's deterministic, sans-I/O
  state machine (registration, leases and fencing, shard homes, buffers,
  hand-offs, drain and leave), with the actions and updates it hands its
  driver in :mod:`shardalloc_client.region_actions` and its errors in
  :mod:`shardalloc_client.region_errors`;
- :mod:`shardalloc_client.region`, the region's asyncio driver around that
  core (:class:`~shardalloc_client.region.Region`), with its WebSocket
  session in :mod:`shardalloc_client.region_session`, the transport between
  regions in :mod:`shardalloc_client.region_transport` (the built-in one
  between processes in :mod:`shardalloc_client.region_peer`), request and
  reply in :mod:`shardalloc_client.region_ask` and the load meter in
  :mod:`shardalloc_client.region_load`;
- :mod:`shardalloc_client.admin`, the admin REST client
  (:class:`~shardalloc_client.admin.AdminClient`) and the decision event
  stream, with the bodies in :mod:`shardalloc_client.admin_types` and the
  stream's framing in :mod:`shardalloc_client.sse`;
- :mod:`shardalloc_client.placements_view`, a live in-memory map of one
  type's placements;
- :mod:`shardalloc_client.external`, the external allocation feature
  request's API: a controller and an allocation strategy reading a view.

The package logs warnings (a fence, a stale run stopped, a placement passed over) through
:mod:`logging` under the ``shardalloc_client`` logger, which has a
``NullHandler`` so nothing is printed unless the application configures
logging.
"""

import logging

logging.getLogger(__name__).addHandler(logging.NullHandler())
