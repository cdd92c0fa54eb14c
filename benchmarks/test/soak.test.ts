// The soak's pure pieces (chaos/soak.ts): the least-squares trend (with the
// socket count as a second regressor), the verdict, the fit windows after the
// warm-ups, node B's lives, the churn's quota and HAProxy session list, the
// options, the report and the chart. The run itself is `pnpm chaos soak`
// (30 minutes; not in CI).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  churnQuota, fitTrend, livesOf, parseShowSess, parseSoakArgs, pickRandom, renderSoakReport, renderSoakSvg, SETTLE_MS, slopes, soakViolations, transientsOf, verdictOf,
  type NodeSample, type SoakConfig, type SoakResult, type SoakSample,
} from '../chaos/soak.ts';

const MIN = 60_000;
const HOUR = 3_600_000;
const MIB = 2 ** 20;

/** A deterministic generator in [0, 1). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

test('fitTrend: the slope of an exact line, per hour, its share of the mean, and a zero standard error', () => {
  const ts = Array.from({ length: 30 }, (_, i) => i * 10_000);
  const ys = ts.map((t) => 1000 + (36 * t) / HOUR);
  const tr = fitTrend(ts, ys);
  assert.equal(tr.n, 30);
  assert.ok(Math.abs(tr.perHour - 36) < 1e-9);
  assert.ok(Math.abs(tr.sePerHour) < 1e-9);
  assert.ok(Math.abs(tr.mean - (1000 + (36 * 145_000) / HOUR)) < 1e-9);
  assert.ok(Math.abs(tr.pctPerHour - (36 / tr.mean) * 100) < 1e-9);
  assert.equal(tr.adjustedFor, undefined);
  assert.equal(tr.from, 0);
  assert.equal(tr.to, 290_000);
});

test('fitTrend: points with a value that is not finite are left out; fewer than 3 give NaN', () => {
  const tr = fitTrend([0, 1, 2, 3], [5, NaN, 7, 8]);
  assert.equal(tr.n, 3);
  assert.ok(Number.isFinite(tr.perHour));
  const few = fitTrend([0, 1], [1, 2]);
  assert.equal(few.n, 2);
  assert.ok(Number.isNaN(few.perHour));
  assert.equal(verdictOf(few, 5), 'too few samples');
  assert.ok(Number.isNaN(fitTrend([5, 5, 5], [1, 2, 3]).perHour), 'no time spread: no slope');
});

test('fitTrend with a covariate: memory that follows a sawtooth of sockets has no trend at constant sockets; a real trend is recovered', () => {
  // A's sockets: up at each drain of B (every 5 min), down as churn moves clients back; the window ends mid-tooth, so the plain line slopes.
  const ts = Array.from({ length: 150 }, (_, i) => 5 * MIN + i * 10_000);
  const sockets = ts.map((t) => 10_000 - ((t % (5 * MIN)) / (5 * MIN)) * 2500);
  const rnd = lcg(7);
  const noise = ts.map(() => (rnd() - 0.5) * 2 * MIB);
  const follows = ts.map((_, i) => 200 * MIB + sockets[i]! * 20_000 + noise[i]!);
  const raw = fitTrend(ts, follows);
  const adj = fitTrend(ts, follows, sockets, "A's sockets");
  assert.equal(adj.adjustedFor, "A's sockets");
  assert.ok(Math.abs(adj.perCovariate! - 20_000) < 200, `per socket ${adj.perCovariate}`);
  assert.ok(Math.abs(adj.pctPerHour) < 1, `adjusted ${adj.pctPerHour}%/h`);
  assert.ok(Math.abs(raw.pctPerHour) > Math.abs(adj.pctPerHour), 'the plain line is off by the sawtooth');
  // The same plus a leak of 40 MiB an hour.
  const leaks = follows.map((y, i) => y + (40 * MIB * (ts[i]! - ts[0]!)) / HOUR);
  const adj2 = fitTrend(ts, leaks, sockets);
  assert.ok(Math.abs(adj2.perHour - 40 * MIB) < 2 * MIB, `recovered ${adj2.perHour / MIB} MiB/h`);
  assert.ok(adj2.sePerHour > 0 && adj2.sePerHour < 2 * MIB);
});

test('fitTrend: a covariate that does not vary, or moves in step with time, is not used', () => {
  const ts = [0, 1, 2, 3, 4, 5].map((x) => x * 10_000);
  const ys = [10, 11, 12, 13, 14, 15];
  assert.equal(fitTrend(ts, ys, [7, 7, 7, 7, 7, 7]).adjustedFor, undefined);
  assert.equal(fitTrend(ts, ys, ts.map((t) => 3 * t + 1)).adjustedFor, undefined);
});

test('verdictOf: flat under the threshold either way, growing or falling beyond it', () => {
  const tr = (pct: number, n = 20): ReturnType<typeof fitTrend> => ({ n, mean: 100, perHour: pct, sePerHour: 0, pctPerHour: pct, tMean: 0, from: 0, to: 1 });
  assert.equal(verdictOf(tr(4.9), 5), 'flat');
  assert.equal(verdictOf(tr(-4.9), 5), 'flat');
  assert.equal(verdictOf(tr(5), 5), 'growing');
  assert.equal(verdictOf(tr(-12), 5), 'falling');
  assert.equal(verdictOf(tr(1, 5), 5), 'too few samples');
  assert.equal(verdictOf(tr(NaN), 5), 'too few samples');
});

const node = (alive: boolean, gen: number, o: Partial<NodeSample> = {}): NodeSample => ({ alive, gen, ...o });

/** 20 minutes every 10 s: A's RSS growing `aPct`%/h of 300 MiB, its heap and fds flat, Redis filling until 11 min then flat; B drained every 5 min. */
function run(aPct: number): SoakSample[] {
  const out: SoakSample[] = [];
  for (let t = 0; t <= 20 * MIN; t += 10_000) {
    const bGen = 1 + Math.floor(t / (5 * MIN));
    const bDown = t % (5 * MIN) < 20_000 && t >= 5 * MIN;
    out.push({
      t,
      a: node(true, 1, { rss: 300 * MIB * (1 + (aPct / 100) * (t / HOUR)), heap: 80 * MIB + (t % 30_000 === 0 ? MIB : 0), fds: 5100, sockets: 6000 - ((t % (5 * MIN)) / MIN) * 200 }),
      b: bDown ? node(false, bGen) : node(true, bGen, { rss: 250 * MIB + (t % (5 * MIN)) * 10, heap: 60 * MIB, fds: 4000, sockets: 4000 }),
      redisUsed: t < 11 * MIN ? 10 * MIB + t * 30 : 10 * MIB + 11 * MIN * 30,
      redisRss: 20 * MIB,
      fleetOpen: 9900,
    });
  }
  return out;
}

