"""One type served by regions in two languages at once: a Python region and a
TypeScript region (a child process running the TypeScript client, built in
``clients/typescript/dist`` by ``cargo xtask clients`` before these tests)
carry each other's messages over the inter-region wire, both ways, each
delivered once and in order."""

import asyncio
import json
import os
import tempfile
import unittest
from pathlib import Path
from typing import Any

from node import FAST, Node, wait_for

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


class Lines:
    """What the TypeScript region printed, one JSON object a line."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.seen.append(json.loads(line))


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
        self.assertTrue(
            TYPESCRIPT.is_file(),
            f"{TYPESCRIPT} is missing: build the TypeScript client first "
            "(npm ci && npm test in clients/typescript; cargo xtask clients does)",
        )
        self.node = await Node.start(["--type", "cart", *FAST])

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    async def test_a_python_and_a_typescript_region_carry_each_others_messages(self) -> None:
        script = Path(tempfile.mkdtemp(prefix="shardalloc-mixed-")) / "region.mjs"
        script.write_text(SCRIPT.format(client=json.dumps(TYPESCRIPT.as_uri())))
        child = await asyncio.create_subprocess_exec(
            "node", str(script), self.node.base, "secret",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=os.environ.copy(),
        )
        assert child.stdin is not None and child.stdout is not None
        lines = Lines()
        reader = asyncio.get_running_loop().create_task(lines.read(child.stdout))
        try:
            ts: str = await wait_for("the TypeScript region", lambda: next(
                (str(line["address"]) for line in lines.seen if "address" in line), None))
            app = App()
            transport: PeerTransport[dict[str, Any]] = await PeerTransport.bind(
                entity_type="cart", incarnation=1, token="secret"
            )
            config = RegionConfig(
                node=self.node.base, entity_type="cart", address=transport.address, home_retry_ms=300
            )
            py = await Region.start(config, app, transport)
            await py.wait_registered()

            async def homed(on: str) -> str:
                async def probe() -> str | None:
                    for i in range(64):
                        if await py.home_of(f"m{i}") == on:
                            return f"m{i}"
                    return None

                return await wait_for(f"a shard homed on {on}", probe)

            # Python → TypeScript.
            to_ts = await homed(ts)
            for n in range(50):
                py.send(to_ts, {"from": "py", "n": n})
            await wait_for("50 delivered by TypeScript", lambda: True if len(
                [line for line in lines.seen if line.get("deliver") == to_ts]) == 50 else None)
            self.assertEqual([line["n"] for line in lines.seen if line.get("deliver") == to_ts], list(range(50)))

            # TypeScript → Python.
            to_py = await homed(transport.address)
            for n in range(50):
                child.stdin.write(json.dumps({"send": to_py, "n": n}).encode() + b"\n")
            await child.stdin.drain()
            await wait_for("50 delivered by Python", lambda: True if len(
                [m for s, m in app.delivered if s == to_py]) == 50 else None)
            self.assertEqual([m["n"] for s, m in app.delivered if s == to_py], list(range(50)))
            self.assertEqual(app.given_up, [])
            self.assertEqual([line for line in lines.seen if "givenUp" in line], [])
            await py.shutdown()
            transport.close()
        finally:
            child.stdin.close()
            try:
                await asyncio.wait_for(child.wait(), 10)
            except TimeoutError:
                child.kill()
                await child.wait()
            reader.cancel()


if __name__ == "__main__":
    unittest.main()
