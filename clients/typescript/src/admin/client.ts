// `AdminClient`: the node's admin REST API from Node — placements,
// rebalance, regions and drains, shards, strategies (upload, activate,
// roll back) and the decision event stream. Every path is built from the
// base URL with percent-encoded segments. Every non-2xx answer carries
// `{"error":{"code","message"}}` and becomes an `AdminError` with that code
// and message; a request that got no answer is an `AdminError` naming the
// URL. `https://` nodes may be signed by a private CA (`ca`). Every call
// takes an options object last, with an `AbortSignal` that gives it up.

import http from 'node:http';
import https from 'node:https';

import { SseParser } from './sse.js';
import type {
  ActivateRequest,
  DecisionEvent,
  DrainState,
  Placement,
  Placements,
  PlacementsWritten,
  RebalanceResponse,
  Regions,
  ShardState,
  AttributesWritten,
  Strategies,
  StoredStrategy,
  StrategyState,
  StreamedEvent,
} from './types.js';

/** Why an admin request failed. */
export class AdminError extends Error {
  override name = 'AdminError';
  constructor(
    message: string,
    /** The HTTP status, when the node answered. */
    readonly status: number | null = null,
    /** The node's error code (`unknown-type`, `invalid-placement`, …), when it sent one. */
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** How long a request may take before it is given up (ms). */
export const REQUEST_TIMEOUT_MS = 60_000;

/** How to reach the node. */
export interface AdminClientOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string | undefined;
  /** A CA (PEM) trusted for an `https://` node besides the system's roots. */
  ca?: string | Buffer | undefined;
}

/** What every call takes: a signal that gives the call up (it rejects with the signal's reason). */
export interface CallOptions {
  signal?: AbortSignal | undefined;
}

/** What one request carries besides its method and path. */
interface RequestParts extends CallOptions {
  body?: unknown;
  query?: Record<string, string | undefined>;
  contentType?: string;
}

/** A client of one node's admin API. */
export class AdminClient {
  private readonly base: URL;

  private readonly token: string | undefined;
  private readonly ca: string | Buffer | undefined;

  /**
   * A client of the node at `baseUrl` (`http(s)://host:port`, optionally
   * with a path prefix): `new AdminClient(url, { token, ca })`.
   */
  constructor(baseUrl: string, options: AdminClientOptions = {}) {
    this.token = options.token;
    this.ca = options.ca;
    let base: URL;
    try {
      base = new URL(baseUrl);
    } catch {
      throw new AdminError(`invalid admin base URL ${JSON.stringify(baseUrl)}: not a URL`);
    }
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new AdminError(`invalid admin base URL ${JSON.stringify(baseUrl)}: scheme ${base.protocol} is not http or https`);
    }
    if (base.search || base.hash) {
      throw new AdminError(`invalid admin base URL ${JSON.stringify(baseUrl)}: it must be a plain http(s)://host[:port][/path] URL`);
    }
    this.base = base;
  }