test('slopes: fits after each warm-up; Redis filling until its own warm-up is flat after it; a growing A is growing', () => {
  const o = { warmupMs: 5 * MIN, redisWarmupMs: 11 * MIN, endMs: Infinity, thresholdPct: 5 };
  const flat = slopes(run(0), o);
  const by = (rows: typeof flat, k: string): (typeof flat)[number] => rows.find((r) => r.key === k)!;
  assert.equal(by(flat, 'rss').verdict, 'flat');
  assert.equal(by(flat, 'heap').verdict, 'flat');
  assert.equal(by(flat, 'fds').verdict, 'flat');
  assert.equal(by(flat, 'redisUsed').verdict, 'flat');
  assert.equal(by(flat, 'redisUsed').raw.from, 11 * MIN);
  assert.equal(by(flat, 'rss').raw.from, 5 * MIN);
  assert.equal(by(flat, 'sockets').verdict, '-');
  assert.equal(by(flat, 'redisRss').verdict, '-');
  // Redis from the nodes' warm-up instead: still filling, growing.
  assert.equal(by(slopes(run(0), { ...o, redisWarmupMs: 5 * MIN }), 'redisUsed').verdict, 'growing');
  const growing = slopes(run(20), o);
  assert.equal(by(growing, 'rss').verdict, 'growing');
  assert.ok(Math.abs(by(growing, 'rss').raw.pctPerHour - 20 / (1 + 0.2 * (12.5 / 60))) < 0.5, `${by(growing, 'rss').raw.pctPerHour}`);
});

