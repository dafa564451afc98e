"""The Python runner of the region core's specification: every scenario in
``contracts/region-core/*.txt`` (the format is in that folder's README), run
against :class:`RegionCore` with the literal actions compared. The Rust and
TypeScript clients run the same files, so a rule of the core is written
once."""

import dataclasses
import json
import re
import typing
import unittest
from pathlib import Path
from typing import Any, TypeAlias

from shardalloc_client import wire
from shardalloc_client.region.actions import (
    AbandonStop,
    Action,
    Deliver,
    Forward,
    Known,
    Publish,
    Reconnect,
    Send,
    Start,
    Stop,
    Undelivered,
)
from shardalloc_client.region.core import CoreConfig, RegionCore
from shardalloc_client.region.errors import DeliveryError, RegionError, SendError
from shardalloc_client.region.load import LoadMeter

SCENARIOS = Path(__file__).resolve().parent / "../../../contracts/region-core"
"""The scenario files."""

Json: TypeAlias = Any
Outcome: TypeAlias = tuple[str, Json]


def to_serde(value: object) -> Json:
    """A dataclass variant in serde's JSON shape: ``"V"`` without fields,
    ``{"V": {...}}`` with them."""
    assert dataclasses.is_dataclass(value) and not isinstance(value, type)
    fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    name = type(value).__name__
    return {name: fields} if fields else name


def _plain(value: object) -> Json:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, typing.Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def node_message(value: Json) -> wire.NodeMessage:
    """A node message from serde's JSON shape."""
    name, fields = (value, {}) if isinstance(value, str) else next(iter(value.items()))
    [variant] = [v for v in typing.get_args(wire.NodeMessage) if v.__name__ == name]
    message: wire.NodeMessage = variant(**fields)
    return message


def error_json(error: RegionError | SendError | DeliveryError) -> Json:
    """A refusal in serde's JSON shape, with the fields its kind has."""
    fields: dict[str, tuple[str, ...]] = {
        "BufferFull": ("shard", "limit"),
        "TotalBufferFull": ("limit",),
        "InvalidShard": ("shard", "reason"),
        "DrainAndLeaveTimedOut": ("bound_ms", "shards", "leave_asked"),
        "AttemptsExhausted": ("shard", "to", "attempts", "reason"),
        "DeadlinePassed": ("shard", "to", "waited_ms", "reason"),
        "ShardRefused": ("shard", "reason"),
        "RegionStopped": ("shard",),
        "Stopped": (),
    }
    names = fields[error.kind]
    if not names:
        return error.kind
    return {error.kind: {name: _plain(getattr(error, name)) for name in names}}


def render(action: Action[str]) -> Outcome:
    """An action as a scenario line's kind and value."""
    if isinstance(action, Send):
        return ("send", to_serde(action.message))
    if isinstance(action, Start):
        return ("start", {"shard": action.shard, "epoch": action.epoch})
    if isinstance(action, Stop):
        return ("stop", action.shard)
    if isinstance(action, AbandonStop):
        return ("abandon-stop", action.shard)
    if isinstance(action, Deliver):
        return ("deliver", {"shard": action.shard, "message": action.message})
    if isinstance(action, Forward):
        return ("forward", {"to": action.to, "shard": action.shard, "message": action.message})
    if isinstance(action, Undelivered):
        return ("undelivered", {"shard": action.shard, "message": action.message, "error": error_json(action.error)})
    if isinstance(action, Publish):
        return ("publish", to_serde(action.update))
    assert isinstance(action, Reconnect)
    return ("reconnect", action.reason)


DEFAULTS: dict[str, Json] = {
    "address": "a",
    "incarnation": 7,
    "roles": [],
    "app_version": "1.0",
    "labels": {},
    "proxy_only": False,
    "shard_buffer_limit": 3,
    "total_buffer_limit": 5,
    "stop_deadline_ms": 500,
    "home_retry_ms": 1000,
    "response_timeout_ms": 10000,
    "load_report_top": 10,
    "forward_attempts": 3,
    "forward_deadline_ms": 5000,
    "max_lookups_in_flight": 256,
}
"""The scenarios' default configuration, changed by a ``config`` line."""


