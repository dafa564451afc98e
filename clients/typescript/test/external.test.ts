// externalAllocationStrategy against a fallback that records its calls,
// table by table.

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { externalAllocationStrategy, type AllocationStrategy } from '../src/external/strategy.js';
import {
  ExternalAllocationController,
  externalAllocationStrategy as fromIndex,
  leastShard,
  leastShardStrategy,
  type AdminClient,
} from '../src/index.js';

const current = new Map<string, readonly string[]>([
  ['a', ['1', '2', '42']],
  ['b', ['3']],
]);

function fallback(rebalance: string[] = []): AllocationStrategy & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    allocate: (shard, candidates) => {
      asked.push(shard);
      return candidates[0] as string;
    },
    rebalance: () => rebalance,
  };
}

it('allocates an explicitly placed shard to its target, others by the fallback', () => {
  const base = fallback();
  const state = { explicitPlacements: new Map([['42', 'b']]) };
  const strategy = externalAllocationStrategy(base, () => state, () => assert.fail('no warning expected'));
  assert.equal(strategy.allocate('42', ['a', 'b'], current), 'b');
  assert.equal(strategy.allocate('7', ['a', 'b'], current), 'a');
  assert.deepEqual(base.asked, ['7']);
});

it('falls back, and warns, when the target cannot take the shard', () => {
  const warnings: string[] = [];
  const base = fallback();
  const strategy = externalAllocationStrategy(
    base,
    () => ({ explicitPlacements: new Map([['42', 'gone']]) }),
    (shard, target, candidates) => warnings.push(`${shard}→${target} not in ${candidates.join()}`),
  );
  assert.equal(strategy.allocate('42', ['a', 'b'], current), 'a');
  assert.deepEqual(warnings, ['42→gone not in a,b']);
});

it('rebalances shards off their placement, and the fallback picks among the others', () => {
  const cases: [string, Map<string, string>, string[], Set<string>, string[]][] = [
    ['a shard away from its target moves', new Map([['42', 'b']]), [], new Set(), ['42']],
    ['one at its target stays', new Map([['3', 'b']]), [], new Set(), []],
    ['one already moving is left alone', new Map([['42', 'b']]), [], new Set(['42']), []],
    ['a target that is no region moves nothing', new Map([['42', 'gone']]), [], new Set(), []],
    ["the fallback's picks join, but not placed shards", new Map([['42', 'b']]), ['1', '42'], new Set(), ['42', '1']],
  ];
  for (const [what, placements, picks, moving, want] of cases) {
    const strategy = externalAllocationStrategy(fallback(picks), () => ({ explicitPlacements: placements }));
    assert.deepEqual(strategy.rebalance(current, moving), want, what);
  }
});

// The README's `externalAllocationStrategy(leastShard, …)`, with the
// exported least-shard fallback, table by table.

const regions = (table: Record<string, string[]>): Map<string, readonly string[]> => new Map(Object.entries(table));

it('leastShard allocates to the candidate with the fewest shards, the first on a tie', () => {
  const cases: [Record<string, string[]>, string[], string][] = [
    [{ a: ['1', '2'], b: ['3'] }, ['a', 'b'], 'b'],
    [{ a: ['1'], b: ['2'] }, ['a', 'b'], 'a'],
    [{ a: ['1'], b: ['2'] }, ['b', 'a'], 'b'],
    [{ a: ['1', '2'] }, ['a', 'c'], 'c'],
  ];
  for (const [current, candidates, expected] of cases) {
    assert.equal(leastShard.allocate('new', candidates, regions(current)), expected, JSON.stringify([current, candidates]));
  }
  assert.throws(() => leastShard.allocate('new', [], regions({})), /no candidate region for shard new/);
});

it('leastShard rebalances from the most to the least loaded while they differ by two, within its limit', () => {
  const cases: [Record<string, string[]>, string[], string[]][] = [
    [{ a: ['1', '2', '3', '4', '5', '6'], b: [] }, [], ['1', '2', '3']],
    [{ a: ['1', '2', '3', '4'], b: [] }, [], ['1', '2']],
    [{ a: ['1', '2'], b: ['3'] }, [], []],
    [{ a: ['1', '2', '3', '4', '5', '6'], b: [] }, ['1', '2'], ['3']],
    [{ a: ['1', '2', '3', '4', '5', '6'], b: [] }, ['x', 'y', 'z'], []],
    [{ a: ['1', '2', '3'] }, [], []],
  ];
  for (const [current, inProgress, expected] of cases) {
    assert.deepEqual(leastShard.rebalance(regions(current), new Set(inProgress)), expected, JSON.stringify([current, inProgress]));
  }
  assert.deepEqual(leastShardStrategy({ maxSimultaneous: 1 }).rebalance(regions({ a: ['1', '2', '3', '4'], b: [] }), new Set()), ['1']);
  assert.throws(() => leastShardStrategy({ maxSimultaneous: 0 }), /maxSimultaneous is 0; it must be a whole number of at least 1/);
});

it("the README's externalAllocationStrategy(leastShard, …) places explicitly, then by least shard", () => {
  const view = { explicitPlacements: new Map([['42', 'a']]) };
  const strategy = fromIndex(leastShard, () => view);
  const current = regions({ a: ['1', '2'], b: [] });
  assert.equal(strategy.allocate('42', ['a', 'b'], current), 'a');
  assert.equal(strategy.allocate('7', ['a', 'b'], current), 'b');
});

it('getPlacements finds a placement set with a numeric shard id by that number', async () => {
  const written: [string, string][] = [];
  const admin = {
    setPlacement: async (_type: string, shard: string, target: string) => {
      written.push([shard, target]);
    },
    placements: async () => ({ placements: written.map(([shardId, target]) => ({ shardId, target })) }),
  } as unknown as AdminClient;
  const controller = new ExternalAllocationController(admin, 'Counter');
  await controller.setPlacement(42, 'node-b');
  const placements = await controller.getPlacements();
  assert.equal(placements.get(42), 'node-b');
  assert.equal(placements.get('42'), 'node-b');
  assert.equal(placements.has(42), true);
  assert.equal(placements.get(43), undefined);
  assert.deepEqual([...placements.keys()], ['42']);
});