test('slopes: a drain surge at the end of the window reads as growth; left out as a transient, A is flat', () => {
  const o = { warmupMs: 5 * MIN, redisWarmupMs: 11 * MIN, endMs: Infinity, thresholdPct: 5 };
  // A flat A whose RSS and heap jump for the minute after a drain of B at 18 min (its clients moving to A).
  const samples = run(0).map((x) => (x.t >= 18 * MIN && x.t < 19.5 * MIN
    ? { ...x, a: { ...x.a, rss: x.a.rss! + 70 * MIB, heap: x.a.heap! + 40 * MIB } } : x));
  const by = (rows: ReturnType<typeof slopes>, k: string): ReturnType<typeof slopes>[number] => rows.find((r) => r.key === k)!;
  assert.equal(by(slopes(samples, o), 'rss').verdict, 'growing');
  const drain = { at: 18 * MIN, exitMs: 10_000, exitCode: 0, backMs: 25_000, upMs: 30_000 };
  const windows = transientsOf([drain]);
  assert.deepEqual(windows, [{ from: 18 * MIN, to: 18 * MIN + 30_000 + SETTLE_MS }]);
  const settled = slopes(samples, { ...o, transients: windows });
  assert.equal(by(settled, 'rss').verdict, 'flat');
  assert.equal(by(settled, 'heap').verdict, 'flat');
  assert.equal(by(settled, 'rss').raw.n, by(slopes(samples, o), 'rss').raw.n - 10, 'the 10 samples of 18:00 to 19:30');
  // Redis is not A: its window is not cut.
  assert.equal(by(settled, 'redisUsed').raw.n, by(slopes(samples, o), 'redisUsed').raw.n);
  // A 99% never reached (NaN) counts from B's return.
  assert.deepEqual(transientsOf([{ ...drain, backMs: NaN }]), windows);
});

test('livesOf: B apart per start, only while up', () => {
  const lives = livesOf(run(0), 'b');
  // The last sample (20 min) falls in the fourth drain: B down.
  assert.deepEqual(lives.map((l) => l.gen), [1, 2, 3, 4]);
  assert.equal(lives[0]!.from, 0);
  assert.equal(lives[1]!.from, 5 * MIN + 20_000);
  assert.equal(lives[0]!.socketsMax, 4000);
  assert.equal(livesOf(run(0), 'a').length, 1);
});

test('parseShowSess: proxied client sessions with a server, their address without the port', () => {
  const text = [
    '0x55d2f5a0e2a0: proto=tcpv4 src=127.0.0.2:41234 fe=ws_in be=sluice srv=node-a ts=00 epoch=0 age=4s calls=4 rate=0 cpu=0 lat=0 rq[f=848202h,i=0,an=00h,rx=,wx=,ax=] rp[f=80048202h,i=0,an=00h,rx=,wx=,ax=]',
    '0x55d2f5a0f3b0: proto=tcpv4 src=127.0.0.11:50000 fe=ws_in be=sluice srv=node-b ts=00 epoch=0 age=1m calls=9',
    '0x55d2f5a10000: proto=tcpv4 src=127.0.0.3:40000 fe=ws_in be=sluice srv=<NONE> ts=00 age=0s',
    '0x55d2f5a11111: proto=unix_stream src=unix:1 fe=GLOBAL be=<NONE> srv=<NONE> ts=00 age=0s',
    '',
  ].join('\n');
  assert.deepEqual(parseShowSess(text), [
    { id: '0x55d2f5a0e2a0', src: '127.0.0.2', srv: 'node-a' },
    { id: '0x55d2f5a0f3b0', src: '127.0.0.11', srv: 'node-b' },
  ]);
});

