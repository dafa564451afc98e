"""The external allocation feature request's test plan, its ten cases
against the real node, through the API it asks for:
:class:`ExternalAllocationController`, and ``external_allocation_strategy``
reading a :class:`PlacementsView` kept in step with the node. The
scenarios of the TypeScript client's ``test-node/external.test.ts``.

The cases build on one another (one node, two regions, one view, as the
TypeScript suite's ``before``): they run in order in one test, each as a
subtest named by its number.
"""

import asyncio
import re
import unittest
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set

from node import FAST, Node, wait_for

from shardalloc_client.admin import AdminClient
from shardalloc_client.external import ExternalAllocationController, external_allocation_strategy
from shardalloc_client.placements_view import PlacementsView
from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region.actions import PlacementChanged, Update

SLOW_REBALANCE = [
    "600000" if i > 0 and FAST[i - 1] == "--rebalance-interval-ms" else arg
    for i, arg in enumerate(FAST)
]
"""FAST, but rebalance rounds only every 10 minutes: only a manual rebalance moves a shard here."""


class LeastShard:
    """The fallback: the candidate with the fewest shards; never rebalances."""

    def allocate(
        self, shard_id: str, candidates: Sequence[str], current: Mapping[str, Sequence[str]]
    ) -> str:
        return sorted(candidates, key=lambda c: len(current.get(c, ())))[0]

    def rebalance(self, current: Mapping[str, Sequence[str]], in_progress: Set[str]) -> list[str]:
        return []


class Quiet:
    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: int) -> None:
        pass


