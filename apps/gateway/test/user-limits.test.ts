// The limits of the 2026-12 additions: the per-user publish window
// (WS_USER_MSG_LIMIT, `user_rate_limited`, not a strike), the per-tenant
// upgrade window (WS_TENANT_CONNECT_LIMIT, 429 `tenant_rate_limited`) and the
// per-user socket cap (WS_MAX_USER_SOCKETS, 429 `too_many_sockets`): on one
// node with two shards, then on two nodes sharing a real Redis.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, startGateway } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

const JWT = { WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET };

/** One upgrade attempt: 101 when the server upgraded (the socket is dropped at once), else its refusal. */
async function upgrade(gw: Gateway, t: string): Promise<{ status: number; body: string; retryAfter: string | undefined }> {
  try {
    const r = await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${t}` } });
    return { status: r.status, body: r.body, retryAfter: r.headers['retry-after'] };
  } catch (err) {
    if ((err as Error).message === 'upgraded although refused') return { status: 101, body: '', retryAfter: undefined };
    throw err;
  }
}

/** Publishes on the sockets in turn, one every `everyMs`, for `ms`; the replies. */
async function paced(sockets: Client[], everyMs: number, ms: number): Promise<Record<string, unknown>[]> {
  const pending: Promise<Record<string, unknown>>[] = [];
  const started = Date.now();
  for (let i = 0; Date.now() - started < ms; i++) {
    pending.push(sockets[i % sockets.length]!.request({ type: 'publish', topic: 'paced', data: i, ephemeral: true }));
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return Promise.all(pending);
}

async function ready(gw: Gateway): Promise<void> {
  await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200, 10_000);
}

describe('user and tenant limits on one node (two shards)', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ ...JWT, WS_MAX_USER_SOCKETS: '3', WS_USER_MSG_LIMIT: '20', WS_USER_WINDOW_MS: '1000', WS_MAX_STRIKES: '2',
      WS_MAX_MESSAGES: '100000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('WS_MAX_USER_SOCKETS: the user\'s 4th socket is refused 429 too_many_sockets; a close frees a place; other users are not affected', async () => {
    const t = await token({ sub: 'cap-user' });
    const open = await Promise.all([0, 1, 2].map(() => Client.connect(gw.url(), bearer(t))));
    const r = await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${t}` } });
    assert.equal(r.status, 429);
    assert.deepEqual(JSON.parse(r.body), { reason: 'too_many_sockets' });
    const other = await Client.connect(gw.url(), bearer(await token({ sub: 'cap-other' })));
    open[0]!.close();
    await eventually(async () => (await upgrade(gw, t)).status === 101, 3000);
    assert.ok(await metricValue(gw, 'sluice_upgrades_total', '{outcome="too_many_sockets"}') >= 1);
    for (const c of [...open.slice(1), other]) c.close();
  });

  test('WS_USER_MSG_LIMIT: publishes of every socket of the user count together; past it user_rate_limited, not a strike', async () => {
    const t = await token({ sub: 'pub-user', publish: ['*'] });
    const [a, b] = await Promise.all([Client.connect(gw.url(), bearer(t)), Client.connect(gw.url(), bearer(t))]);
    const other = await Client.connect(gw.url(), bearer(await token({ sub: 'pub-other', publish: ['*'] })));
    // About 100 a second for 3 s against 20 a second: about 60 accepted (local allowances settled in batches: within the window's accuracy).
    const replies = await paced([a!, b!], 10, 3000);
    const ok = replies.filter((r) => r.status === 'ok').length;
    const limited = replies.filter((r) => r.reason === 'user_rate_limited');
    assert.ok(replies.length > 150, `${replies.length} publishes sent`);
    assert.ok(ok >= 35 && ok <= 85, `${ok} of ${replies.length} accepted in 3 s under a limit of 20 per second`);
    assert.equal(ok + limited.length, replies.length, 'every publish is accepted or user_rate_limited');
    for (const r of limited) assert.ok(typeof r.retryAfterMs === 'number' && r.retryAfterMs >= 1 && r.retryAfterMs <= 1000, JSON.stringify(r));
    // Many refusals in a row with WS_MAX_STRIKES=2: not strikes, both sockets are open.
    for (const c of [a!, b!]) assert.equal((await c.request({ type: 'ping' })).type, 'pong', 'many refusals in a row, no strike');
    assert.equal((await other.request({ type: 'publish', topic: 'ul', data: 'x', ephemeral: true })).status, 'ok', 'another user has its own window');
    assert.ok(await metricValue(gw, 'sluice_limit_rejections_total', '{reason="user_rate_limited"}') >= limited.length);
    for (const c of [a!, b!, other]) c.close();
  });
});

