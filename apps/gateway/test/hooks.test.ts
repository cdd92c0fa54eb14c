// The backend in the loop (issue 19): the connect hook (WS_AUTH=hook) with
// refresh, the subscribe hook with its cache, the publish hook, and the
// bounds every hook has (timeout, in-flight cap, breaker, answer size),
// against a real HTTP backend on a free port that can be slow, fail, hang
// and answer garbage.
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, startGateway } from './harness.ts';
import { HookBackend, type HookCall, type Rule } from './fixtures/hook-backend.ts';

const HOOK_SECRET = 'hook-secret-of-at-least-thirty-two-chars';

/** The identity the backend gives a token `u:<user>`; `room:*` and `chat:*` to join and publish. */
const admitting: Rule = (c) => {
  const token = String(c.body['token'] ?? '');
  if (c.body['hook'] === 'connect' || c.body['hook'] === 'refresh') {
    if (token === 'deny401') return { json: { refuse: { status: 401, message: 'session expired' } } };
    if (token === 'deny403') return { json: { refuse: { status: 403, message: 'banned "user"' } } };
    if (!token.startsWith('u:')) return { json: { refuse: { status: 401 } } };
    return { json: { user: token.slice(2), tenant: 'acme', topics: ['room:*', 'chat:*'], publish: ['chat:*', 'room:*'] } };
  }
  return { json: { allow: true } };
};

const connectAs = (gw: Gateway, user: string, extra: Record<string, string> = {}) =>
  Client.connect(`${gw.url()}?token=u:${encodeURIComponent(user)}`, { headers: extra });

