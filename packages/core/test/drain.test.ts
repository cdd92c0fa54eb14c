import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { drainBudget, type DrainPace, shareBudget } from '../src/drain.ts';

describe('drainBudget', () => {
  test('closes one at once, then rate per second, carrying fractions', () => {
    const p: DrainPace = { carry: 0, lastAt: -1 };
    assert.equal(drainBudget(p, 1000, 500), 1);
    assert.equal(drainBudget(p, 1100, 500), 50);
    assert.equal(drainBudget(p, 1101, 500), 0);
    assert.equal(drainBudget(p, 1102, 500), 1);
    assert.equal(drainBudget(p, 1102, 500), 0, 'no time, no budget');
  });

  test('property: over any ticks, the total is 1 + rate x elapsed, rounded down', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 5000 }), fc.array(fc.integer({ min: 0, max: 500 }), { maxLength: 60 }), (rate, gaps) => {
      const p: DrainPace = { carry: 0, lastAt: -1 };
      let now = 0;
      let total = drainBudget(p, now, rate);
      for (const g of gaps) {
        now += g;
        total += drainBudget(p, now, rate);
      }
      const exact = 1 + (rate * now) / 1000;
      assert.ok(total <= exact + 1e-6 && total > exact - 1 - 1e-6, `${total} vs ${exact}`);
    }));
  });
});

describe('shareBudget', () => {
  test('in proportion to what each shard holds, never more than it holds', () => {
    assert.deepEqual(shareBudget(10, [30, 10]), [8, 2]);
    assert.deepEqual(shareBudget(100, [3, 0, 5]), [3, 0, 5]);
    assert.deepEqual(shareBudget(0, [3, 4]), [0, 0]);
    assert.deepEqual(shareBudget(1, [1, 1]).reduce((a, b) => a + b), 1);
  });

  test('property: sums to min(budget, total), each within what it holds', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: 1000 }), fc.array(fc.integer({ min: 0, max: 500 }), { minLength: 1, maxLength: 16 }), (budget, held) => {
      const out = shareBudget(budget, held);
      const total = held.reduce((a, b) => a + b, 0);
      assert.equal(out.reduce((a, b) => a + b, 0), Math.min(budget, total));
      out.forEach((n, i) => assert.ok(n >= 0 && n <= held[i]!));
    }));
  });
});
