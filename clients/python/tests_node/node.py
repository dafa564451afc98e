"""A real ``shardalloc serve`` for the tests that need a node.

Started on 127.0.0.1 with a fresh data directory and short timings, its
address read from its ``shardalloc listening on http://…`` line, its
output kept for a failing test's report, killed when the test ends. The
binary is ``$SHARDALLOC_BIN``, else the repository's debug build
(``<repo>/target/debug/shardalloc``; ``cargo build -p shardalloc``).
"""

import asyncio
import json
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

T = TypeVar("T")

FAST: Final = [
    "--rebalance-interval-ms", "500",
    "--heartbeat-interval-ms", "200",
    "--unreachable-after-ms", "1500",
    "--remove-after-ms", "3000",
    "--lease-ms", "2000",
    "--handoff-timeout-ms", "10000",
]
"""Heartbeats every 200 ms, a 2 s lease, removal after 4.5 s of silence."""

PATIENCE_S: Final = 30.0
"""Generous: every wait here takes milliseconds when things work."""

_LISTENING: Final = re.compile(r"shardalloc listening on (https?://\S+)")


def binary() -> str:
    """The node binary: ``$SHARDALLOC_BIN``, else the repository's debug build."""
    from_env = os.environ.get("SHARDALLOC_BIN")
    if from_env:
        return from_env
    built = Path(__file__).resolve().parents[3] / "target" / "debug" / "shardalloc"
    if not built.exists():
        raise RuntimeError(
            f"no node binary at {built}: run `cargo build -p shardalloc` or set SHARDALLOC_BIN"
        )
    return str(built)


class Node:
    """A running node."""

    def __init__(
        self, process: asyncio.subprocess.Process, data: str, base: str, log: deque[str],
        readers: list["asyncio.Task[None]"], args: list[str],
    ) -> None:
        """Use :meth:`start`."""
        self._process = process
        self._data = data
        self.base = base
        """``http://127.0.0.1:PORT`` (``https://`` with ``--tls-cert``)."""
        self._log = log
        self._readers = readers
        self._args = args

    @classmethod
    async def start(cls, args: list[str]) -> "Node":
        """Starts a node with ``args`` after ``serve --listen 127.0.0.1:0 --data …``."""
        return await cls._spawn(args, tempfile.mkdtemp(prefix="shardalloc-py-"), "127.0.0.1:0")

    @classmethod
    async def start_on(cls, listen: str, args: list[str]) -> "Node":
        """Starts a node listening on ``listen`` (``127.0.0.1:PORT``, a fixed
        port, for a node that must know its URL before it starts) with
        ``args`` after ``serve --listen … --data …``."""
        return await cls._spawn(args, tempfile.mkdtemp(prefix="shardalloc-py-"), listen)

    def kill(self) -> None:
        """Kills the node at once (SIGKILL), keeping its data; :meth:`stop`
        still reaps it and removes the data."""
        if self._process.returncode is None:
            self._process.kill()

    async def restart(self) -> "Node":
        """Stops the node (SIGTERM, then waits for it) and starts it again
        on the same address and data directory; answers the new node, whose
        output follows this one's."""
        if self._process.returncode is None:
            self._process.terminate()
        await self._process.wait()
        for reader in self._readers:
            await asyncio.gather(reader, return_exceptions=True)
        listen = urllib.parse.urlsplit(self.base).netloc
        # The port was just freed; binding it again may take a moment.
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                node = await Node._spawn(self._args, self._data, listen, self._log)
                return node
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    @classmethod
    async def _spawn(
        cls, args: list[str], data: str, listen: str, earlier: deque[str] | None = None
    ) -> "Node":
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDALLOC_")}
        env["SHARDALLOC_LOG"] = "info,tower_http=warn"
        process = await asyncio.create_subprocess_exec(
            binary(), "serve", "--listen", listen, "--data", data, *args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        log: deque[str] = deque(earlier or (), maxlen=400)
        address: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def keep(stream: asyncio.StreamReader | None, prefix: str) -> None:
            if stream is None:
                return
            while line := await stream.readline():
                text = line.decode("utf-8", "replace").rstrip("\n")
                log.append(prefix + text)
                found = _LISTENING.search(text)
                if found and not address.done():
                    address.set_result(found.group(1))

        readers = [
            asyncio.create_task(keep(process.stdout, "[stdout] ")),
            asyncio.create_task(keep(process.stderr, "")),
        ]
        node = cls(process, data, "", log, readers, args)
        exited = asyncio.create_task(process.wait())
        try:
            racing: list[asyncio.Future[Any]] = [address, exited]
            done, _ = await asyncio.wait(racing, timeout=PATIENCE_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if address in done:
                node.base = address.result()
                return node
            if exited in done:
                raise RuntimeError(
                    f"the node exited ({process.returncode}) before it listened:\n{node.output()}"
                )
            raise RuntimeError(f"the node printed no address within {PATIENCE_S} s:\n{node.output()}")
        except BaseException:
            await node.stop(keep_data=earlier is not None)
            raise
        finally:
            if not exited.done():
                exited.cancel()

    def output(self) -> str:
        """The node's last output lines."""
        return "\n".join(self._log)

    async def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        """A REST call: its status and JSON body (``None`` when empty)."""

        def call() -> tuple[int, object]:
            data = None if body is None else json.dumps(body).encode()
            headers = {} if body is None else {"content-type": "application/json"}
            request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
                    status, text = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, text = error.code, error.read()
            return status, json.loads(text) if text else None

        return await asyncio.to_thread(call)

    async def stop(self, keep_data: bool = False) -> None:
        """Kills the node and removes its data (unless ``keep_data``)."""
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        if not keep_data:
            shutil.rmtree(self._data, ignore_errors=True)


async def wait_for(
    what: str, probe: Callable[[], T | None | Awaitable[T | None]], timeout_s: float = PATIENCE_S
) -> T:
    """Waits until ``probe`` answers something other than ``None``, up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if isinstance(value, Awaitable):
            value = await value
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        await asyncio.sleep(0.025)
