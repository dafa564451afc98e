"""Host-free tests of the decision logic and of the strategy's copy of the
view: ``python3 -m unittest discover -s tests``.

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
from kept import KeptView, ViewError, mix  # noqa: E402
from latency import DEFAULT_CONFIG, StrategyError, allocate, parse_config, rebalance  # noqa: E402

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
    regions: List[Region]
    metric_names: List[str]
    signal: Optional[str] = None


@dataclass
class Homed:
    shards: List[int]
    hashes: List[int]
    regions: List[int]
    since: Optional[List[int]] = None  # contract 0.3's column; None: all 0


@dataclass
class ShardLoads:
    shards: List[int] = field(default_factory=list)
    loads: List[float] = field(default_factory=list)


@dataclass
class View:
    generation: int
    topology: Topology
    metrics: List[float]
    homed: Homed
    homeless: List[int] = field(default_factory=list)
    homeless_hashes: List[int] = field(default_factory=list)
    moving: List[int] = field(default_factory=list)
    pinned: List[int] = field(default_factory=list)
    loads: ShardLoads = field(default_factory=ShardLoads)


@dataclass
class Changes:
    generation: int
    retired: List[int] = field(default_factory=list)
    unhomed: List[int] = field(default_factory=list)
    arrived_homeless: List[int] = field(default_factory=list)
    arrived_hashes: List[int] = field(default_factory=list)
    topology: Optional[Topology] = None
    metrics: Optional[List[float]] = None
    homed: Homed = field(default_factory=lambda: Homed([], [], []))
    moving: List[int] = field(default_factory=list)
    settled: List[int] = field(default_factory=list)
    pinned: List[int] = field(default_factory=list)
    unpinned: List[int] = field(default_factory=list)
    loads: ShardLoads = field(default_factory=ShardLoads)


@dataclass
class Loads:
    """Shard counts per region and the metric matrix (row-major)."""

    counts: List[int]
    metrics: List[float]


def region(address, zone=None, **kwargs):
    labels = [] if zone is None else [Label("zone", zone)]
    return Region(address, labels=labels, **kwargs)


def topology(regions, metric_names=("latency_ms",)):
    return Topology(list(regions), list(metric_names))


def loads(counts, metrics):
    return Loads(list(counts), [float(m) for m in metrics])


def whole_view(topo, lds, moving=(), pinned=()):
    """``counts[i]`` shards homed on region i, with handles numbered region
    by region from 0 (a region's oldest shard has the lowest handle)."""
    regions = [r for r, count in enumerate(lds.counts) for _ in range(count)]
    shards = list(range(len(regions)))
    homed = Homed(shards, [h * 1000003 for h in shards], regions)
    return View(GEN, topo, lds.metrics, homed, moving=list(moving), pinned=list(pinned))


def kept(topo, lds, moving=(), pinned=()):
    view = KeptView()
    view.load(whole_view(topo, lds, moving, pinned))
    return view

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
                self.assertEqual(allocate(parse_config(text), kept(topo, lds), requester), want)


class ErrorsTest(unittest.TestCase):
    def test_table(self):
        config = DEFAULT_CONFIG
        cases = [
            ("no view", lambda: allocate(config, KeptView(), None), "no view yet"),
            ("no view (rebalance)", lambda: rebalance(config, KeptView()), "no view yet"),
            (
                "nothing allocatable",
                lambda: allocate(config, kept(topology([region("p", proxy_only=True)]), loads([0], [1])), 0),
                "no allocatable region",
            ),
            ("empty cluster", lambda: allocate(config, kept(topology([]), loads([], [])), None), "no allocatable region"),
        ]
        for name, call, want in cases:
            with self.subTest(name):
                with self.assertRaises(StrategyError) as raised:
                    call()
                self.assertEqual(str(raised.exception), want)


class RebalanceTest(unittest.TestCase):
    def test_table(self):
        three = topology([region("a"), region("b"), region("c")])
        # (case, topology, counts, in progress, config, want[, pinned])
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
            ("pinned shards are passed over", three, [2, 9, 1], [], "", [2, 4, 5, 7], [3, 6]),
            ("a region all pinned moves nothing", three, [4, 1, 2], [], "", [], [0, 1, 2, 3]),
        ]
        for name, topo, counts, in_progress, text, want, *pinned in cases:
            with self.subTest(name):
                lds = loads(counts, [1] * len(counts))
                got = rebalance(parse_config(text), kept(topo, lds, in_progress, *pinned))
                self.assertEqual(got, want)

    def test_logs_one_debug_record_when_it_moves_shards(self):
        records = []

        def capture(level, message, fields):
            records.append((level, message, list(fields)))

        two = topology([region("a"), region("b")])
        rebalance(DEFAULT_CONFIG, kept(two, loads([1, 1], [1, 1])), capture)
        self.assertEqual(records, [])
        rebalance(DEFAULT_CONFIG, kept(two, loads([1, 7], [1, 1])), capture)
        self.assertEqual(
            records,
            [("debug", "moving the oldest shards of the fullest region", [("from", "b"), ("count", "3"), ("gap", "6")])],
        )


