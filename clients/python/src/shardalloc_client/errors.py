"""The base of every error this package raises: catch
:class:`ShardallocError` to catch them all.

Each part of the client has its own family below it, with one subclass per
kind of failure, so an application catches exactly what it can handle:

- :class:`~shardalloc_client.region.RegionError` (a region's lifecycle and
  home look-ups), :class:`~shardalloc_client.region.SendError` (a message
  the region did not take), :class:`~shardalloc_client.region.DeliveryError`
  (a message it took but could not deliver) and
  :class:`~shardalloc_client.region.AskError` (a request without an answer);
- :class:`~shardalloc_client.region.TransportError`, what a transport
  between regions raises;
- :class:`~shardalloc_client.admin.AdminError`, a failed admin call;
- :class:`~shardalloc_client.wire.FrameError` and
  :class:`~shardalloc_client.sse.SseError`, bytes that break their framing
  (also :class:`ValueError`).
"""

__all__ = ["ShardallocError"]


class ShardallocError(Exception):
    """Something this client could not do; ``str(error)`` says what, in
    words."""
