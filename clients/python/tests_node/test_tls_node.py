"""TLS with a private CA: a node serving HTTPS and WSS with a certificate
made here by ``openssl``; the region client and the admin client trust it
when given it (``ca_file`` / ``ca_pem``), and name the problem when they
are not. The scenarios of the TypeScript client's ``test-node/tls.test.ts``.
"""

import asyncio
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from node import FAST, Node, wait_for

from shardalloc_client.admin import AdminClient, AdminError
from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region.actions import Disconnected, Update


class Quiet:
    async def start_shard(self, shard: str, epoch: int) -> None:
        pass

    async def stop_shard(self, shard: str) -> None:
        pass

    async def deliver(self, shard: str, message: int) -> None:
        pass


@unittest.skipIf(shutil.which("openssl") is None, "no openssl to make a certificate")
class TlsWithAPrivateCa(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().slow_callback_duration = 2.0
        self.dir = Path(tempfile.mkdtemp(prefix="shardalloc-py-tls-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.cert, key = self.dir / "cert.pem", self.dir / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=IP:127.0.0.1",
             "-addext", "basicConstraints=critical,CA:FALSE",
             "-addext", "extendedKeyUsage=serverAuth",
             "-keyout", str(key), "-out", str(self.cert)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.node = await Node.start(
            ["--type", "cart", "--tls-cert", str(self.cert), "--tls-key", str(key), *FAST]
        )
        self.addCleanup(self._report_output)
        self.assertRegex(self.node.base, r"^https://")

    async def asyncTearDown(self) -> None:
        await self.node.stop()

    def _report_output(self) -> None:
        outcome = getattr(self, "_outcome", None)
        if outcome is not None and not getattr(outcome, "success", True):
            print(f"\n--- node output of {self.id()} ---\n{self.node.output()}")

    def config(self, address: str, ca_file: str | None = None) -> RegionConfig:
        return RegionConfig(node=self.node.base, entity_type="cart", address=address,
                            ca_file=ca_file, reconnect_min_ms=50, reconnect_max_ms=500)

    async def test_the_region_registers_over_wss_and_the_admin_client_calls_over_https_with_the_ca(
        self,
    ) -> None:
        region: Region[int] = await Region.start(self.config("py-tls", str(self.cert)), Quiet())
        try:
            async with asyncio.timeout(30):
                await region.wait_registered()
                self.assertEqual(await region.home_of("secure"), "py-tls")
            admin = AdminClient(self.node.base, ca_file=str(self.cert))
            self.assertEqual((await admin.shard("cart", "secure")).home, "py-tls")
            from_pem = AdminClient(self.node.base, ca_pem=self.cert.read_text())
            self.assertTrue(any(r.address == "py-tls"
                                for r in (await from_pem.regions()).regions))
            async with await admin.events("cart") as stream:
                await admin.set_placement("cart", "secure", "py-tls")
                async with asyncio.timeout(30):
                    async for _, event in stream:
                        if event.kind == "placement-set":
                            self.assertEqual(event.shard_id, "secure")
                            break
        finally:
            await region.shutdown()

    async def test_without_the_ca_both_name_the_certificate_problem(self) -> None:
        with self.assertRaisesRegex(AdminError, r"presented a certificate this client does not trust"):
            await AdminClient(self.node.base).regions()
        region: Region[int] = await Region.start(self.config("py-untrusting"), Quiet())
        updates = region.updates()
        seen: list[Update] = []

        async def read() -> None:
            async for update in updates:
                seen.append(update)

        reader = asyncio.create_task(read())
        try:
            down = await wait_for("the session to fail", lambda: next(
                (u for u in seen if isinstance(u, Disconnected)), None))
            self.assertRegex(
                down.reason,
                r"cannot connect to wss://127\.0\.0\.1:\d+/v1/regions/connect: .*certificate",
            )
            self.assertFalse(region.is_registered())
        finally:
            await region.shutdown()
            updates.close()
            await reader


if __name__ == "__main__":
    unittest.main()
