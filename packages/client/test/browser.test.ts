/**
 * The SDK in a real browser: src/index.ts bundled for the browser by esbuild
 * (test/browser/entry.ts is the page's script), served by node:http on
 * 127.0.0.1, loaded by a page in headless Chromium (Debian's `chromium`,
 * /usr/bin/chromium, which `npm test` installs) driven by playwright-core, and
 * connected with the browser's own WebSocket to a real gateway.
 *
 * There is no skip: without /usr/bin/chromium every test here fails.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { requireSystemDep } from '../../../tools/system-deps.mjs';
import type { RunConfig, RunResult } from './browser/entry.ts';
import { type Bundle, bundleForBrowser, type PageServer, servePage } from './browser/serve.ts';
import { type Gateway, history, metricValue, startGateway } from './helpers.ts';

const SECRET = 'browser-test-secret-0123456789-abcdefghij';
const TIMEOUT = { timeout: 60_000 };

interface Reported {
  readonly type: string;
  readonly detail: Record<string, unknown>;
}

interface OpenPage {
  readonly context: BrowserContext;
  readonly page: Page;
  /** What the page reported through the exposed function, in order. */
  readonly reported: Reported[];
  /** Uncaught errors in the page. */
  readonly pageErrors: string[];
}

let bundle: Bundle;
let server: PageServer;
let browser: Browser;

async function openPage(): Promise<OpenPage> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const reported: Reported[] = [];
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.exposeFunction('sluiceReport', (type: string, detail: Record<string, unknown>) => {
    reported.push({ type, detail });
  });
  const res = await page.goto(`${server.origin}/`, { waitUntil: 'load' });
  assert.equal(res?.status(), 200);
  await page.waitForFunction(() => 'sluiceBrowser' in globalThis, undefined, { timeout: 10_000 });
  return { context, page, reported, pageErrors };
}

/** Runs the page's script with `cfg` and hands its summary back to Node. */
function runInPage(page: Page, cfg: RunConfig): Promise<RunResult> {
  return page.evaluate((c) => (globalThis as unknown as { sluiceBrowser: { run(c: RunConfig): Promise<RunResult> } }).sluiceBrowser.run(c), cfg);
}

function sign(claims: Record<string, unknown>, secret = SECRET): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('10m')
    .sign(new TextEncoder().encode(secret));
}

const accepted = (gw: Gateway): Promise<number> => metricValue(gw, 'sluice_upgrades_total', '{outcome="accepted"}');

// A test of its own, so that a missing browser is counted as a failure, not only as cancelled tests below.
// Debian's chromium at /usr/bin/chromium (tools/system-deps.mjs; SLUICE_DEP_CHROMIUM overrides the path).
test('Debian\'s chromium is installed', () => {
  requireSystemDep('chromium');
});

