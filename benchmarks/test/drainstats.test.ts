import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bucketCounts, chiSquareSurvival, chiSquareUniform, histogram, shareWithin } from '../src/lib/series.ts';
import { drainMaxMs } from '../src/scenarios/drain.ts';

test('bucketCounts counts whole buckets from the start and drops the partial last one', () => {
  const times = [500, 1000, 1099.9, 1100, 1950, 2000, 2999, 3000, 3050];
  // buckets [1000,2000), [2000,3000); 3000..3050 is a partial bucket before endMs 3050
  assert.deepEqual(bucketCounts(times, 1000, 3050, 1000), [4, 2]);
  assert.deepEqual(bucketCounts(times, 1000, 1300, 100), [2, 1, 0]);
  assert.deepEqual(bucketCounts(times, 1000, 1000, 100), []);
  assert.deepEqual(bucketCounts(times, 1000, NaN, 100), []);
  // an end exactly on a boundary keeps that bucket
  assert.deepEqual(bucketCounts([0, 99, 100, 199], 0, 200, 100), [2, 2]);
});

test('shareWithin counts buckets inside +-tolerance of the target, bounds included', () => {
  assert.equal(shareWithin([500, 400, 600, 399, 601], 500, 0.2), 3 / 5);
  assert.ok(Number.isNaN(shareWithin([], 500, 0.2)));
});

test('histogram: equal bins, the upper bound in the last bin, outliers counted apart', () => {
  const h = histogram([1000, 1499, 1500, 5999, 6000, 999, 6001], 1000, 6000, 10);
  assert.deepEqual(h.counts, [2, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
  assert.equal(h.below, 1);
  assert.equal(h.above, 1);
});

test('chiSquareUniform: 0 for equal counts, the textbook value otherwise, p from the chi-square tail', () => {
  const flat = chiSquareUniform([10, 10, 10, 10]);
  assert.equal(flat.stat, 0);
  assert.equal(flat.df, 3);
  assert.ok(Math.abs(flat.p - 1) < 1e-12);
  // expected 25 each: (5^2 + 5^2 + 0 + 0) / 25 = 2
  assert.ok(Math.abs(chiSquareUniform([30, 20, 25, 25]).stat - 2) < 1e-12);
  assert.ok(Number.isNaN(chiSquareUniform([0, 0]).stat));
});

test('chiSquareSurvival matches tabulated critical values', () => {
  // 5% critical values: df 1 -> 3.841, df 9 -> 16.919, df 20 -> 31.410; 1%: df 9 -> 21.666
  assert.ok(Math.abs(chiSquareSurvival(3.841, 1) - 0.05) < 1e-3);
  assert.ok(Math.abs(chiSquareSurvival(16.919, 9) - 0.05) < 1e-3);
  assert.ok(Math.abs(chiSquareSurvival(31.41, 20) - 0.05) < 1e-3);
  assert.ok(Math.abs(chiSquareSurvival(21.666, 9) - 0.01) < 1e-3);
  // df 2: closed form exp(-x/2)
  assert.ok(Math.abs(chiSquareSurvival(5, 2) - Math.exp(-2.5)) < 1e-9);
  assert.equal(chiSquareSurvival(0, 9), 1);
});

test('drainMaxMs leaves 10 s beyond sockets/rate after the delay', () => {
  assert.equal(drainMaxMs({ sockets: 10_000, rate: 500, delayMs: 1000 }), 31_000);
});