  /** The URL of `segments` under the base URL, each percent-encoded, with `query`. */
  url(segments: string[], query: Record<string, string | undefined> = {}): URL {
    const url = new URL(this.base);
    url.pathname = url.pathname.replace(/\/+$/, '') + '/' + segments.map(encodeURIComponent).join('/');
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) url.searchParams.set(key, value);
    }
    return url;
  }

  private open(
    method: string,
    url: URL,
    headers: Record<string, string>,
    body?: Buffer,
    signal?: AbortSignal,
  ): Promise<http.IncomingMessage> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    const all: Record<string, string> = { ...headers };
    if (this.token !== undefined) all['authorization'] = `Bearer ${this.token}`;
    if (body !== undefined) all['content-length'] = String(body.length);
    const transport = url.protocol === 'https:' ? https : http;
    return new Promise((resolve, reject) => {
      const request = transport.request(
        url,
        {
          method,
          headers: all,
          timeout: REQUEST_TIMEOUT_MS,
          ...(this.ca === undefined ? {} : { ca: this.ca }),
          ...(signal === undefined ? {} : { signal }),
        },
        resolve,
      );
      request.on('timeout', () => request.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      request.on('error', (error: NodeJS.ErrnoException) => {
        if (signal?.aborted) {
          reject(signal.reason as Error);
          return;
        }
        const untrusted = /certificate|self.signed|CERT_/i.test(`${error.code ?? ''} ${error.message}`);
        reject(
          new AdminError(
            untrusted
              ? `the node at ${url.origin} presented a certificate this client does not trust (${error.message}); give the CA that signed it as \`ca\``
              : `request to ${url} failed: ${error.message}`,
          ),
        );
      });
      request.end(body);
    });
  }

  private async call(method: string, url: URL, parts: RequestParts = {}): Promise<{ status: number; text: string }> {
    const { body, contentType = 'application/json', signal } = parts;
    const bytes =
      body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body), 'utf8');
    const headers: Record<string, string> = { accept: 'application/json' };
    if (bytes !== undefined) headers['content-type'] = contentType;
    const response = await this.open(method, url, headers, bytes, signal);
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of response) chunks.push(chunk as Buffer);
    } catch (error) {
      if (signal?.aborted) throw signal.reason as Error;
      throw new AdminError(`request to ${url} failed: ${(error as Error).message}`);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    const status = response.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      throw errorFrom(url, status, text);
    }
    return { status, text };
  }

  private async json<T>(method: string, segments: string[], parts: RequestParts = {}): Promise<T> {
    const url = this.url(segments, parts.query);
    const { text } = await this.call(method, url, parts);
    try {
      return JSON.parse(text) as T;
    } catch (error) {
      throw new AdminError(`cannot read the answer from ${url}: ${(error as Error).message}`);
    }
  }

  /** Every page of a list, following `next` to the last. */
  private async allPages<T extends { next?: string | null }>(
    segments: string[],
    merge: (all: T, page: T) => void,
    signal?: AbortSignal,
  ): Promise<T> {
    const all = await this.json<T>('GET', segments, { signal });
    let next = all.next ?? null;
    while (next !== null) {
      const page = await this.json<T>('GET', segments, { query: { after: next }, signal });
      merge(all, page);
      next = page.next ?? null;
    }
    all.next = null;
    return all;
  }

  /** One page of a type's placements, after the cursor `after`, of at most `limit`. */
  placementsPage(
    entityType: string,
    options: CallOptions & { after?: string | undefined; limit?: number | undefined } = {},
  ): Promise<Placements> {
    const { after, limit, signal } = options;
    const query = { after, limit: limit === undefined ? undefined : String(limit) };
    return this.json('GET', ['v1', 'cluster', 'shards', entityType, 'placements'], { query, signal });
  }

  /** Every live placement of a type (every page). */
  placements(entityType: string, options: CallOptions = {}): Promise<Placements> {
    return this.allPages<Placements>(
      ['v1', 'cluster', 'shards', entityType, 'placements'],
      (all, page) => all.placements.push(...page.placements),
      options.signal,
    );
  }

  /** Pins `shard` to the region `target`. */
  setPlacement(entityType: string, shard: string, target: string, options: CallOptions = {}): Promise<PlacementsWritten> {
    const body = { shardId: shard, target };
    return this.json('POST', ['v1', 'cluster', 'shards', entityType, 'placements'], { body, signal: options.signal });
  }

  /** Pins many shards at once, all or nothing. */
  setPlacements(entityType: string, placements: Placement[], options: CallOptions = {}): Promise<PlacementsWritten> {
    const body = { placements };
    return this.json('POST', ['v1', 'cluster', 'shards', entityType, 'placements'], { body, signal: options.signal });
  }

  /** Removes a shard's placement: true when one was removed, false when it had none. */
  async removePlacement(entityType: string, shard: string, options: CallOptions = {}): Promise<boolean> {
    try {
      await this.call('DELETE', this.url(['v1', 'cluster', 'shards', entityType, 'placements', shard]), { signal: options.signal });
      return true;
    } catch (error) {
      if (error instanceof AdminError && error.status === 404 && error.code !== 'unknown-type') return false;
      throw error;
    }
  }

  /** Moves the shards at the next rebalance tick, or at once when `immediate`. */
  rebalance(
    entityType: string,
    shards: string[],
    options: CallOptions & { immediate?: boolean | undefined } = {},
  ): Promise<RebalanceResponse> {
    const body = { shardIds: shards, immediate: options.immediate ?? false };
    return this.json('POST', ['v1', 'cluster', 'shards', entityType, 'rebalance'], { body, signal: options.signal });
  }

  /** Where a shard is and why. */
  shard(entityType: string, shard: string, options: CallOptions = {}): Promise<ShardState> {
    return this.json('GET', ['v1', 'cluster', 'shards', entityType, 'shards', shard], { signal: options.signal });
  }

  /**
   * Writes many shards' attributes at once, all or nothing: each shard's whole
   * map (`{}` clears it); at most 10,000 shards.
   */
  writeAttributes(
    entityType: string,
    shards: Record<string, Record<string, string>>,
    options: CallOptions = {},
  ): Promise<AttributesWritten> {
    const body = { shards };
    return this.json('POST', ['v1', 'cluster', 'shards', entityType, 'attributes'], { body, signal: options.signal });
  }

  /** Sets one shard's attributes (`{}` clears them). */
  setShardAttributes(
    entityType: string,
    shard: string,
    attributes: Record<string, string>,
    options: CallOptions = {},
  ): Promise<AttributesWritten> {
    const path = ['v1', 'cluster', 'shards', entityType, 'shards', shard, 'attributes'];
    return this.json('PUT', path, { body: attributes, signal: options.signal });
  }

  /** Every region in brief (every page). */
  regions(options: CallOptions = {}): Promise<Regions> {
    return this.allPages<Regions>(
      ['v1', 'cluster', 'regions'],
      (all, page) => all.regions.push(...page.regions),
      options.signal,
    );
  }

  /** Drains a region: its shards are handed off, a batch at a time. */
  async drain(address: string, options: CallOptions = {}): Promise<void> {
    await this.call('POST', this.url(['v1', 'cluster', 'regions', address, 'drain']), { signal: options.signal });
  }

  /** Stops draining a region. */
  async undrain(address: string, options: CallOptions = {}): Promise<void> {
    await this.call('DELETE', this.url(['v1', 'cluster', 'regions', address, 'drain']), { signal: options.signal });
  }

  /** A drain's progress. */
  drainState(address: string, options: CallOptions = {}): Promise<DrainState> {
    return this.json('GET', ['v1', 'cluster', 'regions', address, 'drain'], { signal: options.signal });
  }

  /** Uploads a strategy component (the bytes of a `.wasm`). */
  uploadStrategy(component: Uint8Array, options: CallOptions = {}): Promise<StoredStrategy> {
    const url = this.url(['v1', 'strategies']);
    const parts = { body: Buffer.from(component), contentType: 'application/wasm', signal: options.signal };
    return this.call('POST', url, parts).then(
      ({ text }) => JSON.parse(text) as StoredStrategy,
    );
  }

  /** Every uploaded strategy (every page). */
  strategies(options: CallOptions = {}): Promise<Strategies> {
    return this.allPages<Strategies>(
      ['v1', 'strategies'],
      (all, page) => all.strategies.push(...page.strategies),
      options.signal,
    );
  }

  /** A type's strategy: the active one and its history. */
  strategy(entityType: string, options: CallOptions = {}): Promise<StrategyState> {
    return this.json('GET', ['v1', 'cluster', 'shards', entityType, 'strategy'], { signal: options.signal });
  }

  /** Activates a strategy for a type (a built-in's name or an upload's digest). */
  activate(entityType: string, request: ActivateRequest, options: CallOptions = {}): Promise<StrategyState> {
    return this.json('PUT', ['v1', 'cluster', 'shards', entityType, 'strategy'], { body: request, signal: options.signal });
  }

  /** Rolls a type's strategy back to the one before. */
  rollback(entityType: string, options: CallOptions = {}): Promise<StrategyState> {
    return this.json('POST', ['v1', 'cluster', 'shards', entityType, 'strategy', 'rollback'], { signal: options.signal });
  }

  /**
   * The decision event stream (`GET /v1/events`), of one type when
   * `entityType` is given, resuming after `lastEventId`. Iterate it for
   * events; `close()` it when done (or abort `signal`). Ends when the node
   * ends it.
   */
  async events(options: CallOptions & { entityType?: string | undefined; lastEventId?: string | undefined } = {}): Promise<EventStream> {
    const { entityType, lastEventId, signal } = options;
    const url = this.url(['v1', 'events'], { type: entityType });
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    const response = await this.open('GET', url, headers, undefined, signal);
    const status = response.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      const chunks: Buffer[] = [];
      for await (const chunk of response) chunks.push(chunk as Buffer);
      throw errorFrom(url, status, Buffer.concat(chunks).toString('utf8'));
    }
    return new EventStream(url, response, signal);
  }
}

