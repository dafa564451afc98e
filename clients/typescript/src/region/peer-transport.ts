// `PeerTransport`: the built-in transport between regions, speaking the
// inter-region wire (`../peer.ts`, docs/protocol.md section 20) over
// WebSockets, as the Rust client's `PeerTransport` does, so regions of
// either language carry each other's messages.
//
// It listens where the region is reachable (its registered address is what
// other regions dial) and dials a peer the first time it carries a message
// there: one connection per pair (a connection the peer opened carries
// this region's messages back too). Messages are the application's values
// as JSON. Each stays with the transport until the peer acknowledges it; a
// refusal, a failed connection or a peer that goes away hands it back to
// the region (`Inbox.notDelivered`), which asks for the shard's home again
// and resends it. At most `MAX_UNACKED_BYTES` of one peer's messages wait
// unacknowledged: past that, `send` throws a `peer-busy` TransportError and
// the region keeps the message.

import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

import WebSocket, { WebSocketServer } from 'ws';

import {
  MAX_UNACKED_BYTES,
  PEER_PATH,
  PEER_PROTOCOL_VERSION,
  decodePeer,
  decodePeerHello,
  encodePeer,
  encodePeerHello,
  type PeerMessage,
} from '../peer.js';
import { MAX_FRAME_BYTES } from '../wire.js';
import { Replier, Request, type Answer } from './ask.js';
import { TransportError, type Inbox, type Transport } from './transport.js';

/** How long dialling a peer (TCP, the upgrade, its `Welcome`) may take before its messages are handed back. */
const CONNECT_TIMEOUT_MS = 5_000;

/** Who this region is on the inter-region wire, and where it listens. */
export interface PeerTransportOptions {
  /** The entity type; a peer serving another is refused. */
  entityType: string;
  /** The region's incarnation. */
  incarnation: number;
  /** The region token: sent when dialling, required of whoever dials this region. */
  token?: string;
  /** Where to listen (default 127.0.0.1). */
  host?: string;
  /** The port to listen on (default 0: any free port). */
  port?: number;
  /** The region's registered address, where peers dial it (default `host:port` as bound). */
  address?: string;
}

interface Outgoing<M, R> {
  shard: string;
  message: M;
  payload: Uint8Array;
  /** Set for a request: where its answer goes. */
  replier?: Replier<R>;
}

/** One connection to a peer: its socket once open, what waits, what is unacknowledged and unanswered. */
class Link<M, R> {
  open = false;
  closed = false;
  nextSeq = 1;
  readonly queued: Outgoing<M, R>[] = [];
  readonly unacked: [number, Outgoing<M, R>][] = [];
  /** This region's requests the peer took and has not answered yet. */
  readonly awaiting = new Map<number, Replier<R>>();
  pending = 0;

  constructor(
    readonly peer: string,
    readonly socket: WebSocket,
  ) {}

  /** Sends (numbered) or queues until the connection is open. */
  carry(outgoing: Outgoing<M, R>): void {
    if (!this.open) {
      this.queued.push(outgoing);
      return;
    }
    const seq = this.nextSeq++;
    this.unacked.push([seq, outgoing]);
    const { shard, payload, replier } = outgoing;
    this.socket.send(
      encodePeer(
        replier === undefined
          ? { type: 'Deliver', seq, shard, payload }
          : { type: 'Ask', seq, shard, payload, timeoutMs: replier.remainingMs() },
      ),
    );
  }

  /** Takes this region's request numbered `seq`, acknowledged or not. */
  takeRequest(seq: number): Replier<R> | undefined {
    const replier = this.awaiting.get(seq);
    if (replier !== undefined) {
      this.awaiting.delete(seq);
      return replier;
    }
    const at = this.unacked.findIndex(([s]) => s === seq);
    if (at < 0) return undefined;
    const [[, outgoing]] = this.unacked.splice(at, 1) as [[number, Outgoing<M, R>]];
    this.pending -= outgoing.payload.length;
    return outgoing.replier;
  }

