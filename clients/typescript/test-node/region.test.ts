// The TypeScript region client against the real node: registration, a home
// and its epoch, deliveries in order, a hand-off under traffic with no
// message lost or doubled, drain and leave, a wrong token and a stale
// incarnation refused by name.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { AdminClient, InMemoryTransport, Region, RegionError, type Application, type RegionConfig } from '../src/index.js';
import { FAST, Node, PATIENCE_MS, waitFor } from './node.js';

/** What every region's application saw, in order. */
class Journal {
  readonly entries: string[] = [];
  /** Shard → (region, message) in delivery order. */
  readonly delivered = new Map<string, [string, number][]>();
  /** Shard → the regions running it now. */
  readonly running = new Map<string, Set<string>>();
  readonly overlaps: string[] = [];
  readonly epochs = new Map<string, number[]>();

  app(region: string): Application<number> {
    return {
      startShard: (shard, epoch) => {
        const set = this.running.get(shard) ?? new Set();
        if (set.size > 0) this.overlaps.push(`${shard} started on ${region} while on ${[...set].join()}`);
        set.add(region);
        this.running.set(shard, set);
        this.epochs.set(shard, [...(this.epochs.get(shard) ?? []), epoch]);
        this.entries.push(`start ${shard} on ${region} at ${epoch}`);
      },
      stopShard: async (shard) => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        this.running.get(shard)?.delete(region);
        this.entries.push(`stop ${shard} on ${region}`);
      },
      deliver: (shard, n) => {
        this.delivered.set(shard, [...(this.delivered.get(shard) ?? []), [region, n]]);
      },
    };
  }
}

function config(node: Node, address: string, extra: Partial<RegionConfig> = {}): RegionConfig {
  return {
    node: node.base,
    entityType: 'cart',
    address,
    reconnectMinMs: 50,
    reconnectMaxMs: 500,
    homeRetryMs: 300,
    stopDeadlineMs: 5_000,
    leaveTimeoutMs: 20_000,
    ...extra,
  };
}

