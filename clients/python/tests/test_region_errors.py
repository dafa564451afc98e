"""The region errors' kinds, fields and messages, and the shard id rule.

``test_a_timed_out_drain_and_leave_names_at_most_ten_shards_and_counts_the_rest``
is the Rust test of ``client/src/region/error.rs``; the others pin the
texts of every kind, the plain forms of durations and shard ids they use,
and the class of every kind.
"""

import unittest

from shardalloc_client.region.ask import Replier
from shardalloc_client import ShardallocError
from shardalloc_client.region import errors
from shardalloc_client.region.errors import (
    MAX_SHARD_ID_BYTES,
    AskError,
    DeliveryError,
    RegionError,
    SendError,
    check_shard,
)


class RegionErrorTests(unittest.TestCase):
    def test_a_timed_out_drain_and_leave_names_at_most_ten_shards_and_counts_the_rest(
        self,
    ) -> None:
        shards = [f"s{i}" for i in range(1, 13)]
        error = RegionError.drain_and_leave_timed_out(20_000, shards, leave_asked=True)
        self.assertEqual(
            str(error),
            "the region did not drain and leave within 20 s: it still ran 12 shards (s1, s2, s3, s4, "
            "s5, s6, s7, s8, s9, s10 and 2 more), stopped there and then, and the node had not "
            "confirmed its leave",
        )
        one = RegionError.drain_and_leave_timed_out(1_000, ["42"], leave_asked=False)
        self.assertIn("it still ran 1 shard (42)", str(one))

    def test_every_kind_reads_as_the_rust_display_text(self) -> None:
        cases = [
            (RegionError.config("no node"), "Config", "invalid region configuration: no node"),
            (
                RegionError.no_runtime(),
                "NoRuntime",
                "a region must be started inside a Tokio runtime",
            ),
            (
                RegionError.invalid_shard("", "a shard id is empty"),
                "InvalidShard",
                "invalid shard id '': a shard id is empty",
            ),
            (
                RegionError.shard_refused("s1", "too many shards"),
                "ShardRefused",
                "the node refused shard s1: too many shards",
            ),
            (RegionError.refused("stale"), "Refused", "the node refused the region: stale"),
            (RegionError.left(), "Left", "the region has left the cluster"),
            (RegionError.shut_down(), "ShutDown", "the region has shut down"),
            (
                RegionError.leave_timed_out(60_000),
                "LeaveTimedOut",
                "the node did not confirm the leave within 60 s; the region stopped its shards "
                "and closed anyway",
            ),
        ]
        for error, kind, text in cases:
            with self.subTest(kind=kind):
                self.assertEqual(error.kind, kind)
                self.assertEqual(str(error), text)
        send_cases = [
            (
                SendError.buffer_full("s1", 3),
                "BufferFull",
                "the buffer of shard s1 is full (3 messages)",
            ),
            (
                SendError.total_buffer_full(5),
                "TotalBufferFull",
                "the region's buffers are full (5 messages over all shards)",
            ),
            (
                SendError.invalid_shard('a"b\n', "bad"),
                "InvalidShard",
                "invalid shard id 'a\"b\\n': bad",
            ),
            (SendError.stopped(), "Stopped", "the region has stopped; it takes no more messages"),
        ]
        for send_error, send_kind, text in send_cases:
            with self.subTest(kind=send_kind):
                self.assertEqual(send_error.kind, send_kind)
                self.assertEqual(str(send_error), text)

    def test_durations_read_in_words(self) -> None:
        cases = [(380, "380 ms"), (1_000, "1 s"), (1_500, "1.5 s"), (1_001, "1.001 s"), (0, "0 ms")]
        for ms, text in cases:
            with self.subTest(ms=ms):
                error = RegionError.drain_and_leave_timed_out(ms, [], True)
                self.assertIn(f"within {text}:", str(error))

    def test_every_kind_is_its_own_class_under_its_family_and_shardalloc_error(self) -> None:
        refused = DeliveryError.shard_refused("s1", "too many shards")
        cases: list[tuple[Exception, type[Exception], type[Exception]]] = [
            (RegionError.config("x"), RegionError, errors.ConfigError),
            (RegionError.no_runtime(), RegionError, errors.NoRuntimeError),
            (RegionError.invalid_shard("", "empty"), RegionError, errors.InvalidShardError),
            (RegionError.shard_refused("s", "limit"), RegionError, errors.ShardRefusedError),
            (RegionError.refused("token"), RegionError, errors.RegionRefusedError),
            (RegionError.left(), RegionError, errors.RegionLeftError),
            (RegionError.shut_down(), RegionError, errors.RegionShutDownError),
            (RegionError.leave_timed_out(5), RegionError, errors.LeaveTimedOutError),
            (RegionError.drain_and_leave_timed_out(5, [], True), RegionError,
             errors.DrainAndLeaveTimedOutError),
            (SendError.buffer_full("s", 1), SendError, errors.BufferFullError),
            (SendError.total_buffer_full(1), SendError, errors.TotalBufferFullError),
            (SendError.invalid_shard("", "empty"), SendError, errors.InvalidShardSendError),
            (SendError.stopped(), SendError, errors.RegionStoppedSendError),
            (DeliveryError.attempts_exhausted("s", "b", 3, "reset"), DeliveryError,
             errors.AttemptsExhaustedError),
            (DeliveryError.deadline_passed("s", "b", 9, "reset"), DeliveryError,
             errors.DeadlinePassedError),
            (refused, DeliveryError, errors.DeliveryRefusedError),
            (DeliveryError.region_stopped("s"), DeliveryError, errors.RegionStoppedError),
            (AskError.send("s", SendError.stopped()), AskError, errors.AskNotTakenError),
            (AskError.timeout("s", 5), AskError, errors.AskTimeoutError),
            (AskError.not_delivered(refused), AskError, errors.AskNotDeliveredError),
            (AskError.failed("s", "fenced"), AskError, errors.AskFailedError),
        ]
        for error, family, kind in cases:
            with self.subTest(kind=kind.__name__):
                self.assertIs(type(error), kind)
                self.assertIsInstance(error, family)
                self.assertIsInstance(error, ShardallocError)
                self.assertEqual(repr(error), f"{kind.__name__}({error})")
        self.assertEqual(len({type(error) for error, _, _ in cases}), len(cases), "a class per kind")

    def test_errors_are_equal_by_kind_and_fields(self) -> None:
        self.assertEqual(SendError.buffer_full("s1", 3), SendError.buffer_full("s1", 3))
        self.assertNotEqual(SendError.buffer_full("s1", 3), SendError.buffer_full("s2", 3))
        self.assertNotEqual(SendError.total_buffer_full(3), SendError.buffer_full("s1", 3))
        self.assertEqual(
            RegionError.drain_and_leave_timed_out(5, ("a",), True),
            RegionError.drain_and_leave_timed_out(5, ["a"], True),
        )
        self.assertEqual(len({RegionError.left(), RegionError.left()}), 1)

    def test_an_asks_errors_read_as_the_rust_ask_error(self) -> None:
        stopped = SendError.stopped()
        refused = DeliveryError.shard_refused("s1", "too many shards")
        cases = [
            (AskError.send("s1", stopped), str(stopped)),
            (AskError.timeout("s1", 1_500), "no answer from shard s1 within 1.5 s"),
            (AskError.not_delivered(refused), str(refused)),
            (AskError.failed("s1", "fenced"), "shard s1 did not answer: fenced"),
        ]
        for error, text in cases:
            self.assertEqual(str(error), text)
        self.assertEqual(AskError.not_delivered(refused).kind, "NotDelivered")
        self.assertEqual(AskError.not_delivered(refused).shard, "s1")

    def test_a_replier_answers_once(self) -> None:
        outcomes: list[tuple[object, AskError | None]] = []
        replier = Replier("s1", 5_000, lambda reply, error: outcomes.append((reply, error)))
        self.assertTrue(0 < replier.remaining_ms() <= 5_000)
        replier.reply(1)
        replier.reply(2)
        replier.fail_with("late")
        self.assertEqual(outcomes, [(1, None)])
        self.assertTrue(replier.answered)

    def test_a_shard_id_is_1_to_256_bytes_of_utf_8(self) -> None:
        self.assertIsNone(check_shard("s"))
        self.assertIsNone(check_shard("é" * (MAX_SHARD_ID_BYTES // 2)))
        self.assertEqual(check_shard(""), "a shard id is empty")
        self.assertEqual(
            check_shard("é" * 129), "a shard id of 258 bytes is longer than 256 bytes"
        )
        self.assertIsNotNone(check_shard("\ud800"))


if __name__ == "__main__":
    unittest.main()
