/**
 * The operator's whole path: a real Prometheus (Debian's prometheus binary)
 * scrapes two running gateways on loopback every 500 ms, with the alerting
 * rules of deploy/prometheus/alerts.yml loaded. A scripted `ws` client
 * triggers each limit, and the test reads the counters back through
 * Prometheus's HTTP query API, exactly as much as the client saw.
 *
 * Gateway A (WS_AUTH=none) has small per-socket limits; gateway B
 * (WS_AUTH=jwt) has small tenant and IP windows. Each step reads a counter's
 * value from a scrape that began after the step's start (the baseline), acts,
 * then reads it from a scrape that began after the client saw every answer.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SignJWT } from 'jose';
import WebSocket from 'ws';
import { requireSystemDep, systemDepError } from '../../../tools/system-deps.mjs';
import { Client, type Gateway, rawUpgrade, startGateway } from './harness.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const ALERTS = join(ROOT, 'deploy/prometheus/alerts.yml');
const DASHBOARD = join(ROOT, 'deploy/grafana/sluice-dashboard.json');
const SCRAPE_MS = 500;
const SECRET = 'prometheus-test-secret-of-at-least-32-chars';

// --- a private Prometheus -------------------------------------------------------

interface Prometheus {
  readonly port: number;
  readonly logs: () => string;
  api<T = unknown>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts /usr/bin/prometheus with a temporary configuration and TSDB. It
 * listens on 127.0.0.1:0, so the kernel picks the port as Prometheus binds
 * it (no window between picking a free port and binding it), and the port is
 * read from its "Listening on" log line.
 */