  /** The connection is open: what waited goes out, in order. */
  opened(): void {
    this.open = true;
    for (const outgoing of this.queued.splice(0)) {
      this.carry(outgoing);
    }
  }
}

/** The built-in transport between regions. See the file's comment. */
export class PeerTransport<M, R = unknown> implements Transport<M, R> {
  private inbox: Inbox<M, R> | undefined;
  private readonly links = new Map<string, Link<M, R>>();

  private constructor(
    private readonly options: PeerTransportOptions,
    private readonly server: WebSocketServer,
    /** The region's registered address. */
    readonly address: string,
  ) {
    server.on('connection', (socket) => this.accepted(socket));
  }

  /** Listens and answers once bound; its `address` is what the region registers with. */
  static async bind<M, R = unknown>(options: PeerTransportOptions): Promise<PeerTransport<M, R>> {
    const host = options.host ?? '127.0.0.1';
    const token = options.token;
    const server = new WebSocketServer({
      host,
      port: options.port ?? 0,
      path: PEER_PATH,
      maxPayload: MAX_FRAME_BYTES,
      verifyClient: (info: { req: IncomingMessage }, done: (ok: boolean, code?: number, message?: string) => void) => {
        if (token !== undefined && info.req.headers.authorization !== `Bearer ${token}`) {
          done(false, 401, 'a missing or wrong region token');
        } else {
          done(true);
        }
      },
    });
    await new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    const port = (server.address() as AddressInfo).port;
    return new PeerTransport<M, R>(options, server, options.address ?? `${host}:${port}`);
  }

  send(to: string, shard: string, message: M): void {
    this.carry(to, { shard, message, payload: this.encode(shard, message) });
  }

  ask(to: string, shard: string, message: M, replier: Replier<R>): void {
    this.carry(to, { shard, message, payload: this.encode(shard, message), replier });
  }

  private encode(shard: string, message: M): Uint8Array {
    const payload = new TextEncoder().encode(JSON.stringify(message));
    if (payload.length + shard.length + 32 > MAX_FRAME_BYTES) {
      throw new TransportError('unreachable', `a message of ${payload.length} bytes does not fit a 1 MiB frame`);
    }
    return payload;
  }

  private carry(to: string, outgoing: Outgoing<M, R>): void {
    let link = this.links.get(to);
    if (link === undefined || link.closed) {
      link = this.dial(to);
    }
    if (link.pending + outgoing.payload.length > MAX_UNACKED_BYTES) {
      throw new TransportError('peer-busy', `region ${to} has ${link.pending} bytes of messages unacknowledged; waiting for it`);
    }
    link.pending += outgoing.payload.length;
    link.carry(outgoing);
  }

  attach(inbox: Inbox<M, R>): void {
    this.inbox = inbox;
  }

  detach(inbox: Inbox<M, R>): void {
    if (this.inbox === inbox) {
      this.inbox = undefined;
      this.close();
    }
  }

  /** Stops listening and closes every connection. */
  close(): void {
    for (const link of this.links.values()) {
      link.closed = true;
      link.socket.terminate();
    }
    this.links.clear();
    for (const client of this.server.clients) {
      client.terminate();
    }
    this.server.close();
  }

  private dial(to: string): Link<M, R> {
    const headers: Record<string, string> = {};
    if (this.options.token !== undefined) {
      headers['authorization'] = `Bearer ${this.options.token}`;
    }
    const socket = new WebSocket(`ws://${to}${PEER_PATH}`, { headers, maxPayload: MAX_FRAME_BYTES });
    const link = new Link<M, R>(to, socket);
    this.links.set(to, link);
    const timer = setTimeout(() => this.fail(link, `no answer from ${to} within ${CONNECT_TIMEOUT_MS} ms`), CONNECT_TIMEOUT_MS);
    timer.unref();
    socket.on('open', () => {
      socket.send(
        encodePeerHello({
          protocol: PEER_PROTOCOL_VERSION,
          entityType: this.options.entityType,
          from: this.address,
          incarnation: this.options.incarnation,
        }),
      );
    });
    socket.on('unexpected-response', (_request, response) => {
      this.fail(link, `cannot connect to ${to}: ${response.statusCode} ${response.statusMessage ?? ''}`.trim());
    });
    socket.on('message', (data: Buffer) => {
      let frame: PeerMessage;
      try {
        frame = decodePeer(new Uint8Array(data));
      } catch (error) {
        this.fail(link, `${to} sent a malformed frame: ${(error as Error).message}`);
        return;
      }
      if (!link.open) {
        clearTimeout(timer);
        if (frame.type === 'Welcome') {
          link.opened();
        } else {
          this.fail(link, frame.type === 'Refused' ? `${to} refused the connection: ${frame.reason}` : `${to} answered with ${frame.type}`);
        }
        return;
      }
      this.onFrame(link, frame);
    });
    socket.on('error', (error: Error) => this.fail(link, `cannot reach ${to}: ${error.message}`));
    socket.on('close', () => this.fail(link, `${to} closed the connection`));
    return link;
  }

