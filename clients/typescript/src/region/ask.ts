// Request and reply between regions: a `Request` is what the region routes
// for an `ask` (the request and its `Replier`), exactly as it routes a sent
// message (in order with the sends to the same shard, buffered across
// hand-offs, resent after a lost home). The `Replier` answers once: a
// second answer, or one after the asker gave up, is dropped.

import { AskError } from './errors.js';

/** The outcome of a request. */
export type Answer<R> = { ok: true; reply: R } | { ok: false; error: AskError };

/** Answers one request, once: to the asker in process, or over the inter-region wire. */
export class Replier<R> {
  private done = false;
  /** When the asker stops waiting, in `Date.now()` milliseconds. */
  readonly deadline: number;

  constructor(
    /** The shard asked. */
    readonly shard: string,
    timeoutMs: number,
    private readonly answer: (outcome: Answer<R>) => void,
  ) {
    this.deadline = Date.now() + timeoutMs;
  }

  /** How long the asker still waits (0 once it gave up). */
  remainingMs(): number {
    return Math.max(0, this.deadline - Date.now());
  }

  /** True once answered. */
  get answered(): boolean {
    return this.done;
  }

  /** Answers the request. */
  reply(reply: R): void {
    if (!this.done) {
      this.done = true;
      this.answer({ ok: true, reply });
    }
  }

  /** Answers the request with why it cannot be answered. */
  fail(error: AskError): void {
    if (!this.done) {
      this.done = true;
      this.answer({ ok: false, error });
    }
  }

  /** Fails the request with `reason` ({@link AskError} of kind `Failed`). */
  failWith(reason: string): void {
    this.fail(new AskError({ kind: 'Failed', shard: this.shard, reason }));
  }
}

/** A request on its way to a shard's home; what a transport hands back with `Inbox.notDelivered` in place of a message. */
export class Request<M, R> {
  constructor(
    /** The request. */
    readonly message: M,
    /** Where its answer goes. */
    readonly replier: Replier<R>,
  ) {}
}
