/**
 * After an outage, a shard's subscriber connection can come back before its
 * command connection. The catch-up read (what the topics stored while the
 * subscription was away) goes over the command connection: it must wait for
 * it, not fail and go live with a gap. Found by the chaos harness
 * (benchmarks/chaos, scenario `redis`: "could not read what a topic stored
 * while redis was unreachable" on every topic of a shard, and acked events
 * its sockets never got). Here node A reaches Redis through a proxy that is
 * cut for a while (Redis itself stays up, so node B stores an event
 * meanwhile) and then lets A's subscriber connection through at once and its
 * other connections only after a second.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, eventually, type Gateway, startGateway } from './harness.ts';

const HOLD_MS = 1000;

interface Proxy { server: Server; port: number; cut(): void; open(hold: boolean): void }

/** A TCP proxy to Redis that can cut every connection and refuse new ones, then let subscriber connections through before the others. */
function proxyTo(target: number): Promise<Proxy> {
  const sockets = new Set<Socket>();
  let refusing = false;
  let holding = false;
  const server = createServer((client) => {
    if (refusing) { client.destroy(); return; }
    sockets.add(client);
    const pending: Buffer[] = [];
    let upstream: Socket | undefined;
    const end = (): void => { client.destroy(); upstream?.destroy(); };
    const pipe = (): void => {
      if (client.destroyed) return;
      const up = connect(target, '127.0.0.1');
      upstream = up;
      sockets.add(up);
      for (const c of pending) up.write(c);
      pending.length = 0;
      up.on('data', (c) => client.write(c));
      up.on('error', end);
      up.on('close', end);
    };
    let decided = false;
    client.on('data', (c) => {
      if (upstream !== undefined) { upstream.write(c); return; }
      pending.push(c);
      if (decided) return;
      decided = true;
      // ioredis names the connection first: `sluice-shard0-subscriber`, `sluice-shard0-command`, ...
      if (!holding || Buffer.concat(pending).toString('latin1').includes('-subscriber')) pipe();
      else setTimeout(pipe, HOLD_MS);
    });
    client.on('error', end);
    client.on('close', end);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    server, port: (server.address() as { port: number }).port,
    cut() { refusing = true; for (const s of sockets) s.destroy(); sockets.clear(); },
    open(hold) { holding = hold; refusing = false; },
  })));
}

let redis: RedisServer;
let proxy: Proxy;
let a: Gateway;
let b: Gateway;
before(async () => {
  redis = await startRedis();
  proxy = await proxyTo(redis.port);
  a = await startGateway({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, WS_WORKERS: '1' });
  b = await startGateway({ REDIS_URL: redis.url, WS_WORKERS: '1' });
  for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
});
after(async () => {
  await a.stop();
  await b.stop();
  proxy.server.close();
  await redis.stop();
});

const publish = async (gw: Gateway, data: unknown): Promise<string> => {
  const res = await gw.adminPost('/v1/publish', { topic: 'catchup:order', data });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { id: string }).id;
};

test('the subscriber connection back before the command connection: the catch-up waits for it, and the socket gets what was stored meanwhile', async () => {
  const sub = await Client.connect(a.url());
  assert.equal((await sub.request({ type: 'join', topic: 'catchup:order' })).status, 'ok');
  // A delivered event: the topic has a position to catch up from.
  const first = await publish(b, 'before');
  assert.equal((await sub.next((f) => f.type === 'event')).id, first);

  proxy.cut();
  await eventually(async () => (await fetch(a.admin('/health/ready'))).status === 503, 10_000);
  // Stored while A cannot see Redis: A's shard gets it only from the catch-up read.
  const during = await publish(b, 'during');
  proxy.open(true);
  await eventually(async () => (await fetch(a.admin('/health/ready'))).status === 200, 15_000);
  const after = await publish(b, 'after');
  const got: string[] = [];
  await eventually(async () => {
    for (const f of sub.takeEvents('catchup:order')) got.push(f.id as string);
    return got.includes(after);
  }, 15_000).catch(() => undefined);
  assert.deepEqual(got, [during, after], 'the event stored while A was cut off, then the live one, once each');
  assert.ok(!a.logs.some((l) => l.msg === 'could not read what a topic stored while redis was unreachable'), 'no catch-up read failed');
  sub.close();
});
