/**
 * A join with `since` in cluster mode while events flow: the history read
 * (command connection) and the live events (subscriber connection) come over
 * two Redis connections, so the pub/sub message of an event the read already
 * returned can arrive after the read's reply. The socket must still get each
 * event once. Found by the chaos harness (benchmarks/chaos: a few events sent
 * twice on one socket right after its rejoin, under load); here a proxy in
 * front of Redis holds back what Redis sends on the subscriber connections by
 * 300 ms, which makes that order the rule.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, eventually, type Frame, type Gateway, startGateway } from './harness.ts';

const DELAY_MS = 300;

/** A TCP proxy to Redis that delays Redis's bytes to every connection that names itself a subscriber, keeping their order. */
function delayingProxy(target: number): Promise<{ server: Server; port: number }> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    sockets.add(client);
    sockets.add(upstream);
    let subscriber = false;
    let nextAt = 0;
    client.on('data', (c) => {
      if (c.toString('latin1').includes('-subscriber')) subscriber = true;
      upstream.write(c);
    });
    upstream.on('data', (c) => {
      if (!subscriber) { client.write(c); return; }
      nextAt = Math.max(Date.now() + DELAY_MS, nextAt);
      setTimeout(() => { if (!client.destroyed) client.write(c); }, nextAt - Date.now());
    });
    const end = (): void => { client.destroy(); upstream.destroy(); };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  server.on('close', () => { for (const s of sockets) s.destroy(); });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, port: (server.address() as { port: number }).port })));
}

let redis: RedisServer;
let proxy: { server: Server; port: number };
let gw: Gateway;
before(async () => {
  redis = await startRedis();
  proxy = await delayingProxy(redis.port);
  gw = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, WS_WORKERS: '1', WS_MAX_MESSAGES: '1000' });
  await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
});
after(async () => {
  await gw.stop();
  proxy.server.close();
  await redis.stop();
});

test('join with since while events flow and live delivery lags the history read: every event once, in order', async () => {
  const topic = 'recover:order';
  // A plain subscriber keeps the shard's subscription up; the publisher publishes every 10 ms.
  const sub = await Client.connect(gw.url());
  assert.equal((await sub.request({ type: 'join', topic })).status, 'ok');
  const pub = await Client.connect(gw.url());
  const acked: string[] = [];
  let running = true;
  const load = (async () => {
    for (let n = 0; running && n < 2000; n++) {
      const r: Frame = await pub.request({ type: 'publish', topic, data: n });
      assert.equal(r.status, 'ok', JSON.stringify(r));
      acked.push((r.data as { id: string }).id);
      await new Promise((res) => setTimeout(res, 10));
    }
  })();
  await eventually(() => acked.length >= 50, 10_000);
  // Rejoins from a point 20 events back, one after the other, while the publisher goes on.
  const rejoins: { since: string; events: string[] }[] = [];
  for (let i = 0; i < 5; i++) {
    const since = acked[acked.length - 20]!;
    const c = await Client.connect(gw.url());
    const r = await c.request({ type: 'join', topic, since });
    assert.equal(r.status, 'ok', JSON.stringify(r));
    assert.equal((r.data as { recovered: boolean }).recovered, true);
    await new Promise((res) => setTimeout(res, 2 * DELAY_MS + 200));
    rejoins.push({ since, events: c.takeEvents(topic).map((e) => e.id as string) });
    c.close();
  }
  running = false;
  await load;
  for (const { since, events } of rejoins) {
    const dups = events.filter((id, i) => events.indexOf(id) !== i);
    assert.deepEqual(dups, [], `events sent twice after a join with since ${since}`);
    const sorted = [...events].sort((x, y) => (x.length - y.length) || (x < y ? -1 : x > y ? 1 : 0));
    assert.deepEqual(events, sorted, 'in order');
    // Every event acked after `since`, up to the last one this socket saw, came.
    const from = acked.indexOf(since);
    const upTo = acked.indexOf(events.at(-1)!);
    assert.ok(upTo > from, `got ${events.length} events`);
    assert.deepEqual(events, acked.slice(from + 1, upTo + 1));
  }
  sub.close();
  pub.close();
});
