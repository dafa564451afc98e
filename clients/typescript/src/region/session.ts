// One WebSocket session with the node: connect (with the region token, over
// TLS with a private CA when asked), `Hello`/`Welcome`, then frames both
// ways until either side hangs up. A node that does not lead answers the
// `Hello` with `Redirect`: the session follows it once to the leader, and
// remembers the leader for the next attempt until a session with it ends.
// The region's driver hears everything as `SessionEvent`s.

import WebSocket from 'ws';

import {
  CONNECT_PATH,
  FrameError,
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
  decodeNode,
  encodeHello,
  encodeRegion,
  type NodeMessage,
  type RegionMessage,
} from '../wire.js';

/** What a session tells the region's driver. */
export type SessionEvent =
  /** The node welcomed the region: send with {@link Session.send}. */
  | { type: 'connected' }
  /** A message from the node. */
  | { type: 'message'; message: NodeMessage }
  /** The node refused the session (a wrong token, a refused `Hello`); `closed` follows. */
  | { type: 'refused'; reason: string }
  /** The session is over, or never started. */
  | { type: 'closed'; reason: string };

/** Where and how a region connects. */
export interface SessionParams {
  /** Every node's connect URL (`ws(s)://host:port/v1/regions/connect`); attempts go round them. */
  urls: string[];
  /** The entity type the session serves. */
  entityType: string;
  /** The region token, sent as `Authorization: Bearer …`. */
  token?: string | undefined;
  /** PEM certificates to trust for `wss://` (a private CA); the system's otherwise. */
  ca?: string | Buffer | undefined;
  /** The bound of the WebSocket handshake and of the `Welcome`. */
  handshakeTimeoutMs: number;
  /** The application's attributes of a shard, sent with its home request to a node of protocol version 5 or later. */
  shardAttributes?: ((shard: string) => Record<string, string>) | undefined;
  /** The capacity the region declares, sent with its registration to a node of protocol version 5 or later. */
  capacity?: Record<string, number>;
}

/**
 * A node's connect URL from its base URL: `http://h:p` → `ws://h:p/v1/regions/connect`,
 * `https` → `wss`; a `ws(s)://` URL is kept, its path completed unless it
 * already ends with the connect path. Throws naming the problem.
 */
export function connectUrlOf(node: string): string {
  let url: URL;
  try {
    url = new URL(node);
  } catch {
    throw new Error(`the node URL ${JSON.stringify(node)} is not a URL (e.g. http://127.0.0.1:7878)`);
  }
  const schemes: Record<string, string> = { 'http:': 'ws:', 'https:': 'wss:', 'ws:': 'ws:', 'wss:': 'wss:' };
  const scheme = schemes[url.protocol];
  if (scheme === undefined) {
    throw new Error(`the node URL ${JSON.stringify(node)} must start with http://, https://, ws:// or wss://`);
  }
  url.protocol = scheme;
  if (!url.pathname.endsWith(CONNECT_PATH)) {
    url.pathname = url.pathname.replace(/\/+$/, '') + CONNECT_PATH;
  }
  return url.toString();
}

/** The attempts' shared memory: the leader a node redirected to. */
export class Leader {
  url: string | null = null;
}

/** One session attempt. */
export class Session {
  private socket: WebSocket | null = null;
  private welcomed = false;
  /** The protocol version the node welcomed the region in. */
  private nodeProtocol = 0;
  private ended = false;

  private constructor(
    private readonly params: SessionParams,
    private readonly leader: Leader,
    private readonly onEvent: (event: SessionEvent) => void,
  ) {}

  /** Starts attempt number `generation`: the leader's URL when known, else the nodes in turn. */
  static open(
    params: SessionParams,
    leader: Leader,
    generation: number,
    onEvent: (event: SessionEvent) => void,
  ): Session {
    const session = new Session(params, leader, onEvent);
    const url = leader.url ?? (params.urls[generation % params.urls.length] as string);
    session.connect(url, false);
    return session;
  }

  /** Sends a message to the node; dropped unless the session is welcomed and open. */
  send(message: RegionMessage): void {
    if (this.welcomed && this.socket?.readyState === WebSocket.OPEN) {
      this.socket.send(encodeRegion(this.asSent(message)));
    }
  }

  /**
   * A home request carries the shard's attributes when the application has some, and a registration the
   * region's capacity when it declares one, if the node reads them (version 5).
   */
  private asSent(message: RegionMessage): RegionMessage {
    if (message.type === 'Register') {
      const capacity = this.params.capacity ?? {};
      if (this.nodeProtocol < 5 || Object.keys(capacity).length === 0) {
        return message;
      }
      const { type: _, ...register } = message;
      return { type: 'RegisterWithCapacity', register, capacity };
    }
    const attributesOf = this.params.shardAttributes;
    if (message.type !== 'GetShardHome' || attributesOf === undefined || this.nodeProtocol < 5) {
      return message;
    }
    const attributes = attributesOf(message.shard);
    if (Object.keys(attributes).length === 0) {
      return message;
    }
    return { type: 'GetShardHomeWithAttributes', shard: message.shard, attributes };
  }

