// S10 /metrics render time (issue 9: "`/metrics` stays under 50 ms to render
// with 10k sockets connected"; a benchmark figure, not a gate). One gateway
// (2 shard threads) per repeat, three phases on the same process:
//   1. `0 sockets`: the baseline, nothing connected.
//   2. `<n> idle sockets`: S4's connect machinery (generator processes, 8
//      loopback source addresses), every socket joined to `joins` of `topics`
//      topics.
//   3. `<n> sockets + traffic`: the same, with one paced publisher per generator
//      process (durable, `rate` per second each, to a topic of its own sockets)
//      and admin `POST /v1/publish` at `adminRate` per second round-robin over
//      every topic, so that counters move and every event fans out to
//      thousands of sockets while the scrapes run.
// In each phase: `warmup` scrapes (not counted), a quiet window (CPU without
// scrapes), `scrapes` sequential GET /metrics with `pauseMs` between them (CPU
// over that window, minus the quiet rate, per scrape), then `bursts` bursts of
// `burst` concurrent GETs. Render time is client-observed on loopback: from the
// request to the last body byte, on a keep-alive connection (node:http). After
// each sequential scrape one GET /health/live (the coordinator alone, no shard
// asked) gives the coordinator's own answer time for comparison, and the
// scrapes' per-thread `sluice_eventloop_lag_max_seconds` (read only once its
// 5 s window lies inside the phase) show how long each thread was blocked.
// Every answer must be 200 and report the sockets open (sluice_connected_sockets
// summed over the shards): a shard that did not answer in time would be left out
// of the aggregate (the coordinator waits 2 s for each, then renders without it).

import { readdirSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { loadavg } from 'node:os';
import type { ConnectResult, JoinResult, MarkResult, StopResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { metricByLabel, metricSum, metricTypes, parseMetrics, TEST_ADMIN_TOKEN } from '@sluice/gateway/testing';
import { maxOf, percentile } from '../lib/series.ts';
import { configSchema } from '@sluice/core';
import type { ServerProc, TargetSpec } from '../lib/server.ts';
import { SOURCES } from './connect.ts';
import { interleave, otherUtil, sleep, type RunOptions, type Sample } from './common.ts';

export interface MetricsConfig {
  sockets: number;
  procs: number;
  /** Handshakes in flight per generator process. */
  concurrency: number;
  topics: number;
  /** Topics each socket joins (a generator process's sockets join the same ones). */
  joins: number;
  /** Publishes per second of each generator process's publisher; 0: no traffic phase. */
  rate: number;
  /** Admin-API publishes per second, round-robin over the topics. */
  adminRate: number;
  size: number;
  warmup: number;
  scrapes: number;
  pauseMs: number;
  bursts: number;
  burst: number;
  quietMs: number;
}

export const S10_DEFAULT: MetricsConfig = {
  sockets: 10_000, procs: 2, concurrency: 250, topics: 4, joins: 2, rate: 2, adminRate: 1, size: 64,
  warmup: 10, scrapes: 100, pauseMs: 100, bursts: 5, burst: 10, quietMs: 4000,
};

/** The budget for one render, ms. */
export const RENDER_GOAL_MS = 50;
const PER_PROC_MAX = 15_000;
const BURST_GAP_MS = 500;
/** The gateway's lag gauges describe the last complete 5 s window: two windows after a time, every reading is from after it. */
const LAG_SETTLE_MS = 10_000;

// ---- pure helpers (unit-tested) ----

export interface ExpositionStats {
  bytes: number;
  /** Sample lines (one per series: every bucket, _sum and _count of a histogram counts). */
  series: number;
  /** Metric families (# TYPE lines). */
  families: number;
  /** Sample lines per family type. */
  seriesByType: Record<string, number>;
  /** Families per type. */
  familiesByType: Record<string, number>;
  /** The families with the most sample lines, most first (at most 5): `name type lines`. */
  largest: string[];
}

/** Counts what a Prometheus text exposition holds. */
export function expositionStats(text: string): ExpositionStats {
  const typeOf = metricTypes(text);
  const lines = new Map<string, number>();
  const familiesByType: Record<string, number> = {};
  for (const t of typeOf.values()) familiesByType[t] = (familiesByType[t] ?? 0) + 1;
  const samples = parseMetrics(text);
  for (const s of samples) {
    const family = familyOf(s.name, typeOf);
    lines.set(family, (lines.get(family) ?? 0) + 1);
  }
  const seriesByType: Record<string, number> = {};
  for (const [family, n] of lines) {
    const t = typeOf.get(family) ?? 'untyped';
    seriesByType[t] = (seriesByType[t] ?? 0) + n;
  }
  const largest = [...lines].sort((a, b) => b[1] - a[1]).slice(0, 5).map(([f, n]) => `${f} ${typeOf.get(f) ?? 'untyped'} ${n}`);
  return { bytes: Buffer.byteLength(text), series: samples.length, families: typeOf.size, seriesByType, familiesByType, largest };
}

/** A sample's family: the name itself, or the name less a histogram/summary suffix when that family is declared. */
function familyOf(name: string, typeOf: ReadonlyMap<string, string>): string {
  if (typeOf.has(name)) return name;
  for (const suffix of ['_bucket', '_sum', '_count', '_created', '_total']) {
    if (name.endsWith(suffix) && typeOf.has(name.slice(0, -suffix.length))) return name.slice(0, -suffix.length);
  }
  return name;
}

/** CPU ns per thread id. */
export type ThreadCpu = ReadonlyMap<number, number>;

/** after - before per thread (threads born in between count from 0; threads gone are left out). */
export function threadDelta(before: ThreadCpu, after: ThreadCpu): Map<number, number> {
  const out = new Map<number, number>();
  for (const [tid, ns] of after) out.set(tid, ns - (before.get(tid) ?? 0));
  return out;
}

/** The `n` threads other than `exclude` that used the most CPU in `delta`, busiest first. */
export function busiestThreads(delta: ThreadCpu, exclude: number, n: number): number[] {
  return [...delta].filter(([tid]) => tid !== exclude).sort((a, b) => b[1] - a[1]).slice(0, n).map(([tid]) => tid);
}

export interface CpuSplit { coordinatorNs: number; shardsNs: number; otherNs: number; totalNs: number }

/** Splits a per-thread delta into the coordinator (the main thread), the shard threads and the rest. */
export function splitCpu(delta: ThreadCpu, mainTid: number, shardTids: readonly number[]): CpuSplit {
  let coordinatorNs = 0;
  let shardsNs = 0;
  let otherNs = 0;
  for (const [tid, ns] of delta) {
    if (tid === mainTid) coordinatorNs += ns;
    else if (shardTids.includes(tid)) shardsNs += ns;
    else otherNs += ns;
  }
  return { coordinatorNs, shardsNs, otherNs, totalNs: coordinatorNs + shardsNs + otherNs };
}

/** CPU per scrape: the window's CPU less what the same time costs without scrapes (the quiet window's rate). */
export function perScrapeNs(windowNs: number, windowS: number, quietNs: number, quietS: number, scrapes: number): number {
  if (scrapes <= 0 || quietS <= 0) return NaN;
  return (windowNs - (quietNs / quietS) * windowS) / scrapes;
}

// ---- I/O ----

/**
 * From /proc/<pid>/task/<tid>/schedstat of every thread of `pid`: time on a CPU (sum_exec_runtime, ns), or with
 * `field` 1 the time spent runnable but waiting for a CPU (run_delay, ns).
 */
function threadCpu(pid: number, field: 0 | 1 = 0): Map<number, number> {
  const out = new Map<number, number>();
  for (const name of readdirSync(`/proc/${pid}/task`)) {
    try {
      const ns = Number(readFileSync(`/proc/${pid}/task/${name}/schedstat`, 'latin1').split(' ', 2)[field]);
      if (Number.isFinite(ns)) out.set(Number(name), ns);
    } catch { /* the thread ended meanwhile */ }
  }
  return out;
}

interface Scrape { at: number; ms: number; ttfbMs: number; status: number; text: string }

function get(agent: Agent, port: number, path: string, body?: string): Promise<Scrape> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let ttfb = NaN;
    const req = request({
      host: '127.0.0.1', port, path, agent, method: body === undefined ? 'GET' : 'POST',
      // The admin publish API needs the kit's admin token, as a deployment's needs its own; /metrics needs none.
      headers: body === undefined ? {} : {
        'content-type': 'application/json', 'content-length': Buffer.byteLength(body), authorization: `Bearer ${TEST_ADMIN_TOKEN}`,
      },
      timeout: 10_000,
    }, (res) => {
      ttfb = performance.now() - t0;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ at: t0, ms: performance.now() - t0, ttfbMs: ttfb, status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${path}: no answer in 10 s`)));
    req.on('error', reject);
    req.end(body);
  });
}

interface PhaseResult {
  seq: Scrape[];
  /** GET /health/live right after each sequential scrape: the coordinator's own answer time, no shard involved. */
  healthMs: number[];
  /**
   * Largest sluice_eventloop_lag_max_seconds per thread label, ms, from the scrapes of this phase whose 5 s window (the last
   * complete one) began after the quiet window did: only scrapes LAG_SETTLE_MS after its start are read.
   */
  lagMaxMs: Record<string, number>;
  burstMs: number[];
  burstWallMs: number[];
  seqWallS: number;
  quietS: number;
  quietCpu: Map<number, number>;
  seqCpu: Map<number, number>;
  /** Run-queue wait per thread over the sequential scrapes (runnable, no CPU free), ns. */
  seqWait: Map<number, number>;
  serverTicksS: number;
  genCpuS: number[];
  machineBusyS: number;
  problems: string[];
  sentDelta: number;
  loadavg1: number;
}

/** Traffic while a phase runs: paced publishers in the generator processes and admin publishes. */
class Traffic {
  private timer: NodeJS.Timeout | undefined;
  private adminErrors = 0;
  adminSent = 0;

  constructor(private readonly pool: LoadPool, private readonly agent: Agent, private readonly adminPort: number, private readonly cfg: MetricsConfig) {}

  start(topicOf: (proc: number) => string): void {
    const t0 = performance.now();
    this.pool.procs.forEach((p) => p.tell({ op: 'publish', topic: topicOf(p.index), depth: 8, size: this.cfg.size, ephemeral: false, credit: 0 }));
    let adminDue = 0;
    const data = JSON.stringify('x'.repeat(this.cfg.size));
    this.timer = setInterval(() => {
      const s = (performance.now() - t0) / 1000;
      const upTo = Math.floor(this.cfg.rate * s);
      for (const p of this.pool.procs) p.tell({ op: 'credit', upTo });
      for (; adminDue < Math.floor(this.cfg.adminRate * s); adminDue++) {
        const body = `{"topic":"s10.${adminDue % this.cfg.topics}","data":${data}}`;
        this.adminSent++;
        get(this.agent, this.adminPort, '/v1/publish', body).then((r) => { if (r.status !== 200) this.adminErrors++; }, () => { this.adminErrors++; });
      }
    }, 50);
  }

  async stop(): Promise<string[]> {
    clearInterval(this.timer);
    const stops = await this.pool.all<StopResult>(() => ({ op: 'stop', timeoutMs: 5000 }), 15_000);
    const marks = await this.pool.all<MarkResult>(() => ({ op: 'mark' }), 15_000);
    const problems: string[] = [];
    const outstanding = stops.reduce((a, s) => a + s.outstanding, 0);
    if (outstanding > 0) problems.push(`${outstanding} publishes unanswered at the end`);
    const errs = marks.reduce((a, m) => a + m.replyErrors, 0);
    if (errs > 0) problems.push(`${errs} error replies to publishes`);
    const closed = marks.reduce((a, m) => a + m.closed, 0);
    if (closed > 0) problems.push(`${closed} sockets closed: ${JSON.stringify(marks.map((m) => m.closeReasons))}`);
    if (this.adminErrors > 0) problems.push(`${this.adminErrors} admin publishes failed`);
    return problems;
  }
}

async function phase(srv: ServerProc, pool: LoadPool | null, agent: Agent, cfg: MetricsConfig, expectSockets: number): Promise<PhaseResult> {
  const port = srv.adminPort!;
  const problems: string[] = [];
  const check = (s: Scrape): void => {
    if (s.status !== 200) { problems.push(`GET /metrics answered ${s.status}`); return; }
    const open = metricSum(s.text, 'sluice_connected_sockets');
    if (open !== expectSockets) problems.push(`a scrape reported ${open} sockets, not ${expectSockets} (a shard missing from the aggregate?)`);
  };
  for (let i = 0; i < cfg.warmup; i++) { check(await get(agent, port, '/metrics')); await sleep(cfg.pauseMs); }
  const loadavg1 = loadavg()[0]!;
  // Quiet window: the same server and traffic without scrapes.
  const q0 = threadCpu(srv.pid);
  const tq0 = performance.now();
  const lagMaxMs: Record<string, number> = {};
  const readLag = (s: Scrape): void => {
    if (s.at < tq0 + LAG_SETTLE_MS) return;
    for (const [thread, v] of Object.entries(metricByLabel(s.text, 'sluice_eventloop_lag_max_seconds', 'thread'))) {
      lagMaxMs[thread] = Math.max(lagMaxMs[thread] ?? 0, v * 1000);
    }
  };
  await sleep(cfg.quietMs);
  const q1 = threadCpu(srv.pid);
  const quietS = (performance.now() - tq0) / 1000;

  const first = await get(agent, port, '/metrics');
  const sent0 = metricSum(first.text, 'sluice_messages_sent_total');
  const busy0 = machineBusySeconds();
  const ticks0 = srv.cpuSeconds();
  const gen0 = pool?.cpuSeconds() ?? [];
  const c0 = threadCpu(srv.pid);
  const w0 = threadCpu(srv.pid, 1);
  const t0 = performance.now();
  const seq: Scrape[] = [];
  const healthMs: number[] = [];
  for (let i = 0; i < cfg.scrapes; i++) {
    const s = await get(agent, port, '/metrics');
    check(s);
    seq.push(s);
    readLag(s);
    healthMs.push((await get(agent, port, '/health/live')).ms);
    if (i < cfg.scrapes - 1) await sleep(cfg.pauseMs);
  }
  const c1 = threadCpu(srv.pid);
  const w1 = threadCpu(srv.pid, 1);
  const seqWallS = (performance.now() - t0) / 1000;
  const ticks1 = srv.cpuSeconds();
  const gen1 = pool?.cpuSeconds() ?? [];
  const busy1 = machineBusySeconds();
  const sentDelta = metricSum(seq.at(-1)?.text ?? '', 'sluice_messages_sent_total') - sent0;

  const burstMs: number[] = [];
  const burstWallMs: number[] = [];
  for (let b = 0; b < cfg.bursts; b++) {
    await sleep(BURST_GAP_MS);
    const tb = performance.now();
    const got = await Promise.all(Array.from({ length: cfg.burst }, () => get(agent, port, '/metrics')));
    burstWallMs.push(performance.now() - tb);
    for (const s of got) { check(s); readLag(s); burstMs.push(s.ms); }
  }
  return {
    seq, healthMs, lagMaxMs, burstMs, burstWallMs, seqWallS, quietS, quietCpu: threadDelta(q0, q1), seqCpu: threadDelta(c0, c1), seqWait: threadDelta(w0, w1),
    serverTicksS: ticks1 - ticks0, genCpuS: gen1.map((g, i) => g - (gen0[i] ?? 0)), machineBusyS: busy1 - busy0,
    problems: [...new Set(problems)], sentDelta, loadavg1,
  };
}

export function variantsOf(cfg: MetricsConfig): string[] {
  return ['0 sockets', `${cfg.sockets} idle sockets`, ...(cfg.rate > 0 || cfg.adminRate > 0 ? [`${cfg.sockets} sockets + traffic`] : [])];
}

export async function runMetrics(opts: RunOptions, cfg: MetricsConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  try {
    const keys = variantsOf(cfg).map((variant) => ({ scenario: 'S10' as const, variant }));
    // The shipped WS_METRICS_WAIT_MS, not the test kit's (which waits for every shard's fresh figures).
    const waitMs = String(configSchema.find((v) => v.name === 'WS_METRICS_WAIT_MS')!.default);
    return await interleave(opts, keys, (srv, spec, repeat) => metricsOnce(pool, srv, spec, repeat, cfg), { WS_METRICS_WAIT_MS: waitMs });
  } finally {
    await pool.close();
  }
}

async function metricsOnce(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: MetricsConfig): Promise<Sample[]> {
  if (srv.adminPort === undefined) throw new Error('the gateway did not report its admin port');
  const agent = new Agent({ keepAlive: true, maxSockets: Math.max(16, cfg.burst) });
  const variants = variantsOf(cfg);
  const results: Array<{ variant: string; r: PhaseResult; sockets: number }> = [];
  try {
    results.push({ variant: variants[0]!, r: await phase(srv, null, agent, cfg, 0), sockets: 0 });

    const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
    const counts = split(cfg.sockets, pool.size);
    const beforeConnect = threadCpu(srv.pid);
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target, count: counts[p.index]!, idBase: counts.slice(0, p.index).reduce((a, b) => a + b, 0),
      sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000,
    }), 90_000);
    const ready = conn.reduce((a, r) => a + r.ready, 0);
    if (ready !== cfg.sockets) throw new Error(`${cfg.sockets - ready} of ${cfg.sockets} connects failed: ${JSON.stringify(conn.map((r) => r.reasons))}`);
    // Shard threads: the two (WS_WORKERS) busiest threads besides the main one while 10k sockets upgrade.
    const shardTids = busiestThreads(threadDelta(beforeConnect, threadCpu(srv.pid)), srv.pid, spec.threads);
    const topicOf = (proc: number, j: number): string => `s10.${(proc * cfg.joins + j) % cfg.topics}`;
    for (let j = 0; j < cfg.joins; j++) {
      const joined = await pool.all<JoinResult>((p) => ({ op: 'join', topic: topicOf(p.index, j), timeoutMs: 30_000 }), 40_000);
      const ok = joined.reduce((a, r) => a + r.joined, 0);
      if (ok !== cfg.sockets) throw new Error(`join ${j}: ${ok} of ${cfg.sockets} joined, ${joined.reduce((a, r) => a + r.errors, 0)} errors`);
    }
    await sleep(1000);
    results.push({ variant: variants[1]!, r: await phase(srv, pool, agent, cfg, cfg.sockets), sockets: cfg.sockets });

    if (variants[2] !== undefined) {
      const traffic = new Traffic(pool, agent, srv.adminPort, cfg);
      traffic.start((p) => topicOf(p, 0));
      await sleep(2000);
      const r = await phase(srv, pool, agent, cfg, cfg.sockets);
      r.problems.push(...await traffic.stop());
      results.push({ variant: variants[2], r, sockets: cfg.sockets });
    }
    const heaviest = results.at(-1)!.variant;
    return results.map(({ variant, r, sockets }) => toSample(spec, repeat, cfg, variant, r, sockets, srv.pid, shardTids, variant === heaviest && sockets >= 10_000));
  } finally {
    agent.destroy();
    await pool.all(() => ({ op: 'reset' }), 60_000);
  }
}

function toSample(spec: TargetSpec, repeat: number, cfg: MetricsConfig, variant: string, r: PhaseResult, sockets: number,
  mainTid: number, shardTids: readonly number[], isGoal: boolean): Sample {
  const ms = r.seq.map((s) => s.ms);
  const stats = expositionStats(r.seq.at(-1)?.text ?? '');
  const q = splitCpu(r.quietCpu, mainTid, shardTids);
  const w = splitCpu(r.seqCpu, mainTid, shardTids);
  const wait = splitCpu(r.seqWait, mainTid, shardTids);
  const per = (k: keyof CpuSplit): number => perScrapeNs(w[k], r.seqWallS, q[k], r.quietS, r.seq.length) / 1e6;
  const serverCpuS = w.totalNs / 1e9;
  const wallS = r.seqWallS;
  const seqP99 = percentile(ms, 0.99);
  const extra: Sample['extra'] = {
    sockets, topics: cfg.topics, joinsPerSocket: cfg.joins, scrapes: r.seq.length, pauseMs: cfg.pauseMs,
    seqP50Ms: percentile(ms, 0.5), seqP90Ms: percentile(ms, 0.9), seqP99Ms: seqP99, seqMaxMs: maxOf(ms), seqMinMs: percentile(ms, 0),
    ttfbP50Ms: percentile(r.seq.map((s) => s.ttfbMs), 0.5),
    healthP50Ms: percentile(r.healthMs, 0.5), healthP99Ms: percentile(r.healthMs, 0.99),
    lagMaxMsCoordinator: r.lagMaxMs['coordinator'] ?? null,
    lagMaxMsShards: Object.entries(r.lagMaxMs).filter(([k]) => k.startsWith('shard')).reduce<number | null>((a, [, v]) => Math.max(a ?? 0, v), null),
    burstSize: cfg.burst, bursts: cfg.bursts,
    burstP50Ms: percentile(r.burstMs, 0.5), burstP99Ms: percentile(r.burstMs, 0.99), burstMaxMs: maxOf(r.burstMs), burstWallMaxMs: maxOf(r.burstWallMs),
    bytes: stats.bytes, series: stats.series, families: stats.families,
    histogramSeries: stats.seriesByType['histogram'] ?? 0, histogramFamilies: stats.familiesByType['histogram'] ?? 0,
    largestFamilies: stats.largest.join(', '),
    cpuPerScrapeMs: per('totalNs'), coordinatorCpuPerScrapeMs: per('coordinatorNs'), shardsCpuPerScrapeMs: per('shardsNs'), otherThreadsCpuPerScrapeMs: per('otherNs'),
    quietServerUtil: q.totalNs / 1e9 / r.quietS,
    // Waiting for a CPU while runnable, ms per second of the sequential scrapes: the coordinator, and the two shards summed.
    coordinatorWaitMsPerS: wait.coordinatorNs / 1e6 / r.seqWallS, shardsWaitMsPerS: wait.shardsNs / 1e6 / r.seqWallS,
    deliveriesPerS: r.sentDelta / wallS,
    loadavg1: r.loadavg1,
    goalRenderP99Ms: isGoal ? seqP99 : null,
  };
  const clientCpuS = r.genCpuS;
  return {
    scenario: 'S10', variant, target: spec.name, repeat,
    ok: r.problems.length === 0, ...(r.problems.length > 0 ? { error: r.problems.join('; ') } : {}),
    count: r.seq.length, wallS, serverCpuS, clientCpuS, serverUtil: serverCpuS / wallS,
    clientUtilMax: clientCpuS.length === 0 ? 0 : Math.max(...clientCpuS) / wallS,
    // Machine CPU not spent by the server or the generators; the server's share from /proc/<pid>/stat like the machine's counter.
    otherUtil: otherUtil(r.machineBusyS, r.serverTicksS, clientCpuS, wallS),
    bound: 'none',
    perSec: r.seq.length / wallS,
    perServerCpuS: NaN,
    latency: { count: ms.length, p50Us: percentile(ms, 0.5) * 1000, p99Us: seqP99 * 1000, p999Us: percentile(ms, 0.999) * 1000, maxUs: maxOf(ms) * 1000 },
    extra,
  };
}