test('churnQuota: the share a minute over ticks, fractions carried; pickRandom: distinct, at most all', () => {
  let carry = 0;
  let total = 0;
  for (let i = 0; i < 12; i++) {
    const q = churnQuota(5, 990, 5000, carry);
    carry = q.carry;
    total += q.k;
  }
  assert.equal(total, 49);
  assert.ok(carry >= 0 && carry < 1);
  const xs = Array.from({ length: 100 }, (_, i) => i);
  const p = pickRandom(xs, 10, lcg(3));
  assert.equal(p.length, 10);
  assert.equal(new Set(p).size, 10);
  assert.equal(pickRandom([1, 2], 5).length, 2);
});

test('parseSoakArgs: defaults, the Redis warm-up past the history TTL, zero churn allowed, unknown options refused', () => {
  const c = parseSoakArgs([]) as SoakConfig;
  assert.equal(c.minutes, 30);
  assert.equal(c.clients, 10_000);
  assert.equal(c.procs, 4);
  assert.equal(c.warmupMinutes, 5);
  assert.equal(c.redisWarmupMinutes, 11);
  assert.equal(c.drainEveryMinutes, 5);
  assert.equal(c.churnPct, 5);
  assert.ok(c.out.endsWith('chaos/results-soak.md'));
  const s = parseSoakArgs(['--minutes', '3', '--clients', '1000', '--warmup-minutes', '1', '--churn-pct', '0', '--out', '/tmp/x.md'], 120_000) as SoakConfig;
  assert.equal(s.redisWarmupMinutes, 3);
  assert.equal(s.churnPct, 0);
  assert.equal(s.out, '/tmp/x.md');
  assert.equal(parseSoakArgs(['--help']), 'help');
  assert.throws(() => parseSoakArgs(['--nope', '1']), /unknown option --nope/);
  assert.throws(() => parseSoakArgs(['--minutes', '0']), /positive/);
  assert.throws(() => parseSoakArgs(['--minutes', '3', '--warmup-minutes', '5']), /nothing .* to fit/);
});

function result(samples: SoakSample[]): SoakResult {
  const cfg = parseSoakArgs(['--minutes', '20', '--out', '/tmp/soak.md']) as SoakConfig;
  return {
    startedAt: '2026-12-04T20:00:00.000Z', commit: 'abc1234', machine: '2 cores', cfg, fleetClients: 9900, slowReaders: 100, connected: 9900,
    loadAt: 0, loadMs: 20 * MIN, wallS: 1300, samples,
    slopes: slopes(samples, { warmupMs: 5 * MIN, redisWarmupMs: 11 * MIN, endMs: Infinity, thresholdPct: 5 }),
    drains: [5, 10, 15].map((m) => ({ at: m * MIN, socketsBefore: 4000, exitMs: 14_000, exitCode: 0, backMs: 12_000, upMs: 25_000 })),
    churn: { cuts: 9900, byNode: { 'node-a': 6000, 'node-b': 3900 }, failed: 0, errors: 0 },
    slow: { readers: 100, open: 100, stalled: 0, stalls: 1500, connects: 100, events: 1e6, bytes: 2e8, recoveredFalse: 0, joinErrors: {}, closes: {} },
    acked: 48_000, ackedInHistory: 20_000, history: { acked: 20_000, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] },
    delivery: { subscriptions: 19_800, expected: 3e7, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] },
    unacked: 0, rejected: {}, recoveredFalse: 0, keyedStale: 0, keyedSubscribers: 990, notConnected: 0,
    shardRestarts: { A: 0, B: 0 }, errorLines: { A: 0, B: 0 }, errorExamples: [], clientCloses: { 1006: 9900, 1012: 12_000 }, unavailable: 0,
    findings: ['lb1: 12 server state changes'],
  };
}

