// The reconnect delays, as the Rust client's `region/driver.rs` tests
// them: doubling with jitter, and restarted only by a session that stayed
// registered a while (issue 41: a node that registers the region and then
// sends a malformed frame was retried about seven times a second).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Backoff, HEALTHY_SESSION_MS } from '../src/region/region.js';

test('the delays double to the maximum with jitter in the upper half', () => {
  const backoff = new Backoff(100, 5000);
  for (const step of [100, 200, 400, 800, 1600, 3200, 5000, 5000]) {
    const delay = backoff.next();
    assert.ok(delay >= step / 2 && delay <= step, `${delay} outside [${step / 2}, ${step}]`);
  }
});

test('only a session that stayed registered restarts the delays', () => {
  const backoff = new Backoff(100, 5000);
  for (let round = 0; round < 5; round++) {
    const at = round * 1000;
    backoff.registered(at);
    const delay = backoff.closed(at + 50);
    const step = 100 * 2 ** round;
    assert.ok(delay >= step / 2 && delay <= step, `round ${round}: ${delay}`);
  }
  backoff.registered(100_000);
  backoff.registered(105_000);
  assert.ok(backoff.closed(100_000 + HEALTHY_SESSION_MS) <= 100);
  backoff.next();
  assert.ok(backoff.closed(200_000) > 100, 'a session that never registered restarts nothing');
});