  /** Hangs up (a close frame, after what was sent before it); `closed` follows. */
  close(reason = 'the region hung up'): void {
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) {
      this.socket.close(1000, 'session closed');
    }
    this.end(reason);
  }

  /**
   * Resolves once the WebSocket is closed (the node answered the close
   * frame, or the connection ended), or after `boundMs` at most; then the
   * connection is dropped. A process may exit after it without the node
   * seeing a connection reset.
   */
  whenClosed(boundMs: number): Promise<void> {
    const socket = this.socket;
    if (socket === null || socket.readyState === WebSocket.CLOSED) {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        socket.terminate();
        resolve();
      }, boundMs);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private end(reason: string): void {
    if (!this.ended) {
      this.ended = true;
      if (this.welcomed) {
        // The node may have stopped leading: ask the nodes in turn again.
        this.leader.url = null;
      }
      this.onEvent({ type: 'closed', reason });
    }
  }

  private connect(url: string, redirected: boolean): void {
    const headers: Record<string, string> = {};
    if (this.params.token !== undefined) {
      headers['authorization'] = `Bearer ${this.params.token}`;
    }
    let socket: WebSocket;
    try {
      socket = new WebSocket(url, {
        headers,
        handshakeTimeout: this.params.handshakeTimeoutMs,
        maxPayload: MAX_FRAME_BYTES,
        perMessageDeflate: false,
        ...(this.params.ca === undefined ? {} : { ca: this.params.ca }),
      });
    } catch (error) {
      this.leader.url = null;
      this.end(`cannot connect to ${url}: ${(error as Error).message}`);
      return;
    }
    this.socket = socket;
    socket.binaryType = 'nodebuffer';
    const welcomeTimer = setTimeout(() => {
      this.leader.url = null;
      socket.terminate();
      this.end(`no answer from ${url} within ${this.params.handshakeTimeoutMs} ms`);
    }, this.params.handshakeTimeoutMs);
    socket.on('unexpected-response', (_request, response) => {
      clearTimeout(welcomeTimer);
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      response.on('end', () => {
        const status = response.statusCode ?? 0;
        socket.terminate();
        if (status === 401 || status === 403) {
          const reason = `the node refused the region token (${status}): ${body}`;
          this.onEvent({ type: 'refused', reason });
          this.end(reason);
        } else {
          this.leader.url = null;
          this.end(`cannot connect to ${url}: HTTP ${status} ${body}`);
        }
      });
    });
    socket.on('open', () => {
      socket.send(encodeHello({ protocol: PROTOCOL_VERSION, entityType: this.params.entityType }));
    });
    socket.on('message', (data: Buffer, isBinary: boolean) => {
      if (this.ended) {
        return;
      }
      if (!isBinary) {
        socket.terminate();
        this.end('the node sent a text frame; the protocol uses binary frames');
        return;
      }
      let message: NodeMessage;
      try {
        message = decodeNode(new Uint8Array(data.buffer, data.byteOffset, data.length));
      } catch (error) {
        socket.terminate();
        this.end(`bad frame from the node: ${error instanceof FrameError ? error.message : String(error)}`);
        return;
      }
      if (this.welcomed) {
        this.onEvent({ type: 'message', message });
        return;
      }
      clearTimeout(welcomeTimer);
      this.answered(socket, url, redirected, message);
    });
    socket.on('error', (error: Error) => {
      clearTimeout(welcomeTimer);
      if (!this.welcomed) {
        this.leader.url = null;
      }
      this.end(this.welcomed ? `the WebSocket failed: ${error.message}` : `cannot connect to ${url}: ${error.message}`);
    });
    socket.on('close', () => {
      clearTimeout(welcomeTimer);
      this.end(this.welcomed ? 'the node closed the session' : 'the node closed the connection during the handshake');
    });
  }

  /** The node's answer to the `Hello`. */
  private answered(socket: WebSocket, url: string, redirected: boolean, message: NodeMessage): void {
    switch (message.type) {
      case 'Welcome':
        this.welcomed = true;
        this.nodeProtocol = message.protocol;
        this.onEvent({ type: 'connected' });
        return;
      case 'Refused':
        this.onEvent({ type: 'refused', reason: message.reason });
        socket.close(1000);
        this.end(`the node refused the session: ${message.reason}`);
        return;
      case 'Redirect': {
        socket.removeAllListeners();
        socket.on('error', () => {});
        socket.close(1000);
        if (redirected) {
          this.leader.url = null;
          this.end(`${url} redirected to the leader, which redirected again`);
          return;
        }
        let next: string;
        try {
          next = connectUrlOf(message.leader);
        } catch (error) {
          this.end(`${url} redirected to ${JSON.stringify(message.leader)}, which is not a node URL: ${(error as Error).message}`);
          return;
        }
        this.leader.url = next;
        this.connect(next, true);
        return;
      }
      default:
        socket.terminate();
        this.end(`the node answered the Hello with ${message.type} instead of Welcome or Refused`);
    }
  }
}
