// latency-aware-js: the decision logic, with no generated bindings, so that
// `node --test` can test it without a host.
//
// - allocate: among the allocatable regions (up, not proxy-only, not
//   draining), only those in the requester's zone when it has one and any
//   of them shares it; of those, only the ones within `max_imbalance` shards
//   of the emptiest; of those, the lowest latency metric, then the fewest
//   shards, then the lowest region index.
// - rebalance: when the fullest allocatable region holds more than
//   `max_imbalance` shards above the emptiest one, move
//   min(max_moves, gap / 2) of its oldest shards. One round at a time.
//
// Both read the strategy's copy of the view (kept.js): its regions, metric
// matrix, each region's count, the hand-offs in progress and each region's
// shards in allocation order.

export const NAME = 'latency-aware-js';
export const VERSION = '0.3.0';
export const DESCRIPTION =
  "Places a shard on the lowest-latency region near the emptiest, preferring the requester's zone, " +
  'and moves a few of the oldest shards off the fullest region when the imbalance exceeds a limit.';

const U32_MAX = 4294967295;

/** JSON Schema of the configuration, published by `describe`. */
export const CONFIG_SCHEMA = JSON.stringify({
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  additionalProperties: false,
  properties: {
    metric: { type: 'string', minLength: 1, default: 'latency_ms', description: 'the metric column to read' },
    zone_label: { type: 'string', minLength: 1, default: 'zone', description: "the region label compared with the requester's" },
    max_imbalance: { type: 'integer', minimum: 1, maximum: U32_MAX, default: 2, description: 'rebalance when the gap is larger' },
    max_moves: { type: 'integer', minimum: 1, maximum: U32_MAX, default: 5, description: 'most shards one round moves' },
  },
});

export const DEFAULT_CONFIG = Object.freeze({ metric: 'latency_ms', zone_label: 'zone', max_imbalance: 2, max_moves: 5 });

/**
 * An error the strategy returns to the host (the `err` case of a WIT
 * `result`). app.js turns it into a thrown string; anything else thrown is a
 * bug and traps.
 */
export class StrategyError extends Error {}

const STRING_KEYS = ['metric', 'zone_label'];
const INTEGER_KEYS = ['max_imbalance', 'max_moves'];
const KNOWN_KEYS = [...STRING_KEYS, ...INTEGER_KEYS];

/**
 * Parses a configuration. Empty text or `null` means the defaults; anything
 * else must be a JSON object of known keys. Throws StrategyError naming the
 * first bad key (unknown keys first, in sorted order, then the known keys in
 * schema order), so the answer does not depend on key order.
 */
export function parseConfig(text) {
  const trimmed = text.trim();
  if (trimmed === '' || trimmed === 'null') return DEFAULT_CONFIG;
  let value;
  try {
    value = JSON.parse(trimmed);
  } catch (e) {
    throw new StrategyError(`invalid config: not valid JSON: ${e.message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new StrategyError(`invalid config: must be a JSON object, got ${JSON.stringify(value)}`);
  }
  const unknown = Object.keys(value).filter((k) => !KNOWN_KEYS.includes(k)).sort();
  if (unknown.length > 0) {
    throw new StrategyError(`invalid config: unknown key "${unknown[0]}" (known keys: ${KNOWN_KEYS.join(', ')})`);
  }
  const config = { ...DEFAULT_CONFIG };
  for (const key of STRING_KEYS) {
    if (!(key in value)) continue;
    const v = value[key];
    if (typeof v !== 'string' || v.length === 0) {
      throw new StrategyError(`invalid config: ${key} must be a non-empty string, got ${JSON.stringify(v)}`);
    }
    config[key] = v;
  }
  for (const key of INTEGER_KEYS) {
    if (!(key in value)) continue;
    const v = value[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > U32_MAX) {
      throw new StrategyError(`invalid config: ${key} must be an integer from 1 to ${U32_MAX}, got ${JSON.stringify(v)}`);
    }
    config[key] = v;
  }
  return Object.freeze(config);
}

function candidates(view) {
  const out = [];
  view.regions.forEach((r, i) => {
    if (r.allocatable) out.push(i);
  });
  return out;
}

/** The region's value of `metric`; +Infinity when absent or NaN. */
export function latencyOf(view, metric, index) {
  const column = view.metricNames.indexOf(metric);
  if (column < 0) return Infinity;
  const value = view.metrics[index * view.metricNames.length + column];
  return value === undefined || Number.isNaN(value) ? Infinity : value;
}

/**
 * The best of `pool`: only regions within `max_imbalance` shards of the
 * emptiest of the pool take part (so allocation never undoes what rebalance
 * evens out), and of those the lowest (latency, shard count, index).
 */
function best(config, view, pool) {
  if (pool.length === 0) return undefined;
  const floor = pool.reduce((min, i) => Math.min(min, view.counts[i]), Infinity);
  const ceiling = floor + config.max_imbalance;
  let bestKey;
  for (const i of pool) {
    const count = view.counts[i];
    if (count > ceiling) continue;
    const key = [latencyOf(view, config.metric, i), count, i];
    if (bestKey === undefined || lessThan(key, bestKey)) bestKey = key;
  }
  return bestKey?.[2];
}

/** Lexicographic `<` on [latency, count, index] (Infinity equals Infinity). */
function lessThan(a, b) {
  for (let k = 0; k < a.length; k++) {
    if (a[k] !== b[k]) return a[k] < b[k];
  }
  return false;
}

/**
 * Picks a home: the region index. `requester` is a region index or
 * undefined. Throws StrategyError when no region is allocatable.
 */
export function allocate(config, view, requester) {
  if (view.generation === undefined) throw new StrategyError('no view yet');
  const pool = candidates(view);
  const label = config.zone_label;
  const zone = requester === undefined || requester === null ? undefined : view.regions[requester]?.labels.get(label);
  if (zone !== undefined) {
    const inZone = best(config, view, pool.filter((i) => view.regions[i].labels.get(label) === zone));
    if (inZone !== undefined) return inZone;
  }
  const any = best(config, view, pool);
  if (any === undefined) throw new StrategyError('no allocatable region');
  return any;
}

/**
 * Picks shard handles to move: the fullest region's oldest shards that are
 * not pinned. `log(level, message, fields)` receives one debug record when
 * shards move. Throws StrategyError before the first view.
 */
export function rebalance(config, view, log = () => {}) {
  if (view.generation === undefined) throw new StrategyError('no view yet');
  if (view.moving > 0) return [];
  const pool = candidates(view);
  if (pool.length < 2) return [];
  const counts = view.counts;
  let most = pool[0];
  let least = pool[0];
  for (const i of pool) {
    if (counts[i] > counts[most]) most = i;
    if (counts[i] < counts[least]) least = i;
  }
  const diff = counts[most] - counts[least];
  if (diff <= config.max_imbalance) return [];
  const n = Math.min(config.max_moves, Math.floor(diff / 2));
  const handles = view.unpinnedShards(most).slice(0, n);
  log('debug', 'moving the oldest shards of the fullest region', [
    ['from', view.regions[most].address],
    ['count', String(handles.length)],
    ['gap', String(diff)],
  ]);
  return handles;
}