test('renderSoakReport and soakViolations: the slopes table, the drains, B per life, the invariants; a growing series fails', () => {
  const ok = result(run(0));
  assert.deepEqual(soakViolations(ok), []);
  const md = renderSoakReport(ok, 'results-soak.svg');
  assert.match(md, /^# Soak results/);
  assert.match(md, /!\[[^\]]*\]\(results-soak\.svg\)/);
  assert.match(md, /\| A's RSS \| 5\.0 to 20\.0 \| 91 \| 300\.0 MiB \|/);
  assert.match(md, /\| Redis used_memory \| 11\.0 to 20\.0 \|/);
  assert.match(md, /### Node B per life/);
  assert.match(md, /\| 3 \| 15\.0 \| 4000 \| 14\.0 s \| 0 \| 12\.0 s \| 25\.0 s \|/);
  assert.match(md, /Verdict: pass\./);
  const bad = result(run(20));
  const v = soakViolations(bad);
  assert.equal(v.length, 1);
  assert.match(v[0]!, /A's RSS grows \+\d+\.\d+% of its mean per hour/);
  assert.match(renderSoakReport(bad, 'x.svg'), /Verdict: FAIL: A's RSS grows/);
  const lost = { ...ok, history: { ...ok.history, lost: 2 }, errorLines: { A: 1, B: 0 } };
  assert.equal(soakViolations(lost).length, 2);
});

/** The SVG's elements open and close in order (a check of well-formedness enough for what renderSoakSvg writes). */
function balanced(svg: string): boolean {
  const stack: string[] = [];
  for (const m of svg.matchAll(/<(\/?)([a-z]+)\b[^>]*?(\/?)>/g)) {
    if (m[3] === '/') continue;
    if (m[1] === '/') { if (stack.pop() !== m[2]) return false; } else stack.push(m[2]!);
  }
  return stack.length === 0;
}

test('renderSoakSvg: a well-formed SVG with each series, the fit lines, the warm-ups and the drains, text escaped', () => {
  const r = result(run(0));
  const svg = renderSoakSvg({
    samples: r.samples, slopes: r.slopes, drains: r.drains.map((d) => d.at), warmupMs: 5 * MIN, redisWarmupMs: 11 * MIN, thresholdPct: 5, title: 'Soak <10k> & churn',
  });
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.ok(svg.trimEnd().endsWith('</svg>'));
  assert.ok(balanced(svg), 'tags balanced');
  assert.ok(!/NaN|undefined|Infinity/.test(svg), 'no NaN in coordinates');
  assert.match(svg, /Soak &lt;10k&gt; &amp; churn/);
  // A's RSS: one polyline over every sample (A never restarts).
  const polylines = [...svg.matchAll(/<polyline [^>]*points="([^"]*)"/g)].map((m) => m[1]!.split(' ').length);
  assert.ok(polylines.filter((n) => n === r.samples.length).length >= 4, `A's rss, heap, fds, sockets, Redis: ${polylines.join(',')}`);
  // B's lives: one polyline each in the RSS and heap panels.
  assert.equal(polylines.filter((n) => n < r.samples.length).length, 2 * 4);
  assert.equal((svg.match(/stroke-dasharray="8 4"/g) ?? []).length, 4, 'a fit line per judged panel');
  assert.equal((svg.match(/stroke="#c0392b" stroke-dasharray="5 3"/g) ?? []).length, 3 * 4, 'each drain in each panel');
  assert.equal((svg.match(/>drain B</g) ?? []).length, 3);
  assert.match(svg, /A's RSS \(B dotted\): [+-]?\d+\.\d+% of the mean per hour at constant sockets, flat/);
  assert.match(svg, /Redis used_memory \(its RSS dotted\): [+-]?\d+\.\d+% of the mean per hour, flat/);
});
