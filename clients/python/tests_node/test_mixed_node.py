"""One type served by regions in three languages at once: a Python region, a
TypeScript region (a child process running the TypeScript client, built in
``clients/typescript/dist`` by ``cargo xtask clients`` before these tests)
and a Rust region (the Rust client's ``peer_region`` example, built by
``cargo xtask clients`` too) carry each other's messages over the
inter-region wire, every ordered pair, each delivered once and in order."""

import asyncio
import json
import os
import tempfile
import unittest
from pathlib import Path
from typing import Any

from node import FAST, Node, binary, wait_for

from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region_errors import DeliveryError
from shardalloc_client.region_peer import PeerTransport

TYPESCRIPT = Path(__file__).resolve().parents[2] / "typescript/dist/src/index.js"
"""The built TypeScript client."""

SCRIPT = """
import {{ createInterface }} from 'node:readline';
import {{ PeerTransport, Region }} from {client};
const [node, token] = process.argv.slice(2);
const say = (line) => process.stdout.write(JSON.stringify(line) + '\\n');
const transport = await PeerTransport.bind({{ entityType: 'cart', incarnation: 1, token }});
const app = {{
  startShard() {{}},
  stopShard() {{}},
  deliver(shard, message) {{ say({{ deliver: shard, n: message.n }}); }},
  undelivered(shard, message, error) {{ say({{ givenUp: shard, n: message.n, error: error.message }}); }},
}};
const region = Region.start({{ node, entityType: 'cart', address: transport.address, homeRetryMs: 300 }}, app, transport);
await region.waitRegistered();
say({{ address: transport.address }});
for await (const line of createInterface({{ input: process.stdin }})) {{
  const command = JSON.parse(line);
  if (command.send !== undefined) region.send(command.send, {{ from: 'ts', n: command.n }});
  if (command.home !== undefined) say({{ home: command.home, at: await region.homeOf(command.home) }});
}}
await region.shutdown();
transport.close();
"""


RUST_EXAMPLE = "peer_region"
"""The Rust client's example that runs a region on its PeerTransport (``client/examples/peer_region.rs``)."""


