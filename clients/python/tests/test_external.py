"""``external_allocation_strategy`` against a fallback that records its
calls, table by table (the TypeScript client's ``test/external.test.ts``)."""

import asyncio
import unittest
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, cast

from shardalloc_client.admin import AdminClient
from shardalloc_client.admin_types import Placement, Placements
from shardalloc_client.external import (
    ExternalAllocationController,
    ExternalAllocationState,
    LeastShard,
    external_allocation_strategy,
    least_shard,
)

CURRENT: Mapping[str, Sequence[str]] = {"a": ["1", "2", "42"], "b": ["3"]}


@dataclass
class Fallback:
    """Allocates to the first candidate, rebalances ``picks``; records the shards it allocated."""

    picks: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def allocate(
        self, shard_id: str, candidates: Sequence[str], current: Mapping[str, Sequence[str]]
    ) -> str:
        self.asked.append(shard_id)
        return candidates[0]

    def rebalance(self, current: Mapping[str, Sequence[str]], in_progress: Set[str]) -> list[str]:
        return list(self.picks)


@dataclass
class State:
    explicit_placements: Mapping[str, str]


def state(placements: Mapping[str, str]) -> ExternalAllocationState:
    return State(placements)


def no_warning(shard: str, target: str, candidates: Sequence[str]) -> None:
    raise AssertionError(f"no warning expected: {shard} {target} {candidates}")


class ExternalAllocationStrategyTests(unittest.TestCase):
    def test_allocates_an_explicitly_placed_shard_to_its_target_others_by_the_fallback(self) -> None:
        base = Fallback()
        placements = state({"42": "b"})
        strategy = external_allocation_strategy(base, lambda: placements, no_warning)
        self.assertEqual(strategy.allocate("42", ["a", "b"], CURRENT), "b")
        self.assertEqual(strategy.allocate("7", ["a", "b"], CURRENT), "a")
        self.assertEqual(base.asked, ["7"])

    def test_falls_back_and_warns_when_the_target_cannot_take_the_shard(self) -> None:
        warnings: list[str] = []
        strategy = external_allocation_strategy(
            Fallback(),
            lambda: state({"42": "gone"}),
            lambda shard, target, candidates: warnings.append(
                f"{shard}→{target} not in {','.join(candidates)}"
            ),
        )
        self.assertEqual(strategy.allocate("42", ["a", "b"], CURRENT), "a")
        self.assertEqual(warnings, ["42→gone not in a,b"])

    def test_the_default_warning_goes_to_the_log(self) -> None:
        strategy = external_allocation_strategy(Fallback(), lambda: state({"42": "gone"}))
        with self.assertLogs("shardalloc_client.external", "WARNING") as logs:
            self.assertEqual(strategy.allocate("42", ["a", "b"], CURRENT), "a")
        self.assertRegex(logs.output[0], r"shard 42 is placed on gone, which is not among .*\(a, b\)")

    def test_rebalances_shards_off_their_placement_and_the_fallback_picks_among_the_others(
        self,
    ) -> None:
        cases: list[tuple[str, dict[str, str], list[str], set[str], list[str]]] = [
            ("a shard away from its target moves", {"42": "b"}, [], set(), ["42"]),
            ("one at its target stays", {"3": "b"}, [], set(), []),
            ("one already moving is left alone", {"42": "b"}, [], {"42"}, []),
            ("a target that is no region moves nothing", {"42": "gone"}, [], set(), []),
            ("the fallback's picks join, but not placed shards", {"42": "b"}, ["1", "42"], set(),
             ["42", "1"]),
        ]
        for what, placements, picks, moving, want in cases:
            with self.subTest(what):
                held = state(placements)
                strategy = external_allocation_strategy(Fallback(picks), lambda: held)
                self.assertEqual(strategy.rebalance(CURRENT, moving), want)


if __name__ == "__main__":
    unittest.main()


class LeastShardFallback(unittest.TestCase):
    """The exported least-shard fallback, as the README passes it to
    ``external_allocation_strategy``."""

    def test_allocates_to_the_candidate_with_the_fewest_shards_the_first_on_a_tie(self) -> None:
        cases: list[tuple[dict[str, list[str]], list[str], str]] = [
            ({"a": ["1", "2"], "b": ["3"]}, ["a", "b"], "b"),
            ({"a": ["1"], "b": ["2"]}, ["a", "b"], "a"),
            ({"a": ["1"], "b": ["2"]}, ["b", "a"], "b"),
            ({"a": ["1", "2"]}, ["a", "c"], "c"),
        ]
        for current, candidates, expected in cases:
            with self.subTest(current=current, candidates=candidates):
                self.assertEqual(least_shard.allocate("new", candidates, current), expected)
        with self.assertRaisesRegex(ValueError, "no candidate region for shard new"):
            least_shard.allocate("new", [], {})

    def test_rebalances_from_the_most_to_the_least_loaded_within_its_limit(self) -> None:
        six = ["1", "2", "3", "4", "5", "6"]
        cases: list[tuple[dict[str, list[str]], set[str], list[str]]] = [
            ({"a": six, "b": []}, set(), ["1", "2", "3"]),
            ({"a": six[:4], "b": []}, set(), ["1", "2"]),
            ({"a": ["1", "2"], "b": ["3"]}, set(), []),
            ({"a": six, "b": []}, {"1", "2"}, ["3"]),
            ({"a": six, "b": []}, {"x", "y", "z"}, []),
            ({"a": ["1", "2", "3"]}, set(), []),
        ]
        for current, in_progress, expected in cases:
            with self.subTest(current=current, in_progress=in_progress):
                self.assertEqual(least_shard.rebalance(current, in_progress), expected)
        self.assertEqual(LeastShard(max_simultaneous=1).rebalance({"a": six[:4], "b": []}, set()), ["1"])
        with self.assertRaisesRegex(ValueError, "max_simultaneous is 0; it must be a whole number of at least 1"):
            LeastShard(max_simultaneous=0)

    def test_the_readme_places_explicitly_then_by_least_shard(self) -> None:
        state = State({"42": "a"})
        strategy = external_allocation_strategy(least_shard, lambda: state)
        current = {"a": ["1", "2"], "b": []}
        self.assertEqual(strategy.allocate("42", ["a", "b"], current), "a")
        self.assertEqual(strategy.allocate("7", ["a", "b"], current), "b")


class FakeAdmin:
    """The two admin calls the controller's placements use, in memory."""

    def __init__(self) -> None:
        self.written: dict[str, str] = {}

    async def set_placement(self, type_name: str, shard: str, target: str) -> None:
        self.written[shard] = target

    async def placements(self, type_name: str) -> Placements:
        return Placements([Placement(s, t) for s, t in self.written.items()])


class NumericShardIds(unittest.TestCase):
    def test_get_placements_finds_a_placement_set_with_a_numeric_id_by_that_number(self) -> None:
        async def run() -> None:
            controller = ExternalAllocationController(cast(AdminClient, FakeAdmin()), "Counter")
            await controller.set_placement(42, "node-b")
            placements = await controller.get_placements()
            self.assertEqual(placements.get(42), "node-b")
            self.assertEqual(placements[42], "node-b")
            self.assertEqual(placements["42"], "node-b")
            self.assertIn(42, placements)
            self.assertIsNone(placements.get(43))
            self.assertEqual(list(placements), ["42"])

        asyncio.run(run())