async function startPrometheus(scrapeTargets: string[]): Promise<Prometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-prometheus-'));
  const config = [
    'global:',
    `  scrape_interval: ${SCRAPE_MS}ms`,
    `  scrape_timeout: ${SCRAPE_MS}ms`,
    '  evaluation_interval: 1s',
    'rule_files:',
    `  - ${JSON.stringify(ALERTS)}`,
    'scrape_configs:',
    '  - job_name: sluice',
    '    static_configs:',
    `      - targets: ${JSON.stringify(scrapeTargets)}`,
    '',
  ].join('\n');
  writeFileSync(join(dir, 'prometheus.yml'), config);
  const proc: ChildProcess = spawn(requireSystemDep('prometheus'), [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`,
    '--web.listen-address=127.0.0.1:0', '--log.level=info'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  let exitedWith: string | undefined;
  const exit = new Promise<void>((resolve) => {
    proc.once('exit', (code, signal) => {
      exitedWith = String(code ?? signal);
      resolve();
    });
  });
  const port = await new Promise<number>((resolve, reject) => {
    proc.once('error', (e) => reject(systemDepError('prometheus', e)));
    proc.stderr!.on('data', (c: Buffer) => {
      log += c.toString();
      const m = /msg="Listening on" address=127\.0\.0\.1:(\d+)/.exec(log);
      if (m) resolve(Number(m[1]));
    });
    void exit.then(() => reject(new Error(`prometheus exited (${exitedWith}) before listening:\n${log}`)));
    setTimeout(() => reject(new Error(`prometheus did not listen in 20 s:\n${log}`)), 20_000).unref();
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  while ((await fetch(`${base}/-/ready`).then((r) => r.status, () => 0)) !== 200) {
    if (exitedWith !== undefined || Date.now() > deadline) throw new Error(`prometheus not ready:\n${log}`);
    await sleep(50);
  }
  return {
    port,
    logs: () => log,
    async api<T>(path: string): Promise<T> {
      const body = (await (await fetch(`${base}${path}`)).json()) as { status: string; data: T; error?: string };
      assert.equal(body.status, 'success', `${path}: ${body.error}`);
      return body.data;
    },
    async stop() {
      if (exitedWith === undefined) proc.kill('SIGTERM');
      await exit;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface MatrixResult {
  resultType: 'matrix';
  result: { metric: Record<string, string>; values: [number, string][] }[];
}
interface VectorResult {
  resultType: 'vector';
  result: { metric: Record<string, string>; value: [number, string] }[];
}

// --- the fixture ------------------------------------------------------------------

let prom: Prometheus;
let a: Gateway;
let b: Gateway;

before(async () => {
  requireSystemDep('prometheus'); // before the gateways: a missing binary fails at once, naming its package
  [a, b] = await Promise.all([
    startGateway({
      WS_MAX_FRAME_BYTES: '1024', WS_HARD_MAX_FRAME_BYTES: '4096', WS_MAX_MESSAGES: '12', WS_RATE_WINDOW_MS: '60000',
      WS_MAX_JOINS: '3', WS_MAX_STRIKES: '5',
    }),
    startGateway({
      WS_AUTH: 'jwt', WS_JWT_SECRET: SECRET, WS_MAX_MESSAGES: '1000',
      WS_TENANT_MSG_LIMIT: '3', WS_TENANT_WINDOW_MS: '600000', WS_IP_CONNECT_LIMIT: '6', WS_IP_WINDOW_MS: '600000',
    }),
  ]);
  prom = await startPrometheus([a, b].map((g) => `127.0.0.1:${g.adminPort}`));
});

after(async () => {
  await prom?.stop();
  for (const gw of [a, b]) if (gw !== undefined) assert.equal(await gw.stop(), 0);
});

const instance = (gw: Gateway) => `127.0.0.1:${gw.adminPort}`;

/** A selector of one series of `gw`. */
function series(gw: Gateway, name: string, labels: Record<string, string> = {}): string {
  const all = { instance: instance(gw), ...labels };
  return `${name}{${Object.entries(all).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(',')}}`;
}

/**
 * The series' value in the newest sample Prometheus stored from a scrape that
 * began after `since` (ms); waits for that scrape. The samples are read raw
 * (a range selector), so a counter's value is the gateway's, not an
 * extrapolated rate. 10 ms of margin for Prometheus's timestamp alignment.
 */
async function valueAfter(selector: string, since: number, ms = 10_000): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const data = await prom.api<MatrixResult>(`/api/v1/query?query=${encodeURIComponent(`${selector}[30s]`)}`);
    assert.ok(data.result.length <= 1, `${selector} matches ${data.result.length} series`);
    const fresh = data.result[0]?.values.filter(([t]) => t * 1000 > since + 10);
    if (fresh !== undefined && fresh.length > 0) return Number(fresh.at(-1)![1]);
    if (Date.now() > deadline) throw new Error(`no sample of ${selector} scraped after ${new Date(since).toISOString()}:\n${prom.logs().slice(-2000)}`);
    await sleep(100);
  }
}

/** Values of several series, each from a scrape that began after now. */
async function values(selectors: string[]): Promise<number[]> {
  const since = Date.now();
  return Promise.all(selectors.map((s) => valueAfter(s, since)));
}

/** Waits until Prometheus's newest sample of `selector` satisfies `ok` (for a gauge following state that settles asynchronously). */
async function until(selector: string, ok: (v: number) => boolean, ms = 10_000): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await valueAfter(selector, Date.now(), ms);
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`${selector} stayed at ${v}`);
  }
}

/**
 * Reads `selectors` through Prometheus, runs `script`, reads them again and
 * asserts that each moved by exactly what the script returns for it (0 for
 * those it leaves out).
 */
async function expectDeltas(selectors: Record<string, string>, script: () => Promise<Record<string, number>>): Promise<void> {
  const keys = Object.keys(selectors);
  const before = await values(keys.map((k) => selectors[k]!));
  const want = await script();
  const afterwards = await values(keys.map((k) => selectors[k]!));
  const got = Object.fromEntries(keys.map((k, i) => [k, afterwards[i]! - before[i]!]));
  assert.deepEqual(got, Object.fromEntries(keys.map((k) => [k, want[k] ?? 0])));
}

const rejections = (gw: Gateway, reason: string) => series(gw, 'sluice_limit_rejections_total', { reason });
const closes = (gw: Gateway, reason: string) => series(gw, 'sluice_clients_closed_total', { reason });

/** A publish frame of exactly `bytes` bytes. */
function frameOfSize(ref: string, bytes: number): string {
  const head = `{"type":"publish","ref":"${ref}","topic":"big","ephemeral":true,"data":"`;
  const tail = '"}';
  return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
}

const token = (claims: Record<string, unknown>) =>
  new SignJWT({ sub: 'prom-test', tenant: 'acme', ...claims }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime('10m')
    .sign(new TextEncoder().encode(SECRET));
const bearer = async () => ({ authorization: `Bearer ${await token({ topics: ['allowed:*'], publish: ['allowed:*'] })}` });

// --- the script ---------------------------------------------------------------------

describe('Prometheus scrapes the gateways', () => {
  test('both targets are up, and the gateway metrics are stored with their labels', async () => {
    const since = Date.now();
    for (const gw of [a, b]) {
      assert.equal(await valueAfter(series(gw, 'up', { job: 'sluice' }), since), 1);
      assert.equal(await valueAfter(series(gw, 'sluice_ready'), since), 1);
    }
    const reasons = await prom.api<VectorResult>(`/api/v1/query?query=${encodeURIComponent(series(a, 'sluice_limit_rejections_total'))}`);
    assert.ok(reasons.result.some((r) => r.metric.reason === 'rate_limited'), JSON.stringify(reasons.result.map((r) => r.metric)));
  });
});

describe('per-socket limits, gateway A, counted in Prometheus', () => {
  test('sluice_frames_in_total: five pings are five frames', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ frames: series(a, 'sluice_frames_in_total') }, async () => {
      for (let i = 0; i < 5; i++) assert.equal((await c.request({ type: 'ping' })).type, 'pong');
      return { frames: 5 };
    });
    c.close();
  });

  test('rate_limited: three frames past WS_MAX_MESSAGES', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ limited: rejections(a, 'rate_limited'), frames: series(a, 'sluice_frames_in_total') }, async () => {
      for (let i = 0; i < 12; i++) assert.equal((await c.request({ type: 'ping' })).type, 'pong');
      let limited = 0;
      for (let i = 0; i < 3; i++) if ((await c.request({ type: 'ping' })).reason === 'rate_limited') limited++;
      assert.equal(limited, 3);
      return { limited, frames: 15 };
    });
    c.close();
  });

  test('payload_too_large: a frame above WS_MAX_FRAME_BYTES is a rejection, not a close', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ rejected: rejections(a, 'payload_too_large'), closed: closes(a, 'payload_too_large') }, async () => {
      c.send(frameOfSize('over', 1025));
      assert.equal((await c.next((f) => f.ref === 'over')).reason, 'payload_too_large');
      return { rejected: 1 };
    });
    c.close();
  });

  test('1009: a frame above WS_HARD_MAX_FRAME_BYTES is a close for payload_too_large, not a rejection', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ rejected: rejections(a, 'payload_too_large'), closed: closes(a, 'payload_too_large') }, async () => {
      c.send(frameOfSize('hard', 4097));
      assert.equal((await c.closedBy()).code, 1009);
      return { closed: 1 };
    });
  });

  test('bad_request: two unparseable frames', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ bad: rejections(a, 'bad_request'), abusive: closes(a, 'abusive') }, async () => {
      c.send('nope');
      c.send('{"type":"join"}');
      let bad = 0;
      for (let i = 0; i < 2; i++) if ((await c.next((f) => f.type === 'error' || f.type === 'reply')).reason === 'bad_request') bad++;
      assert.equal(bad, 2);
      return { bad };
    });
    c.close();
  });

  test('abusive: WS_MAX_STRIKES rejected frames in a row close the socket (1008), each one counted too', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ bad: rejections(a, 'bad_request'), abusive: closes(a, 'abusive') }, async () => {
      for (let i = 0; i < 5; i++) c.send('nope');
      const closed = await c.closedBy();
      assert.equal(closed.code, 1008);
      assert.equal(c.frames.filter((f) => f.reason === 'bad_request').length, 5);
      return { bad: 5, abusive: 1 };
    });
  });

  test('too_many_joins: two joins past WS_MAX_JOINS', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ joins: rejections(a, 'too_many_joins') }, async () => {
      for (const t of ['j1', 'j2', 'j3']) assert.equal((await c.request({ type: 'join', topic: t })).status, 'ok');
      let over = 0;
      for (const t of ['j4', 'j5']) if ((await c.request({ type: 'join', topic: t })).reason === 'too_many_joins') over++;
      assert.equal(over, 2);
      return { joins: over };
    });
    c.close();
  });

  test('not_joined: two leaves of topics never joined', async () => {
    const c = await Client.connect(a.url());
    await expectDeltas({ notJoined: rejections(a, 'not_joined') }, async () => {
      let n = 0;
      for (const t of ['never1', 'never2']) if ((await c.request({ type: 'leave', topic: t })).reason === 'not_joined') n++;
      assert.equal(n, 2);
      return { notJoined: n };
    });
    c.close();
  });

  test('sluice_connected_sockets follows the sockets the client opens and closes', async () => {
    const sockets = series(a, 'sluice_connected_sockets');
    await until(sockets, (v) => v === 0);
    const clients = [await Client.connect(a.url()), await Client.connect(a.url()), await Client.connect(a.url())];
    assert.equal(await valueAfter(sockets, Date.now()), 3);
    for (const c of clients) c.close();
    assert.equal(await until(sockets, (v) => v === 0), 0);
  });
});

