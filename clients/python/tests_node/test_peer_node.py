"""The built-in transport between regions (``PeerTransport``) against a real
node: two Python regions on 127.0.0.1 carry each other's messages over the
inter-region wire; one goes without leaving and every message still reaches
the shard's home once, in order on each home; asks are answered once by the
home or fail by name; a wrong token is refused and the message given up by
name."""

import asyncio
import unittest
from typing import Any

from node import FAST, Node, wait_for

from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region.errors import AskError, DeliveryError
from shardalloc_client.region.peer_transport import PeerTransport


class Journal:
    """Every delivery and every message given up."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str, dict[str, Any]]] = []
        self.given_up: list[tuple[str, dict[str, Any], DeliveryError]] = []

    def deliveries(self, shard: str) -> list[tuple[str, dict[str, Any]]]:
        return [(region, message) for region, s, message in self.delivered if s == shard]


class App:
    def __init__(self, journal: Journal, region: str) -> None:
        self._journal = journal
        self._region = region

    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: dict[str, Any]) -> None:
        self._journal.delivered.append((self._region, shard, message))

    async def answer(self, shard: str, message: dict[str, Any]) -> str:
        self._journal.delivered.append((self._region, shard, message))
        if message["from"] == "refused":
            raise ValueError(f"{self._region} does not answer refused")
        return self._region

    def undelivered(self, shard: str, message: dict[str, Any], error: DeliveryError) -> None:
        self._journal.given_up.append((shard, message, error))


class PeerTransportTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.node = await Node.start(["--type", "cart", *FAST])

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    async def region(
        self, journal: Journal, token: str
    ) -> tuple[Region[dict[str, Any]], PeerTransport[dict[str, Any]]]:
        transport: PeerTransport[dict[str, Any]] = await PeerTransport.bind(
            entity_type="cart", incarnation=1, token=token
        )
        config = RegionConfig(
            node=self.node.base,
            entity_type="cart",
            address=transport.address,
            reconnect_min_ms=50,
            reconnect_max_ms=500,
            home_retry_ms=300,
            # Rounds of failed forwards outlast the node's removal (4.5 s here),
            # however busy the machine: 100 at 300 ms, the default 30 s deadline.
            forward_attempts=100,
        )
        region = await Region.start(config, App(journal, transport.address), transport)
        await region.wait_registered()
        return region, transport

    async def shard_homed_on(self, region: Region[dict[str, Any]], address: str, prefix: str) -> str:
        async def probe() -> str | None:
            for i in range(32):
                if await region.home_of(f"{prefix}{i}") == address:
                    return f"{prefix}{i}"
            return None

        return await wait_for("a shard homed there", probe)

    async def test_every_message_reaches_the_home_across_a_home_gone_without_leaving(self) -> None:
        journal = Journal()
        a, ta = await self.region(journal, "secret")
        b, tb = await self.region(journal, "secret")
        shard = await self.shard_homed_on(b, tb.address, "p")
        for n in range(100):
            a.send(shard, {"from": ta.address, "n": n})
        await wait_for("100 delivered on b", lambda: True if len(journal.deliveries(shard)) == 100 else None)
        # b goes without leaving: its listener and connections close.
        await b.shutdown()
        tb.close()
        for n in range(100, 200):
            a.send(shard, {"from": ta.address, "n": n})
            await asyncio.sleep(0.01)

        def all_delivered() -> bool | None:
            self.assertEqual([(m["n"], str(e)) for _, m, e in journal.given_up], [])
            numbers = {m["n"] for _, m in journal.deliveries(shard)}
            return True if len(numbers) == 200 else None

        await wait_for("every message delivered", all_delivered)
        deliveries = journal.deliveries(shard)
        self.assertEqual(len(deliveries), 200, "none twice")
        for home in (ta.address, tb.address):
            numbers = [m["n"] for r, m in deliveries if r == home]
            self.assertEqual(numbers, sorted(numbers), f"out of order on {home}")
        self.assertTrue(any(r == ta.address for r, _ in deliveries), "the shard moved to a")
        await a.shutdown()
        ta.close()

    async def test_asks_are_answered_once_by_the_home_or_fail_by_name(self) -> None:
        journal = Journal()
        a, ta = await self.region(journal, "secret")
        b, tb = await self.region(journal, "secret")
        remote = await self.shard_homed_on(b, tb.address, "q")
        local = await self.shard_homed_on(a, ta.address, "q")
        # Answered by the home, over the wire or in process, in order with the sends.
        for n in range(40):
            if n % 2 == 0:
                a.send(remote, {"from": "a", "n": n})
            else:
                self.assertEqual(await a.ask(remote, {"from": "a", "n": n}), tb.address)
        self.assertEqual(await a.ask(local, {"from": "a", "n": 0}), ta.address)
        self.assertEqual([m["n"] for _, m in journal.deliveries(remote)], list(range(40)))
        # An ask is routed when it is called, not when it is awaited.
        first = a.ask(remote, {"from": "a", "n": 40})
        second = a.ask(remote, {"from": "a", "n": 41})
        self.assertEqual(await second, tb.address)
        self.assertEqual(await first, tb.address)
        self.assertEqual([m["n"] for _, m in journal.deliveries(remote)], list(range(42)), "in call order")
        # Many at once, each answered once.
        answers = await asyncio.gather(*(a.ask(remote, {"from": "a", "n": 100 + i}) for i in range(200)))
        self.assertEqual(set(answers), {tb.address})
        self.assertEqual(len(journal.deliveries(remote)), 242)
        # The home failing a request fails the ask with its words.
        with self.assertRaises(AskError) as failed:
            await a.ask(remote, {"from": "refused", "n": 0})
        self.assertEqual(failed.exception, AskError.failed(remote, f"{tb.address} does not answer refused"))
        # The home gone without leaving: a hurried ask times out by name, a
        # patient one is answered by the new home.
        await b.shutdown()
        tb.close()
        with self.assertRaises(AskError) as hurried:
            await a.ask(remote, {"from": "a", "n": 1000}, timeout=0.3)
        self.assertEqual(str(hurried.exception), f"no answer from shard {remote} within 300 ms")
        self.assertEqual(await a.ask(remote, {"from": "a", "n": 1001}, timeout=60), ta.address)
        self.assertEqual(journal.given_up, [])
        await a.shutdown()
        ta.close()
        # A stopped region takes no more requests.
        with self.assertRaises(AskError) as stopped:
            await a.ask(remote, {"from": "a", "n": 1002})
        self.assertEqual(stopped.exception.kind, "Send")

    async def test_a_wrong_token_is_refused_and_the_message_given_up_by_name(self) -> None:
        journal = Journal()
        a, ta = await self.region(journal, "one")
        b, tb = await self.region(journal, "other")
        shard = await self.shard_homed_on(b, tb.address, "w")
        a.send(shard, {"from": "a", "n": 0})
        await wait_for("the message given up", lambda: journal.given_up or None, 60)
        _, _, error = journal.given_up[0]
        self.assertIn("401", str(error))
        self.assertEqual(journal.deliveries(shard), [])
        await a.shutdown()
        await b.shutdown()
        ta.close()
        tb.close()


if __name__ == "__main__":
    unittest.main()
