// Host-free tests of the decision logic: `node --test test/`.
// The inputs mimic what componentize-js passes: BigInt generations and
// hashes, typed arrays for numeric lists, strings for enums.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CONFIG_SCHEMA,
  DEFAULT_CONFIG,
  StrategyError,
  allocate,
  parseConfig,
  rebalance,
  viewOf,
} from '../src/latency.js';

const GEN = 7n;

/** A WIT-shaped topology: `spec` entries are {address, status?, zone?, proxyOnly?, draining?}. */
function topology(spec, metricNames = ['latency_ms'], generation = GEN) {
  return {
    generation,
    regions: spec.map((r, i) => ({
      address: r.address,
      status: r.status ?? 'up',
      appVersion: '',
      joinOrder: BigInt(i + 1),
      labels: r.zone === undefined ? [] : [{ key: 'zone', value: r.zone }],
      proxyOnly: r.proxyOnly ?? false,
      draining: r.draining ?? false,
    })),
    metricNames,
    signal: undefined,
  };
}

/** WIT-shaped loads: one count per region; `metrics` row-major. */
function loads(counts, metrics, generation = GEN) {
  return { generation, shardCounts: Uint32Array.from(counts), metrics: Float64Array.from(metrics) };
}

function allocations(total, inProgress = []) {
  return {
    hashes: new BigUint64Array(total),
    inProgress: Uint32Array.from(inProgress),
    ids: undefined,
  };
}

const SHARD = { id: 'new-1', hash: 123n };
const errorOf = (f) => {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof StrategyError, `not a StrategyError: ${e}`);
    return e.message;
  }
  assert.fail('no error');
};

// eu-1 (5 shards, 30 ms), eu-2 (1 shard, 20 ms), us-1 (0 shards, 10 ms), proxy.
const ZONES = topology([
  { address: 'eu-1', zone: 'eu' },
  { address: 'eu-2', zone: 'eu' },
  { address: 'us-1', zone: 'us' },
  { address: 'proxy', proxyOnly: true },
]);
const ZONE_LOADS = loads([5, 1, 0, 0], [30, 20, 10, 1]);

test('parseConfig: defaults and valid values', () => {
  const cases = [
    ['', DEFAULT_CONFIG],
    ['  ', DEFAULT_CONFIG],
    ['null', DEFAULT_CONFIG],
    ['{}', DEFAULT_CONFIG],
    ['{"metric":"rtt","zone_label":"dc"}', { ...DEFAULT_CONFIG, metric: 'rtt', zone_label: 'dc' }],
    ['{"max_imbalance":1,"max_moves":4294967295}', { ...DEFAULT_CONFIG, max_imbalance: 1, max_moves: 4294967295 }],
    ['{"max_moves":3.0}', { ...DEFAULT_CONFIG, max_moves: 3 }],
  ];
  for (const [text, want] of cases) {
    assert.deepEqual({ ...parseConfig(text) }, { ...want }, text);
  }
});

test('parseConfig: every refusal names the key', () => {
  const cases = [
    ['{"lable":"x"}', 'unknown key "lable"'],
    ['{"zzz":1,"aaa":2}', 'unknown key "aaa"'],
    ['{"metric":""}', 'metric must be a non-empty string'],
    ['{"metric":5}', 'metric must be a non-empty string, got 5'],
    ['{"zone_label":null}', 'zone_label must be a non-empty string, got null'],
    ['{"max_imbalance":0}', 'max_imbalance must be an integer from 1 to 4294967295, got 0'],
    ['{"max_imbalance":"2"}', 'max_imbalance must be an integer'],
    ['{"max_moves":1.5}', 'max_moves must be an integer'],
    ['{"max_moves":4294967296}', 'max_moves must be an integer'],
    ['{"max_moves":true}', 'max_moves must be an integer'],
    ['[1]', 'must be a JSON object'],
    ['"x"', 'must be a JSON object'],
    ['{', 'not valid JSON'],
  ];
  for (const [text, want] of cases) {
    const message = errorOf(() => parseConfig(text));
    assert.ok(message.startsWith('invalid config: '), message);
    assert.ok(message.includes(want), `${text}: ${message}`);
  }
});