describe('identity, tenant and IP limits, gateway B (WS_AUTH=jwt), counted in Prometheus', () => {
  test('forbidden: a join and a publish the token does not allow', async () => {
    const c = await Client.connect(b.url(), { headers: await bearer() });
    await expectDeltas({ forbidden: rejections(b, 'forbidden') }, async () => {
      let n = 0;
      if ((await c.request({ type: 'join', topic: 'secret:1' })).reason === 'forbidden') n++;
      if ((await c.request({ type: 'publish', topic: 'secret:1', data: 1, ephemeral: true })).reason === 'forbidden') n++;
      assert.equal(n, 2);
      return { forbidden: n };
    });
    c.close();
  });

  test('tenant_rate_limited: publishes past WS_TENANT_MSG_LIMIT, and the accepted ones as published', async () => {
    const c = await Client.connect(b.url(), { headers: await bearer() });
    await expectDeltas({
      limited: rejections(b, 'tenant_rate_limited'),
      published: series(b, 'sluice_messages_published_total', { class: 'ephemeral' }),
    }, async () => {
      let limited = 0;
      let ok = 0;
      for (let i = 0; i < 10; i++) {
        const r = await c.request({ type: 'publish', topic: 'allowed:t', data: i, ephemeral: true });
        if (r.status === 'ok') ok++;
        else {
          assert.equal(r.reason, 'tenant_rate_limited');
          limited++;
        }
      }
      assert.ok(limited >= 1 && ok >= 1, `ok ${ok}, limited ${limited}`);
      return { limited, published: ok };
    });
    c.close();
  });

  test('unauthorized: an upgrade without a token is refused 401 and counted by outcome', async () => {
    await expectDeltas({ unauthorized: series(b, 'sluice_upgrades_total', { outcome: 'unauthorized' }) }, async () => {
      assert.equal((await rawUpgrade(b.port)).status, 401);
      return { unauthorized: 1 };
    });
  });

  test('ip_rate_limited: upgrades past WS_IP_CONNECT_LIMIT are refused 429; accepted and refused ones counted by outcome', async () => {
    const headers = await bearer();
    await expectDeltas({
      refused: series(b, 'sluice_upgrades_total', { outcome: 'ip_rate_limited' }),
      accepted: series(b, 'sluice_upgrades_total', { outcome: 'accepted' }),
    }, async () => {
      let refused = 0;
      let accepted = 0;
      for (let i = 0; i < 8; i++) {
        const status = await new Promise<number>((resolve, reject) => {
          const ws = new WebSocket(b.url(), ['sluice.v1'], { headers });
          ws.once('open', () => {
            ws.close();
            resolve(101);
          });
          ws.once('unexpected-response', (_req, res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          });
          ws.once('error', reject);
        });
        if (status === 101) accepted++;
        else {
          assert.equal(status, 429);
          refused++;
        }
      }
      // The window holds 6 attempts per 10 minutes; the steps above used some of them.
      assert.ok(refused >= 1, `accepted ${accepted}, refused ${refused}`);
      return { refused, accepted };
    });
  });
});

