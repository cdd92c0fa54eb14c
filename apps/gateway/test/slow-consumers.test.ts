/**
 * Slow consumers, with real clients that stop reading (their TCP socket is
 * paused, so the kernel buffers fill and then the gateway's) while a
 * publisher sends at full speed.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { Client, eventually, type Gateway, metricValue, startGateway } from './harness.ts';

const BIG = 'x'.repeat(16_000);

function pause(c: Client): void {
  (c.ws as unknown as { _socket: Socket })._socket.pause();
}
function resume(c: Client): void {
  (c.ws as unknown as { _socket: Socket })._socket.resume();
}

/**
 * Publishes `n` frames as fast as acks come back, 8 in flight: full speed
 * for one publisher, and still a stream the gateway sees event by event
 * rather than one burst it reads in a single turn.
 */
async function flood(pub: Client, n: number, frame: (i: number) => Record<string, unknown>): Promise<void> {
  const depth = 8;
  for (let i = 0; i < n; i++) {
    pub.send({ type: 'publish', ref: `f${i}`, ...frame(i) });
    if (i >= depth) await pub.next((f) => f.type === 'reply' && f.ref === `f${i - depth}`, 30_000);
  }
  await pub.next((f) => f.type === 'reply' && f.ref === `f${n - 1}`, 30_000);
}

async function withGateway(env: Record<string, string>, body: (gw: Gateway) => Promise<void>): Promise<void> {
  // A byte cap well above the soft limit: the loopback floods here are far
  // faster than real traffic, and only the buffer_limit test wants it small.
  const gw = await startGateway({ WS_MAX_MESSAGES: '1000000', WS_WORKERS: '1', WS_MAX_BUFFERED_BYTES: '16777216', ...env });
  try {
    await body(gw);
  } finally {
    assert.equal(await gw.stop(), 0, gw.stderr());
  }
}

