"""The Python region client against the real node.

The session (handshake, registration, a home with its epoch, a wrong token
and an absent node named), ``connect_url_of``, and the region: registration,
a home and its epoch, deliveries in order, a hand-off under traffic with no
message lost or doubled, drain and leave, a wrong token and a stale
incarnation refused by name, a new incarnation taking the address over, a
bad configuration refused by name. The
scenarios of the TypeScript client's ``test-node/session.test.ts`` and
``test-node/region.test.ts``.

Run with ``SHARDALLOC_BIN=… python -m unittest discover -s tests_node``.
"""

import asyncio
import json
import unittest
from dataclasses import replace
from typing import Any

from node import FAST, PATIENCE_S, Node, wait_for

from shardalloc_client import wire
from shardalloc_client.region import Application, Region, RegionConfig
from shardalloc_client.region.errors import (
    ConfigError,
    RegionError,
    RegionRefusedError,
    RegionStoppedSendError,
)
from shardalloc_client.region.session import (
    Leader,
    Session,
    SessionClosed,
    SessionConnected,
    SessionEvent,
    SessionMessage,
    SessionParams,
    SessionRefused,
    connect_url_of,
)
from shardalloc_client.region.transport import InMemoryTransport


class Journal:
    """What every region's application saw, in order."""

    def __init__(self) -> None:
        self.entries: list[str] = []
        self.delivered: dict[str, list[tuple[str, int]]] = {}
        """Shard → (region, message) in delivery order."""
        self.running: dict[str, set[str]] = {}
        """Shard → the regions running it now."""
        self.overlaps: list[str] = []
        self.epochs: dict[str, list[int]] = {}

    def app(self, region: str) -> Application[int]:
        """The application of ``region``, writing here."""
        return _JournalApp(self, region)


class _JournalApp:
    def __init__(self, journal: Journal, region: str) -> None:
        self.journal = journal
        self.region = region

    async def start_shard(self, shard: str, epoch: int) -> None:
        journal = self.journal
        regions = journal.running.setdefault(shard, set())
        if regions:
            journal.overlaps.append(f"{shard} started on {self.region} while on {sorted(regions)}")
        regions.add(self.region)
        journal.epochs.setdefault(shard, []).append(epoch)
        journal.entries.append(f"start {shard} on {self.region} at {epoch}")

    async def stop_shard(self, shard: str) -> None:
        await asyncio.sleep(0.005)
        self.journal.running.get(shard, set()).discard(self.region)
        self.journal.entries.append(f"stop {shard} on {self.region}")

    async def deliver(self, shard: str, message: int) -> None:
        self.journal.delivered.setdefault(shard, []).append((self.region, message))


def config(at: Node, address: str, **extra: Any) -> RegionConfig:
    """A region of type cart at ``address`` with short timings, connecting
    to ``at`` unless ``extra`` names another ``node``."""
    base = RegionConfig(
        node=at.base,
        entity_type="cart",
        address=address,
        reconnect_min_ms=50,
        reconnect_max_ms=500,
        home_retry_ms=300,
        stop_deadline_ms=5_000,
        leave_timeout_ms=20_000,
    )
    return replace(base, **extra)


class NodeTestCase(unittest.IsolatedAsyncioTestCase):
    """Starts a node for each test (region token ``secret``) and stops it after."""

    TOKEN = "secret"

    async def asyncSetUp(self) -> None:
        # Starting the node (a fork of a large binary) is a slow callback by
        # the measure of the test loop's debug mode; do not report it.
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.node = await Node.start(["--type", "cart", "--region-token", self.TOKEN, *FAST])
        self.addCleanup(self._report_output)

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    def _report_output(self) -> None:
        """Prints the node's last output when the test failed (cleanups run
        after the test's outcome is known)."""
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            print(f"\n--- node output of {self.id()} ---\n{self.node.output()}")


