// The region's deterministic, sans-I/O core: `RegionCore` (the Rust
// client's `region/core.rs`, the same state machine).
//
// Events go in (a `NodeMessage`, an application send, a message from
// another region, a tick, a finished stop, the session going up or down),
// each carrying the time as milliseconds of the driver's clock (a
// `number`); `Action`s come out, in the order the driver must perform
// them. The core has no clock, no sockets, no timers and no randomness, so
// every decision can be tested with literal action lists.
//
//  driver ──event(now)──▶ RegionCore ──▶ Action[]
//                                         ├─ Send (RegionMessage)     → the node session
//                                         ├─ Start / Stop / Deliver  → the application (per shard, in order)
//                                         ├─ AbandonStop             → give up on a stop past its deadline
//                                         ├─ Forward                 → the transport, to another region
//                                         ├─ Publish (Update)        → the updates stream
//                                         └─ Reconnect               → hang up; the driver reconnects
//
// Lease. Registration and heartbeats share one sequence counter; the send
// time of the last `SEQUENCE_WINDOW` of them is kept. `Registered` and
// `HeartbeatAck` extend the lease to *that message's* send time plus
// `leaseMs`, and drop every entry up to the acknowledged sequence, so a
// late or lost acknowledgement never stretches the lease. When the lease
// runs out (checked at every event) the region fences itself: it stops
// every running shard and forgets every cached home. It starts shards
// again only after an acknowledgement renews the lease.
//
// Per-shard state. Each shard the region has heard of has a cached home
// (or none), a FIFO buffer of messages waiting for a home, whether a
// `GetShardHome` is out, whether someone awaits the home, and its local
// state (idle, running, stopping). Messages are buffered while the home is
// unknown (never asked, asked, or dropped by `BeginHandOff`) and flushed
// in order when a `ShardHome` answer arrives, so one sender's messages to
// one shard keep their order across hand-offs. Wherever several shards
// are acted on at once, they are taken in the order of their ids' UTF-8
// bytes, as the Rust client's `BTreeMap` takes them.
//
// Drain and leave. `drainAndLeave` is a departure within a bound (for a
// Kubernetes preStop hook): `Drain{draining: true}` first, so the node
// hands the shards off (`drain_batch` at a time) to regions that can take
// them while this one still serves what it has; `Leave` once no shard runs
// here, or at half the bound when shards still run (the drain stalled: no
// other region can take them; a leaving region is let go even then); done
// at `LeaveDone`. When the bound passes first, the core gives up: it stops
// every shard still running, undrains the region if it asked to leave (so
// a restart at the same address is not left draining), and reports what
// was left (a `DrainAndLeaveTimedOut` `RegionError`).
//
// The Rust core logs warnings (a fence, a stale run stopped, an abandoned
// stop); this one does no I/O at all, so it has no log: every such event
// also shows in the actions.

import { compareUtf8 } from '../postcard.js';
import { MAX_SHARD_ID_BYTES, type LoadReport, type NodeMessage, type RegionMessage } from '../wire.js';
import type { Action, HomeLookup, Update } from './actions.js';
import { DeliveryError, RegionError, SendError, checkShard } from './errors.js';

/** How many registration and heartbeat send times are kept for lease renewal. */
export const SEQUENCE_WINDOW = 64;

/** Default per-shard buffer limit, in messages. */
export const DEFAULT_SHARD_BUFFER_LIMIT = 1_000;

/** Default region-wide buffer limit, in messages. */
export const DEFAULT_TOTAL_BUFFER_LIMIT = 100_000;

/**
 * The shortest silence, in milliseconds, after which a registered region
 * gives its session up (three heartbeat intervals, when longer).
 */
export const MIN_SILENCE_MS = 1_000;

/** Default number of failed forwards in a row after which a shard's messages are given up. */
export const DEFAULT_FORWARD_ATTEMPTS = 10;

/**
 * Default time a shard's forwards may keep failing before its messages are
 * given up: twice the node's default removal time (15 s).
 */
export const DEFAULT_FORWARD_DEADLINE_MS = 30_000;

/**
 * Default most homes asked of the node at once (`maxLookupsInFlight`): the
 * node's own bound on one session's lookups queued for its coordinator, so
 * a region's lookups never wait in its connection, where its heartbeats
 * would queue behind them.
 */
export const DEFAULT_MAX_LOOKUPS_IN_FLIGHT = 256;

/**
 * A lookup unanswered is asked again after `homeRetryMs`, then after twice
 * that, four times, … up to `2 ** MAX_RETRY_DOUBLINGS` times that, so a node
 * slower than the retry is not sent every unanswered lookup again and again.
 */
export const MAX_RETRY_DOUBLINGS = 4;

/** A `Register` message without its tag and sequence: who the region is. */
export type Registration = Omit<Extract<RegionMessage, { type: 'Register' }>, 'type' | 'sequence'>;

/** What the core needs to know about its region. */
export interface CoreConfig {
  /** The registration sent to the node (its `sequence` is filled in per send). */
  registration: Registration;
  /** Most messages buffered for one shard. */
  shardBufferLimit: number;
  /** Most messages buffered over all shards. */
  totalBufferLimit: number;
  /**
   * How long the application may take to stop a shard (including the
   * deliveries queued before the stop), in milliseconds; past it the stop
   * is abandoned and reported anyway.
   */
  stopDeadlineMs: number;
  /**
   * How long to wait for a `ShardHome` answer before asking again, in
   * milliseconds (the node may drop an answer overtaken by a change, or
   * forget a waiting request when it restarts).
   */
  homeRetryMs: number;
  /**
   * How long the node may stay silent (no `Welcome`, no registration
   * answer) before the session is given up, in milliseconds. Once
   * registered, the limit is three heartbeat intervals (at least
   * {@link MIN_SILENCE_MS}) instead.
   */
  responseTimeoutMs: number;
  /**
   * How many forwards of one shard may fail in a row (against homes the
   * node keeps naming) before its messages are given up: each one given
   * back or waiting goes to the application as an `Undelivered` action. A
   * home the node names anew starts a new run.
   */
  forwardAttempts: number;
  /** How long a shard's forwards may keep failing, from the run's first failure, before its messages are given up. */
  forwardDeadlineMs: number;
  /**
   * Most homes asked of the node and not yet answered (a failed forward's
   * wait for its retry counts too); more wait their turn, in the order they
   * were needed, and go out as answers come. At least 1.
   */
  maxLookupsInFlight: number;
}

