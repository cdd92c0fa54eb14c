/** Rate limits: the client paces itself under the socket window, and every publish that is refused is resent after the hint, once. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { counts, type Gateway, history, metricValue, sdk, startGateway, Tap } from './helpers.ts';

describe('per-socket window', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_MAX_MESSAGES: '10', WS_RATE_WINDOW_MS: '1000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('a burst of 40 publishes and 5 joins is paced under the welcome\'s limit: no rate_limited, every publish acked once', async () => {
    const { client, tap } = sdk({ url: gw.url() });
    for (let i = 0; i < 5; i++) client.subscribe(`pace:${i}`, () => undefined);
    client.connect();
    const acked = await Promise.all(Array.from({ length: 40 }, (_, i) => client.publish('pace:0', i)));
    assert.equal(await metricValue(gw, 'sluice_limit_rejections_total', '{reason="rate_limited"}'), 0);
    assert.equal(tap.received.filter((w) => w.frame.reason === 'rate_limited').length, 0);
    // What the client put on the wire: never more than 10 frames in any second.
    const times = tap.sent.map((w) => w.at);
    for (let i = 10; i < times.length; i++) assert.ok(times[i]! - times[i - 10]! >= 1000, `frames ${i - 10}..${i} within ${times[i]! - times[i - 10]!} ms`);
    const events = await history(gw, 'pace:0');
    assert.deepEqual([...counts(events.map((e) => e.data)).values()].every((n) => n === 1), true);
    assert.equal(events.length, 40);
    assert.deepEqual(new Set(events.map((e) => e.id)), new Set(acked.map((a) => a.id)));
    await client.close();
  });

  test('rate_limited replies: each refused publish is resent no sooner than retryAfterMs, and every publish is stored once', async () => {
    // The tap announces a limit three times the real one, so the client overruns the window as a misconfigured one would.
    const tap = new Tap({
      incoming: (f) => (f.type === 'welcome' ? { ...f, limits: { ...(f.limits as object), maxMessages: 30 } } : f),
    });
    const { client } = sdk({ url: gw.url() }, tap);
    client.connect();
    const acked = await Promise.all(Array.from({ length: 60 }, (_, i) => client.publish('rl:1', i)));
    const limited = tap.received.filter((w) => w.frame.type === 'reply' && w.frame.reason === 'rate_limited');
    assert.ok(limited.length > 0, 'the server did refuse some');
    for (const r of limited) {
      const next = tap.sent.find((w) => w.seq > r.seq);
      assert.ok(next !== undefined);
      // Every frame waits: the next one on the socket, not just the resend, comes after the hint.
      assert.ok(next.at - r.at >= (r.frame.retryAfterMs as number),
        `sent ${next.at - r.at} ms after a rate_limited with retryAfterMs ${String(r.frame.retryAfterMs)}`);
    }
    const events = await history(gw, 'rl:1');
    assert.equal(events.length, 60);
    assert.ok([...counts(events.map((e) => e.data)).values()].every((n) => n === 1), 'none stored twice');
    assert.deepEqual(new Set(events.map((e) => e.id)), new Set(acked.map((a) => a.id)), 'each promise got its own event\'s id');
    assert.equal(client.state, 'open', 'never struck out');
    await client.close();
  });
});

describe('per-tenant window', () => {
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_TENANT_MSG_LIMIT: '20', WS_TENANT_WINDOW_MS: '1000', WS_MAX_MESSAGES: '1000' });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('three clients of one tenant publish 90 against a window of 20/s: every publish acked once, none stored twice', async () => {
    const clients = [0, 1, 2].map(() => sdk({ url: gw.url() }));
    for (const { client } of clients) client.connect();
    const results = await Promise.all(clients.map(({ client }, c) => Promise.all(Array.from({ length: 30 }, (_, i) => client.publish('tenant:1', { c, i })))));
    assert.ok(await metricValue(gw, 'sluice_limit_rejections_total', '{reason="tenant_rate_limited"}') > 0, 'the window did refuse some');
    const refused = clients.flatMap(({ tap }) => tap.received.filter((w) => w.frame.reason === 'tenant_rate_limited'));
    assert.ok(refused.length > 0);
    const events = await history(gw, 'tenant:1');
    assert.equal(events.length, 90);
    const tags = events.map((e) => JSON.stringify(e.data));
    assert.ok([...counts(tags).values()].every((n) => n === 1), 'none stored twice');
    assert.equal(new Set(tags).size, 90, 'all stored');
    assert.deepEqual(new Set(events.map((e) => e.id)), new Set(results.flat().map((r) => r.id)));
    for (const { client } of clients) await client.close();
  });
});
