// The codec against the golden frames (`contracts/wire/`: every frame's
// bytes, and `frames.json`, every frame's value as the Rust code holds it):
// each fixture decodes to its value and the value encodes to the fixture's
// bytes. Then the refusals, each naming its problem.

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { describe, it } from 'node:test';

import {
  PEER_VARIANTS,
  decodePeer,
  decodePeerHello,
  encodePeer,
  encodePeerHello,
  type PeerMessage,
} from '../src/peer.js';
import {
  FrameError,
  MAX_FRAME_BYTES,
  NODE_VARIANTS,
  REGION_VARIANTS,
  decodeHello,
  decodeNode,
  decodeRegion,
  encodeHello,
  encodeNode,
  encodeRegion,
  type NodeMessage,
  type RegionMessage,
} from '../src/wire.js';

import { fromSerde } from './serde-json.js';

const WIRE = new URL('../../../../contracts/wire/', import.meta.url);

type Kind = 'hello' | 'region' | 'node' | 'peer-hello' | 'peer';
const golden = JSON.parse(readFileSync(new URL('frames.json', WIRE), 'utf8')) as Record<
  string,
  { kind: Kind; value: unknown }
>;

function bytesOf(name: string): Uint8Array {
  const hex = readFileSync(new URL(`${name}.hex`, WIRE), 'utf8').replace(/\s+/g, '');
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('hex');
}

/** An inter-region message from serde's JSON: its `payload` (a list of bytes there) as bytes. */
function peerMessage(value: unknown): PeerMessage {
  const fields = fromSerde(value);
  if (Array.isArray(fields['payload'])) {
    fields['payload'] = Uint8Array.from(fields['payload'] as number[]);
  }
  return fields as PeerMessage;
}

/** A region message from serde's JSON: a registration nested in `RegisterWithCapacity` in camelCase too. */
function regionMessage(value: unknown): RegionMessage {
  const fields = fromSerde(value);
  if (fields['type'] === 'RegisterWithCapacity') {
    fields['register'] = fromSerde({ Register: fields['register'] });
    delete (fields['register'] as Record<string, unknown>)['type'];
  }
  return fields as RegionMessage;
}

describe('golden frames', () => {
  const fixtures = readdirSync(WIRE)
    .filter((file) => file.endsWith('.hex'))
    .map((file) => file.slice(0, -'.hex'.length));

  it('every fixture has a value and every value a fixture', () => {
    assert.deepEqual([...fixtures].sort(), Object.keys(golden).sort());
  });

  it('cover every variant of both enums', () => {
    const seen = new Set(
      Object.values(golden)
        .filter((g) => g.kind !== 'hello' && g.kind !== 'peer-hello')
        .map((g) => `${g.kind} ${String(fromSerde(g.value)['type'])}`),
    );
    const all = [
      ...REGION_VARIANTS.map((v) => `region ${v}`),
      ...NODE_VARIANTS.map((v) => `node ${v}`),
      ...PEER_VARIANTS.map((v) => `peer ${v}`),
    ];
    for (const variant of all) {
      assert.ok(seen.has(variant), `no golden frame of ${variant}`);
    }
  });

  for (const name of fixtures) {
    it(`${name} decodes to its value and encodes to its bytes`, () => {
      const entry = golden[name];
      assert.ok(entry, `${name} has no value in frames.json`);
      const bytes = bytesOf(name);
      if (entry.kind === 'hello') {
        const fields = entry.value as { protocol: number; entity_type: string };
        const hello = { protocol: fields.protocol, entityType: fields.entity_type };
        assert.deepEqual(decodeHello(bytes), hello);
        assert.equal(hex(encodeHello(hello)), hex(bytes));
      } else if (entry.kind === 'peer-hello') {
        const fields = entry.value as { protocol: number; entity_type: string; from: string; incarnation: number };
        const hello = { protocol: fields.protocol, entityType: fields.entity_type, from: fields.from, incarnation: fields.incarnation };
        assert.deepEqual(decodePeerHello(bytes), hello);
        assert.equal(hex(encodePeerHello(hello)), hex(bytes));
      } else if (entry.kind === 'peer') {
        const value = peerMessage(entry.value);
        assert.deepEqual(decodePeer(bytes), value);
        assert.equal(hex(encodePeer(value)), hex(bytes));
      } else if (entry.kind === 'region') {
        const value = regionMessage(entry.value);
        assert.deepEqual(decodeRegion(bytes), value);
        assert.equal(hex(encodeRegion(value)), hex(bytes));
      } else {
        const value = fromSerde(entry.value) as NodeMessage;
        assert.deepEqual(decodeNode(bytes), value);
        assert.equal(hex(encodeNode(value)), hex(bytes));
      }
    });
  }
});