/** A configuration with the default limits and timings (the Rust `CoreConfig::new`). */
export function coreConfig(registration: Registration): CoreConfig {
  return {
    registration,
    shardBufferLimit: DEFAULT_SHARD_BUFFER_LIMIT,
    totalBufferLimit: DEFAULT_TOTAL_BUFFER_LIMIT,
    forwardAttempts: DEFAULT_FORWARD_ATTEMPTS,
    forwardDeadlineMs: DEFAULT_FORWARD_DEADLINE_MS,
    maxLookupsInFlight: DEFAULT_MAX_LOOKUPS_IN_FLIGHT,
    stopDeadlineMs: 10_000,
    homeRetryMs: 2_000,
    responseTimeoutMs: 10_000,
  };
}

/**
 * How a `drainAndLeave` ended: `ok` once the node let the region go, else
 * the error (the bound passed first).
 */
export type DepartureOutcome = { ok: true } | { ok: false; error: RegionError };

/** The application's side of a shard on this region. */
type Local =
  | { state: 'Idle' }
  | { state: 'Running' }
  /** `report`: send `ShardStopped` when done (a hand-off asked for the stop). */
  | { state: 'Stopping'; deadline: number; report: boolean };

const IDLE: Local = { state: 'Idle' };
const RUNNING: Local = { state: 'Running' };

interface ShardEntry<M> {
  home: string | undefined;
  buffer: M[];
  /**
   * When `GetShardHome` was last sent (or a failed forward deferred it);
   * undefined when no answer is expected.
   */
  askedAt: number | undefined;
  /** Someone awaits the home (`requestHome`). */
  wanted: boolean;
  /** In the core's `waiting` queue for a place among the lookups in flight. */
  queued: boolean;
  /** How many times the lookup out was sent again unanswered. */
  repeats: number;
  /** `askedAt` is a failed forward's wait, not a lookup sent: the ask after it is the first. */
  deferred: boolean;
  local: Local;
  /** The epoch of the run here, while it runs. */
  epoch: number;
  /** A hand-off stop finished while the session was down. */
  unreportedStop: boolean;
  /** The run of failed forwards under way, if any. */
  failing: Failing | undefined;
  /**
   * How many messages at the front of `buffer` came back from failed
   * forwards: later ones come back behind them, ahead of the messages never
   * sent, so reports arriving one by one keep the send order.
   */
  returned: number;
  /**
   * A failure was already counted since the last home answer: the forwards
   * of one round count as one attempt, however many reports they come back in.
   */
  roundFailed: boolean;
}

/** A shard's run of failed forwards: since when, how many, the last one. */
interface Failing {
  since: number;
  attempts: number;
  to: string;
  reason: string;
}

function newEntry<M>(): ShardEntry<M> {
  return {
    home: undefined,
    buffer: [],
    askedAt: undefined,
    wanted: false,
    queued: false,
    repeats: 0,
    deferred: false,
    local: IDLE,
    epoch: 0,
    unreportedStop: false,
    failing: undefined,
    returned: 0,
    roundFailed: false,
  };
}

/** The error of a run of failed forwards past its deadline. */
function deadlinePassed(shard: string, failing: Failing, now: number): DeliveryError {
  return new DeliveryError({
    kind: 'DeadlinePassed',
    shard,
    to: failing.to,
    waitedMs: Math.max(0, now - failing.since),
    reason: failing.reason,
  });
}

function needsHome<M>(entry: ShardEntry<M>): boolean {
  return entry.home === undefined && (entry.wanted || entry.buffer.length > 0);
}

function isEmpty<M>(entry: ShardEntry<M>): boolean {
  return (
    entry.home === undefined &&
    entry.buffer.length === 0 &&
    entry.askedAt === undefined &&
    !entry.wanted &&
    entry.local.state === 'Idle' &&
    !entry.unreportedStop
  );
}

/** A `drainAndLeave` under way (see the file's comment). */
interface Departure {
  /** The bound asked for. */
  boundMs: number;
  /** Send `Leave` from then on even if shards still run here. */
  leaveAt: number;
  /** Give up from then on. */
  giveUpAt: number;
  /** How it ended, once it has. */
  outcome: DepartureOutcome | undefined;
}

/** The session's registration state. */
type Link =
  /** No session. */
  | { state: 'Down' }
  /** A `Register` with this sequence is out. */
  | { state: 'Registering'; sequence: number }
  /** Registered on this session. */
  | { state: 'Registered' };

/**
 * The region's state machine: events in, `Action`s out. `M` is the
 * application's message type. See the file's comment.
 */
