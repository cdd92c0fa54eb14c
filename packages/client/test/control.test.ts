/**
 * The operator's controls against the real gateway (WS_AUTH=jwt, admin API
 * with ADMIN_TOKEN): revocation (4003, 401 token_revoked), disconnect (4000
 * with its hint, 1008 for good), and server-side subscribe/unsubscribe, as
 * the SDK sees them. Each test has a user of its own: a revocation lasts
 * WS_REVOCATION_TTL_MS, and the admin commands name users.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import type { SluiceError, SluiceEvent, TokenRequest } from '../src/index.ts';
import { eventually, type Gateway, ofType, sdk, sleep, startGateway } from './helpers.ts';

const SECRET = 'control-test-secret-of-at-least-32-characters';
const ADMIN_TOKEN = 'test-admin-token';
const key = new TextEncoder().encode(SECRET);

/** A token of `user` that may join `room:*` only, issued now (`iat`, whole seconds). */
function token(user: string): Promise<string> {
  return new SignJWT({ sub: user, topics: ['room:*'], publish: ['room:*'] }).setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(key);
}

/**
 * A token issued after a revocation made at or before `revokedAt`: a user
 * revocation holds every token whose `iat` (whole seconds) is at or before
 * it, so this waits for the next second first.
 */
async function tokenAfter(user: string, revokedAt: number): Promise<string> {
  const next = (Math.floor(revokedAt / 1000) + 1) * 1000;
  if (Date.now() < next) await sleep(next - Date.now() + 20);
  return token(user);
}

interface AdminAnswer {
  readonly status: number;
  readonly body: unknown;
}

