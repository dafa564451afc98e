"""One region of the sharded counter: ``python region.py NODE_URL PORT DATA_DIR``.

The region serves entity type ``counter`` at address ``127.0.0.1:PORT`` and
answers HTTP on that port (a tiny asyncio server, no dependency beyond the
shardalloc client):

- ``POST /increment`` ``{"id": "...", "counter": "counter-07"}``: counts the
  increment ``id`` once on ``counter``, wherever the counter's shard lives.
  It answers 200 only once the increment is stored (see "Acknowledged once
  stored" below), 503 when this region is shutting down or could not confirm
  in time: the caller retries, at any region, with the same id.
- ``POST /deliver`` ``{"shard": "...", "message": {...}}``: a message another
  region forwarded here (the HTTP transport's receiving end); handed to the
  region's inbox, 503 with the error when the inbox refuses it.

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

from shardalloc_client.region import Region, RegionConfig
from shardalloc_client.region_errors import RegionError, SendError
from shardalloc_client.region_transport import Inbox

ENTITY_TYPE = "counter"
RETRY_DELAY_S = 0.2
"""How long a forward that failed waits before it goes back through ``Region.send``."""
RESEND_AFTER_S = float(os.environ.get("COUNTER_RESEND_AFTER_S", "2"))
"""How long an accepted increment may stay unstored before it is sent again
(``$COUNTER_RESEND_AFTER_S``: a large value shows the transport alone at work)."""
CONFIRM_TIMEOUT_S = 20.0
"""How long ``/increment`` waits for its increment to be stored before answering 503."""

log = logging.getLogger("counter-region")

Message = dict[str, Any]

stats: dict[str, int] = {
    "forwarded": 0, "forward-retries": 0, "counted": 0, "duplicates": 0, "fenced": 0, "resent": 0,
}
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


# --- The transport ---------------------------------------------------------------------------


class HttpTransport:
    """Carries forwarded messages to ``http://<to>/deliver``.

    Design (why no message is lost here): ``Transport.send`` is called
    synchronously on the region's event loop, so it cannot await the POST.
    It never raises: it starts a task that POSTs the message and returns.
    When the POST fails (the region at ``to`` is gone, restarting, or its
    inbox answered 503 because the shard moved on or it has stopped), the
    task waits ``RETRY_DELAY_S`` and hands the message back in through this
    region's own ``Region.send``, which routes it again from the node's
    current answer (a fresh home lookup, buffering while there is none). This
    repeats until some region's inbox accepts the message. Raising a
    ``TransportError`` instead would work only for failures known at once;
    the region's ``forward_failed`` path is kept for those (none here).

    A POST whose answer was lost may have been delivered anyway: sending it
    again may deliver it twice, which the application absorbs (each increment
    id counts once). What this region still holds when it stops (messages
    buffered in its core, forwards failing after it left) is covered end to
    end: the region that accepted the increment sends it again until it is
    stored (``Outbox``).
    """

    def __init__(self) -> None:
        self.region: Region[Message] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self, inbox: Inbox[Message]) -> None:
        pass

    def detach(self, inbox: Inbox[Message]) -> None:
        pass

    def send(self, to: str, shard: str, message: Message) -> None:
        task = asyncio.get_running_loop().create_task(self._carry(to, shard, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _carry(self, to: str, shard: str, message: Message) -> None:
        attempts = 0
        while True:
            attempts += 1
            try:
                status, answer = await http_request(
                    to, "POST", "/deliver", {"shard": shard, "message": message}, timeout=5.0
                )
                if status == 200:
                    stats["forwarded"] += 1
                    return
                why = f"{status} {answer}"
            except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as error:
                why = repr(error)
            stats["forward-retries"] += 1
            log.debug("forwarding %s %s to %s failed (%s)", shard, message, to, why)
            await asyncio.sleep(RETRY_DELAY_S)
            region = self.region
            if region is not None:
                try:
                    region.send(shard, message)  # routed again from the node's current home
                    return
                except SendError as error:  # this region has stopped (or its buffer is full)
                    log.debug("re-sending %s on %s failed: %s", message, shard, error)
            if attempts >= 10:
                # Still no way: the region that accepted the increment sends it again.
                log.warning("giving up forwarding %s on %s to %s: %s", message, shard, to, why)
                return

    async def flush(self, timeout: float) -> None:
        """Waits (up to ``timeout``) for the forwards in flight."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


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
        epoch = self.epochs[shard]
        increment = message["id"]
        log.debug("%s: deliver %s on %s at epoch %d", self.address, increment, shard, epoch)
        with self._locked(shard):
            state = self.read(shard)  # what is stored, not a cached copy
            if state["epoch"] > epoch:
                # Fenced: the counter moved to a newer run. Not counted here;
                # the accepting region sends it again and it reaches that run.
                log.warning("%s: %s fenced (stored epoch %d > %d), %s not counted",
                            self.address, shard, state["epoch"], epoch, increment)
                stats["fenced"] += 1
                return
            if increment in state["ids"]:
                stats["duplicates"] += 1
                return  # counted already (a message delivered twice)
            state["count"] += 1
            state["ids"].append(increment)
            state["epoch"] = epoch
            self._write(shard, state)
            self.state[shard] = state
            stats["counted"] += 1

    async def stop_shard(self, shard: str) -> None:
        self.epochs.pop(shard, None)
        self.state.pop(shard, None)
        log.info("%s: stop %s", self.address, shard)