export class RegionCore<M> {
  /** The configuration. */
  readonly config: Readonly<CoreConfig>;
  private link: Link = { state: 'Down' };
  /** Send time of recent registrations and heartbeats, by sequence (inserted in increasing order). */
  private readonly sent = new Map<number, number>();
  private sequence = 1;
  private leaseEnd: number | undefined = undefined;
  private fenced = false;
  private heartbeatIntervalMs = 1_000;
  private nextHeartbeat = 0;
  private lastHeard = 0;
  private readonly shards = new Map<string, ShardEntry<M>>();
  /** The shards' ids in UTF-8 byte order, while no shard was added or removed since. */
  private sortedIds: string[] | undefined = undefined;
  private bufferedCount = 0;
  /** Shards whose `askedAt` is set: homes asked and not answered. */
  private asking = 0;
  /**
   * Shards that needed a home while `asking` was at its bound, in that
   * order (each is checked when its turn comes).
   */
  private waiting: string[] = [];
  private waitingHead = 0;
  private leaving = false;
  /** `Leave` was sent (on some session). */
  private leaveSent = false;
  private left = false;
  /** Shutting down or left: nothing starts any more. */
  private closing = false;
  /** A drain request to send once registered. */
  private drainRequest: boolean | undefined = undefined;
  /** A drain-and-leave under way or ended. */
  private departing: Departure | undefined = undefined;
  /**
   * What a call found to do before it failed (the lease ran out in a `send`
   * the buffers then refused): done first at the next call, so a fence's
   * stops are never lost.
   */
  private deferred: Action<M>[] = [];

  /** A region that has not connected yet. */
  constructor(config: CoreConfig) {
    this.config = config;
  }

  private get address(): string {
    return this.config.registration.address;
  }

  /** True while registered on the current session. */
  isRegistered(): boolean {
    return this.link.state === 'Registered';
  }

  /** True while the region is fenced: its lease ran out and was not renewed since. */
  isFenced(): boolean {
    return this.fenced;
  }

  /** When the lease runs out, in milliseconds of the driver's clock (undefined if the region never held one). */
  leaseUntil(): number | undefined {
    return this.leaseEnd;
  }

  /** True once the node let the region go (`LeaveDone`, or `NotRegistered` while leaving). */
  hasLeft(): boolean {
    return this.left;
  }

  /** True when no shard runs or is stopping. */
  isIdle(): boolean {
    for (const entry of this.shards.values()) {
      if (entry.local.state !== 'Idle') {
        return false;
      }
    }
    return true;
  }

  /** The shards the application runs (started, and not yet stopped), in UTF-8 byte order. */
  running(): string[] {
    return this.ordered()
      .filter(([, entry]) => entry.local.state !== 'Idle')
      .map(([shard]) => shard);
  }

  /** The epoch a shard runs here at, while it runs (not while stopping). */
  epochOf(shard: string): number | undefined {
    const entry = this.shards.get(shard);
    return entry?.local.state === 'Running' ? entry.epoch : undefined;
  }

  /** Messages buffered over all shards. */
  buffered(): number {
    return this.bufferedCount;
  }

  /** The cached home of a shard. */
  cachedHome(shard: string): string | undefined {
    return this.shards.get(shard)?.home;
  }

  /** True when a message sent to the shard now would be delivered here. */
  deliversLocally(shard: string): boolean {
    const entry = this.shards.get(shard);
    return entry !== undefined && entry.local.state === 'Running' && entry.home === this.address;
  }

  /** The session is up (the node welcomed the region): register. */
  connected(now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    this.lastHeard = now;
    if (!this.left) {
      this.register(now, out);
    }
    return out;
  }

