// `leastShard`: Akka's least-shard allocation over the framework-side
// `AllocationStrategy` interface, the fallback `externalAllocationStrategy`
// is most often given. A new shard goes to the candidate holding the fewest
// shards (the first such candidate on a tie); a rebalance moves shards from
// the most loaded region towards the least loaded one while they differ by
// two or more, at most `maxSimultaneous` moves in flight.

import type { AllocationStrategy } from './strategy.js';

/** The settings of {@link leastShardStrategy}. */
export interface LeastShardOptions {
  /** Most moves in flight at once, those in progress included (default 3, as Akka's). */
  maxSimultaneous?: number;
}

/** A least-shard strategy with these settings; {@link leastShard} has the defaults. */
export function leastShardStrategy(options: LeastShardOptions = {}): AllocationStrategy {
  const maxSimultaneous = options.maxSimultaneous ?? 3;
  if (!Number.isInteger(maxSimultaneous) || maxSimultaneous < 1) {
    throw new RangeError(`maxSimultaneous is ${maxSimultaneous}; it must be a whole number of at least 1`);
  }
  const count = (current: ReadonlyMap<string, readonly string[]>, region: string): number =>
    current.get(region)?.length ?? 0;
  return {
    allocate(shardId, candidates, current) {
      let best: string | undefined;
      for (const candidate of candidates) {
        if (best === undefined || count(current, candidate) < count(current, best)) {
          best = candidate;
        }
      }
      if (best === undefined) {
        throw new RangeError(`no candidate region for shard ${shardId}`);
      }
      return best;
    },
    rebalance(current, inProgress) {
      const room = maxSimultaneous - inProgress.size;
      const regions = [...current.keys()];
      if (room <= 0 || regions.length < 2) {
        return [];
      }
      const least = regions.reduce((a, b) => (count(current, b) < count(current, a) ? b : a));
      const most = regions.reduce((a, b) => (count(current, b) > count(current, a) ? b : a));
      const excess = Math.floor((count(current, most) - count(current, least)) / 2);
      const movable = (current.get(most) ?? []).filter((shard) => !inProgress.has(shard));
      return movable.slice(0, Math.min(room, excess));
    },
  };
}

/** Least-shard allocation with the default settings. */
export const leastShard: AllocationStrategy = leastShardStrategy();
