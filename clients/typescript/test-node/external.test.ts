// The external allocation feature request's test plan (the request this
// project grew from; docs/clients.md lists its API),
// its ten cases against the real node, through the API it asks for:
// `ExternalAllocationController`, and `externalAllocationStrategy` reading a
// `PlacementsView` kept in step with the node.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import {
  AdminClient,
  ExternalAllocationController,
  PlacementsView,
  Region,
  externalAllocationStrategy,
  type AllocationStrategy,
  type Update,
} from '../src/index.js';
import { FAST, Node, waitFor } from './node.js';

/** FAST, but rebalance rounds only every 10 minutes: only a manual rebalance moves a shard here. */
const SLOW_REBALANCE = FAST.map((arg, i) => (FAST[i - 1] === '--rebalance-interval-ms' ? '600000' : arg));

const leastShard: AllocationStrategy = {
  allocate: (_, candidates, current) =>
    [...candidates].sort((x, y) => (current.get(x)?.length ?? 0) - (current.get(y)?.length ?? 0))[0] as string,
  rebalance: () => [],
};

describe('the feature request test plan, against the real node', () => {
  let node: Node;
  let admin: AdminClient;
  let controller: ExternalAllocationController;
  let view: PlacementsView;
  const regions: Region<number>[] = [];
  const updates = new Map<string, Update[]>();

  const region = async (address: string): Promise<Region<number>> => {
    const started = Region.start<number>(
      { node: node.base, entityType: 'Counter', address, reconnectMinMs: 50, reconnectMaxMs: 500, homeRetryMs: 300 },
      { startShard: () => {}, stopShard: () => {}, deliver: () => {} },
    );
    updates.set(address, []);
    started.on('update', (update) => updates.get(address)?.push(update));
    regions.push(started);
    await started.waitRegistered();
    return started;
  };
  const home = async (shard: string): Promise<string | null> => (await admin.shard('Counter', shard)).home;

  before(async () => {
    node = await Node.start(['--type', 'Counter', ...SLOW_REBALANCE]);
    admin = new AdminClient(node.base);
    controller = new ExternalAllocationController(admin, 'Counter');
    view = await PlacementsView.open(admin, 'Counter', { reconnectMinMs: 50, reconnectMaxMs: 500 });
    await region('node-a');
    await region('node-b');
  });
  after(async () => {
    view.close();
    await Promise.all(regions.map((r) => r.shutdown()));
    node.stop();
  });

  it('1. an explicit placement is honoured', async () => {
    await controller.setPlacement(42, 'node-b');
    assert.equal(await regions[0]?.homeOf('42'), 'node-b');
    assert.equal((await admin.shard('Counter', '42')).reason, 'placement');
    await waitFor('the view', () => (view.get('42') === 'node-b' ? true : undefined));
    const strategy = externalAllocationStrategy(leastShard, () => view);
    assert.equal(strategy.allocate('42', ['node-a', 'node-b'], new Map()), 'node-b');
  });

  it('2. shards without a placement go by the fallback strategy', async () => {
    const got = await regions[0]?.homeOf('7');
    assert.ok(got === 'node-a' || got === 'node-b', String(got));
    assert.equal((await admin.shard('Counter', '7')).reason, 'strategy');
    const strategy = externalAllocationStrategy(leastShard, () => view);
    assert.equal(strategy.allocate('7', ['node-a', 'node-b'], new Map([['node-b', ['42']]])), 'node-a');
  });

  it('3. a removed placement leaves the shard to the fallback from the next rebalance', async () => {
    await controller.setPlacement(43, 'node-a');
    assert.equal(await regions[1]?.homeOf('43'), 'node-a');
    await controller.removePlacement(43);
    assert.equal((await admin.shard('Counter', '43')).placement, null);
    await waitFor('the view to drop it', () => (view.get('43') === undefined ? true : undefined));
    assert.equal(await home('43'), 'node-a', 'it stays where it is until a rebalance');
    assert.deepEqual(await controller.rebalanceNow([43]), []);
    await waitFor('the strategy to have placed it again', async () => {
      const state = await admin.shard('Counter', '43');
      return !state.moving && state.reason === 'strategy' ? true : undefined;
    });
  });

  it('4. a target that cannot take the shard: the fallback decides, with a warning', async () => {
    await controller.setPlacement(44, 'node-gone');
    const got = await regions[0]?.homeOf('44');
    assert.ok(got === 'node-a' || got === 'node-b', String(got));
    const state = await admin.shard('Counter', '44');
    assert.equal(state.placement, 'node-gone');
    assert.equal(state.reason, 'strategy');
    assert.match(node.output(), /placement of shard 44 on node-gone not honoured/);
    const warnings: string[] = [];
    await waitFor('the view', () => (view.get('44') === 'node-gone' ? true : undefined));
    const strategy = externalAllocationStrategy(leastShard, () => view, (shard, target) => warnings.push(`${shard}→${target}`));
    assert.equal(strategy.allocate('44', ['node-a', 'node-b'], new Map()), 'node-a');
    assert.deepEqual(warnings, ['44→node-gone']);
  });

  it('5. rebalanceNow hands the shard off and allocates it at once', async () => {
    await controller.setPlacement(45, 'node-a');
    assert.equal(await regions[1]?.homeOf('45'), 'node-a');
    const stream = await admin.events({ entityType: 'Counter' });
    await controller.setPlacement(45, 'node-b');
    assert.equal(await home('45'), 'node-a', 'no rebalance round runs here in 10 minutes');
    assert.deepEqual(await controller.rebalanceNow([45]), []);
    const seen: string[] = [];
    for await (const { event } of stream) {
      if (event.shardId === '45' && /^(hand-off|shard-homed)/.test(event.kind)) seen.push(`${event.kind}${event.region ? ` ${event.region}` : ''}`);
      if (event.kind === 'shard-homed' && event.shardId === '45') break;
    }
    stream.close();
    assert.equal(seen[0], 'hand-off-begun node-a', seen.join(', '));
    assert.equal(seen.at(-1), 'shard-homed node-b', seen.join(', '));
  });

  it('6. POST placements is parsed and persists', async () => {
    const placed = await node.request('POST', '/v1/cluster/shards/Counter/placements', { shardId: '46', target: 'node-a' });
    assert.equal(placed.status, 200, JSON.stringify(placed.body));
    assert.equal((await controller.getPlacements()).get('46'), 'node-a');
  });

  it('7. GET placements returns the current placements', async () => {
    const got = await node.request('GET', '/v1/cluster/shards/Counter/placements');
    const listed = (got.body as { placements: { shardId: string; target: string }[] }).placements;
    assert.deepEqual(new Map(listed.map((p) => [p.shardId, p.target])), new Map(await controller.getPlacements()));
    assert.equal((await controller.getPlacements()).get('42'), 'node-b');
  });

  it('8. DELETE a placement removes it', async () => {
    const removed = await node.request('DELETE', '/v1/cluster/shards/Counter/placements/46');
    assert.ok(removed.status >= 200 && removed.status < 300, String(removed.status));
    assert.equal((await controller.getPlacements()).has('46'), false);
  });

  it('9. a placement set reaches every region of the type at once', async () => {
    await controller.setPlacement(47, 'node-a');
    for (const address of ['node-a', 'node-b']) {
      await waitFor(`${address} to be told`, () =>
        updates.get(address)?.some((u) => u.type === 'PlacementChanged' && u.shard === '47' && u.target === 'node-a')
          ? true
          : undefined,
      );
    }
    await waitFor('the view', () => (view.get('47') === 'node-a' ? true : undefined));
  });

  it("10. a coordinator restart keeps the placements (durable: beyond the request's phase 1)", async () => {
    const before = await controller.getPlacements();
    node = await node.restart();
    admin = new AdminClient(node.base);
    controller = new ExternalAllocationController(admin, 'Counter');
    assert.deepEqual(await controller.getPlacements(), before);
    await waitFor('a region to register again and the shard to be at its placement', async () =>
      (await regions[0]?.homeOf('42').catch(() => undefined)) === 'node-b' ? true : undefined,
    );
  });
});