describe('slow consumers', () => {
  test('ephemeral events for a stalled socket are dropped and counted; healthy ones get all, in order', async () => {
    await withGateway({ WS_SLOW_CLIENT_BUFFER_BYTES: '32768', WS_EPHEMERAL_DROP_QUEUE_LEN: '10' }, async (gw) => {
      const slow = await Client.connect(gw.url());
      const healthy = await Client.connect(gw.url());
      const pub = await Client.connect(gw.url());
      for (const c of [slow, healthy]) await c.request({ type: 'join', topic: 'typing' });
      pause(slow);
      await flood(pub, 400, (i) => ({ topic: 'typing', ephemeral: true, data: { i, pad: BIG } }));
      await eventually(async () => (await metricValue(gw, 'sluice_messages_dropped_total', '{reason="ephemeral"}')) > 0, 10_000);
      await eventually(() => healthy.frames.filter((f) => f.type === 'event').length === 400, 20_000);
      assert.deepEqual(healthy.takeEvents('typing').map((e) => (e.data as { i: number }).i), Array.from({ length: 400 }, (_, i) => i));
      resume(slow);
      // A durable marker: an ephemeral one could itself be dropped while the mailbox is still full.
      const marker = await pub.request({ type: 'publish', topic: 'typing', data: { i: 'end' } });
      assert.equal(marker.status, 'ok');
      await slow.next((f) => f.type === 'event' && (f.data as { i: unknown }).i === 'end', 20_000).then((f) => slow.frames.push(f));
      const got = slow.takeEvents('typing').map((e) => (e.data as { i: number | string }).i);
      assert.ok(got.length < 401, `dropped some: got ${got.length}`);
      const nums = got.filter((i): i is number => typeof i === 'number');
      assert.deepEqual(nums, [...nums].sort((a, b) => a - b), 'what arrives is in order');
      assert.equal(slow.closed, undefined);
    });
  });

  test('a stalled keyed subscriber gets the newest value per key after it resumes, never a stale one after a newer one', async () => {
    await withGateway({ WS_SLOW_CLIENT_BUFFER_BYTES: '32768' }, async (gw) => {
      const slow = await Client.connect(gw.url());
      const pub = await Client.connect(gw.url());
      await slow.request({ type: 'join', topic: 'prices' });
      pause(slow);
      await flood(pub, 600, (i) => ({ topic: 'prices', key: `K${i % 3}`, data: { v: i, pad: BIG } }));
      await eventually(async () => (await metricValue(gw, 'sluice_messages_dropped_total', '{reason="superseded"}')) > 0, 10_000);
      resume(slow);
      await eventually(() => {
        const last = new Map<string, number>();
        for (const f of slow.frames) if (f.type === 'event') last.set(String(f.key), (f.data as { v: number }).v);
        return last.get('K0') === 597 && last.get('K1') === 598 && last.get('K2') === 599;
      }, 20_000);
      const seen = new Map<string, number>();
      for (const e of slow.takeEvents('prices')) {
        const k = String(e.key);
        const v = (e.data as { v: number }).v;
        assert.ok(v > (seen.get(k) ?? -1), `${k}: ${v} after ${seen.get(k)}`);
        seen.set(k, v);
      }
      assert.equal(slow.closed, undefined);
    });
  });

  test('a durable subscriber past the mailbox cap is closed with 4503 and resumes with since, missing nothing', async () => {
    await withGateway({ WS_SLOW_CLIENT_BUFFER_BYTES: '32768', WS_SLOW_CONSUMER_QUEUE_LEN: '50', WS_HISTORY_SIZE: '5000' }, async (gw) => {
      const slow = await Client.connect(gw.url());
      const healthy = await Client.connect(gw.url());
      const pub = await Client.connect(gw.url());
      for (const c of [slow, healthy]) await c.request({ type: 'join', topic: 'orders' });
      pause(slow);
      await flood(pub, 400, (i) => ({ topic: 'orders', data: { i, pad: BIG } }));
      resume(slow);
      const closed = await slow.closedBy(20_000);
      assert.equal(closed.code, 4503);
      const reason = JSON.parse(closed.reason) as { reason: string; retryAfterMs: number };
      assert.equal(reason.reason, 'slow_consumer');
      assert.ok(reason.retryAfterMs >= 1000 && reason.retryAfterMs <= 6000);
      const before = slow.takeEvents('orders');
      const ids = before.map((e) => e.id as string);
      await eventually(() => healthy.frames.filter((f) => f.type === 'event').length === 400, 20_000);
      const all = healthy.takeEvents('orders').map((e) => e.id as string);
      assert.deepEqual(ids, all.slice(0, ids.length), 'what the slow socket got is a prefix, in order');
      const again = await Client.connect(gw.url());
      const since = ids.at(-1) ?? `${Number(all[0]!.split('-')[0]) - 1}-0`;
      const reply = await again.request({ type: 'join', topic: 'orders', since });
      assert.deepEqual(reply.data, { recovered: true });
      assert.deepEqual(again.takeEvents('orders').map((e) => e.id), all.slice(ids.length));
      assert.ok(await metricValue(gw, 'sluice_clients_closed_total', '{reason="slow_consumer"}') >= 1);
    });
  });

  test('1013 buffer_limit when unsent bytes reach WS_MAX_BUFFERED_BYTES', async () => {
    await withGateway({ WS_MAX_BUFFERED_BYTES: '65536', WS_SLOW_CONSUMER_QUEUE_LEN: '100000' }, async (gw) => {
      const slow = await Client.connect(gw.url());
      const pub = await Client.connect(gw.url());
      await slow.request({ type: 'join', topic: 'big' });
      pause(slow);
      await flood(pub, 200, (i) => ({ topic: 'big', data: { i, pad: 'y'.repeat(100_000) } }));
      resume(slow);
      const closed = await slow.closedBy(20_000);
      assert.equal(closed.code, 1013);
      assert.equal((JSON.parse(closed.reason) as { reason: string }).reason, 'buffer_limit');
    });
  });

  test('1013 congested after WS_MAX_CONGESTED_MS', async () => {
    await withGateway({ WS_SLOW_CLIENT_BUFFER_BYTES: '32768', WS_MAX_CONGESTED_MS: '300', WS_SLOW_CONSUMER_QUEUE_LEN: '100000' },
      async (gw) => {
        const slow = await Client.connect(gw.url());
        const pub = await Client.connect(gw.url());
        await slow.request({ type: 'join', topic: 'c' });
        pause(slow);
        await flood(pub, 300, (i) => ({ topic: 'c', data: { i, pad: BIG } }));
        await eventually(async () => (await metricValue(gw, 'sluice_clients_closed_total', '{reason="congested"}')) === 1, 10_000);
        resume(slow);
        const closed = await slow.closedBy(20_000);
        assert.equal(closed.code, 1013);
        assert.equal((JSON.parse(closed.reason) as { reason: string }).reason, 'congested');
      });
  });
});

