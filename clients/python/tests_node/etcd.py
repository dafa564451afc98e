"""A real etcd member for the HA tests: on 127.0.0.1, free ports, its data
on tmpfs (``/dev/shm`` when it exists), the election timing the node's own
HA tests use. Debian's ``etcd-server`` (``cargo xtask test`` installs it).
The port of the TypeScript client's ``test-node/etcd.ts``.
"""

import asyncio
import json
import os
import shutil
import socket
import tempfile
import urllib.request
from pathlib import Path

from node import PATIENCE_S, wait_for


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _healthy(url: str) -> bool:
    """Whether etcd's ``/health`` says ``"health":"true"`` (false when it does not answer)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            health = json.loads(response.read())
    except (OSError, ValueError):
        return False
    return isinstance(health, dict) and health.get("health") == "true"


class Etcd:
    """One etcd member, a cluster of its own."""

    def __init__(self, process: asyncio.subprocess.Process, dir: Path, url: str) -> None:
        """Use :meth:`start`."""
        self._process = process
        self._dir = dir
        self.url = url
        """Its client URL, ``http://127.0.0.1:PORT``."""

    @classmethod
    async def start(cls) -> "Etcd":
        """Starts the member and waits until it is healthy."""
        etcd = shutil.which("etcd")
        if etcd is None:
            raise RuntimeError("cannot start etcd (not on PATH): install Debian's etcd-server "
                               "(cargo xtask test does)")
        parent = "/dev/shm" if os.path.isdir("/dev/shm") else None
        dir = Path(tempfile.mkdtemp(prefix="shardalloc-py-etcd-", dir=parent))
        client, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        with open(dir / "etcd.log", "wb") as log:
            process = await asyncio.create_subprocess_exec(
                etcd,
                "--name", "m0", "--data-dir", str(dir / "data"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"m0={peer_url}", "--initial-cluster-state", "new",
                "--heartbeat-interval", "250", "--election-timeout", "2500",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        member = cls(process, dir, url)
        try:
            async def probe() -> bool | None:
                if process.returncode is not None:
                    raise RuntimeError(f"etcd exited ({process.returncode}):\n{member.output()}")
                return True if await asyncio.to_thread(_healthy, url) else None

            healthy: bool = await wait_for("etcd to be healthy", probe, PATIENCE_S * 2)
            assert healthy
        except BaseException:
            await member.stop()
            raise
        return member

    def output(self) -> str:
        """etcd's last output lines."""
        try:
            lines = (self._dir / "etcd.log").read_text("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-40:])

    async def stop(self) -> None:
        """Kills the member (SIGKILL) and removes its data."""
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
