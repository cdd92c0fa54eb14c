// Token refresh on the open socket (PROTOCOL.md, additions of 2026-12):
// `expiresAt` in welcome, the refresh frame, rights replaced, topics the new
// rights no longer allow left with `unsubscribed`, 4001 only when no
// refresh moved the expiry in time, and every bad refresh answered with
// nothing changed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { Client, type Gateway, metricValue, startGateway } from './harness.ts';

const SECRET = 'test-secret-of-at-least-thirty-two-characters';
const enc = new TextEncoder();

interface Claims {
  sub?: string;
  tenant?: string;
  topics?: string[];
  publish?: string[];
}

/** An HS256 token for `claims` (user u1 by default) expiring at `exp` (seconds), or `ttlS` from now. */
function token(claims: Claims = {}, opts: { ttlS?: number; exp?: number; secret?: string } = {}): Promise<string> {
  return new SignJWT({ sub: 'u1', ...claims }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt()
    .setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + (opts.ttlS ?? 600))
    .sign(enc.encode(opts.secret ?? SECRET));
}

const bearer = (t: string) => ({ headers: { authorization: `Bearer ${t}` } });

describe('refresh with WS_AUTH=jwt', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_MAX_STRIKES: '3', LOG_LEVEL: 'debug' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('welcome carries the token\'s exp as expiresAt; an accepted refresh answers the new one', async () => {
    const exp = Math.floor(Date.now() / 1000) + 300;
    const c = await Client.connect(gw.url(), bearer(await token({ topics: ['*'] }, { exp })));
    assert.equal(c.welcome.expiresAt, exp * 1000);
    const later = exp + 300;
    const r = await c.request({ type: 'refresh', token: await token({ topics: ['*'] }, { exp: later }) });
    assert.equal(r.status, 'ok', JSON.stringify(r));
    assert.deepEqual(r.data, { expiresAt: later * 1000 });
    c.close();
  });

  test('a refresh before exp keeps the socket open past the first token\'s exp; 4001 comes at the new exp', async () => {
    const exp = Math.floor(Date.now() / 1000) + 2;
    const c = await Client.connect(gw.url(), bearer(await token({ topics: ['*'] }, { exp })));
    const unrefreshed = await Client.connect(gw.url(), bearer(await token({ topics: ['*'] }, { exp })));
    const next = exp + 2;
    assert.equal((await c.request({ type: 'refresh', token: await token({ topics: ['*'] }, { exp: next }) })).status, 'ok');
    const closed = await unrefreshed.closedBy(5000);
    assert.equal(closed.code, 4001, 'a socket that did not refresh closes at its exp');
    assert.ok(Date.now() >= exp * 1000 - 20);
    assert.equal((await c.request({ type: 'ping' })).type, 'pong', 'the refreshed socket outlives the first exp');
    const end = await c.closedBy(5000);
    const at = Date.now();
    assert.equal(end.code, 4001);
    assert.deepEqual(JSON.parse(end.reason), { reason: 'token_expired' });
    assert.ok(at >= next * 1000 - 20 && at <= next * 1000 + 1000, `closed ${at - next * 1000} ms from the new exp`);
  });

  test('the new token\'s rights replace the old: topics it no longer allows are left with unsubscribed before the reply', async () => {
    const c = await Client.connect(gw.url(), bearer(await token({ topics: ['room:*', 'news'], publish: ['room:*'] })));
    for (const topic of ['room:1', 'room:2', 'news']) assert.equal((await c.request({ type: 'join', topic })).status, 'ok');
    const publisher = await Client.connect(gw.url(), bearer(await token({ sub: 'p', publish: ['*'] })));
    const ref = 'narrow';
    c.send({ type: 'refresh', ref, token: await token({ topics: ['room:1'], publish: ['news'] }) });
    const reply = await c.next((f) => f.type === 'reply' && f.ref === ref);
    assert.equal(reply.status, 'ok', JSON.stringify(reply));
    // Both unsubscribed frames came before the reply: they were queued when it was taken.
    const gone = c.frames.filter((f) => f.type === 'unsubscribed');
    assert.deepEqual(gone.map((f) => [f.topic, f.reason]).sort(), [['news', 'forbidden'], ['room:2', 'forbidden']]);
    // The left topics deliver nothing more; the kept one does.
    for (const topic of ['room:2', 'news', 'room:1']) {
      assert.equal((await publisher.request({ type: 'publish', topic, data: topic })).status, 'ok');
    }
    const ev = await c.next((f) => f.type === 'event');
    assert.equal(ev.topic, 'room:1');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    assert.deepEqual(c.takeEvents('room:2'), []);
    assert.deepEqual(c.takeEvents('news'), []);
    // Leaving a topic the refresh removed is not_joined; joining it again is forbidden; publish rights are the new ones.
    // (An accepted frame between the refusals: WS_MAX_STRIKES is 3 here.)
    assert.equal((await c.request({ type: 'leave', topic: 'news' })).reason, 'not_joined');
    assert.equal((await c.request({ type: 'join', topic: 'room:2' })).reason, 'forbidden');
    assert.equal((await c.request({ type: 'publish', topic: 'news', data: 1 })).status, 'ok');
    assert.equal((await c.request({ type: 'publish', topic: 'room:1', data: 1 })).reason, 'forbidden');
    c.close();
    publisher.close();
  });

  test('refused refreshes: unauthorized or forbidden, nothing changes, each a strike; bad frames are bad_request', async () => {
    const exp = Math.floor(Date.now() / 1000) + 600;
    const c = await Client.connect(gw.url(), bearer(await token({ topics: ['room:*'] }, { exp })));
    assert.equal((await c.request({ type: 'join', topic: 'room:1' })).status, 'ok');
    const before = await metricValue(gw, 'sluice_refreshes_total', '{outcome="unauthorized"}');
    const cases: [string, Record<string, unknown>, string][] = [
      ['garbage', { token: 'not.a.jwt' }, 'unauthorized'],
      ['another signature', { token: await token({ topics: ['*'] }, { secret: 'another-secret-of-at-least-thirty-two-chars' }) }, 'unauthorized'],
      ['expired', { token: await token({ topics: ['*'] }, { exp: Math.floor(Date.now() / 1000) - 5 }) }, 'unauthorized'],
      ['another user', { token: await token({ sub: 'u2', topics: ['*'] }) }, 'forbidden'],
      ['another tenant', { token: await token({ tenant: 'acme', topics: ['*'] }) }, 'forbidden'],
      ['no token', {}, 'bad_request'],
      ['a token that is not a string', { token: 42 }, 'bad_request'],
      ['an empty token', { token: '' }, 'bad_request'],
      ['a 10 KB token', { token: 'x'.repeat(10_240) }, 'bad_request'],
    ];
    for (const [i, [what, fields, reason]] of cases.entries()) {
      const r = await c.request({ type: 'refresh', ...fields });
      assert.equal(r.status, 'error', what);
      assert.equal(r.reason, reason, what);
      assert.equal(typeof r.message, 'string', `${what}: the refusal says why`);
      // Two refusals in a row, then a good frame: WS_MAX_STRIKES=3 is never reached.
      if (i % 2 === 1) assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    }
    assert.equal(c.closed, undefined, 'refused refreshes with good frames between them leave the socket open');
    assert.equal(await metricValue(gw, 'sluice_refreshes_total', '{outcome="unauthorized"}'), before + 3);
    assert.ok((await metricValue(gw, 'sluice_refreshes_total', '{outcome="forbidden"}')) >= 2);
    // Nothing changed: the old rights and expiry hold.
    assert.equal((await c.request({ type: 'join', topic: 'news' })).reason, 'forbidden');
    assert.equal((await c.request({ type: 'join', topic: 'room:2' })).status, 'ok');
    const ok = await c.request({ type: 'refresh', token: await token({ topics: ['room:*'] }, { exp }) });
    assert.deepEqual(ok.data, { expiresAt: exp * 1000 }, 'the expiry is still the first token\'s');
    // A token never reaches the log.
    const t = await token({ sub: 'u2', topics: ['*'] });
    await c.request({ type: 'refresh', token: t });
    assert.ok(!JSON.stringify(gw.logs).includes(t), 'no token in any log line');
    c.close();
  });

  test('refused refreshes in a row strike the socket out: 1008 abusive', async () => {
    const c = await Client.connect(gw.url(), bearer(await token({ topics: ['*'] })));
    for (let i = 0; i < 3; i++) c.send({ type: 'refresh', ref: `x${i}`, token: 'not.a.jwt' });
    const closed = await c.closedBy(5000);
    assert.equal(closed.code, 1008);
    assert.deepEqual(JSON.parse(closed.reason), { reason: 'abusive' });
  });
});

describe('refresh with WS_AUTH=none', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({});
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('welcome has no expiresAt, and refresh is bad_request', async () => {
    const c = await Client.connect(gw.url());
    assert.equal(c.welcome.expiresAt, undefined);
    const r = await c.request({ type: 'refresh', token: await token() });
    assert.equal(r.reason, 'bad_request');
    assert.match(String(r.message), /WS_AUTH=jwt/);
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    assert.equal(await metricValue(gw, 'sluice_refreshes_total', '{outcome="bad_request"}'), 1);
    c.close();
  });
});