describe('the region client with the real node', () => {
  let node: Node;
  before(async () => {
    node = await Node.start(['--type', 'cart', '--region-token', 'secret', ...FAST]);
  });
  after(() => node.stop());

  it('registers, learns a home with its epoch, delivers in order, and a hand-off under traffic loses nothing', async () => {
    const journal = new Journal();
    const network = new InMemoryTransport<number>();
    const a = Region.start(config(node, 'ts-a', { token: 'secret' }), journal.app('ts-a'), network);
    const b = Region.start(config(node, 'ts-b', { token: 'secret' }), journal.app('ts-b'), network);
    try {
      await Promise.all([a.waitRegistered(), b.waitRegistered()]);
      const placed = await node.request('POST', '/v1/cluster/shards/cart/placements', {
        placements: [{ shardId: 'orders', target: 'ts-a' }],
      });
      assert.equal(placed.status, 200, JSON.stringify(placed.body));
      assert.equal(await a.homeOf('orders'), 'ts-a');
      await waitFor('orders to run on ts-a', () => (a.epochOf('orders') !== undefined ? true : undefined));
      const shard = (await node.request('GET', '/v1/cluster/shards/cart/shards/orders')).body as { epoch: number };
      assert.equal(a.epochOf('orders'), shard.epoch, "the region runs the shard at the node's epoch");

      // b sends 300 messages while the shard moves from a to b.
      let sent = 0;
      const sender = (async () => {
        for (; sent < 300; sent++) {
          b.send('orders', sent);
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
      })();
      await waitFor('some messages delivered on ts-a', () => ((journal.delivered.get('orders')?.length ?? 0) > 20 ? true : undefined));
      const moved = await node.request('POST', '/v1/cluster/shards/cart/placements', {
        placements: [{ shardId: 'orders', target: 'ts-b' }],
      });
      assert.equal(moved.status, 200, JSON.stringify(moved.body));
      await sender;
      const delivered = await waitFor('every message delivered', () => {
        const list = journal.delivered.get('orders') ?? [];
        return list.length >= 300 ? list : undefined;
      });
      assert.deepEqual(delivered.map(([, n]) => n), [...Array(300).keys()], 'lost, doubled or reordered');
      assert.ok(delivered.some(([r]) => r === 'ts-a') && delivered.some(([r]) => r === 'ts-b'), 'the shard did not move under traffic');
      const epochs = journal.epochs.get('orders') ?? [];
      assert.ok(epochs.length === 2 && (epochs[1] as number) > (epochs[0] as number), `epochs ${epochs.join()}`);
      assert.deepEqual(journal.overlaps, []);

      // a drains and leaves; b stays.
      await a.drainAndLeave();
      assert.equal(a.isRegistered(), false);
      assert.deepEqual(a.runningShards(), []);
      const regions = (await node.request('GET', '/v1/cluster/regions')).body as { regions: { address: string }[] };
      assert.ok(!JSON.stringify(regions).includes('"ts-a"'), `ts-a is still registered: ${JSON.stringify(regions)}`);
      await assert.rejects(a.homeOf('x'), (error: unknown) => error instanceof RegionError && error.kind === 'Left');
    } finally {
      await Promise.all([a.shutdown(), b.shutdown()]);
    }
  });

  it('names a wrong token and a stale incarnation, and a new incarnation takes over', async () => {
    const journal = new Journal();
    const wrong = Region.start(config(node, 'ts-wrong', { token: 'nope' }), journal.app('ts-wrong'));
    await assert.rejects(wrong.waitRegistered(), (error: unknown) => {
      assert.ok(error instanceof RegionError && error.kind === 'Refused', String(error));
      assert.match(error.message, /refused the region token \(401\)/);
      return true;
    });
    await wrong.shutdown();

    const newer = Region.start(config(node, 'ts-same', { token: 'secret', incarnation: 2 }), journal.app('ts-same'));
    await newer.waitRegistered();
    const older = Region.start(config(node, 'ts-same', { token: 'secret', incarnation: 1 }), journal.app('ts-same'));
    await assert.rejects(older.waitRegistered(), (error: unknown) => {
      assert.ok(error instanceof RegionError && error.kind === 'Refused', String(error));
      assert.match(error.message, /incarnation 1 is older than the registered incarnation 2/);
      return true;
    });
    // A restart with a new incarnation takes the address over.
    const newest = Region.start(config(node, 'ts-same', { token: 'secret', incarnation: 3 }), journal.app('ts-same'));
    await newest.waitRegistered();
    assert.equal(await newest.homeOf('taken-over'), 'ts-same');
    await Promise.all([older.shutdown(), newer.shutdown(), newest.shutdown()]);
  });

  it('emits each update under its own name, and gives up waits whose signal aborts', async () => {
    const journal = new Journal();
    // A region the node refuses never registers: its wait is given up by the signal.
    const refused = Region.start(config(node, 'ts-refused', { token: 'nope' }), journal.app('ts-refused'));
    const aborted = new AbortController();
    aborted.abort(new Error('the caller gave up'));
    await assert.rejects(refused.waitRegistered({ signal: aborted.signal }), /the caller gave up/);
    await refused.shutdown();

    const attributesOf = (shard: string): Record<string, string> => (shard === 'named' ? { tenant: 'acme' } : {});
    const region = Region.start(
      config(node, 'ts-named', { token: 'secret', shardAttributes: attributesOf }),
      journal.app('ts-named'),
    );
    const registered = new Promise<number>((resolve) => region.once('registered', ({ incarnation }) => resolve(incarnation)));
    const started = new Promise<[string, number]>((resolve) =>
      region.on('shardStarted', (update) => resolve([update.shard, update.epoch])),
    );
    await region.waitRegistered({ signal: AbortSignal.timeout(PATIENCE_MS) });
    assert.equal(await registered, region.incarnation);
    assert.equal(await region.homeOf('named', { signal: AbortSignal.timeout(PATIENCE_MS) }), 'ts-named');
    // The application's attributes went with the first request (protocol version 5).
    assert.deepEqual((await new AdminClient(node.base).shard('cart', 'named')).attributes, { tenant: 'acme' });
    region.send('named', 1);
    const [shard, epoch] = await started;
    assert.equal(shard, 'named');
    assert.ok(epoch >= 1, String(epoch));
    // An ask whose signal aborts rejects with its reason, not an AskError
    // (the application here answers nothing: it has no `answer`).
    const giveUp = new AbortController();
    const asked = region.ask('named', 2, { timeoutMs: PATIENCE_MS, signal: giveUp.signal });
    giveUp.abort(new Error('not needed any more'));
    await assert.rejects(asked, /not needed any more/);
    await region.shutdown();
  });

  it('declares its capacity when it registers, and the node keeps it', async () => {
    const journal = new Journal();
    const capacity = { load: 800, 'memory-mb': 4096 };
    const region = Region.start(config(node, 'ts-sized', { token: 'secret', capacity }), journal.app('ts-sized'));
    await region.waitRegistered({ signal: AbortSignal.timeout(PATIENCE_MS) });
    const response = await fetch(`${node.base}/v1/cluster/shards/cart`);
    const state = (await response.json()) as { regions: { address: string; capacity: Record<string, number> }[] };
    assert.deepEqual(state.regions.find((r) => r.address === 'ts-sized')?.capacity, capacity);
    await region.shutdown();
    // A capacity the node would refuse is refused before anything is sent, by name.
    assert.throws(
      () => Region.start(config(node, 'ts-bad', { capacity: { 'memory mb': 1 } }), journal.app('ts-bad')),
      /a capacity quantity's name is 1 to 64 characters/,
    );
    assert.throws(
      () => Region.start(config(node, 'ts-bad', { capacity: { load: -1 } }), journal.app('ts-bad')),
      /capacity quantity "load" is -1; an amount is a finite number, zero or more/,
    );
  });

  it('shuts down with a close frame even when the process exits right after', async () => {
    // A service's last lines: `await region.shutdown(); process.exit(0)`.
    const dir = mkdtempSync(join(tmpdir(), 'shardalloc-ts-exit-'));
    const script = join(dir, 'exit.mjs');
    writeFileSync(
      script,
      `import { Region } from ${JSON.stringify(new URL('../src/index.js', import.meta.url).href)};
const app = { startShard() {}, stopShard() {}, deliver() {} };
const region = Region.start({ node: process.argv[2], entityType: 'cart', address: 'ts-exiting', token: 'secret' }, app);
await region.waitRegistered();
await region.shutdown();
process.exit(0);
`,
    );
    const child = spawn(process.execPath, [script, node.base], { stdio: 'inherit' });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    assert.equal(code, 0);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    // The node logs a clean close at debug (unseen here); a connection lost
    // without a close frame at info.
    const lost = node.output().split('\n').filter((l) => l.includes('connection was lost') || l.includes('protocol violation'));
    assert.deepEqual(lost, []);
  });

  it('refuses a bad configuration by name', () => {
    assert.throws(() => Region.start(config(node, ''), new Journal().app('x')), /the address is empty/);
    assert.throws(() => Region.start(config(node, 'a', { node: 'ftp://x' }), new Journal().app('x')), /must start with http/);
    assert.throws(
      () => Region.start(config(node, 'a', { reconnectMinMs: 10, reconnectMaxMs: 5 }), new Journal().app('x')),
      /reconnect delays/,
    );
  });
});

void PATIENCE_MS;
