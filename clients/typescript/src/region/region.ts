// The region: `Region.start(config, application, transport)` connects to
// the node and serves the application's shards. It owns the clock and the
// I/O and feeds the sans-I/O `RegionCore`, performing its actions in the
// order it emits them (the Rust client's `driver.rs`, on Node's one thread):
//
//   session events (session.ts)   → core.connected / onMessage / disconnected
//   other regions (the inbox)     → core.inbound
//   a shard's stop finished       → core.stopFinished
//   a tick every 50 ms            → core.tickWithLoad, reconnect when due, the leave deadline
//   send / homeOf / leave / …     → the core's matching call
//
// Each running shard has a worker: a promise chain calling the application
// in order (`startShard`, `deliver` per message, `stopShard`), reporting
// the stop back. A stop past its deadline is abandoned.

import { EventEmitter } from 'node:events';

import type { Action, Update } from './actions.js';
import type { Application } from './application.js';
import { DEFAULT_FORWARD_ATTEMPTS, DEFAULT_FORWARD_DEADLINE_MS, DEFAULT_MAX_LOOKUPS_IN_FLIGHT, RegionCore } from './core.js';
import { Replier, Request } from './ask.js';
import { AskError, RegionError, SendError, type DeliveryError } from './errors.js';
import { LoadMeter } from './load.js';
import { Leader, Session, connectUrlOf, type SessionEvent, type SessionParams } from './session.js';
import { InMemoryTransport, TransportError, type Inbox, type Transport } from './transport.js';
import { MAX_ADDRESS_BYTES, MAX_LOAD_SHARDS } from '../wire.js';

/** How often the region ticks its core (ms). */
const TICK_MS = 50;

/** How a region connects and behaves; `Region.start` fills in the defaults. */
export interface RegionConfig {
  /** The node's URL (`http(s)://host:port` or `ws(s)://…`), or every node's of an HA cluster. */
  node: string | string[];
  /** The entity type this region serves. */
  entityType: string;
  /** This region's address, unique in the cluster; other regions reach it by it. */
  address: string;
  /** Greater for every restart; default: milliseconds since the Unix epoch at start. */
  incarnation?: number;
  /** Cluster roles. */
  roles?: string[];
  /** The application's version, shown to operators and strategies. */
  appVersion?: string;
  /** Labels (`zone`, …) strategies place by. */
  labels?: Record<string, string>;
  /** Routes messages only; never a shard's home. */
  proxyOnly?: boolean;
  /** The region token, if the node wants one. */
  token?: string;
  /** PEM certificates to trust for `wss://`/`https://` nodes (a private CA). */
  ca?: string | Buffer;
  /** Most messages buffered for one shard (default 1,000). */
  shardBufferLimit?: number;
  /** Most messages buffered over all shards (default 100,000). */
  totalBufferLimit?: number;
  /** How long `stopShard` may take before the stop is abandoned (default 10 s). */
  stopDeadlineMs?: number;
  /** How long `leave()` waits for the node's `LeaveDone` (default 60 s). */
  leaveTimeoutMs?: number;
  /** The bound of `drainAndLeave()` (default 20 s). */
  drainAndLeaveTimeoutMs?: number;
  /** The first reconnect delay (default 100 ms); it doubles up to `reconnectMaxMs`. */
  reconnectMinMs?: number;
  /** The longest reconnect delay (default 5 s). */
  reconnectMaxMs?: number;
  /** How long to wait for a home before asking again (default 2 s). */
  homeRetryMs?: number;
  /** How long the node may stay silent before registering (default 10 s). */
  responseTimeoutMs?: number;
  /** The bound of the WebSocket handshake and the `Welcome` (default 10 s). */
  connectTimeoutMs?: number;
  /** Most shards a load report names (default 256, at most 1,024). */
  loadReportShards?: number;
  /** How many forwards of one shard may fail in a row before its waiting messages go to `undelivered` (default 10). */
  forwardAttempts?: number;
  /** How long a shard's forwards may keep failing before its waiting messages go to `undelivered` (default 30 s). */
  forwardDeadlineMs?: number;
  /**
   * The attributes the application gives a shard (`{ tenant: 'acme' }`), sent with each request for its
   * home (protocol version 5): the node keeps them when the shard has none yet, and strategies read them.
   * Called once per request: keep it quick. Default none.
   */
  shardAttributes?: ((shard: string) => Record<string, string>) | undefined;
  /**
   * The capacity this region declares when it registers (protocol version 5): named quantities,
   * `{ load: 800, 'memory-mb': 4096 }` (`load` in the units of its shard loads), handed to strategies.
   * At most 16; names 1 to 64 characters of `A-Z a-z 0-9 . _ - /`; amounts finite, zero or more. Default none.
   */
  capacity?: Record<string, number>;
}

