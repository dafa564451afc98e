// How a region carries messages to a shard whose home is another region:
// the `Transport` the application gives its region, and `InMemoryTransport`
// for regions in one process (tests, examples). A real service carries
// messages over its own network (HTTP, gRPC, a queue) and hands what
// arrives to the home region's `Inbox`.

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
export interface Inbox<M> {
  /** The region's address. */
  readonly address: string;
  /** Hands a message for `shard` to the region; throws a {@link TransportError} when it cannot take it. */
  deliver(shard: string, message: M): void;
  /**
   * For a transport that learns only later that messages this region gave
   * its `send` were not delivered to `to` (a connection refused or reset, a
   * time-out, the far region answering that it is not the shard's home):
   * hands them back in the order sent, with why. The region asks for the
   * home again and resends them, or gives them up to the application's
   * `undelivered` past its limits. Ignored once the region has stopped.
   */
  notDelivered(to: string, shard: string, messages: readonly M[], error: TransportError): void;
}

/** Carries messages between regions. */
export interface Transport<M> {
  /** Carries `message` for `shard` to the region at `to`; throws a {@link TransportError} when it cannot. */
  send(to: string, shard: string, message: M): void;
  /** The region's inbox, once it starts. */
  attach?(inbox: Inbox<M>): void;
  /** The region stopped. */
  detach?(inbox: Inbox<M>): void;
}

/** Regions of one process, reaching each other's inboxes directly. */
export class InMemoryTransport<M> implements Transport<M> {
  private readonly inboxes = new Map<string, Inbox<M>>();

  send(to: string, shard: string, message: M): void {
    const inbox = this.inboxes.get(to);
    if (inbox === undefined) {
      throw new TransportError('unknown-address', `no region at address ${to}`);
    }
    inbox.deliver(shard, message);
  }

  attach(inbox: Inbox<M>): void {
    this.inboxes.set(inbox.address, inbox);
  }

  detach(inbox: Inbox<M>): void {
    if (this.inboxes.get(inbox.address) === inbox) {
      this.inboxes.delete(inbox.address);
    }
  }

  /** The addresses attached. */
  addresses(): string[] {
    return [...this.inboxes.keys()].sort();
  }
}
