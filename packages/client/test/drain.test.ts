/**
 * A deploy: two gateways on one Redis, one drained while a client publishes
 * and another subscribes. Both ride through: they wait the 1012's
 * retryAfterMs, move to the other node, and nothing acknowledged is lost.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { counts, eventually, type Gateway, history, ofType, sdk, sleep, startGateway } from './helpers.ts';

describe('drain of one of two nodes', () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  before(async () => {
    redis = await startRedis();
    const env = {
      REDIS_URL: redis.url, WS_MAX_MESSAGES: '1000', WS_DRAIN_DELAY_MS: '300', WS_DRAIN_RATE: '100',
      WS_RETRY_AFTER_MIN_MS: '500', WS_RETRY_AFTER_MAX_MS: '1500',
    };
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
  });
  after(async () => {
    assert.equal(await b.stop(), 0, b.stderr());
    await a.stop();
    await redis.stop();
  });

  test('publisher and subscriber reconnect to the other node after retryAfterMs; every publish acked once, delivered once, in order', async () => {
    // random() = 0: both start on the first URL, `a`, and after its drain skip it.
    const urls = [a.url(), b.url()];
    const pub = sdk({ url: urls, random: () => 0 });
    const sub = sdk({ url: urls, random: () => 0 });
    const got: string[] = [];
    const s = sub.client.subscribe('drain:1', (e) => got.push(e.id!));
    sub.client.connect();
    pub.client.connect();
    await s.ready;
    await eventually(() => pub.client.state === 'open');
    assert.equal(ofType(pub.log, 'connected')[0]!.ev.url, a.url());

    const N = 150;
    const publishes: Promise<{ id?: string }>[] = [];
    for (let i = 0; i < N; i++) {
      publishes.push(pub.client.publish('drain:1', { i }));
      if (i === 30) a.proc.kill('SIGTERM');
      await sleep(10);
    }
    const outcomes = await Promise.allSettled(publishes);
    assert.deepEqual(outcomes.filter((o) => o.status === 'rejected'), [], 'no publish failed');
    const acked = outcomes.map((o) => (o as PromiseFulfilledResult<{ id?: string }>).value.id!);
    assert.equal(await a.stop(), 0, a.stderr());

    for (const c of [pub, sub]) {
      // The subscriber may still be waiting out its hint when the last publish is acked.
      await eventually(() => ofType(c.log, 'connected').length === 2, 10_000);
      const disc = ofType(c.log, 'disconnected');
      assert.equal(disc.length, 1);
      assert.equal(disc[0]!.ev.code, 1012);
      assert.equal(disc[0]!.ev.reason, 'unavailable');
      const hint = disc[0]!.ev.retryAfterMs!;
      assert.ok(hint >= 500 && hint <= 1500, `hint ${hint}`);
      const next = c.tap.sockets.find((x) => x.createdAt >= disc[0]!.at)!;
      assert.ok(next.createdAt - disc[0]!.at >= hint, `reconnected ${next.createdAt - disc[0]!.at} ms after a ${hint} ms hint`);
      assert.equal(ofType(c.log, 'connected')[1]!.ev.url, b.url());
    }

    // History on the surviving node (Redis): each publish stored once, under the id its promise got.
    const events = await history(b, 'drain:1');
    assert.equal(events.length, N);
    assert.ok([...counts(events.map((e) => (e.data as { i: number }).i)).values()].every((n) => n === 1), 'none stored twice');
    assert.deepEqual(new Set(events.map((e) => e.id)), new Set(acked));
    // The subscriber resumed with since: the topic's events, once each, in the topic's order.
    await eventually(() => got.length === N, 10_000);
    assert.deepEqual(got, events.map((e) => e.id));
    assert.deepEqual(ofType(sub.log, 'recovered').map((r) => r.ev.recovered), [true]);
    await pub.client.close();
    await sub.client.close();
  });
});
