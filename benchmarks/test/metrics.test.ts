import { test } from 'node:test';
import assert from 'node:assert/strict';
import { busiestThreads, expositionStats, perScrapeNs, splitCpu, threadDelta } from '../src/scenarios/metrics.ts';
import { maxOf, percentile } from '../src/lib/series.ts';

test('percentile is nearest-rank over the finite values, in any order', () => {
  const xs = [5, 1, 4, 2, 3, 6, 7, 8, 9, 10];
  assert.equal(percentile(xs, 0.5), 5);
  assert.equal(percentile(xs, 0.9), 9);
  assert.equal(percentile(xs, 0.99), 10);
  assert.equal(percentile(xs, 1), 10);
  assert.equal(percentile(xs, 0), 1);
  // 50 samples: p99 is the largest (rank 50), p50 the 25th.
  const fifty = Array.from({ length: 50 }, (_, i) => 50 - i);
  assert.equal(percentile(fifty, 0.99), 50);
  assert.equal(percentile(fifty, 0.5), 25);
  assert.equal(percentile([3, NaN, 1], 0.5), 1);
  assert.ok(Number.isNaN(percentile([], 0.5)));
  assert.ok(Number.isNaN(maxOf([])));
  assert.equal(maxOf([2, 9, 4]), 9);
});

test('expositionStats counts series per family, histogram buckets included', () => {
  const text = [
    '# HELP sluice_frames_in_total Client frames received.',
    '# TYPE sluice_frames_in_total counter',
    'sluice_frames_in_total 12',
    '',
    '# HELP sluice_connected_sockets Open WebSocket connections.',
    '# TYPE sluice_connected_sockets gauge',
    'sluice_connected_sockets{thread="shard-0"} 5000',
    'sluice_connected_sockets{thread="shard-1"} 5000',
    '',
    '# HELP sluice_publish_seconds Publish to ack.',
    '# TYPE sluice_publish_seconds histogram',
    'sluice_publish_seconds_bucket{le="0.001"} 3',
    'sluice_publish_seconds_bucket{le="0.01"} 5',
    'sluice_publish_seconds_bucket{le="+Inf"} 6',
    'sluice_publish_seconds_sum 0.02',
    'sluice_publish_seconds_count 6',
    '',
  ].join('\n');
  const s = expositionStats(text);
  assert.equal(s.bytes, Buffer.byteLength(text));
  assert.equal(s.series, 8);
  assert.equal(s.families, 3);
  assert.deepEqual(s.familiesByType, { counter: 1, gauge: 1, histogram: 1 });
  assert.deepEqual(s.seriesByType, { counter: 1, gauge: 2, histogram: 5 });
  assert.equal(s.largest[0], 'sluice_publish_seconds histogram 5');
  assert.equal(expositionStats('').series, 0);
});

test('thread CPU: deltas, the busiest threads besides the main one, and the split', () => {
  const before = new Map([[100, 1_000], [101, 50], [102, 10], [103, 0]]);
  const after = new Map([[100, 4_000], [101, 950], [102, 20], [103, 600], [104, 7]]);
  const d = threadDelta(before, after);
  assert.deepEqual([...d], [[100, 3_000], [101, 900], [102, 10], [103, 600], [104, 7]]);
  // The main thread (100) is never a shard, however busy it was.
  assert.deepEqual(busiestThreads(d, 100, 2), [101, 103]);
  assert.deepEqual(splitCpu(d, 100, [101, 103]), { coordinatorNs: 3_000, shardsNs: 1_500, otherNs: 17, totalNs: 4_517 });
});

test('perScrapeNs subtracts the quiet rate over the window', () => {
  // 1 s quiet cost 100 ms; 2 s of scrapes cost 700 ms: 500 ms for 50 scrapes = 10 ms each.
  assert.equal(perScrapeNs(700e6, 2, 100e6, 1, 50), 10e6);
  assert.ok(Number.isNaN(perScrapeNs(1, 1, 1, 0, 5)));
  assert.ok(Number.isNaN(perScrapeNs(1, 1, 1, 1, 0)));
});