# --- Acknowledged once stored -----------------------------------------------------------------


class Outbox:
    """The increments this region accepted and has not yet seen stored.

    ``/increment`` answers only once its id is in the counter's file (the
    storage is shared, so any region can read it), and sends the increment
    again every ``RESEND_AFTER_S`` until then: whatever a transport or a
    stopping region dropped is sent again, and the application counts each
    id once. At least once plus idempotence: exactly once."""

    def __init__(self, region: Region[Message], counters: Counters) -> None:
        self.region = region
        self.counters = counters
        self.pending: dict[str, tuple[str, asyncio.Future[None], float]] = {}

    async def increment(self, increment: str, counter: str) -> None:
        future = self.pending[increment][1] if increment in self.pending else None
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self.pending[increment] = (counter, future, time.monotonic())
            self._send(increment, counter)
        await asyncio.wait_for(asyncio.shield(future), CONFIRM_TIMEOUT_S)

    def _send(self, increment: str, counter: str) -> None:
        try:
            self.region.send(counter, {"id": increment})
        except (SendError, RegionError) as error:
            log.info("sending %s to %s failed for now: %s", increment, counter, error)

    async def run(self) -> None:
        """Every 50 ms: confirms what is stored, sends again what is overdue."""
        while True:
            await asyncio.sleep(0.05)
            by_counter: dict[str, list[str]] = {}
            for increment, (counter, _, _) in self.pending.items():
                by_counter.setdefault(counter, []).append(increment)
            now = time.monotonic()
            for counter, increments in by_counter.items():
                stored = set(self.counters.read(counter)["ids"])
                for increment in increments:
                    _, future, sent = self.pending[increment]
                    if increment in stored:
                        del self.pending[increment]
                        if not future.done():
                            future.set_result(None)
                    elif now - sent > RESEND_AFTER_S and self.region.is_registered():
                        self.pending[increment] = (counter, future, now)
                        stats["resent"] += 1
                        self._send(increment, counter)


# --- The process ------------------------------------------------------------------------------


async def main(node: str, port: int, data: Path) -> None:
    address = f"127.0.0.1:{port}"
    data.mkdir(parents=True, exist_ok=True)
    counters = Counters(data, address)
    transport = HttpTransport()
    region: Region[Message] = await Region.start(
        RegionConfig(node=node, entity_type=ENTITY_TYPE, address=address, app_version="1"),
        counters,
        transport,
    )
    transport.region = region
    outbox = Outbox(region, counters)
    accepting = True

    async def handle(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/deliver":
            shard = str(body["shard"])
            if not accepting and region.epoch_of(shard) is None:
                # Leaving: a message for a shard not running here would wait in
                # the region's buffer for a home and could be dropped when the
                # region ends. Refused, the sender routes it again.
                return 503, {"error": f"region {address} is leaving and does not run {shard}"}
            try:
                region.inbox().deliver(shard, body["message"])
            except Exception as error:  # TransportError, SendError, the region stopped
                return 503, {"error": str(error)}
            return 200, {"ok": True}
        if method == "POST" and path == "/increment":
            if not accepting:
                return 503, {"error": f"region {address} is shutting down"}
            try:
                await outbox.increment(str(body["id"]), str(body["counter"]))
            except TimeoutError:
                log.warning("%s: %s on %s not confirmed within %s s", address, body["id"],
                            body["counter"], CONFIRM_TIMEOUT_S)
                return 503, {"error": f"{body['id']} not confirmed within {CONFIRM_TIMEOUT_S} s"}
            return 200, {"ok": True}
        if method == "GET" and path == "/stats":
            return 200, {"registered": region.is_registered(), "pending": len(outbox.pending),
                         "running": region.running_shards(), **stats}
        return 404, {"error": f"no route {method} {path}"}

    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, handle), "127.0.0.1", port, reuse_address=True
    )
    outbox_task = asyncio.create_task(outbox.run())
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    print(f"region {address} serving (node {node}, data in {data})", flush=True)

    await stopping.wait()
    # 1. Take no new increments (callers retry elsewhere) and see the accepted ones stored.
    accepting = False
    deadline = time.monotonic() + 15
    while outbox.pending and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    # 2. Hand every shard off and leave; the server keeps answering /deliver meanwhile.
    try:
        await region.drain_and_leave()
    except RegionError as error:
        log.warning("%s: drain and leave: %s", address, error)
    # 3. Let forwards in flight land, then stop.
    await transport.flush(timeout=5)
    outbox_task.cancel()
    server.close()
    print(f"region {address} left ({len(outbox.pending)} increments unconfirmed): "
          f"{json.dumps(stats)}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: region.py NODE_URL PORT DATA_DIR")
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])))
    sys.exit(0)
