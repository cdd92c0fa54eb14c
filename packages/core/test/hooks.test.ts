// The hook answers' contract (core/hooks.ts): what admits, refuses, or is a failure of the backend.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allows, parseConnectAnswer, parsePublishAnswer, parseSubscribeAnswer } from '../src/index.ts';

const NOW = 1_764_700_000_000;

test('a connect answer admits with the defaults, the rights and an expiry ahead; issuedAt is now', () => {
  const r = parseConnectAnswer({ user: 'u1' }, NOW);
  assert.ok(r.ok && r.value.allow);
  assert.deepEqual([r.value.identity.tenant, r.value.identity.expiresAt, r.value.identity.issuedAt, allows(r.value.identity.join, 'x')],
    ['default', Infinity, NOW, false]);
  const full = parseConnectAnswer({ user: 'u1', tenant: 'acme', topics: ['room:*'], publish: ['room:1'], expiresAt: NOW + 1 }, NOW);
  assert.ok(full.ok && full.value.allow);
  assert.equal(allows(full.value.identity.join, 'room:9'), true);
  assert.equal(allows(full.value.identity.publish, 'room:9'), false);
  assert.equal(full.value.identity.expiresAt, NOW + 1);
});

test('a refusal carries 401 or 403 and an optional message', () => {
  assert.deepEqual(parseConnectAnswer({ refuse: { status: 403, message: 'no' } }, NOW), { ok: true, value: { allow: false, status: 403, message: 'no' } });
  assert.deepEqual(parseConnectAnswer({ refuse: { status: 401 } }, NOW), { ok: true, value: { allow: false, status: 401, message: undefined } });
});

test('every connect answer off the contract is a failure, with why', () => {
  const bad: unknown[] = [null, 'u1', [], {}, { user: '' }, { user: 'x'.repeat(257) }, { user: 'a\nb' }, { user: 'a', tenant: 'a/b' },
    { user: 'a', topics: 'room:*' }, { user: 'a', topics: Array.from({ length: 1001 }, (_, i) => `t${i}`) }, { user: 'a', expiresAt: NOW },
    { user: 'a', expiresAt: '1' }, { user: 'a', expiresAt: NOW + 0.5 }, { user: 'a', extra: 1 }, { refuse: { status: 500 } },
    { refuse: { status: 401, message: 'x'.repeat(201) } }, { refuse: { status: 401 }, user: 'a' }, { refuse: { status: 401, code: 1 } }, { refuse: true }];
  for (const b of bad) {
    const r = parseConnectAnswer(b, NOW);
    assert.equal(r.ok, false, JSON.stringify(b)?.slice(0, 80));
    assert.ok(!r.ok && r.why.length > 0);
  }
});

test('subscribe answers: allow, cacheMs in range, a message without control characters', () => {
  assert.deepEqual(parseSubscribeAnswer({ allow: true }), { ok: true, value: { allow: true, cacheMs: 0, message: undefined } });
  assert.deepEqual(parseSubscribeAnswer({ allow: false, cacheMs: 5000, message: 'm' }), { ok: true, value: { allow: false, cacheMs: 5000, message: 'm' } });
  for (const b of [{}, { allow: 'yes' }, { allow: true, cacheMs: -1 }, { allow: true, cacheMs: 86_400_001 }, { allow: true, cacheMs: 1.5 },
    { allow: false, message: 'a\u0000' }, { allow: true, why: 1 }, []]) {
    assert.equal(parseSubscribeAnswer(b).ok, false, JSON.stringify(b));
  }
});

test('publish answers: accept, accept with new data (re-serialized, bounded), refuse with a message', () => {
  assert.deepEqual(parsePublishAnswer({ allow: true }, 100), { ok: true, value: { allow: true, dataJson: undefined } });
  assert.deepEqual(parsePublishAnswer({ allow: true, data: { a: [1, 'x'] } }, 100), { ok: true, value: { allow: true, dataJson: '{"a":[1,"x"]}' } });
  assert.deepEqual(parsePublishAnswer({ allow: true, data: null }, 100), { ok: true, value: { allow: true, dataJson: 'null' } });
  assert.deepEqual(parsePublishAnswer({ allow: false, message: 'spam' }, 100), { ok: true, value: { allow: false, message: 'spam' } });
  for (const b of [{ allow: true, data: 'x'.repeat(200) }, { allow: false, data: 1 }, { allow: true, message: 'm' }, { data: 1 }, { allow: 1 }]) {
    assert.equal(parsePublishAnswer(b, 100).ok, false, JSON.stringify(b).slice(0, 60));
  }
});
