import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { checkHandshake, chooseSubprotocol, Refusals } from '../src/handshake.ts';
import { parseOriginList } from '../src/identity.ts';

const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const ok = { headerBytes: 300, version: '13', key: KEY, origin: '' };
const open = { maxHeaderBytes: 8192, origins: undefined };

describe('checkHandshake', () => {
  test('a valid handshake passes', () => {
    assert.equal(checkHandshake(ok, open), undefined);
  });

  test('each check answers with its refusal', () => {
    assert.equal(checkHandshake({ ...ok, headerBytes: 8193 }, open), Refusals.headersTooLarge);
    assert.equal(checkHandshake({ ...ok, version: '8' }, open), Refusals.badVersion);
    assert.deepEqual(Refusals.badVersion.header, ['sec-websocket-version', '13']);
    assert.equal(checkHandshake({ ...ok, key: 'short==' }, open), Refusals.badKey);
    assert.equal(checkHandshake({ ...ok, key: `${KEY}x` }, open), Refusals.badKey);
  });

  test('the origin list applies to browsers only', () => {
    const p = { maxHeaderBytes: 8192, origins: parseOriginList('https://app.example.com') };
    assert.equal(checkHandshake({ ...ok, origin: 'https://app.example.com' }, p), undefined);
    assert.equal(checkHandshake({ ...ok, origin: 'https://evil.example' }, p), Refusals.forbiddenOrigin);
    assert.equal(checkHandshake({ ...ok, origin: '' }, p), undefined);
  });

  test('the cheapest check answers first', () => {
    const p = { maxHeaderBytes: 100, origins: parseOriginList('https://a.example') };
    assert.equal(checkHandshake({ headerBytes: 101, version: '8', key: 'x', origin: 'https://b.example' }, p), Refusals.headersTooLarge);
  });

  test('property: it passes exactly when every check does', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: 10000 }), fc.constantFrom('13', '8', ''),
      fc.oneof(fc.constant(KEY), fc.base64String({ minLength: 0, maxLength: 30 })), (headerBytes, version, key) => {
        const r = checkHandshake({ headerBytes, version, key, origin: '' }, open);
        const valid = headerBytes <= 8192 && version === '13' && /^[A-Za-z0-9+/]{22}==$/.test(key);
        assert.equal(r === undefined, valid);
      }));
  });
});

describe('chooseSubprotocol', () => {
  test('answers sluice.v1 when offered among others, else none', () => {
    assert.equal(chooseSubprotocol('chat, sluice.v1'), 'sluice.v1');
    assert.equal(chooseSubprotocol('sluice.v1'), 'sluice.v1');
    assert.equal(chooseSubprotocol('sluice.v2'), '');
    assert.equal(chooseSubprotocol(''), '');
  });
});
