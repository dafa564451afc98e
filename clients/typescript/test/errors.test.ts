// The region errors' messages, worded like the Rust client's `Display`
// texts (the test of `region/error.rs`, and one message of each kind).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { AskError, DeliveryError, RegionError, Replier, SendError } from '../src/index.js';

test('a timed out drain and leave names at most ten shards and counts the rest', () => {
  const shards = Array.from({ length: 12 }, (_, i) => `s${i + 1}`);
  const error = new RegionError({ kind: 'DrainAndLeaveTimedOut', boundMs: 20_000, shards, leaveAsked: true });
  assert.equal(
    error.message,
    'the region did not drain and leave within 20s: it still ran 12 shards (s1, s2, s3, s4, s5, s6, s7, s8, ' +
      's9, s10 and 2 more), stopped there and then, and the node had not confirmed its leave',
  );
  const one = new RegionError({ kind: 'DrainAndLeaveTimedOut', boundMs: 1_000, shards: ['42'], leaveAsked: false });
  assert.ok(one.message.includes('it still ran 1 shard (42)'), one.message);
});

test('every kind has its message', () => {
  const region: [RegionError, string][] = [
    [
      new RegionError({ kind: 'Config', problem: 'the address is empty' }),
      'invalid region configuration: the address is empty',
    ],
    [new RegionError({ kind: 'InvalidShard', shard: 'a"b\n', reason: 'x' }), 'invalid shard id "a\\"b\\n": x'],
    [
      new RegionError({ kind: 'ShardRefused', shard: 's1', reason: 'too many shards' }),
      'the node refused shard s1: too many shards',
    ],
    [new RegionError({ kind: 'Refused', reason: 'bad token' }), 'the node refused the region: bad token'],
    [new RegionError({ kind: 'Left' }), 'the region has left the cluster'],
    [new RegionError({ kind: 'ShutDown' }), 'the region has shut down'],
    [
      new RegionError({ kind: 'LeaveTimedOut', timeoutMs: 1_500 }),
      'the node did not confirm the leave within 1.5s; the region stopped its shards and closed anyway',
    ],
  ];
  for (const [error, message] of region) {
    assert.equal(error.message, message);
    assert.equal(error.name, 'RegionError');
    assert.equal(error.kind, error.detail.kind);
    assert.ok(error instanceof Error);
  }
  const send: [SendError, string][] = [
    [new SendError({ kind: 'BufferFull', shard: 's1', limit: 3 }), 'the buffer of shard s1 is full (3 messages)'],
    [
      new SendError({ kind: 'TotalBufferFull', limit: 5 }),
      "the region's buffers are full (5 messages over all shards)",
    ],
    [
      new SendError({ kind: 'InvalidShard', shard: '', reason: 'a shard id is empty' }),
      'invalid shard id "": a shard id is empty',
    ],
    [new SendError({ kind: 'Stopped' }), 'the region has stopped; it takes no more messages'],
  ];
  for (const [error, message] of send) {
    assert.equal(error.message, message);
    assert.equal(error.name, 'SendError');
  }
});

test("an ask's errors read as the Rust client's AskError", () => {
  const stopped = new SendError({ kind: 'Stopped' });
  const refused = new DeliveryError({ kind: 'ShardRefused', shard: 's1', reason: 'too many shards' });
  const cases: [AskError, string][] = [
    [new AskError({ kind: 'Send', error: stopped }), stopped.message],
    [new AskError({ kind: 'Timeout', shard: 's1', timeoutMs: 1_500 }), 'no answer from shard s1 within 1.5s'],
    [new AskError({ kind: 'NotDelivered', error: refused }), refused.message],
    [new AskError({ kind: 'Failed', shard: 's1', reason: 'fenced' }), 'shard s1 did not answer: fenced'],
  ];
  for (const [error, message] of cases) {
    assert.equal(error.message, message);
    assert.equal(error.name, 'AskError');
  }
});

test('a replier answers once', () => {
  const outcomes: unknown[] = [];
  const replier = new Replier<number>('s1', 5_000, (outcome) => outcomes.push(outcome));
  assert.ok(replier.remainingMs() > 0 && replier.remainingMs() <= 5_000);
  replier.reply(1);
  replier.reply(2);
  replier.failWith('late');
  assert.deepEqual(outcomes, [{ ok: true, reply: 1 }]);
  assert.ok(replier.answered);
});
