"""One region of the sharded counter: ``python region.py NODE_URL PORT HTTP_PORT DATA_DIR``.

The region serves entity type ``counter`` at address ``127.0.0.1:PORT``,
where the client's built-in transport (``PeerTransport``) listens for the
other regions: requests for counters homed elsewhere travel there on the
inter-region wire, with no forwarding of the service's own. On
``HTTP_PORT`` it answers HTTP (a tiny asyncio server, no dependency beyond
the shardalloc client):

- ``POST /increment`` ``{"id": "...", "counter": "counter-07"}``: asks the
  counter (``await region.ask(counter, {"id": ...})``); its home counts the
  increment ``id`` once and answers. 200 once the home wrote it, 503 naming
  the ``AskError`` otherwise (shutting down, a timeout, the home lost
  before it answered): the caller retries, at any region, with the same id.
- ``GET /stats``: what this process did.

Each counter is one JSON file in the shared data directory,
``{"count": n, "ids": [...], "epoch": e}``. SIGTERM drains the region and
leaves the cluster (``drain_and_leave``), then the process exits 0.
"""

import asyncio
import fcntl
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from shardalloc_client import AskError, PeerTransport, Region, RegionConfig, RegionError

ENTITY_TYPE = "counter"
ASK_TIMEOUT_S = 10.0
"""How long ``/increment`` waits for the home's answer before answering 503."""

log = logging.getLogger("counter-region")

Message = dict[str, Any]

stats: dict[str, int] = {"asked": 0, "ask-failures": 0, "counted": 0, "duplicates": 0, "fenced": 0}
"""What this process did, for ``GET /stats``."""


# --- A tiny HTTP/1.1 client and server over asyncio streams -------------------------------


async def http_request(
    address: str, method: str, path: str, body: object = None, timeout: float = 10.0
) -> tuple[int, Any]:
    """One request to ``host:port`` on a fresh connection: the status and the JSON body
    (``None`` when empty). Raises ``OSError`` / ``TimeoutError`` when there is no answer."""
    host, port = address.rsplit(":", 1)
    payload = b"" if body is None else json.dumps(body).encode()
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            )
            writer.write(head.encode() + payload)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit():
                raise ConnectionError(f"a bad status line from {address}: {status_line!r}")
            status = int(parts[1])
            length = None
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            data = await (reader.readexactly(length) if length is not None else reader.read())
            return status, json.loads(data) if data else None
        finally:
            writer.close()


async def _serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handle: Any
) -> None:
    """Answers the requests of one connection (keep-alive until the client closes)."""
    try:
        while True:
            request_line = await reader.readline()
            if not request_line:
                return
            method, path, _ = request_line.decode("latin-1").split(" ", 2)
            length, close = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
            raw = await reader.readexactly(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
                status, answer = await handle(method, path, body)
            except (ValueError, KeyError, TypeError) as error:
                status, answer = 400, {"error": f"bad request: {error}"}
            data = json.dumps(answer).encode()
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Unavailable")
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
            )
            if close:
                head += "Connection: close\r\n"
            writer.write((head + "\r\n").encode() + data)
            await writer.drain()
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
        return  # the client went away, or this process is ending
    finally:
        writer.close()


# --- The application: one JSON file per counter, fenced by epoch, idempotent by id -----------


