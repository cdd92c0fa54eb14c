// S7 drain pacing: the gateway (2 workers) holds `sockets` idle sockets that
// keep reading and are never reopened; SIGTERM; the clients record when each
// socket closed, its close code and the retryAfterMs of its reason. Meanwhile
// the orchestrator polls GET /health/ready on the admin port (from right after
// the signal) and samples the server's CPU every 100 ms. The server must exit
// by itself (bounded: WS_DRAIN_MAX_MS + 20 s, then SIGKILL).
//
// Judged against the operations doc ("Deploys and the drain"): after
// WS_DRAIN_DELAY_MS, WS_DRAIN_RATE closes per second for the whole node, code
// 1012, retryAfterMs uniform in [WS_RETRY_AFTER_MIN_MS, WS_RETRY_AFTER_MAX_MS]
// (1000..6000 by default), readiness 503 at once, exit 0.

import { rawUpgrade } from '@sluice/gateway/testing';
import { availableParallelism } from 'node:os';
import type { ClosesResult, ConnectResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { monoUs } from '../lib/clock.ts';
import { bucketCounts, chiSquareUniform, histogram, peakRate, shareWithin } from '../lib/series.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { ServerProc, TARGETS } from '../lib/server.ts';
import { SOURCES } from './connect.ts';
import { measuredFields, sleep, type RunOptions, type Sample } from './common.ts';

export interface DrainConfig {
  sockets: number;
  /** WS_DRAIN_RATE: closes per second for the whole node. */
  rate: number;
  /** WS_DRAIN_DELAY_MS. */
  delayMs: number;
  /** Generator processes (at least sockets / 15 000). */
  procs: number;
  /** Handshakes in flight per generator process. */
  concurrency: number;
  /** The retryAfterMs range the doc promises (gateway defaults), and bins for its histogram. */
  retryMinMs: number;
  retryMaxMs: number;
  retryBins: number;
  /** A bucket is on target within +-tolerance (0.2 = 20%). */
  tolerance: number;
}

export const S7_DEFAULT: DrainConfig = {
  sockets: 10_000, rate: 500, delayMs: 1000, procs: 2, concurrency: 250, retryMinMs: 1000, retryMaxMs: 6000, retryBins: 10, tolerance: 0.2,
};

const PER_PROC_MAX = 15_000;

/** WS_DRAIN_MAX_MS: long enough for every socket at the target rate, plus 10 s. */
export function drainMaxMs(cfg: Pick<DrainConfig, 'sockets' | 'rate' | 'delayMs'>): number {
  return Math.ceil((cfg.sockets / cfg.rate) * 1000 + cfg.delayMs + 10_000);
}

export function variantOf(cfg: DrainConfig): string {
  return `${cfg.sockets} sockets at ${cfg.rate}/s, delay ${cfg.delayMs} ms`;
}

/** One 100 ms bucket of the drain, for the chart. */
export interface DrainBucket {
  /** Start of the bucket, ms after SIGTERM. */
  t: number;
  closes: number;
}

interface ReadyPoll { ms: number; status: number | string }

async function pollReady(adminPort: number | undefined, t0: number, until: () => boolean, out: ReadyPoll[]): Promise<void> {
  if (adminPort === undefined) return;
  for (let i = 0; i < 2000 && !until(); i++) {
    const at = (performance.now() - t0);
    let status: number | string;
    try {
      status = (await fetch(`http://127.0.0.1:${adminPort}/health/ready`, { signal: AbortSignal.timeout(1000) })).status;
    } catch (e) {
      status = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).name;
    }
    out.push({ ms: Math.round(at), status });
    if (typeof status === 'string') break; // the admin port is gone: the process is stopping
    await sleep(100);
  }
}

/** One WebSocket upgrade attempt during the drain: the doc says 503 with Retry-After and the unavailable body. */
function probeUpgrade(port: number): Promise<string> {
  return rawUpgrade(port, { timeoutMs: 2000 }).then((r) => `${r.status} retry-after ${String(r.headers['retry-after'])} ${r.body.slice(0, 200)}`,
    (e: NodeJS.ErrnoException) => (e.message === 'upgraded although refused' ? '101 (upgraded)' : e.code ?? e.message));
}

