// Host-free tests of the decision logic and of the strategy's copy of the
// view: `node --test test/`. The inputs mimic what componentize-js passes:
// BigInt generations and hashes, typed arrays for numeric lists, strings
// for enums.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KeptView, ViewError, mix } from '../src/kept.js';
import { CONFIG_SCHEMA, DEFAULT_CONFIG, StrategyError, allocate, parseConfig, rebalance } from '../src/latency.js';

const GEN = 7n;

/** A WIT-shaped topology: `spec` entries are {address, status?, zone?, proxyOnly?, draining?}. */
function topology(spec, metricNames = ['latency_ms']) {
  return {
    regions: spec.map((r, i) => ({
      address: r.address,
      status: r.status ?? 'up',
      appVersion: '',
      joinOrder: BigInt(i + 1),
      labels: r.zone === undefined ? [] : [{ key: 'zone', value: r.zone }],
      proxyOnly: r.proxyOnly ?? false,
      draining: r.draining ?? false,
      capacity: undefined,
    })),
    metricNames,
    signal: undefined,
  };
}

/** Shard counts per region and the metric matrix (row-major). */
function loads(counts, metrics) {
  return { counts, metrics: Float64Array.from(metrics) };
}

/**
 * A WIT-shaped whole view: `counts[i]` shards homed on region i, with
 * handles numbered region by region from 0 (so a region's oldest shard has
 * the lowest handle); `moving` and `pinned` name handles.
 */
function wholeView(topo, l, moving = [], pinned = []) {
  const shards = [];
  const regions = [];
  l.counts.forEach((count, region) => {
    for (let i = 0; i < count; i++) {
      shards.push(shards.length);
      regions.push(region);
    }
  });
  return {
    generation: GEN,
    topology: topo,
    metrics: l.metrics,
    homed: {
      shards: Uint32Array.from(shards),
      hashes: BigUint64Array.from(shards.map((h) => BigInt(h) * 1000003n)),
      regions: Uint32Array.from(regions),
    },
    homeless: new Uint32Array(0),
    homelessHashes: new BigUint64Array(0),
    moving: Uint32Array.from(moving),
    pinned: Uint32Array.from(pinned),
    loads: { shards: new Uint32Array(0), loads: new Float64Array(0) },
  };
}

function kept(topo, l, moving = [], pinned = []) {
  const view = new KeptView();
  view.load(wholeView(topo, l, moving, pinned));
  return view;
}

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
    assert.equal(allocate(parseConfig(text), kept(topo, l), requester), want, name);
  }
});

test('allocate and rebalance errors', () => {
  const config = DEFAULT_CONFIG;
  const cases = [
    ['no view', () => allocate(config, new KeptView(), undefined), 'no view yet'],
    ['no view (rebalance)', () => rebalance(config, new KeptView()), 'no view yet'],
    [
      'nothing allocatable',
      () => allocate(config, kept(topology([{ address: 'p', proxyOnly: true }]), loads([0], [1])), 0),
      'no allocatable region',
    ],
    ['empty cluster', () => allocate(config, kept(topology([]), loads([], [])), undefined), 'no allocatable region'],
  ];
  for (const [name, f, want] of cases) {
    assert.equal(errorOf(f), want, name);
  }
});

test('rebalance', () => {
  const three = topology([{ address: 'a' }, { address: 'b' }, { address: 'c' }]);
  // [case, topology, counts, in progress, config, want, pinned]
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
    ['pinned shards are passed over', three, [2, 9, 1], [], '', [2, 4, 5, 7], [3, 6]],
    ['a region all pinned moves nothing', three, [4, 1, 2], [], '', [], [0, 1, 2, 3]],
  ];
  for (const [name, topo, counts, inProgress, text, want, pinned = []] of cases) {
    const l = loads(counts, counts.map(() => 1));
    const got = rebalance(parseConfig(text), kept(topo, l, inProgress, pinned));
    assert.deepEqual(got, want, name);
  }
});

test('rebalance logs one debug record when it moves shards', () => {
  const records = [];
  const capture = (level, message, fields) => records.push({ level, message, fields });
  const two = topology([{ address: 'a' }, { address: 'b' }]);
  rebalance(DEFAULT_CONFIG, kept(two, loads([1, 1], [1, 1])), capture);
  assert.equal(records.length, 0);
  rebalance(DEFAULT_CONFIG, kept(two, loads([1, 7], [1, 1])), capture);
  assert.deepEqual(records, [
    {
      level: 'debug',
      message: 'moving the oldest shards of the fullest region',
      fields: [['from', 'b'], ['count', '3'], ['gap', '6']],
    },
  ]);
});

