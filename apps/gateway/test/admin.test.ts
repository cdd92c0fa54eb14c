/**
 * The admin server in-process, with dependencies that fail: a rejection or
 * a throw answers 500 with a JSON reason and is logged; the process (this
 * test's, where an unhandled rejection would fail the run) stays up and the
 * server keeps answering.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '@sluice/core';
import type { Logger } from '@sluice/telemetry';
import { type AdminDeps, createAdminServer } from '../src/admin.ts';
import type { AdminViews } from '../src/admin-views.ts';

const { config } = loadConfig({ LOG_LEVEL: 'silent' }, { availableParallelism: 2 });
const logged: { level: string; msg: string }[] = [];
const log = Object.fromEntries(['debug', 'info', 'warn', 'error', 'fatal'].map((level) =>
  [level, (_fields: unknown, msg?: string) => void logged.push({ level, msg: msg ?? String(_fields) })])) as unknown as Logger;

let failing = true;
const deps: AdminDeps = {
  config,
  log,
  ready: () => {
    if (failing) throw new Error('shared state gone');
    return true;
  },
  metrics: () => Promise.reject(new Error('a shard did not answer')),
  publish: () => (failing ? Promise.reject(new Error('control port closed')) : Promise.resolve({ ok: true, id: '1-0', duplicate: false })),
  history: () => (failing ? Promise.reject(new Error('control port closed'))
    : Promise.resolve({ ok: true, events: [{ id: '1-0', data: '{"n":[1,"x"]}' }], recovered: true })),
  control: () => Promise.resolve({ ok: true }),
  presence: () => Promise.resolve(undefined),
  toUsers: () => Promise.resolve({ ok: false, reason: 'unavailable', message: 'redis did not take the event, so no node sent it; retry' }),
  online: () => Promise.resolve({ ok: false, reason: 'unavailable', message: 'redis did not take the request; retry' }),
  push: undefined,
  drain: () => {},
  // Every other node is unreachable: the questions reject as a Redis that did not take them does.
  views: {
    selfId: 'n1',
    nodes: () => Promise.reject(new Error('Connection is closed.')),
    topics: () => Promise.reject(new Error('Connection is closed.')),
    connections: () => Promise.reject(new Error('Connection is closed.')),
    drain: () => Promise.reject(new Error('Connection is closed.')),
  } as unknown as AdminViews,
  uiDir: new URL('file:///nonexistent-sluice-ui/'),
};

let server: Server;
let base: string;
before(async () => {
  server = createAdminServer(deps);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

const publish = (): Promise<Response> => fetch(`${base}/v1/publish`, { method: 'POST', body: JSON.stringify({ topic: 'room:1', data: 1 }) });

test('a publish whose dependency rejects answers 500 with a JSON reason, and the server keeps answering', async () => {
  const res = await publish();
  assert.equal(res.status, 500);
  assert.equal(res.headers.get('content-type'), 'application/json');
  assert.equal(((await res.json()) as { reason: string }).reason, 'internal');
  assert.ok(logged.some((l) => l.level === 'error' && l.msg === 'admin request failed'));
  assert.equal((await fetch(`${base}/health/live`)).status, 200);
});

test('a dependency that throws synchronously (readiness) answers 500 too', async () => {
  const res = await fetch(`${base}/health/ready`);
  assert.equal(res.status, 500);
  assert.deepEqual(Object.keys((await res.json()) as object).sort(), ['message', 'reason']);
});

test('metrics that fail to collect answer 500 internal', async () => {
  const res = await fetch(`${base}/metrics`);
  assert.equal(res.status, 500);
  assert.equal(((await res.json()) as { reason: string }).reason, 'internal');
});

test('a history read whose dependency rejects answers 500 internal too', async () => {
  const res = await fetch(`${base}/v1/history?topic=room:1`);
  assert.equal(res.status, 500);
  assert.equal(((await res.json()) as { reason: string }).reason, 'internal');
});

test('once the dependencies work again, so do the routes', async () => {
  failing = false;
  const res = await publish();
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { id: '1-0' });
  const read = await fetch(`${base}/v1/history?topic=room:1`);
  assert.equal(read.status, 200);
  assert.deepEqual(await read.json(), { events: [{ id: '1-0', data: { n: [1, 'x'] } }], recovered: true }, 'data is spliced in as JSON');
  assert.equal((await fetch(`${base}/health/ready`)).status, 200);
});

test('topics: a publish that fails part way answers 503 naming the topic, with the ids already published, and stops there', async () => {
  const sent: string[] = [];
  const srv = createAdminServer({
    ...deps,
    publish: (req) => {
      sent.push(req.topic);
      return Promise.resolve(req.topic === 'room:2' ? { ok: false, reason: 'unavailable' } : { ok: true, id: `${sent.length}-0`, duplicate: false });
    },
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  try {
    const res = await fetch(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/v1/publish`, {
      method: 'POST', body: JSON.stringify({ topics: ['room:1', 'room:2', 'room:3'], data: 1, idempotencyKey: 'k1' }),
    });
    assert.equal(res.status, 503);
    const body = (await res.json()) as { reason: string; message: string; ids: Record<string, string> };
    assert.equal(body.reason, 'unavailable');
    assert.match(body.message, /failed at "room:2", after 1 of 3 topics/);
    assert.deepEqual(body.ids, { 'room:1': '1-0' });
    assert.deepEqual(sent, ['room:1', 'room:2'], 'room:3 was not tried');
  } finally {
    await new Promise<void>((resolve) => srv.close(() => resolve()));
  }
});

test('the admin page\'s views answer 503 when the other nodes cannot be asked, and the server keeps answering', async () => {
  for (const path of ['/v1/nodes', '/v1/topics', '/v1/connections?user=u1']) {
    const res = await fetch(`${base}${path}`);
    assert.equal(res.status, 503, path);
    const body = (await res.json()) as { reason: string; message: string };
    assert.equal(body.reason, 'unavailable', path);
    assert.match(body.message, /redis did not take the question/, path);
  }
  const drained = await fetch(`${base}/admin/drain`, { method: 'POST', body: JSON.stringify({ node: 'n2' }) });
  assert.equal(drained.status, 503);
  assert.equal((await fetch(`${base}/health/live`)).status, 200);
});

test('GET /ui without a build answers 503 and says to build; a missing asset is 404', async () => {
  const res = await fetch(`${base}/ui`);
  assert.equal(res.status, 503);
  assert.match(((await res.json()) as { message: string }).message, /the admin page is not built here .*run pnpm build/);
  assert.equal((await fetch(`${base}/ui/assets/index-abc.js`)).status, 404);
  assert.equal((await fetch(`${base}/ui/assets/..%2Fpackage.json`)).status, 404);
  assert.equal((await fetch(`${base}/ui/assets/x.exe`)).status, 404);
});