export async function runDrain(opts: RunOptions, cfg: DrainConfig): Promise<Sample[]> {
  const spec = TARGETS['sluice'];
  const maxMs = drainMaxMs(cfg);
  const procs = Math.max(cfg.procs, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  let srv: ServerProc | undefined;
  try {
    srv = await ServerProc.start(spec, 60_000, {
      WS_DRAIN_DELAY_MS: String(cfg.delayMs), WS_DRAIN_RATE: String(cfg.rate), WS_DRAIN_MAX_MS: String(maxMs),
    });
    const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
    const counts = split(cfg.sockets, pool.size);
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target, count: counts[p.index]!, idBase: counts.slice(0, p.index).reduce((a, b) => a + b, 0),
      sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000,
    }), 90_000);
    const ready = conn.reduce((a, c) => a + c.ready, 0);
    opts.log(`  S7: ${ready}/${cfg.sockets} sockets open; WS_DRAIN_MAX_MS=${maxMs}`);
    const watching = (await pool.all<number>(() => ({ op: 'watchCloses' }))).reduce((a, b) => a + b, 0);
    await sleep(1000);

    // SIGTERM, then: readiness polls, CPU every 100 ms, until the process exits.
    const cpuSamples: Array<{ ms: number; cpuS: number }> = [];
    const busy0 = machineBusySeconds();
    const gen0 = pool.cpuSeconds();
    const cpu0 = srv.cpuSeconds();
    const t0 = performance.now();
    const t0Us = monoUs();
    process.kill(srv.pid, 'SIGTERM');
    let exited = false;
    const polls: ReadyPoll[] = [];
    const pollDone = pollReady(srv.adminPort, t0, () => exited, polls);
    // An upgrade in the delay (when there is one) should be refused with 503.
    const upgradeDuring = sleep(Math.min(200, cfg.delayMs / 2)).then(() => probeUpgrade(target.port));
    const s = srv;
    const cpuDone = (async () => {
      cpuSamples.push({ ms: 0, cpuS: cpu0 });
      for (let i = 0; i < (maxMs + 20_000) / 100 && !exited; i++) {
        await sleep(100);
        try { cpuSamples.push({ ms: performance.now() - t0, cpuS: s.cpuSeconds() }); } catch { break; }
      }
    })();
    exited = await srv.waitExit(maxMs + 20_000);
    const wallS = (performance.now() - t0) / 1000;
    const busy1 = machineBusySeconds();
    const gen1 = pool.cpuSeconds();
    let killed = false;
    if (!exited) { killed = true; await srv.stop(1000); exited = true; }
    await Promise.all([pollDone, cpuDone]);
    const upgradeProbe = await upgradeDuring;
    const closes = await pool.all<ClosesResult>(() => ({ op: 'closes', timeoutMs: 5000 }), 15_000);

    // ---- analysis (times in ms after SIGTERM) ----
    const times = closes.flatMap((c) => c.atUs.map((u) => (u - t0Us) / 1000)).sort((a, b) => a - b);
    const codes: Record<string, number> = {};
    for (const c of closes) for (const k of c.codes) codes[k === 0 ? 'no close frame' : String(k)] = (codes[k === 0 ? 'no close frame' : String(k)] ?? 0) + 1;
    const other: Record<string, number> = {};
    for (const c of closes) for (const [k, v] of Object.entries(c.other)) other[k] = (other[k] ?? 0) + v;
    const retry = closes.flatMap((c) => c.retryAfterMs.filter((r) => r >= 0));
    const open = closes.reduce((a, c) => a + c.open, 0);
    const firstMs = times[0] ?? NaN;
    const lastMs = times[times.length - 1] ?? NaN;
    const beforeDelay = times.filter((t) => t < cfg.delayMs).length;
    const perSecond = bucketCounts(times, cfg.delayMs, lastMs, 1000);
    const per100 = bucketCounts(times, cfg.delayMs, lastMs, 100);
    const secShare = shareWithin(perSecond, cfg.rate, cfg.tolerance);
    const b100Share = shareWithin(per100, cfg.rate / 10, cfg.tolerance);
    const hist = histogram(retry, cfg.retryMinMs, cfg.retryMaxMs, cfg.retryBins);
    const chi = chiSquareUniform(hist.counts);
    // Busiest 1 s (or longer) window.
    const peakCpu = peakRate(cpuSamples.map((c) => ({ ms: c.ms, value: c.cpuS })), 1000);
    const lastCpu = cpuSamples[cpuSamples.length - 1]!;
    const serverCpuS = lastCpu.cpuS - cpu0;
    const clientCpuS = gen1.map((g, i) => g - (gen0[i] ?? 0));
    const statuses: Record<string, number> = {};
    for (const p of polls) statuses[String(p.status)] = (statuses[String(p.status)] ?? 0) + 1;
    const httpPolls = polls.filter((p) => typeof p.status === 'number');
    const readyAll503 = httpPolls.length > 0 && httpPolls.every((p) => p.status === 503);
    const logLine = (msg: string): string => JSON.stringify(s.logs.find((l) => l['msg'] === msg)) ?? 'not seen';
    const timeline: DrainBucket[] = bucketCounts(times, 0, Math.ceil(Math.max(lastMs, 0) / 100) * 100 + 100, 100).map((c, i) => ({ t: i * 100, closes: c }));

    const problems: string[] = [];
    if (ready < cfg.sockets) problems.push(`only ${ready}/${cfg.sockets} sockets connected: ${JSON.stringify(conn.map((c) => c.reasons))}`);
    if (killed) problems.push(`server did not exit within WS_DRAIN_MAX_MS + 20 s; killed`);
    const findings: string[] = [];
    if (open > 0) findings.push(`${open} sockets still open after exit`);
    if ((codes['1012'] ?? 0) !== times.length) findings.push(`not every close was 1012: ${JSON.stringify(codes)}`);
    if (beforeDelay > 0) findings.push(`${beforeDelay} closes before the delay`);
    if (cfg.delayMs > 0 && !upgradeProbe.startsWith('503')) findings.push(`upgrade during the delay: ${upgradeProbe}`);
    if (!readyAll503) findings.push(`readiness not 503 throughout: ${JSON.stringify(statuses)}`);
    if (s.exitCode !== 0) findings.push(`exit code ${String(s.exitCode)} signal ${String(s.exitSignal)}`);
    if (hist.below + hist.above > 0) findings.push(`${hist.below + hist.above} retryAfterMs outside [${cfg.retryMinMs}, ${cfg.retryMaxMs}]`);

    const drainS = (lastMs - firstMs) / 1000;
    const r2 = (x: number): number => Math.round(x * 100) / 100;
    return [{
      scenario: 'S7',
      variant: variantOf(cfg),
      target: spec.name,
      repeat: 0,
      ...measuredFields({ count: times.length, wallS, serverCpuS, clientCpuS, machineBusyS: busy1 - busy0, perSec: drainS > 0 ? times.length / drainS : NaN }, problems),
      extra: {
        sockets: cfg.sockets, socketsOpen: ready, socketsWatched: watching, rate: cfg.rate, delayMs: cfg.delayMs, maxMs, procs: pool.size, cores: availableParallelism(),
        closes: times.length, stillOpen: open, closesBeforeDelay: beforeDelay,
        closeCodes: JSON.stringify(codes), otherCloses: JSON.stringify(other),
        firstCloseMs: r2(firstMs), lastCloseMs: r2(lastMs), drainS: r2(drainS), expectedDrainS: r2(ready / cfg.rate),
        drainVsExpected: r2(drainS / (ready / cfg.rate)),
        closesPerSecond: JSON.stringify(perSecond), closesPerSecondMin: Math.min(...perSecond), closesPerSecondMax: Math.max(...perSecond),
        secondsWithin: r2(secShare), seconds: perSecond.length,
        buckets100Within: r2(b100Share), buckets100: per100.length,
        buckets100Min: Math.min(...per100), buckets100Max: Math.max(...per100),
        retrySeen: retry.length, retryMinMs: Math.min(...retry), retryMaxMs: Math.max(...retry),
        retryHist: JSON.stringify(hist.counts), retryOutside: hist.below + hist.above,
        retryChi2: r2(chi.stat), retryChi2Df: chi.df, retryChi2P: Math.round(chi.p * 10_000) / 10_000,
        readyFirst: polls[0] === undefined ? 'no poll' : `${String(polls[0].status)} at ${polls[0].ms} ms`,
        readyStatuses: JSON.stringify(statuses), readyAll503, upgradeDuringDelay: upgradeProbe,
        exitCode: s.exitCode ?? -1, exitSignal: s.exitSignal ?? '', exitAfterS: r2(wallS),
        peakServerCpu: r2(peakCpu),
        logDrainStarted: logLine('drain started'), logDrainFinished: logLine('drain finished'),
        findings: findings.join('; '),
      },
      timeline,
    }];
  } finally {
    if (srv?.alive === true) await srv.stop(5000);
    await pool.all(() => ({ op: 'reset' }), 30_000).catch(() => undefined);
    await pool.close();
  }
}
