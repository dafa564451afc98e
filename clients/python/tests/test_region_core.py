"""Table-driven tests of :class:`RegionCore`: each step is (time, event, the
exact actions expected).

A port of the Rust client's ``client/src/region/core_tests.rs``: every
test there is here under the same name (with unittest's ``test_`` prefix),
with the same steps and the same literal action lists.
"""

import unittest
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias, Union

from shardalloc_client import region_actions as up
from shardalloc_client import wire
from shardalloc_client.region_actions import (
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
    Update,
)
from shardalloc_client.region_core import CoreConfig, Departed, RegionCore
from shardalloc_client.region_errors import RegionError, SendError
from shardalloc_client.region_load import LoadMeter

Msg: TypeAlias = str
A: TypeAlias = Action[Msg]


def config() -> CoreConfig:
    """Region "a", incarnation 7; small limits so they are easy to reach."""
    return CoreConfig(
        registration=wire.Register(
            address="a",
            incarnation=7,
            roles=(),
            app_version="1.0",
            labels={},
            proxy_only=False,
            sequence=0,
        ),
        shard_buffer_limit=3,
        total_buffer_limit=5,
        stop_deadline_ms=500,
        home_retry_ms=1_000,
        response_timeout_ms=10_000,
    )


class Ev:
    """The events a step feeds the core (the Rust ``Ev``)."""

    @dataclass(frozen=True)
    class Connected:
        pass

    @dataclass(frozen=True)
    class Disconnected:
        pass

    @dataclass(frozen=True)
    class Node:
        message: wire.NodeMessage

    @dataclass(frozen=True)
    class Tick:
        pass

    @dataclass(frozen=True)
    class Send:
        shard: str
        message: Msg

    @dataclass(frozen=True)
    class SendFails:
        shard: str
        message: Msg
        error: SendError

    @dataclass(frozen=True)
    class Inbound:
        shard: str
        message: Msg

    @dataclass(frozen=True)
    class StopFinished:
        shard: str

    @dataclass(frozen=True)
    class ForwardFailed:
        shard: str
        to: str
        messages: tuple[Msg, ...]

    @dataclass(frozen=True)
    class RequestHome:
        shard: str

    @dataclass(frozen=True)
    class Leave:
        pass

    @dataclass(frozen=True)
    class Shutdown:
        pass

    @dataclass(frozen=True)
    class DrainAndLeave:
        """``drain_and_leave`` with this bound, in ms."""

        bound: int


Event: TypeAlias = Union[
    Ev.Connected,
    Ev.Disconnected,
    Ev.Node,
    Ev.Tick,
    Ev.Send,
    Ev.SendFails,
    Ev.Inbound,
    Ev.StopFinished,
    Ev.ForwardFailed,
    Ev.RequestHome,
    Ev.Leave,
    Ev.Shutdown,
    Ev.DrainAndLeave,
]

Connected = Ev.Connected()
Disconnected = Ev.Disconnected()
Tick = Ev.Tick()
Leave = Ev.Leave()
Shutdown = Ev.Shutdown()

_check = unittest.TestCase()
_check.maxDiff = None


def cpu() -> dict[str, float]:
    return {"cpu": 0.5}


def run(core: RegionCore[Msg], steps: Sequence[tuple[int, Event, Sequence[A]]]) -> None:
    """Feeds each step's event to the core at its time and checks the
    actions it returns against the step's, exactly."""
    for index, (now, event, expected) in enumerate(steps):
        where = f"step {index} at {now} ms"
        got: list[A]
        match event:
            case Ev.Connected():
                got = core.connected(now)
            case Ev.Disconnected():
                got = core.disconnected(now, "connection reset")
            case Ev.Node(message):
                got = core.on_message(message, now)
            case Ev.Tick():
                got = core.tick(now, cpu)
            case Ev.Send(shard, message):
                got = core.send(shard, message, now)
            case Ev.SendFails(shard, message, error):
                with _check.assertRaises(SendError, msg=where) as raised:
                    core.send(shard, message, now)
                _check.assertEqual(raised.exception, error, where)
                got = []
            case Ev.Inbound(shard, message):
                got = core.inbound(shard, message, now)
            case Ev.StopFinished(shard):
                got = core.stop_finished(shard, now)
            case Ev.ForwardFailed(shard, to, messages):
                got = core.forward_failed(shard, to, list(messages), now)
            case Ev.RequestHome(shard):
                lookup = core.request_home(shard, now)
                if isinstance(lookup, Known):
                    got = [Publish(up.HomeChanged(shard=shard, home=lookup.home))]
                else:
                    got = lookup.actions
            case Ev.Leave():
                got = core.leave(now)
            case Ev.Shutdown():
                got = core.shutdown(now)
            case Ev.DrainAndLeave(bound):
                got = core.drain_and_leave(bound, now)
        _check.assertEqual(got, list(expected), where)