/** Most quantities a region's capacity declares. */
const MAX_QUANTITIES = 16;

/** How long a stopping region waits for the node to answer its close frame. */
const CLOSE_BOUND_MS = 2_000;

/** The config with every default filled in. */
type Settled = Required<Omit<RegionConfig, 'token' | 'ca' | 'node' | 'shardAttributes'>> & {
  urls: string[];
  token: string | undefined;
  ca: string | Buffer | undefined;
  shardAttributes: ((shard: string) => Record<string, string>) | undefined;
};

function settle(config: RegionConfig): Settled {
  const problem = (text: string): never => {
    throw new RegionError({ kind: 'Config', problem: text });
  };
  const nodes = Array.isArray(config.node) ? config.node : config.node.split(',').map((n) => n.trim());
  if (nodes.length === 0 || nodes.some((n) => n === '')) {
    problem('name at least one node URL (e.g. http://127.0.0.1:7878)');
  }
  const urls = nodes.map((node) => {
    try {
      return connectUrlOf(node);
    } catch (error) {
      return problem((error as Error).message);
    }
  });
  if (!config.address) problem('the address is empty');
  if (!config.entityType) problem('the entity type is empty');
  if (new TextEncoder().encode(config.address).length > MAX_ADDRESS_BYTES || /[^\x21-\x7e]/.test(config.address)) {
    problem(`an address is 1 to ${MAX_ADDRESS_BYTES} bytes of printable ASCII without spaces, not ${JSON.stringify(config.address)}`);
  }
  if (!/^[A-Za-z0-9._-]{1,128}$/.test(config.entityType)) {
    problem(`an entity type name is 1 to 128 characters of A-Z a-z 0-9 . _ -, not ${JSON.stringify(config.entityType)}`);
  }
  const settled: Settled = {
    urls,
    entityType: config.entityType,
    address: config.address,
    incarnation: config.incarnation ?? Date.now(),
    roles: config.roles ?? [],
    appVersion: config.appVersion ?? '',
    labels: config.labels ?? {},
    proxyOnly: config.proxyOnly ?? false,
    token: config.token,
    ca: config.ca,
    shardBufferLimit: config.shardBufferLimit ?? 1_000,
    totalBufferLimit: config.totalBufferLimit ?? 100_000,
    stopDeadlineMs: config.stopDeadlineMs ?? 10_000,
    leaveTimeoutMs: config.leaveTimeoutMs ?? 60_000,
    drainAndLeaveTimeoutMs: config.drainAndLeaveTimeoutMs ?? 20_000,
    reconnectMinMs: config.reconnectMinMs ?? 100,
    reconnectMaxMs: config.reconnectMaxMs ?? 5_000,
    homeRetryMs: config.homeRetryMs ?? 2_000,
    responseTimeoutMs: config.responseTimeoutMs ?? 10_000,
    connectTimeoutMs: config.connectTimeoutMs ?? 10_000,
    loadReportShards: config.loadReportShards ?? 256,
    forwardAttempts: config.forwardAttempts ?? DEFAULT_FORWARD_ATTEMPTS,
    forwardDeadlineMs: config.forwardDeadlineMs ?? DEFAULT_FORWARD_DEADLINE_MS,
    shardAttributes: config.shardAttributes,
    capacity: config.capacity ?? {},
  };
  const quantities = Object.entries(settled.capacity);
  if (quantities.length > MAX_QUANTITIES) {
    problem(`${quantities.length} capacity quantities; a region declares at most ${MAX_QUANTITIES}`);
  }
  for (const [name, amount] of quantities) {
    if (!/^[A-Za-z0-9._/-]{1,64}$/.test(name)) {
      problem(`a capacity quantity's name is 1 to 64 characters of A-Z a-z 0-9 . _ - /, not ${JSON.stringify(name)}`);
    }
    if (typeof amount !== 'number' || !Number.isFinite(amount) || amount < 0) {
      problem(`capacity quantity ${JSON.stringify(name)} is ${String(amount)}; an amount is a finite number, zero or more`);
    }
  }
  if (settled.shardBufferLimit < 1 || settled.totalBufferLimit < 1) problem('buffer limits must be at least 1');
  if (settled.loadReportShards < 1 || settled.loadReportShards > MAX_LOAD_SHARDS) {
    problem(`loadReportShards is ${settled.loadReportShards}; it must be 1 to ${MAX_LOAD_SHARDS}`);
  }
  if (!(settled.connectTimeoutMs > 0)) problem('the connect timeout must be greater than zero');
  if (!(Number.isSafeInteger(settled.forwardAttempts) && settled.forwardAttempts >= 1 && settled.forwardDeadlineMs > 0)) {
    problem(
      `forwardAttempts (${settled.forwardAttempts}) must be a whole number of at least 1 and forwardDeadlineMs (${settled.forwardDeadlineMs}) greater than zero`,
    );
  }
  if (!(settled.reconnectMinMs > 0 && settled.reconnectMinMs <= settled.reconnectMaxMs)) {
    problem(`the reconnect delays must satisfy 0 < min (${settled.reconnectMinMs} ms) <= max (${settled.reconnectMaxMs} ms)`);
  }
  if (!Number.isSafeInteger(settled.incarnation) || settled.incarnation < 0) {
    problem(`the incarnation must be a whole number from 0, not ${settled.incarnation}`);
  }
  return settled;
}

