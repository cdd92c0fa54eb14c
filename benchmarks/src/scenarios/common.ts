// What every scenario shares: the sample shape, the measurement window, the
// client-bound rule, and the interleaved repeat loop.

import { availableParallelism } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { mergeEncoded, summarize, type LatencySummary } from '../lib/hist.ts';
import { ServerProc, TARGETS, type TargetName, type TargetSpec } from '../lib/server.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import type { LoadPool } from '../loadgen/pool.ts';
import type { MarkResult } from '../loadgen/messages.ts';

export { sleep };

export type ScenarioId = 'S1' | 'S2' | 'S3' | 'S4' | 'S5' | 'S6' | 'S7' | 'S8' | 'S9' | 'S10' | 'S11' | 'S12' | 'S13' | 'S14' | 'S15' | 'S16' | 'S17';

/** Which resource ran out first (see README: "bound"). */
export type Bound = 'server' | 'client' | 'machine' | 'none';

export interface Sample {
  scenario: ScenarioId;
  variant: string;
  target: TargetName;
  repeat: number;
  ok: boolean;
  error?: string;
  /** Messages (S1, S2), deliveries (S3) or upgrades (S4, S5) counted in the window. */
  count: number;
  wallS: number;
  serverCpuS: number;
  clientCpuS: number[];
  /** Server CPU / wall, in cores. */
  serverUtil: number;
  /** Busiest generator process's CPU / wall, in cores. */
  clientUtilMax: number;
  /** CPU used by everything else on the machine (other processes, interrupts) / wall, in cores: noise from outside the run. */
  otherUtil: number;
  bound: Bound;
  perSec: number;
  perServerCpuS: number;
  latency?: LatencySummary;
  extra: Record<string, number | string | boolean | null>;
  /** S6: one entry per second of the run (RSS, deliveries, latency); S7: closes per 100 ms after SIGTERM; S9: arrivals per 100 ms after SIGTERM. */
  timeline?: unknown[];
}

export interface RunOptions {
  targets: TargetName[];
  repeats: number;
  log: (line: string) => void;
}

const CORES = availableParallelism();

export function classifyBound(serverUtil: number, clientUtils: number[], serverThreads: number): Bound {
  const clientMax = Math.max(0, ...clientUtils);
  const serverCap = Math.min(serverThreads, CORES);
  const clientSaturated = clientMax >= 0.9;
  const serverSaturated = serverUtil >= 0.9 * serverCap;
  if (clientSaturated && !serverSaturated) return 'client';
  if (serverSaturated) return 'server';
  if (serverUtil + clientUtils.reduce((a, b) => a + b, 0) >= 0.9 * CORES) return 'machine';
  return 'none';
}

export interface Snapshot {
  t: number;
  machineBusy: number;
  serverCpu: number;
  clientCpu: number[];
  marks: MarkResult[];
}

/** `srv`: the server, or every server of a cluster (S8): anything that reads its CPU seconds. */
export async function snapshot(srv: Pick<ServerProc, 'cpuSeconds'>, pool: LoadPool): Promise<Snapshot> {
  const t = performance.now();
  const machineBusy = machineBusySeconds();
  const serverCpu = srv.cpuSeconds();
  const clientCpu = pool.cpuSeconds();
  const marks = await pool.all<MarkResult>(() => ({ op: 'mark' }), 20_000);
  return { t, machineBusy, serverCpu, clientCpu, marks };
}

export interface WindowResult {
  wallS: number;
  serverCpuS: number;
  clientCpuS: number[];
  machineBusyS: number;
  delta: { replies: number; replyErrors: number; events: number; publishes: number; gaps: number; duplicates: number; closed: number; reads: number };
  closeReasons: Record<string, number>;
  latency: LatencySummary;
}

export interface Measured {
  count: number;
  wallS: number;
  serverCpuS: number;
  clientCpuS: number[];
  /** The machine's busy CPU seconds over the window (for otherUtil). */
  machineBusyS: number;
  /** The server's threads, for the bound; none: bound 'none'. */
  serverThreads?: number;
  /** When the rate is not count / wallS. */
  perSec?: number;
}

