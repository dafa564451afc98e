// The region client on an HA cluster: three nodes on one etcd. The region
// is given every node's URL; a follower redirects it to the leader. When
// the leader is killed, the region follows the new leader's redirect,
// registers again and goes on — within its lease: no fence, its shard
// keeps running, and homes are answered.

import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { AdminClient, PlacementsView, Region, type Update } from '../src/index.js';
import { Etcd, freePort } from './etcd.js';
import { Node, waitFor } from './node.js';

/** Region timings of nodes on etcd (as the node's own HA tests): a 10 s lease outlasts a failover of a few seconds. */
const HA_TIMINGS = [
  '--heartbeat-interval-ms', '200',
  '--lease-ms', '10000',
  '--unreachable-after-ms', '6000',
  '--remove-after-ms', '6000',
  '--rebalance-interval-ms', '1000',
];

describe('the region client on an HA cluster', () => {
  let etcd: Etcd;
  const nodes: Node[] = [];
  const urls: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'shardalloc-ts-ha-'));

  before(async () => {
    etcd = await Etcd.start();
    const secret = join(dir, 'secret');
    writeFileSync(secret, 'the test cluster secret, 32 bytes or more\n', { mode: 0o600 });
    for (let i = 0; i < 3; i++) {
      const port = await freePort();
      urls.push(`http://127.0.0.1:${port}`);
      nodes.push(
        await Node.startOn(`127.0.0.1:${port}`, [
          '--etcd', etcd.url, '--advertise', `http://127.0.0.1:${port}`, '--node-name', `n${i}`,
          '--leader-lease-s', '3', '--cluster-secret-file', secret, '--type', 'cart', ...HA_TIMINGS,
        ]),
      );
    }
  });
  after(() => {
    for (const node of nodes) node.stop();
    etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The index of the node every running node in `alive` names as leader (not `gone`). */
  const leader = (alive: number[], gone?: number): Promise<number> =>
    waitFor(
      'one leader',
      async () => {
        const names = new Set<string>();
        for (const i of alive) {
          try {
            const answer = (await (await fetch(`${urls[i]}/v1/cluster/leader`)).json()) as { leader?: { name?: string } };
            if (answer.leader?.name) names.add(answer.leader.name);
            else return undefined;
          } catch {
            return undefined;
          }
        }
        const [name] = [...names];
        const index = name === undefined ? undefined : Number(name.slice(1));
        return names.size === 1 && index !== gone ? index : undefined;
      },
      60_000,
    );

  it('follows the redirect to the leader, and the new one after a kill, within its lease', async () => {
    const first = await leader([0, 1, 2]);
    const follower = [0, 1, 2].find((i) => i !== first) as number;
    const updates: Update[] = [];
    const started: string[] = [];
    const region = Region.start<number>(
      // A follower first: it redirects.
      { node: [urls[follower] as string, ...urls.filter((_, i) => i !== follower)], entityType: 'cart', address: 'ts-ha',
        reconnectMinMs: 50, reconnectMaxMs: 500, homeRetryMs: 300 },
      { startShard: (shard) => void started.push(shard), stopShard: () => {}, deliver: () => {} },
    );
    region.on('update', (update) => updates.push(update));
    try {
      await region.waitRegistered();
      assert.equal(await region.homeOf('before-kill'), 'ts-ha');
      await waitFor('the shard to run', () => (region.runningShards().includes('before-kill') ? true : undefined));

      nodes[first]?.kill();
      const alive = [0, 1, 2].filter((i) => i !== first);
      const next = await leader(alive, first);
      const home = await waitFor(
        'a home answered by the new leader',
        () => Promise.race([region.homeOf('after-kill'), new Promise<undefined>((r) => setTimeout(() => r(undefined), 2_000))]),
        60_000,
      );
      assert.equal(home, 'ts-ha');
      assert.ok(
        updates.filter((u) => u.type === 'Registered').length >= 2,
        `registered once more with the new leader: ${JSON.stringify(updates.map((u) => u.type))}`,
      );
      assert.ok(!updates.some((u) => u.type === 'Fenced'), 'the failover cost the region its lease');
      assert.ok(region.runningShards().includes('before-kill'), 'the shard stopped across the failover');
      const state = (await (await fetch(`${urls[next]}/v1/cluster/shards/cart/shards/after-kill`)).json()) as { home: string };
      assert.equal(state.home, 'ts-ha');
    } finally {
      await region.shutdown();
    }
  });

  it("keeps a placements view, opened on a follower, in step across the leader's kill", async () => {
    const alive = [0, 1, 2].filter((i) => nodes[i]?.running());
    const current = await leader(alive);
    const follower = alive.find((i) => i !== current) as number;
    const admin = new AdminClient(urls[follower] as string);
    await admin.setPlacement('cart', 'view-before', 'somewhere');
    const view = await PlacementsView.open(admin, 'cart', { reconnectMinMs: 50, reconnectMaxMs: 500 });
    try {
      assert.equal(view.get('view-before'), 'somewhere');
      nodes[current]?.kill();
      await leader(alive.filter((i) => i !== current), current);
      // Written through the survivor, after the failover: the view, whose
      // stream the killed leader ended, reconnects and sees it.
      await waitFor('a placement written after the failover', async () => {
        try {
          await admin.setPlacement('cart', 'view-after', 'elsewhere');
          return true;
        } catch {
          return undefined;
        }
      }, 60_000);
      await waitFor('the view to see it', () => (view.get('view-after') === 'elsewhere' ? true : undefined), 60_000);
      assert.equal(view.get('view-before'), 'somewhere', 'a placement from before the failover was lost');
    } finally {
      view.close();
    }
  });
});