def register(sequence: int) -> A:
    return Send(replace(config().registration, sequence=sequence))


def registered(sequence: int) -> Event:
    """``Registered`` with a lease of 1,000 ms and heartbeats every 400 ms."""
    return Ev.Node(
        wire.Registered(incarnation=7, sequence=sequence, lease_ms=1_000, heartbeat_interval_ms=400)
    )


def ack(sequence: int) -> Event:
    return Ev.Node(wire.HeartbeatAck(incarnation=7, sequence=sequence, lease_ms=1_000))


def heartbeat(sequence: int) -> A:
    return Send(wire.Heartbeat(sequence=sequence, metrics={"cpu": 0.5}))


def get_home(shard: str) -> A:
    return Send(wire.GetShardHome(shard=shard))


def home(shard: str, home: str) -> Event:
    return Ev.Node(wire.ShardHome(shard=shard, home=home))


def home_at(shard: str, home: str, epoch: int) -> Event:
    return Ev.Node(wire.ShardHomeEpoch(shard=shard, home=home, epoch=epoch))


def stop(shard: str) -> A:
    return Stop(shard)


def deliver(shard: str, message: Msg) -> A:
    return Deliver(shard, message)


def forward(to: str, shard: str, message: Msg) -> A:
    return Forward(to, shard, message)


def publish(update: Update) -> A:
    return Publish(update)


def started(shard: str) -> list[A]:
    return started_at(shard, 0)


def started_at(shard: str, epoch: int) -> list[A]:
    return [
        Start(shard, epoch),
        publish(up.ShardStarted(shard=shard, epoch=epoch)),
        publish(up.HomeChanged(shard=shard, home="a")),
    ]


def changed(shard: str, home: str) -> A:
    return publish(up.HomeChanged(shard=shard, home=home))


def stopped(shard: str) -> A:
    return publish(up.ShardStopped(shard=shard))


def registered_core() -> RegionCore[Msg]:
    """Connected at 0, registered at 5: lease until 1,000, heartbeats due from 405."""
    core = RegionCore[Msg](config())
    run(
        core,
        [
            (0, Connected, [register(1)]),
            (5, registered(1), [publish(up.Registered(incarnation=7))]),
        ],
    )
    _check.assertEqual(core.lease_until(), 1_000)
    return core


def with_(actions: list[A], more: Iterable[A]) -> list[A]:
    return [*actions, *more]


def node(message: wire.NodeMessage) -> Event:
    return Ev.Node(message)


def drain(draining: bool) -> A:
    return Send(wire.Drain(draining=draining))


def hand_off(shard: str) -> Event:
    return Ev.Node(wire.HandOff(shard=shard))


def shard_stopped(shard: str) -> A:
    return Send(wire.ShardStopped(shard=shard))


LEAVE: A = Send(wire.Leave())