/** The fields of a sample that follow from what was measured and what went wrong. */
export function measuredFields(m: Measured, problems: readonly string[]): Pick<Sample,
  'ok' | 'error' | 'count' | 'wallS' | 'serverCpuS' | 'clientCpuS' | 'serverUtil' | 'clientUtilMax' | 'otherUtil' | 'bound' | 'perSec' | 'perServerCpuS'> {
  const serverUtil = m.serverCpuS / m.wallS;
  const clientUtils = m.clientCpuS.map((c) => c / m.wallS);
  return {
    ok: problems.length === 0,
    ...(problems.length > 0 ? { error: problems.join('; ') } : {}),
    count: m.count, wallS: m.wallS, serverCpuS: m.serverCpuS, clientCpuS: m.clientCpuS,
    serverUtil,
    clientUtilMax: Math.max(...clientUtils),
    otherUtil: otherUtil(m.machineBusyS, m.serverCpuS, m.clientCpuS, m.wallS),
    bound: m.serverThreads === undefined ? 'none' : classifyBound(serverUtil, clientUtils, m.serverThreads),
    perSec: m.perSec ?? m.count / m.wallS,
    perServerCpuS: m.serverCpuS > 0 ? m.count / m.serverCpuS : NaN,
  };
}

/** measuredFields of a window between two snapshots, with its latency. */
export function windowFields(w: WindowResult, count: number, serverThreads: number, problems: readonly string[]): ReturnType<typeof measuredFields> & Pick<Sample, 'latency'> {
  return { ...measuredFields({ ...w, count, serverThreads }, problems), latency: w.latency };
}

/** Difference of two snapshots; `include` picks which processes' marks count. */
export function diff(a: Snapshot, b: Snapshot, include: (i: number) => boolean = () => true): WindowResult {
  const wallS = (b.t - a.t) / 1000;
  const serverCpuS = b.serverCpu - a.serverCpu;
  const clientCpuS = b.clientCpu.map((c, i) => c - (a.clientCpu[i] ?? 0));
  const sum = (k: keyof WindowResult['delta']): number =>
    b.marks.reduce((acc, m, i) => acc + (include(i) ? m[k] - (a.marks[i]?.[k] ?? 0) : 0), 0);
  const closeReasons: Record<string, number> = {};
  b.marks.forEach((m) => { for (const [k, v] of Object.entries(m.closeReasons)) closeReasons[k] = (closeReasons[k] ?? 0) + v; });
  return {
    wallS,
    serverCpuS,
    clientCpuS,
    machineBusyS: b.machineBusy - a.machineBusy,
    delta: {
      replies: sum('replies'), replyErrors: sum('replyErrors'), events: sum('events'), publishes: sum('publishes'),
      gaps: sum('gaps'), duplicates: sum('duplicates'), closed: sum('closed'), reads: sum('reads'),
    },
    closeReasons,
    latency: summarize(mergeEncoded(b.marks.filter((_, i) => include(i)).map((m) => m.hist))),
  };
}

/**
 * Waits (at most `maxMs`) until the whole machine used less than `cores` of
 * CPU over `sliceMs`: other engineers' test runs share this machine, and a
 * window that starts in one of their bursts measures them too. Resolves with
 * how long it waited and the last reading (cores); a machine that never got
 * quiet is measured anyway, and its `other load` says so.
 */
export async function waitQuiet(maxMs = 20_000, cores = 0.3, sliceMs = 500): Promise<{ waitedMs: number; busyCores: number }> {
  const t0 = performance.now();
  let busy = Infinity;
  while (performance.now() - t0 < maxMs) {
    const a = machineBusySeconds();
    const s0 = performance.now();
    await sleep(sliceMs);
    busy = (machineBusySeconds() - a) / ((performance.now() - s0) / 1000);
    if (busy < cores) break;
  }
  return { waitedMs: Math.round(performance.now() - t0), busyCores: Math.round(busy * 100) / 100 };
}

/** Machine CPU not spent by the server or the generators, in cores (never below 0: the counters tick at 10 ms). */
export function otherUtil(machineBusyS: number, serverCpuS: number, clientCpuS: readonly number[], wallS: number): number {
  return Math.max(0, machineBusyS - serverCpuS - clientCpuS.reduce((a, b) => a + b, 0)) / wallS;
}

