// The region protocol's frames (docs/protocol.md): the `Hello` a region
// sends first, the messages a region sends after it, the node's messages,
// and their postcard encoding. Field order and variant indices are the
// contract (`proto/src/protocol.rs`); the golden frames in
// `contracts/wire/` pin them, and `test/wire.test.ts` checks this module
// against every one.

import { FrameError, Reader, Writer, withinFrame } from './postcard.js';

export { FrameError } from './postcard.js';

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 5;

/** The oldest version a node serves. */
export const OLDEST_PROTOCOL_VERSION = 1;

/** The largest frame either side sends or accepts: 1 MiB. */
export const MAX_FRAME_BYTES = 1 << 20;

/** The path of the region session's WebSocket on a node. */
export const CONNECT_PATH = '/v1/regions/connect';

/** The longest shard id, in UTF-8 bytes. */
export const MAX_SHARD_ID_BYTES = 256;

/** The longest region address, in bytes (printable ASCII, no spaces). */
export const MAX_ADDRESS_BYTES = 256;

/** Most shards a load report names one by one; the others go into its `rest`. */
export const MAX_LOAD_SHARDS = 1024;

/**
 * The shortest window a load report may cover, in milliseconds: a region
 * keeps gathering until its window is at least this long.
 */
export const MIN_LOAD_WINDOW_MS = 500;

/**
 * The longest window a load report may cover, in milliseconds: a region
 * drops what it gathered over a longer one and starts a new window.
 */
export const MAX_LOAD_WINDOW_MS = 60_000;

/** A region's first frame. */
export interface Hello {
  /** The protocol version the region speaks. */
  protocol: number;
  /** The entity type the session serves. */
  entityType: string;
}

/** One shard's load in a {@link LoadReport}. */
export interface ShardLoad {
  shard: string;
  /** Units per second over the report's window. */
  load: number;
}

/** A region's registration (the `Register` message without its tag). */
export interface RegisterBody {
  address: string;
  incarnation: number;
  roles: string[];
  appVersion: string;
  labels: Record<string, string>;
  proxyOnly: boolean;
  sequence: number;
}

/** What a region sends after its `Hello`. */
export type RegionMessage =
  | ({ type: 'Register' } & RegisterBody)
  | { type: 'Heartbeat'; sequence: number; metrics: Record<string, number> }
  | { type: 'GetShardHome'; shard: string }
  | { type: 'BeginHandOffAck'; shard: string }
  | { type: 'ShardStopped'; shard: string }
  | { type: 'Leave' }
  | { type: 'Drain'; draining: boolean }
  | { type: 'Load'; windowMs: number; shards: ShardLoad[]; rest: number }
  /** `GetShardHome` with the shard's attributes (protocol version 5): kept by the node when the shard has none. */
  | { type: 'GetShardHomeWithAttributes'; shard: string; attributes: Record<string, string> }
  /** `Register` with the region's declared capacity (protocol version 5): named quantities it can carry. */
  | { type: 'RegisterWithCapacity'; register: RegisterBody; capacity: Record<string, number> };

/** What the node sends. */
export type NodeMessage =
  | { type: 'Welcome'; protocol: number }
  | { type: 'Refused'; reason: string }
  | { type: 'Registered'; incarnation: number; sequence: number; leaseMs: number; heartbeatIntervalMs: number }
  | { type: 'RegisterRefused'; reason: string }
  | { type: 'HeartbeatAck'; incarnation: number; sequence: number; leaseMs: number }
  | { type: 'NotRegistered' }
  | { type: 'ShardHome'; shard: string; home: string }
  | { type: 'ShardRefused'; shard: string; reason: string }
  | { type: 'BeginHandOff'; shard: string }
  | { type: 'HandOff'; shard: string }
  | { type: 'PlacementChanged'; shard: string; target: string | null }
  | { type: 'LeaveDone' }
  | { type: 'ShuttingDown' }
  | { type: 'Redirect'; leader: string }
  | { type: 'ShardHomeEpoch'; shard: string; home: string; epoch: number }
  /** A region of the type was removed (protocol version 4): drop every cached home on `address`. */
  | { type: 'RegionRemoved'; address: string };

/** A region's load report (the `Load` message without its tag). */
export type LoadReport = Omit<Extract<RegionMessage, { type: 'Load' }>, 'type'>;

/** The region messages' names, in variant order: the index is the tag. */
export const REGION_VARIANTS = [
  'Register',
  'Heartbeat',
  'GetShardHome',
  'BeginHandOffAck',
  'ShardStopped',
  'Leave',
  'Drain',
  'Load',
  'GetShardHomeWithAttributes',
  'RegisterWithCapacity',
] as const satisfies readonly RegionMessage['type'][];

