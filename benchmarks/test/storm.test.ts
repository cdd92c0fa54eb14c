import { test } from 'node:test';
import assert from 'node:assert/strict';
import { drainMaxMs, runStorm, S9_DEFAULT, variantOf, type Poll } from '../src/scenarios/storm.ts';
import { bucketGrowth, peakInWindow, peakRate, timeToShare } from '../src/lib/series.ts';

// S9 reads B's counter (and CPU) through the series module's counter functions.
const pollBuckets = (polls: readonly Poll[], n: number): number[] => bucketGrowth(polls.map((p) => ({ ms: p.ms, value: p.accepted })), 0, n * 100, 100);
const peakPollRate = (polls: readonly Poll[], gap: number, key: 'accepted' | 'cpuS' = 'accepted'): number => peakRate(polls.map((p) => ({ ms: p.ms, value: p[key] })), gap);
import { ratios, rows } from '../src/report/summary.ts';
import { mergeRuns, methodSection, renderStormSvg, rowsTables, type RunRecord } from '../src/report/render.ts';
import type { Sample } from '../src/scenarios/common.ts';

test('S9 defaults: 10k clients per kind in 4 processes of 2500, drained at 10000/s; variants name the kind', () => {
  assert.deepEqual(S9_DEFAULT, {
    clients: 10_000, procs: 4, rate: 10_000, delayMs: 100, concurrency: 200, maxWaitMs: 30_000, modes: ['sdk', 'browser', 'naive'], budgets: [0, 1000], costRequests: 20_000,
  });
  assert.equal(variantOf(S9_DEFAULT, 'sdk'), '10000 SDK clients, drain 10000/s, no upgrade budget');
  assert.equal(variantOf({ clients: 500, rate: 2000 }, 'naive', 300), '500 naive ws clients, drain 2000/s, WS_UPGRADE_RATE=300');
  assert.equal(drainMaxMs(S9_DEFAULT), 11_100);
});

test('timeToShare: the arrival that completes the share, NaN when too few arrived', () => {
  const t = [10, 20, 30, 40];
  assert.equal(timeToShare(t, 4, 0.5), 20);
  assert.equal(timeToShare(t, 4, 0.99), 40);
  assert.equal(timeToShare(t, 4, 1), 40);
  assert.ok(Number.isNaN(timeToShare(t, 100, 0.99)));
  assert.equal(timeToShare(t, 4, 0), 0);
});

test('peakInWindow counts the most arrivals in any half-open window', () => {
  assert.equal(peakInWindow([], 100), 0);
  assert.equal(peakInWindow([0, 50, 99, 100, 250], 100), 3);
  assert.equal(peakInWindow([0, 0, 0, 1000], 1000), 3);
  assert.equal(peakInWindow([0, 999, 1000, 1001], 1000), 3);
});

test('B\'s counter: growth between polls in the bucket of the poll that saw it; peak rates over a minimum gap', () => {
  const polls: Poll[] = [
    { ms: 0, accepted: 0, cpuS: 0 }, { ms: 100, accepted: 5, cpuS: 0.01 }, { ms: 250, accepted: 20, cpuS: 0.05 }, { ms: 260, accepted: 22, cpuS: 0.05 },
    { ms: 1100, accepted: 30, cpuS: 0.3 },
  ];
  assert.deepEqual(pollBuckets(polls, 3), [0, 5, 17]);
  assert.deepEqual(pollBuckets(polls, 12), [0, 5, 17, 0, 0, 0, 0, 0, 0, 0, 0, 8]);
  // 100 -> 250: 15 in 150 ms = 100/s; 100 -> 260: 17 in 160 ms = 106/s (the closest pair at least 100 ms apart).
  assert.equal(Math.round(peakPollRate(polls, 100)), 106);
  // 100 -> 1100: 25 in 1000 ms (the pair 0 -> 1100 is further apart than needed).
  assert.equal(peakPollRate(polls, 1000), 25);
  assert.equal(peakPollRate(polls.slice(0, 2), 1000), 0);
  assert.ok(Math.abs(peakPollRate(polls, 1000, 'cpuS') - 0.29) < 1e-9);
});

function stormSample(mode: 'sdk' | 'naive', t99Ms: number): Sample {
  return {
    scenario: 'S9', variant: variantOf(S9_DEFAULT, mode), target: 'sluice', repeat: 0, ok: true, count: 10_000, wallS: 9, serverCpuS: 2,
    clientCpuS: [1, 1, 1, 1], serverUtil: 0.22, clientUtilMax: 0.15, otherUtil: 0.08, bound: 'none', perSec: 1400, perServerCpuS: 5000,
    extra: {
      mode, clients: 10_000, onA: 10_000, reconnected: 10_000, closes: 10_000, closeCodes: '{"1012":10000}', firstCloseMs: 110, lastCloseMs: 1220,
      firstArrivalMs: 1300, t50Ms: 4500, t99Ms, tAllMs: t99Ms + 400, t99FromFirstCloseMs: t99Ms - 110, peakPerS: 2270, peak1s: 2055,
      serverPeakPerS: 2196, serverPeak1s: 2056, attemptsB: 10_000, retryMinMs: mode === 'sdk' ? 1001 : NaN, retryMaxMs: mode === 'sdk' ? 6000 : NaN,
      plannedMinMs: mode === 'sdk' ? 1025 : NaN, plannedMedianMs: mode === 'sdk' ? 3748 : NaN, plannedMaxMs: mode === 'sdk' ? 6487 : NaN,
      peakServerCpu: 0.5, stallMaxMsB: 27, overBudget: 0, findings: '',
    },
    timeline: [{ t: 0, arrivals: 0, server: 0, closes: 0 }, { t: 100, arrivals: 3, server: 2, closes: 900 }, { t: 200, arrivals: 200, server: 190, closes: 100 }],
  };
}

