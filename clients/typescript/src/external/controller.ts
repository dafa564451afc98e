// `ExternalAllocationController`: the programmatic API the external
// allocation feature request asks for (its "4. Programmatic API"; the
// request this project grew from), backed by a shardalloc node: explicit placements set, removed and
// read, and shards re-evaluated now. Placements are durable on the node
// (its store, across restarts and failovers) and pushed to every region
// of the type at once.

import type { AdminClient, CallOptions } from '../admin/client.js';

/** A shard id as the feature request writes it (a number) or as shardalloc does (a string). */
export type ShardIdLike = string | number;

/**
 * Explicit placements by shard id, looked up by the id as a string or as
 * the number it was set with: `setPlacement(42, …)` then `.get(42)` finds
 * it (shardalloc keeps shard ids as strings; iteration yields strings).
 */
export class PlacementMap extends Map<string, string> {
  override get(shardId: ShardIdLike): string | undefined {
    return super.get(String(shardId));
  }

  override has(shardId: ShardIdLike): boolean {
    return super.has(String(shardId));
  }
}

/** Set, remove, read explicit placements of one type; re-evaluate shards now. */
export class ExternalAllocationController {
  constructor(
    private readonly admin: AdminClient,
    /** The entity type. */
    readonly typeName: string,
  ) {}

  /** Sets or updates the explicit placement of `shardId` on the region `target`. */
  async setPlacement(shardId: ShardIdLike, target: string, options: CallOptions = {}): Promise<void> {
    await this.admin.setPlacement(this.typeName, String(shardId), target, options);
  }

  /** Removes the explicit placement: the shard's strategy decides again from the next rebalance. */
  async removePlacement(shardId: ShardIdLike, options: CallOptions = {}): Promise<void> {
    await this.admin.removePlacement(this.typeName, String(shardId), options);
  }

  /** The current explicit placements: shard id → region, looked up by a string or a number. */
  async getPlacements(options: CallOptions = {}): Promise<PlacementMap> {
    const all = await this.admin.placements(this.typeName, options);
    return new PlacementMap(all.placements.map((p) => [p.shardId, p.target]));
  }

  /**
   * Re-evaluates these shards now (hand-off, then allocation): with a
   * placement set, this moves them to it without waiting for the next
   * rebalance tick. Answers the shards the node refused to move, with why
   * (`already-moving`, `no-home`, `frozen`, …).
   */
  async rebalanceNow(
    shardIds: readonly ShardIdLike[],
    options: CallOptions = {},
  ): Promise<{ shardId: string; reason: string }[]> {
    const answer = await this.admin.rebalance(this.typeName, shardIds.map(String), { ...options, immediate: true });
    return answer.rejected;
  }
}