describe('the SDK in headless Chromium', TIMEOUT, () => {
  before(async () => {
    const executablePath = requireSystemDep('chromium');
    bundle = await bundleForBrowser();
    server = await servePage(bundle);
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--headless=new'], timeout: 30_000 });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
  });

  test('the bundle holds the SDK and @sluice/protocol from source, and nothing from Node', () => {
    assert.ok(bundle.inputs.includes('packages/client/src/client.ts'), bundle.inputs.join(', '));
    assert.ok(bundle.inputs.includes('packages/client/src/policy.ts'), bundle.inputs.join(', '));
    assert.ok(bundle.inputs.some((p) => p.startsWith('packages/protocol/src/')), bundle.inputs.join(', '));
    assert.deepEqual(bundle.inputs.filter((p) => p.startsWith('node:') || p.includes('node_modules')), []);
    assert.doesNotMatch(bundle.code, /\brequire\(/);
  });

  describe('a gateway without auth', () => {
    let gw: Gateway;
    before(async () => {
      gw = await startGateway();
    });
    after(async () => {
      assert.equal(await gw.stop(), 0, gw.stderr());
    });

    test('the page connects with the browser\'s WebSocket, subscribes, publishes every class and receives its own events', async () => {
      const { context, page, reported, pageErrors } = await openPage();
      try {
        const before = await accepted(gw);
        const r = await runInPage(page, { url: gw.url(), topic: 'browser:plain', timeoutMs: 10_000 });
        assert.match(r.userAgent, /HeadlessChrome\/\d+/);
        assert.equal(r.nativeWebSocket, true, 'the SDK ran on the browser\'s own WebSocket');
        assert.deepEqual(r.errors, []);
        assert.equal(r.connected.length, 1);
        assert.equal(r.connected[0]!.url, gw.url());
        assert.match(r.connected[0]!.connectionId, /^[0-9a-f]+\.\d+\.\d+\.\d+$/);
        assert.ok(r.connected[0]!.heartbeatMs > 0);
        assert.deepEqual(r.joined, { recovered: undefined });
        const { durable, keyed, ephemeral } = r.published!;
        assert.match(durable.id ?? '', /^\d+-\d+$/);
        assert.deepEqual(keyed, {});
        assert.deepEqual(ephemeral, {});
        // Its own three events, in publish order; the durable one with the id its publish returned.
        assert.deepEqual(r.received.map((e) => (e.data as { n: number }).n), [1, 2, 3]);
        assert.deepEqual(r.received[0], { topic: 'browser:plain', id: durable.id, data: { from: 'browser', n: 1, text: 'grüße ✓' } });
        assert.equal(r.received[1]!.key, 'k1');
        assert.equal(r.received[1]!.id, undefined);
        assert.equal(r.received[2]!.id, undefined);
        assert.equal(r.stateAfterClose, 'closed');
        // The same, seen from Node: the exposed function's reports, the gateway's counter, the topic's history.
        assert.deepEqual(reported.map((x) => x.type), ['connected', 'event', 'event', 'event', 'disconnected']);
        assert.deepEqual(reported.at(-1)!.detail, { code: 1000, reason: 'client_closed', willReconnect: false });
        assert.equal(await accepted(gw) - before, 1);
        const stored = await history(gw, 'browser:plain');
        assert.deepEqual(stored.map((f) => [f.id, f.data]), [[durable.id, { from: 'browser', n: 1, text: 'grüße ✓' }]]);
        assert.deepEqual(pageErrors, []);
        assert.ok(server.requests.includes('GET /sdk.js'));
      } finally {
        await context.close();
      }
    });
  });

  describe('a gateway with WS_AUTH=jwt and WS_ALLOWED_ORIGINS', () => {
    let gw: Gateway;
    before(async () => {
      // The page's origin is the only one allowed: the browser's Origin header is checked for real.
      gw = await startGateway({ WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_ALLOWED_ORIGINS: server.origin });
    });
    after(async () => {
      assert.equal(await gw.stop(), 0, gw.stderr());
    });

    test('the token travels as the bearer. subprotocol, the gateway selects sluice.v1, and the token\'s rights apply', async () => {
      const token = await sign({ sub: 'browser-user', topics: ['room:*'], publish: ['room:*'] });
      const { context, page, reported, pageErrors } = await openPage();
      try {
        const r = await runInPage(page, { url: gw.url(), token, topic: 'room:1', forbiddenTopic: 'other:1', record: true, timeoutMs: 10_000 });
        assert.equal(r.connected.length, 1);
        assert.equal(r.sockets.length, 1);
        assert.deepEqual(r.sockets[0], { url: gw.url(), protocols: ['sluice.v1', `bearer.${token}`], protocol: 'sluice.v1', opened: true });
        assert.doesNotMatch(r.sockets[0]!.url, /token/);
        assert.deepEqual(r.received.map((e) => (e.data as { n: number }).n), [1, 2, 3]);
        assert.equal(r.received[0]!.id, r.published!.durable.id);
        assert.deepEqual(r.forbidden, { code: 'forbidden' });
        assert.deepEqual(r.errors.map((e) => e.code), ['forbidden']);
        assert.ok(reported.some((x) => x.type === 'connected'));
        assert.deepEqual(pageErrors, []);
      } finally {
        await context.close();
      }
    });

    test('a refused token: the browser shows the SDK only a failed socket (1006, no status), and it keeps backing off', async () => {
      const token = await sign({ sub: 'browser-user', topics: ['room:*'] }, 'another-secret-of-at-least-32-chars!!');
      const { context, page, pageErrors } = await openPage();
      try {
        const before = await metricValue(gw, 'sluice_upgrades_total', '{outcome="unauthorized"}');
        const r = await runInPage(page, { url: gw.url(), token, topic: 'room:1', expectRefusals: 2, timeoutMs: 10_000 });
        assert.deepEqual(r.connected, []);
        assert.ok(r.reconnecting.length >= 2);
        for (const e of r.reconnecting) assert.deepEqual({ code: e.code, status: e.status }, { code: 1006, status: undefined });
        assert.deepEqual(r.reconnecting.slice(0, 2).map((e) => e.attempt), [1, 2]);
        assert.ok(await metricValue(gw, 'sluice_upgrades_total', '{outcome="unauthorized"}') - before >= 2, 'the gateway refused each attempt with 401');
        assert.deepEqual(pageErrors, []);
      } finally {
        await context.close();
      }
    });
  });
});