class RegionCoreTests(unittest.TestCase):
    maxDiff = None

    def test_registration_heartbeats_and_renewal(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                (0, Tick, []),
                (0, Connected, [register(1)]),
                (3, Tick, []),
                (5, registered(1), [publish(up.Registered(incarnation=7))]),
                (404, Tick, []),
                (405, Tick, [heartbeat(2)]),
                (500, ack(2), []),
                (804, Tick, []),
                (805, Tick, [heartbeat(3)]),
            ],
        )
        self.assertTrue(core.is_registered())
        self.assertEqual(
            core.lease_until(), 1_405, "the ack of heartbeat 2 counts from its send at 405"
        )

    def test_the_lease_counts_from_the_acknowledged_heartbeats_send_after_lost_acks(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (405, Tick, [heartbeat(2)]),
                (805, Tick, [heartbeat(3)]),
                # The acks of 2 arrive late, after 3's: 3 renews from 805;
                # 2 is older than 3 and renews nothing.
                (990, ack(3), []),
                (995, ack(2), []),
            ],
        )
        self.assertEqual(
            core.lease_until(), 1_805, "from heartbeat 3's send, not from the ack's arrival at 990"
        )
        # An unknown sequence renews nothing either.
        run(core, [(996, ack(99), [])])
        self.assertEqual(core.lease_until(), 1_805)

    def test_a_region_fences_when_its_lease_runs_out_and_not_before(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.Send("s1", "m1"), [get_home("s1")]),
                (20, home("s1", "a"), with_(started("s1"), [deliver("s1", "m1")])),
                (30, Ev.Send("s2", "x"), [get_home("s2")]),
                (40, home("s2", "b"), [changed("s2", "b"), forward("b", "s2", "x")]),
                # Every ack is lost from here on.
                (405, Tick, [heartbeat(2)]),
                (805, Tick, [heartbeat(3)]),
                (999, Tick, []),
                (999, Ev.Send("s1", "m2"), [deliver("s1", "m2")]),
                (1_000, Tick, [stop("s1"), publish(up.Fenced())]),
                # Cached homes are forgotten: both shards buffer, nothing is asked while fenced.
                (1_001, Ev.Send("s1", "m3"), []),
                (1_002, Ev.Send("s2", "y"), []),
                (1_010, Ev.StopFinished("s1"), [stopped("s1")]),
            ],
        )
        self.assertTrue(core.is_fenced())
        self.assertEqual(core.running(), [])
        self.assertEqual(core.buffered(), 2)
        run(
            core,
            [
                # A renewal that still ends in the past (405 + 1,000) does not lift the fence.
                (1_410, ack(2), []),
                (
                    1_420,
                    ack(3),
                    [publish(up.LeaseRegained()), get_home("s1"), get_home("s2")],
                ),
                (1_430, home("s1", "a"), with_(started("s1"), [deliver("s1", "m3")])),
                (1_440, home("s2", "b"), [changed("s2", "b"), forward("b", "s2", "y")]),
            ],
        )
        self.assertFalse(core.is_fenced())
        self.assertEqual(core.lease_until(), 1_805)

    def test_a_lease_running_out_while_disconnected_fences_at_the_next_event(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (20, Disconnected, [publish(up.Disconnected(reason="connection reset"))]),
                (500, Ev.Inbound("s1", "m"), [deliver("s1", "m")]),
                (1_000, Ev.Inbound("s1", "n"), [stop("s1"), publish(up.Fenced())]),
                # ShardHome naming this region while fenced starts nothing.
                (1_001, Connected, [register(2)]),
                (1_002, home("s1", "a"), []),
            ],
        )
        self.assertEqual(core.buffered(), 1)

    def test_messages_buffer_until_the_home_is_known_and_flush_in_order(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                # Not connected: buffered, asked once registered.
                (0, Ev.Send("s1", "1"), []),
                (1, Ev.Send("s1", "2"), []),
                (2, Connected, [register(1)]),
                (3, Ev.Send("s1", "3"), []),
                (5, registered(1), [publish(up.Registered(incarnation=7)), get_home("s1")]),
                (
                    6,
                    home("s1", "b"),
                    [
                        changed("s1", "b"),
                        forward("b", "s1", "1"),
                        forward("b", "s1", "2"),
                        forward("b", "s1", "3"),
                    ],
                ),
                (7, Ev.Send("s1", "4"), [forward("b", "s1", "4")]),
            ],
        )
        self.assertEqual(core.buffered(), 0)

    def test_a_fence_found_by_a_refused_send_stops_the_shards_at_the_next_call(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home_at("s1", "a", 3), started_at("s1", 3)),
                (20, Ev.Send("s2", "1"), [get_home("s2")]),
                (20, Ev.Send("s2", "2"), []),
                (20, Ev.Send("s2", "3"), []),
                # The lease ran out at 1,000: this send finds it, and is refused.
                (1_000, Ev.SendFails("s2", "4", SendError.buffer_full("s2", 3)), []),
            ],
        )
        self.assertTrue(core.is_fenced())
        # The fence's stop was not lost with the refusal: the next call does it first.
        self.assertEqual(core.stop_finished("none", 1_001), [stop("s1"), publish(up.Fenced())])
        self.assertEqual(core.stop_finished("none", 1_002), [], "done once")

    def test_buffers_are_bounded_per_shard_and_in_total(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                (0, Ev.Send("s1", "1"), []),
                (0, Ev.Send("s1", "2"), []),
                (0, Ev.Send("s1", "3"), []),
                (0, Ev.SendFails("s1", "4", SendError.buffer_full("s1", 3)), []),
                (0, Ev.Send("s2", "1"), []),
                (0, Ev.Send("s2", "2"), []),
                (0, Ev.SendFails("s3", "1", SendError.total_buffer_full(5)), []),
                (
                    0,
                    Ev.SendFails("", "1", SendError.invalid_shard("", "a shard id is empty")),
                    [],
                ),
            ],
        )
        self.assertEqual(core.buffered(), 5)
        long = "x" * 257
        with self.assertRaises(SendError) as raised:
            core.send(long, "1", 0)
        self.assertIn("257 bytes is longer than 256 bytes", str(raised.exception))

    def test_hand_off_of_a_running_shard_stops_it_before_reporting_shard_stopped(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (
                    20,
                    node(wire.BeginHandOff(shard="s1")),
                    [Send(wire.BeginHandOffAck(shard="s1"))],
                ),
                # From now on local sends wait; the home request is answered when the hand-off ends.
                (21, Ev.Send("s1", "late-1"), [get_home("s1")]),
                (22, Ev.Send("s1", "late-2"), []),
                # A message another region sent before acknowledging is still delivered here.
                (23, Ev.Inbound("s1", "early"), [deliver("s1", "early")]),
                (30, node(wire.HandOff(shard="s1")), [stop("s1")]),
                (
                    40,
                    Ev.StopFinished("s1"),
                    [Send(wire.ShardStopped(shard="s1")), stopped("s1")],
                ),
                (
                    50,
                    home("s1", "b"),
                    [
                        changed("s1", "b"),
                        forward("b", "s1", "late-1"),
                        forward("b", "s1", "late-2"),
                    ],
                ),
            ],
        )
        self.assertEqual(core.running(), [])

    def test_hand_off_of_a_shard_not_running_here_is_reported_at_once(self) -> None:
        core = registered_core()
        run(
            core,
            [(10, node(wire.HandOff(shard="s9")), [Send(wire.ShardStopped(shard="s9"))])],
        )

    def test_a_stop_past_its_deadline_is_abandoned_and_reported(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (100, node(wire.HandOff(shard="s1")), [stop("s1")]),
                (399, Tick, []),
                (
                    600,
                    Tick,
                    [
                        AbandonStop("s1"),
                        Send(wire.ShardStopped(shard="s1")),
                        stopped("s1"),
                        heartbeat(2),
                    ],
                ),
                # The late report of the abandoned stop changes nothing.
                (700, Ev.StopFinished("s1"), []),
            ],
        )

    def test_a_hand_off_stop_finishing_while_disconnected_is_reported_after_reregistering(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (20, Ev.Send("s2", "m"), [get_home("s2")]),
                (30, node(wire.HandOff(shard="s1")), [stop("s1")]),
                (40, Disconnected, [publish(up.Disconnected(reason="connection reset"))]),
                (50, Ev.StopFinished("s1"), [stopped("s1")]),
                # Same incarnation, new sequence; the lost home request is asked again.
                (60, Connected, [register(2)]),
                (
                    70,
                    registered(2),
                    [
                        publish(up.Registered(incarnation=7)),
                        Send(wire.ShardStopped(shard="s1")),
                        get_home("s2"),
                    ],
                ),
            ],
        )
        self.assertEqual(
            core.lease_until(), 1_060, "renewed from the second registration's send at 60"
        )

    def test_not_registered_registers_again_once_with_the_same_incarnation(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.Send("s1", "m"), [get_home("s1")]),
                (20, node(wire.NotRegistered()), [register(2)]),
                (21, node(wire.NotRegistered()), []),
                # An answer to an older registration is not this one's.
                (25, registered(1), []),
                (30, registered(2), [publish(up.Registered(incarnation=7)), get_home("s1")]),
            ],
        )

    def test_refusals_and_silence_hang_up(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                (0, Connected, [register(1)]),
                (
                    5,
                    node(wire.RegisterRefused(reason="incarnation 7 is older")),
                    [
                        publish(up.Refused(reason="incarnation 7 is older")),
                        Reconnect("the node refused the registration: incarnation 7 is older"),
                    ],
                ),
                (6, Disconnected, [publish(up.Disconnected(reason="connection reset"))]),
                (100, Connected, [register(2)]),
                (10_099, Tick, []),
                (10_100, Tick, [Reconnect("the node has been silent for 10000 ms")]),
            ],
        )
        core = registered_core()
        run(core, [(50, node(wire.ShuttingDown()), [Reconnect("the node is shutting down")])])

    def test_unanswered_home_requests_are_repeated(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.Send("s1", "m"), [get_home("s1")]),
                (11, Ev.Send("s1", "n"), []),
                (405, Tick, [heartbeat(2)]),
                (406, ack(2), []),
                (1_009, Tick, [heartbeat(3)]),
                (1_010, Tick, [get_home("s1")]),
            ],
        )

    def test_refused_shards_drop_their_buffer(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.Send("s1", "m"), [get_home("s1")]),
                (11, Ev.Send("s1", "n"), []),
                (
                    20,
                    node(wire.ShardRefused(shard="s1", reason="too many shards")),
                    [publish(up.ShardRefused(shard="s1", reason="too many shards", dropped=2))],
                ),
            ],
        )
        self.assertEqual(core.buffered(), 0)

    def test_home_requests_answer_from_the_cache_or_ask_once(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.RequestHome("s1"), [get_home("s1")]),
                (11, Ev.RequestHome("s1"), []),
                (20, home("s1", "b"), [changed("s1", "b")]),
                # Known: answered from the cache (shown as a HomeChanged by the table runner).
                (30, Ev.RequestHome("s1"), [changed("s1", "b")]),
            ],
        )
        self.assertEqual(core.cached_home("s1"), "b")

    def test_messages_from_other_regions_for_shards_not_running_here_are_routed_again(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.Inbound("s1", "m"), [get_home("s1")]),
                (20, home("s1", "c"), [changed("s1", "c"), forward("c", "s1", "m")]),
                (30, Ev.Inbound("s1", "n"), [forward("c", "s1", "n")]),
            ],
        )

    def test_a_running_shard_homed_elsewhere_is_stopped_without_a_report(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (20, home("s1", "b"), [stop("s1"), changed("s1", "b")]),
                (30, Ev.Send("s1", "m"), [forward("b", "s1", "m")]),
                (40, Ev.StopFinished("s1"), [stopped("s1")]),
            ],
        )

    def test_a_shard_starts_at_the_epoch_the_node_names_and_a_greater_one_stops_the_stale_run(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home_at("s1", "a", 7), started_at("s1", 7)),
                (15, home_at("s1", "a", 7), []),
                (20, home_at("s1", "a", 9), [stop("s1")]),
                (40, Ev.StopFinished("s1"), [stopped("s1")]),
                # The home did not change: the stale run is replaced, not moved.
                (50, home_at("s1", "a", 9), started_at("s1", 9)[:2]),
            ],
        )
        self.assertEqual(core.epoch_of("s1"), 9)
        self.assertEqual(core.epoch_of("s2"), None)
        run(core, [(60, home_at("s1", "b", 10), [stop("s1"), changed("s1", "b")])])
        self.assertEqual(core.epoch_of("s1"), None, "a stopping run has no epoch to write with")

    def test_failed_forwards_go_back_to_the_front_of_the_buffer_and_the_home_is_asked_again_later(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "b"), [changed("s1", "b")]),
                (20, Ev.Send("s1", "1"), [forward("b", "s1", "1")]),
                (20, Ev.Send("s1", "2"), [forward("b", "s1", "2")]),
                (20, Ev.ForwardFailed("s1", "b", ("1", "2")), []),
                (30, Ev.Send("s1", "3"), []),
                (405, Tick, [heartbeat(2)]),
                (406, ack(2), []),
                (1_019, Tick, [heartbeat(3)]),
                (1_020, Tick, [get_home("s1")]),
                (
                    1_030,
                    home("s1", "c"),
                    [
                        changed("s1", "c"),
                        forward("c", "s1", "1"),
                        forward("c", "s1", "2"),
                        forward("c", "s1", "3"),
                    ],
                ),
            ],
        )

    def test_leaving_sends_leave_then_stops_everything_at_leave_done(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                # Asked before registering: sent after.
                (0, Leave, []),
                (1, Connected, [register(1)]),
                (5, registered(1), [publish(up.Registered(incarnation=7)), LEAVE]),
                (6, Leave, []),
                (10, home("s1", "a"), started("s1")),
                (20, node(wire.LeaveDone()), [stop("s1"), publish(up.Left())]),
                (30, node(wire.NotRegistered()), []),
                (40, Ev.StopFinished("s1"), [stopped("s1")]),
            ],
        )
        self.assertTrue(core.has_left() and core.is_idle())

    def test_a_not_registered_overtaking_leave_done_ends_the_leave_too(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (20, Leave, [LEAVE]),
                (30, node(wire.NotRegistered()), [stop("s1"), publish(up.Left())]),
                (40, node(wire.LeaveDone()), []),
            ],
        )
        self.assertTrue(core.has_left())

    def test_shutting_down_stops_every_shard_and_starts_none(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (11, home("s2", "a"), started("s2")),
                (20, Shutdown, [stop("s1"), stop("s2")]),
                (30, home("s3", "a"), []),
                (40, Ev.StopFinished("s1"), [stopped("s1")]),
            ],
        )
        self.assertEqual(core.running(), ["s2"])
        run(core, [(50, Ev.StopFinished("s2"), [stopped("s2")])])
        self.assertTrue(core.is_idle())

    def test_a_drain_request_is_sent_once_now_or_after_registering(self) -> None:
        core = RegionCore[Msg](config())
        self.assertEqual(core.request_drain(True, 0), [])
        run(
            core,
            [
                (1, Connected, [register(1)]),
                (
                    5,
                    registered(1),
                    [publish(up.Registered(incarnation=7)), Send(wire.Drain(draining=True))],
                ),
            ],
        )
        self.assertEqual(core.request_drain(False, 6), [Send(wire.Drain(draining=False))])

    def test_drain_and_leave_drains_hands_off_then_leaves_once_no_shard_runs_here(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (11, home("s2", "a"), started("s2")),
                (20, Ev.DrainAndLeave(300), [drain(True)]),
                # Asked twice: nothing more.
                (21, Ev.DrainAndLeave(300), []),
                (30, hand_off("s1"), [stop("s1")]),
                (40, Ev.StopFinished("s1"), [shard_stopped("s1"), stopped("s1")]),
                # s2 still runs: no leave yet.
                (50, Tick, []),
                (60, hand_off("s2"), [stop("s2")]),
                # The last shard stopped: leave at once.
                (70, Ev.StopFinished("s2"), [shard_stopped("s2"), stopped("s2"), LEAVE]),
                (80, Tick, []),
            ],
        )
        self.assertEqual(core.departure(), None, "not done before the node lets the region go")
        run(core, [(90, node(wire.LeaveDone()), [publish(up.Left())])])
        self.assertEqual(core.departure(), Departed())
        self.assertTrue(core.has_left() and core.is_idle())
        # Nothing happens past the bound once done.
        run(core, [(390, Tick, [])])
        self.assertEqual(core.departure(), Departed())

    def test_drain_and_leave_asked_before_registering_drains_and_leaves_after(self) -> None:
        core = RegionCore[Msg](config())
        run(
            core,
            [
                (0, Ev.DrainAndLeave(900), []),
                (1, Connected, [register(1)]),
                # Nothing runs here: the drain and the leave go out together.
                (5, registered(1), [publish(up.Registered(incarnation=7)), drain(True), LEAVE]),
                # The node removes the region before LeaveDone is on disk.
                (10, node(wire.NotRegistered()), [publish(up.Left())]),
            ],
        )
        self.assertEqual(core.departure(), Departed())

    def test_a_stalled_drain_leaves_at_half_the_bound(self) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (20, Ev.DrainAndLeave(380), [drain(True)]),
                # No other region takes s1: nothing moves.
                (209, Tick, []),
                (210, Tick, [LEAVE]),
                # The node lets the region go (no region can take s1).
                (220, node(wire.LeaveDone()), [stop("s1"), publish(up.Left())]),
            ],
        )
        self.assertEqual(core.departure(), Departed())
        self.assertFalse(core.is_idle(), "s1 is still stopping")
        run(core, [(230, Ev.StopFinished("s1"), [stopped("s1")])])
        self.assertTrue(core.is_idle())

    def test_past_its_bound_drain_and_leave_stops_what_runs_undrains_and_names_what_was_left(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, home("s1", "a"), started("s1")),
                (11, home("s2", "a"), started("s2")),
                (20, Ev.DrainAndLeave(380), [drain(True)]),
                (210, Tick, [LEAVE]),
                (399, Tick, []),
                # No LeaveDone by the bound: give up.
                (400, Tick, [drain(False), stop("s1"), stop("s2")]),
                # Nothing starts any more.
                (410, home("s3", "a"), []),
            ],
        )
        outcome = core.departure()
        assert outcome is not None and outcome.error is not None, f"no outcome: {outcome!r}"
        error = outcome.error
        self.assertEqual(
            error,
            RegionError.drain_and_leave_timed_out(380, ["s1", "s2"], leave_asked=True),
        )
        self.assertEqual(error.kind, "DrainAndLeaveTimedOut")
        text = str(error)
        self.assertTrue("within 380ms" in text and "2 shards (s1, s2)" in text, text)
        self.assertIn("the node had not confirmed its leave", text)
        run(
            core,
            [
                (420, Ev.StopFinished("s1"), [stopped("s1")]),
                (430, Ev.StopFinished("s2"), [stopped("s2")]),
            ],
        )
        self.assertTrue(core.is_idle() and not core.has_left())

    def test_a_drain_and_leave_that_never_reaches_the_node_says_so(self) -> None:
        core = RegionCore[Msg](config())
        run(core, [(0, Ev.DrainAndLeave(100), []), (50, Tick, []), (100, Tick, [])])
        outcome = core.departure()
        assert outcome is not None and outcome.error is not None, f"no outcome: {outcome!r}"
        error = outcome.error
        self.assertIn(
            "it ran no shard any more, but it had not reached the node to ask to leave", str(error)
        )
        self.assertEqual((error.kind, error.leave_asked), ("DrainAndLeaveTimedOut", False))

    def test_a_registered_region_leaves_a_node_silent_for_three_heartbeats(self) -> None:
        # Registered at 5 ms with heartbeats every 400 ms: 1,200 ms of silence
        # end the session, long before the response timeout (10 s) would.
        def reconnects(actions: list[A]) -> list[A]:
            return [a for a in actions if isinstance(a, Reconnect)]

        core = registered_core()
        self.assertEqual(reconnects(core.tick(1_204, dict)), [])
        self.assertEqual(
            reconnects(core.tick(1_205, dict)),
            [Reconnect("the node has been silent for 1200 ms")],
        )

    def test_a_load_report_follows_each_heartbeat_and_names_only_shards_running_here(
        self,
    ) -> None:
        core = registered_core()
        run(
            core,
            [
                (10, Ev.RequestHome("s"), [get_home("s")]),
                (20, home("s", "a"), started("s")),
                (30, Ev.RequestHome("t"), [get_home("t")]),
                (40, home("t", "b"), [changed("t", "b")]),
            ],
        )
        meter = LoadMeter()
        meter.record("s", 12.0, 0)
        meter.record("t", 99.0, 0)
        meter.set("u", 5.0, 0)

        asked = 0

        def tick(now: int) -> list[A]:
            def load(runs: Callable[[str], bool]) -> wire.LoadReport | None:
                nonlocal asked
                asked += 1
                return meter.report(now, runs, 10)

            return core.tick_with_load(now, cpu, load)

        self.assertEqual(tick(100), [], "no heartbeat due: the meter is not asked")
        self.assertEqual(asked, 0, "no heartbeat due: the meter is not asked")
        report = wire.LoadReport(window_ms=405, shards=(), rest=0.0)
        self.assertEqual(
            tick(405),
            [heartbeat(2)],
            f"a window shorter than the protocol's shortest goes on: {report!r} is not sent",
        )
        run(core, [(450, ack(2), [])])
        meter.record("s", 3.0, 500)
        self.assertEqual(
            tick(1_000),
            [
                heartbeat(3),
                Send(
                    wire.Load(
                        window_ms=1_000,
                        shards=(wire.ShardLoad(shard="s", load=15.0),),
                        rest=0.0,
                    )
                ),
            ],
            "t runs on b and u nowhere: only s is reported",
        )