/** An open decision event stream: an async iterable of events; `close()` (or the signal `events` was given) ends it. */
export class EventStream implements AsyncIterable<StreamedEvent> {
  private readonly parser = new SseParser();
  private closed = false;

  constructor(
    private readonly url: URL,
    private readonly response: http.IncomingMessage,
    signal?: AbortSignal,
  ) {
    // An aborted signal ends the stream as `close()` does.
    signal?.addEventListener('abort', () => this.close(), { once: true });
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamedEvent> {
    try {
      for await (const chunk of this.response) {
        for (const { id, data } of this.parser.feed(chunk as Buffer)) {
          let event: DecisionEvent;
          try {
            event = JSON.parse(data) as DecisionEvent;
          } catch (error) {
            throw new AdminError(`cannot read an event from ${this.url}: ${(error as Error).message}`);
          }
          yield { id, event };
        }
      }
    } catch (error) {
      // `close()` during the loop ends it; anything else is the stream's failure.
      if (!this.closed) {
        throw error;
      }
    }
  }

  /** Hangs up: a `for await` over the stream ends (without an error). */
  close(): void {
    this.closed = true;
    this.response.destroy();
  }
}

/** The error of a non-2xx answer: the node's code and message when it sent them. */
function errorFrom(url: URL, status: number, text: string): AdminError {
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    const code = body.error?.code;
    const message = body.error?.message;
    if (typeof code === 'string' && typeof message === 'string') {
      return new AdminError(`the node answered ${status} ${code}: ${message}`, status, code);
    }
  } catch {
    // Not an error body: named below.
  }
  return new AdminError(`the node answered ${status} to ${url} without an error body: ${text.slice(0, 200)}`, status);
}
