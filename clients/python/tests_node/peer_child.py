"""A Python region on the built-in transport, driven over standard input and
output with one JSON object a line, as ``test_mixed_node.py`` drives the
regions of every language (the Rust ``peer_region`` example and the
TypeScript script there speak the same lines)::

    python peer_child.py NODE_URL TOKEN
    > {"address": "127.0.0.1:40123"}              registered, reachable there
    < {"send": "m3", "n": 7}                       send {"from": "python", "n": 7} to shard m3
    < {"ask": "m3", "n": 8, "timeoutMs": 5000}     ask shard m3
    > {"deliver": "m3", "n": 7}                    a message (or request) delivered here
    > {"answer": "m3", "n": 8, "by": "rust"}       the answer to an ask
    > {"askFailed": "m3", "n": 8, "error": "…"}    an ask that got no answer
    > {"givenUp": "m3", "n": 7, "error": "…"}      a message given up

It shuts down when its input ends."""

import asyncio
import json
import sys
from collections.abc import Coroutine
from typing import Any

from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region.errors import AskError, DeliveryError
from shardalloc_client.region.peer_transport import PeerTransport


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Printer:
    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: dict[str, Any]) -> None:
        say({"deliver": shard, "n": message["n"]})

    async def answer(self, shard: str, message: dict[str, Any]) -> dict[str, Any]:
        say({"deliver": shard, "n": message["n"]})
        return {"by": "python", "n": message["n"]}

    def undelivered(self, shard: str, message: dict[str, Any], error: DeliveryError) -> None:
        say({"givenUp": shard, "n": message["n"], "error": str(error)})


async def ask(asked: Coroutine[Any, Any, Any], shard: str, n: int) -> None:
    try:
        answer = await asked
        say({"answer": shard, "n": n, "by": answer["by"]})
    except AskError as error:
        say({"askFailed": shard, "n": n, "error": str(error)})


async def main(node: str, token: str) -> None:
    transport: PeerTransport[dict[str, Any]] = await PeerTransport.bind(
        entity_type="cart", incarnation=1, token=token
    )
    config = RegionConfig(node=node, entity_type="cart", address=transport.address, home_retry_ms=300)
    region = await Region.start(config, Printer(), transport)
    await region.wait_registered()
    say({"address": transport.address})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    asks: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        command = json.loads(line)
        if "send" in command:
            region.send(command["send"], {"from": "python", "n": command["n"]})
        if "ask" in command:
            # Routed now, in input order; answered whenever it is.
            timeout = command.get("timeoutMs", 5000) / 1000
            asked = region.ask(command["ask"], {"from": "python", "n": command["n"]}, timeout=timeout)
            task = loop.create_task(ask(asked, command["ask"], command["n"]))
            asks.add(task)
            task.add_done_callback(asks.discard)
    await region.shutdown()
    transport.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
