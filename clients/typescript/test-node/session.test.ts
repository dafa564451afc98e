// The session against the real node: the handshake, a registration and a
// home answered with its epoch; a wrong region token refused by name; a
// node that is not there named in the reason.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { Leader, Session, connectUrlOf, type SessionEvent } from '../src/region/session.js';
import { FAST, Node, PATIENCE_MS, waitFor } from './node.js';

function open(node: string, token?: string): { session: Session; events: SessionEvent[] } {
  const events: SessionEvent[] = [];
  const params = { urls: [connectUrlOf(node)], entityType: 'cart', token, handshakeTimeoutMs: PATIENCE_MS };
  const session = Session.open(params, new Leader(), 0, (event) => events.push(event));
  return { session, events };
}

describe('a session with the real node', () => {
  let node: Node;
  before(async () => {
    node = await Node.start(['--type', 'cart', '--region-token', 'right', ...FAST]);
  });
  after(() => node.stop());

  it('is welcomed, registers and is told a home with its epoch', async () => {
    const { session, events } = open(node.base, 'right');
    await waitFor('the Welcome', () => events.find((e) => e.type === 'connected'));
    session.send({
      type: 'Register',
      address: 'ts-a',
      incarnation: 1,
      roles: [],
      appVersion: '0.1.0',
      labels: { zone: 'a' },
      proxyOnly: false,
      sequence: 1,
    });
    const registered = await waitFor('the registration', () =>
      events.flatMap((e) => (e.type === 'message' && e.message.type === 'Registered' ? [e.message] : []))[0],
    );
    assert.equal(registered.incarnation, 1);
    assert.equal(registered.sequence, 1);
    assert.ok(registered.leaseMs > 0 && registered.heartbeatIntervalMs > 0, JSON.stringify(registered));
    session.send({ type: 'GetShardHome', shard: 'order-42' });
    const home = await waitFor('the home', () =>
      events.flatMap((e) => (e.type === 'message' && e.message.type === 'ShardHomeEpoch' ? [e.message] : []))[0],
    );
    assert.equal(home.shard, 'order-42');
    assert.equal(home.home, 'ts-a');
    assert.ok(home.epoch >= 1, `epoch ${home.epoch}`);
    session.close();
    await waitFor('the end', () => events.find((e) => e.type === 'closed'));
  });

  it('is refused with a wrong token, by name', async () => {
    const { events } = open(node.base, 'wrong');
    const closed = await waitFor('the end', () => events.find((e) => e.type === 'closed'));
    assert.ok(events.some((e) => e.type === 'refused'), JSON.stringify(events));
    assert.match(closed.reason, /refused the region token \(401\)/);
  });

  it('names a node that is not there', async () => {
    const { events } = open('http://127.0.0.1:9');
    const closed = await waitFor('the end', () => events.find((e) => e.type === 'closed'));
    assert.match(closed.reason, /cannot connect to ws:\/\/127\.0\.0\.1:9\/v1\/regions\/connect/);
  });
});

describe('connectUrlOf', () => {
  const cases: [string, string][] = [
    ['http://127.0.0.1:7878', 'ws://127.0.0.1:7878/v1/regions/connect'],
    ['https://node.example:443/', 'wss://node.example/v1/regions/connect'],
    ['ws://h:1/v1/regions/connect', 'ws://h:1/v1/regions/connect'],
    ['http://h:1/prefix/', 'ws://h:1/prefix/v1/regions/connect'],
  ];
  for (const [node, url] of cases) {
    it(`${node} → ${url}`, () => assert.equal(connectUrlOf(node), url));
  }
  it('refuses what is not a node URL, by name', () => {
    assert.throws(() => connectUrlOf('ftp://h'), /must start with http:\/\//);
    assert.throws(() => connectUrlOf('h:1'), /must start with|is not a URL/);
  });
});