  /** A peer dialled this region: its `PeerHello`, then the connection both ways. */
  private accepted(socket: WebSocket): void {
    let link: Link<M, R> | undefined;
    socket.on('message', (data: Buffer) => {
      const bytes = new Uint8Array(data);
      if (link === undefined) {
        let refusal: string | undefined;
        let from = '';
        try {
          const hello = decodePeerHello(bytes);
          from = hello.from;
          if (hello.protocol !== PEER_PROTOCOL_VERSION) {
            refusal = `inter-region wire version ${hello.protocol} is not supported; this region speaks ${PEER_PROTOCOL_VERSION}`;
          } else if (hello.entityType !== this.options.entityType) {
            refusal = `this region serves ${this.options.entityType}, not ${hello.entityType}`;
          }
        } catch (error) {
          refusal = `not a PeerHello: ${(error as Error).message}`;
        }
        if (refusal !== undefined) {
          socket.send(encodePeer({ type: 'Refused', reason: refusal }), () => socket.close());
          return;
        }
        socket.send(
          encodePeer({
            type: 'Welcome',
            protocol: PEER_PROTOCOL_VERSION,
            address: this.address,
            incarnation: this.options.incarnation,
          }),
        );
        link = new Link<M, R>(from, socket);
        link.opened();
        // This connection carries this region's messages to the dialler too, unless another does.
        const existing = this.links.get(from);
        if (existing === undefined || existing.closed) {
          this.links.set(from, link);
        }
        return;
      }
      let frame: PeerMessage;
      try {
        frame = decodePeer(bytes);
      } catch (error) {
        this.fail(link, `${link.peer} sent a malformed frame: ${(error as Error).message}`);
        return;
      }
      this.onFrame(link, frame);
    });
    socket.on('error', (error: Error) => link && this.fail(link, `the connection to ${link.peer} failed: ${error.message}`));
    socket.on('close', () => link && this.fail(link, `${link.peer} closed the connection`));
  }

