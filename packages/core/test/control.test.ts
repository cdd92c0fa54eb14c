import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { actionOf, decodeRevocation, encodeRevocation, Revocations, type TokenStamp } from '../src/control.ts';

const token = (p: Partial<TokenStamp> = {}): TokenStamp => ({ tenant: 'default', user: 'u1', issuedAt: 1_000_000, jti: undefined, ...p });

describe('Revocations', () => {
  test('a user revocation holds the tokens issued at or before it, to the second, and no later one', () => {
    const r = new Revocations();
    const at = 2_000_500; // 2000.5 s
    assert.equal(r.add({ kind: 'user', tenant: 'default', user: 'u1', at, expiresAt: 10_000_000 }, at), true);
    assert.equal(r.revoked(token({ issuedAt: 1_999_000 }), at), true, 'issued before');
    assert.equal(r.revoked(token({ issuedAt: 2_000_000 }), at), true, 'issued in the same second (iat is whole seconds)');
    assert.equal(r.revoked(token({ issuedAt: 2_001_000 }), at), false, 'issued the next second');
    assert.equal(r.revoked(token({ issuedAt: -Infinity }), at), true, 'a token without iat counts as issued before');
    assert.equal(r.revoked(token({ user: 'u2', issuedAt: 0 }), at), false, 'another user');
    assert.equal(r.revoked(token({ tenant: 'acme', issuedAt: 0 }), at), false, 'the same user id in another tenant');
  });

  test('a token revocation holds that jti of that tenant only', () => {
    const r = new Revocations();
    r.add({ kind: 'token', tenant: 'default', jti: 'abc', expiresAt: 5000 }, 0);
    assert.equal(r.revoked(token({ jti: 'abc' }), 10), true);
    assert.equal(r.revoked(token({ jti: 'abd' }), 10), false);
    assert.equal(r.revoked(token({ jti: undefined }), 10), false);
    assert.equal(r.revoked(token({ tenant: 'acme', jti: 'abc' }), 10), false);
  });

  test('expired revocations stop holding, are pruned, and are not added', () => {
    const r = new Revocations();
    r.add({ kind: 'token', tenant: 'default', jti: 'abc', expiresAt: 5000 }, 0);
    r.add({ kind: 'user', tenant: 'default', user: 'u1', at: 100, expiresAt: 5000 }, 0);
    assert.equal(r.revoked(token({ jti: 'abc' }), 5000), false);
    assert.equal(r.revoked(token({ issuedAt: 0 }), 5000), false);
    assert.equal(r.size, 2);
    r.prune(5000);
    assert.equal(r.size, 0);
    assert.equal(r.add({ kind: 'token', tenant: 'default', jti: 'x', expiresAt: 10 }, 10), false);
    assert.equal(r.size, 0);
  });

  test('a second revocation of a user keeps the later time and expiry; list gives back what is held', () => {
    const r = new Revocations();
    r.add({ kind: 'user', tenant: 't', user: 'a/@b', at: 5000, expiresAt: 9000 }, 0);
    assert.equal(r.add({ kind: 'user', tenant: 't', user: 'a/@b', at: 3000, expiresAt: 8000 }, 0), false, 'an earlier one adds nothing');
    assert.equal(r.add({ kind: 'user', tenant: 't', user: 'a/@b', at: 7000, expiresAt: 12000 }, 0), true);
    r.add({ kind: 'token', tenant: 't', jti: 'j\u0001k', expiresAt: 9000 }, 0);
    assert.deepEqual(r.list(), [
      { kind: 'user', tenant: 't', user: 'a/@b', at: 7000, expiresAt: 12000 },
      { kind: 'token', tenant: 't', jti: 'j\u0001k', expiresAt: 9000 },
    ]);
  });

  test('list round-trips any user and token id', () => {
    fc.assert(fc.property(fc.stringMatching(/^[A-Za-z0-9:_.-]{1,8}$/), fc.string({ minLength: 1, maxLength: 20 }), (tenant, id) => {
      const r = new Revocations();
      r.add({ kind: 'user', tenant, user: id, at: 1, expiresAt: 100 }, 0);
      r.add({ kind: 'token', tenant, jti: id, expiresAt: 100 }, 0);
      const back = new Revocations();
      for (const x of r.list()) back.add(x, 0);
      assert.deepEqual(back.list(), r.list());
    }));
  });
});

describe('revocations as Redis members', () => {
  test('anything that is not a member made here decodes to undefined', () => {
    for (const m of ['', 'x', '[]', '["u","t","u"]', '["j","t"]', '["z","t","u",1]', '{"kind":"user"}', '["u","t","u","1"]']) {
      assert.equal(decodeRevocation(m, 100), undefined, m);
    }
    assert.equal(decodeRevocation(encodeRevocation({ kind: 'token', tenant: 't', jti: 'j', expiresAt: 5 }), Number.NaN), undefined);
  });
});

test('a snapshot of revocations counts as the revoke action', () => {
  assert.equal(actionOf({ op: 'revocations', list: [] }), 'revoke');
  assert.equal(actionOf({ op: 'subscribe', tenant: 't', user: 'u', topic: 'x' }), 'subscribe');
});

test('isControlCommand takes every command this version makes, and nothing short of one', async () => {
  const { isControlCommand } = await import('../src/control.ts');
  const good = [
    { op: 'revoke', revocation: { kind: 'user', tenant: 't', user: 'u', at: 1, expiresAt: 2 } },
    { op: 'revoke', revocation: { kind: 'token', tenant: 't', jti: 'j', expiresAt: 2 } },
    { op: 'revocations', list: [] },
    { op: 'disconnect', target: { tenant: 't', user: 'u' }, retry: true },
    { op: 'disconnect', target: { connectionId: 'a.0.0.1' }, retry: false },
    { op: 'disconnect', target: { connectionId: 'a.0.0.1', tenant: 't' }, retry: false },
    { op: 'subscribe', tenant: 't', user: 'u', topic: 'x' },
    { op: 'unsubscribe', tenant: 't', user: 'u', topic: 'x' },
  ];
  for (const c of good) assert.equal(isControlCommand(c), true, JSON.stringify(c));
  const bad = [null, 1, 'revoke', {}, { op: 'revoke' }, { op: 'revoke', revocation: null },
    { op: 'revoke', revocation: { kind: 'user', tenant: 't', user: 'u', expiresAt: 2 } },
    { op: 'revoke', revocation: { kind: 'other', tenant: 't', jti: 'j', expiresAt: 2 } },
    { op: 'revocations', list: 1 }, { op: 'revocations', list: [null] },
    { op: 'disconnect' }, { op: 'disconnect', target: {}, retry: true }, { op: 'disconnect', target: { connectionId: 'a' } },
    { op: 'disconnect', target: { tenant: 't' }, retry: true }, { op: 'subscribe', tenant: 't', user: 'u' },
    { op: 'unsubscribe', tenant: 't', topic: 'x', user: '' }, { op: 'a-newer-command' }];
  for (const c of bad) assert.equal(isControlCommand(c), false, JSON.stringify(c));
});
