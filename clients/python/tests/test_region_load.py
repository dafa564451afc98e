"""Tests of :class:`LoadMeter`: the five tests of the Rust client's
``client/src/region/load.rs``, under the same names."""

import unittest

from shardalloc_client.region.load import (
    MAX_LOAD_WINDOW_MS,
    MAX_METERED_SHARDS,
    MIN_LOAD_WINDOW_MS,
    LoadMeter,
)
from shardalloc_client.wire import LoadReport


def loads(report: LoadReport) -> list[tuple[str, float]]:
    """The report's named shards and their loads, in order."""
    return [(entry.shard, entry.load) for entry in report.shards]


def every(_shard: str) -> bool:
    """Every shard runs here."""
    return True


def must(report: LoadReport | None) -> LoadReport:
    """The report, which must be there."""
    assert report is not None, "a report was expected"
    return report


class LoadMeterTests(unittest.TestCase):
    """The Rust ``load.rs`` tests."""

    def test_work_becomes_a_rate_over_the_window_and_gauges_add_to_it(self) -> None:
        meter = LoadMeter()
        self.assertIsNone(meter.report(5_000, every, 10), "never used: no report")
        meter.record("a", 30.0, 1_000)
        meter.record("a", 10.0, 1_200)
        meter.record("b", 5.0, 1_300)
        meter.set("c", 7.5, 1_400)
        meter.set("a", 1.0, 1_400)
        report = must(meter.report(3_000, every, 10))
        self.assertEqual(report.window_ms, 2_000)
        self.assertEqual(loads(report), [("a", 21.0), ("c", 7.5), ("b", 2.5)])
        self.assertEqual(report.rest, 0.0)
        # The next window: work starts from nothing, the gauges stand.
        meter.record("b", 100.0, 3_500)
        report = must(meter.report(4_000, every, 10))
        self.assertEqual(
            (report.window_ms, loads(report)), (1_000, [("b", 100.0), ("c", 7.5), ("a", 1.0)])
        )

    def test_the_top_shards_are_named_and_the_others_summed(self) -> None:
        meter = LoadMeter()
        for shard, units in [("a", 1.0), ("b", 4.0), ("c", 3.0), ("d", 2.0), ("e", 3.0)]:
            meter.record(shard, units, 0)
        report = must(meter.report(1_000, every, 2))
        self.assertEqual(loads(report), [("b", 4.0), ("c", 3.0)], "ties broken by id")
        self.assertEqual(report.rest, 6.0)

    def test_shards_that_do_not_run_here_are_left_out_and_their_gauges_forgotten(self) -> None:
        meter = LoadMeter()
        meter.record("here", 2.0, 0)
        meter.record("gone", 50.0, 0)
        meter.set("gone", 9.0, 0)
        report = must(meter.report(1_000, lambda shard: shard == "here", 10))
        self.assertEqual((loads(report), report.rest), ([("here", 2.0)], 0.0))
        self.assertEqual(meter.gauges(), {}, "a stopped shard's gauge is dropped")

    def test_a_window_too_short_goes_on_and_one_too_long_is_dropped(self) -> None:
        meter = LoadMeter()
        meter.record("a", 1.0, 0)
        self.assertIsNone(meter.report(MIN_LOAD_WINDOW_MS - 1, every, 10))
        meter.record("a", 1.0, 400)
        report = must(meter.report(MIN_LOAD_WINDOW_MS, every, 10))
        self.assertEqual(loads(report), [("a", 4.0)], "both records, over the longer window")

        meter.record("a", 1.0, 1_000)
        late = MIN_LOAD_WINDOW_MS + MAX_LOAD_WINDOW_MS + 1
        self.assertIsNone(meter.report(late, every, 10), "a window past the limit is dropped")
        meter.record("a", 3.0, late + 10)
        report = must(meter.report(late + 1_000, every, 10))
        self.assertEqual(
            (report.window_ms, loads(report)), (1_000, [("a", 3.0)]), "a new window began"
        )

    def test_bad_numbers_are_ignored_and_shards_past_the_limit_go_into_the_rest(self) -> None:
        meter = LoadMeter()
        for bad in [float("nan"), float("inf"), -1.0, 0.0]:
            meter.record("a", bad, 0)
        self.assertIsNone(meter.since, "nothing recorded")
        for i in range(MAX_METERED_SHARDS):
            meter.record(f"s{i}", 1.0, 0)
        meter.record("one-too-many", 1_000.0, 0)
        report = must(meter.report(1_000, every, 1))
        self.assertEqual(len(report.shards), 1)
        self.assertEqual(report.rest, float(MAX_METERED_SHARDS - 1) + 1_000.0)


if __name__ == "__main__":
    unittest.main()