class Child:
    """A region of another language in a child process, driven by JSON lines."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.process = process
        self.seen: list[dict[str, Any]] = []
        assert process.stdout is not None
        self._reader = asyncio.get_running_loop().create_task(self._read(process.stdout))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.seen.append(json.loads(line))

    async def address(self) -> str:
        return await wait_for(f"the {self.name} region", lambda: next(
            (str(line["address"]) for line in self.seen if "address" in line), None))

    async def send(self, shard: str, n: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"send": shard, "n": n}).encode() + b"\n")
        await self.process.stdin.drain()

    def delivered(self, shard: str) -> list[int]:
        return [int(line["n"]) for line in self.seen if line.get("deliver") == shard]

    def given_up(self) -> list[dict[str, Any]]:
        return [line for line in self.seen if "givenUp" in line]

    async def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self._reader.cancel()


class App:
    def __init__(self) -> None:
        self.delivered: list[tuple[str, dict[str, Any]]] = []
        self.given_up: list[DeliveryError] = []

    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: dict[str, Any]) -> None:
        self.delivered.append((shard, message))

    def undelivered(self, shard: str, message: dict[str, Any], error: DeliveryError) -> None:
        self.given_up.append(error)


class MixedLanguages(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.rust = Path(binary()).parent / "examples" / RUST_EXAMPLE
        for built, how in [
            (TYPESCRIPT, "npm ci && npm test in clients/typescript"),
            (self.rust, f"cargo build -p shardalloc-client --example {RUST_EXAMPLE}"),
        ]:
            self.assertTrue(built.is_file(), f"{built} is missing: {how} (cargo xtask clients does)")
        self.node = await Node.start(["--type", "cart", *FAST])

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    async def child(self, name: str, *command: str) -> Child:
        process = await asyncio.create_subprocess_exec(
            *command, self.node.base, "secret",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=os.environ.copy(),
        )
        child = Child(name, process)
        self.addAsyncCleanup(child.stop)
        return child

    async def test_rust_typescript_and_python_regions_carry_each_others_messages(self) -> None:
        script = Path(tempfile.mkdtemp(prefix="shardalloc-mixed-")) / "region.mjs"
        script.write_text(SCRIPT.format(client=json.dumps(TYPESCRIPT.as_uri())))
        ts = await self.child("TypeScript", "node", str(script))
        rust = await self.child("Rust", str(self.rust))
        app = App()
        transport: PeerTransport[dict[str, Any]] = await PeerTransport.bind(
            entity_type="cart", incarnation=1, token="secret"
        )
        config = RegionConfig(node=self.node.base, entity_type="cart", address=transport.address, home_retry_ms=300)
        py = await Region.start(config, app, transport)
        await py.wait_registered()
        addresses = {"Python": transport.address, "TypeScript": await ts.address(), "Rust": await rust.address()}
        children = {"TypeScript": ts, "Rust": rust}

        async def homed(on: str, prefix: str) -> str:
            async def probe() -> str | None:
                for i in range(64):
                    if await py.home_of(f"{prefix}{i}") == addresses[on]:
                        return f"{prefix}{i}"
                return None

            return await wait_for(f"a shard homed on the {on} region", probe)

        def delivered(on: str, shard: str) -> list[int]:
            if on == "Python":
                return [int(m["n"]) for s, m in app.delivered if s == shard]
            return children[on].delivered(shard)

        for sender in addresses:
            for receiver in addresses:
                if sender == receiver:
                    continue
                shard = await homed(receiver, f"{sender[0]}{receiver[0]}-")
                for n in range(20):
                    if sender == "Python":
                        py.send(shard, {"from": "py", "n": n})
                    else:
                        await children[sender].send(shard, n)
                await wait_for(f"{sender} → {receiver}: 20 delivered", lambda: True if len(
                    delivered(receiver, shard)) >= 20 else None)
                self.assertEqual(delivered(receiver, shard), list(range(20)), f"{sender} → {receiver}")
        self.assertEqual(app.given_up, [])
        self.assertEqual(ts.given_up() + rust.given_up(), [])
        await py.shutdown()
        transport.close()

    async def test_a_region_sigkilled_under_traffic_loses_no_message_untold(self) -> None:
        """For a Rust and then a TypeScript region: SIGKILLed while a Python
        region sends to a shard it homes, then started again. Every message
        is delivered somewhere or handed back by name (none here: the
        attempts outlast the node's removal); a message the dead region took
        without acknowledging may arrive twice (at least once)."""
        script = Path(tempfile.mkdtemp(prefix="shardalloc-mixed-")) / "region.mjs"
        script.write_text(SCRIPT.format(client=json.dumps(TYPESCRIPT.as_uri())))
        commands = {"Rust": [str(self.rust)], "TypeScript": ["node", str(script)]}
        app = App()
        transport: PeerTransport[dict[str, Any]] = await PeerTransport.bind(
            entity_type="cart", incarnation=1, token="secret"
        )
        config = RegionConfig(
            node=self.node.base,
            entity_type="cart",
            address=transport.address,
            home_retry_ms=300,
            # Rounds of failed forwards outlast the node's removal (4.5 s here).
            forward_attempts=30,
        )
        py = await Region.start(config, app, transport)
        await py.wait_registered()
        for name, command in commands.items():
            with self.subTest(name):
                victim = await self.child(name, *command)
                address = await victim.address()

                async def probe() -> str | None:
                    for i in range(64):
                        if await py.home_of(f"k{name[0]}{i}") == address:
                            return f"k{name[0]}{i}"
                    return None

                shard: str = await wait_for(f"a shard homed on the {name} region", probe)
                restarted: list[Child] = []
                for n in range(300):
                    py.send(shard, {"from": "py", "n": n})
                    if n == 100:
                        victim.process.kill()
                        restarted.append(await self.child(name, *command))
                    await asyncio.sleep(0.01)

                def outcome() -> tuple[set[int], set[int]]:
                    delivered = {int(m["n"]) for s, m in app.delivered if s == shard}
                    for child in [victim, *restarted]:
                        delivered |= set(child.delivered(shard))
                    return delivered, {n for n in range(300) if n not in delivered}

                await wait_for(
                    f"every message to the killed {name} region's shard delivered or handed back",
                    lambda: True if not outcome()[1] or app.given_up else None,
                    60,
                )
                self.assertEqual(app.given_up, [], "the attempts outlast the node's removal")
                self.assertEqual(outcome()[1], set(), "delivered or handed back")
                self.assertTrue(victim.delivered(shard), f"the {name} region was the home before its kill")

if __name__ == "__main__":
    unittest.main()
