// `PlacementsView`: an in-memory map of one type's explicit placements,
// kept in step with the node, with a synchronous lookup — what an actor
// framework's own allocation strategy consults before its fallback (Akka's
// `ExternalShardAllocationStrategy` with its local cache; the feature
// request in the project's seeds).
//
// How it stays in step: it opens the type's event stream first, then reads
// every page of placements, then applies the events that arrived meanwhile,
// in order, and every later `placement-set` / `placement-removed`. When the
// stream ends (the node restarted, the leader changed, a network cut) it
// reconnects with `Last-Event-ID`, with backoff; a `missed` event (events
// it can no longer get) makes it read every page again. Placement events
// carry the whole state of one shard's placement, so applying them in
// order after a listing converges on the node's state.

import { EventEmitter } from 'node:events';

import type { AdminClient, EventStream } from './client.js';
import type { DecisionEvent } from './types.js';

/** The events a view emits. */
export interface PlacementsViewEvents {
  /** A placement was set (`target`) or removed (`null`). */
  change: [shard: string, target: string | null];
  /** The view read every placement afresh (first, or after missed events). */
  synced: [count: number];
  /** The stream broke; the view reconnects by itself. */
  disconnected: [reason: string];
}

/** How a view reconnects, and the signal that closes it. */
export interface PlacementsViewOptions {
  /** Gives the opening up (it rejects with the signal's reason) and, once open, closes the view. */
  signal?: AbortSignal | undefined;
  /** The first reconnect delay (ms, default 200); it doubles up to `reconnectMaxMs`. */
  reconnectMinMs?: number;
  /** The longest reconnect delay (ms, default 5,000). */
  reconnectMaxMs?: number;
}

/** A live map of one type's placements. See the module comment. */
export class PlacementsView extends EventEmitter<PlacementsViewEvents> {
  private readonly map = new Map<string, string>();
  private stream: EventStream | null = null;
  private lastEventId: string | undefined;
  private closed = false;
  private delay: number;
  private readonly minMs: number;
  private readonly maxMs: number;
  private readonly signal: AbortSignal | undefined;

  private constructor(
    private readonly admin: AdminClient,
    readonly entityType: string,
    options: PlacementsViewOptions,
  ) {
    super();
    this.signal = options.signal;
    this.signal?.addEventListener('abort', () => this.close(), { once: true });
    this.minMs = options.reconnectMinMs ?? 200;
    this.maxMs = options.reconnectMaxMs ?? 5_000;
    this.delay = this.minMs;
  }

  /** Opens a view of `entityType`'s placements: resolves once it holds every one. Rejects naming the problem (an unknown type, a wrong token). */
  static async open(admin: AdminClient, entityType: string, options: PlacementsViewOptions = {}): Promise<PlacementsView> {
    const view = new PlacementsView(admin, entityType, options);
    await view.connect(true);
    return view;
  }

  /** The region `shard` is placed on, or undefined: synchronous, from memory. */
  get(shard: string): string | undefined {
    return this.map.get(shard);
  }

  /** How many placements the view holds. */
  get size(): number {
    return this.map.size;
  }

  /** The placements as an external allocation strategy reads them (`externalAllocationStrategy(fallback, () => view)`). */
  get explicitPlacements(): ReadonlyMap<string, string> {
    return this.map;
  }

  /** Every placement the view holds: shard → target. */
  entries(): Map<string, string> {
    return new Map(this.map);
  }

  /** Stops following the node. */
  close(): void {
    this.closed = true;
    this.stream?.close();
  }

  /** Opens the stream, reads every page, applies what came meanwhile, then follows the stream in the background. */
  private async connect(first: boolean): Promise<void> {
    const signal = first ? this.signal : undefined;
    if (signal?.aborted) throw signal.reason as Error;
    const stream = await this.admin.events({ entityType: this.entityType, lastEventId: this.lastEventId, signal });
    this.stream = stream;
    const iterator = stream[Symbol.asyncIterator]();
    // Read the stream while listing, so nothing that happens meanwhile is lost.
    const early: { id: string | null; event: DecisionEvent }[] = [];
    let listing = first || this.lastEventId === undefined;
    let ended: string | null = null;
    const pump = (async () => {
      try {
        for (;;) {
          const next = await iterator.next();
          if (next.done) {
            ended = 'the node ended the event stream';
            break;
          }
          if (listing) {
            early.push(next.value);
          } else {
            await this.apply(next.value.id, next.value.event);
          }
        }
      } catch (error) {
        ended = (error as Error).message;
      }
    })();
    if (listing) {
      try {
        await this.resync(signal);
        for (const { id, event } of early.splice(0)) await this.apply(id, event);
      } catch (error) {
        // The pump ends with the stream and reconnects, unless this was the first open.
        if (first) this.closed = true;
        stream.close();
        throw error;
      }
      listing = false;
    }
    this.delay = this.minMs;
    void pump.then(() => this.reconnect(ended ?? 'the event stream ended'));
  }

  /** Reads every page of placements into the map, replacing what it held. */
  private async resync(signal?: AbortSignal): Promise<void> {
    const all = await this.admin.placements(this.entityType, { signal });
    const fresh = new Map(all.placements.map((p) => [p.shardId, p.target] as const));
    for (const [shard, target] of fresh) {
      if (this.map.get(shard) !== target) this.emit('change', shard, target);
    }
    for (const shard of this.map.keys()) {
      if (!fresh.has(shard)) this.emit('change', shard, null);
    }
    this.map.clear();
    for (const [shard, target] of fresh) this.map.set(shard, target);
    this.emit('synced', this.map.size);
  }

  private async apply(id: string | null, event: DecisionEvent): Promise<void> {
    if (id !== null) this.lastEventId = id;
    if (event.kind === 'placement-set' && event.shardId !== undefined && event.target !== undefined) {
      if (this.map.get(event.shardId) !== event.target) {
        this.map.set(event.shardId, event.target);
        this.emit('change', event.shardId, event.target);
      }
    } else if (event.kind === 'placement-removed' && event.shardId !== undefined) {
      if (this.map.delete(event.shardId)) this.emit('change', event.shardId, null);
    } else if (event.kind === 'missed') {
      await this.resync();
    }
  }

  private reconnect(reason: string): void {
    if (this.closed) return;
    this.stream = null;
    this.emit('disconnected', reason);
    const wait = this.delay / 2 + Math.random() * (this.delay / 2);
    this.delay = Math.min(this.delay * 2, this.maxMs);
    setTimeout(() => {
      if (this.closed) return;
      this.connect(false).catch((error: unknown) => this.reconnect((error as Error).message));
    }, wait).unref();
  }
}
