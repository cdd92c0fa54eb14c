/**
 * OpenTelemetry spans, recorded by the SDK's in-memory exporter in every
 * thread of a real gateway (WS_TRACING_MODULE = fixtures/otel-in-memory.mjs,
 * which writes each thread's finished spans to a file this test reads):
 * the spans of an upgrade, a join, a publish and its fan-out, their
 * parent-child links, and the trace id carried from the publisher's shard
 * (or node) to the subscriber's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SignJWT } from 'jose';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { Client, clientsOnShards, eventually, type Frame, type Gateway, rawUpgrade, runUntilExit, startGateway } from './harness.ts';

const FIXTURE = fileURLToPath(new URL('./fixtures/otel-in-memory.mjs', import.meta.url));
const SECRET = 'tracing-test-secret-of-thirty-two-chars!';
// @opentelemetry/api SpanKind and SpanStatusCode values.
const KIND = { INTERNAL: 0, SERVER: 1, CLIENT: 2, PRODUCER: 3, CONSUMER: 4 } as const;
const STATUS_ERROR = 2;

interface RecordedSpan {
  readonly thread: number;
  readonly name: string;
  readonly kind: number;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string | undefined;
  readonly attributes: Record<string, unknown>;
  readonly status: { code: number; message?: string };
}

function spansIn(file: string): RecordedSpan[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as RecordedSpan);
}

/** Waits until the spans of `traceId` include one of each name, and returns them. */
async function trace(file: string, traceId: string, names: string[]): Promise<Map<string, RecordedSpan[]>> {
  let found = new Map<string, RecordedSpan[]>();
  await eventually(() => {
    found = new Map();
    for (const s of spansIn(file)) {
      if (s.traceId !== traceId) continue;
      found.set(s.name, [...(found.get(s.name) ?? []), s]);
    }
    return names.every((n) => found.has(n));
  }).catch(() => {
    throw new Error(`trace ${traceId}: wanted ${names.join(', ')}, have ${[...found.keys()].join(', ') || 'nothing'}`);
  });
  return found;
}

function one(spans: Map<string, RecordedSpan[]>, name: string): RecordedSpan {
  const list = spans.get(name) ?? [];
  assert.equal(list.length, 1, `one ${name} span: ${JSON.stringify(list)}`);
  return list[0]!;
}

const hex = (bytes: number): string => randomBytes(bytes).toString('hex');
const traceparent = (traceId: string, spanId: string): string => `00-${traceId}-${spanId}-01`;
const TP = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

async function token(): Promise<string> {
  return new SignJWT({ sub: 'u1', tenant: 'acme', topics: ['*'], publish: ['*'] })
    .setProtectedHeader({ alg: 'HS256' }).setExpirationTime('10m').sign(new TextEncoder().encode(SECRET));
}

