import { test } from 'node:test';
import assert from 'node:assert/strict';
import { aggregateMetrics, counterFrom, gaugeFrom, Registry } from '../src/index.ts';

/** One thread's registry, with the same metrics every shard registers. */
function threadRegistry(frames: { n: number }, rejections: Record<'rate_limited' | 'bad_request', number>, stall: () => number) {
  const r = new Registry();
  counterFrom(r, 'frames_in_total', 'frames', undefined, () => frames.n);
  counterFrom(r, 'rejections_total', 'rejections', 'reason', () => rejections);
  gaugeFrom(r, 'stall_max_seconds', 'stall', stall, 'max');
  gaugeFrom(r, 'sockets', 'sockets', () => frames.n * 10);
  return r;
}

function value(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line, `${series} in\n${text}`);
  return Number(line.split(' ')[1]);
}

test('counters sum across threads, max gauges take the max, and repeated scrapes do not double count', async () => {
  const a = { n: 3 };
  const b = { n: 4 };
  const ra = { rate_limited: 2, bad_request: 0 };
  const rb = { rate_limited: 5, bad_request: 1 };
  const regA = threadRegistry(a, ra, () => 0.5);
  const regB = threadRegistry(b, rb, () => 0.02);
  let m = await aggregateMetrics([await regA.getMetricsAsJSON(), await regB.getMetricsAsJSON()]);
  assert.equal(value(m.text, 'frames_in_total'), 7);
  assert.equal(value(m.text, 'rejections_total{reason="rate_limited"}'), 7);
  assert.equal(value(m.text, 'rejections_total{reason="bad_request"}'), 1);
  assert.equal(value(m.text, 'stall_max_seconds'), 0.5);
  assert.equal(value(m.text, 'sockets'), 70);
  a.n = 10;
  ra.rate_limited = 3;
  m = await aggregateMetrics([await regA.getMetricsAsJSON(), await regB.getMetricsAsJSON()]);
  assert.equal(value(m.text, 'frames_in_total'), 14);
  assert.equal(value(m.text, 'rejections_total{reason="rate_limited"}'), 8);
  assert.match(m.text, /# TYPE frames_in_total counter/);
});

test('a label set that has not been hit yet is exported as 0', async () => {
  const reg = threadRegistry({ n: 0 }, { rate_limited: 0, bad_request: 0 }, () => 0);
  const m = await aggregateMetrics([await reg.getMetricsAsJSON()]);
  assert.equal(value(m.text, 'rejections_total{reason="bad_request"}'), 0);
  assert.equal(value(m.text, 'frames_in_total'), 0);
});
