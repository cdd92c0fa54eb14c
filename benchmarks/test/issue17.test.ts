// S11-S13 (issue 17): the pure parts (arrival statistics, close codes, the
// per-repeat ratios of S13) and how their rows render; none has a Sluice/peer ratio.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { arrivalStats, closeCodes, S12_DEFAULT, variantOf } from '../src/scenarios/revoke.ts';
import { armsOf, LIMITS_ENV, pairRatios, S13_DEFAULT } from '../src/scenarios/limits.ts';
import { S11_DEFAULT, variantsOf } from '../src/scenarios/refresh.ts';
import { S1_DEFAULT } from '../src/scenarios/pump.ts';
import { ratios, rows } from '../src/report/summary.ts';
import { goalsTable, rowsTables } from '../src/report/render.ts';
import { checkGoals } from '../src/report/gates.ts';
import type { Sample } from '../src/scenarios/common.ts';

const base: Sample = {
  scenario: 'S13', variant: '', target: 'sluice', repeat: 0, ok: true, count: 300_000, wallS: 3, serverCpuS: 3, clientCpuS: [1],
  serverUtil: 1, clientUtilMax: 0.33, otherUtil: 0.05, bound: 'none', perSec: 100_000, perServerCpuS: 100_000,
  latency: { count: 10, p50Us: 8000, p99Us: 50_000, p999Us: 60_000, maxUs: 70_000 }, extra: {},
};

test('arrivalStats: nearest-rank p50 and p99, first and last; NaN when nothing arrived', () => {
  const ms = Array.from({ length: 100 }, (_, i) => i + 1);
  assert.deepEqual(arrivalStats(ms), { n: 100, firstMs: 1, p50Ms: 50, p99Ms: 99, lastMs: 100 });
  const none = arrivalStats([]);
  assert.equal(none.n, 0);
  assert.ok(Number.isNaN(none.lastMs) && Number.isNaN(none.p50Ms));
});

test('closeCodes counts codes over the generator processes, a socket without a close frame apart', () => {
  assert.deepEqual(closeCodes([{ codes: [4003, 4003, 0], other: {} }, { codes: [4003, 1008], other: {} }]), { 4003: 3, 'no close frame': 1, 1008: 1 });
});

test('S13 pairs each limits sample with the plain sample of its repeat and target', () => {
  const arms = armsOf(S13_DEFAULT, 32);
  assert.deepEqual(arms, { plain: '32B, jwt', limits: '32B, jwt + limits + 1000 revocations' });
  const s = (variant: string, repeat: number, per: number, ok = true): Sample => ({ ...base, variant, repeat, perServerCpuS: per, ok });
  const got = pairRatios([s(arms.plain, 0, 100), s(arms.limits, 0, 95), s(arms.plain, 1, 100), s(arms.limits, 1, 110), s(arms.limits, 2, 90),
    s(arms.plain, 3, 100, false), s(arms.limits, 3, 90)], arms.plain, arms.limits);
  assert.deepEqual([...got.entries()], [[0, 0.95], [1, 1.1]]);
  assert.deepEqual(S13_DEFAULT, { ...S1_DEFAULT, scenario: 'S13', sizes: [32], revocations: 1000 });
  // Never reached by S1's load, and within what the config accepts.
  assert.ok(Number(LIMITS_ENV['WS_USER_MSG_LIMIT']) >= 1e8 && Number(LIMITS_ENV['WS_MAX_USER_SOCKETS']) <= 1_000_000);
});