describe('operator controls on a real gateway', () => {
  let gw: Gateway;

  async function admin(path: string, body: Record<string, unknown>): Promise<AdminAnswer> {
    const res = await fetch(gw.admin(path), {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(5000),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: kept as text for the assertion message
    }
    return { status: res.status, body: parsed };
  }

  /** An admin call that must be taken: 202 with `status`. */
  async function control(path: string, body: Record<string, unknown>, status: string): Promise<void> {
    const r = await admin(path, body);
    assert.deepEqual(r, { status: 202, body: { status } }, `${path} ${JSON.stringify(body)}`);
  }

  async function publish(topic: string, data: unknown): Promise<string> {
    const r = await admin('/v1/publish', { topic, data });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (r.body as { id: string }).id;
  }

  before(async () => {
    gw = await startGateway({
      WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, ADMIN_TOKEN,
      // The 4000's retryAfterMs is drawn from this range (as for 1012): short, so that the test is.
      WS_RETRY_AFTER_MIN_MS: '400', WS_RETRY_AFTER_MAX_MS: '800',
    });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('revoke: 4003, the token callback is asked with token_revoked, the client reconnects and resumes with since, missing nothing', async () => {
    const user = 'u-revoke';
    const asked: TokenRequest[] = [];
    let revokedAt = 0;
    let whileAway: Promise<string> | undefined;
    const { client, tap, log } = sdk({
      url: gw.url(),
      token: async (req) => {
        asked.push(req);
        if (req.reason !== 'token_revoked') return token(user);
        // Published while the client has no socket: the resume must bring it.
        whileAway = publish('room:rev', 'while away');
        await whileAway;
        return tokenAfter(user, revokedAt);
      },
    });
    const got: SluiceEvent[] = [];
    const sub = client.subscribe('room:rev', (e) => got.push(e));
    client.connect();
    await sub.ready;
    const first = await publish('room:rev', 'before');
    await eventually(() => got.length === 1, 5000);
    await control('/v1/revoke', { tenant: 'default', user }, 'revoked');
    revokedAt = Date.now();
    await eventually(() => ofType(log, 'connected').length === 2, 10_000);
    const disc = ofType(log, 'disconnected');
    assert.deepEqual(disc.map((d) => [d.ev.code, d.ev.reason, d.ev.willReconnect]), [[4003, 'token_revoked', true]]);
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: true, reason: 'token_revoked' }]);
    const awayId = await whileAway!;
    const rejoin = tap.sentOfType('join').at(-1)!.frame;
    assert.equal(rejoin.topic, 'room:rev');
    assert.equal(rejoin.since, first, 'rejoined from the last event it had');
    await eventually(() => got.length === 2, 5000);
    assert.deepEqual(got.map((e) => [e.id, e.data]), [[first, 'before'], [awayId, 'while away']]);
    assert.deepEqual(ofType(log, 'recovered').map((r) => r.ev), [{ topic: 'room:rev', recovered: true, since: first }]);
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });

  test('revoke, then an upgrade with a token issued before it: 401 token_revoked, a new token asked for as token_revoked, then in', async () => {
    const user = 'u-revoke-upgrade';
    const old = await token(user);
    await control('/v1/revoke', { tenant: 'default', user }, 'revoked');
    const revokedAt = Date.now();
    const asked: TokenRequest[] = [];
    const { client, log } = sdk({
      url: gw.url(),
      backoff: { initialMs: 50 },
      token: async (req) => {
        asked.push(req);
        return asked.length === 1 ? old : tokenAfter(user, revokedAt);
      },
    });
    client.connect();
    await eventually(() => client.state === 'open', 10_000);
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: true, reason: 'token_revoked' }]);
    assert.deepEqual(ofType(log, 'error').map((e) => [e.ev.code, e.ev.status]), [['token_revoked', 401]]);
    assert.deepEqual(ofType(log, 'reconnecting').map((e) => [e.ev.reason, e.ev.status]), [['token_revoked', 401]]);
    await client.close();
  });

  test('disconnect with reconnect: 4000 with retryAfterMs; the client comes back no sooner, resumes with since', async () => {
    const user = 'u-disconnect-retry';
    const { client, tap, log } = sdk({ url: gw.url(), token: () => token(user) });
    const got: unknown[] = [];
    const sub = client.subscribe('room:disc', (e) => got.push(e.data));
    client.connect();
    await sub.ready;
    const first = await publish('room:disc', 1);
    await eventually(() => got.length === 1, 5000);
    await control('/v1/disconnect', { tenant: 'default', user, reconnect: true }, 'accepted');
    await eventually(() => ofType(log, 'connected').length === 2, 10_000);
    const disc = ofType(log, 'disconnected');
    assert.equal(disc.length, 1);
    assert.equal(disc[0]!.ev.code, 4000);
    assert.equal(disc[0]!.ev.reason, 'disconnected');
    assert.equal(disc[0]!.ev.willReconnect, true);
    const hint = disc[0]!.ev.retryAfterMs;
    assert.ok(hint !== undefined && hint >= 400 && hint <= 800, `retryAfterMs ${hint}`);
    assert.ok(tap.sockets[1]!.createdAt - disc[0]!.at >= hint, `came back ${tap.sockets[1]!.createdAt - disc[0]!.at} ms after, hint ${hint}`);
    assert.equal(tap.sentOfType('join').at(-1)!.frame.since, first);
    await publish('room:disc', 2);
    await eventually(() => got.length === 2, 5000);
    assert.deepEqual(got, [1, 2]);
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });

  test('disconnect without reconnect: 1008 disconnected; the client stops with error disconnected and does not come back', async () => {
    const user = 'u-disconnect';
    const { client, tap, log } = sdk({ url: gw.url(), backoff: { initialMs: 20 }, token: () => token(user) });
    client.connect();
    await eventually(() => client.state === 'open', 5000);
    await control('/v1/disconnect', { tenant: 'default', user }, 'accepted');
    await eventually(() => client.state === 'closed', 5000);
    const disc = ofType(log, 'disconnected');
    assert.deepEqual(disc.map((d) => [d.ev.code, d.ev.reason, d.ev.willReconnect]), [[1008, 'disconnected', false]]);
    assert.deepEqual(ofType(log, 'error').map((e) => [e.ev.code, e.ev.closeCode]), [['disconnected', 1008]]);
    await assert.rejects(client.publish('room:x', 1), (e: SluiceError) => e.code === 'closed');
    // With a 20 ms backoff, a reconnect would have happened many times over by now.
    await sleep(500);
    assert.equal(tap.sockets.length, 1, 'never reconnected');
    assert.deepEqual(ofType(log, 'reconnecting'), []);
  });

  test('server-side subscribe: subscribed, then the topic\'s events reach the app; resumed after a reconnect while the token allows it', async () => {
    const user = 'u-subscribe';
    const { client, tap, log } = sdk({ url: gw.url(), token: () => token(user) });
    const subscribed: string[] = [];
    const got: { topic: string; data: unknown }[] = [];
    // The token allows room:* only: vip:42 is the operator's gift, room:srv is one the token would allow too.
    client.on('subscribed', ({ topic }) => {
      subscribed.push(topic);
      client.subscribe(topic, (e) => got.push({ topic: e.topic, data: e.data }));
    });
    const unsubscribed: unknown[] = [];
    client.on('unsubscribed', (e) => unsubscribed.push(e));
    client.connect();
    await eventually(() => client.state === 'open', 5000);
    await control('/v1/subscribe', { tenant: 'default', user, topic: 'vip:42' }, 'accepted');
    await control('/v1/subscribe', { tenant: 'default', user, topic: 'room:srv' }, 'accepted');
    await eventually(() => subscribed.length === 2, 5000);
    assert.deepEqual(subscribed.sort(), ['room:srv', 'vip:42']);
    await publish('vip:42', 'gift');
    const srvFirst = await publish('room:srv', 'one');
    await eventually(() => got.length === 2, 5000);
    assert.deepEqual(got.sort((a, b) => a.topic.localeCompare(b.topic)), [{ topic: 'room:srv', data: 'one' }, { topic: 'vip:42', data: 'gift' }]);
    assert.deepEqual(tap.sentOfType('join'), [], 'the client sent no join of its own');

    // A reconnect: both are joined again with since; the token does not allow vip:42, which is dropped (unsubscribed forbidden).
    await control('/v1/disconnect', { tenant: 'default', user, reconnect: true }, 'accepted');
    await eventually(() => ofType(log, 'connected').length === 2 && unsubscribed.length === 1, 10_000);
    assert.deepEqual(unsubscribed, [{ topic: 'vip:42', reason: 'forbidden' }]);
    const rejoins = tap.sentOfType('join').map((w) => [w.frame.topic, w.frame.since]).sort();
    assert.deepEqual(rejoins.map((j) => j[0]), ['room:srv', 'vip:42']);
    assert.equal(rejoins[0]![1], srvFirst, 'room:srv resumed from its last event');
    await publish('room:srv', 'two');
    await publish('vip:42', 'not any more');
    await eventually(() => got.length === 3, 5000);
    await sleep(200); // a vip:42 event would have arrived by now, before or after room:srv's
    assert.deepEqual(got.slice(2), [{ topic: 'room:srv', data: 'two' }]);
    assert.deepEqual(ofType(log, 'error'), [], 'neither the gift nor its end is an error');
    await client.close();
  });

  test('server-side unsubscribe: unsubscribed removed, its events stop, and it is not joined again after a reconnect', async () => {
    const user = 'u-unsubscribe';
    const { client, tap, log } = sdk({ url: gw.url(), token: () => token(user) });
    const got: unknown[] = [];
    const subscribed: string[] = [];
    client.on('subscribed', ({ topic }) => {
      subscribed.push(topic);
      client.subscribe(topic, (e) => got.push(e.data));
    });
    const unsubscribed: unknown[] = [];
    client.on('unsubscribed', (e) => unsubscribed.push(e));
    const own: unknown[] = [];
    const sub = client.subscribe('room:own', (e) => own.push(e.data));
    client.connect();
    await sub.ready;
    await control('/v1/subscribe', { tenant: 'default', user, topic: 'room:rm' }, 'accepted');
    await eventually(() => subscribed.length === 1, 5000);
    assert.deepEqual(subscribed, ['room:rm']);
    await publish('room:rm', 'kept');
    await eventually(() => got.length === 1, 5000);
    await control('/v1/unsubscribe', { tenant: 'default', user, topic: 'room:rm' }, 'accepted');
    await eventually(() => unsubscribed.length === 1, 5000);
    assert.deepEqual(unsubscribed, [{ topic: 'room:rm', reason: 'removed' }]);
    await publish('room:rm', 'dropped');
    await publish('room:own', 'marker');
    await eventually(() => own.length === 1, 5000);
    assert.deepEqual(got, ['kept'], 'nothing of room:rm after the removal');
    await control('/v1/disconnect', { tenant: 'default', user, reconnect: true }, 'accepted');
    await eventually(() => ofType(log, 'connected').length === 2, 10_000);
    await eventually(() => ofType(log, 'recovered').length === 1, 5000);
    assert.deepEqual(tap.sentOfType('join').map((w) => w.frame.topic), ['room:own', 'room:own'], 'room:rm is not joined again');
    assert.deepEqual(ofType(log, 'error'), []);
    await client.close();
  });
});
