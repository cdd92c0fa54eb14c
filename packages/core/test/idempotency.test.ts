import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MemoryIdempotency } from '../src/idempotency.ts';
import { idempotencyScope } from '../src/keys.ts';

const T0 = 1_732_900_000_000;

describe('MemoryIdempotency', () => {
  test('an unknown key has no id', () => {
    assert.equal(new MemoryIdempotency(1000).get('k', T0), undefined);
  });

  test('remembers the id until just before ttl, and forgets it at exactly ttl', () => {
    const m = new MemoryIdempotency(300_000);
    m.set('k', '1732900000000-0', T0);
    assert.equal(m.get('k', T0), '1732900000000-0');
    assert.equal(m.get('k', T0 + 299_999), '1732900000000-0');
    assert.equal(m.get('k', T0 + 300_000), undefined);
    assert.equal(m.size, 0, 'an expired entry found by get is dropped');
  });

  test('setting a key again replaces its id and restarts its ttl', () => {
    const m = new MemoryIdempotency(100);
    m.set('k', 'a', T0);
    m.set('k', 'b', T0 + 50);
    assert.equal(m.size, 1);
    assert.equal(m.get('k', T0 + 149), 'b');
    assert.equal(m.get('k', T0 + 150), undefined);
  });

  test('sweep removes only expired entries', () => {
    const m = new MemoryIdempotency(100);
    m.set('a', '1', T0);
    m.set('b', '2', T0 + 10);
    m.set('c', '3', T0 + 20);
    m.sweep(T0 + 99);
    assert.equal(m.size, 3);
    m.sweep(T0 + 109);
    assert.equal(m.size, 2);
    assert.equal(m.get('b', T0 + 109), '2');
    assert.equal(m.get('c', T0 + 109), '3');
    m.sweep(T0 + 120);
    assert.equal(m.size, 0);
  });

  test('a key set again moves behind the others in expiry order, so sweep keeps it', () => {
    const m = new MemoryIdempotency(100);
    m.set('a', '1', T0);
    m.set('b', '2', T0 + 10);
    m.set('a', '3', T0 + 20);
    m.sweep(T0 + 115);
    assert.equal(m.size, 1);
    assert.equal(m.get('a', T0 + 115), '3');
  });

  test('property: agrees with a model map of (id, time set) under a clock that never goes back', () => {
    const key = fc.constantFrom('k1', 'k2', 'k3', 'k4');
    const op = fc.oneof(
      fc.record({ kind: fc.constant('set' as const), key, dt: fc.integer({ min: 0, max: 60 }) }),
      fc.record({ kind: fc.constant('get' as const), key, dt: fc.integer({ min: 0, max: 60 }) }),
      fc.record({ kind: fc.constant('sweep' as const), dt: fc.integer({ min: 0, max: 60 }) }),
    );
    fc.assert(fc.property(fc.integer({ min: 1, max: 100 }), fc.array(op, { maxLength: 100 }), (ttl, ops) => {
      const m = new MemoryIdempotency(ttl);
      const model = new Map<string, { id: string; at: number }>();
      const live = (now: number): string[] => [...model].filter(([, e]) => now - e.at < ttl).map(([k]) => k);
      let now = T0;
      let n = 0;
      for (const o of ops) {
        now += o.dt;
        if (o.kind === 'set') {
          const id = `${now}-${n++}`;
          m.set(o.key, id, now);
          model.set(o.key, { id, at: now });
        } else if (o.kind === 'get') {
          const e = model.get(o.key);
          assert.equal(m.get(o.key, now), e !== undefined && now - e.at < ttl ? e.id : undefined);
        } else {
          m.sweep(now);
          assert.equal(m.size, live(now).length, 'after a sweep exactly the live entries remain');
          for (const k of live(now)) assert.equal(m.get(k, now), model.get(k)!.id, 'sweep kept every live entry');
        }
        assert.ok(m.size >= live(now).length, 'no live entry is ever lost');
      }
    }));
  });
});

describe('idempotencyScope', () => {
  test('tenants are separated: the same key in two tenants is two entries', () => {
    const m = new MemoryIdempotency(1000);
    m.set(idempotencyScope('acme', 'c1-0001'), '1-0', T0);
    assert.equal(m.get(idempotencyScope('globex', 'c1-0001'), T0), undefined);
    assert.equal(m.get(idempotencyScope('acme', 'c1-0001'), T0), '1-0');
    m.set(idempotencyScope('globex', 'c1-0001'), '2-0', T0);
    assert.equal(m.get(idempotencyScope('acme', 'c1-0001'), T0), '1-0');
    assert.equal(m.get(idempotencyScope('globex', 'c1-0001'), T0), '2-0');
  });

  test('the tenant boundary cannot be forged by a key: a tenant that is a prefix of another stays apart', () => {
    assert.notEqual(idempotencyScope('acme', 'x:k'), idempotencyScope('acme:x', 'k'));
    assert.notEqual(idempotencyScope('a', 'bc'), idempotencyScope('ab', 'c'));
    assert.notEqual(idempotencyScope('a', '/b'), idempotencyScope('a/', 'b'));
  });

  test('property: distinct (tenant, key) pairs never share a scope, for tenants as the gateway validates them', () => {
    // Tenants match the topic pattern (admin.ts validates them so); keys are any client string, NUL included.
    const tenant = fc.string({ unit: fc.constantFrom(...'abcAZ09:_.-'), minLength: 1, maxLength: 6 });
    const key = fc.string({ unit: fc.constantFrom('a', 'b', ':', '/', '\u0000', 'é', '\ud83d'), maxLength: 6 });
    fc.assert(fc.property(tenant, key, tenant, key, (t1, k1, t2, k2) => {
      assert.equal(idempotencyScope(t1, k1) === idempotencyScope(t2, k2), t1 === t2 && k1 === k2);
    }), { numRuns: 1000 });
  });
});
