// `externalAllocationStrategy(fallback, getState)`: the allocation strategy
// the external allocation feature request sketches, for an actor
// framework's own coordinator — explicit placements first, a fallback
// strategy for everything else. Its state can be a `PlacementsView`, which
// keeps a node's placements in memory (`explicitPlacements`), so a
// framework that places its shards itself can still let operators steer
// them through shardalloc's REST API, CLI and dashboard.

/** What the strategy consults: shard id → the region it should live on. */
export interface ExternalAllocationState {
  readonly explicitPlacements: ReadonlyMap<string, string>;
}

/** An actor framework's allocation strategy, over region addresses. */
export interface AllocationStrategy {
  /** The region that gets `shardId`, among `candidates`; `current` is every region's shards. */
  allocate(shardId: string, candidates: readonly string[], current: ReadonlyMap<string, readonly string[]>): string;
  /** The shards to move now; `inProgress` are being moved already. */
  rebalance(current: ReadonlyMap<string, readonly string[]>, inProgress: ReadonlySet<string>): string[];
}

/** Told when an explicit placement cannot be honoured (its target is not a candidate). */
export type PlacementWarning = (shardId: string, target: string, candidates: readonly string[]) => void;

const warnOnConsole: PlacementWarning = (shardId, target, candidates) =>
  console.warn(
    `shard ${shardId} is placed on ${target}, which is not among the regions that can take it (${candidates.join(', ')}): the fallback strategy decides`,
  );

/**
 * Explicit placements before `fallback`:
 * - `allocate`: the placement's target when it is a candidate; otherwise
 *   (no placement, or its target unreachable) the fallback's choice, and
 *   `warn` is told when a placement was passed over (a preference, not a
 *   constraint, as the feature request recommends);
 * - `rebalance`: every shard not on its placement's target (when that
 *   target holds shards or is a known region), not already moving, and the
 *   fallback's picks among shards without a placement.
 */
export function externalAllocationStrategy(
  fallback: AllocationStrategy,
  getState: () => ExternalAllocationState,
  warn: PlacementWarning = warnOnConsole,
): AllocationStrategy {
  return {
    allocate(shardId, candidates, current) {
      const target = getState().explicitPlacements.get(shardId);
      if (target !== undefined) {
        if (candidates.includes(target)) {
          return target;
        }
        warn(shardId, target, candidates);
      }
      return fallback.allocate(shardId, candidates, current);
    },
    rebalance(current, inProgress) {
      const placements = getState().explicitPlacements;
      const moves = new Set<string>();
      for (const [region, shards] of current) {
        for (const shard of shards) {
          const target = placements.get(shard);
          if (target !== undefined && target !== region && current.has(target) && !inProgress.has(shard)) {
            moves.add(shard);
          }
        }
      }
      for (const shard of fallback.rebalance(current, inProgress)) {
        if (!placements.has(shard)) {
          moves.add(shard);
        }
      }
      return [...moves];
    },
  };
}