class Subject:
    """One region of a scenario: its core and its load meter."""

    def __init__(self, changes: dict[str, Json], address: str | None) -> None:
        c = dict(DEFAULTS)
        for key, value in changes.items():
            assert key in c, f"no config field {key!r}"
            c[key] = value
        if address is not None:
            c["address"] = address
        registration = wire.Register(
            address=c["address"],
            incarnation=c["incarnation"],
            roles=tuple(c["roles"]),
            app_version=c["app_version"],
            labels=c["labels"],
            proxy_only=c["proxy_only"],
            sequence=0,
        )
        self.address: str = c["address"]
        self.core: RegionCore[str] = RegionCore(
            CoreConfig(
                registration=registration,
                shard_buffer_limit=c["shard_buffer_limit"],
                total_buffer_limit=c["total_buffer_limit"],
                stop_deadline_ms=c["stop_deadline_ms"],
                home_retry_ms=c["home_retry_ms"],
                response_timeout_ms=c["response_timeout_ms"],
                forward_attempts=c["forward_attempts"],
                forward_deadline_ms=c["forward_deadline_ms"],
                max_lookups_in_flight=c["max_lookups_in_flight"],
            )
        )
        self.meter = LoadMeter()
        self.top: int = c["load_report_top"]


def verb_and_value(text: str) -> tuple[str, Json]:
    """Splits ``verb [json]`` into the verb and the parsed JSON (None when absent)."""
    verb, _, rest = text.strip().partition(" ")
    return verb, (json.loads(rest) if rest.strip() else None)


class World:
    """The regions of the scenario under way."""

    def __init__(self) -> None:
        self.changes: dict[str, Json] = {}
        self.regions: dict[str, Subject] = {}
        self.first: str | None = None

    def add(self, address: str | None = None) -> None:
        subject = Subject(self.changes, address)
        if self.first is None:
            self.first = subject.address
        self.regions[subject.address] = subject

    def subject(self, text: str, where: str) -> tuple[Subject, str]:
        """The region a line names (``@b``), or the first; the rest of the text."""
        if not self.regions:
            self.add()
        rest = text.lstrip()
        name = self.first
        if rest.startswith("@"):
            name, _, rest = rest[1:].partition(" ")
        assert name is not None and name in self.regions, f"{where}: no region {name!r}"
        return self.regions[name], rest


def step(world: World, text: str, where: str) -> list[Outcome]:
    """Runs one step; its outcomes."""
    time, _, rest = text.partition(" ")
    now = int(time)
    subject, rest = world.subject(rest, where)
    event, value = verb_and_value(rest)
    core = subject.core

    def actions(list_: list[Action[str]]) -> list[Outcome]:
        return [render(a) for a in list_]

    try:
        if event == "connected":
            return actions(core.connected(now))
        if event == "disconnected":
            return actions(core.disconnected(now, value))
        if event == "node":
            return actions(core.on_message(node_message(value), now))
        if event == "tick":
            metrics = value or {}
            report = lambda runs: subject.meter.report(now, runs, subject.top)  # noqa: E731
            return actions(core.tick_with_load(now, lambda: metrics, report))
        if event == "send":
            return actions(core.send(value["shard"], value["message"], now))
        if event == "inbound":
            return actions(core.inbound(value["shard"], value["message"], now))
        if event == "stop-finished":
            return actions(core.stop_finished(value, now))
        if event == "forward-failed":
            return actions(
                core.forward_failed(value["shard"], value["to"], list(value["messages"]), value["reason"], now)
            )
        if event == "request-home":
            lookup = core.request_home(value, now)
            return [("known", lookup.home)] if isinstance(lookup, Known) else actions(lookup.actions)
        if event == "leave":
            return actions(core.leave(now))
        if event == "shutdown":
            return actions(core.shutdown(now))
        if event == "drain-and-leave":
            return actions(core.drain_and_leave(value, now))
        if event == "request-drain":
            return actions(core.request_drain(value, now))
        if event == "record-load":
            subject.meter.record(value["shard"], value["units"], now)
            return []
        if event == "set-load":
            subject.meter.set(value["shard"], value["rate"], now)
            return []
    except (SendError, RegionError) as error:
        return [("error", error_json(error))]
    raise AssertionError(f"{where}: no event {event!r}")