class KeptViewTest(unittest.TestCase):
    def test_mix_is_the_splitmix64_finalizer(self):
        # shardalloc_guest::kept::mix(1), from the Rust SDK.
        self.assertEqual(mix(1), 0x5692161D100B05E5)
        self.assertEqual(mix(0), 0)

    def test_a_copy_kept_from_batches_equals_the_same_view_loaded_whole(self):
        three = topology([region("a"), region("b"), region("c")])
        view = kept(three, loads([3, 1, 0], [1, 2, 3]))
        # A hand-off of shard 0 from a to c, shard 3 retired, a new shard 4
        # on b, shard 1 pinned, shard 2 carrying load.
        view.apply(
            Changes(
                GEN + 1,
                retired=[3],
                unhomed=[0],
                homed=Homed([0, 4], [0, 4000012], [2, 1]),
                moving=[0],
                pinned=[1],
                loads=ShardLoads([2], [2.5]),
            )
        )
        checksum = view.apply(Changes(GEN + 2, settled=[0]))
        self.assertEqual(view.counts, [2, 1, 1])
        whole = View(
            GEN + 2,
            three,
            [1.0, 2.0, 3.0],
            Homed([1, 2, 4, 0], [1000003, 2000006, 4000012, 0], [0, 0, 1, 2]),
            pinned=[1],
            loads=ShardLoads([2], [2.5]),
        )
        fresh = KeptView()
        self.assertEqual(fresh.load(whole), checksum)
        self.assertEqual(view.unpinned_shards(0), [2])
        self.assertEqual(fresh.unpinned_shards(0), [2])

    def test_a_new_topology_keeps_each_regions_shards_under_its_new_index(self):
        view = kept(topology([region("a"), region("b")]), loads([2, 1], [1, 1]))
        view.apply(Changes(GEN + 1, retired=[2], topology=topology([region("c"), region("a")]), metrics=[1.0, 1.0]))
        self.assertEqual(view.counts, [0, 2])
        self.assertEqual(view.unpinned_shards(1), [0, 1])

    def test_a_batch_that_does_not_fit_the_copy_is_refused(self):
        view = kept(topology([region("a")]), loads([1], [1]))
        for name, batch in [
            ("a generation out of turn", Changes(GEN + 2)),
            ("a handle not in the view", Changes(GEN + 1, unhomed=[9])),
            ("a homed shard on a region that left", Changes(GEN + 1, topology=topology([region("b")]), metrics=[1.0])),
            ("a since column of another length", Changes(GEN + 1, homed=Homed([7], [7], [0], since=[1, 2]))),
        ]:
            with self.subTest(name):
                with self.assertRaises(ViewError):
                    view.apply(batch)

    def test_since_and_the_smoothed_metrics_of_contract_0_3_are_kept(self):
        view = kept(topology([region("a"), region("b")]), loads([0, 0], [3, 4]))
        batch = Changes(GEN + 1, homed=Homed([7], [7], [1], since=[1234]), metrics=[1.0, 2.0])
        batch.smoothed_metrics = [1.5, 2.5]
        view.apply(batch)
        self.assertEqual(view.shards[7].since, 1234)
        self.assertEqual(view.smoothed_metrics, [1.5, 2.5])
        self.assertEqual(view.counts, [0, 1])


if __name__ == "__main__":
    unittest.main()