test('the schema is JSON and lists every key', () => {
  const schema = JSON.parse(CONFIG_SCHEMA);
  assert.equal(schema.additionalProperties, false);
  assert.deepEqual(Object.keys(schema.properties), ['metric', 'zone_label', 'max_imbalance', 'max_moves']);
});

test('allocate', () => {
  // [case, topology, requester, loads, config, want]
  const cases = [
    ['no requester: lowest latency overall', ZONES, undefined, ZONE_LOADS, '', 2],
    ["requester's zone first", ZONES, 0, ZONE_LOADS, '', 1],
    ['requester in another zone', ZONES, 2, ZONE_LOADS, '', 2],
    ['requester without the label', ZONES, 3, ZONE_LOADS, '', 2],
    ['another label: no zone filter', ZONES, 0, ZONE_LOADS, '{"zone_label":"dc"}', 2],
    [
      'zone without candidates: all candidates',
      topology([{ address: 'eu-1', zone: 'eu', draining: true }, { address: 'us-1', zone: 'us' }]),
      0,
      loads([1, 1], [1, 9]),
      '',
      1,
    ],
    [
      'only up, not proxy, not draining',
      topology([
        { address: 'a', status: 'joining' },
        { address: 'b', status: 'leaving' },
        { address: 'c', status: 'unreachable' },
        { address: 'd', draining: true },
        { address: 'e', proxyOnly: true },
        { address: 'f' },
      ]),
      undefined,
      loads([0, 0, 0, 0, 0, 9], [1, 1, 1, 1, 1, 99]),
      '',
      5,
    ],
    ['NaN is +infinity', ZONES, undefined, loads([5, 1, 0, 0], [30, 20, NaN, 1]), '', 1],
    ['all NaN: fewest shards', ZONES, undefined, loads([5, 1, 3, 0], [NaN, NaN, NaN, NaN]), '', 1],
    ['metric missing: fewest shards', ZONES, undefined, ZONE_LOADS, '{"metric":"cpu"}', 2],
    [
      'second metric column',
      topology([{ address: 'a' }, { address: 'b' }], ['cpu', 'latency_ms']),
      undefined,
      loads([0, 0], [0.1, 50, 0.9, 40]),
      '',
      1,
    ],
    ['equal latency: fewer shards', ZONES, undefined, loads([5, 1, 2, 0], [10, 10, 10, 1]), '', 1],
    ['equal latency and shards: lower index', ZONES, undefined, loads([1, 1, 1, 0], [10, 10, 10, 1]), '', 0],
    ['fastest too full: latency decides within max_imbalance of the emptiest', ZONES, undefined, loads([5, 1, 0, 0], [1, 20, 10, 1]), '', 2],
    ['a larger max_imbalance lets the fastest in', ZONES, undefined, loads([5, 1, 0, 0], [1, 20, 10, 1]), '{"max_imbalance":5}', 0],
    ['exactly max_imbalance above the emptiest still counts', ZONES, undefined, loads([2, 1, 0, 0], [1, 20, 10, 1]), '', 0],
    ['in the zone, the floor is the zone\'s emptiest', ZONES, 1, loads([4, 1, 0, 0], [1, 20, 10, 1]), '', 1],
    ['in the zone, within max_imbalance', ZONES, 1, loads([3, 1, 0, 0], [1, 20, 10, 1]), '', 0],
  ];
  for (const [name, topo, requester, l, text, want] of cases) {
    assert.equal(allocate(parseConfig(text), viewOf(topo), SHARD, requester, l), want, name);
  }
});

