"""``external_allocation_strategy`` against a fallback that records its
calls, table by table (the TypeScript client's ``test/external.test.ts``)."""

import unittest
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from shardalloc_client.external import ExternalAllocationState, external_allocation_strategy

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