describe('spans of one node (two shards, WS_AUTH=jwt)', () => {
  let gw: Gateway;
  let dir: string;
  let file: string;
  let url: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-spans-'));
    file = join(dir, 'spans.jsonl');
    gw = await startGateway({ WS_TRACING_MODULE: FIXTURE, SLUICE_TEST_SPANS: file, WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET });
    url = gw.url(`/ws?token=${await token()}`);
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    rmSync(dir, { recursive: true, force: true });
  });

  test('a publish on one shard: sluice.publish (child of the client\'s traceparent) -> sluice.store, and the fan-out on the subscriber\'s shard is a child of the publish span', async () => {
    const [pub, sub] = await clientsOnShards(url, [0, 1]);
    assert.equal((await sub!.request({ type: 'join', topic: 'room:t' })).status, 'ok');
    const traceId = hex(16);
    const clientSpan = hex(8);
    const reply = await pub!.request({ type: 'publish', topic: 'room:t', data: { n: 1 }, traceparent: traceparent(traceId, clientSpan) });
    assert.equal(reply.status, 'ok');
    const id = (reply.data as { id: string }).id;
    const ev = await sub!.next((f) => f.type === 'event');
    // The event carries the trace onward: same trace, the gateway's publish span as its parent.
    const m = TP.exec(String(ev.traceparent));
    assert.ok(m, `event traceparent: ${String(ev.traceparent)}`);
    assert.equal(m[1], traceId);

    const spans = await trace(file, traceId, ['sluice.publish', 'sluice.store', 'sluice.fanout']);
    const publish = one(spans, 'sluice.publish');
    const store = one(spans, 'sluice.store');
    const fanout = one(spans, 'sluice.fanout');
    assert.equal(publish.parentSpanId, clientSpan);
    assert.equal(publish.kind, KIND.PRODUCER);
    assert.equal(publish.attributes['sluice.shard'], 0);
    assert.equal(publish.attributes['messaging.destination.name'], 'room:t');
    assert.equal(publish.attributes['messaging.message.id'], id);
    assert.equal(publish.attributes['sluice.tenant'], 'acme');
    assert.equal(store.parentSpanId, publish.spanId);
    assert.equal(m[2], publish.spanId);
    assert.equal(fanout.parentSpanId, publish.spanId);
    assert.equal(fanout.kind, KIND.CONSUMER);
    assert.equal(fanout.attributes['sluice.shard'], 1, 'fanned out on the subscriber\'s shard');
    assert.equal(fanout.attributes['sluice.subscribers'], 1);
    assert.equal(fanout.attributes['messaging.message.id'], id);
    // Different threads: the publisher's shard and the subscriber's.
    assert.notEqual(publish.thread, fanout.thread);
    for (const c of [pub!, sub!]) c.close();
  });

  test('a publish without a traceparent starts a trace of its own, carried by the event', async () => {
    const [pub, sub] = await clientsOnShards(url, [1, 0]);
    assert.equal((await sub!.request({ type: 'join', topic: 'room:u' })).status, 'ok');
    assert.equal((await pub!.request({ type: 'publish', topic: 'room:u', data: 2, ephemeral: true })).status, 'ok');
    const ev = await sub!.next((f) => f.type === 'event');
    const m = TP.exec(String(ev.traceparent));
    assert.ok(m, `event traceparent: ${String(ev.traceparent)}`);
    const spans = await trace(file, m[1]!, ['sluice.publish', 'sluice.fanout']);
    assert.equal(one(spans, 'sluice.publish').parentSpanId, undefined);
    assert.equal(one(spans, 'sluice.publish').attributes['sluice.class'], 'ephemeral');
    assert.equal(one(spans, 'sluice.fanout').parentSpanId, m[2]);
    for (const c of [pub!, sub!]) c.close();
  });

  test('the upgrade and its token check are spans; a traceparent header on the upgrade request is their parent', async () => {
    const traceId = hex(16);
    const parent = hex(8);
    const c = await Client.connect(url, { headers: { traceparent: traceparent(traceId, parent) } });
    const spans = await trace(file, traceId, ['sluice.upgrade', 'sluice.auth']);
    const upgrade = one(spans, 'sluice.upgrade');
    assert.equal(upgrade.parentSpanId, parent);
    assert.equal(upgrade.kind, KIND.SERVER);
    assert.equal(upgrade.attributes['sluice.outcome'], 'accepted');
    assert.equal(upgrade.attributes['sluice.tenant'], 'acme');
    assert.equal(one(spans, 'sluice.auth').parentSpanId, upgrade.spanId);
    c.close();

    const badTrace = hex(16);
    const refused = await rawUpgrade(gw.port, { path: '/ws?token=not.a.token', headers: { traceparent: traceparent(badTrace, hex(8)) } });
    assert.equal(refused.status, 401);
    const bad = await trace(file, badTrace, ['sluice.upgrade', 'sluice.auth']);
    assert.equal(one(bad, 'sluice.upgrade').attributes['sluice.outcome'], 'unauthorized');
    assert.equal(one(bad, 'sluice.auth').status.code, STATUS_ERROR);
  });

  test('a join with since: sluice.join with the history read as its child, and whether it recovered', async () => {
    const c = await Client.connect(url);
    const first = await c.request({ type: 'publish', topic: 'room:h', data: 'a' });
    await c.request({ type: 'publish', topic: 'room:h', data: 'b' });
    const since = (first.data as { id: string }).id;
    const before = new Set(spansIn(file).map((s) => s.spanId));
    const reply = await c.request({ type: 'join', topic: 'room:h', since });
    assert.deepEqual(reply.data, { recovered: true });
    let join: RecordedSpan | undefined;
    let history: RecordedSpan | undefined;
    await eventually(() => {
      const fresh = spansIn(file).filter((s) => !before.has(s.spanId));
      join = fresh.find((s) => s.name === 'sluice.join' && s.attributes['messaging.destination.name'] === 'room:h');
      history = fresh.find((s) => s.name === 'sluice.history' && s.parentSpanId === join?.spanId);
      return join !== undefined && history !== undefined;
    });
    assert.equal(join!.attributes['sluice.since'], true);
    assert.equal(join!.attributes['sluice.recovered'], true);
    assert.equal(join!.attributes['sluice.replayed'], 1);
    assert.equal(history!.traceId, join!.traceId);
    assert.equal(history!.attributes['sluice.replayed'], 1);
    c.close();
  });

  test('a server-side publish: sluice.http.publish (child of the request\'s traceparent header) -> the shard\'s sluice.publish -> fan-out', async () => {
    const [sub] = await clientsOnShards(url, [1]);
    assert.equal((await sub!.request({ type: 'join', topic: 'room:s' })).status, 'ok');
    const traceId = hex(16);
    const parent = hex(8);
    const res = await gw.adminFetch('/v1/publish', {
      method: 'POST', headers: { traceparent: traceparent(traceId, parent), 'content-type': 'application/json' },
      body: { tenant: 'acme', topic: 'room:s', data: { from: 'server' } },
    });
    assert.equal(res.status, 200);
    const ev: Frame = await sub!.next((f) => f.type === 'event');
    assert.equal(TP.exec(String(ev.traceparent))?.[1], traceId);
    const spans = await trace(file, traceId, ['sluice.http.publish', 'sluice.publish', 'sluice.fanout']);
    const http = one(spans, 'sluice.http.publish');
    const publish = one(spans, 'sluice.publish');
    assert.equal(http.parentSpanId, parent);
    assert.equal(http.kind, KIND.SERVER);
    assert.equal(publish.parentSpanId, http.spanId);
    assert.equal(one(spans, 'sluice.fanout').parentSpanId, publish.spanId);
    sub!.close();
  });
});