describe('the connect hook (WS_AUTH=hook)', () => {
  let backend: HookBackend;
  let gw: Gateway;
  before(async () => {
    backend = await HookBackend.start();
    gw = await startGateway({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: backend.url('/connect'), WS_HOOK_TIMEOUT_MS: '400',
      WS_HOOK_BREAKER_FAILURES: '1000', WS_HOOK_SECRET: HOOK_SECRET, WS_WORKERS: '1' });
  });
  afterEach(() => {
    backend.release();
    backend.rule = admitting;
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await backend.stop();
  });

  test('the upgrade POSTs its identity material; the answer is the socket\'s identity and rights', async () => {
    backend.rule = admitting;
    const c = await Client.connect(`${gw.url()}?token=u:alice`, { headers: { cookie: 'sid=s3cr3t', origin: 'https://app.example.com', 'user-agent': 'hook-test' } });
    const call = backend.of('connect').at(-1)!;
    assert.equal(call.path, '/connect');
    assert.equal(call.headers['content-type'], 'application/json');
    assert.equal(call.headers['x-sluice-hook'], 'connect');
    assert.deepEqual({ ...call.body, node: undefined }, { hook: 'connect', node: undefined, ip: '127.0.0.1', origin: 'https://app.example.com',
      cookie: 'sid=s3cr3t', token: 'u:alice', userAgent: 'hook-test' });
    // Signed: HMAC-SHA256 over "<timestamp>.<body>".
    const ts = String(call.headers['x-sluice-timestamp']);
    assert.ok(Math.abs(Number(ts) - Date.now()) < 60_000);
    assert.equal(call.headers['x-sluice-signature'], `v1=${createHmac('sha256', HOOK_SECRET).update(`${ts}.${call.raw}`).digest('hex')}`);
    assert.equal(c.welcome.expiresAt, undefined, 'no expiresAt given: none in welcome');
    assert.equal((await c.request({ type: 'join', topic: 'room:1' })).status, 'ok');
    const no = await c.request({ type: 'join', topic: 'news' });
    assert.equal(no.status, 'error');
    assert.equal(no.reason, 'forbidden', 'the rights are the backend\'s topics');
    // The tenant is the backend's: an admin publish to tenant acme reaches the socket.
    const r = await gw.adminFetch('/v1/publish', { method: 'POST', body: JSON.stringify({ tenant: 'acme', topic: 'room:1', data: 'hi' }) });
    assert.equal(r.status, 200);
    assert.equal((await c.next((f) => f.type === 'event')).data, 'hi');
    c.close();
  });

  test('a refusal is 401 or 403 with the backend\'s message; a refusal without one has none', async () => {
    backend.rule = admitting;
    const r401 = await rawUpgrade(gw.port, { path: '/ws?token=deny401' });
    assert.equal(r401.status, 401);
    assert.deepEqual(JSON.parse(r401.body), { reason: 'unauthorized', message: 'session expired' });
    const r403 = await rawUpgrade(gw.port, { path: '/ws?token=deny403' });
    assert.equal(r403.status, 403);
    assert.deepEqual(JSON.parse(r403.body), { reason: 'forbidden', message: 'banned "user"' });
    const bare = await rawUpgrade(gw.port, { path: '/ws' });
    assert.equal(bare.status, 401);
    assert.deepEqual(JSON.parse(bare.body), { reason: 'unauthorized' });
    assert.equal(backend.of('connect').at(-1)!.body['token'], undefined, 'no token: none sent');
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="forbidden"}'), 1);
  });

  test('the start warns that without WS_ALLOWED_ORIGINS a foreign page could use a visitor\'s cookies', () => {
    assert.ok(gw.logs.some((l) => String(l['msg']).startsWith('WS_AUTH=hook without WS_ALLOWED_ORIGINS')));
  });

  test('every answer that is not the contract\'s fails the upgrade with 503 and Retry-After, counted, and the node goes on', async () => {
    const answers: [string, Rule][] = [
      ['not JSON', () => ({ raw: 'user=alice' })],
      ['a JSON array', () => ({ json: [] })],
      ['no user', () => ({ json: { tenant: 'acme' } })],
      ['a tenant that breaks the pattern', () => ({ json: { user: 'a', tenant: 'ac me/x' } })],
      ['100,000 topic patterns', () => ({ json: { user: 'a', topics: Array.from({ length: 100_000 }, (_, i) => `t${i}`) } })],
      ['a pattern that is not one', () => ({ json: { user: 'a', topics: ['room 1'] } })],
      ['an unknown field', () => ({ json: { user: 'a', admin: true } })],
      ['an expiry in the past', () => ({ json: { user: 'a', expiresAt: Date.now() - 1000 } })],
      ['a refusal with status 500', () => ({ json: { refuse: { status: 500 } } })],
      ['a 10 MB answer', () => ({ raw: Buffer.alloc(10 * 1024 * 1024, 0x20) })],
      ['HTTP 500', () => ({ json: { user: 'a' }, status: 500 })],
      ['HTTP 404', () => ({ json: {}, status: 404 })],
    ];
    const before = await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="bad_answer"}');
    const beforeStatus = await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="bad_status"}');
    for (const [what, rule] of answers) {
      backend.rule = rule;
      const r = await rawUpgrade(gw.port, { path: '/ws?token=u:a' });
      assert.equal(r.status, 503, what);
      assert.match(r.headers['retry-after'] ?? '', /^[1-9][0-9]*$/, what);
      const body = JSON.parse(r.body) as { reason: string; retryAfterMs: number };
      assert.equal(body.reason, 'unavailable', what);
      assert.ok(body.retryAfterMs > 0, what);
    }
    assert.equal(await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="bad_answer"}') - before, 10);
    assert.equal(await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="bad_status"}') - beforeStatus, 2);
    backend.rule = admitting;
    const c = await connectAs(gw, 'after-garbage');
    assert.equal((await c.request({ type: 'ping' })).type, 'pong', 'the node serves after every bad answer');
    c.close();
  });

  test('refresh asks the same hook: a new identity for the same user moves the expiry; another user or a refusal changes nothing', async () => {
    const exp = Date.now() + 60_000;
    backend.rule = (c) => {
      const t = String(c.body['token']);
      if (t === 'later') return { json: { user: 'bob', tenant: 'acme', topics: ['room:*'], expiresAt: exp + 60_000 } };
      if (t === 'other') return { json: { user: 'eve', tenant: 'acme' } };
      if (t === 'no') return { json: { refuse: { status: 401, message: 'logged out' } } };
      return { json: { user: 'bob', tenant: 'acme', topics: ['room:*', 'chat:*'], expiresAt: exp } };
    };
    const c = await Client.connect(`${gw.url()}?token=first`);
    assert.equal(c.welcome.expiresAt, exp);
    assert.equal((await c.request({ type: 'join', topic: 'chat:1' })).status, 'ok');
    const ok = await c.request({ type: 'refresh', ref: 'r1', token: 'later' });
    assert.deepEqual([ok.status, ok.data], ['ok', { expiresAt: exp + 60_000 }]);
    const refresh = backend.of('refresh').at(-1)!;
    assert.deepEqual([refresh.body['user'], refresh.body['tenant'], refresh.body['token'], refresh.body['connectionId']],
      ['bob', 'acme', 'later', c.welcome.connectionId]);
    const gone = await c.next((f) => f.type === 'unsubscribed');
    assert.equal(gone.topic, 'chat:1', 'the new rights no longer allow chat:*');
    const other = await c.request({ type: 'refresh', token: 'other' });
    assert.deepEqual([other.status, other.reason], ['error', 'forbidden']);
    const no = await c.request({ type: 'refresh', token: 'no' });
    assert.deepEqual([no.status, no.reason, no.message], ['error', 'unauthorized', 'logged out']);
    backend.rule = () => ({ raw: 'garbage' });
    const down = await c.request({ type: 'refresh', token: 'later' });
    assert.deepEqual([down.status, down.reason], ['error', 'unavailable']);
    assert.equal((await c.request({ type: 'join', topic: 'room:2' })).status, 'ok', 'the socket still has the rights of the last good refresh');
    c.close();
  });
});