/** The node messages' names, in variant order: the index is the tag. */
export const NODE_VARIANTS = [
  'Welcome',
  'Refused',
  'Registered',
  'RegisterRefused',
  'HeartbeatAck',
  'NotRegistered',
  'ShardHome',
  'ShardRefused',
  'BeginHandOff',
  'HandOff',
  'PlacementChanged',
  'LeaveDone',
  'ShuttingDown',
  'Redirect',
  'ShardHomeEpoch',
  'RegionRemoved',
] as const satisfies readonly NodeMessage['type'][];

function checkSize(bytes: Uint8Array): void {
  withinFrame(bytes, MAX_FRAME_BYTES);
}

/** Encodes a `Hello`. */
export function encodeHello(hello: Hello): Uint8Array {
  const w = new Writer();
  w.u32(hello.protocol, 'Hello.protocol');
  w.string(hello.entityType);
  return sized(w.finish());
}

/** Decodes a `Hello`. */
export function decodeHello(bytes: Uint8Array): Hello {
  checkSize(bytes);
  const r = new Reader(bytes);
  const hello = { protocol: r.u32('Hello.protocol'), entityType: r.string('Hello.entity_type') };
  r.end('Hello');
  return hello;
}

function sized(bytes: Uint8Array): Uint8Array {
  return withinFrame(bytes, MAX_FRAME_BYTES);
}

/** Encodes a region's message. */
export function encodeRegion(message: RegionMessage): Uint8Array {
  const w = new Writer();
  w.u32(REGION_VARIANTS.indexOf(message.type), 'the variant');
  switch (message.type) {
    case 'Register':
      writeRegisterBody(w, message);
      break;
    case 'Heartbeat':
      w.u64(message.sequence, 'Heartbeat.sequence');
      w.map(message.metrics, (value) => w.f64(value));
      break;
    case 'GetShardHome':
    case 'BeginHandOffAck':
    case 'ShardStopped':
      w.string(message.shard);
      break;
    case 'Leave':
      break;
    case 'Drain':
      w.bool(message.draining);
      break;
    case 'Load':
      w.u64(message.windowMs, 'Load.window_ms');
      w.seq(message.shards, (shard) => {
        w.string(shard.shard);
        w.f64(shard.load);
      });
      w.f64(message.rest);
      break;
    case 'GetShardHomeWithAttributes':
      w.string(message.shard);
      w.map(message.attributes, (value) => w.string(value));
      break;
    case 'RegisterWithCapacity':
      writeRegisterBody(w, message.register);
      w.map(message.capacity, (value) => w.f64(value));
      break;
  }
  return sized(w.finish());
}

function writeRegisterBody(w: Writer, registration: RegisterBody): void {
  w.string(registration.address);
  w.u64(registration.incarnation, 'Register.incarnation');
  w.seq(registration.roles, (role) => w.string(role));
  w.string(registration.appVersion);
  w.map(registration.labels, (value) => w.string(value));
  w.bool(registration.proxyOnly);
  w.u64(registration.sequence, 'Register.sequence');
}

function readRegisterBody(r: Reader): RegisterBody {
  return {
    address: r.string('Register.address'),
    incarnation: r.u64('Register.incarnation'),
    roles: r.seq('Register.roles', () => r.string('a role')),
    appVersion: r.string('Register.app_version'),
    labels: r.map('Register.labels', () => r.string('a label value')),
    proxyOnly: r.bool('Register.proxy_only'),
    sequence: r.u64('Register.sequence'),
  };
}

/** Decodes a region's message. */
export function decodeRegion(bytes: Uint8Array): RegionMessage {
  checkSize(bytes);
  const r = new Reader(bytes);
  const index = r.u32('the RegionMessage variant');
  const type = REGION_VARIANTS[index];
  if (type === undefined) {
    throw new FrameError(`unknown RegionMessage variant ${index}`);
  }
  let message: RegionMessage;
  switch (type) {
    case 'Register':
      message = { type, ...readRegisterBody(r) };
      break;
    case 'Heartbeat':
      message = {
        type,
        sequence: r.u64('Heartbeat.sequence'),
        metrics: r.map('Heartbeat.metrics', () => r.f64('a metric')),
      };
      break;
    case 'GetShardHome':
    case 'BeginHandOffAck':
    case 'ShardStopped':
      message = { type, shard: r.string(`${type}.shard`) };
      break;
    case 'Leave':
      message = { type };
      break;
    case 'Drain':
      message = { type, draining: r.bool('Drain.draining') };
      break;
    case 'Load':
      message = {
        type,
        windowMs: r.u64('Load.window_ms'),
        shards: r.seq('Load.shards', () => ({ shard: r.string('a shard'), load: r.f64('a shard load') })),
        rest: r.f64('Load.rest'),
      };
      break;
    case 'GetShardHomeWithAttributes':
      message = {
        type,
        shard: r.string('GetShardHomeWithAttributes.shard'),
        attributes: r.map('GetShardHomeWithAttributes.attributes', () => r.string('an attribute value')),
      };
      break;
    case 'RegisterWithCapacity':
      message = {
        type,
        register: readRegisterBody(r),
        capacity: r.map('RegisterWithCapacity.capacity', () => r.f64('a capacity amount')),
      };
      break;
  }
  r.end(`RegionMessage ${type}`);
  return message;
}

