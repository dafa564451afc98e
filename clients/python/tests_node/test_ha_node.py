"""The region client on an HA cluster: three nodes on one etcd. The region
is given every node's URL; a follower redirects it to the leader. When the
leader is killed, the region follows the new leader's redirect, registers
again and goes on — within its lease: no fence, its shard keeps running,
and homes are answered. A placements view opened on a follower stays in
step across the same kill. The scenarios of the TypeScript client's
``test-node/ha.test.ts``.
"""

import asyncio
import json
import shutil
import tempfile
import unittest
import urllib.request
from pathlib import Path
from typing import Final

from etcd import Etcd, free_port
from node import Node, wait_for

from shardalloc_client.admin import AdminClient, AdminError
from shardalloc_client.placements_view import PlacementsView
from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region.actions import Fenced, Registered, Update

HA_TIMINGS: Final = [
    "--heartbeat-interval-ms", "200",
    "--lease-ms", "10000",
    "--unreachable-after-ms", "6000",
    "--remove-after-ms", "6000",
    "--rebalance-interval-ms", "1000",
]
"""Region timings of nodes on etcd (as the node's own HA tests): a 10 s
lease outlasts a failover of a few seconds."""


class Recorder:
    """An application that records the shards it started and does nothing else."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def start_shard(self, shard: str, epoch: int) -> None:
        self.started.append(shard)

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: int) -> None:
        pass


def _leader_name(url: str) -> str | None:
    """The leader ``url``'s node names, if it names one (``None`` when it does not answer)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/cluster/leader", timeout=2) as response:
            answer = json.loads(response.read())
    except (OSError, ValueError):
        return None
    leader = answer.get("leader") if isinstance(answer, dict) else None
    name = leader.get("name") if isinstance(leader, dict) else None
    return name if isinstance(name, str) and name else None


class HaNodeTests(unittest.IsolatedAsyncioTestCase):
    """Three nodes on one etcd, started for the test and stopped after."""

    async def asyncSetUp(self) -> None:
        # Starting etcd and the nodes (forks of large binaries) are slow
        # callbacks by the measure of the test loop's debug mode; do not report them.
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.nodes: list[Node] = []
        self.urls: list[str] = []
        self.dir = Path(tempfile.mkdtemp(prefix="shardalloc-py-ha-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.etcd = await Etcd.start()
        self.addAsyncCleanup(self.etcd.stop)
        self.addCleanup(self._report_output)
        secret = self.dir / "secret"
        secret.touch(mode=0o600)
        secret.write_text("the test cluster secret, 32 bytes or more\n")
        for i in range(3):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            self.urls.append(url)
            node = await Node.start_on(f"127.0.0.1:{port}", [
                "--etcd", self.etcd.url, "--advertise", url, "--node-name", f"n{i}",
                "--leader-lease-s", "3", "--cluster-secret-file", str(secret), "--type", "cart",
                *HA_TIMINGS,
            ])
            self.nodes.append(node)
            self.addAsyncCleanup(node.stop)

    def _report_output(self) -> None:
        """Prints the nodes' last output when the test failed (cleanups run
        after the test's outcome is known)."""
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            for i, node in enumerate(self.nodes):
                print(f"\n--- output of n{i} in {self.id()} ---\n{node.output()}")

    async def leader(self, alive: list[int], gone: int | None = None) -> int:
        """The index of the node every node in ``alive`` names as leader (not ``gone``)."""

        async def probe() -> int | None:
            names = set()
            for i in alive:
                name = await asyncio.to_thread(_leader_name, self.urls[i])
                if name is None:
                    return None
                names.add(name)
            if len(names) != 1:
                return None
            index = int(next(iter(names))[1:])
            return index if index != gone else None

        return await wait_for("one leader", probe, 60)

    async def test_follows_the_redirect_to_the_leader_and_the_new_one_after_a_kill_within_its_lease(
        self,
    ) -> None:
        first = await self.leader([0, 1, 2])
        follower = next(i for i in range(3) if i != first)
        app = Recorder()
        region: Region[int] = await Region.start(
            RegionConfig(
                # A follower first: it redirects.
                node=[self.urls[follower], *(u for i, u in enumerate(self.urls) if i != follower)],
                entity_type="cart",
                address="py-ha",
                reconnect_min_ms=50,
                reconnect_max_ms=500,
                home_retry_ms=300,
            ),
            app,
        )
        # Subscribed before the loop runs the region: the first Registered is seen.
        updates = region.updates()
        seen: list[Update] = []

        async def read() -> None:
            async for update in updates:
                seen.append(update)

        reader = asyncio.create_task(read())
        try:
            async with asyncio.timeout(30):
                await region.wait_registered()
                self.assertEqual(await region.home_of("before-kill"), "py-ha")
            await wait_for("the shard to run",
                           lambda: True if "before-kill" in region.running_shards() else None)

            self.nodes[first].kill()
            alive = [i for i in range(3) if i != first]
            after = await self.leader(alive, first)

            async def home() -> str | None:
                try:
                    return await asyncio.wait_for(region.home_of("after-kill"), 2)
                except TimeoutError:
                    return None

            self.assertEqual(await wait_for("a home answered by the new leader", home, 60), "py-ha")
            kinds = [type(u).__name__ for u in seen]
            self.assertGreaterEqual(
                sum(isinstance(u, Registered) for u in seen), 2,
                f"registered once more with the new leader: {kinds}",
            )
            self.assertFalse(any(isinstance(u, Fenced) for u in seen),
                             f"the failover cost the region its lease: {kinds}")
            self.assertIn("before-kill", region.running_shards(), "the shard stopped across the failover")
            status, state = await self.nodes[after].request(
                "GET", "/v1/cluster/shards/cart/shards/after-kill")
            self.assertEqual(status, 200, state)
            assert isinstance(state, dict)
            self.assertEqual(state["home"], "py-ha")
        finally:
            await region.shutdown()
            updates.close()
            await reader

    async def test_keeps_a_placements_view_opened_on_a_follower_in_step_across_the_leaders_kill(
        self,
    ) -> None:
        alive = list(range(3))
        current = await self.leader(alive)
        follower = next(i for i in alive if i != current)
        admin = AdminClient(self.urls[follower])
        await admin.set_placement("cart", "view-before", "somewhere")
        view = await PlacementsView.open(admin, "cart", reconnect_min_ms=50, reconnect_max_ms=500)
        try:
            self.assertEqual(view.get("view-before"), "somewhere")
            self.nodes[current].kill()
            await self.leader([i for i in alive if i != current], current)

            # Written through the survivor, after the failover: the view, whose
            # stream the killed leader ended, reconnects and sees it.
            async def written() -> bool | None:
                try:
                    await admin.set_placement("cart", "view-after", "elsewhere")
                    return True
                except AdminError:
                    return None

            done: bool = await wait_for("a placement written after the failover", written, 60)
            self.assertTrue(done)
            await wait_for("the view to see it",
                           lambda: True if view.get("view-after") == "elsewhere" else None, 60)
            self.assertEqual(view.get("view-before"), "somewhere",
                             "a placement from before the failover was lost")
        finally:
            view.close()


if __name__ == "__main__":
    unittest.main()