class HandOffOrdering(unittest.TestCase):
    """Three regions' cores, a scripted coordinator and an in-order network:
    region "a" sends to shard "s" while it moves from "b" to "c" (the Rust
    ``hand_off_ordering`` module)."""

    def test_one_senders_messages_arrive_in_order_across_a_hand_off(self) -> None:
        sim = Sim()
        sim.send("1")
        sim.settle()
        sim.send("2")
        # "3" is in b's inbox when the hand-off begins; "4".."6" are sent
        # after a acknowledged, while the shard stops and moves.
        sim.send("3")
        sim.begin_hand_off()
        sim.step_region("a")
        sim.send("4")
        sim.settle()
        sim.send("5")
        sim.send("6")
        sim.settle()
        expected = [
            ("b", "start s"),
            ("b", "1"),
            ("b", "2"),
            ("b", "3"),
            ("b", "stop s"),
            ("c", "start s"),
            ("c", "4"),
            ("c", "5"),
            ("c", "6"),
        ]
        self.assertEqual(sim.log, expected)
        self.assertEqual(sim.cores["b"].running(), [])
        self.assertEqual(sim.cores["c"].running(), ["s"])

    def test_messages_sent_while_the_new_home_does_not_know_it_yet_keep_their_order(
        self,
    ) -> None:
        sim = Sim()
        sim.send("1")
        sim.settle()
        sim.begin_hand_off()
        sim.settle()
        sim.send("2")  # a: buffered, asked
        sim.node_step()  # the node answers "c"
        sim.step_region("a")  # a forwards "2" to c, which does not know it is the home yet
        sim.send("3")  # straight to c
        sim.step_region("c")  # c buffers "2" and "3" and asks
        sim.send("4")
        sim.settle()
        sim.send("5")
        sim.settle()
        self.assertEqual(
            sim.log,
            [
                ("b", "start s"),
                ("b", "1"),
                ("b", "stop s"),
                ("c", "start s"),
                ("c", "2"),
                ("c", "3"),
                ("c", "4"),
                ("c", "5"),
            ],
        )


