// Offline push (issue 19, point 6; docs/operations.md, "Offline push"): a
// real redis-server, a real gateway, a real push worker process
// (apps/push-worker) and a real HTTP receiver standing in for the
// application's push sender. POST /v1/publish with `users` and `push` adds a
// delayed BullMQ job per offline user, one id per (tenant, user,
// collapseKey), so a burst collapses into one notification; the worker
// re-checks presence (GET /v1/online) before it calls the receiver.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHmac } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, type Gateway, metricValue, seriesValue, startGateway, TEST_ADMIN_TOKEN } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';
import { PUSH_PREFIX, pushJobId } from '../src/push-queue.ts';

const WORKER_DIR = fileURLToPath(new URL('../../push-worker/', import.meta.url));
const WEBHOOK_SECRET = 'push-webhook-secret-0123456789';

/** Runs `check` (assertions) until it passes, or throws its last error after `ms`. */
async function until(check: () => unknown, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      await check();
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

interface Received { readonly body: Record<string, unknown>; readonly headers: Record<string, string | string[] | undefined>; readonly status: number }

describe('offline push: gateway, BullMQ on a real Redis, the push worker and a receiver', () => {
  let redis: RedisServer;
  let gw: Gateway;
  let worker: ChildProcess;
  let workerLog = '';
  let workerMetricsPort = 0;
  let receiver: Server;
  const received: Received[] = [];
  /** Per user: how many of the next calls fail with 500 (Infinity: every call). */
  const failNext = new Map<string, number>();
  let queue: Queue;
  let conn: Redis;

  const forUser = (u: string): Received[] => received.filter((r) => r.body.user === u);
  const workerMetric = async (name: string): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${workerMetricsPort}/metrics`)).text();
    return seriesValue(text, name, '');
  };
  const push = (users: string[], p: unknown, data: unknown = { n: 1 }): Promise<Response> => gw.adminPost('/v1/publish', { users, data, push: p });

  before(async () => {
    redis = await startRedis();
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
        const user = String(body.user);
        const left = failNext.get(user) ?? 0;
        const status = left > 0 ? 500 : 200;
        if (left > 0) failNext.set(user, left - 1);
        received.push({ body, headers: req.headers, status });
        res.writeHead(status).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, REDIS_URL: redis.url, WS_PUSH_MAX_DELAY_MS: '60000' });
    worker = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: WORKER_DIR, stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, REDIS_URL: redis.url, WS_PUSH_WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/push`,
        WS_PUSH_WEBHOOK_SECRET: WEBHOOK_SECRET, SLUICE_ADMIN_URL: gw.admin(''), ADMIN_TOKEN: TEST_ADMIN_TOKEN,
        PUSH_ATTEMPTS: '4', PUSH_BACKOFF_MS: '100', PUSH_METRICS_PORT: '0', PUSH_METRICS_HOST: '127.0.0.1', LOG_LEVEL: 'info' },
    });
    worker.stderr!.on('data', (c: Buffer) => (workerLog += c.toString()));
    workerMetricsPort = await new Promise<number>((resolve, reject) => {
      let buf = '';
      worker.stdout!.on('data', (c: Buffer) => {
        buf += c.toString();
        workerLog += c.toString();
        const m = /"metricsPort":(\d+).*"msg":"push worker ready"/.exec(buf);
        if (m !== null) resolve(Number(m[1]));
      });
      worker.once('exit', (code) => reject(new Error(`push worker exited ${code}: ${workerLog}`)));
    });
    conn = new Redis(redis.url, { maxRetriesPerRequest: null });
    queue = new Queue('sluice-push', { connection: conn, prefix: PUSH_PREFIX });
  });

  after(async () => {
    await queue?.close();
    conn?.disconnect();
    if (worker !== undefined && worker.exitCode === null) {
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      worker.kill('SIGTERM');
      assert.equal(await exited, 0, `the worker stops cleanly on SIGTERM: ${workerLog.slice(-2000)}`);
    }
    if (gw !== undefined) assert.equal(await gw.stop(), 0);
    await new Promise<void>((resolve) => (receiver === undefined ? resolve() : receiver.close(() => resolve())));
    await redis?.stop();
  });

  test('ten publishes to an offline user within three seconds make one push; nine collapsed', async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await push(['offline1'], { collapseKey: 'chat:7', delayMs: 4000, notification: { title: 'new message', i } });
      assert.equal(res.status, 200);
      answers.push(await res.json());
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.deepEqual(answers[0], { online: [], push: { queued: ['offline1'], collapsed: [] } });
    for (const a of answers.slice(1)) assert.deepEqual(a, { online: [], push: { queued: [], collapsed: ['offline1'] } });
    assert.equal(await metricValue(gw, 'sluice_push_jobs_total', '{outcome="queued"}'), 1);
    assert.equal(await metricValue(gw, 'sluice_push_jobs_total', '{outcome="collapsed"}'), 9);
    assert.equal(forUser('offline1').length, 0, 'nothing before the delay of the first publish is over');
    await until(() => assert.equal(forUser('offline1').length, 1), 10_000);
    const got = forUser('offline1')[0]!;
    // The first publish's job is the one kept: its notification.
    assert.deepEqual(got.body.notification, { title: 'new message', i: 0 });
    assert.equal(got.body.tenant, 'default');
    assert.equal(got.body.collapseKey, 'chat:7');
    assert.equal(got.body.attempt, 1);
    assert.equal(got.body.jobId, pushJobId('default', 'offline1', 'chat:7'));
    const ts = String(got.headers['x-sluice-timestamp']);
    const expected = `v1=${createHmac('sha256', WEBHOOK_SECRET).update(`${ts}.${JSON.stringify(got.body)}`).digest('hex')}`;
    assert.equal(got.headers['x-sluice-signature'], expected);
    // A second notification would come within the delay: none does.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(forUser('offline1').length, 1);
    await until(async () => assert.equal(await workerMetric('sluice_push_sent_total'), 1), 5000);
  });

  test('once the job is done, a publish with the same key makes a new notification', async () => {
    await until(async () => assert.equal(await queue.getJob(pushJobId('default', 'offline1', 'chat:7')), undefined), 5000);
    const res = await push(['offline1'], { collapseKey: 'chat:7', delayMs: 0, notification: { title: 'again' } });
    assert.deepEqual(await res.json(), { online: [], push: { queued: ['offline1'], collapsed: [] } });
    await until(() => assert.equal(forUser('offline1').length, 2), 10_000);
    assert.deepEqual(forUser('offline1')[1]!.body.notification, { title: 'again' });
  });

  test('a user online at the publish gets the event and no job; one who connects within the delay gets no push', async () => {
    const online = await Client.connect(gw.url(), bearer(await token({ sub: 'here', topics: ['*'] })));
    const res = await push(['here', 'later'], { collapseKey: 'k', delayMs: 1500, notification: { t: 1 } });
    assert.deepEqual(await res.json(), { online: ['here'], push: { queued: ['later'], collapsed: [] } });
    const later = await Client.connect(gw.url(), bearer(await token({ sub: 'later', topics: ['*'] })));
    await until(async () => assert.equal(await workerMetric('sluice_push_skipped_online_total'), 1), 10_000);
    assert.equal(forUser('later').length, 0);
    assert.equal(forUser('here').length, 0);
    online.close();
    later.close();
  });

  test('GET /v1/online answers which users have a socket open, and sends nothing', async () => {
    const c = await Client.connect(gw.url(), bearer(await token({ sub: 'olga', topics: ['*'] })));
    const res = await gw.adminFetch('/v1/online?user=ghost&user=olga');
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { online: ['olga'] });
    assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    assert.deepEqual(c.takeEvents('$user'), []);
    for (const [q, re] of [['', /user must be given 1 to 1000/], ['?user=a&usr=b', /unknown query parameter "usr"/],
      ['?user=a&tenant=%20', /tenant must match/], ['?user=a%01b', /user must be a user id/]] as const) {
      const r = await gw.adminFetch(`/v1/online${q}`);
      assert.equal(r.status, 400, q);
      assert.match(((await r.json()) as { message: string }).message, re);
    }
    c.close();
  });

  test('a receiver that fails twice and then takes it: sent on the third attempt', async () => {
    failNext.set('flaky', 2);
    await push(['flaky'], { collapseKey: 'k', notification: { t: 1 } });
    await until(() => assert.equal(forUser('flaky').filter((r) => r.status === 200).length, 1), 15_000);
    assert.deepEqual(forUser('flaky').map((r) => [r.status, r.body.attempt]), [[500, 1], [500, 2], [200, 3]]);
  });

  test('a receiver that always fails: the job is dead after PUSH_ATTEMPTS, counted, and kept in the failed set', async () => {
    failNext.set('doomed', Infinity);
    const before = await workerMetric('sluice_push_failed_total');
    await push(['doomed'], { collapseKey: 'k', notification: { t: 1 } });
    await until(async () => assert.equal(await workerMetric('sluice_push_dead_total'), 1), 20_000);
    assert.equal(forUser('doomed').length, 4);
    assert.equal(await workerMetric('sluice_push_failed_total') - before, 4);
    const job = await queue.getJob(pushJobId('default', 'doomed', 'k'));
    assert.ok(job !== undefined, 'the dead job is kept');
    assert.equal(await job.getState(), 'failed');
    assert.deepEqual(job.data.user, 'doomed');
    // The dead job holds the id until a publish with the same key: that one makes a new notification.
    failNext.set('doomed', 0);
    const res = await push(['doomed'], { collapseKey: 'k', notification: { t: 2 } });
    assert.deepEqual(await res.json(), { online: [], push: { queued: ['doomed'], collapsed: [] } });
    await until(() => assert.deepEqual(forUser('doomed').filter((r) => r.status === 200).map((r) => r.body.notification), [{ t: 2 }]), 10_000);
  });

  test('every bad push is a 400 naming the field, and nothing is enqueued or sent', async () => {
    const queuedBefore = await metricValue(gw, 'sluice_push_jobs_total', '{outcome="queued"}');
    const okPush = { collapseKey: 'k', delayMs: 0, notification: {} };
    const cases: [unknown, RegExp][] = [
      [{ users: ['bad1'], data: 1, push: 'x' }, /push must be an object/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, colapseKey: 'k' } }, /unknown field push\.colapseKey/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, collapseKey: '' } }, /push\.collapseKey must be/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, collapseKey: 'x'.repeat(129) } }, /push\.collapseKey must be/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, collapseKey: 'a\nb' } }, /push\.collapseKey must be/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, delayMs: -1 } }, /push\.delayMs must be/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, delayMs: 1.5 } }, /push\.delayMs must be/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, delayMs: 60_001 } }, /push\.delayMs must be a whole number of ms from 0 to 60000/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, notification: [1] } }, /push\.notification must be a JSON object/],
      [{ users: ['bad1'], data: 1, push: { collapseKey: 'k' } }, /push\.notification must be a JSON object/],
      [{ users: ['bad1'], data: 1, push: { ...okPush, notification: { x: 'y'.repeat(4096) } } }, /push\.notification is above 4096 bytes/],
      [{ topic: 'room', data: 1, push: okPush }, /push needs users/],
      [{ topics: ['room'], data: 1, push: okPush }, /push needs users/],
      [{ users: ['bad1'], push: okPush }, /needs data/],
    ];
    for (const [body, re] of cases) {
      const res = await gw.adminPost('/v1/publish', body);
      assert.equal(res.status, 400, JSON.stringify(body).slice(0, 100));
      const b = (await res.json()) as { reason: string; message: string };
      assert.equal(b.reason, 'bad_request');
      assert.match(b.message, re);
    }
    assert.equal(await metricValue(gw, 'sluice_push_jobs_total', '{outcome="queued"}'), queuedBefore);
    assert.equal(await queue.getJob(pushJobId('default', 'bad1', 'k')), undefined);
  });
});

describe('offline push on an embedded gateway', () => {
  test('push needs REDIS_URL: 400, and the event is not sent', async () => {
    const gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET });
    try {
      const c = await Client.connect(gw.url(), bearer(await token({ sub: 'emma', topics: ['*'] })));
      const res = await gw.adminPost('/v1/publish', { users: ['emma'], data: 1, push: { collapseKey: 'k', notification: {} } });
      assert.equal(res.status, 400);
      assert.match(((await res.json()) as { message: string }).message, /push needs REDIS_URL/);
      assert.equal((await c.request({ type: 'ping' })).type, 'pong');
      assert.deepEqual(c.takeEvents('$user'), []);
      c.close();
    } finally {
      assert.equal(await gw.stop(), 0);
    }
  });
});
