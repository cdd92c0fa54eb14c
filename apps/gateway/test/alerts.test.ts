/**
 * The alerting rules and the dashboard: promtool checks and unit-tests the
 * rules (deploy/prometheus/alerts.yml, alerts.test.yml) and the example
 * configuration; every alert has a case where it fires and one where it
 * stays quiet, and is documented; every metric, label and label value the
 * rules, their test series and the Grafana dashboard name exists in a running
 * gateway's /metrics (cluster mode, on a private redis-server, so that the
 * sluice_redis_* metrics exist too). Needs Debian's `prometheus` (promtool).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type RedisServer, startRedis } from '@sluice/redis/testing';
import { requireSystemDep, systemDepError } from '../../../tools/system-deps.mjs';
import { Client, eventually, type Gateway, parseMetrics, startGateway } from './harness.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const ALERTS = 'deploy/prometheus/alerts.yml';
const ALERT_TESTS = 'deploy/prometheus/alerts.test.yml';
const CONFIG = 'deploy/prometheus/prometheus.yml';
const DASHBOARD = 'deploy/grafana/sluice-dashboard.json';
const read = (path: string): string => readFileSync(`${ROOT}/${path}`, 'utf8');

/** Runs promtool from the repository root; resolves with its exit code and output (it does not throw on a failure). */
async function promtool(...args: string[]): Promise<{ code: number; out: string }> {
  const bin = requireSystemDep('promtool');
  try {
    const { stdout, stderr } = await promisify(execFile)(bin, args, { cwd: ROOT });
    return { code: 0, out: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number | string; stdout?: string; stderr?: string };
    if (err.code === 'ENOENT') throw systemDepError('promtool', e);
    return { code: typeof err.code === 'number' ? err.code : -1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

const alertNames = (): string[] => [...read(ALERTS).matchAll(/^\s*- alert: (\w+)\s*$/gm)].map((m) => m[1]!);

describe('promtool', () => {
  test('check rules: alerts.yml is valid and has every alert', async () => {
    const { code, out } = await promtool('check', 'rules', ALERTS);
    assert.equal(code, 0, out);
    const found = /SUCCESS: (\d+) rules found/.exec(out);
    assert.ok(found, out);
    assert.equal(Number(found[1]), alertNames().length);
    assert.ok(alertNames().length >= 15, 'the rules file lost its alerts');
  });

  test('test rules: every case of alerts.test.yml passes', async () => {
    const { code, out } = await promtool('test', 'rules', ALERT_TESTS);
    assert.equal(code, 0, out);
    assert.match(out, /^\s*SUCCESS\s*$/m);
    assert.doesNotMatch(out, /FAILED/);
  });

  test('check config: the example prometheus.yml is valid and loads alerts.yml', async () => {
    const { code, out } = await promtool('check', 'config', CONFIG);
    assert.equal(code, 0, out);
    assert.match(out, /SUCCESS: 1 rule files found/);
    assert.match(out, new RegExp(`SUCCESS: ${alertNames().length} rules found`));
  });
});

describe('alerts.yml and its tests', () => {
  test('every alert has a case where it fires and one where it stays quiet, and a severity', () => {
    const firing = new Set<string>();
    const quiet = new Set<string>();
    let current: string | undefined;
    for (const line of read(ALERT_TESTS).split('\n')) {
      const name = /^\s*alertname: (\w+)\s*$/.exec(line);
      if (name) current = name[1];
      else if (current !== undefined && /^\s*exp_alerts: \[\]\s*$/.test(line)) {
        quiet.add(current);
        current = undefined;
      } else if (current !== undefined && /^\s*exp_alerts:\s*$/.test(line)) {
        firing.add(current);
        current = undefined;
      }
    }
    const names = alertNames();
    assert.deepEqual(names.filter((n) => !firing.has(n)), [], 'alerts never tested firing');
    assert.deepEqual(names.filter((n) => !quiet.has(n)), [], 'alerts never tested quiet');
    assert.deepEqual([...firing, ...quiet].filter((n) => !names.includes(n)), [], 'tests of alerts that do not exist');
    const severities = [...read(ALERTS).matchAll(/^\s*severity: (\w+)\s*$/gm)].map((m) => m[1]!);
    assert.equal(severities.length, names.length);
    for (const s of severities) assert.ok(['critical', 'warning', 'info'].includes(s), s);
  });

  test('every alert is documented in docs/operations.md', () => {
    const doc = read('docs/operations.md');
    const start = doc.indexOf('\n## Alerts and dashboard\n');
    assert.ok(start >= 0, 'no "Alerts and dashboard" section');
    const end = doc.indexOf('\n## ', start + 1);
    const body = doc.slice(start, end < 0 ? undefined : end);
    assert.deepEqual(alertNames().filter((n) => !body.includes(`| \`${n}\` |`)), [], 'alerts missing from the table');
  });
});

// --- every name the rules and the dashboard use exists in /metrics ------------

type Labels = Readonly<Record<string, string>>;

/** Sample name -> the label sets of its samples, read by the kit's exposition parser. */
function labelSets(text: string): Map<string, Labels[]> {
  const out = new Map<string, Labels[]>();
  for (const s of parseMetrics(text)) out.set(s.name, [...(out.get(s.name) ?? []), s.labels]);
  return out;
}

const METRIC = /\b((?:sluice|process|nodejs)_[a-z0-9_]*[a-z0-9])\b(\{[^}]*\})?/g;
/** Labels Prometheus adds at the scrape, not the gateway. */
const TARGET_LABELS = new Set(['job', 'instance']);

/** The PromQL expressions of the rules (comments and annotations left out). */
function ruleExpressions(): string[] {
  const exprs: string[] = [];
  let cur: string[] | undefined;
  let indent = 0;
  for (const line of read(ALERTS).split('\n')) {
    const start = /^(\s*)expr: \|\s*$/.exec(line);
    if (start) {
      cur = [];
      exprs.push('');
      indent = start[1]!.length;
      continue;
    }
    if (cur !== undefined) {
      const lead = /^(\s*)/.exec(line)![1]!.length;
      if (line.trim() !== '' && lead <= indent) cur = undefined;
      else exprs[exprs.length - 1] += `${line}\n`;
    }
  }
  return exprs;
}

function dashboardExpressions(): string[] {
  const d = JSON.parse(read(DASHBOARD)) as {
    panels: { targets?: { expr: string }[] }[];
    templating: { list: { query: { query: string } }[] };
  };
  return [...d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)), ...d.templating.list.map((v) => v.query.query)];
}