describe('the tenant upgrade window on one node', () => {
  test('WS_TENANT_CONNECT_LIMIT: past it 429 tenant_rate_limited with retryAfterMs and Retry-After; another tenant is not affected', async () => {
    const gw = await startGateway({ ...JWT, WS_TENANT_CONNECT_LIMIT: '5', WS_TENANT_CONNECT_WINDOW_MS: '2000' });
    try {
      const t = await token({ sub: 'tc', tenant: 'acme' });
      const results = [];
      for (let i = 0; i < 15; i++) results.push(await upgrade(gw, t));
      const accepted = results.filter((r) => r.status === 101).length;
      const refused = results.filter((r) => r.status === 429);
      assert.ok(accepted >= 3 && accepted <= 7, `${accepted} of 15 accepted under a limit of 5 per 2 s`);
      assert.equal(accepted + refused.length, 15);
      for (const r of refused) {
        const body = JSON.parse(r.body) as { reason: string; retryAfterMs: number };
        assert.equal(body.reason, 'tenant_rate_limited');
        assert.ok(body.retryAfterMs >= 1 && body.retryAfterMs <= 4000, r.body); // a sliding window frees its room within two windows
        assert.equal(r.retryAfter, String(Math.ceil(body.retryAfterMs / 1000)));
      }
      assert.equal((await upgrade(gw, await token({ sub: 'tc', tenant: 'other' }))).status, 101);
      assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="tenant_rate_limited"}'), refused.length);
    } finally {
      assert.equal(await gw.stop(), 0);
    }
  });
});

describe('user and tenant limits on two nodes sharing one Redis', () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  before(async () => {
    redis = await startRedis();
    const env = { ...JWT, REDIS_URL: redis.url, WS_MAX_USER_SOCKETS: '4', WS_USER_MSG_LIMIT: '50', WS_MAX_MESSAGES: '100000',
      WS_MAX_STRIKES: '100000', WS_TENANT_CONNECT_LIMIT: '10', WS_TENANT_CONNECT_WINDOW_MS: '3000' };
    // The socket cap test uses tenant cap-tenant: it makes more upgrades than acme's window (the window test's) would let through.
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    await Promise.all([ready(a!), ready(b!)]);
  });
  after(async () => {
    for (const gw of [a, b]) if (gw.alive) assert.equal(await gw.stop(), 0);
    await redis.stop();
  });

  test('the user publish window counts the user\'s sockets on both nodes together', async () => {
    const t = await token({ sub: 'cluster-pub', publish: ['*'] });
    const [ca, cb] = await Promise.all([Client.connect(a.url(), bearer(t)), Client.connect(b.url(), bearer(t))]);
    // About 200 a second for 3 s against 50 a second over both nodes: about 150 accepted.
    const replies = await paced([ca!, cb!], 5, 3000);
    const ok = replies.filter((r) => r.status === 'ok').length;
    assert.ok(ok >= 100 && ok <= 210, `${ok} of ${replies.length} accepted over two nodes in 3 s under a limit of 50 per second`);
    assert.equal(replies.filter((r) => r.reason === 'user_rate_limited').length, replies.length - ok);
    ca!.close();
    cb!.close();
  });

  test('the tenant upgrade window counts upgrades on both nodes together', async () => {
    const t = await token({ sub: 'tc-cluster', tenant: 'acme' });
    const results = [];
    for (let i = 0; i < 30; i++) results.push(await upgrade(i % 2 === 0 ? a : b, t));
    const accepted = results.filter((r) => r.status === 101).length;
    assert.ok(accepted >= 6 && accepted <= 14, `${accepted} of 30 accepted over two nodes under a limit of 10 per 3 s`);
    for (const r of results.filter((x) => x.status !== 101)) assert.equal((JSON.parse(r.body) as { reason: string }).reason, 'tenant_rate_limited');
  });

  test('the socket cap holds across nodes; a close on one frees a place on the other; a dead node stops counting', async () => {
    const t = await token({ sub: 'cluster-cap', tenant: 'cap-tenant' });
    const onA = await Promise.all([0, 1].map(() => Client.connect(a.url(), bearer(t))));
    const onB = await Promise.all([0, 1].map(() => Client.connect(b.url(), bearer(t))));
    for (const gw of [a, b]) {
      const r = await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${t}` } });
      assert.deepEqual([r.status, JSON.parse(r.body)], [429, { reason: 'too_many_sockets' }]);
    }
    onA[0]!.close();
    // The place freed on A is taken on B: A holds 1, B 3.
    let third: Client | undefined;
    for (let i = 0; i < 10 && third === undefined; i++) {
      third = await Client.connect(b.url(), bearer(t)).catch(() => undefined);
      if (third === undefined) await new Promise((r) => setTimeout(r, 300));
    }
    assert.ok(third !== undefined, 'the place freed on A was taken on B');
    assert.equal((await rawUpgrade(a.port, { headers: { authorization: `Bearer ${t}` } })).status, 429, 'at the cap again');
    // Node B dies with its three sockets: once its holder TTL (10 s) has passed they no longer count.
    const killed = Date.now();
    b.proc.kill('SIGKILL');
    await b.waitExit(5000);
    for (const c of [...onB, third!]) await c.closedBy(5000);
    // One attempt every 400 ms: the tenant's upgrade window (10 per 3 s) counts every attempt.
    const more: Client[] = [];
    const deadline = Date.now() + 20_000;
    while (more.length < 3 && Date.now() < deadline) {
      const c = await Client.connect(a.url(), bearer(t)).catch(() => undefined);
      if (c !== undefined) more.push(c);
      else await new Promise((r) => setTimeout(r, 400));
    }
    assert.equal(more.length, 3, 'the dead node\'s three places came free');
    assert.ok(Date.now() - killed >= 5000, 'the dead node\'s sockets counted for a while (they may have been open)');
    assert.equal((await rawUpgrade(a.port, { headers: { authorization: `Bearer ${t}` } })).status, 429, 'A alone: 1 + 3 = the cap');
    for (const c of [...onA.slice(1), ...more]) c.close();
  });
});