class SessionTests(NodeTestCase):
    """A session with the real node."""

    TOKEN = "right"

    def open(self, node: str, token: str | None = None) -> tuple[Session, list[SessionEvent]]:
        events: list[SessionEvent] = []
        params = SessionParams(
            urls=(connect_url_of(node),),
            entity_type="cart",
            token=token,
            handshake_timeout_ms=int(PATIENCE_S * 1000),
        )
        session = Session.open(params, Leader(), 0, events.append)
        return session, events

    async def test_is_welcomed_registers_and_is_told_a_home_with_its_epoch(self) -> None:
        session, events = self.open(self.node.base, "right")
        await wait_for(
            "the Welcome", lambda: next((e for e in events if isinstance(e, SessionConnected)), None)
        )
        session.send(
            wire.Register(
                address="py-a", incarnation=1, roles=(), app_version="0.1.0",
                labels={"zone": "a"}, proxy_only=False, sequence=1,
            )
        )

        def message(kind: type[Any]) -> Any:
            return next(
                (e.message for e in events
                 if isinstance(e, SessionMessage) and isinstance(e.message, kind)),
                None,
            )

        registered: wire.Registered = await wait_for("the registration", lambda: message(wire.Registered))
        self.assertEqual(registered.incarnation, 1)
        self.assertEqual(registered.sequence, 1)
        self.assertTrue(registered.lease_ms > 0 and registered.heartbeat_interval_ms > 0, registered)
        session.send(wire.GetShardHome(shard="order-42"))
        home: wire.ShardHomeEpoch = await wait_for("the home", lambda: message(wire.ShardHomeEpoch))
        self.assertEqual(home.shard, "order-42")
        self.assertEqual(home.home, "py-a")
        self.assertGreaterEqual(home.epoch, 1)
        session.close()
        await wait_for("the end", lambda: next((e for e in events if isinstance(e, SessionClosed)), None))
        await session.wait_closed()

    async def test_is_refused_with_a_wrong_token_by_name(self) -> None:
        session, events = self.open(self.node.base, "wrong")
        closed = await wait_for(
            "the end", lambda: next((e for e in events if isinstance(e, SessionClosed)), None)
        )
        self.assertTrue(any(isinstance(e, SessionRefused) for e in events), events)
        self.assertRegex(closed.reason, r"refused the region token \(401\)")
        await session.wait_closed()

    async def test_names_a_node_that_is_not_there(self) -> None:
        session, events = self.open("http://127.0.0.1:9")
        closed = await wait_for(
            "the end", lambda: next((e for e in events if isinstance(e, SessionClosed)), None)
        )
        self.assertRegex(closed.reason, r"cannot connect to ws://127\.0\.0\.1:9/v1/regions/connect")
        await session.wait_closed()


class ConnectUrlOfTests(unittest.TestCase):
    """``connect_url_of``: no node needed."""

    def test_cases(self) -> None:
        cases = [
            ("http://127.0.0.1:7878", "ws://127.0.0.1:7878/v1/regions/connect"),
            ("https://node.example:443/", "wss://node.example/v1/regions/connect"),
            ("ws://h:1/v1/regions/connect", "ws://h:1/v1/regions/connect"),
            ("http://h:1/prefix/", "ws://h:1/prefix/v1/regions/connect"),
        ]
        for node, url in cases:
            with self.subTest(node=node):
                self.assertEqual(connect_url_of(node), url)

    def test_refuses_what_is_not_a_node_url_by_name(self) -> None:
        with self.assertRaisesRegex(ValueError, r"must start with http://"):
            connect_url_of("ftp://h")
        with self.assertRaisesRegex(ValueError, r"must start with|is not a URL"):
            connect_url_of("h:1")