/** Encodes the node's message. */
export function encodeNode(message: NodeMessage): Uint8Array {
  const w = new Writer();
  w.u32(NODE_VARIANTS.indexOf(message.type), 'the variant');
  switch (message.type) {
    case 'Welcome':
      w.u32(message.protocol, 'Welcome.protocol');
      break;
    case 'Refused':
    case 'RegisterRefused':
      w.string(message.reason);
      break;
    case 'Registered':
      w.u64(message.incarnation, 'Registered.incarnation');
      w.u64(message.sequence, 'Registered.sequence');
      w.u64(message.leaseMs, 'Registered.lease_ms');
      w.u64(message.heartbeatIntervalMs, 'Registered.heartbeat_interval_ms');
      break;
    case 'HeartbeatAck':
      w.u64(message.incarnation, 'HeartbeatAck.incarnation');
      w.u64(message.sequence, 'HeartbeatAck.sequence');
      w.u64(message.leaseMs, 'HeartbeatAck.lease_ms');
      break;
    case 'NotRegistered':
    case 'LeaveDone':
    case 'ShuttingDown':
      break;
    case 'ShardHome':
      w.string(message.shard);
      w.string(message.home);
      break;
    case 'ShardRefused':
      w.string(message.shard);
      w.string(message.reason);
      break;
    case 'BeginHandOff':
    case 'HandOff':
      w.string(message.shard);
      break;
    case 'PlacementChanged':
      w.string(message.shard);
      w.option(message.target, (target) => w.string(target));
      break;
    case 'Redirect':
      w.string(message.leader);
      break;
    case 'ShardHomeEpoch':
      w.string(message.shard);
      w.string(message.home);
      w.u64(message.epoch, 'ShardHomeEpoch.epoch');
      break;
    case 'RegionRemoved':
      w.string(message.address);
      break;
  }
  return sized(w.finish());
}

/** Decodes the node's message. */
export function decodeNode(bytes: Uint8Array): NodeMessage {
  checkSize(bytes);
  const r = new Reader(bytes);
  const index = r.u32('the NodeMessage variant');
  const type = NODE_VARIANTS[index];
  if (type === undefined) {
    throw new FrameError(`unknown NodeMessage variant ${index}`);
  }
  let message: NodeMessage;
  switch (type) {
    case 'Welcome':
      message = { type, protocol: r.u32('Welcome.protocol') };
      break;
    case 'Refused':
    case 'RegisterRefused':
      message = { type, reason: r.string(`${type}.reason`) };
      break;
    case 'Registered':
      message = {
        type,
        incarnation: r.u64('Registered.incarnation'),
        sequence: r.u64('Registered.sequence'),
        leaseMs: r.u64('Registered.lease_ms'),
        heartbeatIntervalMs: r.u64('Registered.heartbeat_interval_ms'),
      };
      break;
    case 'HeartbeatAck':
      message = {
        type,
        incarnation: r.u64('HeartbeatAck.incarnation'),
        sequence: r.u64('HeartbeatAck.sequence'),
        leaseMs: r.u64('HeartbeatAck.lease_ms'),
      };
      break;
    case 'NotRegistered':
    case 'LeaveDone':
    case 'ShuttingDown':
      message = { type };
      break;
    case 'ShardHome':
      message = { type, shard: r.string('ShardHome.shard'), home: r.string('ShardHome.home') };
      break;
    case 'ShardRefused':
      message = { type, shard: r.string('ShardRefused.shard'), reason: r.string('ShardRefused.reason') };
      break;
    case 'BeginHandOff':
    case 'HandOff':
      message = { type, shard: r.string(`${type}.shard`) };
      break;
    case 'PlacementChanged':
      message = {
        type,
        shard: r.string('PlacementChanged.shard'),
        target: r.option('PlacementChanged.target', () => r.string('PlacementChanged.target')),
      };
      break;
    case 'Redirect':
      message = { type, leader: r.string('Redirect.leader') };
      break;
    case 'ShardHomeEpoch':
      message = {
        type,
        shard: r.string('ShardHomeEpoch.shard'),
        home: r.string('ShardHomeEpoch.home'),
        epoch: r.u64('ShardHomeEpoch.epoch'),
      };
      break;
    case 'RegionRemoved':
      message = { type, address: r.string('RegionRemoved.address') };
      break;
  }
  r.end(`NodeMessage ${type}`);
  return message;
}
