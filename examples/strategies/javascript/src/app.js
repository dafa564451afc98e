// latency-aware-js: the component's entry point. It exports the WIT
// interface `shardalloc:strategy/allocator@0.3.0` as the object `allocator`
// and keeps the strategy's state in this module between calls: the
// configuration and its copy of the view (kept.js). The logic is in
// latency.js and kept.js (no bindings there, so `node --test` can test it).
import { log } from 'shardalloc:strategy/host@0.3.0';
import { KeptView } from './kept.js';
import * as latency from './latency.js';

// State lives at module level: the component keeps one instance between
// calls. After a fault the host starts a fresh instance, calls `configure`
// and sends it the whole view again (`load-view`).
let config = latency.DEFAULT_CONFIG;
const view = new KeptView();
let lastError = '';

// A WIT `result` error is returned by throwing a string. Any other exception
// (an Error, a TypeError from a bug, a ViewError from a batch that does not
// fit the copy) traps: the host counts a fault and falls back to its
// built-in strategy for that call, and rebuilds the instance.
function answer(f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof latency.StrategyError) throw e.message;
    throw e;
  }
}

export const allocator = {
  describe() {
    return {
      name: latency.NAME,
      version: latency.VERSION,
      description: latency.DESCRIPTION,
      configSchema: latency.CONFIG_SCHEMA,
      // It reads no shard id and no attribute: the host sends neither.
      needsShardIds: false,
      needsShardAttributes: false,
    };
  },

  configure(text) {
    // Only a valid configuration replaces the one in force.
    config = answer(() => latency.parseConfig(text));
  },

  loadView(whole) {
    return view.load(whole);
  },

  apply(changes) {
    return view.apply(changes);
  },

  // Scalars in, one s64 out: the region index, or -1 with the reason kept
  // for `lastError`. Why the shard needs a home (`cause`) and the host's
  // time (`now`) do not change this strategy's choice.
  allocate(shard, hash, requester, cause, now) {
    try {
      return BigInt(latency.allocate(config, view, requester));
    } catch (e) {
      if (!(e instanceof latency.StrategyError)) throw e;
      lastError = e.message;
      return -1n;
    }
  },

  lastError() {
    return lastError;
  },

  // The shards to move, each without a destination: `allocate` places it
  // again once it stopped.
  rebalance(now) {
    return answer(() => latency.rebalance(config, view, log).map((shard) => ({ shard, to: undefined })));
  },
};