describe('refusals name the problem', () => {
  const cases: [string, () => unknown, string][] = [
    ['an unknown node variant', () => decodeNode(Uint8Array.of(99)), 'unknown NodeMessage variant 99'],
    ['an unknown region variant', () => decodeRegion(Uint8Array.of(10)), 'unknown RegionMessage variant 10'],
    ['an unknown peer variant', () => decodePeer(Uint8Array.of(8)), 'unknown PeerMessage variant 8'],
    ['a truncated payload', () => decodePeer(Uint8Array.of(2, 1, 1, 0x73, 5, 1)), 'Deliver.payload (5 bytes) needs 4 more byte(s)'],
    ['a truncated string', () => decodeNode(Uint8Array.of(6, 5, 0x61)), 'needs 4 more byte(s)'],
    ['invalid UTF-8', () => decodeNode(Uint8Array.of(13, 1, 0xff)), 'invalid UTF-8'],
    ['a bad bool', () => decodeRegion(Uint8Array.of(6, 7)), 'a bool byte must be 0 or 1, not 7'],
    ['a bad option tag', () => decodeNode(Uint8Array.of(10, 1, 0x61, 2)), 'an option tag must be 0 or 1, not 2'],
    ['bytes left over', () => decodeNode(Uint8Array.of(5, 0, 0, 0)), '3 byte(s) left after the NodeMessage NotRegistered'],
    [
      'a varint too long',
      () => decodeNode(Uint8Array.of(4, ...new Array<number>(11).fill(0x80))),
      'a varint longer than 10 bytes',
    ],
    [
      'a u32 varint longer than 5 bytes',
      () => decodeNode(Uint8Array.of(0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00)),
      'Welcome.protocol: a varint longer than 5 bytes',
    ],
    ['a u32 over 32 bits', () => decodeNode(Uint8Array.of(0, 0x80, 0x80, 0x80, 0x80, 0x10)), 'Welcome.protocol'],
    [
      'a u64 over 2^53 - 1',
      () => decodeNode(Uint8Array.of(4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)),
      'is over 9007199254740991',
    ],
    ['a frame over 1 MiB', () => decodeNode(new Uint8Array(MAX_FRAME_BYTES + 1)), 'over the 1 MiB limit'],
    [
      'a negative number',
      () => encodeNode({ type: 'Welcome', protocol: -1 }),
      'Welcome.protocol must be an integer from 0 to 4294967295, not -1',
    ],
    [
      'a fraction',
      () => encodeRegion({ type: 'Heartbeat', sequence: 1.5, metrics: {} }),
      'Heartbeat.sequence must be an integer',
    ],
    [
      'a shard list longer than the frame',
      () => decodeRegion(Uint8Array.of(7, 1, 50)),
      'claims 50 items',
    ],
  ];
  for (const [what, run, words] of cases) {
    it(what, () => {
      assert.throws(run, (error: unknown) => {
        assert.ok(error instanceof FrameError, `not a FrameError: ${String(error)}`);
        assert.ok(error.message.includes(words), `${JSON.stringify(error.message)} does not say ${JSON.stringify(words)}`);
        return true;
      });
    });
  }
});

describe('round trips', () => {
  it('keep edge values', () => {
    const values: NodeMessage[] = [
      { type: 'ShardHomeEpoch', shard: '', home: 'ünïcødé-🦀', epoch: Number.MAX_SAFE_INTEGER },
      { type: 'Registered', incarnation: 0, sequence: 0, leaseMs: 0, heartbeatIntervalMs: 0 },
      { type: 'PlacementChanged', shard: 's', target: null },
      { type: 'Welcome', protocol: 0xffff_ffff },
    ];
    for (const value of values) {
      assert.deepEqual(decodeNode(encodeNode(value)), value);
    }
    const heartbeat: RegionMessage = { type: 'Heartbeat', sequence: 1, metrics: { __proto__x: 1, b: -0.5, a: 1e300 } };
    assert.deepEqual(decodeRegion(encodeRegion(heartbeat)), heartbeat);
    const proto = decodeRegion(
      encodeRegion({
        type: 'Register',
        address: 'a',
        incarnation: 1,
        roles: [],
        appVersion: '',
        labels: JSON.parse('{"__proto__":"x"}') as Record<string, string>,
        proxyOnly: false,
        sequence: 1,
      }),
    );
    assert.equal(proto.type === 'Register' && Object.keys(proto.labels).join(), '__proto__', 'a key __proto__ stays a key');
  });

  it('write maps in the byte order of their keys, as Rust does', () => {
    const bytes = encodeRegion({ type: 'Heartbeat', sequence: 1, metrics: { b: 1, a: 2, 'é': 3, Z: 4 } });
    const keys = Object.keys((decodeRegion(bytes) as { metrics: Record<string, number> }).metrics);
    assert.deepEqual(keys, ['Z', 'a', 'b', 'é']);
  });
});