export function failedSample(scenario: ScenarioId, variant: string, target: TargetName, repeat: number, error: string): Sample {
  return {
    scenario, variant, target, repeat, ok: false, error, count: 0, wallS: 0, serverCpuS: 0, clientCpuS: [],
    serverUtil: 0, clientUtilMax: 0, otherUtil: 0, bound: 'none', perSec: 0, perServerCpuS: 0, extra: {},
  };
}

/**
 * Runs `body` against a fresh server for every (repeat, target), targets in
 * an order rotated by one each repeat so that drift over the run hits every
 * target alike. A target that fails to start yields failed samples.
 */
export async function interleave(
  opts: RunOptions,
  keys: ReadonlyArray<{ scenario: ScenarioId; variant: string }>,
  body: (srv: ServerProc, spec: TargetSpec, repeat: number) => Promise<Sample[]>,
  /** Laid over every server's environment (S11: WS_AUTH=jwt). */
  env: Record<string, string> = {},
): Promise<Sample[]> {
  const out: Sample[] = [];
  const label = [...new Set(keys.map((k) => k.scenario))].join('+');
  for (let r = 0; r < opts.repeats; r++) {
    const order = opts.targets.map((_, i) => opts.targets[(i + r) % opts.targets.length]!);
    for (const name of order) {
      const spec = TARGETS[name];
      let srv: ServerProc;
      try {
        srv = await ServerProc.start(spec, 60_000, env);
      } catch (err) {
        const msg = (err as Error).message;
        const lines = msg.split('\n').map((l) => l.trim()).filter((l) => l !== '');
        opts.log(`  ${label} ${name}: cannot start: ${lines[0] ?? msg}${lines.length > 2 ? ` | ${lines.at(-1)!.slice(0, 300)}` : ''}`);
        for (const k of keys) out.push(failedSample(k.scenario, k.variant, name, r, `start failed: ${msg}`));
        continue;
      }
      try {
        const samples = await body(srv, spec, r);
        for (const s of samples) {
          opts.log(`  ${formatSampleLine(s)}`);
          out.push(s);
        }
      } catch (err) {
        const msg = (err as Error).message;
        opts.log(`  ${label} ${name} r${r}: failed: ${msg}`);
        for (const k of keys) out.push(failedSample(k.scenario, k.variant, name, r, msg));
      } finally {
        const end = await srv.stop();
        if (end.killed || (end.code !== 0 && end.code !== null)) {
          opts.log(`  ${label} ${name}: server ended with code ${String(end.code)} signal ${String(end.signal)}${end.killed ? ' (SIGKILL after grace)' : ''}`);
        }
      }
    }
  }
  return out;
}

export function formatSampleLine(s: Sample): string {
  if (!s.ok) return `${s.scenario} ${s.variant} ${s.target} r${s.repeat}: FAILED ${s.error ?? ''}`;
  const lat = s.latency !== undefined && s.latency.count > 0 ? ` p50=${fmtUs(s.latency.p50Us)} p99=${fmtUs(s.latency.p99Us)}` : '';
  return `${s.scenario} ${s.variant} ${s.target} r${s.repeat}: ${fmtInt(s.perSec)}/s, ${fmtInt(s.perServerCpuS)}/server-cpu-s, ` +
    `srv ${(s.serverUtil * 100).toFixed(0)}% gen ${(s.clientUtilMax * 100).toFixed(0)}% other ${(s.otherUtil * 100).toFixed(0)}% [${s.bound}]${lat}`;
}

export function fmtInt(n: number): string {
  if (!Number.isFinite(n)) return 'n/a';
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(0)}k`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n.toFixed(n >= 100 ? 0 : 1);
}

export function fmtUs(us: number): string {
  if (!Number.isFinite(us)) return 'n/a';
  if (us >= 1e6) return `${(us / 1e6).toFixed(2)}s`;
  if (us >= 1e3) return `${(us / 1e3).toFixed(us >= 1e4 ? 0 : 1)}ms`;
  return `${us.toFixed(0)}us`;
}

export function fmtBytes(b: number): string {
  if (!Number.isFinite(b)) return 'n/a';
  if (b >= 1 << 20) return `${(b / (1 << 20)).toFixed(1)} MiB`;
  if (b >= 1024) return `${(b / 1024).toFixed(2)} KiB`;
  return `${b.toFixed(0)} B`;
}
