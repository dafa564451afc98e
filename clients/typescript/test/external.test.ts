// externalAllocationStrategy against a fallback that records its calls,
// table by table.

import assert from 'node:assert/strict';
import { it } from 'node:test';

import { externalAllocationStrategy, type AllocationStrategy } from '../src/external/strategy.js';

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
