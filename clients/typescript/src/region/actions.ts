// What the region core asks of its driver and what a region publishes:
// `Action` (the core's output, performed in order), `Update` (what goes on
// a region's updates stream) and `HomeLookup` (the answer to a home
// request). Discriminated unions on `type`, one member per variant of the
// Rust client's `Action`, `Update` and `HomeLookup`.

import type { RegionMessage } from '../wire.js';
import type { DeliveryError } from './errors.js';

/** What a region publishes on its updates stream. */
export type Update =
  /** The node accepted the registration (first, or after a reconnect). */
  | { type: 'Registered'; incarnation: number }
  /** The node refused the session or the registration; the region retries with backoff. */
  | { type: 'Refused'; reason: string }
  /** The session with the node is down; the region reconnects with backoff. */
  | { type: 'Disconnected'; reason: string }
  /** The lease ran out: every shard was told to stop, cached homes are forgotten. */
  | { type: 'Fenced' }
  /** A renewal lifted the fence; shards start again as their homes are learnt. */
  | { type: 'LeaseRegained' }
  /** The region learnt where a shard lives (it was unknown, or moved). */
  | { type: 'HomeChanged'; shard: string; home: string }
  /** The node refused to give a shard a home; `dropped` buffered messages were dropped. */
  | { type: 'ShardRefused'; shard: string; reason: string; dropped: number }
  /** An operator changed a shard's placement (`target` null: removed). */
  | { type: 'PlacementChanged'; shard: string; target: string | null }
  /**
   * A shard was started here, at `epoch`: greater than any earlier home's
   * of the shard, for fencing writes to the application's storage.
   */
  | { type: 'ShardStarted'; shard: string; epoch: number }
  /** A shard stopped here (or its stop was abandoned at the deadline). */
  | { type: 'ShardStopped'; shard: string }
  /** The node confirmed the leave; the region stops. */
  | { type: 'Left' }
  /**
   * Another region of the type was removed (it left, or was silent past the
   * node's removal timeout): every cached home on it was dropped, and its
   * shards' homes are asked again when next needed.
   */
  | { type: 'RegionRemoved'; address: string };

/** Something the driver must do, in order. `M` is the application's message type. */
export type Action<M> =
  /** Send a message to the node over the session. */
  | { type: 'Send'; message: RegionMessage }
  /** Start the shard in the application (before any delivery to it), at its epoch here (0 from a node speaking protocol 1 or 2). */
  | { type: 'Start'; shard: string; epoch: number }
  /** Stop the shard in the application, after the deliveries queued so far; then call `RegionCore.stopFinished`. */
  | { type: 'Stop'; shard: string }
  /** The stop ran past its deadline: give up on it (the core already counts the shard as stopped). */
  | { type: 'AbandonStop'; shard: string }
  /** Deliver a message to the shard, which runs here. */
  | { type: 'Deliver'; shard: string; message: M }
  /**
   * Carry a message to the shard's home, another region, at address `to`.
   * If the transport fails, feed the message back with `RegionCore.forwardFailed`.
   */
  | { type: 'Forward'; to: string; shard: string; message: M }
  /**
   * A message the region took is given up: its shard's forwards kept
   * failing. Hand it to the application with the error.
   */
  | { type: 'Undelivered'; shard: string; message: M; error: DeliveryError }
  /** Publish on the updates stream. */
  | { type: 'Publish'; update: Update }
  /**
   * Hang up the session; the driver reconnects with backoff and calls
   * `RegionCore.disconnected` once the session is down.
   */
  | { type: 'Reconnect'; reason: string };

/** The answer to `RegionCore.requestHome`. */
export type HomeLookup<M> =
  /** The home is cached. */
  | { type: 'Known'; home: string }
  /**
   * The home is unknown; it has been (or will be) asked for, by these
   * actions. A `HomeChanged` or `ShardRefused` update answers it.
   */
  | { type: 'Asked'; actions: Action<M>[] };