describe('coalescing', () => {
  test('WS_COALESCE_INTERVAL_MS: at most one keyed event per (topic, key) per interval, the newest wins', async () => {
    await withGateway({ WS_COALESCE_INTERVAL_MS: '200' }, async (gw) => {
      const sub = await Client.connect(gw.url());
      const pub = await Client.connect(gw.url());
      await sub.request({ type: 'join', topic: 'ticks' });
      const started = Date.now();
      for (let i = 0; i < 50; i++) await pub.request({ type: 'publish', topic: 'ticks', key: 'BTC', data: { v: i } });
      const elapsed = Date.now() - started;
      await sub.next((f) => f.type === 'event' && (f.data as { v: number }).v === 49, 5000).then((f) => sub.frames.push(f));
      const vs = sub.takeEvents('ticks').map((e) => (e.data as { v: number }).v);
      assert.equal(vs[0], 0, 'the first one goes at once');
      assert.equal(vs.at(-1), 49, 'the newest is delivered in the end');
      assert.ok(vs.length <= Math.ceil(elapsed / 200) + 2, `${vs.length} events in ${elapsed} ms`);
      assert.ok(vs.length < 50);
      assert.deepEqual(vs, [...vs].sort((a, b) => a - b));
      assert.ok((await metricValue(gw, 'sluice_messages_dropped_total', '{reason="superseded"}')) > 0);
      // Ephemeral and durable events are not held.
      await pub.request({ type: 'publish', topic: 'ticks', data: 'durable' });
      assert.equal((await sub.next((f) => f.type === 'event', 1000)).data, 'durable');
    });
  });
});

describe('counting', () => {
  test('events sent are counted per subscriber once written out; a stalled socket\'s events only when its buffer empties', async () => {
    await withGateway({ WS_SLOW_CLIENT_BUFFER_BYTES: '1048576', WS_MAX_BUFFERED_BYTES: '16777216' }, async (gw) => {
      const subs = await Promise.all([0, 1, 2].map(() => Client.connect(gw.url())));
      const pub = await Client.connect(gw.url());
      for (const c of subs) await c.request({ type: 'join', topic: 'count' });
      const before = await metricValue(gw, 'sluice_messages_sent_total');
      for (let i = 0; i < 20; i++) await pub.request({ type: 'publish', topic: 'count', data: i });
      await eventually(() => subs.every((c) => c.frames.filter((f) => f.type === 'event').length === 20));
      await eventually(async () => (await metricValue(gw, 'sluice_messages_sent_total')) - before === 60);
      // A stalled socket: once uWS holds some of its events, sent lags behind what was handed out.
      const [stalled] = subs;
      pause(stalled!);
      const base = await metricValue(gw, 'sluice_messages_sent_total');
      await flood(pub, 400, (i) => ({ topic: 'count', data: { i, pad: BIG } }));
      await eventually(async () => (await metricValue(gw, 'sluice_buffered_bytes')) > 0, 10_000);
      const whileStalled = await metricValue(gw, 'sluice_messages_sent_total');
      assert.ok(whileStalled - base < 3 * 400, `counted ${whileStalled - base} of ${3 * 400} while one socket is stalled`);
      resume(stalled!);
      await eventually(async () => (await metricValue(gw, 'sluice_messages_sent_total')) - base === 3 * 400, 20_000);
    });
  });
});