class RegionTests(NodeTestCase):
    """The region client with the real node."""

    async def test_registers_learns_a_home_with_its_epoch_delivers_in_order_and_a_hand_off_under_traffic_loses_nothing(
        self,
    ) -> None:
        journal = Journal()
        network = InMemoryTransport[int]()
        a = await Region.start(config(self.node, "py-a", token="secret"), journal.app("py-a"), network)

        def attributes_of(shard: str) -> dict[str, str]:
            return {"tenant": "acme"} if shard == "named" else {}

        b = await Region.start(
            config(self.node, "py-b", token="secret", shard_attributes=attributes_of), journal.app("py-b"), network
        )
        try:
            async with asyncio.timeout(PATIENCE_S):
                await asyncio.gather(a.wait_registered(), b.wait_registered())
            # The application's attributes go with the first request (protocol version 5).
            async with asyncio.timeout(PATIENCE_S):
                await b.home_of("named")
            status, named = await self.node.request("GET", "/v1/cluster/shards/cart/shards/named")
            self.assertEqual(status, 200, named)
            assert isinstance(named, dict)
            self.assertEqual(named["attributes"], {"tenant": "acme"})
            status, body = await self.node.request(
                "POST", "/v1/cluster/shards/cart/placements",
                {"placements": [{"shardId": "orders", "target": "py-a"}]},
            )
            self.assertEqual(status, 200, body)
            async with asyncio.timeout(PATIENCE_S):
                self.assertEqual(await a.home_of("orders"), "py-a")
            await wait_for("orders to run on py-a", lambda: a.epoch_of("orders"))
            status, shard = await self.node.request("GET", "/v1/cluster/shards/cart/shards/orders")
            self.assertEqual(status, 200, shard)
            assert isinstance(shard, dict)
            self.assertEqual(a.epoch_of("orders"), shard["epoch"], "the region runs the shard at the node's epoch")

            # b sends 300 messages while the shard moves from a to b. The
            # sender waits at 150 until the move is asked for, and at 250
            # until b runs the shard, so the move always happens with
            # messages still to come, however slow the machine.
            move_asked = asyncio.Event()

            async def sender() -> None:
                for n in range(300):
                    if n == 150:
                        await move_asked.wait()
                    if n == 250:
                        await wait_for("orders to run on py-b", lambda: b.epoch_of("orders"))
                    b.send("orders", n)
                    await asyncio.sleep(0.002)

            sending = asyncio.create_task(sender())
            await wait_for(
                "some messages delivered on py-a",
                lambda: True if len(journal.delivered.get("orders", [])) > 20 else None,
            )
            status, body = await self.node.request(
                "POST", "/v1/cluster/shards/cart/placements",
                {"placements": [{"shardId": "orders", "target": "py-b"}]},
            )
            self.assertEqual(status, 200, body)
            move_asked.set()
            async with asyncio.timeout(PATIENCE_S):
                await sending
            delivered = await wait_for(
                "every message delivered",
                lambda: journal.delivered.get("orders") if len(journal.delivered.get("orders", [])) >= 300 else None,
            )
            self.assertEqual([n for _, n in delivered], list(range(300)), "lost, doubled or reordered")
            self.assertTrue(
                any(r == "py-a" for r, _ in delivered) and any(r == "py-b" for r, _ in delivered),
                "the shard did not move under traffic",
            )
            epochs = journal.epochs.get("orders", [])
            self.assertTrue(len(epochs) == 2 and epochs[1] > epochs[0], f"epochs {epochs}")
            self.assertEqual(journal.overlaps, [])

            # a drains and leaves; b stays.
            async with asyncio.timeout(PATIENCE_S):
                await a.drain_and_leave()
            self.assertFalse(a.is_registered())
            self.assertEqual(a.running_shards(), [])
            status, regions = await self.node.request("GET", "/v1/cluster/regions")
            self.assertNotIn('"py-a"', json.dumps(regions), f"py-a is still registered: {regions}")
            with self.assertRaises(RegionError) as left:
                await a.home_of("x")
            self.assertEqual(left.exception.kind, "Left")
        finally:
            await asyncio.gather(a.shutdown(), b.shutdown())

    async def test_names_a_wrong_token_and_a_stale_incarnation_and_a_new_one_takes_over(self) -> None:
        journal = Journal()
        wrong = await Region.start(config(self.node, "py-wrong", token="nope"), journal.app("py-wrong"))
        with self.assertRaises(RegionRefusedError) as refused:
            async with asyncio.timeout(PATIENCE_S):
                await wrong.wait_registered()
        self.assertEqual(refused.exception.kind, "Refused")
        self.assertRegex(str(refused.exception), r"refused the region token \(401\)")
        await wrong.shutdown()

        newer = await Region.start(
            config(self.node, "py-same", token="secret", incarnation=2), journal.app("py-same")
        )
        async with asyncio.timeout(PATIENCE_S):
            await newer.wait_registered()
        older = await Region.start(
            config(self.node, "py-same", token="secret", incarnation=1), journal.app("py-same")
        )
        with self.assertRaises(RegionError) as stale:
            async with asyncio.timeout(PATIENCE_S):
                await older.wait_registered()
        self.assertEqual(stale.exception.kind, "Refused")
        self.assertRegex(
            str(stale.exception), r"incarnation 1 is older than the registered incarnation 2"
        )
        # A restart with a new incarnation takes the address over.
        newest = await Region.start(
            config(self.node, "py-same", token="secret", incarnation=3), journal.app("py-same")
        )
        async with asyncio.timeout(PATIENCE_S):
            await newest.wait_registered()
            self.assertEqual(await newest.home_of("taken-over"), "py-same")
        await asyncio.gather(older.shutdown(), newer.shutdown(), newest.shutdown())

    async def test_refuses_a_bad_configuration_by_name(self) -> None:
        app = Journal().app("x")
        with self.assertRaisesRegex(ConfigError, "the address is empty") as empty:
            await Region.start(config(self.node, ""), app)
        self.assertEqual(empty.exception.kind, "Config")
        with self.assertRaisesRegex(ConfigError, "the address is empty"):
            async with Region.start(config(self.node, ""), app):
                pass
        with self.assertRaisesRegex(RegionError, "must start with http"):
            await Region.start(config(self.node, "a", node="ftp://x"), app)
        with self.assertRaisesRegex(RegionError, "reconnect delays"):
            await Region.start(config(self.node, "a", reconnect_min_ms=10, reconnect_max_ms=5), app)
        with self.assertRaisesRegex(ConfigError, "a capacity quantity's name is 1 to 64 characters"):
            await Region.start(config(self.node, "a", capacity={"memory mb": 1}), app)
        with self.assertRaisesRegex(ConfigError, "capacity quantity 'load' is -1; an amount is a finite number"):
            await Region.start(config(self.node, "a", capacity={"load": -1}), app)

    async def test_declares_its_capacity_when_it_registers_and_the_node_keeps_it(self) -> None:
        capacity = {"load": 800.0, "memory-mb": 4096.0}
        sized_config = config(self.node, "py-sized", token="secret", capacity=capacity)
        async with Region.start(sized_config, Journal().app("py-sized")) as region:
            async with asyncio.timeout(PATIENCE_S):
                await region.wait_registered()
            status, state = await self.node.request("GET", "/v1/cluster/shards/cart")
            self.assertEqual(status, 200, state)
            assert isinstance(state, dict)
            [sized] = [r for r in state["regions"] if r["address"] == "py-sized"]
            self.assertEqual(sized["capacity"], capacity)

    async def test_an_async_with_block_that_raises_shuts_the_region_down(self) -> None:
        journal = Journal()
        with self.assertRaisesRegex(RuntimeError, "the application gave up"):
            async with Region.start(config(self.node, "py-block", token="secret"),
                                    journal.app("py-block")) as region:
                async with asyncio.timeout(PATIENCE_S):
                    await region.wait_registered()
                    self.assertEqual(await region.home_of("in-block"), "py-block")
                raise RuntimeError("the application gave up")
        self.assertFalse(region.is_registered())
        with self.assertRaises(RegionStoppedSendError):
            region.send("in-block", 1)
        # Shut down, not left: the node still holds the shard there until
        # the region's silence removes it.
        status, body = await self.node.request("GET", "/v1/cluster/shards/cart/shards/in-block")
        self.assertEqual((status, body["home"]), (200, "py-block"), body)  # type: ignore[index]


if __name__ == "__main__":
    unittest.main()
