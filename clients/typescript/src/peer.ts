// The inter-region wire (docs/protocol.md, "The inter-region wire"): the
// frames regions exchange directly to carry the application's messages to
// a shard's home and `ask` replies back. Versioned on its own
// (`PEER_PROTOCOL_VERSION`); postcard like the region session. Field order
// and variant indices are the contract (`proto/src/peer.rs`); the golden
// frames in `contracts/wire/` (`peer-*.hex`) pin them, and
// `test/wire.test.ts` checks this module against every one.

import { FrameError, Reader, Writer, withinFrame } from './postcard.js';
import { MAX_FRAME_BYTES } from './wire.js';

const sized = (bytes: Uint8Array): Uint8Array => withinFrame(bytes, MAX_FRAME_BYTES);

/** The inter-region wire version this client speaks. */
export const PEER_PROTOCOL_VERSION = 1;

/** The path of the inter-region WebSocket on a region's address. */
export const PEER_PATH = '/shardalloc/v1/peer';

/** Most payload bytes kept unacknowledged for one peer (the wire's back-pressure). */
export const MAX_UNACKED_BYTES = 8 << 20;

/** The dialling region's first frame. */
export interface PeerHello {
  protocol: number;
  entityType: string;
  /** The dialler's address. */
  from: string;
  incarnation: number;
}

/** Every frame after the `PeerHello`, in both directions. */
export type PeerMessage =
  | { type: 'Welcome'; protocol: number; address: string; incarnation: number }
  | { type: 'Refused'; reason: string }
  | { type: 'Deliver'; seq: number; shard: string; payload: Uint8Array }
  | { type: 'Ask'; seq: number; shard: string; payload: Uint8Array; timeoutMs: number }
  | { type: 'Reply'; seq: number; payload: Uint8Array }
  | { type: 'Ack'; through: number }
  | { type: 'NotDelivered'; seq: number; reason: string }
  | { type: 'AskFailed'; seq: number; reason: string };

/** The inter-region messages' names, in variant order: the index is the tag. */
export const PEER_VARIANTS = [
  'Welcome',
  'Refused',
  'Deliver',
  'Ask',
  'Reply',
  'Ack',
  'NotDelivered',
  'AskFailed',
] as const satisfies readonly PeerMessage['type'][];

/** Encodes a `PeerHello`. */
export function encodePeerHello(hello: PeerHello): Uint8Array {
  const w = new Writer();
  w.u32(hello.protocol, 'PeerHello.protocol');
  w.string(hello.entityType);
  w.string(hello.from);
  w.u64(hello.incarnation, 'PeerHello.incarnation');
  return sized(w.finish());
}

/** Decodes a `PeerHello`. */
export function decodePeerHello(bytes: Uint8Array): PeerHello {
  sized(bytes);
  const r = new Reader(bytes);
  const hello = {
    protocol: r.u32('PeerHello.protocol'),
    entityType: r.string('PeerHello.entity_type'),
    from: r.string('PeerHello.from'),
    incarnation: r.u64('PeerHello.incarnation'),
  };
  r.end('PeerHello');
  return hello;
}

/** Encodes an inter-region message. */
export function encodePeer(message: PeerMessage): Uint8Array {
  const w = new Writer();
  w.u32(PEER_VARIANTS.indexOf(message.type), 'the variant');
  switch (message.type) {
    case 'Welcome':
      w.u32(message.protocol, 'Welcome.protocol');
      w.string(message.address);
      w.u64(message.incarnation, 'Welcome.incarnation');
      break;
    case 'Refused':
      w.string(message.reason);
      break;
    case 'Deliver':
      w.u64(message.seq, 'Deliver.seq');
      w.string(message.shard);
      w.bytesOf(message.payload);
      break;
    case 'Ask':
      w.u64(message.seq, 'Ask.seq');
      w.string(message.shard);
      w.bytesOf(message.payload);
      w.u64(message.timeoutMs, 'Ask.timeout_ms');
      break;
    case 'Reply':
      w.u64(message.seq, 'Reply.seq');
      w.bytesOf(message.payload);
      break;
    case 'Ack':
      w.u64(message.through, 'Ack.through');
      break;
    case 'NotDelivered':
    case 'AskFailed':
      w.u64(message.seq, `${message.type}.seq`);
      w.string(message.reason);
      break;
  }
  return sized(w.finish());
}

/** Decodes an inter-region message; the whole frame must be one message. */
export function decodePeer(bytes: Uint8Array): PeerMessage {
  sized(bytes);
  const r = new Reader(bytes);
  const index = r.u32('the variant');
  const type = PEER_VARIANTS[index];
  let message: PeerMessage;
  switch (type) {
    case 'Welcome':
      message = {
        type,
        protocol: r.u32('Welcome.protocol'),
        address: r.string('Welcome.address'),
        incarnation: r.u64('Welcome.incarnation'),
      };
      break;
    case 'Refused':
      message = { type, reason: r.string('Refused.reason') };
      break;
    case 'Deliver':
      message = { type, seq: r.u64('Deliver.seq'), shard: r.string('Deliver.shard'), payload: r.bytesOf('Deliver.payload') };
      break;
    case 'Ask':
      message = {
        type,
        seq: r.u64('Ask.seq'),
        shard: r.string('Ask.shard'),
        payload: r.bytesOf('Ask.payload'),
        timeoutMs: r.u64('Ask.timeout_ms'),
      };
      break;
    case 'Reply':
      message = { type, seq: r.u64('Reply.seq'), payload: r.bytesOf('Reply.payload') };
      break;
    case 'Ack':
      message = { type, through: r.u64('Ack.through') };
      break;
    case 'NotDelivered':
    case 'AskFailed':
      message = { type, seq: r.u64(`${type}.seq`), reason: r.string(`${type}.reason`) };
      break;
    default:
      throw new FrameError(`unknown PeerMessage variant ${index}`);
  }
  r.end(`PeerMessage ${type}`);
  return message;
}