class Counters:
    """The Application. Calls for one shard come in order, never overlapping."""

    def __init__(self, data: Path, address: str) -> None:
        self.data = data
        self.address = address
        self.epochs: dict[str, int] = {}
        self.state: dict[str, dict[str, Any]] = {}

    def _path(self, shard: str) -> Path:
        return self.data / f"{shard}.json"

    def _locked(self, shard: str) -> Any:
        """An exclusive lock on the counter across processes (held for a read and a write)."""
        handle = open(self.data / f"{shard}.lock", "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def read(self, shard: str) -> dict[str, Any]:
        try:
            return json.loads(self._path(shard).read_text())
        except FileNotFoundError:
            return {"count": 0, "ids": [], "epoch": 0}

    def _write(self, shard: str, state: dict[str, Any]) -> None:
        path = self._path(shard)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps(state))
        os.replace(temp, path)  # atomic: readers see the old file or the new one

    async def start_shard(self, shard: str, epoch: int) -> None:
        self.epochs[shard] = epoch
        with self._locked(shard):
            state = self.read(shard)
            if state["epoch"] <= epoch:
                # Claim the counter at this epoch at once: a stale run elsewhere
                # (a smaller epoch) can no longer write it.
                state["epoch"] = epoch
                self._write(shard, state)
            self.state[shard] = state
        log.info("%s: start %s at epoch %d (count %d)", self.address, shard, epoch, state["count"])

    async def deliver(self, shard: str, message: Message) -> None:
        """A sent increment (this service asks instead; kept for ``send``)."""
        self.count(shard, message["id"])

    async def answer(self, shard: str, message: Message) -> dict[str, str]:
        """Counts an asked increment and answers ``{outcome, by}``; a fenced
        write raises, which fails the ask by name (the asker answers 503 and
        the client sends the increment again, to the current home)."""
        outcome = self.count(shard, message["id"])
        if outcome == "fenced":
            raise RuntimeError(f"{message['id']} for {shard} on {self.address}: fenced")
        return {"outcome": outcome, "by": self.address}

    def count(self, shard: str, increment: str) -> str:
        """Counts ``increment`` once: ``counted``, ``duplicate`` or ``fenced``."""
        epoch = self.epochs[shard]
        log.debug("%s: deliver %s on %s at epoch %d", self.address, increment, shard, epoch)
        with self._locked(shard):
            state = self.read(shard)  # what is stored, not a cached copy
            if state["epoch"] > epoch:
                # Fenced: the counter moved to a newer run. Not counted here.
                log.warning("%s: %s fenced (stored epoch %d > %d), %s not counted",
                            self.address, shard, state["epoch"], epoch, increment)
                stats["fenced"] += 1
                return "fenced"
            if increment in state["ids"]:
                stats["duplicates"] += 1
                return "duplicate"  # counted already (a request resent)
            state["count"] += 1
            state["ids"].append(increment)
            state["epoch"] = epoch
            self._write(shard, state)
            self.state[shard] = state
            stats["counted"] += 1
            return "counted"

    async def stop_shard(self, shard: str) -> None:
        self.epochs.pop(shard, None)
        self.state.pop(shard, None)
        log.info("%s: stop %s", self.address, shard)


# --- The process ------------------------------------------------------------------------------


async def main(node: str, port: int, http_port: int, data: Path) -> None:
    address = f"127.0.0.1:{port}"
    data.mkdir(parents=True, exist_ok=True)
    counters = Counters(data, address)
    incarnation = time.time_ns() // 1_000_000
    transport: PeerTransport[Message] = await PeerTransport.bind(
        entity_type=ENTITY_TYPE, incarnation=incarnation, port=port
    )
    region: Region[Message] = await Region.start(
        RegionConfig(
            node=node,
            entity_type=ENTITY_TYPE,
            address=address,
            incarnation=incarnation,
            app_version="1",
            home_retry_ms=300,
            # Rounds of failed forwards outlast the node's removal of a dead region (4.5 s in the check).
            forward_attempts=30,
        ),
        counters,
        transport,
    )
    accepting = True

    async def handle(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/increment":
            if not accepting:
                return 503, {"error": f"region {address} is shutting down"}
            stats["asked"] += 1
            try:
                answer = await region.ask(str(body["counter"]), {"id": str(body["id"])}, timeout=ASK_TIMEOUT_S)
            except AskError as error:
                stats["ask-failures"] += 1
                return 503, {"error": str(error), "kind": error.kind}
            return 200, answer
        if method == "GET" and path == "/stats":
            return 200, {"registered": region.is_registered(), "running": region.running_shards(), **stats}
        return 404, {"error": f"no route {method} {path}"}

    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, handle), "127.0.0.1", http_port, reuse_address=True
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    print(f"region {address} serving HTTP on 127.0.0.1:{http_port} (node {node}, data in {data})", flush=True)

    await stopping.wait()
    # Take no new increments (callers retry elsewhere), hand every shard off
    # (each answers what reached it first) and leave; then stop.
    accepting = False
    try:
        await region.drain_and_leave()
    except RegionError as error:
        log.warning("%s: drain and leave: %s", address, error)
    transport.close()
    server.close()
    print(f"region {address} left: {json.dumps(stats)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: region.py NODE_URL PORT HTTP_PORT DATA_DIR")
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])))
    sys.exit(0)