test('allocate and rebalance errors', () => {
  const view = viewOf(ZONES);
  const config = DEFAULT_CONFIG;
  const cases = [
    ['no topology', () => allocate(config, null, SHARD, undefined, ZONE_LOADS), 'no topology yet'],
    ['no topology (rebalance)', () => rebalance(config, null, ZONE_LOADS, allocations(6)), 'no topology yet'],
    [
      'stale loads',
      () => allocate(config, view, SHARD, undefined, loads([5, 1, 0, 0], [30, 20, 10, 1], 8n)),
      'loads generation 8 does not match topology generation 7',
    ],
    [
      'stale loads (rebalance)',
      () => rebalance(config, view, loads([5, 1, 0, 0], [30, 20, 10, 1], 6n), allocations(6)),
      'loads generation 6 does not match topology generation 7',
    ],
    [
      'nothing allocatable',
      () => allocate(config, viewOf(topology([{ address: 'p', proxyOnly: true }])), SHARD, 0, loads([0], [1])),
      'no allocatable region',
    ],
    ['empty cluster', () => allocate(config, viewOf(topology([])), SHARD, undefined, loads([], [])), 'no allocatable region'],
  ];
  for (const [name, f, want] of cases) {
    assert.equal(errorOf(f), want, name);
  }
});

test('rebalance', () => {
  const three = topology([{ address: 'a' }, { address: 'b' }, { address: 'c' }]);
  // [case, topology, counts, in progress, config, want]
  const cases = [
    ['gap 2 is not > 2', three, [3, 1, 2], [], '', []],
    ['gap 3: one shard, the oldest of the fullest', three, [4, 1, 2], [], '', [0]],
    ['handles start after the regions before it', three, [2, 9, 1], [], '', [2, 3, 4, 5]],
    ['max_moves caps the round', three, [2, 30, 1], [], '', [2, 3, 4, 5, 6]],
    ['max_moves from the config', three, [2, 30, 1], [], '{"max_moves":2}', [2, 3]],
    ['max_imbalance from the config', three, [4, 1, 2], [], '{"max_imbalance":3}', []],
    ['fullest last: start is the sum of all before', three, [3, 1, 8], [], '', [4, 5, 6]],
    ['ties: lowest index is most and least', three, [5, 5, 1], [], '', [0, 1]],
    ['in progress: nothing', three, [9, 0, 0], [3], '', []],
    ['one candidate: nothing', topology([{ address: 'a' }, { address: 'b', draining: true }]), [0, 9], [], '', []],
    [
      'non-candidates count for the handles, not for most',
      topology([{ address: 'd', draining: true }, { address: 'p', proxyOnly: true }, { address: 'a' }, { address: 'b' }]),
      [20, 0, 7, 1],
      [],
      '',
      [20, 21, 22],
    ],
    ['empty cluster', topology([]), [], [], '', []],
  ];
  for (const [name, topo, counts, inProgress, text, want] of cases) {
    const total = counts.reduce((a, b) => a + b, 0);
    const l = loads(counts, counts.map(() => 1));
    const got = rebalance(parseConfig(text), viewOf(topo), l, allocations(total, inProgress));
    assert.deepEqual(got, want, name);
  }
});

test('rebalance logs one debug record when it moves shards', () => {
  const records = [];
  const capture = (level, message, fields) => records.push({ level, message, fields });
  const view = viewOf(topology([{ address: 'a' }, { address: 'b' }]));
  rebalance(DEFAULT_CONFIG, view, loads([1, 1], [1, 1]), allocations(2), capture);
  assert.equal(records.length, 0);
  rebalance(DEFAULT_CONFIG, view, loads([1, 7], [1, 1]), allocations(8), capture);
  assert.deepEqual(records, [
    {
      level: 'debug',
      message: 'moving the oldest shards of the fullest region',
      fields: [['from', 'b'], ['count', '3'], ['gap', '6']],
    },
  ]);
});
