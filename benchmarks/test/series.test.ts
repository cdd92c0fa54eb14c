import { test } from 'node:test';
import assert from 'node:assert/strict';
import { metricByLabel as promByLabel } from '@sluice/gateway/testing';
import { closesByCode, linearSlope, secondHalfSlope } from '../src/lib/series.ts';

test('linearSlope is the least-squares slope; NaN without two distinct x', () => {
  assert.equal(linearSlope([0, 1, 2, 3], [1, 3, 5, 7]), 2);
  assert.ok(Math.abs(linearSlope([0, 1, 2], [0, 1, 0])) < 1e-12);
  assert.ok(Number.isNaN(linearSlope([1], [1])));
  assert.ok(Number.isNaN(linearSlope([2, 2], [1, 5])));
});

test('secondHalfSlope ignores the first half of the run', () => {
  // Steep growth for 5 s, then flat: the second half is flat.
  const pts = Array.from({ length: 11 }, (_, t) => ({ x: t, y: t <= 5 ? 100 * t : 500 }));
  assert.equal(secondHalfSlope(pts), 0);
  assert.ok(Number.isNaN(secondHalfSlope([])));
});

test('closesByCode groups WebSocket close codes and keeps other causes', () => {
  assert.deepEqual(
    closesByCode({ 'ws close 1013 buffer_limit': 3, 'ws close 1013 congested': 2, 'ws close 4503 slow_consumer': 1, 'closed by peer': 4 }),
    { 1013: 5, 4503: 1, 'closed by peer': 4 },
  );
});

test('promByLabel sums series per label value', () => {
  const text = [
    '# HELP sluice_clients_closed_total Sockets the server closed, by reason.',
    'sluice_clients_closed_total{shard="0",reason="buffer_limit"} 3',
    'sluice_clients_closed_total{shard="1",reason="buffer_limit"} 4',
    'sluice_clients_closed_total{reason="slow_consumer",shard="1"} 1',
    'sluice_slow_lane_sockets{shard="0"} 2',
    'sluice_slow_lane_sockets 5',
  ].join('\n');
  assert.deepEqual(promByLabel(text, 'sluice_clients_closed_total', 'reason'), { buffer_limit: 7, slow_consumer: 1 });
  assert.deepEqual(promByLabel(text, 'sluice_slow_lane_sockets', 'reason'), { '': 7 });
});
