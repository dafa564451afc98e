"""Host-free tests of the decision logic: ``python3 -m unittest discover -s tests``.

The inputs mimic what componentize-py passes: dataclasses with snake_case
fields, ints, floats, lists, and enum members for region statuses."""

import enum
import json
import math
import os
import sys
import unittest
from dataclasses import dataclass, field
from typing import List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import latency  # noqa: E402
from latency import DEFAULT_CONFIG, StrategyError, allocate, parse_config, rebalance, view_of  # noqa: E402

NAN = math.nan
GEN = 7


# Stand-ins for the generated wit_world types (same names and fields).
class RegionStatus(enum.Enum):
    UP = 0
    JOINING = 1
    LEAVING = 2
    UNREACHABLE = 3


@dataclass
class Label:
    key: str
    value: str


@dataclass
class Region:
    address: str
    status: RegionStatus = RegionStatus.UP
    app_version: str = ""
    join_order: int = 0
    labels: List[Label] = field(default_factory=list)
    proxy_only: bool = False
    draining: bool = False


@dataclass
class Topology:
    generation: int
    regions: List[Region]
    metric_names: List[str]
    signal: Optional[str] = None


@dataclass
class Loads:
    generation: int
    shard_counts: List[int]
    metrics: List[float]


@dataclass
class ShardKey:
    id: str
    hash: int


@dataclass
class Allocations:
    hashes: List[int]
    in_progress: List[int]
    ids: Optional[List[str]] = None


def region(address, zone=None, **kwargs):
    labels = [] if zone is None else [Label("zone", zone)]
    return Region(address, labels=labels, **kwargs)


def topology(regions, metric_names=("latency_ms",), generation=GEN):
    return Topology(generation, list(regions), list(metric_names))


def loads(counts, metrics, generation=GEN):
    return Loads(generation, list(counts), [float(m) for m in metrics])


def allocations(total, in_progress=()):
    return Allocations([0] * total, list(in_progress))


SHARD = ShardKey("new-1", 123)

# eu-1 (5 shards, 30 ms), eu-2 (1 shard, 20 ms), us-1 (0 shards, 10 ms), proxy.
ZONES = topology([region("eu-1", "eu"), region("eu-2", "eu"), region("us-1", "us"), region("proxy", proxy_only=True)])
ZONE_LOADS = loads([5, 1, 0, 0], [30, 20, 10, 1])