test('S11-S13 rows render in their own tables, with no Sluice/peer ratio', () => {
  const v11 = variantsOf(S11_DEFAULT);
  const up: Sample = { ...base, scenario: 'S11', variant: v11.upgrade, count: 2000, perServerCpuS: 2700, extra: { cpuPerOpUs: 370, vsNoAuth: 3.08 } };
  const rf: Sample = { ...base, scenario: 'S11', variant: v11.refresh, count: 10_000, perServerCpuS: 4100, extra: { cpuPerOpUs: 245, idleCpuPerOpUs: 19.4, vsUpgrade: 0.66 } };
  const rv: Sample = {
    ...base, scenario: 'S12', variant: variantOf(S12_DEFAULT), count: 10_000,
    extra: { lastCloseMs: 640, p50Ms: 300, p99Ms: 630, nodeAP50Ms: 280, nodeALastMs: 600, nodeBP50Ms: 320, nodeBLastMs: 640, nodeADoneMs: 250, nodeBDoneMs: 300,
      nodeAClientLagMs: 350, nodeBClientLagMs: 340, answerMs: 20, closeCodes: '{"4003":10000}', serverCpuUsPerClose: 49, genCpuUsPerClose: 70 },
  };
  const arms = armsOf(S13_DEFAULT, 32);
  const plain: Sample = { ...base, variant: arms.plain };
  const limits: Sample = { ...base, variant: arms.limits, perServerCpuS: 98_000, extra: { vsPlain: 0.98, ratiosAll: '0.980' } };
  const t = rowsTables(rows([up, rf, rv, plain, limits]));
  assert.match(t, /### S11 refresh cost/);
  assert.match(t, /\| 2000 x 5 refreshes, jwt \| Sluice \(2 workers\) \| 245us \| 4\.1k \| 19\.4us \| 0\.66x \| - \|/);
  assert.match(t, /\| 2000 upgrades, jwt \| Sluice \(2 workers\) \| 370us \| 2\.7k \| n\/a \| - \| 3\.08x \|/);
  assert.match(t, /### S12 revocation/);
  assert.match(t, /\| 10000 sockets of one user, 2 nodes \| Sluice \(2 workers\) \| 640 ms \| 300 ms \/ 630 ms \| 280 ms \/ 600 ms \| 320 ms \/ 640 ms \| 250 ms \/ 300 ms \|/);
  assert.match(t, /\{"4003":10000\} \| 49us \| 70us \| 33% \| 5% \| yes \| 1\/1 \|/);
  assert.match(t, /### S13 S1 with limits/);
  assert.match(t, /\| 32B, jwt \+ limits \+ 1000 revocations \| Sluice \(2 workers\) \| 98k \| 100k \| 0\.98x \| 0\.980 \|/);
  assert.deepEqual(ratios([up, rf, rv, plain, limits]), []);
});

test('S12 and S13 goals read the median last close and the median limits/plain ratio (the limits arm only)', () => {
  const rv = (repeat: number, lastCloseMs: number): Sample => ({ ...base, scenario: 'S12', variant: variantOf(S12_DEFAULT), repeat, extra: { lastCloseMs } });
  const arms = armsOf(S13_DEFAULT, 32);
  const lim = (repeat: number, vsPlain: number): Sample => ({ ...base, variant: arms.limits, repeat, extra: { vsPlain } });
  const samples = [rv(0, 480), rv(1, 1200), rv(2, 500), { ...base, variant: arms.plain }, lim(0, 0.93), lim(1, 0.97), lim(2, 1.01)];
  const goals = checkGoals(rows(samples), [], samples);
  const s12 = goals.find((g) => g.goal.scenario === 'S12')!;
  const s13 = goals.find((g) => g.goal.scenario === 'S13')!;
  assert.equal(s12.measured, 500);
  assert.equal(s12.met, true);
  assert.equal(s13.measured, 0.97);
  assert.equal(s13.met, true);
  assert.match(goalsTable(goals), /S12 revocation: request to last 4003 close of 10k sockets on 2 nodes <= 1 s \| Sluice \(2 workers\) \| 500\.0 ms \| yes/);
  const slow = checkGoals(rows([lim(0, 0.9), lim(1, 0.93)]), [], [lim(0, 0.9), lim(1, 0.93)]).find((g) => g.goal.scenario === 'S13')!;
  assert.equal(slow.met, false);
});