/** `series: 'name{...}'` of the promtool test file. */
function testSeries(): string[] {
  return [...read(ALERT_TESTS).matchAll(/^\s*- series: '([^']+)'\s*$/gm)].map((m) => m[1]!);
}

/** Problems with one expression: unknown metric names, label names or literal label values. */
function check(expr: string, samples: Map<string, Labels[]>, where: string): string[] {
  const problems: string[] = [];
  const metrics: string[] = [];
  for (const m of expr.matchAll(METRIC)) {
    const name = m[1]!;
    metrics.push(name);
    const series = samples.get(name);
    if (series === undefined) {
      problems.push(`${where}: ${name} is not in /metrics`);
      continue;
    }
    for (const mt of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)) {
      const [, label, op, value] = mt as unknown as [string, string, string, string];
      if (TARGET_LABELS.has(label) || value.includes('$')) continue;
      if (!series.some((s) => label in s)) {
        problems.push(`${where}: ${name} has no label ${label}`);
        continue;
      }
      // A value that is a literal, or an alternation of literals (a|b|c), must be one the gateway exports.
      const literals = op === '=' || op === '!=' ? [value] : /^[\w.+-]+(\|[\w.+-]+)*$/.test(value) ? value.split('|') : [];
      for (const v of literals) if (!series.some((s) => s[label] === v)) problems.push(`${where}: ${name} has no ${label}="${v}"`);
    }
  }
  // Labels an aggregation keeps must be on one of the metrics it aggregates.
  for (const by of expr.matchAll(/\b(?:by|on)\s*\(([^)]*)\)/g)) {
    for (const label of by[1]!.split(',').map((s) => s.trim()).filter((s) => s !== '' && !TARGET_LABELS.has(s))) {
      if (!metrics.some((n) => samples.get(n)?.some((s) => label in s))) problems.push(`${where}: no metric of it has the label ${label}`);
    }
  }
  return problems;
}