REGIONS = ("a", "b", "c")


class Sim:
    """Three regions' cores, a coordinator reduced to one shard, and an
    in-order network."""

    def __init__(self) -> None:
        self.cores: dict[str, RegionCore[Msg]] = {}
        self.inboxes: dict[str, deque[tuple[str, Msg]]] = {r: deque() for r in REGIONS}
        """Per receiver: (shard, message) in arrival order."""
        self.to_region: dict[str, deque[wire.NodeMessage]] = {r: deque() for r in REGIONS}
        """Node → region, in order."""
        self.to_node: deque[tuple[str, wire.RegionMessage]] = deque()
        """Region → node, in order."""
        self.home: str | None = "b"
        self.moving = False
        self.acks = 0
        self.parked: list[str] = []
        self.stopping: list[tuple[str, str]] = []
        """Stops the applications have not finished yet."""
        self.log: list[tuple[str, str]] = []
        """What the applications saw: (region, event)."""
        self.now = 0
        for address in REGIONS:
            base = config()
            core = RegionCore[Msg](
                replace(
                    base,
                    registration=replace(base.registration, address=address),
                    shard_buffer_limit=100,
                    total_buffer_limit=100,
                )
            )
            done = core.connected(0)
            self.cores[address] = core
            self.perform(address, done)
        self.settle()

    def perform(self, region: str, actions: list[A]) -> None:
        for action in actions:
            match action:
                case Send(message):
                    self.to_node.append((region, message))
                case Start(shard):
                    self.log.append((region, f"start {shard}"))
                case Stop(shard):
                    self.stopping.append((region, shard))
                case Deliver(message=message):
                    self.log.append((region, message))
                case Forward(to, shard, message):
                    if to not in REGIONS:
                        raise AssertionError(f"{to} is not a known region")
                    self.inboxes[to].append((shard, message))
                case Publish():
                    pass
                case _:
                    raise AssertionError(f"unexpected {action!r}")

    def node(self, sender: str, message: wire.RegionMessage) -> None:
        """The coordinator's side of the protocol, reduced to one shard."""

        def reply(to: str, answer: wire.NodeMessage) -> None:
            self.to_region[to].append(answer)

        match message:
            case wire.Register():
                reply(
                    sender,
                    wire.Registered(
                        incarnation=message.incarnation,
                        sequence=message.sequence,
                        lease_ms=60_000,
                        heartbeat_interval_ms=10_000,
                    ),
                )
            case wire.GetShardHome(shard=shard):
                if self.home is not None and not self.moving:
                    reply(sender, wire.ShardHome(shard=shard, home=self.home))
                else:
                    self.parked.append(sender)
            case wire.BeginHandOffAck(shard=shard):
                self.acks += 1
                if self.acks == len(REGIONS):
                    assert self.home is not None, "a home"
                    reply(self.home, wire.HandOff(shard=shard))
            case wire.ShardStopped(shard=shard):
                self.home = "c"
                self.moving = False
                parked, self.parked = self.parked, []
                for waiting in parked:
                    reply(waiting, wire.ShardHome(shard=shard, home="c"))
            case _:
                raise AssertionError(f"unexpected {message!r}")

    def begin_hand_off(self) -> None:
        self.moving = True
        self.acks = 0
        for region in REGIONS:
            self.to_region[region].append(wire.BeginHandOff(shard="s"))

    def step_region(self, region: str) -> bool:
        """One step of one region: its inbox first (as the driver drains it
        before any node message), then one node message."""
        inbound = list(self.inboxes[region])
        self.inboxes[region].clear()
        progressed = bool(inbound)
        for shard, message in inbound:
            self.perform(region, self.cores[region].inbound(shard, message, self.now))
        if self.to_region[region]:
            answer = self.to_region[region].popleft()
            self.perform(region, self.cores[region].on_message(answer, self.now))
            progressed = True
        return progressed

    def node_step(self) -> bool:
        """The node handles everything sent to it so far."""
        progressed = False
        while self.to_node:
            sender, message = self.to_node.popleft()
            self.node(sender, message)
            progressed = True
        return progressed

    def settle(self) -> None:
        """Runs until nothing moves: node messages, then regions, then stops."""
        while True:
            self.now += 1
            progressed = self.node_step()
            for region in REGIONS:
                progressed |= self.step_region(region)
            stopping, self.stopping = self.stopping, []
            for region, shard in stopping:
                self.log.append((region, f"stop {shard}"))
                self.perform(region, self.cores[region].stop_finished(shard, self.now))
                progressed = True
            if not progressed:
                return

    def send(self, message: Msg) -> None:
        self.perform("a", self.cores["a"].send("s", message, self.now))


if __name__ == "__main__":
    unittest.main()
