// latency-aware-js: the component's entry point. It exports the WIT
// interface `shardalloc:strategy/allocator@0.1.0` as the object `allocator`
// and keeps the strategy's state in this module between calls. The logic is
// in latency.js (no bindings there, so `node --test` can test it).
import { log } from 'shardalloc:strategy/host@0.1.0';
import * as latency from './latency.js';

// State lives at module level: the component keeps one instance between
// calls. After a fault the host starts a fresh instance and calls
// `configure` and `set-topology` again.
let config = latency.DEFAULT_CONFIG;
let view = null;

// A WIT `result` error is returned by throwing a string. Any other exception
// (an Error, a TypeError from a bug) traps: the host counts a fault and falls
// back to its built-in strategy, and the message is lost.
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
      needsShardNames: false,
    };
  },

  configure(text) {
    // Only a valid configuration replaces the one in force.
    config = answer(() => latency.parseConfig(text));
  },

  setTopology(topology) {
    view = latency.viewOf(topology);
  },

  allocate(shard, requester, loads) {
    return answer(() => latency.allocate(config, view, shard, requester, loads));
  },

  rebalance(loads, allocations) {
    return answer(() => latency.rebalance(config, view, loads, allocations, log));
  },
};