  /**
   * The session is down. The lease keeps running out; cached homes stay
   * (they are valid while the lease is); outstanding home requests are
   * asked again after the next registration.
   */
  disconnected(now: number, reason: string): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    if (this.link.state === 'Down') {
      return out;
    }
    this.link = { state: 'Down' };
    this.forgetAsked();
    this.forgetEmpty();
    out.push(publish({ type: 'Disconnected', reason }));
    return out;
  }

  /** A message from the node. */
  onMessage(message: NodeMessage, now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    const violation = checkLimits(message);
    if (violation !== null) {
      // Nothing of it is believed: hang up (the driver reconnects with a growing delay).
      out.push({ type: 'Reconnect', reason: `protocol violation: ${violation}` });
      return out;
    }
    this.lastHeard = now;
    switch (message.type) {
      // The session handles both in its handshake.
      case 'Welcome':
      case 'Redirect':
        break;
      case 'Refused':
        out.push(publish({ type: 'Refused', reason: message.reason }));
        out.push({ type: 'Reconnect', reason: `the node refused the session: ${message.reason}` });
        break;
      case 'Registered':
        this.onRegistered(message, now, out);
        break;
      case 'RegisterRefused':
        out.push(publish({ type: 'Refused', reason: message.reason }));
        out.push({ type: 'Reconnect', reason: `the node refused the registration: ${message.reason}` });
        break;
      case 'HeartbeatAck':
        // Also while re-registering: the node granted this lease.
        if (
          message.incarnation === this.config.registration.incarnation &&
          this.link.state !== 'Down' &&
          this.renew(message.sequence, message.leaseMs, now, out)
        ) {
          this.askMissing(now, out);
        }
        break;
      case 'NotRegistered':
        if (this.leaving) {
          // The node removes a leaving region before its LeaveDone is out
          // (that waits for a persist), so a NotRegistered can overtake
          // it: the region is gone either way.
          this.finishLeave(now, out);
        } else if (!this.left && this.link.state === 'Registered') {
          this.register(now, out);
        }
        break;
      case 'ShardHome':
        this.onHome(message.shard, message.home, 0, now, out);
        break;
      case 'ShardHomeEpoch':
        this.onHome(message.shard, message.home, message.epoch, now, out);
        break;
      case 'ShardRefused': {
        const { shard, reason } = message;
        const entry = this.shards.get(shard);
        const dropped = entry?.buffer.length ?? 0;
        if (entry !== undefined) {
          entry.wanted = false;
        }
        this.giveUp(shard, new DeliveryError({ kind: 'ShardRefused', shard, reason }), out);
        out.push(publish({ type: 'ShardRefused', shard, reason, dropped }));
        break;
      }
      case 'BeginHandOff': {
        // Messages for the shard wait here from now on; a home request
        // made now is answered when the hand-off ends.
        const { shard } = message;
        let ask = false;
        const entry = this.shards.get(shard);
        if (entry !== undefined) {
          entry.home = undefined;
          ask = needsHome(entry) && entry.askedAt === undefined;
          this.forgetIfEmpty(shard);
        }
        out.push({ type: 'Send', message: { type: 'BeginHandOffAck', shard } });
        if (ask) {
          this.ask(shard, now, out);
        }
        break;
      }
      case 'HandOff': {
        const { shard } = message;
        const deadline = now + this.config.stopDeadlineMs;
        const entry = this.entry(shard);
        entry.home = undefined;
        switch (entry.local.state) {
          case 'Running':
            entry.local = { state: 'Stopping', deadline, report: true };
            out.push({ type: 'Stop', shard });
            break;
          case 'Stopping':
            entry.local = { state: 'Stopping', deadline: entry.local.deadline, report: true };
            break;
          case 'Idle':
            this.forgetIfEmpty(shard);
            out.push({ type: 'Send', message: { type: 'ShardStopped', shard } });
            break;
        }
        break;
      }
      case 'PlacementChanged':
        out.push(publish({ type: 'PlacementChanged', shard: message.shard, target: message.target }));
        break;
      case 'LeaveDone':
        this.finishLeave(now, out);
        break;
      case 'RegionRemoved':
        this.onRegionRemoved(message.address, now, out);
        break;
      case 'ShuttingDown':
        out.push({ type: 'Reconnect', reason: 'the node is shutting down' });
        break;
    }
    this.askWaiting(now, out);
    this.advanceDeparture(now, out);
    return out;
  }

  /**
   * The application sends `message` to `shard`. Throws a {@link SendError}
   * when the shard id is invalid or the buffers are full.
   */
  send(shard: string, message: M, now: number): Action<M>[] {
    const reason = checkShard(shard);
    if (reason !== undefined) {
      throw new SendError({ kind: 'InvalidShard', shard, reason });
    }
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    this.routeOrDefer(shard, message, now, out);
    return out;
  }

  /** Routes `message`; when that throws, keeps what `out` holds for the next call. */
  private routeOrDefer(shard: string, message: M, now: number, out: Action<M>[]): void {
    try {
      this.route(shard, message, now, out);
    } catch (error) {
      this.deferred = out;
      throw error;
    }
  }

  /**
   * Another region carried `message` for `shard` here. Delivered when the
   * shard runs here (the sender sent it before the shard's hand-off
   * began); otherwise routed again like a local send (and, like one,
   * throws a {@link SendError} when it cannot be taken).
   */
  inbound(shard: string, message: M, now: number): Action<M>[] {
    const reason = checkShard(shard);
    if (reason !== undefined) {
      throw new SendError({ kind: 'InvalidShard', shard, reason });
    }
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    if (this.shards.get(shard)?.local.state === 'Running') {
      out.push({ type: 'Deliver', shard, message });
    } else {
      this.routeOrDefer(shard, message, now, out);
    }
    return out;
  }

  /**
   * Someone wants the shard's home: the cached one, or it is asked for.
   * Throws a {@link RegionError} when the shard id is invalid.
   */
  requestHome(shard: string, now: number): HomeLookup<M> {
    const reason = checkShard(shard);
    if (reason !== undefined) {
      throw new RegionError({ kind: 'InvalidShard', shard, reason });
    }
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    const home = this.cachedHome(shard);
    if (home !== undefined && out.length === 0) {
      return { type: 'Known', home };
    }
    const entry = this.entry(shard);
    entry.wanted = true;
    if (entry.home === undefined && entry.askedAt === undefined) {
      this.ask(shard, now, out);
    }
    return { type: 'Asked', actions: out };
  }

  /** The application finished stopping the shard (after a `Stop` action). A hand-off's stop is reported to the node. */
  stopFinished(shard: string, now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    this.finishStop(shard, now, out);
    this.advanceDeparture(now, out);
    return out;
  }

  /**
   * The transport could not carry these messages (in order) to `to`, at
   * once or later (`reason` says why): one more failed attempt in the
   * shard's run. Within `forwardAttempts` and `forwardDeadlineMs` they go
   * back to the front of the shard's buffer, the cached home is dropped
   * and asked for again after `homeRetryMs`; past either, they and every
   * message waiting for the shard are given up (`Undelivered`, in order).
   */
  forwardFailed(shard: string, to: string, messages: readonly M[], reason: string, now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    const canAsk = this.canAsk();
    this.bufferedCount += messages.length;
    const entry = this.entry(shard);
    // The cached home is dropped even when it is no longer `to`: the
    // messages given back wait in the buffer, flushed by the next answer.
    entry.home = undefined;
    const failing = entry.failing ?? { since: now, attempts: 0, to, reason };
    if (!entry.roundFailed) {
      failing.attempts += 1;
    }
    entry.roundFailed = true;
    failing.to = to;
    failing.reason = reason;
    entry.failing = failing;
    entry.buffer.splice(entry.returned, 0, ...messages);
    entry.returned += messages.length;
    if (failing.attempts >= this.config.forwardAttempts) {
      this.giveUp(
        shard,
        new DeliveryError({ kind: 'AttemptsExhausted', shard, to, attempts: failing.attempts, reason }),
        out,
      );
    } else if (now - failing.since >= this.config.forwardDeadlineMs) {
      this.giveUp(shard, deadlinePassed(shard, failing, now), out);
    } else if (canAsk && entry.askedAt === undefined) {
      // Asked again after `homeRetryMs` (`tick`): the wait holds a place
      // among the lookups in flight.
      entry.askedAt = now;
      entry.repeats = 0;
      entry.deferred = true;
      this.asking += 1;
    }
    this.askWaiting(now, out);
    return out;
  }

  /** Gives up every message waiting for `shard`, in order; its next message starts a new run. */
  private giveUp(shard: string, error: DeliveryError, out: Action<M>[]): void {
    this.answered(shard);
    const entry = this.shards.get(shard);
    if (entry === undefined) {
      return;
    }
    entry.failing = undefined;
    entry.returned = 0;
    this.bufferedCount -= entry.buffer.length;
    for (const message of entry.buffer) {
      out.push({ type: 'Undelivered', shard, message, error });
    }
    entry.buffer = [];
    this.forgetIfEmpty(shard);
  }

  /**
   * Time passes: the lease, stop deadlines, heartbeats, the node's silence
   * and home requests to repeat. `metrics` is called only when a heartbeat
   * is due.
   */
  tick(now: number, metrics: () => Record<string, number>): Action<M>[] {
    return this.tickWithLoad(now, metrics, () => undefined);
  }

  /**
   * `tick`, with a load report after each heartbeat: `load` is called only
   * when a heartbeat is due, with what tells the shards running here
   * (running or stopping) from the others, and its report (if any) is sent
   * right after the heartbeat.
   */
  tickWithLoad(
    now: number,
    metrics: () => Record<string, number>,
    load: (runs: (shard: string) => boolean) => LoadReport | undefined,
  ): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    const late = this.ordered()
      .filter(([, entry]) => entry.local.state === 'Stopping' && entry.local.deadline <= now)
      .map(([shard]) => shard);
    for (const shard of late) {
      out.push({ type: 'AbandonStop', shard });
      this.finishStop(shard, now, out);
    }
    const overdue = this.ordered().filter(
      ([, entry]) => entry.failing !== undefined && now - entry.failing.since >= this.config.forwardDeadlineMs,
    );
    for (const [shard, entry] of overdue) {
      this.giveUp(shard, deadlinePassed(shard, entry.failing as Failing, now), out);
    }
    if (this.link.state === 'Registered' && now >= this.nextHeartbeat) {
      const sequence = this.nextSequence(now);
      this.nextHeartbeat = now + this.heartbeatIntervalMs;
      out.push({ type: 'Send', message: { type: 'Heartbeat', sequence, metrics: metrics() } });
      const runs = (shard: string): boolean => {
        const entry = this.shards.get(shard);
        return entry !== undefined && entry.local.state !== 'Idle';
      };
      const report = load(runs);
      if (report !== undefined) {
        out.push({ type: 'Send', message: { type: 'Load', ...report } });
      }
    }
    if (this.link.state !== 'Down') {
      // Three missed acknowledgements: a paused or cut-off node is left
      // well within the lease, so a failover costs no shard.
      const limit =
        this.link.state === 'Registered'
          ? Math.max(this.heartbeatIntervalMs * 3, MIN_SILENCE_MS)
          : this.config.responseTimeoutMs;
      const silent = Math.max(0, now - this.lastHeard);
      if (silent >= limit) {
        this.lastHeard = now;
        out.push({ type: 'Reconnect', reason: `the node has been silent for ${silent} ms` });
      }
    }
    if (this.canAsk()) {
      const retry = this.config.homeRetryMs;
      const due = this.ordered()
        .filter(
          ([, entry]) =>
            needsHome(entry) &&
            entry.askedAt !== undefined &&
            now >= entry.askedAt + retry * 2 ** Math.min(entry.repeats, MAX_RETRY_DOUBLINGS),
        )
        .map(([shard]) => shard);
      for (const shard of due) {
        this.ask(shard, now, out);
      }
      this.askWaiting(now, out);
    }
    this.advanceDeparture(now, out);
    return out;
  }

  /**
   * The region wants to leave: `Leave` now if registered, else after the
   * next registration. The node hands its shards off, then answers
   * `LeaveDone`.
   */
  leave(now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    if (this.left || this.leaving) {
      return out;
    }
    this.startLeaving(out);
    return out;
  }

  /**
   * The region drains, then leaves, within `boundMs` (see the file's
   * comment). Ignored when the region already leaves, has left or departs.
   * Its end is {@link RegionCore.departure}.
   */
  drainAndLeave(boundMs: number, now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    if (this.left || this.leaving || this.departing !== undefined) {
      return out;
    }
    this.departing = {
      boundMs,
      leaveAt: now + Math.floor(boundMs / 2),
      giveUpAt: now + boundMs,
      outcome: undefined,
    };
    out.push(...this.requestDrain(true, now));
    this.advanceDeparture(now, out);
    return out;
  }

  /**
   * How a {@link RegionCore.drainAndLeave} ended: undefined while it runs
   * (or when none was asked for), `ok` once the node let the region go,
   * the error once the bound passed first (the shards still running were
   * told to stop: wait for {@link RegionCore.isIdle}).
   */
  departure(): DepartureOutcome | undefined {
    return this.departing?.outcome;
  }

  /** The region shuts down without leaving: every running shard stops and nothing starts any more. */
  shutdown(now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    this.closing = true;
    this.stopAll(now, out);
    this.giveUpAll(out);
    return out;
  }

  /**
   * Asks the node to drain (`true`) or undrain (`false`) this region; sent
   * once, now or after the next registration.
   */
  requestDrain(draining: boolean, now: number): Action<M>[] {
    const out: Action<M>[] = [];
    this.checkLease(now, out);
    if (this.link.state === 'Registered') {
      this.drainRequest = undefined;
      out.push({ type: 'Send', message: { type: 'Drain', draining } });
    } else {
      this.drainRequest = draining;
    }
    return out;
  }

  // ---- internals ----

  /** The shards and their entries, in the UTF-8 byte order of their ids (a snapshot). */
  private ordered(): [string, ShardEntry<M>][] {
    this.sortedIds ??= [...this.shards.keys()].sort(compareUtf8);
    const entries: [string, ShardEntry<M>][] = [];
    for (const shard of this.sortedIds) {
      const entry = this.shards.get(shard);
      if (entry !== undefined) {
        entries.push([shard, entry]);
      }
    }
    return entries;
  }

  private leaseValid(now: number): boolean {
    return !this.fenced && this.leaseEnd !== undefined && now < this.leaseEnd;
  }

  private canAsk(): boolean {
    return this.link.state === 'Registered' && !this.fenced && !this.left;
  }

  /** The shard's entry, made if it has none. */
  private entry(shard: string): ShardEntry<M> {
    let entry = this.shards.get(shard);
    if (entry === undefined) {
      entry = newEntry();
      this.shards.set(shard, entry);
      this.sortedIds = undefined;
    }
    return entry;
  }

  /**
   * Another region was removed: every cached home on it is dropped; shards
   * with messages waiting (or a home wanted) ask again at once, the others
   * at their next send. The region's own removal is left to the node's
   * `NotRegistered`.
   */
  private onRegionRemoved(address: string, now: number, out: Action<M>[]): void {
    if (address === this.address) {
      return;
    }
    const homed = this.ordered()
      .filter(([, entry]) => entry.home === address)
      .map(([shard]) => shard);
    for (const shard of homed) {
      const entry = this.entry(shard);
      entry.home = undefined;
      if (needsHome(entry) && entry.askedAt === undefined) {
        this.ask(shard, now, out);
      }
      this.forgetIfEmpty(shard);
    }
    out.push(publish({ type: 'RegionRemoved', address }));
  }

  private forgetIfEmpty(shard: string): void {
    const entry = this.shards.get(shard);
    if (entry !== undefined && isEmpty(entry)) {
      this.shards.delete(shard);
      this.sortedIds = undefined;
    }
  }

  /** Drops every entry that holds nothing. */
  private forgetEmpty(): void {
    for (const [shard, entry] of this.shards) {
      if (isEmpty(entry)) {
        this.shards.delete(shard);
        this.sortedIds = undefined;
      }
    }
  }

  private nextSequence(now: number): number {
    const sequence = this.sequence;
    this.sequence += 1;
    this.sent.set(sequence, now);
    while (this.sent.size > SEQUENCE_WINDOW) {
      const first = this.sent.keys().next();
      if (first.done === true) {
        break;
      }
      this.sent.delete(first.value);
    }
    return sequence;
  }

  private register(now: number, out: Action<M>[]): void {
    const sequence = this.nextSequence(now);
    this.link = { state: 'Registering', sequence };
    this.forgetAsked();
    this.forgetEmpty();
    const registration = this.config.registration;
    out.push({
      type: 'Send',
      message: {
        type: 'Register',
        ...registration,
        roles: [...registration.roles],
        labels: { ...registration.labels },
        sequence,
      },
    });
  }

  /** Extends the lease to `sentAt + leaseMs`; true when that lifts a fence. */
  private renew(sequence: number, leaseMs: number, now: number, out: Action<M>[]): boolean {
    const sentAt = this.sent.get(sequence);
    if (sentAt === undefined) {
      return false;
    }
    for (const s of [...this.sent.keys()]) {
      if (s <= sequence) {
        this.sent.delete(s);
      }
    }
    const until = sentAt + leaseMs;
    this.leaseEnd = this.leaseEnd === undefined ? until : Math.max(this.leaseEnd, until);
    if (this.fenced && now < until) {
      this.fenced = false;
      out.push(publish({ type: 'LeaseRegained' }));
      return true;
    }
    return false;
  }

  /** Fences the region when its lease has run out. */
  private checkLease(now: number, out: Action<M>[]): void {
    out.push(...this.deferred.splice(0));
    if (this.fenced || this.leaseEnd === undefined || now < this.leaseEnd) {
      return;
    }
    this.fenced = true;
    const deadline = now + this.config.stopDeadlineMs;
    for (const [shard, entry] of this.ordered()) {
      entry.home = undefined;
      if (entry.local.state === 'Running') {
        entry.local = { state: 'Stopping', deadline, report: false };
        out.push({ type: 'Stop', shard });
      }
    }
    this.forgetEmpty();
    out.push(publish({ type: 'Fenced' }));
  }

  private ask(shard: string, now: number, out: Action<M>[]): void {
    if (!this.canAsk()) {
      return;
    }
    const entry = this.entry(shard);
    if (entry.askedAt === undefined) {
      if (this.asking >= Math.max(1, this.config.maxLookupsInFlight)) {
        // Its turn comes with an answer (`askWaiting`).
        if (!entry.queued) {
          entry.queued = true;
          this.waiting.push(shard);
        }
        return;
      }
      this.asking += 1;
      entry.repeats = 0;
    } else if (!entry.deferred) {
      entry.repeats += 1;
    }
    entry.deferred = false;
    entry.askedAt = now;
    out.push({ type: 'Send', message: { type: 'GetShardHome', shard } });
  }

  /** The shard's home is no longer awaited. */
  private answered(shard: string): void {
    const entry = this.shards.get(shard);
    if (entry !== undefined && entry.askedAt !== undefined) {
      entry.askedAt = undefined;
      this.asking -= 1;
    }
  }

  /**
   * Nothing asked is awaited any more (the session ended or registers anew,
   * which asks again for every home still needed).
   */
  private forgetAsked(): void {
    for (const entry of this.shards.values()) {
      entry.askedAt = undefined;
      entry.queued = false;
    }
    this.asking = 0;
    this.waiting = [];
    this.waitingHead = 0;
  }

  /** Asks for the homes that waited their turn, as far as the bound on lookups in flight allows. */
  private askWaiting(now: number, out: Action<M>[]): void {
    while (this.canAsk() && this.asking < Math.max(1, this.config.maxLookupsInFlight)) {
      if (this.waitingHead >= this.waiting.length) {
        this.waiting = [];
        this.waitingHead = 0;
        return;
      }
      const shard = this.waiting[this.waitingHead] as string;
      this.waitingHead += 1;
      if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
        // A queue, not a growing log: drop the part already taken.
        this.waiting = this.waiting.slice(this.waitingHead);
        this.waitingHead = 0;
      }
      const entry = this.shards.get(shard);
      if (entry === undefined) {
        continue;
      }
      entry.queued = false;
      if (needsHome(entry) && entry.askedAt === undefined) {
        this.ask(shard, now, out);
      }
    }
  }

  /** Asks for every home that is needed and not asked for. */
  private askMissing(now: number, out: Action<M>[]): void {
    if (!this.canAsk()) {
      return;
    }
    const missing = this.ordered()
      .filter(([, entry]) => needsHome(entry) && entry.askedAt === undefined)
      .map(([shard]) => shard);
    for (const shard of missing) {
      this.ask(shard, now, out);
    }
  }

  /** Stops every running shard without reporting it to the node. */
  private stopAll(now: number, out: Action<M>[]): void {
    const deadline = now + this.config.stopDeadlineMs;
    for (const [shard, entry] of this.ordered()) {
      if (entry.local.state === 'Running') {
        entry.local = { state: 'Stopping', deadline, report: false };
        if (entry.home === this.address) {
          entry.home = undefined;
        }
        out.push({ type: 'Stop', shard });
      }
    }
  }

  /** The node let the region go: stop everything, start nothing. */
  private finishLeave(now: number, out: Action<M>[]): void {
    if (this.leaving && !this.left) {
      this.left = true;
      this.closing = true;
      this.stopAll(now, out);
      this.giveUpAll(out);
      out.push(publish({ type: 'Left' }));
    }
  }

  /** The region stops: every message still waiting for a home is given up (`RegionStopped`), in order per shard. */
  private giveUpAll(out: Action<M>[]): void {
    const waiting = this.ordered()
      .filter(([, entry]) => entry.buffer.length > 0)
      .map(([shard]) => shard);
    for (const shard of waiting) {
      this.giveUp(shard, new DeliveryError({ kind: 'RegionStopped', shard }), out);
    }
  }

  private onRegistered(
    message: Extract<NodeMessage, { type: 'Registered' }>,
    now: number,
    out: Action<M>[],
  ): void {
    const { incarnation, sequence, leaseMs, heartbeatIntervalMs } = message;
    if (
      incarnation !== this.config.registration.incarnation ||
      this.link.state !== 'Registering' ||
      this.link.sequence !== sequence
    ) {
      // Not for the registration in flight.
      return;
    }
    this.link = { state: 'Registered' };
    this.heartbeatIntervalMs = Math.max(heartbeatIntervalMs, 1);
    this.nextHeartbeat = now + this.heartbeatIntervalMs;
    out.push(publish({ type: 'Registered', incarnation }));
    this.renew(sequence, leaseMs, now, out);
    // Hand-off stops that finished while the session was down.
    const reported: string[] = [];
    for (const [shard, entry] of this.ordered()) {
      if (entry.unreportedStop) {
        entry.unreportedStop = false;
        reported.push(shard);
      }
    }
    for (const shard of reported) {
      out.push({ type: 'Send', message: { type: 'ShardStopped', shard } });
      this.forgetIfEmpty(shard);
    }
    if (this.drainRequest !== undefined) {
      const draining = this.drainRequest;
      this.drainRequest = undefined;
      out.push({ type: 'Send', message: { type: 'Drain', draining } });
    }
    this.askMissing(now, out);
    if (this.leaving) {
      this.leaveSent = true;
      out.push({ type: 'Send', message: { type: 'Leave' } });
    }
  }

  private onHome(shard: string, home: string, epoch: number, now: number, out: Action<M>[]): void {
    const own = home === this.address;
    const mayStart = !this.closing && this.leaseValid(now);
    const stopDeadline = now + this.config.stopDeadlineMs;
    this.answered(shard);
    const entry = this.entry(shard);
    if (own) {
      // Not while fenced or closing, nor before the last run stopped:
      // asked again after renewal or the stop.
      if (!mayStart) {
        this.forgetIfEmpty(shard);
        return;
      }
      switch (entry.local.state) {
        case 'Stopping':
          return;
        case 'Idle':
          entry.local = RUNNING;
          entry.epoch = epoch;
          out.push({ type: 'Start', shard, epoch });
          out.push(publish({ type: 'ShardStarted', shard, epoch }));
          break;
        case 'Running':
          // Homed here again with a greater epoch: the node moved it away
          // and back meanwhile; this run's epoch is stale.
          if (epoch > entry.epoch) {
            entry.local = { state: 'Stopping', deadline: stopDeadline, report: false };
            out.push({ type: 'Stop', shard });
          }
          break;
      }
    } else if (entry.local.state === 'Running') {
      // The node homes it elsewhere: this run is stale.
      entry.local = { state: 'Stopping', deadline: stopDeadline, report: false };
      out.push({ type: 'Stop', shard });
    }
    entry.wanted = false;
    entry.roundFailed = false;
    if (entry.failing !== undefined && entry.failing.to !== home) {
      // A home other than the failing one: a new run of attempts.
      entry.failing = undefined;
    }
    if (entry.home !== home) {
      entry.home = home;
      out.push(publish({ type: 'HomeChanged', shard, home }));
    }
    const flushed = entry.buffer;
    entry.buffer = [];
    entry.returned = 0;
    for (const message of flushed) {
      out.push(own ? { type: 'Deliver', shard, message } : { type: 'Forward', to: home, shard, message });
    }
    this.bufferedCount -= flushed.length;
  }

  private route(shard: string, message: M, now: number, out: Action<M>[]): void {
    const own = this.address;
    const known = this.shards.get(shard);
    if (known?.home !== undefined) {
      if (known.home === own && known.local.state === 'Running') {
        out.push({ type: 'Deliver', shard, message });
        return;
      }
      if (known.home !== own) {
        out.push({ type: 'Forward', to: known.home, shard, message });
        return;
      }
    }
    const queued = known?.buffer.length ?? 0;
    if (queued >= this.config.shardBufferLimit) {
      throw new SendError({ kind: 'BufferFull', shard, limit: this.config.shardBufferLimit });
    }
    if (this.bufferedCount >= this.config.totalBufferLimit) {
      throw new SendError({ kind: 'TotalBufferFull', limit: this.config.totalBufferLimit });
    }
    const entry = this.entry(shard);
    entry.buffer.push(message);
    const ask = entry.askedAt === undefined;
    this.bufferedCount += 1;
    if (ask) {
      this.ask(shard, now, out);
    }
  }

  private finishStop(shard: string, now: number, out: Action<M>[]): void {
    const connected = this.link.state !== 'Down';
    const entry = this.shards.get(shard);
    if (entry === undefined || entry.local.state !== 'Stopping') {
      return;
    }
    const report = entry.local.report;
    entry.local = IDLE;
    if (report) {
      if (connected) {
        out.push({ type: 'Send', message: { type: 'ShardStopped', shard } });
      } else {
        entry.unreportedStop = true;
      }
    }
    out.push(publish({ type: 'ShardStopped', shard }));
    if (needsHome(entry) && entry.askedAt === undefined) {
      this.ask(shard, now, out);
    }
    this.forgetIfEmpty(shard);
  }

  /**
   * Moves a drain-and-leave on: done once left; `Leave` once nothing runs
   * here (or at half the bound); gives up at the bound.
   */
  private advanceDeparture(now: number, out: Action<M>[]): void {
    const departure = this.departing;
    if (departure === undefined || departure.outcome !== undefined) {
      return;
    }
    if (this.left) {
      departure.outcome = { ok: true };
    } else if (now >= departure.giveUpAt) {
      const shards = this.running();
      const leaveAsked = this.leaveSent;
      if (leaveAsked && this.link.state === 'Registered') {
        // Leaving, it gets no new shards; undrained, a restart at this
        // address is not left draining.
        out.push({ type: 'Send', message: { type: 'Drain', draining: false } });
      }
      this.closing = true;
      this.stopAll(now, out);
      this.giveUpAll(out);
      departure.outcome = {
        ok: false,
        error: new RegionError({ kind: 'DrainAndLeaveTimedOut', boundMs: departure.boundMs, shards, leaveAsked }),
      };
    } else if (!this.leaving && (this.isIdle() || now >= departure.leaveAt)) {
      this.startLeaving(out);
    }
  }

  private startLeaving(out: Action<M>[]): void {
    this.leaving = true;
    if (this.link.state === 'Registered') {
      this.leaveSent = true;
      out.push({ type: 'Send', message: { type: 'Leave' } });
    }
  }
}