describe('a trace carried across nodes (two nodes on Redis)', () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  let dir: string;
  before(async () => {
    redis = await startRedis();
    dir = mkdtempSync(join(tmpdir(), 'sluice-spans-'));
    const env = (node: string) => ({ REDIS_URL: redis.url, WS_TRACING_MODULE: FIXTURE, SLUICE_TEST_SPANS: join(dir, `${node}.jsonl`) });
    a = await startGateway(env('a'));
    b = await startGateway(env('b'));
    for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200);
  });
  after(async () => {
    for (const gw of [a, b]) assert.equal(await gw.stop(), 0);
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the fan-out on the other node is a child of the publish span, in the publisher\'s trace', async () => {
    const sub = await Client.connect(b.url());
    assert.equal((await sub.request({ type: 'join', topic: 'x:1' })).status, 'ok');
    const pub = await Client.connect(a.url());
    const traceId = hex(16);
    const clientSpan = hex(8);
    const reply = await pub.request({ type: 'publish', topic: 'x:1', data: 1, traceparent: traceparent(traceId, clientSpan) });
    assert.equal(reply.status, 'ok');
    const ev = await sub.next((f) => f.type === 'event');
    assert.equal(TP.exec(String(ev.traceparent))?.[1], traceId);
    const onA = await trace(join(dir, 'a.jsonl'), traceId, ['sluice.publish', 'sluice.store']);
    const onB = await trace(join(dir, 'b.jsonl'), traceId, ['sluice.fanout']);
    const publish = one(onA, 'sluice.publish');
    assert.equal(publish.parentSpanId, clientSpan);
    assert.equal(one(onA, 'sluice.store').kind, KIND.CLIENT);
    assert.equal(one(onA, 'sluice.store').attributes['sluice.store'], 'redis');
    assert.equal(one(onB, 'sluice.fanout').parentSpanId, publish.spanId);
    assert.equal(onA.has('sluice.fanout'), false, 'no subscriber on node A');
    for (const c of [pub, sub]) c.close();
  });
});

test('a tracing module that cannot be loaded stops the start, naming WS_TRACING_MODULE', async () => {
  const r = await runUntilExit({ WS_TRACING_MODULE: '/nonexistent/otel-setup.mjs' });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /WS_TRACING_MODULE/);
  assert.match(r.stderr, /could not be loaded/);
});