class FeatureRequestTestPlan(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.node = await Node.start(["--type", "Counter", *SLOW_REBALANCE])
        self.addCleanup(self._report_output)
        self.admin = AdminClient(self.node.base)
        self.controller = ExternalAllocationController(self.admin, "Counter")
        self.view = await PlacementsView.open(self.admin, "Counter",
                                              reconnect_min_ms=50, reconnect_max_ms=500)
        self.regions: list[Region[int]] = []
        self.updates: dict[str, list[Update]] = {}
        self.readers: list[asyncio.Task[None]] = []
        await self.region("node-a")
        await self.region("node-b")

    async def asyncTearDown(self) -> None:
        self.view.close()
        await asyncio.gather(*(r.shutdown() for r in self.regions), return_exceptions=True)
        await asyncio.gather(*self.readers, return_exceptions=True)
        await self.node.stop()

    def _report_output(self) -> None:
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            print(f"\n--- node output of {self.id()} ---\n{self.node.output()}")

    async def region(self, address: str) -> Region[int]:
        started: Region[int] = await Region.start(
            RegionConfig(node=self.node.base, entity_type="Counter", address=address,
                         reconnect_min_ms=50, reconnect_max_ms=500, home_retry_ms=300),
            Quiet(),
        )
        seen: list[Update] = []
        self.updates[address] = seen
        updates = started.updates()

        async def read() -> None:
            async for update in updates:
                seen.append(update)

        self.readers.append(asyncio.create_task(read()))
        self.regions.append(started)
        await started.wait_registered()
        return started

    async def home(self, shard: str) -> str | None:
        return (await self.admin.shard("Counter", shard)).home

    async def view_holds(self, shard: str, target: str | None) -> None:
        await wait_for(f"the view to hold {shard} → {target}",
                       lambda: True if self.view.get(shard) == target else None)

    async def test_the_ten_cases_in_order(self) -> None:
        cases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("1. an explicit placement is honoured", self.case_1),
            ("2. shards without a placement go by the fallback strategy", self.case_2),
            ("3. a removed placement leaves the shard to the fallback from the next rebalance",
             self.case_3),
            ("4. a target that cannot take the shard: the fallback decides, with a warning",
             self.case_4),
            ("5. rebalance_now hands the shard off and allocates it at once", self.case_5),
            ("6. POST placements is parsed and persists", self.case_6),
            ("7. GET placements returns the current placements", self.case_7),
            ("8. DELETE a placement removes it", self.case_8),
            ("9. a placement set reaches every region of the type at once", self.case_9),
            ("10. a coordinator restart keeps the placements (durable: beyond the request's"
             " phase 1)", self.case_10),
        ]
        for name, case in cases:
            with self.subTest(name):
                async with asyncio.timeout(60):
                    await case()

    async def case_1(self) -> None:
        await self.controller.set_placement(42, "node-b")
        self.assertEqual(await self.regions[0].home_of("42"), "node-b")
        self.assertEqual((await self.admin.shard("Counter", "42")).reason, "placement")
        await self.view_holds("42", "node-b")
        strategy = external_allocation_strategy(LeastShard(), lambda: self.view)
        self.assertEqual(strategy.allocate("42", ["node-a", "node-b"], {}), "node-b")

    async def case_2(self) -> None:
        got = await self.regions[0].home_of("7")
        self.assertIn(got, ("node-a", "node-b"))
        self.assertEqual((await self.admin.shard("Counter", "7")).reason, "strategy")
        strategy = external_allocation_strategy(LeastShard(), lambda: self.view)
        self.assertEqual(strategy.allocate("7", ["node-a", "node-b"], {"node-b": ["42"]}), "node-a")

    async def case_3(self) -> None:
        await self.controller.set_placement(43, "node-a")
        self.assertEqual(await self.regions[1].home_of("43"), "node-a")
        await self.controller.remove_placement(43)
        self.assertIsNone((await self.admin.shard("Counter", "43")).placement)
        await self.view_holds("43", None)
        self.assertEqual(await self.home("43"), "node-a", "it stays where it is until a rebalance")
        self.assertEqual(await self.controller.rebalance_now([43]), [])

        async def placed_again() -> bool | None:
            state = await self.admin.shard("Counter", "43")
            return True if not state.moving and state.reason == "strategy" else None

        placed: bool = await wait_for("the strategy to have placed it again", placed_again)
        self.assertTrue(placed)

    async def case_4(self) -> None:
        await self.controller.set_placement(44, "node-gone")
        got = await self.regions[0].home_of("44")
        self.assertIn(got, ("node-a", "node-b"))
        state = await self.admin.shard("Counter", "44")
        self.assertEqual(state.placement, "node-gone")
        self.assertEqual(state.reason, "strategy")
        await wait_for("the node's warning", lambda: True if re.search(
            r"placement of shard 44 on node-gone not honoured", self.node.output()) else None)
        warnings: list[str] = []
        await self.view_holds("44", "node-gone")
        strategy = external_allocation_strategy(
            LeastShard(), lambda: self.view,
            lambda shard, target, _: warnings.append(f"{shard}→{target}"),
        )
        self.assertEqual(strategy.allocate("44", ["node-a", "node-b"], {}), "node-a")
        self.assertEqual(warnings, ["44→node-gone"])

    async def case_5(self) -> None:
        await self.controller.set_placement(45, "node-a")
        self.assertEqual(await self.regions[1].home_of("45"), "node-a")
        stream = await self.admin.events("Counter")
        try:
            await self.controller.set_placement(45, "node-b")
            self.assertEqual(await self.home("45"), "node-a",
                             "no rebalance round runs here in 10 minutes")
            self.assertEqual(await self.controller.rebalance_now([45]), [])
            seen: list[str] = []
            async for _, event in stream:
                kind = event.kind
                if event.shard_id == "45" and re.match(r"^(hand-off|shard-homed)", kind):
                    region = event.region
                    seen.append(f"{kind} {region}" if region else kind)
                if kind == "shard-homed" and event.shard_id == "45":
                    break
        finally:
            stream.close()
        self.assertEqual(seen[0], "hand-off-begun node-a", seen)
        self.assertEqual(seen[-1], "shard-homed node-b", seen)

    async def case_6(self) -> None:
        status, body = await self.node.request(
            "POST", "/v1/cluster/shards/Counter/placements", {"shardId": "46", "target": "node-a"}
        )
        self.assertEqual(status, 200, body)
        self.assertEqual((await self.controller.get_placements()).get("46"), "node-a")

    async def case_7(self) -> None:
        _, body = await self.node.request("GET", "/v1/cluster/shards/Counter/placements")
        assert isinstance(body, dict)
        listed = {p["shardId"]: p["target"] for p in body["placements"]}
        self.assertEqual(listed, await self.controller.get_placements())
        self.assertEqual((await self.controller.get_placements()).get("42"), "node-b")

    async def case_8(self) -> None:
        status, _ = await self.node.request("DELETE", "/v1/cluster/shards/Counter/placements/46")
        self.assertTrue(200 <= status < 300, status)
        self.assertNotIn("46", await self.controller.get_placements())

    async def case_9(self) -> None:
        await self.controller.set_placement(47, "node-a")
        for address in ("node-a", "node-b"):
            seen = self.updates[address]
            await wait_for(f"{address} to be told", lambda: True if any(
                isinstance(u, PlacementChanged) and u.shard == "47" and u.target == "node-a"
                for u in seen) else None)
        await self.view_holds("47", "node-a")

    async def case_10(self) -> None:
        before = await self.controller.get_placements()
        self.node = await self.node.restart()
        self.admin = AdminClient(self.node.base)
        self.controller = ExternalAllocationController(self.admin, "Counter")
        self.assertEqual(await self.controller.get_placements(), before)

        async def at_its_placement() -> bool | None:
            try:
                home = await asyncio.wait_for(self.regions[0].home_of("42"), 1)
            except Exception:
                return None
            return True if home == "node-b" else None

        there: bool = await wait_for(
            "a region to register again and the shard to be at its placement", at_its_placement
        )
        self.assertTrue(there)
        await self.view_holds("47", "node-a")


if __name__ == "__main__":
    unittest.main()
