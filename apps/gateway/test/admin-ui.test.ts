/**
 * The admin page (GET /ui) in headless Chromium (Debian's /usr/bin/chromium,
 * driven by playwright-core) against two real gateway nodes in cluster mode
 * on a real redis-server, with real sockets of real users: log in (a wrong
 * token first), see both nodes with their socket counts, the largest topic,
 * a user's connections on both nodes; disconnect that user from the page and
 * see exactly its sockets close; drain node B from the page and see it leave
 * the list. Every request the page makes goes to the admin API's origin, the
 * page's CSP is sent, and the browser logs no error but the 401 of the wrong
 * token.
 *
 * It serves the page's build (apps/admin-ui/dist, made by `pnpm build`); there
 * is no skip: without the build or without /usr/bin/chromium it fails.
 * SLUICE_UI_SCREENSHOTS=<dir> saves the screenshots docs/operations.md shows.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { type Browser, chromium, type Page } from 'playwright-core';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { requireSystemDep } from '../../../tools/system-deps.mjs';
import { Client, eventually, type Gateway, startGateway, TEST_ADMIN_TOKEN } from './harness.ts';
import { bearer, SECRET, token } from './tokens.ts';

const TIMEOUT = { timeout: 120_000 };
const SHOTS = process.env.SLUICE_UI_SCREENSHOTS;
const UI_BUILD = new URL('../../admin-ui/dist/index.html', import.meta.url);

test('Debian\'s chromium is installed and the admin page is built', () => {
  requireSystemDep('chromium');
  assert.ok(existsSync(UI_BUILD), 'apps/admin-ui/dist is missing: run pnpm build (the README\'s npm test does)');
});

/** The node id of a gateway: the first part of its sockets' connection ids. */
async function nodeIdOf(gw: Gateway): Promise<string> {
  const c = await Client.connect(gw.url(), bearer(await token({ sub: 'probe' })));
  c.close();
  return c.welcome.connectionId.split('.')[0]!;
}

