// `LoadMeter`, one test for each test of the Rust client's `region/load.rs`,
// with the same names (as sentences) and the same numbers.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LoadMeter, MAX_METERED_SHARDS } from '../src/core.js';
import { MAX_LOAD_WINDOW_MS, MIN_LOAD_WINDOW_MS, type LoadReport } from '../src/wire.js';

function loads(report: LoadReport | undefined): [string, number][] {
  assert.ok(report !== undefined, 'a report');
  return report.shards.map((s) => [s.shard, s.load]);
}

test('work becomes a rate over the window and gauges add to it', () => {
  const meter = new LoadMeter();
  assert.equal(meter.report(5_000, () => true, 10), undefined, 'never used: no report');
  meter.record('a', 30.0, 1_000);
  meter.record('a', 10.0, 1_200);
  meter.record('b', 5.0, 1_300);
  meter.set('c', 7.5, 1_400);
  meter.set('a', 1.0, 1_400);
  let report = meter.report(3_000, () => true, 10);
  assert.equal(report?.windowMs, 2_000);
  assert.deepEqual(loads(report), [
    ['a', 21.0],
    ['c', 7.5],
    ['b', 2.5],
  ]);
  assert.equal(report?.rest, 0);
  // The next window: work starts from nothing, the gauges stand.
  meter.record('b', 100.0, 3_500);
  report = meter.report(4_000, () => true, 10);
  assert.equal(report?.windowMs, 1_000);
  assert.deepEqual(loads(report), [
    ['b', 100.0],
    ['c', 7.5],
    ['a', 1.0],
  ]);
});

test('the top shards are named and the others summed', () => {
  const meter = new LoadMeter();
  for (const [shard, units] of [
    ['a', 1.0],
    ['b', 4.0],
    ['c', 3.0],
    ['d', 2.0],
    ['e', 3.0],
  ] as const) {
    meter.record(shard, units, 0);
  }
  const report = meter.report(1_000, () => true, 2);
  assert.deepEqual(
    loads(report),
    [
      ['b', 4.0],
      ['c', 3.0],
    ],
    'ties broken by id',
  );
  assert.equal(report?.rest, 6.0);
});

test('shards that do not run here are left out and their gauges forgotten', () => {
  const meter = new LoadMeter();
  meter.record('here', 2.0, 0);
  meter.record('gone', 50.0, 0);
  meter.set('gone', 9.0, 0);
  const report = meter.report(1_000, (s) => s === 'here', 10);
  assert.deepEqual(loads(report), [['here', 2.0]]);
  assert.equal(report?.rest, 0);
  // The Rust test looks at the meter's private gauges; here, the next
  // report, over every shard, shows that the stopped shard's gauge is gone.
  assert.deepEqual(loads(meter.report(2_000, () => true, 10)), [], "a stopped shard's gauge is dropped");
});

test('a window too short goes on and one too long is dropped', () => {
  const meter = new LoadMeter();
  meter.record('a', 1.0, 0);
  assert.equal(meter.report(MIN_LOAD_WINDOW_MS - 1, () => true, 10), undefined);
  meter.record('a', 1.0, 400);
  let report = meter.report(MIN_LOAD_WINDOW_MS, () => true, 10);
  assert.deepEqual(loads(report), [['a', 4.0]], 'both records, over the longer window');

  meter.record('a', 1.0, 1_000);
  const late = MIN_LOAD_WINDOW_MS + MAX_LOAD_WINDOW_MS + 1;
  assert.equal(meter.report(late, () => true, 10), undefined, 'a window past the limit is dropped');
  meter.record('a', 3.0, late + 10);
  report = meter.report(late + 1_000, () => true, 10);
  assert.equal(report?.windowMs, 1_000, 'a new window began');
  assert.deepEqual(loads(report), [['a', 3.0]]);
});

test('bad numbers are ignored and shards past the limit go into the rest', () => {
  const meter = new LoadMeter();
  for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, -1.0, 0.0]) {
    meter.record('a', bad, 0);
  }
  // The Rust test looks at the meter's private start; here, a meter that
  // recorded nothing has no report, however long after.
  assert.equal(meter.report(1_000, () => true, 10), undefined, 'nothing recorded');
  for (let i = 0; i < MAX_METERED_SHARDS; i++) {
    meter.record(`s${i}`, 1.0, 0);
  }
  meter.record('one-too-many', 1_000.0, 0);
  const report = meter.report(1_000, () => true, 1);
  assert.equal(report?.shards.length, 1);
  assert.equal(report?.rest, MAX_METERED_SHARDS - 1 + 1_000.0);
});