/**
 * How long a session must stay registered before its end restarts the
 * reconnect delays from the minimum: a node that registers the region and
 * then breaks the session is retried ever more slowly.
 */
export const HEALTHY_SESSION_MS = 10_000;

/** Reconnect delays: doubling from min to max, each drawn from the upper half of the step. */
export class Backoff {
  private step: number;
  private registeredAt: number | null = null;
  constructor(
    private readonly min: number,
    private readonly max: number,
  ) {
    this.step = min;
  }
  /** The session is registered (kept from its first time). */
  registered(now: number): void {
    if (this.registeredAt === null) this.registeredAt = now;
  }
  /** The delay after a session ended at `now`: from the minimum again only after a healthy session. */
  closed(now: number): number {
    if (this.registeredAt !== null && now - this.registeredAt >= HEALTHY_SESSION_MS) this.reset();
    this.registeredAt = null;
    return this.next();
  }
  next(): number {
    const step = this.step;
    this.step = Math.min(this.step * 2, this.max);
    return step / 2 + Math.random() * (step / 2);
  }
  reset(): void {
    this.step = this.min;
  }
}

/** One shard's worker: the application's calls for one run, in order. */
interface Worker {
  /** The end of the chain of calls queued so far. */
  tail: Promise<void>;
  /** Deliveries queued and not yet done. */
  backlog: number;
  /** Set when the stop was abandoned: later calls of this run are skipped. */
  abandoned: boolean;
}

/** How the region is ending. */
type Ending =
  | { type: 'leave'; deadline: number; timedOut: boolean }
  | { type: 'drain-and-leave' }
  | { type: 'shutdown' };

/**
 * The events a region emits: `update` for every {@link Update}, and each
 * update under its own name as well (`registered`, `fenced`,
 * `shardStarted`, `regionRemoved`, …: its `type` with a lower-case first
 * letter), typed as that update: `region.on('shardStarted', ({ shard, epoch }) => …)`.
 */
export type RegionEvents = { update: [Update] } & {
  [K in Update['type'] as Uncapitalize<K>]: [Extract<Update, { type: K }>];
};

/** What the calls that wait take: a signal that gives the wait up (it rejects with the signal's reason). */
export interface WaitOptions {
  signal?: AbortSignal | undefined;
}