describe('the admin page on a two-node cluster', TIMEOUT, () => {
  let redis: RedisServer;
  let a: Gateway;
  let b: Gateway;
  let idA: string;
  let idB: string;
  let browser: Browser;
  let page: Page;
  /** Every request the page made, every console message of level error or warning, every uncaught error. */
  const requests: string[] = [];
  const consoleErrors: string[] = [];
  const pageErrors: string[] = [];
  /** The users' sockets: u1 on both nodes, u2 on A, u3 on B. */
  const sockets = new Map<string, Client[]>();

  before(async () => {
    const executablePath = requireSystemDep('chromium');
    redis = await startRedis();
    const env = { REDIS_URL: redis.url, WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_PRESENCE_TOPICS: 'room.*' };
    [a, b] = await Promise.all([startGateway(env), startGateway(env)]);
    for (const gw of [a, b]) await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200, 10_000);
    const open = async (gw: Gateway, user: string, topics: string[]): Promise<void> => {
      const c = await Client.connect(gw.url(), bearer(await token({ sub: user, topics: ['*'] })));
      for (const topic of topics) assert.equal((await c.request({ type: 'join', topic })).status, 'ok');
      sockets.set(user, [...(sockets.get(user) ?? []), c]);
    };
    await open(a, 'u1', ['room.big', 'room.a']);
    await open(a, 'u1', ['room.big']);
    await open(a, 'u2', ['room.big', 'room.a']);
    await open(b, 'u1', ['room.big']);
    await open(b, 'u3', ['room.big', 'room.b']);
    [idA, idB] = await Promise.all([nodeIdOf(a), nodeIdOf(b)]);
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--headless=new'], timeout: 30_000 });
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    page = await context.newPage();
    page.on('request', (r) => requests.push(r.url()));
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') consoleErrors.push(m.text());
    });
    page.on('pageerror', (e) => pageErrors.push(String(e)));
  });
  after(async () => {
    await browser?.close();
    for (const list of sockets.values()) for (const c of list) c.close();
    for (const gw of [a, b]) if (gw?.alive) assert.equal(await gw.stop(), 0, gw.stderr());
    await redis?.stop();
  });

  const shot = async (name: string): Promise<void> => {
    if (SHOTS === undefined) return;
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
  };

  const socketsShown = (id: string): Promise<string | null> =>
    page.locator(`[data-testid="node-row"][data-node="${id}"] [data-testid="node-sockets"]`).textContent({ timeout: 1000 }).catch(() => null);

  const confirm = async (expect: RegExp): Promise<void> => {
    const dialog = page.getByTestId('confirm-dialog');
    await dialog.waitFor({ state: 'visible', timeout: 5000 });
    assert.match((await page.getByTestId('confirm-text').textContent()) ?? '', expect);
    await page.getByTestId('confirm-ok').click();
  };

  test('the page is served with its CSP and asks for the token without a request answered 401', async () => {
    const res = await page.goto(a.admin('/ui'), { waitUntil: 'load' });
    assert.equal(res?.status(), 200);
    const csp = (await res!.allHeaders())['content-security-policy'] ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /connect-src 'self'/);
    assert.match(csp, /frame-ancestors 'none'/);
    await page.getByTestId('login-form').waitFor({ timeout: 10_000 });
    assert.deepEqual(requests.filter((u) => u.includes('/v1/')), [], 'no API request before the login');
  });

  test('a wrong token shows a login error, not a blank page', async () => {
    await page.getByTestId('login-token').fill('not-the-token');
    await page.getByTestId('login-submit').click();
    await page.getByTestId('login-error').waitFor({ timeout: 10_000 });
    assert.match((await page.getByTestId('login-error').textContent()) ?? '', /wrong token/i);
    await shot('admin-login-error');
  });

  test('the right token shows both nodes with their sockets, and the largest topic', async () => {
    await page.getByTestId('login-token').fill(TEST_ADMIN_TOKEN);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('nodes-table').waitFor({ timeout: 10_000 });
    // The sockets opened above (nodeIdOf's are closed): 3 on A, 2 on B.
    await eventually(async () => (await socketsShown(idA)) === '3' && (await socketsShown(idB)) === '2', 15_000);
    assert.equal(await page.getByTestId('node-row').count(), 2);
    assert.equal(await page.locator(`[data-testid="node-row"][data-node="${idA}"]`).getAttribute('data-state'), 'ready');
    await eventually(async () => (await page.locator('[data-testid="topic-row"][data-topic="room.big"] [data-testid="topic-subscribers"]')
      .textContent({ timeout: 1000 }).catch(() => null)) === '5', 15_000);
    // The largest first.
    assert.equal(await page.getByTestId('topic-row').first().getAttribute('data-topic'), 'room.big');
    await shot('admin-nodes');
  });

  test('a user\'s connections across both nodes, then a disconnect from the page closes exactly its sockets', async () => {
    await page.getByTestId('user-id').fill('u1');
    await page.getByTestId('user-find').click();
    await eventually(async () => (await page.getByTestId('connection-row').count()) === 3, 10_000);
    const nodes = await page.getByTestId('connection-row').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-connection')!.split('.')[0]));
    assert.deepEqual(nodes.sort(), [idA, idA, idB].sort());
    await shot('admin-user');
    await page.getByTestId('user-disconnect').click();
    await confirm(/u1/);
    const closes = await Promise.all(sockets.get('u1')!.map((c) => c.closedBy(5000)));
    for (const c of closes) assert.equal(c.code, 1008, 'closed by the admin disconnect (1008)');
    for (const user of ['u2', 'u3']) for (const c of sockets.get(user)!) assert.equal((await c.request({ type: 'ping' })).type, 'pong');
    await eventually(async () => (await page.getByTestId('activity-entry').count()) >= 1, 5000);
    assert.match((await page.getByTestId('activity-entry').first().textContent()) ?? '', /disconnect/i);
    // The action is in node A's log, with who asked.
    await eventually(() => a.logs.some((l) => l.msg === 'admin: disconnect' && l.source === 'ui'), 5000);
    await eventually(async () => (await socketsShown(idA)) === '1' && (await socketsShown(idB)) === '1', 15_000);
  });

  test('draining node B from the page stops it, and it leaves the list', async () => {
    await page.locator(`[data-testid="node-row"][data-node="${idB}"] [data-testid="node-drain"]`).click();
    await confirm(new RegExp(idB));
    assert.equal(await sockets.get('u3')![0]!.closedBy(10_000).then((c) => c.code), 1012, 'B\'s socket closed by the drain');
    assert.ok(await b.waitExit(20_000), 'node B exited');
    assert.equal(b.exitCode, 0);
    await eventually(async () => (await page.getByTestId('node-row').count()) === 1, 15_000);
    assert.equal(await page.getByTestId('node-row').first().getAttribute('data-node'), idA);
    await shot('admin-drained');
  });

  test('every request went to the admin API\'s origin, and the browser logged no error but the wrong token\'s 401', () => {
    const origin = new URL(a.admin('/')).origin;
    assert.ok(requests.length > 5, `requests seen: ${requests.length}`);
    assert.deepEqual(requests.filter((u) => new URL(u).origin !== origin), []);
    assert.deepEqual(pageErrors, []);
    const expected = /^Failed to load resource: the server responded with a status of 401/;
    assert.deepEqual(consoleErrors.filter((m) => !expected.test(m)), []);
    assert.equal(consoleErrors.filter((m) => expected.test(m)).length, 1, 'one 401: the wrong token');
  });
});
