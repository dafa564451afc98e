"""Proves the sharded counter counts every increment exactly once.

Starts a shardalloc node and three region processes (``region.py``) sharing
one data directory, sends 3,000 increments with unique ids over 30 counters,
round-robin across the three regions' ``/increment``; midway forces an
immediate rebalance of all 30 counters, restarts one region (SIGTERM,
wait, start again on the same ports) and SIGKILLs another under traffic
(started again at once on the same ports). Then waits (at most 60 s) until the
stored counts sum to 3,000 with every id counted exactly once. Prints a
one-line summary; exits nonzero naming any lost or doubled id. Every child
process is killed on exit.

The node binary: ``$SHARDALLOC_BIN``, else ``shardalloc`` on PATH, else
``<repo>/target/debug/shardalloc``.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from shardalloc_client import AdminClient

from region import http_request

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
INCREMENTS = 3_000
COUNTERS = 30
REGIONS = 3
CONCURRENCY = 30
NODE_FLAGS = [
    "--type", "counter",
    "--rebalance-interval-ms", "500",
    "--heartbeat-interval-ms", "200",
    "--unreachable-after-ms", "1500",
    "--remove-after-ms", "3000",
    "--lease-ms", "2000",
    "--handoff-timeout-ms", "10000",
]
LISTENING = re.compile(r"shardalloc listening on (https?://\S+)")

children: list[subprocess.Popen[bytes]] = []


def node_binary() -> str:
    from_env = os.environ.get("SHARDALLOC_BIN")
    if from_env:
        return from_env
    on_path = shutil.which("shardalloc")
    if on_path:
        return on_path
    built = REPO / "target" / "debug" / "shardalloc"
    if built.exists():
        return str(built)
    sys.exit("no shardalloc binary: set SHARDALLOC_BIN, put it on PATH, or `cargo build -p shardalloc`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_node(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    log = open(work / "node.log", "wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDALLOC_")}
    env.setdefault("SHARDALLOC_LOG", "warn")
    process = subprocess.Popen(
        [node_binary(), "serve", "--listen", "127.0.0.1:0", "--data", str(work / "node"),
         *NODE_FLAGS],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
    )
    children.append(process)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    found = LISTENING.search(line)
    if not found:
        sys.exit(f"the node did not say where it listens (got {line!r}); see {work / 'node.log'}")
    # Keep reading its stdout, so that the pipe never fills and blocks it.
    threading.Thread(target=lambda: shutil.copyfileobj(process.stdout, log), daemon=True).start()
    return process, found.group(1)


def start_region(node: str, port: int, http: int, data: Path, work: Path) -> subprocess.Popen[bytes]:
    """A region whose address is ``127.0.0.1:port`` (the inter-region wire) answering HTTP on ``http``."""
    log = open(work / f"region-{port}.log", "ab")
    process = subprocess.Popen(
        [sys.executable, str(HERE / "region.py"), node, str(port), str(http), str(data)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    children.append(process)
    return process


def stored(data: Path) -> dict[str, dict[str, object]]:
    counters = {}
    for path in sorted(data.glob("*.json")):
        counters[path.stem] = json.loads(path.read_text())
    return counters


async def wait_registered(admin: AdminClient, addresses: set[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        regions = (await admin.regions()).regions
        up = {r.address for r in regions if r.types.get("counter") == "up" and not r.draining}
        if addresses <= up:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"regions not all registered within {timeout} s: {regions}")
        await asyncio.sleep(0.1)


async def run(work: Path) -> int:
    data = work / "counters"
    data.mkdir()
    _, node = start_node(work)
    admin = AdminClient(node)
    taken: list[int] = []
    while len(taken) < 2 * REGIONS:
        if (port := free_port()) not in taken:
            taken.append(port)
    ports, http_ports = taken[:REGIONS], taken[REGIONS:]
    http_of = dict(zip(ports, http_ports))
    addresses = [f"127.0.0.1:{port}" for port in ports]
    https = [f"127.0.0.1:{http}" for http in http_ports]
    processes = {port: start_region(node, port, http_of[port], data, work) for port in ports}
    await wait_registered(admin, set(addresses))

    ids = [f"inc-{i:04d}" for i in range(INCREMENTS)]
    counter_of = {increment: f"counter-{i % COUNTERS:02d}" for i, increment in enumerate(ids)}
    next_index = 0
    retries = 0
    problems: list[str] = []
    midway = asyncio.Event()
    late = asyncio.Event()
    started = time.monotonic()

    async def sender() -> None:
        nonlocal next_index, retries
        while next_index < INCREMENTS:
            i = next_index
            next_index += 1
            if i == INCREMENTS // 2:
                midway.set()
            if i == INCREMENTS * 3 // 4:
                late.set()
            increment = ids[i]
            target = i % REGIONS
            while True:  # retried (same id) at the next region until one confirms it
                try:
                    status, _ = await http_request(
                        https[target], "POST", "/increment",
                        {"id": increment, "counter": counter_of[increment]}, timeout=30,
                    )
                    if status == 200:
                        break
                except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
                    pass
                retries += 1
                target = (target + 1) % REGIONS
                await asyncio.sleep(0.05)

    async def disturb() -> None:
        await midway.wait()
        shards = [f"counter-{c:02d}" for c in range(COUNTERS)]
        answer = await admin.rebalance("counter", shards, immediate=True)
        print(f"midway: rebalance of {len(shards)} counters: {len(answer.accepted)} accepted, "
              f"rejected {answer.rejected}", flush=True)
        port = ports[1]
        process = processes[port]
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 40)
        if code != 0:
            problems.append(f"region 127.0.0.1:{port} exited {code} after SIGTERM, not 0")
        print(f"midway: region 127.0.0.1:{port} exited {code} after SIGTERM; starting it again", flush=True)
        processes[port] = start_region(node, port, http_of[port], data, work)
        await wait_registered(admin, {f"127.0.0.1:{port}"})
        print(f"midway: region 127.0.0.1:{port} registered again", flush=True)
        # A crash: no drain, no leave. Its clients' increments fail and are
        # sent again elsewhere; asks for its counters wait for their new home.
        await late.wait()
        port = ports[2]
        processes[port].kill()
        await asyncio.to_thread(processes[port].wait, 40)
        print(f"late: region 127.0.0.1:{port} SIGKILLed under traffic; starting it again", flush=True)
        processes[port] = start_region(node, port, http_of[port], data, work)
        await wait_registered(admin, {f"127.0.0.1:{port}"})
        print(f"late: region 127.0.0.1:{port} registered again", flush=True)

    disturbing = asyncio.create_task(disturb())
    await asyncio.gather(*(sender() for _ in range(CONCURRENCY)))
    await disturbing
    sent_s = time.monotonic() - started

    deadline = time.monotonic() + 60
    while True:
        counters = stored(data)
        total = sum(int(c["count"]) for c in counters.values())  # type: ignore[call-overload]
        seen = Counter(i for c in counters.values() for i in c["ids"])  # type: ignore[attr-defined]
        if total == INCREMENTS and len(seen) == INCREMENTS and max(seen.values()) == 1:
            break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)

    totals: Counter[str] = Counter()
    for http in https:
        try:
            _, answer = await http_request(http, "GET", "/stats")
            totals.update({k: v for k, v in answer.items() if isinstance(v, int) and not isinstance(v, bool)})
        except (OSError, TimeoutError, ValueError):
            pass
    lost = [i for i in ids if seen[i] == 0]
    doubled = [i for i in ids if seen[i] > 1]
    misplaced = [i for name, c in counters.items() for i in c["ids"]  # type: ignore[attr-defined]
                 if counter_of.get(i) != name]
    inconsistent = [name for name, c in counters.items() if c["count"] != len(c["ids"])]  # type: ignore[arg-type]
    ok = not (lost or doubled or misplaced or inconsistent or problems) and total == INCREMENTS
    print(
        f"{'PASS' if ok else 'FAIL'}: {total} counted of {INCREMENTS} increments over "
        f"{len(counters)} counters and {REGIONS} regions (rebalance + restart midway, a SIGKILL late), "
        f"{len(lost)} lost, {len(doubled)} doubled; sent in {sent_s:.1f} s with {retries} client "
        f"retries; regions now up: {totals['asked']} asks, {totals['ask-failures']} failed by name, "
        f"{totals['duplicates']} duplicates ignored, {totals['fenced']} fenced",
        flush=True,
    )
    if lost:
        print(f"lost: {' '.join(lost)}")
    if doubled:
        print(f"doubled: {' '.join(doubled)}")
    if misplaced:
        print(f"counted on the wrong counter: {' '.join(misplaced)}")
    if inconsistent:
        print(f"count differs from ids: {' '.join(inconsistent)}")
    for problem in problems:
        print(problem)
    if not ok:
        for log in sorted(work.glob("*.log")):
            print(f"--- the last lines of {log.name}")
            print("\n".join(log.read_text(errors="replace").splitlines()[-20:]))
        print(f"logs, counters and the node's data kept in {work}")
    return 0 if ok else 1


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="python-counter-"))
    code = 1
    try:
        code = asyncio.run(run(work))
    finally:
        for process in children:
            if process.poll() is None:
                process.kill()
        for process in children:
            process.wait()
        if code == 0:
            shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
