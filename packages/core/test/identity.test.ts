import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ALL_RIGHTS, allows, clientAddress, compileRights, identityFromClaims, NO_RIGHTS, originAllowed, parseOriginList }
  from '../src/identity.ts';

const topicChar = fc.constantFrom(...'abcAB09:_.-');
const topic = fc.string({ unit: topicChar, minLength: 1, maxLength: 12 });
const pattern = fc.oneof(topic, topic.map((t) => `${t}*`));

test('compiled rights allow exactly what the patterns describe (model: a linear scan of the patterns)', () => {
  fc.assert(fc.property(fc.array(pattern, { maxLength: 8 }), topic, (patterns, t) => {
    const model = patterns.some((p) => (p.endsWith('*') ? t.startsWith(p.slice(0, -1)) : t === p));
    assert.equal(allows(compileRights(patterns), t), model);
  }));
});

test('`*` alone allows everything, an empty list nothing', () => {
  assert.equal(compileRights(['room:1', '*']), ALL_RIGHTS);
  assert.equal(allows(ALL_RIGHTS, 'anything'), true);
  assert.equal(compileRights([]), NO_RIGHTS);
  assert.equal(allows(NO_RIGHTS, 'room:1'), false);
  const r = compileRights(['room:*', 'room:4*', 'news']);
  assert.deepEqual(r.prefixes, ['room:'], 'a prefix covered by a shorter one is dropped');
  assert.equal(allows(r, 'news'), true);
  assert.equal(allows(r, 'newsroom'), false, 'an exact name is not a prefix');
});

test('claims become an identity; defaults are tenant "default" and no rights', () => {
  const r = identityFromClaims({ sub: 'u1', exp: 2_000_000_000 });
  assert.ok(r.ok);
  assert.equal(r.identity.user, 'u1');
  assert.equal(r.identity.tenant, 'default');
  assert.equal(r.identity.join, NO_RIGHTS);
  assert.equal(r.identity.publish, NO_RIGHTS);
  assert.equal(r.identity.expiresAt, 2_000_000_000_000);
  const full = identityFromClaims({ sub: 'u2', tenant: 'acme', exp: 1, topics: ['room:*'], publish: ['room:1'] });
  assert.ok(full.ok);
  assert.equal(full.identity.tenant, 'acme');
  assert.equal(allows(full.identity.join, 'room:9'), true);
  assert.equal(allows(full.identity.publish, 'room:9'), false);
});

test('malformed claims are refused with a message that names the claim', () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ exp: 1 }, /^sub/],
    [{ sub: '', exp: 1 }, /^sub/],
    [{ sub: 'a\nb', exp: 1 }, /^sub/],
    [{ sub: 7, exp: 1 }, /^sub/],
    [{ sub: 'u', exp: 1, tenant: 'a/b' }, /^tenant/],
    [{ sub: 'u', exp: 1, tenant: '' }, /^tenant/],
    [{ sub: 'u', exp: 1, tenant: 5 }, /^tenant/],
    [{ sub: 'u' }, /^exp/],
    [{ sub: 'u', exp: '1' }, /^exp/],
    [{ sub: 'u', exp: 1, topics: 'room:*' }, /^topics/],
    [{ sub: 'u', exp: 1, topics: ['room/1'] }, /^topics/],
    [{ sub: 'u', exp: 1, topics: ['ro*om'] }, /^topics/],
    [{ sub: 'u', exp: 1, publish: [1] }, /^publish/],
    [{ sub: 'u', exp: 1, publish: Array.from({ length: 1001 }, () => 'a') }, /^publish/],
  ];
  for (const [claims, message] of cases) {
    const r = identityFromClaims(claims);
    assert.ok(!r.ok, JSON.stringify(claims));
    assert.match(r.message, message, JSON.stringify(claims));
  }
});

test('origins: exact, wildcard subdomains (never the bare domain), scheme and port must match', () => {
  const rules = parseOriginList('https://app.example.com,https://*.example.org,http://localhost:3000')!;
  const yes = ['https://app.example.com', 'HTTPS://APP.EXAMPLE.COM', 'https://a.example.org', 'https://a.b.example.org', 'http://localhost:3000'];
  const no = ['http://app.example.com', 'https://app.example.com:8443', 'https://example.org', 'https://evilexample.org',
    'https://example.org.evil.com', 'http://localhost', 'http://localhost:3001', 'null', '', 'https://app.example.com/',
    'https://*.example.org'];
  for (const o of yes) assert.equal(originAllowed(rules, o), true, o);
  for (const o of no) assert.equal(originAllowed(rules, o), false, o);
  assert.equal(parseOriginList('https://ok.com,not an origin'), undefined);
});

test('client address: the TCP peer unless proxies are trusted, then the entry that many hops from the right', () => {
  assert.equal(clientAddress('10.0.0.1', '1.2.3.4', 0), '10.0.0.1', 'the header is ignored without trusted proxies');
  assert.equal(clientAddress('10.0.0.1', '6.6.6.6, 1.2.3.4', 1), '1.2.3.4', 'the client-written entry on the left is ignored');
  assert.equal(clientAddress('10.0.0.1', '6.6.6.6, 1.2.3.4, 10.0.0.9', 2), '1.2.3.4');
  assert.equal(clientAddress('10.0.0.1', '1.2.3.4', 2), '10.0.0.1', 'fewer entries than hops: the peer');
  assert.equal(clientAddress('10.0.0.1', '', 1), '10.0.0.1');
  assert.equal(clientAddress('10.0.0.1', 'x, <script>', 1), '10.0.0.1', 'not an address: the peer');
  assert.equal(clientAddress('10.0.0.1', '2001:db8::1', 1), '2001:db8::1');
});
