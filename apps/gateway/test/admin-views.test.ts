/**
 * The admin page's views, their pure parts: a shard's largest topics against
 * a sort (property test), a node's samples and rates from metrics JSON, and
 * how the answers of several nodes become one view (an unresponsive node
 * keeps its last view; one that never answered has none; a node whose lease
 * ended is forgotten). The views on real gateways: openapi.test.ts and
 * admin-ui.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { loadConfig } from '@sluice/core';
import type { MetricsJson } from '@sluice/telemetry';
import { AdminViews } from '../src/admin-views.ts';
import type { NodeAnswers, NodeAsk } from '../src/control-plane.ts';
import { type MetricParts, NodeStats, type NodeView } from '../src/node-stats.ts';
import { Topics } from '../src/shard/topics.ts';

const noBroker = { subscribe: () => new Promise<string>(() => {}), unsubscribe: () => {} };
const noLine = { write: () => {} } as never;

test('a shard\'s largest topics are the first of a sort by sockets, within a tenant when asked', () => {
  fc.assert(fc.property(
    fc.array(fc.tuple(fc.constantFrom('t1', 't2'), fc.integer({ min: 0, max: 40 }), fc.integer({ min: 1, max: 30 })), { maxLength: 120 }),
    fc.integer({ min: 1, max: 20 }), fc.option(fc.constantFrom('t1', 't2'), { nil: undefined }),
    (joins, limit, tenant) => {
      const topics = new Topics<never>(noBroker, noLine);
      const counts = new Map<string, number>();
      for (const [t, n, times] of joins) {
        const key = `${t}/room.${n}`;
        for (let i = 0; i < times; i++) topics.acquire(key, () => {});
        counts.set(key, (counts.get(key) ?? 0) + times);
      }
      const got = topics.top(limit, tenant === undefined ? undefined : `${tenant}/`);
      const want = [...counts].filter(([k]) => tenant === undefined || k.startsWith(`${tenant}/`)).sort((a, b) => b[1] - a[1]).slice(0, limit);
      // Ties may come in any order: the counts, in order, and each key's count, must agree.
      assert.deepEqual(got.map(([, n]) => n), want.map(([, n]) => n));
      for (const [k, n] of got) assert.equal(counts.get(k), n);
      assert.equal(new Set(got.map(([k]) => k)).size, got.length);
    }), { numRuns: 300 });
});

const counter = (name: string, values: [Record<string, string>, number][]): MetricsJson[number] =>
  ({ name, help: '', type: 'counter', aggregator: 'sum', values: values.map(([labels, value]) => ({ labels, value })) }) as unknown as MetricsJson[number];
const gauge = (name: string, values: [Record<string, string>, number][]): MetricsJson[number] =>
  ({ name, help: '', type: 'gauge', aggregator: 'sum', values: values.map(([labels, value]) => ({ labels, value })) }) as unknown as MetricsJson[number];

function shardJson(accepted: number, closes: number, sent: number, sockets: number, lagS: number): MetricsJson {
  return [
    counter('sluice_upgrades_total', [[{ outcome: 'accepted' }, accepted], [{ outcome: 'over_budget' }, 0]]),
    counter('sluice_clients_closed_total', [[{ reason: 'disconnected' }, closes]]),
    counter('sluice_limit_rejections_total', []),
    counter('sluice_messages_sent_total', [[{}, sent]]),
    gauge('sluice_connected_sockets', [[{}, sockets]]),
    gauge('sluice_eventloop_lag_max_seconds', [[{ thread: 'shard0' }, lagS]]),
  ];
}

test('a node\'s rates are the counters\' differences over the interval; a retired shard\'s counters keep the sum from falling', async () => {
  let parts: MetricParts = { own: [], shards: new Map([[0, shardJson(100, 10, 1000, 5, 0.002)], [1, shardJson(50, 0, 0, 3, 0.001)]]), retired: [] };
  const stats = new NodeStats({
    id: 'n1', version: '0.1.0', startedAt: 0, state: () => 'ready', redis: () => 'none', upgradeBudget: () => 0, upgradeBacklogMs: () => 0,
    sockets: () => new Map([[0, 5], [1, 3]]), rssBytes: () => 1,
  }, () => Promise.resolve(parts), (err) => assert.fail(String(err)));
  await stats.sample();
  const first = await stats.view();
  assert.deepEqual(first.rates.upgrades, {}, 'one sample: no rate yet');
  assert.equal(first.sockets, 8);
  await new Promise((r) => setTimeout(r, 200));
  // Shard 1 crashed and restarted from 0; its old counters are retired.
  parts = { own: [], shards: new Map([[0, shardJson(120, 14, 1400, 6, 0.004)], [1, shardJson(0, 0, 0, 0, 0)]]),
    retired: [shardJson(50, 0, 0, 0, 0)] };
  await stats.sample();
  const v = await stats.view();
  const seconds = (v.sampledAt - first.sampledAt) / 1000;
  assert.ok(seconds > 0.15, `interval ${seconds}`);
  // Rates are rounded to a tenth.
  assert.ok(Math.abs(v.rates.upgrades['accepted']! - 20 / seconds) <= 0.05, JSON.stringify(v.rates));
  assert.equal(v.rates.upgrades['over_budget'], undefined, 'a rate of 0 is left out');
  assert.ok(Math.abs(v.rates.closes['disconnected']! - 4 / seconds) <= 0.05);
  assert.ok(Math.abs(v.rates.sent - 400 / seconds) <= 0.05);
  assert.equal(v.series.length, 1);
  assert.equal(v.lagMs, 4);
  assert.deepEqual(v.shards.map((s) => s.lagMs), [4, 0]);
});

const CFG = loadConfig({ LOG_LEVEL: 'silent', REDIS_URL: 'redis://127.0.0.1:1' }, { availableParallelism: 2 }).config;

function view(id: string, sockets: number): NodeView {
  return {
    id, self: false, state: 'ready', version: '0.1.0', startedAt: 1, sampledAt: 2, ageMs: 100, sockets, users: 1, slowLane: 0, bufferedBytes: 0,
    lagMs: 1, heapUsedBytes: 1, rssBytes: 1, redis: 'up', upgradeBudget: 0, upgradeBacklogMs: 0, shards: [],
    rates: { upgrades: {}, closes: {}, refused: {}, published: 0, sent: 0, dropped: 0 }, series: [],
  };
}

test('the nodes\' answers as one view: a silent node keeps its last view as unresponsive; a never-heard one has none; a gone one is forgotten', async () => {
  let alive = new Set(['a', 'b', 'c']);
  let answers = new Map<string, unknown>([['a', view('a', 3)], ['b', view('b', 2)]]);
  let unanswered = ['c'];
  const asked: NodeAsk[] = [];
  const views = new AdminViews(CFG, 'a', (ask) => {
    asked.push(ask);
    return Promise.resolve({ answers, unanswered } satisfies NodeAnswers);
  }, () => alive);
  const first = await views.nodes();
  assert.equal(first.mode, 'cluster');
  assert.deepEqual(first.nodes.map((n) => [n.id, n.self, n.state, n.sockets, n.ageMs]), [['a', true, 'ready', 3, 100], ['b', false, 'ready', 2, 100],
    ['c', false, 'unresponsive', 0, -1]]);
  answers = new Map<string, unknown>([['a', view('a', 3)], ['c', { not: 'a view' }]]);
  unanswered = ['b'];
  await new Promise((r) => setTimeout(r, 50));
  const second = await views.nodes();
  const b = second.nodes.find((n) => n.id === 'b')!;
  assert.equal(b.state, 'unresponsive');
  assert.equal(b.sockets, 2, 'its last view');
  assert.ok(b.ageMs >= 140, `ageMs ${b.ageMs}: its sample's age then, plus the time since`);
  const c = second.nodes.find((n) => n.id === 'c');
  assert.deepEqual([c?.state, c?.ageMs, c?.redis], ['unresponsive', -1, 'unknown'], 'an answer that is not a view (a node starting) counts as none');
  alive = new Set(['a']);
  answers = new Map<string, unknown>([['a', view('a', 3)]]);
  unanswered = [];
  await views.nodes();
  assert.equal(await views.drain('b'), 'unknown', 'b\'s lease ended');
  assert.deepEqual(asked.map((x) => x.kind), ['stats', 'stats', 'stats']);
});

test('the largest topics over the nodes: summed by topic, split into tenant and topic, as many as asked', async () => {
  const views = new AdminViews(CFG, 'a', () => Promise.resolve({
    answers: new Map<string, unknown>([['a', [['default/room.1', 5], ['t2/room.1', 4]]], ['b', [['default/room.1', 2], ['default/x', 6], 'junk']]]),
    unanswered: ['c'],
  }), () => new Set(['a', 'b', 'c']));
  const r = await views.topics(undefined, 2);
  assert.deepEqual(r.topics, [{ tenant: 'default', topic: 'room.1', subscribers: 7 }, { tenant: 'default', topic: 'x', subscribers: 6 }]);
  assert.deepEqual(r.unanswered, ['c']);
});