def query(world: World, text: str, where: str) -> Json:
    """Answers one query."""
    subject, rest = world.subject(text, where)
    name, argument = verb_and_value(rest)
    core = subject.core
    answers: dict[str, Any] = {
        "registered": core.is_registered,
        "fenced": core.is_fenced,
        "lease-until": core.lease_until,
        "left": core.has_left,
        "idle": core.is_idle,
        "running": core.running,
        "buffered": core.buffered,
        "epoch-of": lambda: core.epoch_of(argument),
        "cached-home": lambda: core.cached_home(argument),
        "delivers-locally": lambda: core.delivers_locally(argument),
    }
    if name == "departure":
        outcome = core.departure()
        if outcome is None:
            return None
        return "Ok" if outcome.error is None else error_json(outcome.error)
    assert name in answers, f"{where}: no query {name!r}"
    return answers[name]()


def show(outcomes: list[Outcome]) -> str:
    return "\n".join(f"  {k}" if v is None else f"  {k} {json.dumps(v)}" for k, v in outcomes)


def run_scenario(case: unittest.TestCase, file: str, lines: list[tuple[int, str]]) -> None:
    """Runs one scenario's lines (after its ``scenario`` line)."""
    world = World()
    index = 0
    while index < len(lines):
        number, raw = lines[index]
        where = f"{file}:{number}"
        index += 1
        written: list[str] = []
        while index < len(lines) and lines[index][1].startswith("  "):
            written.append(lines[index][1])
            index += 1
        if raw.startswith("config "):
            world.changes = json.loads(raw[len("config ") :])
        elif raw.startswith("regions "):
            for name in raw[len("regions ") :].split():
                world.add(name)
        elif raw.startswith("?"):
            assert len(written) == 1, f"{where}: a query needs one `= VALUE` line"
            equals, expected = verb_and_value(written[0])
            assert equals == "=", f"{where}: `= VALUE` expected"
            case.assertEqual(query(world, raw[1:], where), expected, f"{where}: {raw}")
        elif re.match(r"\d", raw):
            expected_outcomes = [verb_and_value(line) for line in written]
            got = step(world, raw, where)
            case.assertEqual(
                got, expected_outcomes, f"{where}: {raw}\nexpected:\n{show(expected_outcomes)}\ngot:\n{show(got)}"
            )
        else:
            raise AssertionError(f"{where}: not a line of the format: {raw}")


def scenarios() -> list[tuple[str, str, list[tuple[int, str]]]]:
    """Every scenario: its file, its name and its numbered lines."""
    found: list[tuple[str, str, list[tuple[int, str]]]] = []
    for path in sorted(SCENARIOS.glob("*.txt")):
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not raw.strip() or raw.startswith("#"):
                continue
            if raw.startswith("scenario "):
                found.append((path.name, raw[len("scenario ") :].strip(), []))
            else:
                assert found, f"{path.name}:{number}: a line before the first scenario"
                found[-1][2].append((number, raw))
    return found


class RegionCoreScenarios(unittest.TestCase):
    """Every scenario of the specification, each a subtest."""

    def test_every_scenario(self) -> None:
        found = scenarios()
        self.assertTrue(found, f"no scenario files in {SCENARIOS}")
        for file, name, lines in found:
            with self.subTest(f"{file}: {name}"):
                run_scenario(self, file, lines)


if __name__ == "__main__":
    unittest.main()
