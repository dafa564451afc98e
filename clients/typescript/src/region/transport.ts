// How a region carries messages to a shard whose home is another region:
// the `Transport` the application gives its region, and `InMemoryTransport`
// for regions in one process (tests, examples); `PeerTransport` carries
// them between processes. A service may carry messages over its own
// network (HTTP, gRPC, a queue) and hand what arrives to the home
// region's `Inbox`. `M` is the application's message type, `R` its reply
// type (for `Region.ask`).

import { Replier, Request } from './ask.js';

/** Why a message could not be carried. */
export class TransportError extends Error {
  override name = 'TransportError';
  constructor(
    /** `unknown-address`, `inbox-full`, `closed`, `unreachable` or `peer-busy` (back-pressure). */
    readonly kind: 'unknown-address' | 'inbox-full' | 'closed' | 'unreachable' | 'peer-busy',
    message: string,
  ) {
    super(message);
  }
}

/** Where a region receives messages other regions forward to it. */
export interface Inbox<M, R = unknown> {
  /** The region's address. */
  readonly address: string;
  /** Hands a message for `shard` to the region; throws a {@link TransportError} when it cannot take it. */
  deliver(shard: string, message: M): void;
  /** Hands a request for `shard` to the region, answered through `replier`; throws a {@link TransportError} when it cannot take it. */
  ask(shard: string, message: M, replier: Replier<R>): void;
  /**
   * For a transport that learns only later that messages this region gave
   * its `send` were not delivered to `to` (a connection refused or reset, a
   * time-out, the far region answering that it is not the shard's home):
   * hands them back in the order sent, with why. The region asks for the
   * home again and resends them, or gives them up to the application's
   * `undelivered` past its limits. Requests ({@link Request}) come back the
   * same way, among the messages in the order sent, and are resent too.
   * Ignored once the region has stopped.
   */
  notDelivered(to: string, shard: string, messages: readonly (M | Request<M, R>)[], error: TransportError): void;
}

/** Carries messages between regions. */
export interface Transport<M, R = unknown> {
  /** Carries `message` for `shard` to the region at `to`; throws a {@link TransportError} when it cannot. */
  send(to: string, shard: string, message: M): void;
  /**
   * Carries a request for `shard` to the region at `to` (in order with
   * `send`'s messages), which answers through `replier`; throws a
   * {@link TransportError} when it cannot. Without it, the region fails
   * asks that must leave the process.
   */
  ask?(to: string, shard: string, message: M, replier: Replier<R>): void;
  /** The region's inbox, once it starts. */
  attach?(inbox: Inbox<M, R>): void;
  /** The region stopped. */
  detach?(inbox: Inbox<M, R>): void;
}

/** Regions of one process, reaching each other's inboxes directly. */
export class InMemoryTransport<M, R = unknown> implements Transport<M, R> {
  private readonly inboxes = new Map<string, Inbox<M, R>>();

  send(to: string, shard: string, message: M): void {
    this.inboxOf(to).deliver(shard, message);
  }

  ask(to: string, shard: string, message: M, replier: Replier<R>): void {
    this.inboxOf(to).ask(shard, message, replier);
  }

  private inboxOf(to: string): Inbox<M, R> {
    const inbox = this.inboxes.get(to);
    if (inbox === undefined) {
      throw new TransportError('unknown-address', `no region at address ${to}`);
    }
    return inbox;
  }

  attach(inbox: Inbox<M, R>): void {
    this.inboxes.set(inbox.address, inbox);
  }

  detach(inbox: Inbox<M, R>): void {
    if (this.inboxes.get(inbox.address) === inbox) {
      this.inboxes.delete(inbox.address);
    }
  }

  /** The addresses attached. */
  addresses(): string[] {
    return [...this.inboxes.keys()].sort();
  }
}
