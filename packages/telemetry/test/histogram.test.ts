import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Counter } from 'prom-client';
import { aggregateMetrics, IndexedHistogram, Registry, sumMetrics } from '../src/index.ts';

const BUCKETS = [0.001, 0.01, 0.1];

function lines(text: string, name: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(name));
}

test('observations land in cumulative buckets per label, with sum and count, in Prometheus text', async () => {
  const r = new Registry();
  const h = new IndexedHistogram(r, 'x_seconds', 'help', 'class', ['durable', 'keyed'], BUCKETS);
  for (const v of [0.0005, 0.001, 0.005, 0.05, 3]) h.observe(0, v);
  h.observe(1, 0.02);
  const text = await r.metrics();
  assert.deepEqual(lines(text, 'x_seconds_bucket{class="durable"'), [
    'x_seconds_bucket{class="durable",le="0.001"} 2',
    'x_seconds_bucket{class="durable",le="0.01"} 3',
    'x_seconds_bucket{class="durable",le="0.1"} 4',
    'x_seconds_bucket{class="durable",le="+Inf"} 5',
  ]);
  assert.deepEqual(lines(text, 'x_seconds_count'), ['x_seconds_count{class="durable"} 5', 'x_seconds_count{class="keyed"} 1']);
  assert.equal(lines(text, 'x_seconds_sum{class="durable"}')[0], `x_seconds_sum{class="durable"} ${0.0005 + 0.001 + 0.005 + 0.05 + 3}`);
  assert.match(text, /# TYPE x_seconds histogram/);
  assert.deepEqual(h.snapshot(1), { count: 1, sum: 0.02 });
});

test('an index outside the label set, a negative value or NaN is ignored', () => {
  const r = new Registry();
  const h = new IndexedHistogram(r, 'y_seconds', 'help', 'op', ['a'], BUCKETS);
  h.observe(1, 0.1);
  h.observe(-1, 0.1);
  h.observe(0, -1);
  h.observe(0, Number.NaN);
  assert.deepEqual(h.snapshot(0), { count: 0, sum: 0 });
});

test('buckets must increase', () => {
  assert.throws(() => new IndexedHistogram(new Registry(), 'z', 'help', 'op', ['a'], [0.1, 0.1]), /increase/);
});

test('the histograms of several threads aggregate into one by summing each bucket', async () => {
  const threads = [new Registry(), new Registry()];
  const hs = threads.map((r) => new IndexedHistogram(r, 'lag_seconds', 'help', 'class', ['durable'], BUCKETS));
  hs[0]!.observe(0, 0.005);
  hs[1]!.observe(0, 0.005);
  hs[1]!.observe(0, 0.5);
  const { text } = await aggregateMetrics(await Promise.all(threads.map((r) => r.getMetricsAsJSON())));
  assert.deepEqual(lines(text, 'lag_seconds_bucket'), [
    'lag_seconds_bucket{class="durable",le="0.001"} 0',
    'lag_seconds_bucket{class="durable",le="0.01"} 2',
    'lag_seconds_bucket{class="durable",le="0.1"} 2',
    'lag_seconds_bucket{class="durable",le="+Inf"} 3',
  ]);
  assert.deepEqual(lines(text, 'lag_seconds_count'), ['lag_seconds_count{class="durable"} 3']);
});

test('sumMetrics folds several registries\' JSON into one, summing counters and histograms by name and labels', async () => {
  const parts = await Promise.all([1, 2].map(async (n) => {
    const r = new Registry();
    const c = new Counter({ name: 'c_total', help: 'h', labelNames: ['reason'], registers: [r] });
    c.inc({ reason: 'a' }, n);
    if (n === 2) c.inc({ reason: 'b' }, 5);
    new IndexedHistogram(r, 'h_seconds', 'help', 'class', ['durable'], BUCKETS).observe(0, 0.005 * n);
    return r.getMetricsAsJSON();
  }));
  const once = sumMetrics(parts);
  const twice = sumMetrics([once, parts[0]!]);
  const { text } = await aggregateMetrics([twice]);
  assert.deepEqual(lines(text, 'c_total'), ['c_total{reason="a"} 4', 'c_total{reason="b"} 5']);
  assert.deepEqual(lines(text, 'h_seconds_count'), ['h_seconds_count{class="durable"} 3']);
  assert.deepEqual(lines(text, 'h_seconds_bucket{class="durable",le="0.01"}'), ['h_seconds_bucket{class="durable",le="0.01"} 3']);
});