/** Rejects at once when `signal` is already aborted, else calls `start` and rejects with the signal's reason when it aborts first. */
function abortable<T>(
  signal: AbortSignal | undefined,
  start: (resolve: (value: T) => void, reject: (error: Error) => void) => () => void,
): Promise<T> {
  if (signal?.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onAbort = (): void => {
      if (settled) return;
      settled = true;
      forget();
      reject(signal?.reason as Error);
    };
    const finish = (): void => {
      settled = true;
      signal?.removeEventListener('abort', onAbort);
    };
    const forget = start(
      (value) => {
        if (settled) return;
        finish();
        resolve(value);
      },
      (error) => {
        if (settled) return;
        finish();
        reject(error);
      },
    );
    // A wait settled within `start` has nothing left to give up.
    if (!settled) signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** What the region routes: a message, or a request with its replier. */
type Parcel<M, R> = M | Request<M, R>;

/** The default time `ask` waits for an answer. */
export const DEFAULT_ASK_TIMEOUT_MS = 5_000;

/** A region serving `M` messages (answering requests with `R` replies). See the module comment. */
export class Region<M, R = unknown> extends EventEmitter<RegionEvents> {
  private readonly core: RegionCore<Parcel<M, R>>;
  private readonly started = performance.now();
  private readonly params: SessionParams;
  private readonly leader = new Leader();
  private readonly backoff: Backoff;
  private readonly meter = new LoadMeter();
  private readonly workers = new Map<string, Worker>();
  private readonly waiters = new Map<string, { resolve: (home: string) => void; reject: (error: Error) => void }[]>();
  private readonly done: { resolve: () => void; reject: (error: Error) => void }[] = [];
  private readonly registeredWaiters: { resolve: () => void; reject: (error: Error) => void }[] = [];
  private readonly inboxHandle: Inbox<M, R>;
  private session: Session | null = null;
  private generation = 0;
  private link: { type: 'waiting'; at: number } | { type: 'connecting' } | { type: 'up' } = { type: 'waiting', at: 0 };
  private ending: Ending | null = null;
  private ended: RegionError | null = null;
  private refused: string | null = null;
  private readonly ticker: NodeJS.Timeout;

  private constructor(
    private readonly config: Settled,
    private readonly app: Application<M, R>,
    private readonly transport: Transport<M, R>,
  ) {
    super();
    this.core = new RegionCore<Parcel<M, R>>({
      registration: {
        address: config.address,
        incarnation: config.incarnation,
        roles: config.roles,
        appVersion: config.appVersion,
        labels: config.labels,
        proxyOnly: config.proxyOnly,
      },
      shardBufferLimit: config.shardBufferLimit,
      totalBufferLimit: config.totalBufferLimit,
      stopDeadlineMs: config.stopDeadlineMs,
      homeRetryMs: config.homeRetryMs,
      responseTimeoutMs: config.responseTimeoutMs,
      forwardAttempts: config.forwardAttempts,
      forwardDeadlineMs: config.forwardDeadlineMs,
      maxLookupsInFlight: DEFAULT_MAX_LOOKUPS_IN_FLIGHT,
    });
    this.params = {
      urls: config.urls,
      entityType: config.entityType,
      token: config.token,
      ca: config.ca,
      handshakeTimeoutMs: config.connectTimeoutMs,
      shardAttributes: config.shardAttributes,
      capacity: config.capacity,
    };
    this.backoff = new Backoff(config.reconnectMinMs, config.reconnectMaxMs);
    this.inboxHandle = {
      address: config.address,
      deliver: (shard, message) => this.onInbound(shard, message),
      ask: (shard, message, replier) => this.onInbound(shard, new Request(message, replier)),
      notDelivered: (to, shard, messages, error) => this.onNotDelivered(to, shard, messages, error),
    };
    transport.attach?.(this.inboxHandle);
    this.ticker = setInterval(() => this.onTick(), TICK_MS);
    queueMicrotask(() => this.onTick());
  }

  /**
   * Starts a region: it connects, registers and serves `app`'s shards.
   * Throws a {@link RegionError} of kind `Config` naming a bad setting.
   */
  static start<M, R = unknown>(
    config: RegionConfig,
    app: Application<M, R>,
    transport: Transport<M, R> = new InMemoryTransport<M, R>(),
  ): Region<M, R> {
    return new Region(settle(config), app, transport);
  }

  /** This region's address. */
  get address(): string {
    return this.config.address;
  }

  /** This region's incarnation. */
  get incarnation(): number {
    return this.config.incarnation;
  }

  private now(): number {
    return Math.floor(performance.now() - this.started);
  }

  /**
   * Where `shard` lives: at once when cached, else once the node answers.
   * Rejects with a {@link RegionError}, or the signal's reason when it aborts first.
   */
  homeOf(shard: string, options: WaitOptions = {}): Promise<string> {
    if (this.ended) {
      return Promise.reject(this.ended);
    }
    let lookup;
    try {
      lookup = this.core.requestHome(shard, this.now());
    } catch (error) {
      return Promise.reject(error as Error);
    }
    if (lookup.type === 'Known') {
      return Promise.resolve(lookup.home);
    }
    const actions = lookup.actions;
    return abortable<string>(options.signal, (resolve, reject) => {
      const waiter = { resolve, reject };
      const list = this.waiters.get(shard) ?? [];
      list.push(waiter);
      this.waiters.set(shard, list);
      this.execute(actions);
      return () => {
        const left = (this.waiters.get(shard) ?? []).filter((w) => w !== waiter);
        if (left.length > 0) this.waiters.set(shard, left);
        else this.waiters.delete(shard);
      };
    });
  }

  /** Sends `message` to `shard`, wherever it lives. Throws a {@link SendError} when it cannot take it. */
  send(shard: string, message: M): void {
    this.route(shard, message);
  }

  /** Hands a message or request to the core now; throws a {@link SendError} when the region has ended or the shard's worker here is full. */
  private route(shard: string, parcel: Parcel<M, R>): void {
    if (this.ended) {
      throw new SendError({ kind: 'Stopped' });
    }
    const limit = this.config.shardBufferLimit;
    if (this.core.deliversLocally(shard) && (this.workers.get(shard)?.backlog ?? 0) >= limit) {
      throw new SendError({ kind: 'BufferFull', shard, limit });
    }
    this.execute(this.core.send(shard, parcel, this.now()));
  }

  /**
   * Asks `shard`, wherever it lives, and resolves with its answer (the
   * application's `answer` at its home). The request is routed like a
   * `send` (in order with the sends to the same shard, buffered across
   * hand-offs, resent after a lost home) and answered at most once. Rejects
   * with an {@link AskError} naming why there is no answer: `Send` (the
   * region did not take it), `Timeout` (after `timeoutMs`, default 5 s),
   * `NotDelivered` (it never reached the home), `Failed` (the home failed it);
   * or with the signal's reason when `signal` aborts first (a reply that
   * comes later is dropped; the request may still run at the home).
   */
  ask(shard: string, message: M, options: WaitOptions & { timeoutMs?: number | undefined } = {}): Promise<R> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_ASK_TIMEOUT_MS;
    return abortable<R>(options.signal, (resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const replier = new Replier<R>(shard, timeoutMs, (outcome) => {
        clearTimeout(timer);
        if (outcome.ok) resolve(outcome.reply);
        else reject(outcome.error);
      });
      try {
        timer = setTimeout(() => replier.fail(new AskError({ kind: 'Timeout', shard, timeoutMs })), timeoutMs);
        this.route(shard, new Request(message, replier));
      } catch (error) {
        if (!(error instanceof SendError)) throw error;
        replier.fail(new AskError({ kind: 'Send', error }));
      }
      return () => clearTimeout(timer);
    });
  }

  /** `units` of work done by `shard` (requests weighted by their cost, bytes…): reported per second. */
  recordLoad(shard: string, units: number): void {
    this.meter.record(shard, units, this.now());
  }

  /** The shard's load is `rate` per second until set again (0 clears it). */
  setLoad(shard: string, rate: number): void {
    this.meter.set(shard, rate, this.now());
  }

  /** Resolves once registered; rejects when the node refuses the region, it stops, or `signal` aborts first. */
  waitRegistered(options: WaitOptions = {}): Promise<void> {
    if (this.ended) return Promise.reject(this.ended);
    if (this.core.isRegistered()) return Promise.resolve();
    if (this.refused !== null) return Promise.reject(new RegionError({ kind: 'Refused', reason: this.refused }));
    return abortable<void>(options.signal, (resolve, reject) => {
      const waiter = { resolve: () => resolve(), reject };
      this.registeredWaiters.push(waiter);
      return () => {
        const at = this.registeredWaiters.indexOf(waiter);
        if (at >= 0) this.registeredWaiters.splice(at, 1);
      };
    });
  }

  /** True while registered with the node (never once the region has stopped). */
  isRegistered(): boolean {
    return this.ended === null && this.core.isRegistered();
  }

  /** True while fenced (the lease ran out unrenewed). */
  isFenced(): boolean {
    return this.core.isFenced();
  }

  /** The shards running here, sorted. */
  runningShards(): string[] {
    return this.core.running();
  }

  /** The epoch `shard` runs here at, while it runs. */
  epochOf(shard: string): number | undefined {
    return this.core.epochOf(shard);
  }

  /** Asks the node to drain this region (`true`) or stop draining it. */
  requestDrain(draining: boolean): void {
    this.execute(this.core.requestDrain(draining, this.now()));
  }

  /** Leaves: the node hands every shard off, then the region stops. Rejects when the node does not confirm in time. */
  leave(): Promise<void> {
    return this.control(() => {
      if (this.ending === null) {
        this.ending = { type: 'leave', deadline: this.now() + this.config.leaveTimeoutMs, timedOut: false };
        this.execute(this.core.leave(this.now()));
      }
    });
  }

  /** Drains, then leaves, within `drainAndLeaveTimeoutMs`: for a Kubernetes preStop hook. */
  drainAndLeave(): Promise<void> {
    return this.control(() => {
      if (this.ending === null) {
        this.ending = { type: 'drain-and-leave' };
        this.execute(this.core.drainAndLeave(this.config.drainAndLeaveTimeoutMs, this.now()));
      }
    });
  }

  /** Stops every shard and closes the session, without handing shards off. */
  shutdown(): Promise<void> {
    return this.control(() => this.shutDown()).catch(() => undefined);
  }

  private control(begin: () => void): Promise<void> {
    if (this.ended) {
      return Promise.reject(this.ended);
    }
    return new Promise((resolve, reject) => {
      this.done.push({ resolve, reject });
      begin();
      this.checkFinished();
    });
  }

  private shutDown(): void {
    if (this.ending?.type !== 'shutdown') {
      this.ending = { type: 'shutdown' };
      this.execute(this.core.shutdown(this.now()));
    }
  }

  /** Performs the core's actions in order; forwards the transport could not carry go back to the core. */
  private execute(actions: Action<Parcel<M, R>>[]): void {
    const queue = [...actions];
    const failed = new Map<string, { to: string; messages: Parcel<M, R>[]; reason: string }>();
    for (;;) {
      for (let action = queue.shift(); action !== undefined; action = queue.shift()) {
        switch (action.type) {
          case 'Send':
            this.session?.send(action.message);
            break;
          case 'Start':
            this.startWorker(action.shard, action.epoch);
            break;
          case 'Deliver': {
            const worker = this.workers.get(action.shard);
            if (!worker && action.message instanceof Request) {
              action.message.replier.failWith('the shard stopped before the request reached it');
            }
            if (worker) {
              worker.backlog += 1;
              const { shard, message } = action;
              if (message instanceof Request) {
                this.chain(worker, shard, async () => {
                  try {
                    await this.answer(shard, message);
                  } finally {
                    worker.backlog -= 1;
                  }
                });
              } else {
                this.chain(worker, shard, async () => {
                  await this.app.deliver(shard, message);
                  worker.backlog -= 1;
                });
              }
            }
            break;
          }
          case 'Stop': {
            const worker = this.workers.get(action.shard);
            if (worker) {
              const shard = action.shard;
              this.chain(worker, shard, async () => {
                try {
                  await this.app.stopShard(shard);
                } finally {
                  // Reported even when the application threw: the shard is not running.
                  if (this.workers.get(shard) === worker && !this.ended) {
                    this.workers.delete(shard);
                    this.execute(this.core.stopFinished(shard, this.now()));
                    this.checkFinished();
                  }
                }
              });
            }
            break;
          }
          case 'AbandonStop': {
            const worker = this.workers.get(action.shard);
            if (worker) {
              worker.abandoned = true;
              this.workers.delete(action.shard);
            }
            break;
          }
          case 'Forward': {
            const pending = failed.get(action.shard);
            if (pending) {
              pending.messages.push(action.message);
              break;
            }
            try {
              this.forward(action.to, action.shard, action.message);
            } catch (error) {
              if (!(error instanceof TransportError)) throw error;
              failed.set(action.shard, { to: action.to, messages: [action.message], reason: error.message });
            }
            break;
          }
          case 'Undelivered':
            if (action.message instanceof Request) {
              action.message.replier.fail(new AskError({ kind: 'NotDelivered', error: action.error }));
            } else {
              this.giveUp(action.shard, action.message, action.error);
            }
            break;
          case 'Publish':
            this.publish(action.update);
            break;
          case 'Reconnect':
            this.session?.close(action.reason);
            break;
        }
      }
      if (failed.size === 0) {
        return;
      }
      for (const [shard, { to, messages, reason }] of failed) {
        queue.push(...this.core.forwardFailed(shard, to, messages, reason, this.now()));
      }
      failed.clear();
    }
  }

  /** Hands a message or request to the transport; throws a TransportError when it cannot carry it. */
  private forward(to: string, shard: string, parcel: Parcel<M, R>): void {
    if (!(parcel instanceof Request)) {
      this.transport.send(to, shard, parcel);
    } else if (this.transport.ask) {
      this.transport.ask(to, shard, parcel.message, parcel.replier);
    } else {
      parcel.replier.failWith("the region's transport carries no requests");
    }
  }

  /** Answers a request with the application's `answer`, or fails it by name. */
  private async answer(shard: string, request: Request<M, R>): Promise<void> {
    if (request.replier.answered) {
      return;
    }
    if (!this.app.answer) {
      request.replier.failWith('this application answers no requests');
      return;
    }
    try {
      request.replier.reply(await this.app.answer(shard, request.message));
    } catch (error) {
      request.replier.failWith(error instanceof Error ? error.message : String(error));
    }
  }

  /** Queues `call` after the worker's earlier calls; an application's throw is reported and the run goes on. */
  private chain(worker: Worker, shard: string, call: () => Promise<void>): void {
    worker.tail = worker.tail.then(async () => {
      if (!worker.abandoned) {
        try {
          await call();
        } catch (error) {
          console.error(`shardalloc region ${this.address}: the application threw on shard ${shard}:`, error);
        }
      }
    });
  }

  private startWorker(shard: string, epoch: number): void {
    const old = this.workers.get(shard);
    if (old) old.abandoned = true;
    const worker: Worker = { tail: Promise.resolve(), backlog: 0, abandoned: false };
    this.workers.set(shard, worker);
    this.chain(worker, shard, async () => {
      await this.app.startShard(shard, epoch);
    });
  }

  private publish(update: Update): void {
    switch (update.type) {
      case 'HomeChanged': {
        for (const waiter of this.waiters.get(update.shard) ?? []) waiter.resolve(update.home);
        this.waiters.delete(update.shard);
        break;
      }
      case 'ShardRefused': {
        const error = new RegionError({ kind: 'ShardRefused', shard: update.shard, reason: update.reason });
        for (const waiter of this.waiters.get(update.shard) ?? []) waiter.reject(error);
        this.waiters.delete(update.shard);
        break;
      }
      case 'Registered':
        this.refused = null;
        for (const waiter of this.registeredWaiters.splice(0)) waiter.resolve();
        break;
      case 'Refused': {
        this.refused = update.reason;
        const error = new RegionError({ kind: 'Refused', reason: update.reason });
        for (const waiter of this.registeredWaiters.splice(0)) waiter.reject(error);
        break;
      }
      default:
        break;
    }
    this.emit('update', update);
    const name = (update.type[0]?.toLowerCase() ?? '') + update.type.slice(1);
    (this.emit as (event: string, update: Update) => boolean)(name, update);
  }

  /** Hands a given-up message to the application (or the console when it has no `undelivered`). */
  private giveUp(shard: string, message: M, error: DeliveryError): void {
    try {
      if (this.app.undelivered) {
        this.app.undelivered(shard, message, error);
      } else {
        console.warn(`shardalloc region ${this.address}: ${error.message}`);
      }
    } catch (thrown) {
      console.error(`shardalloc region ${this.address}: the application threw in undelivered for shard ${shard}:`, thrown);
    }
  }

  /** The transport found later that these forwards never arrived. */
  private onNotDelivered(to: string, shard: string, messages: readonly Parcel<M, R>[], error: TransportError): void {
    if (this.ended || messages.length === 0) {
      return;
    }
    this.execute(this.core.forwardFailed(shard, to, messages, error.message, this.now()));
  }

  private onInbound(shard: string, message: Parcel<M, R>): void {
    if (this.ended) {
      throw new TransportError('closed', `region ${this.address} has stopped`);
    }
    try {
      this.execute(this.core.inbound(shard, message, this.now()));
    } catch (error) {
      if (error instanceof SendError && error.kind === 'TotalBufferFull') {
        throw new TransportError('inbox-full', `the inbox of region ${this.address} is full: ${error.message}`);
      }
      throw error;
    }
  }

  private onSession(generation: number, event: SessionEvent): void {
    if (generation !== this.generation || this.ended) {
      return;
    }
    switch (event.type) {
      case 'connected':
        this.link = { type: 'up' };
        this.execute(this.core.connected(this.now()));
        break;
      case 'message':
        this.execute(this.core.onMessage(event.message, this.now()));
        if (this.core.isRegistered()) this.backoff.registered(this.now());
        break;
      case 'refused':
        this.publish({ type: 'Refused', reason: event.reason });
        break;
      case 'closed': {
        const connected = this.link.type === 'up';
        this.session = null;
        this.link = { type: 'waiting', at: this.now() + this.backoff.closed(this.now()) };
        this.execute(this.core.disconnected(this.now(), event.reason));
        if (!connected) {
          // An attempt that never connected: the core had no session to lose,
          // but the application hears why (a wrong URL, an untrusted certificate).
          this.publish({ type: 'Disconnected', reason: event.reason });
        }
        break;
      }
    }
    this.checkFinished();
  }

  private onTick(): void {
    if (this.ended) {
      return;
    }
    const now = this.now();
    this.execute(
      this.core.tickWithLoad(
        now,
        () => this.app.metrics?.() ?? {},
        (runs: (shard: string) => boolean) => this.meter.report(now, runs, this.config.loadReportShards),
      ),
    );
    if (this.link.type === 'waiting' && now >= this.link.at && this.ending?.type !== 'shutdown') {
      this.generation += 1;
      const generation = this.generation;
      this.link = { type: 'connecting' };
      this.session = Session.open(this.params, this.leader, generation, (event) => this.onSession(generation, event));
    }
    if (this.ending?.type === 'leave' && !this.ending.timedOut && now >= this.ending.deadline && !this.core.hasLeft()) {
      this.ending.timedOut = true;
      this.execute(this.core.shutdown(now));
    }
    this.checkFinished();
  }

  private checkFinished(): void {
    if (this.ended || this.ending === null || !this.core.isIdle()) {
      return;
    }
    const ending = this.ending;
    let outcome: RegionError | null;
    if (ending.type === 'shutdown') {
      outcome = null;
    } else if (ending.type === 'leave') {
      if (!ending.timedOut && !this.core.hasLeft()) return;
      outcome = ending.timedOut ? new RegionError({ kind: 'LeaveTimedOut', timeoutMs: this.config.leaveTimeoutMs }) : null;
    } else {
      const departure = this.core.departure();
      if (departure === undefined) return;
      outcome = departure.ok ? null : departure.error;
    }
    this.finish(ending.type === 'shutdown' ? new RegionError({ kind: 'ShutDown' }) : new RegionError({ kind: 'Left' }), outcome);
  }

  private finish(ended: RegionError, outcome: RegionError | null): void {
    this.ended = ended;
    clearInterval(this.ticker);
    for (const [, waiters] of this.waiters) for (const waiter of waiters) waiter.reject(ended);
    this.waiters.clear();
    for (const waiter of this.registeredWaiters.splice(0)) waiter.reject(ended);
    for (const worker of this.workers.values()) worker.abandoned = true;
    this.workers.clear();
    this.transport.detach?.(this.inboxHandle);
    const session = this.session;
    this.session = null;
    // The close frame goes after what is queued (a `Leave`); the caller is
    // answered once the node saw it (at most 2 s), so a process exiting
    // right after `shutdown()` leaves the node a clean close.
    session?.close('the region stopped');
    const closed = session ? session.whenClosed(CLOSE_BOUND_MS) : Promise.resolve();
    const done = this.done.splice(0);
    void closed.then(() => {
      for (const waiter of done) {
        if (outcome) waiter.reject(outcome);
        else waiter.resolve();
      }
    });
  }

  /** Messages sent to the region's `send` that went nowhere yet (buffered for a home). */
  buffered(): number {
    return this.core.buffered();
  }

  /** Used by tests and a transport that has its own network: hand a forwarded message in. */
  inbox(): Inbox<M, R> {
    return this.inboxHandle;
  }
}