describe('every metric the rules and the dashboard use exists in a running gateway (cluster mode)', () => {
  let redis: RedisServer;
  let gw: Gateway;
  let samples: Map<string, Labels[]>;
  before(async () => {
    redis = await startRedis();
    gw = await startGateway({ REDIS_URL: redis.url, WS_MAX_MESSAGES: '1000' });
    await eventually(async () => (await fetch(gw.admin('/health/ready'))).status === 200, 10_000);
    // Some traffic, so that every histogram has had an observation of each kind:
    // publishes of every class to a joined topic, a join with since (a history read).
    const sub = await Client.connect(gw.url());
    assert.equal((await sub.request({ type: 'join', topic: 'obs' })).status, 'ok');
    const pub = await Client.connect(gw.url());
    const first = await pub.request({ type: 'publish', topic: 'obs', data: 1 });
    assert.equal(first.status, 'ok');
    assert.equal((await pub.request({ type: 'publish', topic: 'obs', data: 2, key: 'k' })).status, 'ok');
    assert.equal((await pub.request({ type: 'publish', topic: 'obs', data: 3, ephemeral: true })).status, 'ok');
    for (let i = 0; i < 3; i++) await sub.next((f) => f.type === 'event');
    const late = await Client.connect(gw.url());
    assert.equal((await late.request({ type: 'join', topic: 'obs', since: (first.data as { id: string }).id })).status, 'ok');
    for (const c of [sub, pub, late]) c.close();
    samples = labelSets(await gw.metrics());
  });
  after(async () => {
    assert.equal(await gw.stop(), 0);
    await redis.stop();
  });

  test('the alerting rules', () => {
    const exprs = ruleExpressions();
    assert.equal(exprs.length, alertNames().length);
    assert.deepEqual(exprs.flatMap((e, i) => check(e, samples, alertNames()[i]!)), []);
  });

  test('the input series of the rules\' unit tests (names, labels and values as the gateway exports them)', () => {
    const series = testSeries();
    assert.ok(series.length > 20);
    assert.deepEqual(series.flatMap((s) => check(s, samples, s)), []);
    // And every label of a test series (le included) is one the gateway's series of that name carry.
    const problems: string[] = [];
    for (const s of series) {
      const m = /^(\w+)\{(.*)\}$/.exec(s)!;
      const want: Record<string, string> = {};
      for (const l of m[2]!.matchAll(/(\w+)="([^"]*)"/g)) if (!TARGET_LABELS.has(l[1]!)) want[l[1]!] = l[2]!;
      const ok = samples.get(m[1]!)?.some((got) => Object.keys(got).length === Object.keys(want).length &&
        Object.entries(want).every(([k, v]) => got[k] === v));
      if (ok !== true) problems.push(s);
    }
    assert.deepEqual(problems, [], 'test series with no matching gateway series');
  });

  test('the Grafana dashboard', () => {
    const exprs = dashboardExpressions();
    assert.ok(exprs.length > 30);
    assert.deepEqual(exprs.flatMap((e) => check(e, samples, e.slice(0, 80))), []);
    const text = read(DASHBOARD);
    for (const family of ['sluice_publish_ack_seconds_bucket', 'sluice_delivery_lag_seconds_bucket', 'sluice_redis_command_seconds_bucket',
      'sluice_eventloop_lag_seconds', 'sluice_heap_used_bytes', 'sluice_drain_elapsed_seconds', 'sluice_limiter_settled_hits_total',
      'process_cpu_seconds_total', 'process_resident_memory_bytes']) assert.ok(text.includes(family), family);
  });

  test('the dashboard imports with a datasource input and uses it everywhere', () => {
    const d = JSON.parse(read(DASHBOARD)) as {
      __inputs: { name: string; type: string; pluginId: string }[];
      panels: { id: number; type: string; datasource?: { uid: string }; targets?: { datasource: { uid: string } }[] }[];
      templating: { list: { datasource: { uid: string } }[] };
      uid: string;
    };
    assert.deepEqual(d.__inputs.map((i) => [i.name, i.type, i.pluginId]), [['DS_PROMETHEUS', 'datasource', 'prometheus']]);
    const uids = [
      ...d.panels.filter((p) => p.type !== 'row').flatMap((p) => [p.datasource?.uid, ...(p.targets ?? []).map((t) => t.datasource.uid)]),
      ...d.templating.list.map((v) => v.datasource.uid),
    ];
    assert.deepEqual([...new Set(uids)], ['${DS_PROMETHEUS}']);
    const ids = d.panels.map((p) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'panel ids repeat');
    assert.match(d.uid, /^[\w-]{1,40}$/);
  });
});