function publish<M>(update: Update): Action<M> {
  return { type: 'Publish', update };
}

/** The longest lease (and heartbeat interval) a node may grant: one day. */
export const MAX_LEASE_MS = 86_400_000;

const utf8 = new TextEncoder();

/**
 * What a region relies on in a message from the node, the same in every
 * client (contracts/region-core/limits.txt): a lease and a heartbeat
 * interval of 1 ms to {@link MAX_LEASE_MS}, a shard id of 1 to 256 bytes, no
 * empty home or region address. The rule broken, or null.
 */
export function checkLimits(message: NodeMessage): string | null {
  const duration = (what: string, value: number): string | null =>
    Number.isInteger(value) && value >= 1 && value <= MAX_LEASE_MS
      ? null
      : `${what} ${value} is out of range 1..=${MAX_LEASE_MS}`;
  const shard = (what: string, id: string): string | null => {
    const bytes = utf8.encode(id).length;
    return bytes >= 1 && bytes <= MAX_SHARD_ID_BYTES
      ? null
      : `${what} of ${bytes} bytes is out of range 1..=${MAX_SHARD_ID_BYTES}`;
  };
  const address = (what: string, value: string): string | null => (value === '' ? `${what} is empty` : null);
  switch (message.type) {
    case 'Registered':
      return (
        duration('Registered.lease_ms', message.leaseMs) ??
        duration('Registered.heartbeat_interval_ms', message.heartbeatIntervalMs)
      );
    case 'HeartbeatAck':
      return duration('HeartbeatAck.lease_ms', message.leaseMs);
    case 'ShardHome':
      return shard('ShardHome.shard', message.shard) ?? address('ShardHome.home', message.home);
    case 'ShardHomeEpoch':
      return shard('ShardHomeEpoch.shard', message.shard) ?? address('ShardHomeEpoch.home', message.home);
    case 'ShardRefused':
      return shard('ShardRefused.shard', message.shard);
    case 'BeginHandOff':
      return shard('BeginHandOff.shard', message.shard);
    case 'HandOff':
      return shard('HandOff.shard', message.shard);
    case 'PlacementChanged':
      return shard('PlacementChanged.shard', message.shard);
    case 'RegionRemoved':
      return address('RegionRemoved.address', message.address);
    default:
      return null;
  }
}