  private onFrame(link: Link<M, R>, frame: PeerMessage): void {
    switch (frame.type) {
      case 'Deliver': {
        let answer: PeerMessage;
        try {
          const message = JSON.parse(new TextDecoder().decode(frame.payload)) as M;
          if (this.inbox === undefined) {
            throw new TransportError('closed', 'the region has stopped');
          }
          this.inbox.deliver(frame.shard, message);
          answer = { type: 'Ack', through: frame.seq };
        } catch (error) {
          answer = { type: 'NotDelivered', seq: frame.seq, reason: (error as Error).message };
        }
        link.socket.send(encodePeer(answer));
        break;
      }
      case 'Ask': {
        const { seq, shard } = frame;
        let message: M;
        try {
          message = JSON.parse(new TextDecoder().decode(frame.payload)) as M;
        } catch (error) {
          link.socket.send(encodePeer({ type: 'AskFailed', seq, reason: `not a request: ${(error as Error).message}` }));
          break;
        }
        const replier = new Replier<R>(shard, frame.timeoutMs, (outcome) => {
          if (link.closed) return;
          link.socket.send(encodePeer(answerFrame(seq, outcome)));
        });
        let answer: PeerMessage;
        try {
          if (this.inbox === undefined) {
            throw new TransportError('closed', 'the region has stopped');
          }
          this.inbox.ask(shard, message, replier);
          answer = { type: 'Ack', through: seq };
        } catch (error) {
          answer = { type: 'NotDelivered', seq, reason: (error as Error).message };
        }
        link.socket.send(encodePeer(answer));
        break;
      }
      case 'Ack':
        while (link.unacked.length > 0 && (link.unacked[0] as [number, Outgoing<M, R>])[0] <= frame.through) {
          const [seq, done] = link.unacked.shift() as [number, Outgoing<M, R>];
          link.pending -= done.payload.length;
          if (done.replier !== undefined) link.awaiting.set(seq, done.replier);
        }
        break;
      case 'NotDelivered': {
        const at = link.unacked.findIndex(([seq]) => seq === frame.seq);
        if (at >= 0) {
          const [[, refused]] = link.unacked.splice(at, 1) as [[number, Outgoing<M, R>]];
          this.handBack(link, [refused], frame.reason);
        }
        break;
      }
      case 'Reply': {
        const replier = link.takeRequest(frame.seq);
        if (replier === undefined) break;
        let reply: R;
        try {
          reply = JSON.parse(new TextDecoder().decode(frame.payload)) as R;
        } catch (error) {
          replier.failWith(`the answer is not a reply: ${(error as Error).message}`);
          break;
        }
        replier.reply(reply);
        break;
      }
      case 'AskFailed':
        link.takeRequest(frame.seq)?.failWith(frame.reason);
        break;
      case 'Welcome':
      case 'Refused':
        this.fail(link, `${link.peer} sent a handshake frame after the handshake`);
        break;
    }
  }

  /** The connection is over: what was not acknowledged goes back to the region, in order. */
  private fail(link: Link<M, R>, reason: string): void {
    if (link.closed) {
      return;
    }
    link.closed = true;
    if (this.links.get(link.peer) === link) {
      this.links.delete(link.peer);
    }
    link.socket.terminate();
    const left = [...link.unacked.map(([, outgoing]) => outgoing), ...link.queued];
    link.unacked.length = 0;
    link.queued.length = 0;
    for (const replier of link.awaiting.values()) {
      replier.failWith(`the connection to its home ${link.peer} ended before the answer: ${reason}`);
    }
    link.awaiting.clear();
    this.handBack(link, left, reason);
  }

  /** Hands messages back to the region, each shard's in the order sent. */
  private handBack(link: Link<M, R>, messages: Outgoing<M, R>[], reason: string): void {
    const byShard = new Map<string, (M | Request<M, R>)[]>();
    for (const outgoing of messages) {
      link.pending -= outgoing.payload.length;
      const list = byShard.get(outgoing.shard) ?? [];
      list.push(outgoing.replier === undefined ? outgoing.message : new Request(outgoing.message, outgoing.replier));
      byShard.set(outgoing.shard, list);
    }
    const inbox = this.inbox;
    if (inbox === undefined) {
      return;
    }
    const error = new TransportError('unreachable', `cannot reach region ${link.peer}: ${reason}`);
    for (const [shard, list] of byShard) {
      inbox.notDelivered(link.peer, shard, list, error);
    }
  }
}

/** The frame answering the peer's request numbered `seq`. */
function answerFrame<R>(seq: number, outcome: Answer<R>): PeerMessage {
  if (!outcome.ok) {
    const { detail } = outcome.error;
    return { type: 'AskFailed', seq, reason: detail.kind === 'Failed' ? detail.reason : outcome.error.message };
  }
  let payload: Uint8Array;
  try {
    payload = new TextEncoder().encode(JSON.stringify(outcome.reply) ?? 'null');
  } catch (error) {
    return { type: 'AskFailed', seq, reason: `the answer is not JSON: ${(error as Error).message}` };
  }
  if (payload.length + 32 > MAX_FRAME_BYTES) {
    return { type: 'AskFailed', seq, reason: `an answer of ${payload.length} bytes does not fit a 1 MiB frame` };
  }
  return { type: 'Reply', seq, payload };
}