describe('the rules and the dashboard in Prometheus', () => {
  test('every alerting rule of alerts.yml is loaded and evaluates with health "ok"', async () => {
    const file = readFileSync(ALERTS, 'utf8');
    const names = [...file.matchAll(/^\s*- alert: (\w+)\s*$/gm)].map((m) => m[1]!).sort();
    assert.ok(names.length > 0);
    type Rules = { groups: { name: string; lastEvaluation: string; rules: { name: string; health: string; lastError?: string; type: string }[] }[] };
    // Wait for an evaluation of every group that began after the script above: the rules ran on its data.
    const since = Date.now();
    let rules: Rules;
    const deadline = Date.now() + 10_000;
    for (;;) {
      rules = await prom.api<Rules>('/api/v1/rules');
      if (rules.groups.length > 0 && rules.groups.every((g) => Date.parse(g.lastEvaluation) > since)) break;
      if (Date.now() > deadline) throw new Error(`rules not evaluated: ${JSON.stringify(rules.groups.map((g) => [g.name, g.lastEvaluation]))}`);
      await sleep(100);
    }
    const loaded = rules.groups.flatMap((g) => g.rules);
    assert.deepEqual(loaded.map((r) => r.name).sort(), names);
    assert.deepEqual(loaded.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.health} ${r.lastError ?? ''}`), []);
    assert.ok(loaded.every((r) => r.type === 'alerting'));
  });

  test('every dashboard query runs in Prometheus, and returns series for both gateways where embedded mode has the metric', async () => {
    const d = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: { title: string; targets?: { expr: string }[] }[] };
    const exprs = d.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ title: p.title, expr: t.expr })));
    assert.ok(exprs.length > 30);
    // Grafana's variables as Grafana would fill them for "All" over this short run.
    const fill = (e: string) => e.replaceAll('$__rate_interval', '5s').replaceAll('$__range', '1m').replaceAll('$job', '.*')
      .replaceAll('$instance', '.*');
    const clusterOnly = /sluice_redis_(up|outages_total|command_seconds)/;
    const empty: string[] = [];
    for (const { title, expr } of exprs) {
      const data = await prom.api<VectorResult>(`/api/v1/query?query=${encodeURIComponent(fill(expr))}`);
      assert.equal(data.resultType, 'vector', `${title}: ${expr}`);
      if (!clusterOnly.test(expr) && data.result.length === 0) empty.push(`${title}: ${expr}`);
    }
    assert.deepEqual(empty, []);
    // Per-node panels show both nodes.
    const perNode = await prom.api<VectorResult>(`/api/v1/query?query=${encodeURIComponent('sum by (instance) (sluice_connected_sockets)')}`);
    assert.deepEqual(perNode.result.map((r) => r.metric.instance).sort(), [instance(a), instance(b)].sort());
  });
});