describe('a backend that hangs or fails: timeout, breaker, recovery', () => {
  let backend: HookBackend;
  let gw: Gateway;
  const TIMEOUT = 300;
  const BREAKER_MS = 1500;
  before(async () => {
    backend = await HookBackend.start();
    backend.rule = admitting;
    gw = await startGateway({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: backend.url('/connect'), WS_HOOK_TIMEOUT_MS: String(TIMEOUT),
      WS_HOOK_BREAKER_FAILURES: '3', WS_HOOK_BREAKER_MS: String(BREAKER_MS), WS_WORKERS: '1',
      WS_PUBLISH_HOOK_URL: backend.url('/publish'), WS_PUBLISH_HOOK_TOPICS: 'chat:*' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await backend.stop();
  });

  test('upgrades answer 503 with Retry-After within the timeout, the breaker then answers at once, and it recovers by itself', async () => {
    backend.rule = () => ({ hang: true });
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      const r = await rawUpgrade(gw.port, { path: '/ws?token=u:x' });
      const took = Date.now() - t0;
      assert.equal(r.status, 503);
      assert.ok(Number(r.headers['retry-after']) >= 1);
      assert.ok(took >= TIMEOUT - 20 && took < TIMEOUT + 2000, `answered after ${took} ms (timeout ${TIMEOUT})`);
    }
    assert.equal(await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="timeout"}'), 3);
    // Open: the backend is not asked, and the answer says when to come back (at least the breaker's time left).
    const asked = backend.calls.length;
    const open = await rawUpgrade(gw.port, { path: '/ws?token=u:x' });
    assert.equal(open.status, 503);
    assert.ok((JSON.parse(open.body) as { retryAfterMs: number }).retryAfterMs >= 500);
    assert.equal(backend.calls.length, asked, 'an open breaker does not call the backend');
    assert.equal(await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="breaker_open"}'), 1);
    assert.equal(await metricValue(gw, 'sluice_hook_breaker_opened_total', '{hook="connect"}'), 1);
    backend.release();
    backend.rule = admitting;
    // Nobody resets anything: after BREAKER_MS one upgrade probes, succeeds, and the breaker closes.
    let c: Client | undefined;
    await eventually(async () => {
      c = await connectAs(gw, 'back').catch(() => undefined);
      return c !== undefined;
    }, BREAKER_MS + 5000);
    assert.equal((await c!.request({ type: 'ping' })).type, 'pong');
    c!.close();
  });

  test('a publish the backend hangs on holds neither the shard nor the socket\'s other frames nor other sockets', async () => {
    backend.rule = admitting;
    const a = await connectAs(gw, 'a');
    const b = await connectAs(gw, 'b');
    backend.rule = (c) => (c.body['hook'] === 'publish' ? { hang: true } : admitting(c));
    a.send({ type: 'publish', ref: 'stuck', topic: 'chat:1', data: 1 });
    await eventually(() => backend.of('publish').length === 1);
    // The same socket's ping, join and a publish to a topic without the hook... the ping and join are answered now;
    assert.equal((await a.request({ type: 'ping' }, 1000)).type, 'pong');
    assert.equal((await a.request({ type: 'join', topic: 'room:9' }, 1000)).status, 'ok');
    // another socket publishes freely.
    assert.equal((await b.request({ type: 'publish', topic: 'room:9', data: 'b' }, 1000)).status, 'ok');
    // The stuck publish fails at the timeout with unavailable, not a strike.
    const stuck = await a.next((f) => f.ref === 'stuck', TIMEOUT + 3000);
    assert.deepEqual([stuck.status, stuck.reason], ['error', 'unavailable']);
    assert.ok(typeof stuck.retryAfterMs === 'number');
    a.close();
    b.close();
    backend.release();
  });
});

describe('the in-flight cap (WS_HOOK_MAX_INFLIGHT), across the node\'s shards', () => {
  let backend: HookBackend;
  let gw: Gateway;
  before(async () => {
    backend = await HookBackend.start();
    gw = await startGateway({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: backend.url('/connect'), WS_HOOK_MAX_INFLIGHT: '3',
      WS_HOOK_BREAKER_FAILURES: '1000', WS_HOOK_TIMEOUT_MS: '5000', WS_WORKERS: '2' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await backend.stop();
  });

  test('with three calls waiting on the node, a fourth upgrade is refused at once with 503, and the places come back', async () => {
    backend.rule = () => ({ hang: true });
    const waiting = Array.from({ length: 3 }, () => rawUpgrade(gw.port, { path: '/ws?token=u:w' }));
    await eventually(() => backend.calls.length === 3);
    const t0 = Date.now();
    const fourth = await rawUpgrade(gw.port, { path: '/ws?token=u:w' });
    assert.equal(fourth.status, 503);
    assert.ok(Date.now() - t0 < 2000, 'refused without waiting for the backend');
    assert.equal(backend.calls.length, 3, 'the fourth never reached the backend');
    assert.equal(await metricValue(gw, 'sluice_hook_connect_calls_total', '{outcome="overloaded"}'), 1);
    // The backend drops the three: they fail (error), and their places are free again.
    backend.release();
    for (const r of await Promise.all(waiting)) assert.equal(r.status, 503);
    backend.rule = admitting;
    const ok = await Promise.all(Array.from({ length: 3 }, (_, i) => connectAs(gw, `after${i}`)));
    for (const c of ok) c.close();
  });
});

describe('the subscribe hook and its cache', () => {
  let backend: HookBackend;
  let gw: Gateway;
  before(async () => {
    backend = await HookBackend.start();
    gw = await startGateway({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: backend.url('/connect'), WS_SUBSCRIBE_HOOK_URL: backend.url('/subscribe'),
      WS_SUBSCRIBE_HOOK_TOPICS: 'room:*', WS_WORKERS: '1', WS_HOOK_TIMEOUT_MS: '2000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await backend.stop();
  });

  const subscribeRule = (over: (c: HookCall) => ReturnType<Rule> | undefined = () => undefined): Rule => (c) => {
    if (c.body['hook'] !== 'subscribe') return admitting(c);
    const mine = over(c);
    if (mine !== undefined) return mine;
    const topic = String(c.body['topic']);
    if (topic === 'room:secret') return { json: { allow: false, message: 'not a member of room:secret', cacheMs: 60_000 } };
    if (topic === 'room:fresh') return { json: { allow: true, cacheMs: 0 } };
    return { json: { allow: true, cacheMs: 60_000 } };
  };

  test('allow and deny (forbidden, with the backend\'s message); the request names who and where', async () => {
    backend.rule = subscribeRule();
    const c = await connectAs(gw, 'ann');
    assert.equal((await c.request({ type: 'join', topic: 'room:1' })).status, 'ok');
    const call = backend.of('subscribe').at(-1)!;
    assert.deepEqual([call.body['tenant'], call.body['user'], call.body['topic'], call.body['connectionId']], ['acme', 'ann', 'room:1', c.welcome.connectionId]);
    const no = await c.request({ type: 'join', topic: 'room:secret' });
    assert.deepEqual([no.status, no.reason, no.message], ['error', 'forbidden', 'not a member of room:secret']);
    // A topic outside WS_SUBSCRIBE_HOOK_TOPICS does not ask.
    const n = backend.of('subscribe').length;
    assert.equal((await c.request({ type: 'join', topic: 'chat:1' })).status, 'ok');
    assert.equal(backend.of('subscribe').length, n);
    c.close();
  });

  test('a decision is cached per (user, topic) for cacheMs; cacheMs 0 asks every time; another user asks again', async () => {
    backend.rule = subscribeRule();
    const c1 = await connectAs(gw, 'cat');
    const c2 = await connectAs(gw, 'cat');
    const c3 = await connectAs(gw, 'dog');
    const asks = (topic: string, user: string) => backend.of('subscribe').filter((x) => x.body['topic'] === topic && x.body['user'] === user).length;
    assert.equal((await c1.request({ type: 'join', topic: 'room:c' })).status, 'ok');
    assert.equal((await c2.request({ type: 'join', topic: 'room:c' })).status, 'ok');
    assert.equal((await c1.request({ type: 'leave', topic: 'room:c' })).status, 'ok');
    assert.equal((await c1.request({ type: 'join', topic: 'room:c' })).status, 'ok');
    assert.equal(asks('room:c', 'cat'), 1, 'three joins of one user, one call');
    assert.equal((await c3.request({ type: 'join', topic: 'room:c' })).status, 'ok');
    assert.equal(asks('room:c', 'dog'), 1);
    // A cached denial is answered from the cache too.
    assert.equal((await c1.request({ type: 'join', topic: 'room:secret' })).reason, 'forbidden');
    assert.equal((await c2.request({ type: 'join', topic: 'room:secret' })).reason, 'forbidden');
    assert.equal(asks('room:secret', 'cat'), 1);
    for (let i = 0; i < 3; i++) {
      assert.equal((await c1.request({ type: 'join', topic: 'room:fresh' })).status, 'ok');
      assert.equal((await c1.request({ type: 'leave', topic: 'room:fresh' })).status, 'ok');
    }
    assert.equal(asks('room:fresh', 'cat'), 3);
    for (const c of [c1, c2, c3]) c.close();
  });

  test('a leave while the backend decides cancels the join; a second join waits for the first answer; other frames go on', async () => {
    backend.rule = subscribeRule(() => ({ json: { allow: true, cacheMs: 0 }, delayMs: 300 }));
    const c = await connectAs(gw, 'eli');
    c.send({ type: 'join', ref: 'j1', topic: 'room:slow' });
    c.send({ type: 'join', ref: 'j2', topic: 'room:slow' });
    assert.equal((await c.request({ type: 'ping' }, 250)).type, 'pong', 'the socket\'s ping is not behind the join');
    const left = await c.request({ type: 'leave', topic: 'room:slow' }, 250);
    assert.equal(left.status, 'ok');
    const j1 = await c.next((f) => f.ref === 'j1', 3000);
    assert.equal(j1.status, 'ok');
    const j2 = await c.next((f) => f.ref === 'j2', 3000);
    assert.equal(j2.status, 'ok');
    // Both joins came before the leave: as without the hook, the socket ends up not joined.
    assert.equal((await c.request({ type: 'leave', topic: 'room:slow' })).reason, 'not_joined');
    assert.equal(backend.of('subscribe').filter((x) => x.body['topic'] === 'room:slow').length, 1, 'the second join did not ask again');
    c.close();
  });

  test('a refresh that takes the right away while the backend decides makes the join forbidden', async () => {
    backend.rule = (c) => {
      if (c.body['hook'] === 'subscribe') return { json: { allow: true }, delayMs: 300 };
      if (c.body['hook'] === 'refresh') return { json: { user: 'gus', tenant: 'acme', topics: ['chat:*'] } };
      return admitting(c);
    };
    const c = await connectAs(gw, 'gus');
    c.send({ type: 'join', ref: 'late', topic: 'room:narrowed' });
    assert.equal((await c.request({ type: 'refresh', token: 'narrow' }, 250)).status, 'ok');
    const j = await c.next((f) => f.ref === 'late', 3000);
    assert.deepEqual([j.status, j.reason], ['error', 'forbidden']);
    assert.equal((await c.request({ type: 'leave', topic: 'room:narrowed' })).reason, 'not_joined');
    c.close();
  });

  test('an operator\'s unsubscribe forgets the cached allow: the next join asks the backend again', async () => {
    backend.rule = subscribeRule();
    const c = await connectAs(gw, 'hal');
    assert.equal((await c.request({ type: 'join', topic: 'room:kick' })).status, 'ok');
    const r = await gw.adminFetch('/v1/unsubscribe', { method: 'POST', body: JSON.stringify({ tenant: 'acme', user: 'hal', topic: 'room:kick' }) });
    assert.equal(r.status, 202);
    assert.equal((await c.next((f) => f.type === 'unsubscribed')).reason, 'removed');
    backend.rule = subscribeRule((x) => (x.body['topic'] === 'room:kick' ? { json: { allow: false, message: 'kicked' } } : undefined));
    const again = await c.request({ type: 'join', topic: 'room:kick' });
    assert.deepEqual([again.status, again.message], ['error', 'kicked']);
    assert.equal(backend.of('subscribe').filter((x) => x.body['topic'] === 'room:kick').length, 2);
    c.close();
  });

  test('a failing subscribe backend answers unavailable (no strike) and the join can be retried', async () => {
    backend.rule = subscribeRule(() => ({ raw: '<html>', status: 502 }));
    const c = await connectAs(gw, 'fay');
    const r = await c.request({ type: 'join', topic: 'room:down' });
    assert.deepEqual([r.status, r.reason], ['error', 'unavailable']);
    backend.rule = subscribeRule();
    assert.equal((await c.request({ type: 'join', topic: 'room:down' })).status, 'ok');
    c.close();
  });
});

describe('the publish hook', () => {
  let backend: HookBackend;
  let gw: Gateway;
  before(async () => {
    backend = await HookBackend.start();
    gw = await startGateway({ WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: backend.url('/connect'), WS_PUBLISH_HOOK_URL: backend.url('/publish'),
      WS_PUBLISH_HOOK_TOPICS: 'chat:*', WS_WORKERS: '2', WS_MAX_STRIKES: '4', WS_HOOK_BREAKER_FAILURES: '3' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await backend.stop();
  });

  const publishRule = (c: HookCall): ReturnType<Rule> => {
    if (c.body['hook'] !== 'publish') return admitting(c);
    const data = c.body['data'] as { text?: string; slow?: boolean } | undefined;
    if (data?.text === 'spam') return { json: { allow: false, message: 'looks like spam' } };
    if (data?.text !== undefined && data.text.startsWith('shout')) return { json: { allow: true, data: { text: data.text.toUpperCase() } } };
    return { json: { allow: true }, delayMs: data?.slow === true ? 300 : undefined };
  };

  test('accepted, replaced or refused; the ack follows the backend; the idempotency key reaches it', async () => {
    backend.rule = publishRule;
    const sub = await connectAs(gw, 'sub');
    const pub = await connectAs(gw, 'pub');
    assert.equal((await sub.request({ type: 'join', topic: 'chat:1' })).status, 'ok');
    const ok = await pub.request({ type: 'publish', topic: 'chat:1', data: { text: 'hello' }, idempotencyKey: 'k-1' });
    assert.equal(ok.status, 'ok');
    const call = backend.of('publish').at(-1)!;
    assert.deepEqual([call.body['user'], call.body['tenant'], call.body['topic'], call.body['class'], call.body['idempotencyKey'], call.body['data']],
      ['pub', 'acme', 'chat:1', 'durable', 'k-1', { text: 'hello' }]);
    assert.equal(call.headers['idempotency-key'], 'k-1');
    assert.deepEqual((await sub.next((f) => f.type === 'event')).data, { text: 'hello' });
    assert.equal((await pub.request({ type: 'publish', topic: 'chat:1', data: { text: 'shout it' } })).status, 'ok');
    assert.deepEqual((await sub.next((f) => f.type === 'event')).data, { text: 'SHOUT IT' }, 'subscribers get the backend\'s data');
    const no = await pub.request({ type: 'publish', topic: 'chat:1', data: { text: 'spam' } });
    assert.deepEqual([no.status, no.reason, no.message], ['error', 'forbidden', 'looks like spam']);
    // A topic outside WS_PUBLISH_HOOK_TOPICS does not ask.
    const n = backend.of('publish').length;
    assert.equal((await pub.request({ type: 'publish', topic: 'room:1', data: 1 })).status, 'ok');
    assert.equal(backend.of('publish').length, n);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(sub.takeEvents('chat:1').length, 0, 'the refused publish was not delivered');
    sub.close();
    pub.close();
  });

  test('one socket\'s publishes reach the broker in frame order behind a slow answer', async () => {
    backend.rule = publishRule;
    const sub = await connectAs(gw, 'sub2');
    const pub = await connectAs(gw, 'pub2');
    assert.equal((await sub.request({ type: 'join', topic: 'chat:order' })).status, 'ok');
    pub.send({ type: 'publish', ref: 'p1', topic: 'chat:order', data: { n: 1, slow: true } });
    pub.send({ type: 'publish', ref: 'p2', topic: 'chat:order', data: { n: 2 } });
    pub.send({ type: 'publish', ref: 'p3', topic: 'chat:order', data: { n: 3 }, ephemeral: true });
    // The acks, in the order they arrived (the client queues frames as they come).
    await eventually(() => pub.frames.filter((f) => f.type === 'reply').length === 3, 3000);
    assert.deepEqual(pub.frames.filter((f) => f.type === 'reply').map((f) => [f.ref, f.status]), [['p1', 'ok'], ['p2', 'ok'], ['p3', 'ok']]);
    await eventually(() => sub.frames.filter((f) => f.type === 'event').length === 3);
    assert.deepEqual(sub.takeEvents('chat:order').map((f) => (f.data as { n: number }).n), [1, 2, 3]);
    // A publish to a topic without the hook, sent behind one the backend holds, waits its turn: nothing answers it until the first is decided.
    backend.rule = (c) => (c.body['hook'] === 'publish' ? { hang: true } : admitting(c));
    pub.send({ type: 'publish', ref: 'q1', topic: 'chat:order', data: { n: 4 } });
    pub.send({ type: 'publish', ref: 'q2', topic: 'room:order', data: { n: 5 } });
    await eventually(() => backend.of('publish').some((x) => (x.body['data'] as { n?: number }).n === 4));
    assert.equal((await pub.request({ type: 'ping' })).type, 'pong');
    assert.equal(pub.frames.some((f) => f.ref === 'q2'), false, 'q2 waits behind q1');
    backend.release();
    const q1 = await pub.next((f) => f.ref === 'q1', 5000);
    assert.deepEqual([q1.status, q1.reason], ['error', 'unavailable']);
    assert.equal((await pub.next((f) => f.ref === 'q2', 5000)).status, 'ok');
    sub.close();
    pub.close();
  });

  test('publishes the backend refuses are strikes: a socket that keeps sending them is closed as abusive', async () => {
    backend.rule = publishRule;
    const pub = await connectAs(gw, 'spammer');
    for (let i = 0; i < 3; i++) assert.equal((await pub.request({ type: 'publish', topic: 'chat:1', data: { text: 'spam' } })).reason, 'forbidden');
    pub.send({ type: 'publish', topic: 'chat:1', data: { text: 'spam' } });
    const closed = await pub.closedBy(3000);
    assert.equal(closed.code, 1008);
  });

  test('an idempotency key that cannot be a header goes in the body alone, and the backend is still asked', async () => {
    backend.rule = publishRule;
    const pub = await connectAs(gw, 'intl');
    for (let i = 0; i < 6; i++) {
      assert.equal((await pub.request({ type: 'publish', topic: 'chat:1', data: { text: 'x' }, idempotencyKey: `日本${i}` })).status, 'ok');
    }
    const call = backend.of('publish').at(-1)!;
    assert.deepEqual([call.body['idempotencyKey'], call.headers['idempotency-key']], ['日本5', undefined]);
    pub.close();
  });
});
