// S15 (issue 19): its variants and defaults, and how its rows render; no Sluice/peer ratio.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { S15_DEFAULT, S15_QUICK, variantsOf } from '../src/scenarios/hooks.ts';
import { ratios, rows } from '../src/report/summary.ts';
import { rowsTables } from '../src/report/render.ts';
import type { Sample } from '../src/scenarios/common.ts';

const base: Sample = {
  scenario: 'S15', variant: '', target: 'sluice', repeat: 0, ok: true, count: 2000, wallS: 1, serverCpuS: 0.8, clientCpuS: [0.2, 0.2],
  serverUtil: 0.8, clientUtilMax: 0.2, otherUtil: 0.05, bound: 'none', perSec: 2000, perServerCpuS: 2500,
  latency: { count: 2000, p50Us: 50_000, p99Us: 120_000, p999Us: 130_000, maxUs: 140_000 }, extra: {},
};

test('S15 defaults and variants: 2000 sockets, 5 topics, 5 ms in (c); labels sort (a) to (f)', () => {
  assert.deepEqual(S15_DEFAULT, { sockets: 2000, topics: 5, procs: 2, concurrency: 250, delayMs: 5 });
  assert.equal(S15_QUICK.sockets, 500);
  const v = variantsOf(S15_DEFAULT);
  assert.equal(v.jwt, '(a) 2000 upgrades, jwt');
  assert.equal(v.slow, '(c) 2000 upgrades, connect hook +5 ms');
  assert.equal(v.warm, '(e) 2000 x 5 rejoins, subscribe hook, cache warm');
  const labels = Object.values(v);
  assert.deepEqual([...labels].sort(), [v.jwt, v.hook, v.slow, v.cold, v.warm, v.plain]);
});

test('S15 rows render the backend\'s calls and the gateway\'s hook counters, and have no Sluice/peer ratio', () => {
  const v = variantsOf(S15_DEFAULT);
  const samples: Sample[] = [
    { ...base, variant: v.jwt, extra: { cpuPerOpUs: 400, backendCalls: 0, backendCpuPerOpUs: 0, gatewayHookConnect: '0', gatewayHookSubscribe: '0' } },
    { ...base, variant: v.hook, extra: { cpuPerOpUs: 640, vsBase: 1.6, backendCalls: 2000, backendConnections: 12, backendCpuPerOpUs: 200, gatewayHookConnect: 'allowed 2000', gatewayHookSubscribe: '0' } },
    { ...base, variant: v.warm, count: 10_000, extra: { cpuPerOpUs: 27, vsBase: 0.8, backendCalls: 0, backendConnections: 0, backendCpuPerOpUs: 0, gatewayHookConnect: '0', gatewayHookSubscribe: '0' } },
  ];
  const r = rows(samples);
  const t = rowsTables(r);
  assert.match(t, /### S15 backend hooks/);
  assert.match(t, /\| \(b\) 2000 upgrades, connect hook \| 640us \| 2\.5k \| 1\.60x \|.*\| 2000 \| 12 \| allowed 2000; 0 \|/);
  assert.match(t, /\| \(e\) 2000 x 5 rejoins, subscribe hook, cache warm \| 27\.0us \|.*\| 0 \| 0 \| 0; 0 \|/);
  assert.equal(ratios(samples).filter((x) => x.scenario === 'S15').length, 0);
});
