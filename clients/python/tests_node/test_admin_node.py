"""The admin client and the placements view against the real node.

Placements written, paged, removed; rebalance, regions, drains,
strategies, a shard's state; errors carrying the node's code; the event
stream; a view that follows sets and removals and survives the node's
restart (a new term: ``missed``, then a fresh listing). The scenarios of
the TypeScript client's ``test-node/admin.test.ts``.
"""

import asyncio
import unittest

from node import FAST, Node, wait_for

from shardalloc_client import (
    AdminClient,
    AdminError,
    InvalidClientConfigError,
    InvalidRequestError,
    NodeUnreachableError,
    NotFoundError,
    Placement,
    PlacementsView,
    Region,
    RegionConfig,
    UnauthorizedError,
)


class Quiet:
    """An application that runs its shards doing nothing."""

    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: bytes) -> None:
        pass


class AdminNodeTests(unittest.IsolatedAsyncioTestCase):
    node: Node

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 2.0

    async def start(self, args: list[str]) -> Node:
        self.node = await Node.start(args)
        self.addCleanup(self._report_output)
        return self.node

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    def _report_output(self) -> None:
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            print(f"\n--- node output of {self.id()} ---\n{self.node.output()}")

    def assert_admin_error(self, error: BaseException, code: str | None, status: int) -> None:
        self.assertIsInstance(error, AdminError)
        assert isinstance(error, AdminError)
        self.assertEqual(error.status, status, error.message)
        if code is not None:
            self.assertEqual(error.code, code, error.message)

    async def test_writes_pages_and_removes_placements_and_reads_the_rest(self) -> None:
        node = await self.start(["--type", "cart", "--admin-token", "adm", *FAST])
        admin = AdminClient(node.base, "adm")
        written = await admin.set_placements(
            "cart", [Placement(shard_id=f"s/{i:02}", target="r1") for i in range(25)]
        )
        self.assertEqual(written.total, 25)
        self.assertEqual((await admin.set_placement("cart", "one two", "r2")).total, 26,
                         "a shard id with a space and a slash")
        page = await admin.placements_page("cart", None, 10)
        self.assertEqual(len(page.placements), 10)
        self.assertTrue(page.next, "a first page of 10 has a next")
        everything = await admin.placements("cart")
        self.assertEqual(len(everything.placements), 26)
        self.assertIsNone(everything.next)
        self.assertTrue(await admin.remove_placement("cart", "s/03"))
        self.assertFalse(await admin.remove_placement("cart", "s/03"), "a second removal finds none")
        self.assertEqual(len((await admin.placements("cart")).placements), 25)

        state = await admin.shard("cart", "one two")
        self.assertEqual(state.placement, "r2")
        self.assertEqual(state.attributes, {})
        written_attributes = await admin.write_attributes(
            "cart", {"one two": {"tenant": "acme", "tier": "gold"}, "s/01": {}}
        )
        self.assertEqual(written_attributes.changed, ["one two"])
        self.assertEqual((await admin.shard("cart", "one two")).attributes,
                         {"tenant": "acme", "tier": "gold"})
        self.assertEqual((await admin.set_shard_attributes("cart", "one two", {})).changed, ["one two"])
        with self.assertRaisesRegex(InvalidRequestError, r'invalid-attributes: shard "s/01": an attribute key'):
            await admin.set_shard_attributes("cart", "s/01", {"a b": "c"})
        rebalanced = await admin.rebalance("cart", ["s/01"], True)
        self.assertEqual(len(rebalanced.accepted) + len(rebalanced.rejected), 1, rebalanced)
        builtins = (await admin.strategies()).strategies
        least = [s for s in builtins if s.name == "least-shard"]
        self.assertEqual([s.active_in for s in least], [["cart"]], builtins)
        self.assertEqual((await admin.strategy("cart")).active.name, "least-shard")

        with self.assertRaises(NotFoundError) as unknown:
            await admin.placements("nope")
        self.assert_admin_error(unknown.exception, "unknown-type", 404)
        self.assertRegex(str(unknown.exception), r"^the node answered 404 unknown-type: ")
        self.assertTrue(unknown.exception.node_message)
        with self.assertRaises(InvalidRequestError) as bad:
            await admin.set_placement("cart", "", "r1")
        self.assert_admin_error(bad.exception, None, 400)
        with self.assertRaises(UnauthorizedError) as wrong:
            async with AdminClient(node.base, "wrong") as wrong_token:
                await wrong_token.placements("cart")
        self.assertTrue(wrong_token.closed, "the block closed the client")
        with self.assertRaisesRegex(InvalidClientConfigError, "the admin client of .* is closed"):
            await wrong_token.placements("cart")
        self.assert_admin_error(wrong.exception, None, 401)
        with self.assertRaisesRegex(
            NodeUnreachableError, r"request to http://127\.0\.0\.1:9/v1/cluster/regions failed"
        ):
            await AdminClient("http://127.0.0.1:9").regions()
        with self.assertRaisesRegex(InvalidClientConfigError, r"scheme ftp: is not http or https"):
            AdminClient("ftp://x")
        with self.assertRaisesRegex(AdminError, r"not a URL"):
            AdminClient("127.0.0.1")
        with self.assertRaisesRegex(AdminError, r"plain http\(s\)://host\[:port\]\[/path\] URL"):
            AdminClient("http://x/?a=b")

        # A region to drain.
        region = await Region.start(
            RegionConfig(node=node.base, entity_type="cart", address="py-drained",
                         reconnect_min_ms=50, reconnect_max_ms=500),
            Quiet(),
        )
        try:
            await region.wait_registered()
            self.assertTrue(any(r.address == "py-drained"
                                for r in (await admin.regions()).regions))
            await admin.drain("py-drained")
            drain = await admin.drain_state("py-drained")
            self.assertTrue(drain.draining)
            self.assertIsNotNone(drain.started_at_ms)
            await admin.undrain("py-drained")
            self.assertFalse((await admin.drain_state("py-drained")).draining)
        finally:
            await region.shutdown()

    async def test_streams_decisions_and_a_placements_view_follows_them_across_a_restart(
        self,
    ) -> None:
        node = await self.start(["--type", "cart", *FAST])
        admin = AdminClient(node.base)
        await admin.set_placement("cart", "before", "r1")
        stream = await admin.events("cart")
        await admin.set_placement("cart", "streamed", "r2")
        async with asyncio.timeout(30):
            async for id, event in stream:
                if event.kind == "placement-set" and event.shard_id == "streamed":
                    self.assertRegex(id or "", r"^\d+-\d+$")
                    self.assertEqual(event.target, "r2")
                    break
        stream.close()
        # A closed stream ends its iteration.
        self.assertEqual([item async for item in stream], [])

        view = await PlacementsView.open(admin, "cart", reconnect_min_ms=50, reconnect_max_ms=500)
        changes: list[tuple[str, str | None]] = []
        view.on_change(lambda shard, target: changes.append((shard, target)))
        disconnected: list[str] = []
        view.on_disconnected(disconnected.append)
        try:
            self.assertEqual(view.get("before"), "r1", "listed when it opened")
            self.assertEqual(view.size, 2)
            await admin.set_placement("cart", "later", "r3")
            await wait_for("the view to see the new placement",
                           lambda: True if view.get("later") == "r3" else None)
            await admin.remove_placement("cart", "before")
            await wait_for("the view to see the removal",
                           lambda: True if view.get("before") is None else None)
            self.assertEqual(changes, [("later", "r3"), ("before", None)])

            # The node restarts (a new term): the view reconnects, is told it
            # missed events, and reads every placement again — including one
            # written while it was away.
            synced: asyncio.Future[int] = asyncio.get_running_loop().create_future()

            def on_synced(count: int) -> None:
                if not synced.done():
                    synced.set_result(count)

            view.on_synced(on_synced)
            self.node = node = await node.restart()
            await AdminClient(node.base).set_placement("cart", "while-away", "r4")
            await asyncio.wait_for(synced, 30)
            await wait_for("the view to hold the placement written after the restart",
                           lambda: True if view.get("while-away") == "r4" else None)
            self.assertEqual(
                sorted(view.entries().items()),
                [("later", "r3"), ("streamed", "r2"), ("while-away", "r4")],
            )
            self.assertEqual(dict(view.explicit_placements), view.entries())
            self.assertTrue(disconnected, "told of the lost stream")
        finally:
            view.close()
        with self.assertRaises(AdminError) as unknown:
            await PlacementsView.open(admin, "nope")
        self.assert_admin_error(unknown.exception, "unknown-type", 404)


if __name__ == "__main__":
    unittest.main()