/** A WIT-shaped batch: `fields` sets what it changes. */
function changes(generation, fields = {}) {
  const none = () => new Uint32Array(0);
  return {
    generation,
    retired: none(),
    unhomed: none(),
    arrivedHomeless: none(),
    arrivedHashes: new BigUint64Array(0),
    topology: undefined,
    metrics: undefined,
    homed: { shards: none(), hashes: new BigUint64Array(0), regions: none() },
    moving: none(),
    settled: none(),
    pinned: none(),
    unpinned: none(),
    loads: { shards: none(), loads: new Float64Array(0) },
    ...fields,
  };
}

test('mix is the splitmix64 finalizer (a test vector from the Rust SDK)', () => {
  // shardalloc_guest::kept::mix(1), from the Rust SDK.
  assert.equal(mix(1n), 0x5692161d100b05e5n);
  assert.equal(mix(0n), 0n);
});

test('a copy kept from batches equals the same view loaded whole', () => {
  const three = topology([{ address: 'a' }, { address: 'b' }, { address: 'c' }]);
  const l = loads([3, 1, 0], [1, 2, 3]);
  const view = kept(three, l);
  // A hand-off of shard 0 from a to c, shard 3 retired, a new shard 4 on b,
  // shard 1 pinned, shard 2 carrying load.
  let checksum = view.apply(
    changes(GEN + 1n, {
      retired: Uint32Array.of(3),
      unhomed: Uint32Array.of(0),
      homed: { shards: Uint32Array.of(0, 4), hashes: BigUint64Array.of(0n, 4000012n), regions: Uint32Array.of(2, 1) },
      moving: Uint32Array.of(0),
      pinned: Uint32Array.of(1),
      loads: { shards: Uint32Array.of(2), loads: Float64Array.of(2.5) },
    }),
  );
  checksum = view.apply(changes(GEN + 2n, { settled: Uint32Array.of(0) }));
  assert.deepEqual(view.counts, [2, 1, 1]);
  const whole = {
    ...wholeView(three, loads([0, 0, 0], [1, 2, 3])),
    generation: GEN + 2n,
    homed: {
      shards: Uint32Array.of(1, 2, 4, 0),
      hashes: BigUint64Array.of(1000003n, 2000006n, 4000012n, 0n),
      regions: Uint32Array.of(0, 0, 1, 2),
    },
    pinned: Uint32Array.of(1),
    loads: { shards: Uint32Array.of(2), loads: Float64Array.of(2.5) },
  };
  const fresh = new KeptView();
  assert.equal(fresh.load(whole), checksum);
  assert.deepEqual(view.unpinnedShards(0), [2]);
  assert.deepEqual(fresh.unpinnedShards(0), [2]);
});

test('a new topology keeps each region\'s shards under its new index', () => {
  const view = kept(topology([{ address: 'a' }, { address: 'b' }]), loads([2, 1], [1, 1]));
  view.apply(
    changes(GEN + 1n, {
      retired: Uint32Array.of(2),
      topology: topology([{ address: 'c' }, { address: 'a' }]),
      metrics: Float64Array.of(1, 1),
    }),
  );
  assert.deepEqual(view.counts, [0, 2]);
  assert.deepEqual(view.unpinnedShards(1), [0, 1]);
});

test('a batch that does not fit the copy is refused', () => {
  const view = kept(topology([{ address: 'a' }]), loads([1], [1]));
  assert.throws(() => view.apply(changes(GEN + 2n)), ViewError, 'a generation out of turn');
  assert.throws(() => view.apply(changes(GEN + 1n, { unhomed: Uint32Array.of(9) })), ViewError, 'a handle not in the view');
  assert.throws(
    () => view.apply(changes(GEN + 1n, { topology: topology([{ address: 'b' }]), metrics: Float64Array.of(1) })),
    ViewError,
    'a homed shard on a region that left',
  );
  const homed = { shards: Uint32Array.of(7), hashes: BigUint64Array.of(7n), regions: Uint32Array.of(0) };
  assert.throws(
    () => view.apply(changes(GEN + 1n, { homed: { ...homed, since: BigUint64Array.of(1n, 2n) } })),
    ViewError,
    'a since column of another length (contract 0.3)',
  );
});

test('since and the smoothed metrics of contract 0.3 are kept', () => {
  const view = kept(topology([{ address: 'a' }, { address: 'b' }]), loads([0, 0], [3, 4]));
  const homed = { shards: Uint32Array.of(7), hashes: BigUint64Array.of(7n), regions: Uint32Array.of(1), since: BigUint64Array.of(1234n) };
  view.apply(changes(GEN + 1n, { homed, metrics: Float64Array.of(1, 2), smoothedMetrics: Float64Array.of(1.5, 2.5) }));
  assert.equal(view.shards.get(7).since, 1234n);
  assert.deepEqual(Array.from(view.smoothedMetrics), [1.5, 2.5]);
  assert.deepEqual(view.counts, [0, 1]);
});
