/** Tokens: where they travel, expiry (4001), refusal (401), and what 1008 and forbidden do. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { type SluiceError, type TokenRequest } from '../src/index.ts';
import { Client, eventually, type Gateway, ofType, sdk, sleep, startGateway } from './helpers.ts';

const SECRET = 'client-test-secret-of-at-least-32-characters';
const key = new TextEncoder().encode(SECRET);

async function token(claims: Record<string, unknown>, expInMs: number): Promise<string> {
  return new SignJWT({ sub: 'u1', topics: ['*'], publish: ['*'], ...claims }).setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime(Math.floor((Date.now() + expInMs) / 1000)).sign(key);
}

/** A publisher on a plain socket with its own long-lived token. */
async function publisher(gw: Gateway): Promise<Client> {
  return Client.connect(gw.url(), { protocols: ['sluice.v1', `bearer.${await token({}, 600_000)}`] });
}

describe('WS_AUTH=jwt', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_MAX_STRIKES: '3' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('token expiry: 4001, a fresh token is asked for with refresh: true, the client reconnects and resumes with since, missing nothing', async () => {
    const asked: TokenRequest[] = [];
    // The first token expires 1.5-2.5 s from now (exp is whole seconds: at
    // least 1.5 s, so that a slow connect still gets in before it); the next ones live long.
    const { client, tap, log } = sdk({
      url: gw.url(),
      token: async (req) => {
        // This test is the 4001 path: the callback itself refuses the refresh on the open socket.
        if (req.reason === 'expiring') throw new Error('no refresh on the open socket in this test');
        asked.push(req);
        return token({}, asked.length === 1 ? 2500 : 600_000);
      },
    });
    const got: { id?: string; data: unknown }[] = [];
    const sub = client.subscribe('exp:1', (e) => got.push({ id: e.id, data: e.data }));
    client.connect();
    await sub.ready;
    const pub = await publisher(gw);
    const published: string[] = [];
    let stop = false;
    // Events keep coming while the subscriber's token expires and it reconnects.
    const loop = (async () => {
      for (let i = 0; !stop; i++) {
        const r = await pub.request({ type: 'publish', topic: 'exp:1', data: i });
        published.push((r.data as { id: string }).id);
        await sleep(60); // under the default 20 frames per second
      }
    })();
    await eventually(() => ofType(log, 'connected').length === 2, 10_000);
    await sleep(200);
    stop = true;
    await loop;
    const acked = await client.publish('exp:1', 'after-refresh');
    published.push(acked.id!);
    await eventually(() => got.length === published.length, 5000);
    assert.deepEqual(got.map((e) => e.id), published, 'every event once, in order, across the expiry');
    const disc = ofType(log, 'disconnected');
    assert.equal(disc.length, 1);
    assert.equal(disc[0]!.ev.code, 4001);
    assert.equal(disc[0]!.ev.reason, 'token_expired');
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: true, reason: 'token_expired' }]);
    const rejoin = tap.sentOfType('join').at(-1)!.frame;
    assert.equal(typeof rejoin.since, 'string', 'rejoined with since');
    assert.deepEqual(ofType(log, 'recovered').map((r) => r.ev), [{ topic: 'exp:1', recovered: true, since: rejoin.since }]);
    // The token went as a subprotocol, never in the URL.
    assert.ok(tap.sockets.every((s) => !s.url.includes('token=') && s.protocols[0] === 'sluice.v1' && s.protocols[1]!.startsWith('bearer.')));
    pub.close();
    await client.close();
  });

  test('ahead of expiresAt the client refreshes on the open socket: no 4001, no reconnect, every event once', async () => {
    const asked: TokenRequest[] = [];
    // Tokens of 3-4 s (exp is whole seconds): a refresh comes at 75-90% of what is left, so several happen in 7 s.
    const { client, log } = sdk({
      url: gw.url(),
      token: async (req) => {
        asked.push(req);
        return token({}, 4000);
      },
    });
    const got: unknown[] = [];
    const sub = client.subscribe('refresh:1', (e) => got.push(e.data));
    client.connect();
    await sub.ready;
    const pub = await publisher(gw);
    const published: number[] = [];
    for (let i = 0; i < 70; i++) {
      assert.equal((await pub.request({ type: 'publish', topic: 'refresh:1', data: i })).status, 'ok');
      published.push(i);
      await sleep(100);
    }
    await eventually(() => got.length === published.length, 5000);
    assert.deepEqual(got, published, 'every event once, in order, across the refreshes');
    assert.deepEqual(ofType(log, 'disconnected'), [], 'no 4001: the token never expired on the open socket');
    assert.equal(ofType(log, 'connected').length, 1);
    assert.ok(asked.filter((r) => r.reason === 'expiring').length >= 2, JSON.stringify(asked));
    assert.deepEqual(asked[0], { refresh: false, reason: undefined });
    assert.ok(asked.slice(1).every((r) => r.refresh && r.reason === 'expiring'));
    assert.deepEqual(ofType(log, 'error'), []);
    pub.close();
    await client.close();
  });

  test('401 at the upgrade: unauthorized is reported, the token is asked again with refresh: true, and the client gets in', async () => {
    const asked: TokenRequest[] = [];
    const { client, log } = sdk({
      url: gw.url(),
      backoff: { initialMs: 50 },
      token: async (req) => {
        asked.push(req);
        return asked.length === 1 ? 'not.a.jwt' : token({}, 600_000);
      },
    });
    client.connect();
    await eventually(() => client.state === 'open', 5000);
    assert.deepEqual(asked, [{ refresh: false, reason: undefined }, { refresh: true, reason: 'unauthorized' }]);
    assert.deepEqual(ofType(log, 'error').map((e) => e.ev.code), ['unauthorized']);
    const rec = ofType(log, 'reconnecting');
    assert.equal(rec.length, 1);
    assert.equal(rec[0]!.ev.status, 401);
    assert.equal(rec[0]!.ev.reason, 'unauthorized');
    await client.close();
  });

  test("tokenIn: 'query' sends ?token= and no bearer subprotocol", async () => {
    const { client, tap } = sdk({ url: `${gw.url()}?x=1`, tokenIn: 'query', token: () => token({}, 600_000) });
    client.connect();
    assert.match((await client.publish('query:1', 1)).id!, /^\d+-\d+$/);
    assert.match(tap.last.url, /\?x=1&token=ey/);
    assert.deepEqual(tap.last.protocols, ['sluice.v1']);
    await client.close();
  });

  test('a forbidden join rejects its subscription and reports forbidden; other topics are joined', async () => {
    const { client, log } = sdk({ url: gw.url(), token: () => token({ topics: ['room:*'] }, 600_000) });
    const bad = client.subscribe('secret:1', () => undefined);
    const good = client.subscribe('room:1', () => undefined);
    client.connect();
    await assert.rejects(bad.ready, (e: SluiceError) => e.code === 'forbidden' && e.topic === 'secret:1');
    await good.ready;
    assert.ok(ofType(log, 'error').some((e) => e.ev.code === 'forbidden' && e.ev.topic === 'secret:1'));
    assert.equal(client.state, 'open');
    await client.close();
  });

  test('1008 abusive: the client stops, reports abusive, rejects what is pending and does not reconnect', async () => {
    // No publish right: every publish is a forbidden strike; the third (WS_MAX_STRIKES) closes the socket with 1008.
    const { client, tap, log } = sdk({ url: gw.url(), backoff: { initialMs: 20 }, token: () => token({ publish: [] }, 600_000) });
    client.connect();
    await eventually(() => client.state === 'open');
    const publishes = [1, 2, 3, 4, 5].map((i) => client.publish('room:1', i));
    const outcomes = await Promise.allSettled(publishes);
    const codes = outcomes.map((o) => (o.status === 'rejected' ? (o.reason as SluiceError).code : 'ok'));
    assert.deepEqual(codes.slice(0, 3), ['forbidden', 'forbidden', 'forbidden']);
    for (const c of codes.slice(3)) assert.ok(c === 'forbidden' || c === 'abusive', c);
    await eventually(() => client.state === 'closed');
    const disc = ofType(log, 'disconnected');
    assert.equal(disc.length, 1);
    assert.equal(disc[0]!.ev.code, 1008);
    assert.equal(disc[0]!.ev.willReconnect, false);
    assert.ok(ofType(log, 'error').some((e) => e.ev.code === 'abusive' && e.ev.closeCode === 1008));
    await assert.rejects(client.publish('room:1', 6), { code: 'closed' });
    // With a 20 ms backoff, a reconnect would have happened many times over by now.
    await sleep(500);
    assert.equal(tap.sockets.length, 1, 'never reconnected');
    assert.equal(ofType(log, 'reconnecting').length, 0);
  });
});
