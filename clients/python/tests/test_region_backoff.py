"""The reconnect delays, as the Rust client's ``region/driver.rs`` tests them:
doubling with jitter, and restarted only by a session that stayed registered
a while (issue 41: a node that registers the region and then sends a
malformed frame was retried about seven times a second)."""

import unittest

from shardalloc_client.region.driver import HEALTHY_SESSION_MS, _Backoff


class BackoffTest(unittest.TestCase):
    def test_the_delays_double_to_the_maximum_with_jitter_in_the_upper_half(self) -> None:
        backoff = _Backoff(100, 5000)
        for step in [100, 200, 400, 800, 1600, 3200, 5000, 5000]:
            delay = backoff.next()
            self.assertTrue(step / 2 <= delay <= step, f"{delay} outside [{step / 2}, {step}]")

    def test_only_a_session_that_stayed_registered_restarts_the_delays(self) -> None:
        backoff = _Backoff(100, 5000)
        for round_ in range(5):
            at = round_ * 1000
            backoff.registered(at)
            delay = backoff.closed(at + 50)
            step = 100 * 2**round_
            self.assertTrue(step / 2 <= delay <= step, f"round {round_}: {delay}")
        backoff.registered(100_000)
        backoff.registered(105_000)
        self.assertLessEqual(backoff.closed(100_000 + HEALTHY_SESSION_MS), 100)
        backoff.next()
        self.assertGreater(backoff.closed(200_000), 100, "a session that never registered restarts nothing")


if __name__ == "__main__":
    unittest.main()
