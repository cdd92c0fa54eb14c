/**
 * The admin server in-process, with dependencies that fail: a rejection or
 * a throw answers 500 with a JSON reason and is logged; the process (this
 * test's, where an unhandled rejection would fail the run) stays up and the
 * server keeps answering.
 */
import { after, before, describe, test } from 'node:test';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '@sluice/core';
import type { Logger } from '@sluice/telemetry';
import { type AdminDeps, createAdminServer } from '../src/admin.ts';
import type { AdminViews } from '../src/admin-views.ts';
import { RedisUnavailable } from '../src/control-plane.ts';

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
  // The views fail inside (a bug: 500); a drain of another node finds Redis not taking it (503).
  views: {
    selfId: 'n1',
    nodes: () => Promise.reject(new Error('a view broke')),
    topics: () => Promise.reject(new Error('a view broke')),
    connections: () => Promise.reject(new Error('a view broke')),
    drain: () => Promise.reject(new RedisUnavailable(new Error('Connection is closed.'))),
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

test('a view that fails inside answers 500 and is logged; a drain of another node without ADMIN_TOKEN is a 400; the server keeps answering', async () => {
  for (const path of ['/v1/nodes', '/v1/topics', '/v1/connections?user=u1']) {
    const res = await fetch(`${base}${path}`);
    assert.equal(res.status, 500, path);
    assert.equal(((await res.json()) as { reason: string }).reason, 'internal', path);
  }
  assert.ok(logged.some((l) => l.level === 'error' && l.msg === 'admin request failed'));
  // Without ADMIN_TOKEN a drain of another node cannot be signed: refused before anything is sent.
  const unsigned = await fetch(`${base}/admin/drain`, { method: 'POST', body: JSON.stringify({ node: 'n2' }) });
  assert.equal(unsigned.status, 400);
  assert.match(((await unsigned.json()) as { message: string }).message, /ADMIN_TOKEN/);
  assert.equal((await fetch(`${base}/health/live`)).status, 200);
});

test('a POST from a page of another origin is refused with 403, whatever the route; one without Origin is not', async () => {
  for (const path of ['/v1/publish', '/v1/disconnect', '/admin/drain']) {
    const res = await fetch(`${base}${path}`, { method: 'POST', headers: { origin: 'http://evil.example' }, body: '{"user":"u1"}' });
    assert.equal(res.status, 403, path);
    assert.equal(((await res.json()) as { reason: string }).reason, 'forbidden');
  }
  const same = await fetch(`${base}/v1/disconnect`, { method: 'POST', headers: { origin: base }, body: '{"user":"u1"}' });
  assert.equal(same.status, 202, 'the page\'s own origin');
  assert.equal((await fetch(`${base}/v1/disconnect`, { method: 'POST', body: '{"user":"u1"}' })).status, 202, 'no Origin (curl, a backend)');
});

test('GET /ui without a build answers 503 and says to build; a missing asset is 404', async () => {
  const res = await fetch(`${base}/ui`);
  assert.equal(res.status, 503);
  assert.match(((await res.json()) as { message: string }).message, /the admin page is not built here .*run pnpm build/);
  assert.equal((await fetch(`${base}/ui/assets/index-abc.js`)).status, 404);
  assert.equal((await fetch(`${base}/ui/assets/..%2Fpackage.json`)).status, 404);
  assert.equal((await fetch(`${base}/ui/assets/x.exe`)).status, 404);
});

describe('GET /ui from a build', () => {
  let dir: string;
  let ui: Server;
  let port: number;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-ui-'));
    mkdirSync(join(dir, 'dist', 'assets'), { recursive: true });
    writeFileSync(join(dir, 'dist', 'index.html'), '<!doctype html><html><head><title>t</title></head><body></body></html>');
    writeFileSync(join(dir, 'dist', 'assets', 'index-a1.js'), 'console.log(1)');
    writeFileSync(join(dir, 'secret.js'), 'the secret');
    writeFileSync(join(dir, 'dist', 'assets', '.hidden.js'), 'hidden');
    ui = createAdminServer({ ...deps, config: { ...config, adminToken: 't' }, uiDir: pathToFileURL(join(dir, 'dist') + '/') });
    await new Promise<void>((resolve) => ui.listen(0, '127.0.0.1', resolve));
    port = (ui.address() as AddressInfo).port;
  });
  after(async () => {
    await new Promise<void>((resolve) => ui.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  });

  /** A request as sent, path untouched (fetch would resolve ../ itself). */
  const raw = (path: string): Promise<{ status: number; headers: string; body: string }> => new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`));
    let got = '';
    s.on('data', (d) => (got += d.toString()));
    s.on('end', () => {
      const [head = '', body = ''] = got.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body });
    });
    s.on('error', reject);
  });

  test('the index, with its CSP and the token meta; an asset, immutable; nothing outside the build', async () => {
    const index = await raw('/ui');
    assert.equal(index.status, 200);
    assert.match(index.headers, /content-security-policy: default-src 'none'/);
    assert.match(index.headers, /cache-control: no-cache/);
    assert.match(index.body, /<meta name="sluice-auth" content="token">/);
    assert.equal((await raw('/ui/')).status, 200);
    const asset = await raw('/ui/assets/index-a1.js');
    assert.equal(asset.status, 200);
    assert.match(asset.headers, /content-type: text\/javascript/);
    assert.match(asset.headers, /immutable/);
    assert.equal(asset.body, 'console.log(1)');
    for (const path of ['/ui/assets/../../secret.js', '/ui/assets/..%2F..%2Fsecret.js', '/ui/assets/%2e%2e/%2e%2e/secret.js', '/ui/assets/.hidden.js',
      '/ui/assets/', '/ui/assets/index-a1.js/x', '/ui/../secret.js']) {
      const r = await raw(path);
      assert.ok(r.status === 404, `${path}: ${r.status}`);
      assert.ok(!r.body.includes('the secret') && r.body !== 'hidden', path);
    }
  });
});
