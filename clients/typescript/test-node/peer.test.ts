// The built-in transport between regions (`PeerTransport`) against a real
// node: two TypeScript regions on 127.0.0.1 carry each other's messages over
// the inter-region wire; one goes without leaving and every message still
// reaches the shard's home once, in order on each home; asks are answered
// once by the home or fail by name; a wrong token is refused and the
// message given up by name.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { AskError, DeliveryError, PeerTransport, Region, type Application } from '../src/index.js';
import { FAST, Node, waitFor } from './node.js';

interface Msg {
  from: string;
  n: number;
}

/** Every delivery and every message given up, by region. */
class Journal {
  readonly delivered: [string, string, Msg][] = [];
  readonly givenUp: [string, Msg, DeliveryError][] = [];

  app(region: string): Application<Msg, string> {
    return {
      startShard: () => undefined,
      stopShard: () => undefined,
      deliver: (shard, message) => void this.delivered.push([region, shard, message]),
      answer: (shard, message) => {
        this.delivered.push([region, shard, message]);
        if (message.from === 'refused') throw new Error(`${region} does not answer refused`);
        return region;
      },
      undelivered: (shard, message, error) => void this.givenUp.push([shard, message, error]),
    };
  }

  deliveries(shard: string): [string, Msg][] {
    return this.delivered.filter(([, s]) => s === shard).map(([region, , message]) => [region, message]);
  }
}

async function peerRegion(node: Node, journal: Journal, token: string): Promise<[Region<Msg, string>, PeerTransport<Msg, string>]> {
  const transport = await PeerTransport.bind<Msg, string>({ entityType: 'cart', incarnation: 1, token });
  const region = Region.start(
    {
      node: node.base,
      entityType: 'cart',
      address: transport.address,
      reconnectMinMs: 50,
      reconnectMaxMs: 500,
      homeRetryMs: 300,
      // Rounds of failed forwards outlast the node's removal (4.5 s here),
      // however busy the machine: 100 at 300 ms, the default 30 s deadline.
      forwardAttempts: 100,
    },
    journal.app(transport.address),
    transport,
  );
  await region.waitRegistered();
  return [region, transport];
}

async function shardHomedOn(region: Region<Msg, string>, transport: PeerTransport<Msg, string>, prefix: string): Promise<string> {
  return waitFor('a shard homed there', async () => {
    for (let i = 0; i < 32; i++) {
      if ((await region.homeOf(`${prefix}${i}`)) === transport.address) {
        return `${prefix}${i}`;
      }
    }
    return undefined;
  });
}

describe('the built-in transport between regions', () => {
  let node: Node;
  before(async () => {
    node = await Node.start(['--type', 'cart', ...FAST]);
  });
  after(() => node.stop());

  it('carries every message to the home, across a home gone without leaving', async () => {
    const journal = new Journal();
    const [a, ta] = await peerRegion(node, journal, 'secret');
    const [b, tb] = await peerRegion(node, journal, 'secret');
    const shard = await shardHomedOn(b, tb, 'p');
    for (let n = 0; n < 100; n++) {
      a.send(shard, { from: ta.address, n });
    }
    await waitFor('100 messages delivered on b', () => (journal.deliveries(shard).length === 100 ? true : undefined));
    // b goes without leaving: its listener and connections close.
    await b.shutdown();
    tb.close();
    for (let n = 100; n < 200; n++) {
      a.send(shard, { from: ta.address, n });
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await waitFor('every message delivered', () => {
      assert.deepEqual(journal.givenUp.map(([, m, e]) => [m.n, e.message]), []);
      return new Set(journal.deliveries(shard).map(([, m]) => m.n)).size === 200 ? true : undefined;
    });
    const deliveries = journal.deliveries(shard);
    assert.equal(deliveries.length, 200, 'none twice');
    for (const home of [ta.address, tb.address]) {
      const numbers = deliveries.filter(([r]) => r === home).map(([, m]) => m.n);
      assert.ok(numbers.every((n, i) => i === 0 || (numbers[i - 1] as number) < n), `out of order on ${home}`);
    }
    assert.ok(deliveries.some(([r]) => r === ta.address), 'the shard moved to a');
    await a.shutdown();
    ta.close();
  });

  it('answers asks once from the home, or fails them by name', async () => {
    const journal = new Journal();
    const [a, ta] = await peerRegion(node, journal, 'secret');
    const [b, tb] = await peerRegion(node, journal, 'secret');
    const remote = await shardHomedOn(b, tb, 'q');
    const local = await shardHomedOn(a, ta, 'q');
    // Answered by the home, over the wire or in process, in order with the sends.
    for (let n = 0; n < 40; n++) {
      if (n % 2 === 0) a.send(remote, { from: 'a', n });
      else assert.equal(await a.ask(remote, { from: 'a', n }), tb.address);
    }
    assert.equal(await a.ask(local, { from: 'a', n: 0 }), ta.address);
    assert.deepEqual(
      journal.deliveries(remote).map(([, m]) => m.n),
      Array.from({ length: 40 }, (_, i) => i),
    );
    // An ask is routed when it is called, not when it is awaited.
    const first = a.ask(remote, { from: 'a', n: 40 });
    const second = a.ask(remote, { from: 'a', n: 41 });
    assert.equal(await second, tb.address);
    assert.equal(await first, tb.address);
    assert.deepEqual(
      journal.deliveries(remote).map(([, m]) => m.n),
      Array.from({ length: 42 }, (_, i) => i),
    );
    // Many at once, each answered once.
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => a.ask(remote, { from: 'a', n: 100 + i })));
    assert.ok(answers.every((answer) => answer === tb.address));
    assert.equal(journal.deliveries(remote).length, 242);
    // The home failing a request fails the ask with its words.
    await assert.rejects(a.ask(remote, { from: 'refused', n: 0 }), (error: unknown) => {
      assert.ok(error instanceof AskError);
      assert.equal(error.kind, 'Failed');
      assert.equal(error.message, `shard ${remote} did not answer: ${tb.address} does not answer refused`);
      return true;
    });
    // The home gone without leaving: a hurried ask times out by name, a patient one is answered by the new home.
    await b.shutdown();
    tb.close();
    await assert.rejects(a.ask(remote, { from: 'a', n: 1000 }, { timeoutMs: 300 }), (error: unknown) => {
      assert.ok(error instanceof AskError);
      assert.equal(error.message, `no answer from shard ${remote} within 300ms`);
      return true;
    });
    assert.equal(await a.ask(remote, { from: 'a', n: 1001 }, { timeoutMs: 60_000 }), ta.address);
    assert.deepEqual(journal.givenUp, []);
    await a.shutdown();
    ta.close();
    // A stopped region takes no more requests.
    await assert.rejects(a.ask(remote, { from: 'a', n: 1002 }), (error: unknown) => {
      assert.ok(error instanceof AskError);
      assert.equal(error.kind, 'Send');
      return true;
    });
  });

  it('refuses a wrong token, and the message is given up by name', async () => {
    const journal = new Journal();
    const [a, ta] = await peerRegion(node, journal, 'one');
    const [b, tb] = await peerRegion(node, journal, 'other');
    const shard = await shardHomedOn(b, tb, 'w');
    a.send(shard, { from: 'a', n: 0 });
    const [, , error] = await waitFor('the message given up', () => journal.givenUp[0], 60_000);
    assert.ok(error instanceof DeliveryError);
    assert.match(error.message, /401/);
    assert.deepEqual(journal.deliveries(shard), []);
    await a.shutdown();
    await b.shutdown();
    ta.close();
    tb.close();
  });
});
