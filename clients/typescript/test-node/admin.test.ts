// The admin client and the placements view against the real node:
// placements written, paged, removed; rebalance, regions, drains,
// strategies, a shard's state; errors carrying the node's code; the event
// stream; a view that follows sets and removals and survives the node's
// restart (a new term: `missed`, then a fresh listing).

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { AdminClient, AdminError, PlacementsView, Region } from '../src/index.js';
import { FAST, Node, waitFor } from './node.js';

const rejectsWith = (code: string, status: number) => (error: unknown) => {
  assert.ok(error instanceof AdminError, String(error));
  assert.equal(error.code, code, error.message);
  assert.equal(error.status, status, error.message);
  return true;
};

describe('the admin client with the real node', () => {
  it('writes, pages and removes placements, and reads the rest', async () => {
    const node = await Node.start(['--type', 'cart', '--admin-token', 'adm', ...FAST]);
    try {
      const admin = new AdminClient(node.base, { token: 'adm' });
      const written = await admin.setPlacements(
        'cart',
        Array.from({ length: 25 }, (_, i) => ({ shardId: `s/${String(i).padStart(2, '0')}`, target: 'r1' })),
      );
      assert.equal(written.total, 25);
      assert.equal((await admin.setPlacement('cart', 'one two', 'r2')).total, 26, 'a shard id with a space and a slash');
      const page = await admin.placementsPage('cart', { limit: 10 });
      assert.equal(page.placements.length, 10);
      assert.ok(page.next, 'a first page of 10 has a next');
      const all = await admin.placements('cart');
      assert.equal(all.placements.length, 26);
      assert.equal(all.next, null);
      assert.equal(await admin.removePlacement('cart', 's/03'), true);
      assert.equal(await admin.removePlacement('cart', 's/03'), false, 'a second removal finds none');
      assert.equal((await admin.placements('cart')).placements.length, 25);

      const state = await admin.shard('cart', 'one two');
      assert.equal(state.placement, 'r2');
      assert.deepEqual(state.attributes, {});
      const attributed = await admin.writeAttributes('cart', { 'one two': { tenant: 'acme', tier: 'gold' }, 's/01': {} });
      assert.deepEqual(attributed.changed, ['one two']);
      assert.deepEqual((await admin.shard('cart', 'one two')).attributes, { tenant: 'acme', tier: 'gold' });
      assert.deepEqual((await admin.setShardAttributes('cart', 'one two', {})).changed, ['one two']);
      await assert.rejects(admin.setShardAttributes('cart', 's/01', { 'a b': 'c' }), rejectsWith('invalid-attributes', 400));
      const rebalanced = await admin.rebalance('cart', ['s/01'], { immediate: true });
      assert.equal(rebalanced.accepted.length + rebalanced.rejected.length, 1, JSON.stringify(rebalanced));
      const builtins = (await admin.strategies()).strategies;
      assert.deepEqual(builtins.find((s) => s.name === 'least-shard')?.activeIn, ['cart'], JSON.stringify(builtins));
      assert.equal((await admin.strategy('cart')).active.name, 'least-shard');

      await assert.rejects(admin.placements('nope'), rejectsWith('unknown-type', 404));
      await assert.rejects(admin.setPlacement('cart', '', 'r1'), (error: unknown) => error instanceof AdminError && error.status === 400);
      await assert.rejects(new AdminClient(node.base, { token: 'wrong' }).placements('cart'), (error: unknown) => error instanceof AdminError && error.status === 401);
      await assert.rejects(new AdminClient('http://127.0.0.1:9').regions(), /request to http:\/\/127\.0\.0\.1:9\/v1\/cluster\/regions failed/);
      assert.throws(() => new AdminClient('ftp://x'), /scheme ftp: is not http or https/);
      // A signal gives a call up: already aborted, or while it waits.
      const gone = new AbortController();
      gone.abort(new Error('the operator moved on'));
      await assert.rejects(admin.regions({ signal: gone.signal }), /the operator moved on/);
      assert.equal((await admin.shard('cart', 'one two', { signal: AbortSignal.timeout(30_000) })).placement, 'r2');
      const streamed = new AbortController();
      const stream = await admin.events({ entityType: 'cart', signal: streamed.signal });
      const reading = (async () => {
        let seen = 0;
        for await (const _ of stream) seen += 1;
        return seen;
      })();
      streamed.abort();
      assert.equal(typeof (await reading), 'number', 'an aborted stream ends its loop without an error');

      // A region to drain.
      const region = Region.start(
        { node: node.base, entityType: 'cart', address: 'ts-drained', reconnectMinMs: 50, reconnectMaxMs: 500 },
        { startShard: () => {}, stopShard: () => {}, deliver: () => {} },
      );
      await region.waitRegistered();
      assert.ok((await admin.regions()).regions.some((r) => r.address === 'ts-drained'));
      await admin.drain('ts-drained');
      const drain = await admin.drainState('ts-drained');
      assert.equal(drain.draining, true);
      assert.ok(drain.startedAtMs !== null);
      await admin.undrain('ts-drained');
      assert.equal((await admin.drainState('ts-drained')).draining, false);
      await region.shutdown();
    } finally {
      node.stop();
    }
  });

  it('close() during for await ends the loop without an error', async () => {
    const node = await Node.start(['--type', 'cart', ...FAST]);
    try {
      const admin = new AdminClient(node.base);
      const stream = await admin.events({ entityType: 'cart' });
      let seen = 0;
      const loop = (async () => {
        for await (const { event } of stream) {
          if (event.kind === 'placement-set') {
            seen += 1;
          }
        }
        return 'ended';
      })();
      await admin.setPlacement('cart', 'first', 'r1');
      await waitFor('the event', () => (seen > 0 ? true : undefined));
      // The loop waits for the next event when the stream is closed.
      stream.close();
      assert.equal(await loop, 'ended');
    } finally {
      node.stop();
    }
  });

  it('streams decisions, and a placements view follows them across a restart', async () => {
    let node = await Node.start(['--type', 'cart', ...FAST]);
    try {
      const admin = new AdminClient(node.base);
      await admin.setPlacement('cart', 'before', 'r1');
      const stream = await admin.events({ entityType: 'cart' });
      await admin.setPlacement('cart', 'streamed', 'r2');
      for await (const { id, event } of stream) {
        if (event.kind === 'placement-set' && event.shardId === 'streamed') {
          assert.match(id ?? '', /^\d+-\d+$/);
          assert.equal(event.target, 'r2');
          break;
        }
      }
      stream.close();

      const view = await PlacementsView.open(admin, 'cart', { reconnectMinMs: 50, reconnectMaxMs: 500 });
      try {
        assert.equal(view.get('before'), 'r1', 'listed when it opened');
        assert.equal(view.size, 2);
        await admin.setPlacement('cart', 'later', 'r3');
        await waitFor('the view to see the new placement', () => (view.get('later') === 'r3' ? true : undefined));
        await admin.removePlacement('cart', 'before');
        await waitFor('the view to see the removal', () => (view.get('before') === undefined ? true : undefined));

        // The node restarts (a new term): the view reconnects, is told it
        // missed events, and reads every placement again — including one
        // written while it was away.
        const synced = new Promise<number>((resolve) => view.once('synced', resolve));
        node = await node.restart();
        await new AdminClient(node.base).setPlacement('cart', 'while-away', 'r4');
        await synced;
        await waitFor('the view to hold the placement written after the restart', () =>
          view.get('while-away') === 'r4' ? true : undefined,
        );
        assert.deepEqual(
          [...view.entries()].sort(),
          [['later', 'r3'], ['streamed', 'r2'], ['while-away', 'r4']],
        );
      } finally {
        view.close();
      }
      await assert.rejects(PlacementsView.open(admin, 'nope'), rejectsWith('unknown-type', 404));
      // A signal gives the opening up, and closes an open view.
      await assert.rejects(PlacementsView.open(admin, 'cart', { signal: AbortSignal.abort(new Error('no view')) }), /no view/);
      const closing = new AbortController();
      const watched = await PlacementsView.open(admin, 'cart', { signal: closing.signal });
      const disconnected = new Promise((resolve) => watched.once('disconnected', resolve));
      closing.abort();
      await admin.setPlacement('cart', 'after-close', 'r1');
      await Promise.race([disconnected, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      assert.equal(watched.get('after-close'), undefined, 'a closed view follows nothing');
    } finally {
      node.stop();
    }
  });
});
