import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { TOPIC_PATTERN } from '@sluice/protocol';
import {
  hashTagOf, idempotencyRedisKey, ipWindowKey, presenceChannel, presenceKey, tagSafe,
  tenantConnectWindowKey, tenantWindowKey, topicChannel, topicKey, topicOfChannel, topicRedisKeys, userKey,
  userSocketsKey, userWindowKey, windowRedisKey, WINDOW_PREFIX,
} from '../src/keys.ts';
import { decodeRevocation, encodeRevocation, type Revocation } from '../src/control.ts';

/** Tenants and topics as the protocol admits them. */
const name = fc.stringMatching(/^[A-Za-z0-9:_.-]{1,12}$/);
/** User ids, token ids, idempotency keys, addresses: free text, braces and percent signs included. */
const free = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('', '{', '}', '%', '{}', '%7B', 'a}b{c%', '/', '@u'));

describe('keys: examples', () => {
  test('the shapes other code and stored data rely on', () => {
    assert.equal(topicKey('acme', 'room:1'), 'acme/room:1');
    assert.equal(tenantWindowKey('acme'), 't:acme');
    assert.equal(ipWindowKey('10.0.0.1'), 'ip:10.0.0.1');
    assert.deepEqual(topicRedisKeys('acme/room:1'), { stream: 'sluice:h:{acme/room:1}', floor: 'sluice:f:{acme/room:1}' });
    assert.equal(topicChannel('acme/room:1'), 'sluice:c:{acme/room:1}');
    assert.equal(idempotencyRedisKey(true, 'acme', 'acme/room:1', 'k}1'), 'sluice:i:{acme/room:1}:k}1');
    assert.equal(idempotencyRedisKey(false, 'acme', 'acme/room:1', 'k1'), 'sluice:i:4:acme:k1');
    assert.equal(windowRedisKey(WINDOW_PREFIX, 't:acme', 42), 'sluice:win:{t:acme}:42');
    assert.equal(windowRedisKey(WINDOW_PREFIX, 'a}b{c%', 42), 'sluice:win:{a%7Db%7Bc%25}:42');
    assert.equal(windowRedisKey(WINDOW_PREFIX, '', 1), 'sluice:win:{%}:1');
    assert.equal(userSocketsKey('acme', 'u{1}'), 'sluice:us:{acme/@u%7B1%7D}');
  });

  test('hashTagOf follows Redis Cluster: first { to the next }, an empty tag hashes the whole key', () => {
    assert.equal(hashTagOf('a{b}c'), 'b');
    assert.equal(hashTagOf('a{}c{d}'), 'a{}c{d}');
    assert.equal(hashTagOf('a{b{c}d}'), 'b{c');
    assert.equal(hashTagOf('plain'), 'plain');
    assert.equal(hashTagOf('a{open'), 'a{open');
  });

  test('topicOfChannel inverts topicChannel and refuses other channels', () => {
    assert.equal(topicOfChannel(topicChannel('acme/room:1')), 'acme/room:1');
    assert.equal(topicOfChannel('sluice:uc:{acme/@u}'), undefined);
    assert.equal(topicOfChannel('other'), undefined);
  });
});

describe('keys: properties', () => {
  test('topic keys of different (tenant, topic) pairs never collide, and never equal a user key', () => {
    fc.assert(fc.property(name, name, name, name, (t1, p1, t2, p2) => {
      assert.equal(topicKey(t1, p1) === topicKey(t2, p2), t1 === t2 && p1 === p2);
    }));
    fc.assert(fc.property(name, name, name, free, (t1, p1, t2, u) => {
      assert.ok(TOPIC_PATTERN.test(p1));
      assert.notEqual(topicKey(t1, p1), userKey(t2, u));
    }));
  });

  test('window keys of every kind never collide across kinds, tenants, users or addresses', () => {
    type Made = { kind: string; args: string[]; key: string };
    const made = fc.oneof(
      name.map((t): Made => ({ kind: 't', args: [t], key: tenantWindowKey(t) })),
      name.map((t): Made => ({ kind: 'tc', args: [t], key: tenantConnectWindowKey(t) })),
      free.map((ip): Made => ({ kind: 'ip', args: [ip], key: ipWindowKey(ip) })),
      fc.tuple(name, free).map(([t, u]): Made => ({ kind: 'u', args: [t, u], key: userWindowKey(t, u) })),
    );
    fc.assert(fc.property(made, made, (a, b) => {
      const same = a.kind === b.kind && a.args.join('\u0000') === b.args.join('\u0000') && a.args.length === b.args.length;
      assert.equal(a.key === b.key, same);
    }));
  });

  test('idempotency records: different (tenant, topic, key) never share a record where the key space says they must not', () => {
    fc.assert(fc.property(fc.boolean(), name, name, free, name, name, free, (cluster, t1, p1, k1, t2, p2, k2) => {
      const a = idempotencyRedisKey(cluster, t1, topicKey(t1, p1), k1);
      const b = idempotencyRedisKey(cluster, t2, topicKey(t2, p2), k2);
      // Cluster: per (tenant, topic, key). Standalone: per (tenant, key).
      const same = cluster ? t1 === t2 && p1 === p2 && k1 === k2 : t1 === t2 && k1 === k2;
      assert.equal(a === b, same);
    }));
  });

  test("a topic's stream, floor, channel, Cluster idempotency records and presence share one hash tag: one Cluster slot", () => {
    fc.assert(fc.property(name, name, free, (t, p, k) => {
      const topic = topicKey(t, p);
      const { stream, floor } = topicRedisKeys(topic);
      const tags = [stream, floor, topicChannel(topic), idempotencyRedisKey(true, t, topic, k), presenceKey(topic, '0a1b2c3d'), presenceChannel(topic)]
        .map(hashTagOf);
      for (const tag of tags) assert.equal(tag, topic);
    }));
  });

  test("a window's buckets share one tag, and the tag is the key: no key moves another's tag", () => {
    fc.assert(fc.property(free, free, fc.integer({ min: 0, max: 1e9 }), (k1, k2, b) => {
      const t1 = hashTagOf(windowRedisKey(WINDOW_PREFIX, k1, b));
      assert.equal(t1, hashTagOf(windowRedisKey(WINDOW_PREFIX, k1, b - 1)));
      assert.equal(t1, tagSafe(k1));
      assert.equal(t1 === hashTagOf(windowRedisKey(WINDOW_PREFIX, k2, b)), k1 === k2);
    }));
  });

  test("different users' socket counts never share a tag", () => {
    fc.assert(fc.property(name, free, name, free, (t1, u1, t2, u2) => {
      const tag = hashTagOf(userSocketsKey(t1, u1));
      assert.equal(tag === hashTagOf(userSocketsKey(t2, u2)), t1 === t2 && u1 === u2);
    }));
  });

  test('revocation members of different (tenant, user) or (tenant, token) never collide, and decode back', () => {
    fc.assert(fc.property(name, free, name, free, fc.boolean(), (t1, s1, t2, s2, byUser) => {
      const a: Revocation = byUser ? { kind: 'user', tenant: t1, user: s1, at: 5, expiresAt: 9 } : { kind: 'token', tenant: t1, jti: s1, expiresAt: 9 };
      const b: Revocation = byUser ? { kind: 'user', tenant: t2, user: s2, at: 5, expiresAt: 9 } : { kind: 'token', tenant: t2, jti: s2, expiresAt: 9 };
      assert.equal(encodeRevocation(a) === encodeRevocation(b), t1 === t2 && s1 === s2);
      assert.deepEqual(decodeRevocation(encodeRevocation(a), 9), a);
    }));
  });
});
