// What a region asks of the application: start, feed and stop shards.

import type { DeliveryError } from './errors.js';

/**
 * The application a region serves. For each shard, the region calls
 * `startShard` first, then `deliver` for each message (and `answer` for each request) in order, then
 * `stopShard`; the calls of one shard never overlap, and one run's calls
 * are awaited one after another. Different shards run concurrently.
 */
export interface Application<M, R = unknown> {
  /**
   * Starts the shard here, at `epoch`: every change of the shard's home
   * gives it a greater epoch, so a write to the application's own storage
   * made only while no greater epoch is stored there cannot come from a
   * stale run elsewhere (docs/operations.md, "Fencing writes with shard
   * epochs"). 0 from a node older than protocol version 3.
   */
  startShard(shard: string, epoch: number): void | Promise<void>;
  /**
   * Stops the shard (a hand-off, an expired lease, leaving, shutting
   * down), after every delivery queued before it. The region tells the
   * node the shard stopped when this completes, or when the stop deadline
   * passes.
   */
  stopShard(shard: string): void | Promise<void>;
  /** Delivers a message to a running shard. */
  deliver(shard: string, message: M): void | Promise<void>;
  /**
   * Answers a request to a running shard (`Region.ask`), in order with its
   * deliveries. A throw fails the ask with its message (`AskError` of kind
   * `Failed`). Without it, every request is failed so.
   */
  answer?(shard: string, request: M): R | Promise<R>;
  /**
   * A message the region took for `shard` was given up: its forwards kept
   * failing past `forwardAttempts` or `forwardDeadlineMs`. Every message
   * `send` accepted is delivered or handed here. Keep it quick; without
   * it, the region warns on the console.
   */
  undelivered?(shard: string, message: M, error: DeliveryError): void;
  /** Gauges sent with every heartbeat (`cpu`, `mem-used-ratio`, custom ones); keep it quick. */
  metrics?(): Record<string, number>;
}