class ConfigTest(unittest.TestCase):
    def test_defaults_and_valid_values(self):
        cases = [
            ("", DEFAULT_CONFIG),
            ("  ", DEFAULT_CONFIG),
            ("null", DEFAULT_CONFIG),
            ("{}", DEFAULT_CONFIG),
            ('{"metric":"rtt","zone_label":"dc"}', latency.Config(metric="rtt", zone_label="dc")),
            ('{"max_imbalance":1,"max_moves":4294967295}', latency.Config(max_imbalance=1, max_moves=4294967295)),
            ('{"max_moves":3.0}', latency.Config(max_moves=3)),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                self.assertEqual(parse_config(text), want)

    def test_every_refusal_names_the_key(self):
        cases = [
            ('{"lable":"x"}', 'unknown key "lable"'),
            ('{"zzz":1,"aaa":2}', 'unknown key "aaa"'),
            ('{"metric":""}', "metric must be a non-empty string"),
            ('{"metric":5}', "metric must be a non-empty string, got 5"),
            ('{"zone_label":null}', "zone_label must be a non-empty string, got null"),
            ('{"max_imbalance":0}', "max_imbalance must be an integer from 1 to 4294967295, got 0"),
            ('{"max_imbalance":"2"}', "max_imbalance must be an integer"),
            ('{"max_moves":1.5}', "max_moves must be an integer"),
            ('{"max_moves":4294967296}', "max_moves must be an integer"),
            ('{"max_moves":true}', "max_moves must be an integer"),
            ("[1]", "must be a JSON object"),
            ('"x"', "must be a JSON object"),
            ("{", "not valid JSON"),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                with self.assertRaises(StrategyError) as raised:
                    parse_config(text)
                message = str(raised.exception)
                self.assertTrue(message.startswith("invalid config: "), message)
                self.assertIn(want, message)

    def test_schema_is_json_and_lists_every_key(self):
        schema = json.loads(latency.CONFIG_SCHEMA)
        self.assertIs(schema["additionalProperties"], False)
        self.assertEqual(list(schema["properties"]), ["metric", "zone_label", "max_imbalance", "max_moves"])


class AllocateTest(unittest.TestCase):
    def test_table(self):
        # (case, topology, requester, loads, config, want)
        cases = [
            ("no requester: lowest latency overall", ZONES, None, ZONE_LOADS, "", 2),
            ("requester's zone first", ZONES, 0, ZONE_LOADS, "", 1),
            ("requester in another zone", ZONES, 2, ZONE_LOADS, "", 2),
            ("requester without the label", ZONES, 3, ZONE_LOADS, "", 2),
            ("another label: no zone filter", ZONES, 0, ZONE_LOADS, '{"zone_label":"dc"}', 2),
            (
                "zone without candidates: all candidates",
                topology([region("eu-1", "eu", draining=True), region("us-1", "us")]),
                0,
                loads([1, 1], [1, 9]),
                "",
                1,
            ),
            (
                "only up, not proxy, not draining",
                topology(
                    [
                        region("a", status=RegionStatus.JOINING),
                        region("b", status=RegionStatus.LEAVING),
                        region("c", status=RegionStatus.UNREACHABLE),
                        region("d", draining=True),
                        region("e", proxy_only=True),
                        region("f"),
                    ]
                ),
                None,
                loads([0, 0, 0, 0, 0, 9], [1, 1, 1, 1, 1, 99]),
                "",
                5,
            ),
            ("NaN is +infinity", ZONES, None, loads([5, 1, 0, 0], [30, 20, NAN, 1]), "", 1),
            ("all NaN: fewest shards", ZONES, None, loads([5, 1, 3, 0], [NAN, NAN, NAN, NAN]), "", 1),
            ("metric missing: fewest shards", ZONES, None, ZONE_LOADS, '{"metric":"cpu"}', 2),
            (
                "second metric column",
                topology([region("a"), region("b")], ["cpu", "latency_ms"]),
                None,
                loads([0, 0], [0.1, 50, 0.9, 40]),
                "",
                1,
            ),
            ("equal latency: fewer shards", ZONES, None, loads([5, 1, 2, 0], [10, 10, 10, 1]), "", 1),
            ("equal latency and shards: lower index", ZONES, None, loads([1, 1, 1, 0], [10, 10, 10, 1]), "", 0),
            ("fastest too full: latency decides within max_imbalance of the emptiest", ZONES, None, loads([5, 1, 0, 0], [1, 20, 10, 1]), "", 2),
            ("a larger max_imbalance lets the fastest in", ZONES, None, loads([5, 1, 0, 0], [1, 20, 10, 1]), '{"max_imbalance":5}', 0),
            ("exactly max_imbalance above the emptiest still counts", ZONES, None, loads([2, 1, 0, 0], [1, 20, 10, 1]), "", 0),
            ("in the zone, the floor is the zone's emptiest", ZONES, 1, loads([4, 1, 0, 0], [1, 20, 10, 1]), "", 1),
            ("in the zone, within max_imbalance", ZONES, 1, loads([3, 1, 0, 0], [1, 20, 10, 1]), "", 0),
        ]
        for name, topo, requester, lds, text, want in cases:
            with self.subTest(name):
                self.assertEqual(allocate(parse_config(text), view_of(topo), SHARD, requester, lds), want)


class ErrorsTest(unittest.TestCase):
    def test_table(self):
        view = view_of(ZONES)
        config = DEFAULT_CONFIG
        cases = [
            ("no topology", lambda: allocate(config, None, SHARD, None, ZONE_LOADS), "no topology yet"),
            ("no topology (rebalance)", lambda: rebalance(config, None, ZONE_LOADS, allocations(6)), "no topology yet"),
            (
                "stale loads",
                lambda: allocate(config, view, SHARD, None, loads([5, 1, 0, 0], [30, 20, 10, 1], 8)),
                "loads generation 8 does not match topology generation 7",
            ),
            (
                "stale loads (rebalance)",
                lambda: rebalance(config, view, loads([5, 1, 0, 0], [30, 20, 10, 1], 6), allocations(6)),
                "loads generation 6 does not match topology generation 7",
            ),
            (
                "nothing allocatable",
                lambda: allocate(config, view_of(topology([region("p", proxy_only=True)])), SHARD, 0, loads([0], [1])),
                "no allocatable region",
            ),
            ("empty cluster", lambda: allocate(config, view_of(topology([])), SHARD, None, loads([], [])), "no allocatable region"),
        ]
        for name, call, want in cases:
            with self.subTest(name):
                with self.assertRaises(StrategyError) as raised:
                    call()
                self.assertEqual(str(raised.exception), want)


class RebalanceTest(unittest.TestCase):
    def test_table(self):
        three = topology([region("a"), region("b"), region("c")])
        # (case, topology, counts, in progress, config, want)
        cases = [
            ("gap 2 is not > 2", three, [3, 1, 2], [], "", []),
            ("gap 3: one shard, the oldest of the fullest", three, [4, 1, 2], [], "", [0]),
            ("handles start after the regions before it", three, [2, 9, 1], [], "", [2, 3, 4, 5]),
            ("max_moves caps the round", three, [2, 30, 1], [], "", [2, 3, 4, 5, 6]),
            ("max_moves from the config", three, [2, 30, 1], [], '{"max_moves":2}', [2, 3]),
            ("max_imbalance from the config", three, [4, 1, 2], [], '{"max_imbalance":3}', []),
            ("fullest last: start is the sum of all before", three, [3, 1, 8], [], "", [4, 5, 6]),
            ("ties: lowest index is most and least", three, [5, 5, 1], [], "", [0, 1]),
            ("in progress: nothing", three, [9, 0, 0], [3], "", []),
            ("one candidate: nothing", topology([region("a"), region("b", draining=True)]), [0, 9], [], "", []),
            (
                "non-candidates count for the handles, not for most",
                topology([region("d", draining=True), region("p", proxy_only=True), region("a"), region("b")]),
                [20, 0, 7, 1],
                [],
                "",
                [20, 21, 22],
            ),
            ("empty cluster", topology([]), [], [], "", []),
        ]
        for name, topo, counts, in_progress, text, want in cases:
            with self.subTest(name):
                lds = loads(counts, [1] * len(counts))
                got = rebalance(parse_config(text), view_of(topo), lds, allocations(sum(counts), in_progress))
                self.assertEqual(got, want)

    def test_logs_one_debug_record_when_it_moves_shards(self):
        records = []

        def capture(level, message, fields):
            records.append((level, message, list(fields)))

        view = view_of(topology([region("a"), region("b")]))
        rebalance(DEFAULT_CONFIG, view, loads([1, 1], [1, 1]), allocations(2), capture)
        self.assertEqual(records, [])
        rebalance(DEFAULT_CONFIG, view, loads([1, 7], [1, 1]), allocations(8), capture)
        self.assertEqual(
            records,
            [("debug", "moving the oldest shards of the fullest region", [("from", "b"), ("count", "3"), ("gap", "6")])],
        )


if __name__ == "__main__":
    unittest.main()
