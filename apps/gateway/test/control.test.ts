// Server-side control on one node, two shards (PROTOCOL.md, additions of
// 2026-12): revocation (4003, 401 token_revoked, refresh refused),
// disconnect (1008, or 4000 with retryAfterMs), server-side subscribe and
// unsubscribe (subscribed / unsubscribed frames), every bad admin body
// answered 400 with a message and nothing changed, and a flood of admin calls
// answered. The cluster-wide half is control-cluster.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, eventually, type Gateway, metricValue, rawUpgrade, startGateway } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

/** `n` sockets of one token, until both shards hold at least one of them. */
async function socketsOnBothShards(gw: Gateway, t: string, n = 4): Promise<Client[]> {
  const out: Client[] = [];
  for (let i = 0; i < 40 && (out.length < n || new Set(out.map((c) => c.shard)).size < 2); i++) {
    out.push(await Client.connect(gw.url(), bearer(t)));
  }
  assert.equal(new Set(out.map((c) => c.shard)).size, 2, 'the sockets landed on both shards');
  return out;
}

async function alive(c: Client): Promise<void> {
  assert.equal((await c.request({ type: 'ping' })).type, 'pong');
}

describe('server-side control, one node with two shards (WS_AUTH=jwt)', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_MAX_JOINS: '3', WS_MAX_MESSAGES: '100000', WS_RETRY_AFTER_MIN_MS: '1000',
      WS_RETRY_AFTER_MAX_MS: '3000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
  });

  test('revoke by user: every socket of the user closes with 4003, its old tokens get 401 token_revoked, a newer one works', async () => {
    const old = await token({ sub: 'rv-user', topics: ['*'] });
    const sockets = await socketsOnBothShards(gw, old, 5);
    const other = await Client.connect(gw.url(), bearer(await token({ sub: 'rv-other' })));
    const res = await gw.adminPost('/v1/revoke', { tenant: 'default', user: 'rv-user' });
    assert.equal(res.status, 202);
    assert.deepEqual(await res.json(), { status: 'revoked' });
    for (const c of sockets) {
      const closed = await c.closedBy(1000);
      assert.equal(closed.code, 4003);
      assert.deepEqual(JSON.parse(closed.reason), { reason: 'token_revoked' });
    }
    await alive(other);
    const refused = await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${old}` } });
    assert.equal(refused.status, 401);
    assert.deepEqual(JSON.parse(refused.body), { reason: 'token_revoked' });
    // A token issued after the revocation's second is the user's way back in.
    const fresh = await token({ sub: 'rv-user' }, Math.floor(Date.now() / 1000) + 1);
    const back = await Client.connect(gw.url(), bearer(fresh));
    await alive(back);
    // ...and a refresh to a token issued before it is refused, a strike, with the socket left open.
    const r = await back.request({ type: 'refresh', token: old });
    assert.equal(r.status, 'error');
    assert.equal(r.reason, 'unauthorized');
    assert.match(String(r.message), /revoked/);
    await alive(back);
    assert.equal(await metricValue(gw, 'sluice_admin_sockets_total', '{action="revoke"}'), sockets.length);
    assert.equal(await metricValue(gw, 'sluice_clients_closed_total', '{reason="token_revoked"}'), sockets.length);
    assert.equal(await metricValue(gw, 'sluice_revocations_applied_total'), 1);
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="token_revoked"}'), 1);
    const line = gw.logs.find((l) => l.msg === 'admin action carried out on this node' && l.user === 'rv-user');
    assert.equal(line?.sockets, sockets.length);
    assert.equal(line?.action, 'revoke');
    assert.ok(gw.logs.some((l) => l.msg === 'admin: revoke' && l.user === 'rv-user' && l.from !== undefined), 'who asked is logged');
    assert.ok(!gw.logs.some((l) => JSON.stringify(l).includes(old)), 'no token in any line');
    back.close();
    other.close();
  });

  test('revoke by jti: only the socket on that token closes; that token is refused at the upgrade', async () => {
    const a = await token({ sub: 'jti-user', jti: 'token-a' });
    const b = await token({ sub: 'jti-user', jti: 'token-b' });
    const ca = await Client.connect(gw.url(), bearer(a));
    const cb = await Client.connect(gw.url(), bearer(b));
    assert.equal((await gw.adminPost('/v1/revoke', { user: undefined, jti: 'token-a' })).status, 202);
    assert.equal((await ca.closedBy(1000)).code, 4003);
    await alive(cb);
    assert.equal((await rawUpgrade(gw.port, { headers: { authorization: `Bearer ${a}` } })).status, 401);
    const again = await Client.connect(gw.url(), bearer(b));
    await alive(again);
    cb.close();
    again.close();
  });

  test('disconnect: 1008 disconnected by default, 4000 with a jittered retryAfterMs with reconnect, one socket by connectionId', async () => {
    const t = await token({ sub: 'dc-user' });
    const stay = await socketsOnBothShards(gw, t, 2);
    assert.equal((await gw.adminPost('/v1/disconnect', { tenant: 'default', user: 'dc-user' })).status, 202);
    for (const c of stay) {
      const closed = await c.closedBy(1000);
      assert.equal(closed.code, 1008);
      assert.deepEqual(JSON.parse(closed.reason), { reason: 'disconnected' });
    }
    const come = await socketsOnBothShards(gw, t, 2);
    const res = await gw.adminPost('/v1/disconnect', { user: 'dc-user', reconnect: true });
    assert.deepEqual(await res.json(), { status: 'accepted' });
    for (const c of come) {
      const closed = await c.closedBy(1000);
      assert.equal(closed.code, 4000);
      const reason = JSON.parse(closed.reason) as { reason: string; retryAfterMs: number };
      assert.equal(reason.reason, 'disconnected');
      assert.ok(reason.retryAfterMs >= 1000 && reason.retryAfterMs <= 3000, `retryAfterMs ${reason.retryAfterMs} within the retry bounds`);
    }
    const pair = await socketsOnBothShards(gw, t, 2);
    const [one, two] = pair;
    // With a tenant, only a socket of that tenant is closed.
    assert.equal((await gw.adminPost('/v1/disconnect', { connectionId: one!.welcome.connectionId, tenant: 'acme' })).status, 202);
    await alive(one!);
    assert.equal((await gw.adminPost('/v1/disconnect', { connectionId: one!.welcome.connectionId, tenant: 'default' })).status, 202);
    assert.equal((await one!.closedBy(1000)).code, 1008);
    await alive(two!);
    assert.equal((await gw.adminPost('/v1/disconnect', { connectionId: 'ffffffff.0.0.zz' })).status, 202, 'nobody matched: still accepted');
    await alive(two!);
    assert.equal(await metricValue(gw, 'sluice_admin_sockets_total', '{action="disconnect"}'), stay.length + come.length + 1);
    for (const c of pair.slice(1)) c.close();
  });

  test('subscribe: the user\'s sockets join whatever their rights, get subscribed before any event, keep it over a refresh', async () => {
    const t = await token({ sub: 'sub-user', topics: ['mine:*'] });
    const sockets = await socketsOnBothShards(gw, t, 3);
    // One socket is at WS_MAX_JOINS (3): it is skipped.
    const full = sockets[0]!;
    for (const topic of ['mine:1', 'mine:2', 'mine:3']) assert.equal((await full.request({ type: 'join', topic })).status, 'ok');
    // Events flow on room:42 all along: the subscribed frame must still come before the first of them.
    const publisher = await Client.connect(gw.url(), bearer(await token({ sub: 'sub-publisher', publish: ['*'] })));
    let flowing = true;
    const flow = (async () => {
      for (let n = 0; flowing; n++) await publisher.request({ type: 'publish', topic: 'room:42', data: n, ephemeral: true });
    })();
    const res = await gw.adminPost('/v1/subscribe', { tenant: 'default', user: 'sub-user', topic: 'room:42' });
    assert.deepEqual([res.status, await res.json()], [202, { status: 'accepted' }]);
    const joined = sockets.slice(1);
    for (const c of joined) {
      await eventually(() => c.frames.some((f) => f.type === 'event' && f.topic === 'room:42'), 2000);
      const first = c.frames.find((f) => f.topic === 'room:42');
      assert.deepEqual(first, { type: 'subscribed', topic: 'room:42' }, 'subscribed comes before any event of the topic');
    }
    flowing = false;
    await flow;
    publisher.close();
    assert.equal((await gw.adminPost('/v1/publish', { topic: 'room:42', data: 'hello' })).status, 200);
    for (const c of joined) assert.equal((await c.next((f) => f.type === 'event' && f.data === 'hello')).topic, 'room:42');
    assert.ok(!full.frames.some((f) => f.type === 'subscribed'), 'the socket at WS_MAX_JOINS was skipped');
    // A refresh whose rights do not name room:42 does not take the operator's subscription away.
    const c = joined[0]!;
    assert.equal((await c.request({ type: 'refresh', token: await token({ sub: 'sub-user', topics: ['mine:*'] }) })).status, 'ok');
    assert.ok(!c.frames.some((f) => f.type === 'unsubscribed'));
    // Its own leave works as for any joined topic.
    assert.equal((await c.request({ type: 'leave', topic: 'room:42' })).status, 'ok');
    const unsub = await gw.adminPost('/v1/unsubscribe', { user: 'sub-user', topic: 'room:42' });
    assert.equal(unsub.status, 202);
    const left = joined[1]!;
    for (const other of joined.slice(1)) {
      assert.deepEqual(await other.next((f) => f.type === 'unsubscribed', 1000), { type: 'unsubscribed', topic: 'room:42', reason: 'removed' });
    }
    // Watchers on both shards: once each has the next event, a socket still joined would have it too.
    const watchers = await socketsOnBothShards(gw, await token({ sub: 'sub-watcher', topics: ['*'] }), 2);
    for (const w of watchers) assert.equal((await w.request({ type: 'join', topic: 'room:42' })).status, 'ok');
    assert.equal((await gw.adminPost('/v1/publish', { topic: 'room:42', data: 'after' })).status, 200);
    for (const w of watchers) await w.next((f) => f.type === 'event' && f.data === 'after');
    for (const w of watchers) w.close();
    for (const other of joined) assert.ok(!other.frames.some((f) => f.type === 'event' && f.data === 'after'), 'no event after the unsubscribe');
    assert.equal((await left.request({ type: 'leave', topic: 'room:42' })).reason, 'not_joined');
    assert.equal(await metricValue(gw, 'sluice_admin_sockets_total', '{action="subscribe"}'), joined.length);
    assert.equal(await metricValue(gw, 'sluice_admin_sockets_total', '{action="unsubscribe"}'), joined.length - 1,
      'the socket that had left was not counted');
    for (const s of sockets) s.close();
  });

  test('subscribe on a topic the socket joined itself sends nothing, and a refresh then keeps it', async () => {
    const c = await Client.connect(gw.url(), bearer(await token({ sub: 'own-join', topics: ['room:*'] })));
    assert.equal((await c.request({ type: 'join', topic: 'room:own' })).status, 'ok');
    assert.equal((await gw.adminPost('/v1/subscribe', { user: 'own-join', topic: 'room:own' })).status, 202);
    assert.equal((await c.request({ type: 'refresh', token: await token({ sub: 'own-join', topics: [] }) })).status, 'ok');
    assert.ok(!c.frames.some((f) => f.type === 'subscribed' || f.type === 'unsubscribed'), JSON.stringify(c.frames));
    assert.equal((await c.request({ type: 'leave', topic: 'room:own' })).status, 'ok', 'still joined');
    c.close();
  });

    test('every bad admin body gets 400 with a message and changes nothing', async () => {
    const t = await token({ sub: 'bad-input' });
    const [c] = await socketsOnBothShards(gw, t, 2);
    const cases: [string, unknown, RegExp][] = [
      ['/v1/revoke', {}, /exactly one of user .* and jti/],
      ['/v1/revoke', { tenant: 'default' }, /exactly one of user/],
      ['/v1/revoke', { user: 'bad-input', jti: 'x' }, /exactly one/],
      ['/v1/revoke', { user: 'x'.repeat(10 * 1024) }, /user must be a string of 1 to 256 characters/],
      ['/v1/revoke', { user: '' }, /user must be/],
      ['/v1/revoke', { user: 'bad\u0000input' }, /without control characters/],
      ['/v1/revoke', { user: 42 }, /user must be/],
      ['/v1/revoke', { user: 'bad-input', usr: 'x' }, /unknown field "usr"/],
      ['/v1/revoke', { tenant: 'no spaces', user: 'bad-input' }, /tenant must match/],
      ['/v1/disconnect', {}, /exactly one of user and connectionId/],
      ['/v1/disconnect', { user: 'bad-input', reconnect: 'yes' }, /reconnect must be true or false/],
      ['/v1/disconnect', { connectionId: '../etc' }, /connectionId must be/],
      ['/v1/subscribe', { user: 'bad-input' }, /topic must match/],
      ['/v1/subscribe', { user: 'bad-input', topic: 'has space' }, /topic must match/],
      ['/v1/subscribe', { user: 'bad-input', topic: '$user' }, /topic must match/],
      ['/v1/unsubscribe', { topic: 'room:1' }, /user must be/],
      ['/v1/unsubscribe', [1, 2], /body must be a JSON object/],
      ['/v1/disconnect', 'not json', /not valid JSON/],
      ['/v1/disconnect', 'null', /body must be a JSON object/],
    ];
    for (const [path, body, message] of cases) {
      const res = await gw.adminPost(path, body);
      const got = (await res.json()) as { reason: string; message: string };
      assert.equal(res.status, 400, `${path} ${JSON.stringify(body).slice(0, 80)}`);
      assert.equal(got.reason, 'bad_request');
      assert.match(got.message, message, `${path} ${JSON.stringify(body).slice(0, 80)}`);
    }
    const big = await gw.adminPost('/v1/revoke', { user: 'bad-input', pad: 'x'.repeat(20_000) });
    assert.equal(big.status, 413);
    assert.equal(((await big.json()) as { reason: string }).reason, 'payload_too_large');
    const wrong = await gw.adminFetch('/v1/revoke');
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get('allow'), 'POST');
    assert.equal(((await wrong.json()) as { reason: string }).reason, 'method_not_allowed');
    const missing = await gw.adminFetch('/v1/nothing-here');
    assert.equal(missing.status, 404);
    assert.equal(typeof ((await missing.json()) as { message: unknown }).message, 'string');
    await alive(c!);
    assert.equal(await metricValue(gw, 'sluice_revocations', ''), 2, 'the two revocations of the tests above, no more');
    c!.close();
  });

  test('a flood of admin calls is answered, every one, and the node keeps serving', async () => {
    const c = await Client.connect(gw.url(), bearer(await token({ sub: 'flood-bystander' })));
    const statuses = await Promise.all(Array.from({ length: 400 }, (_, i) =>
      gw.adminPost(i % 2 === 0 ? '/v1/disconnect' : '/v1/unsubscribe', i % 2 === 0 ? { user: `nobody-${i}` } : { user: `nobody-${i}`, topic: 't' })
        .then((r) => r.status)));
    assert.deepEqual([...new Set(statuses)], [202]);
    await alive(c);
    c.close();
  });
});

describe('revocation needs WS_AUTH=jwt', () => {
  test('with WS_AUTH=none a revoke is 400 bad_request and nothing closes; disconnect works on user anonymous', async () => {
    const gw = await startGateway({ WS_WORKERS: '1' });
    const c = await Client.connect(gw.url());
    const res = await gw.adminPost('/v1/revoke', { user: 'anonymous' });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /WS_AUTH=jwt/);
    await alive(c);
    assert.equal((await gw.adminPost('/v1/disconnect', { user: 'anonymous', reconnect: true })).status, 202);
    assert.equal((await c.closedBy(1000)).code, 4000);
    await eventually(async () => (await metricValue(gw, 'sluice_connected_sockets')) === 0);
    assert.equal(await gw.stop(), 0);
  });
});
