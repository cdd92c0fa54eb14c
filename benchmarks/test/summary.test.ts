import { test } from 'node:test';
import assert from 'node:assert/strict';
import { median } from '../src/lib/series.ts';
import { ratios, rows } from '../src/report/summary.ts';
import { checkGates, type Gate } from '../src/report/gates.ts';
import { classifyBound, failedSample, type Sample } from '../src/scenarios/common.ts';
import type { TargetName } from '../src/lib/server.ts';

function sample(target: TargetName, repeat: number, perServerCpuS: number): Sample {
  return {
    scenario: 'S1', variant: '32B', target, repeat, ok: true, count: 1000, wallS: 1, serverCpuS: 1000 / perServerCpuS,
    clientCpuS: [0.5], serverUtil: 1, clientUtilMax: 0.5, otherUtil: 0, bound: 'server', perSec: 1000, perServerCpuS, extra: {},
  };
}

test('median of odd and even lists, ignoring non-finite values', () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([NaN, 5]), 5);
  assert.ok(Number.isNaN(median([])));
});

test('ratios pair Sluice and a peer within the same repeat, then take the median', () => {
  const s = [
    sample('sluice', 0, 100), sample('ws', 0, 50),   // 2.0
    sample('sluice', 1, 300), sample('ws', 1, 100),  // 3.0
    sample('sluice', 2, 100), sample('ws', 2, 100),  // 1.0
    sample('ws', 3, 10),                             // no Sluice sample in repeat 3: not paired
  ];
  const r = ratios(s).find((x) => x.peer === 'ws')!;
  assert.equal(r.pairs, 3);
  assert.equal(r.value, 2);
});

test('failed samples count as runs but not in medians or ratios', () => {
  const s = [sample('sluice', 0, 100), sample('ws', 0, 50), failedSample('S1', '32B', 'sluice', 1, 'boom'), sample('ws', 1, 50)];
  const row = rows(s).find((x) => x.target === 'sluice')!;
  assert.equal(row.ok, 1);
  assert.equal(row.runs, 2);
  assert.deepEqual(row.errors, ['boom']);
  assert.equal(ratios(s).find((x) => x.peer === 'ws')!.pairs, 1);
});

test('a gate fails below its minimum and when it could not be measured', () => {
  const gate: Gate = { scenario: 'S1', variant: '32B', peer: 'ws', kind: 'min', value: 1.5, goal: 'x', why: 'y' };
  const pass = checkGates(ratios([sample('sluice', 0, 200), sample('ws', 0, 100)]), [gate]);
  assert.equal(pass[0]!.pass, true);
  const fail = checkGates(ratios([sample('sluice', 0, 100), sample('ws', 0, 100)]), [gate]);
  assert.equal(fail[0]!.pass, false);
  const none = checkGates(ratios([sample('ws', 0, 100)]), [gate]);
  assert.equal(none[0]!.pass, false);
});

test('a gate reads the ratio to its own peer: raw uWS, not ws', () => {
  const gate: Gate = { scenario: 'S1', variant: '32B', peer: 'uws', kind: 'min', value: 0.5, goal: 'x', why: 'y' };
  const run = [sample('sluice', 0, 100), sample('ws', 0, 40), sample('uws', 0, 250)];
  const [r] = checkGates(ratios(run), [gate]);
  assert.equal(r!.measured, 0.4);
  assert.equal(r!.pass, false);
  assert.equal(checkGates(ratios(run), [{ ...gate, value: 0.4 }])[0]!.pass, true);
});

test('client-bound means the generator saturated while the server did not', () => {
  assert.equal(classifyBound(0.5, [0.97], 1), 'client');
  assert.equal(classifyBound(0.98, [0.97], 1), 'server');
  assert.equal(classifyBound(0.5, [0.3], 1), 'none');
});
