"""A Python client of shardalloc, the shard placement service.

So far it holds the region protocol's wire codec, :mod:`shardalloc_client.wire`:
the messages a region and the node exchange on ``/v1/regions/connect``
(docs/protocol.md) and their postcard encoding.
"""