test('S9 rows render as their own table, without a Sluice/peer ratio; the chart has a line per kind of client', () => {
  const samples = [stormSample('sdk', 7290), stormSample('naive', 2470)];
  const table = rowsTables(rows(samples));
  assert.match(table, /### S9 reconnect storm/);
  assert.match(table, /\| 10000 SDK clients, drain 10000\/s, no upgrade budget \| 10000\/10000 \| 10000 \{"1012":10000\}, 0\.11 s\.\.1\.22 s \| 1\.30 s \| 4\.50 s \| 7\.29 s \| 7\.69 s \| 7\.18 s \| 2\.3k \| 2\.1k \| 2\.2k \/ 2\.1k \| 10000 \| 1001\.\.6000 ms \| 1025 \/ 3748 \/ 6487 ms \| 0 \| 50% \| 27 ms \| 8% \| none \| 1\/1 \|/);
  assert.match(table, /\| 10000 naive ws clients, drain 10000\/s, no upgrade budget \|.*\| 2\.47 s \|.*\| - \| - \|/);
  assert.deepEqual(ratios(samples), []);
  const svg = renderStormSvg(samples);
  assert.equal((svg.match(/<polyline /g) ?? []).length, 4, 'per kind: client-side arrivals and B\'s counter');
  assert.match(svg, /10000 SDK clients, drain 10000\/s, no upgrade budget: 99% back 7\.29 s after SIGTERM/);
  assert.match(svg, /10000 naive ws clients, drain 10000\/s, no upgrade budget: 99% back 2\.47 s after SIGTERM/);
});

test('report merges runs: a later run\'s scenarios replace the same scenarios, and the method names it', () => {
  const base = {
    command: 'all', startedAt: '2026-01-01T00:00:00Z', finishedAt: '2026-01-01T00:10:00Z',
    machine: { cpuModel: 'cpu', cores: 2, memGiB: 24, node: 'v20', kernel: '6' }, sluiceBuild: { commit: 'aaa', dirtyFiles: 0 },
    rows: [], ratios: [], goals: [],
  };
  const old9 = { ...stormSample('sdk', 9999), variant: 'old' };
  const s7: Sample = { ...stormSample('sdk', 1), scenario: 'S7', variant: '10000 sockets at 500/s, delay 1000 ms', extra: { secondsWithin: 1 } };
  const first: RunRecord = { ...base, config: { repeats: 3, scenarios: { S7: { sockets: 10_000 } } }, samples: [s7, old9] };
  const later: RunRecord = {
    ...base, command: 's9', startedAt: '2026-01-02T00:00:00Z', finishedAt: '2026-01-02T00:01:00Z', sluiceBuild: { commit: 'bbb', dirtyFiles: 2 },
    config: { scenarios: { S9: { clients: 10_000 } } }, samples: [stormSample('sdk', 7290), stormSample('naive', 2470)],
  };
  const m = mergeRuns(first, [{ file: 'benchmarks/runs/x-s9.json', rec: later }]);
  assert.deepEqual(m.samples.map((x) => `${x.scenario} ${x.variant}`), ['S7 10000 sockets at 500/s, delay 1000 ms', 'S9 10000 SDK clients, drain 10000/s, no upgrade budget',
    'S9 10000 naive ws clients, drain 10000/s, no upgrade budget']);
  assert.deepEqual(m.config['scenarios'], { S7: { sockets: 10_000 }, S9: { clients: 10_000 } });
  assert.equal(m.rows.length, 3);
  assert.ok(m.goals.some((g) => g.goal.scenario === 'S7' && g.met === true));
  const method = methodSection(m);
  assert.match(method, /S9 from run `s9` \(`benchmarks\/runs\/x-s9\.json`\) from 2026-01-02T00:00:00Z to 2026-01-02T00:01:00Z, Sluice build `bbb` plus 2 uncommitted files/);
  assert.match(method, /- S9 \(reconnect storm\):/);
  assert.equal(mergeRuns(first, []), first);
});

test('S9 end to end on loopback, 40 clients: the SDK waits as told, the naive clients come back at once', { timeout: 90_000 }, async () => {
  const lines: string[] = [];
  const got = await runStorm({ targets: ['sluice'], repeats: 1, log: (l) => lines.push(l) },
    { clients: 40, procs: 1, rate: 1000, delayMs: 0, concurrency: 20, maxWaitMs: 15_000, modes: ['sdk', 'naive'], budgets: [0], costRequests: 0 });
  assert.equal(got.length, 2, lines.join('\n'));
  const [sdk, naive] = got as [Sample, Sample];
  for (const s of got) {
    const why = `${s.variant}: ${s.error ?? ''} ${JSON.stringify(s.extra)}\n${lines.join('\n')}`;
    assert.equal(s.ok, true, why);
    assert.equal(s.extra['reconnected'], 40, why);
    assert.equal(s.extra['closeCodes'], '{"1012":40}', why);
    assert.equal(s.extra['serverAccepted'], 40, 'B counted every client once');
    assert.equal(s.extra['attemptsA'], 0, 'no client went back to the draining node');
    assert.equal((s.timeline as Array<{ arrivals: number }>).reduce((a, b) => a + b.arrivals, 0), 40);
  }
  // The SDK: every wait at least the close's retryAfterMs (>= 1000 ms by default), so nobody is back within the first second.
  assert.equal(sdk.extra['retrySeen'], 40);
  assert.ok(Number(sdk.extra['retryMinMs']) >= 1000);
  assert.ok(Number(sdk.extra['plannedMinMs']) >= Number(sdk.extra['retryMinMs']));
  assert.ok(Number(sdk.extra['firstArrivalMs']) >= 1000, String(sdk.extra['firstArrivalMs']));
  // The naive clients: back right after their close.
  assert.ok(Number(naive.extra['firstArrivalMs']) < 1000, String(naive.extra['firstArrivalMs']));
  assert.ok(Number(naive.extra['t99Ms']) < Number(sdk.extra['t99Ms']));
});

test('S9 with an upgrade budget, 80 clients at 10/s (the drain hints spread them over 5 s: 16/s): the SDK waits its place, B holds its rate; the refusal cost is measured on refusals and upgrades', { timeout: 120_000 }, async () => {
  const lines: string[] = [];
  const got = await runStorm({ targets: ['sluice'], repeats: 1, log: (l) => lines.push(l) },
    { clients: 80, procs: 1, rate: 1000, delayMs: 0, concurrency: 20, maxWaitMs: 40_000, modes: ['sdk'], budgets: [10], costRequests: 1000 });
  assert.equal(got.length, 2, lines.join('\n'));
  const [sdk, cost] = got as [Sample, Sample];
  for (const s of [sdk]) {
    const why = `${s.variant}: ${s.error ?? ''} ${JSON.stringify(s.extra)}\n${lines.join('\n')}`;
    assert.equal(s.ok, true, why);
    assert.equal(s.extra['reconnected'], 80, why);
    assert.equal(s.extra['budget'], 10);
    assert.ok(Number(s.extra['overBudget']) > 0, `B refused some for rate: ${why}`);
    // 10/s and a burst of 1, seen through 100 ms polls: a few more at most.
    assert.ok(Number(s.extra['serverPeak1s']) <= 10 + 1 + 3, `B's busiest second: ${s.extra['serverPeak1s']}`);
  }
  assert.match(String(sdk.variant), /WS_UPGRADE_RATE=10/);
  // It read every refusal's hint (none was an error to it), and kept its place: a client goes to the other URL (A, gone)
  // only after 3 refusals in a row from B, where without the rule every refusal sent it there.
  assert.doesNotMatch(String(sdk.extra['socketErrors']), /refused upgrade \(hidden\)/);
  assert.ok(Number(sdk.extra['attemptsA']) <= Number(sdk.extra['overBudget']) / 3 + 2,
    `${sdk.extra['attemptsA']} attempts at A for ${sdk.extra['overBudget']} refusals at B`);
  assert.equal(cost.variant, 'refusal cost');
  assert.equal(cost.ok, true, `${cost.error ?? ''} ${JSON.stringify(cost.extra)}`);
  // What each side measured is what it says: refusals (all but the burst's first) and upgrades. Which costs less is the
  // benchmark's finding (results.md), a CPU-time comparison the suite's load can level (110 us each once, beside other tests).
  const codes = (k: string): Record<string, number> => JSON.parse(String(cost.extra[k])) as Record<string, number>;
  assert.ok((codes('refusedCodes')['503'] ?? 0) >= 990, JSON.stringify(cost.extra));
  assert.equal(codes('acceptedCodes')['101'], 1000, JSON.stringify(cost.extra));
  assert.ok(Number(cost.extra['refusedUs']) > 0 && Number(cost.extra['acceptedUs']) > 0, JSON.stringify(cost.extra));
  // The raw uWS floor beside it: its 503s and its upgrades were each all of the requests (else ok is false above).
  assert.ok(Number(cost.extra['rawRefusedUs']) > 0 && Number(cost.extra['rawAcceptedUs']) > 0, JSON.stringify(cost.extra));
});
