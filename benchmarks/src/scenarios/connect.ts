// S4 idle memory and S5 upgrade storm share one run: open N sockets (TCP
// connect, HTTP upgrade, first server frame) with a bounded number of
// handshakes in flight per generator process, then leave them idle.
//   S5: server CPU over the storm / upgrades, connect-time percentiles, and
//       the longest event-loop stall the server saw.
//   S4: (server RSS with the sockets open - RSS before) / sockets, each RSS the
//       lowest of samples taken over a quiet second or more.

import { availableParallelism } from 'node:os';
import type { ConnectResult, JoinResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { mergeEncoded, summarize } from '../lib/hist.ts';
import type { ServerProc, TargetSpec } from '../lib/server.ts';
import { interleave, measuredFields, sleep, type RunOptions, type Sample } from './common.ts';
import { machineBusySeconds } from '../lib/proc.ts';

export interface ConnectConfig {
  sockets: number;
  procs: number;
  /** Handshakes in flight per generator process. */
  concurrency: number;
  settleMs: number;
  which: ReadonlyArray<'S4' | 'S5'>;
  /**
   * Topics each socket joins once it is open (0, 1 or 2: one topic every
   * socket shares, then one of its own), before the RSS after is read. Only
   * S4 is kept from such a run: the joins' CPU is not an upgrade's.
   */
  topics: number;
}

export const S45_DEFAULT: ConnectConfig = { sockets: 15_000, procs: 2, concurrency: 250, settleMs: 2000, which: ['S4', 'S5'], topics: 0 };

export const SOURCES = ['127.0.0.1', '127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7', '127.0.0.8'];
const PER_PROC_MAX = 15_000;
const WARMUP_SOCKETS = 300;


export async function runConnect(opts: RunOptions, cfg: ConnectConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  try {
    if (cfg.topics > 2) throw new Error(`S4: --topics is 0, 1 or 2, not ${cfg.topics}`);
    if (cfg.topics > 0) cfg = { ...cfg, which: cfg.which.filter((w) => w === 'S4') };
    const keys = cfg.which.map((scenario) => ({ scenario, variant: variantOf(scenario, cfg) }));
    return await interleave(opts, keys, (srv, spec, repeat) => connectOnce(pool, srv, spec, repeat, cfg));
  } finally {
    await pool.close();
  }
}

function variantOf(scenario: 'S4' | 'S5', cfg: ConnectConfig): string {
  if (scenario === 'S5') return `${cfg.sockets} upgrades`;
  return cfg.topics > 0 ? `${cfg.sockets} idle, ${cfg.topics} topic${cfg.topics === 1 ? '' : 's'}` : `${cfg.sockets} idle`;
}

async function connectOnce(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: ConnectConfig): Promise<Sample[]> {
  const counts = split(cfg.sockets, pool.size);
  try {
    const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
    // Warm-up: a few hundred upgrades so that one-time costs (JIT, pools,
    // lazily loaded modules) are not charged to the measured sockets.
    await pool.procs[0]!.call({ op: 'connect', target, count: WARMUP_SOCKETS, idBase: 0, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 20_000 }, 30_000);
    await pool.all(() => ({ op: 'reset' }), 30_000);
    await sleep(1000);
    const rssBefore = await srv.minRssBytes(1000);
    const stallBefore = await srv.stallMaxMs();
    const t0 = performance.now();
    const busy0 = machineBusySeconds();
    const cpu0 = srv.cpuSeconds();
    const gen0 = pool.cpuSeconds();
    const results = await pool.all<ConnectResult>((p) => ({
      op: 'connect',
      target,
      count: counts[p.index]!,
      idBase: counts.slice(0, p.index).reduce((a, b) => a + b, 0),
      sources: SOURCES,
      concurrency: cfg.concurrency,
      timeoutMs: 60_000,
    }), 90_000);
    const busy1 = machineBusySeconds();
    const cpu1 = srv.cpuSeconds();
    const gen1 = pool.cpuSeconds();
    const t1 = performance.now();
    const stallAfter = await srv.stallMaxMs();
    // Joined after the storm and its clocks: a shared topic, then each socket's own.
    const joins: JoinResult[] = [];
    for (const topic of ['shared', null].slice(0, cfg.topics)) {
      joins.push(...await pool.all<JoinResult>(() => ({ op: 'join', topic, timeoutMs: 60_000 }), 90_000));
    }
    const rssAfter = await srv.minRssBytes(cfg.settleMs);
    const stormS = Math.max(...results.map((r) => r.elapsedMs)) / 1000;
    const wallS = (t1 - t0) / 1000;
    const ready = results.reduce((a, r) => a + r.ready, 0);
    const failed = results.reduce((a, r) => a + r.failed, 0);
    const reasons: Record<string, number> = {};
    for (const r of results) for (const [k, v] of Object.entries(r.reasons)) reasons[k] = (reasons[k] ?? 0) + v;
    const connect = summarize(mergeEncoded(results.map((r) => r.hist)));
    const serverCpuS = cpu1 - cpu0;
    const clientCpuS = gen1.map((g, i) => g - (gen0[i] ?? 0));
    const problems: string[] = [];
    if (failed > 0) problems.push(`${failed} connects failed: ${JSON.stringify(reasons)}`);
    const joined = joins.reduce((a, j) => a + j.joined, 0);
    if (cfg.topics > 0 && joined < ready * cfg.topics) problems.push(`${ready * cfg.topics - joined} of ${ready * cfg.topics} joins not answered`);
    const common = {
      target: spec.name,
      repeat,
      ...measuredFields({ count: ready, wallS, serverCpuS, clientCpuS, machineBusyS: busy1 - busy0, serverThreads: spec.threads, perSec: ready / stormS }, problems),
    } as const;
    const extra = {
      sockets: cfg.sockets, topics: cfg.topics, concurrencyPerProc: cfg.concurrency, procs: pool.size, cores: availableParallelism(),
      rssBeforeBytes: rssBefore, rssAfterBytes: rssAfter,
      rssPerSocketBytes: ready > 0 ? (rssAfter - rssBefore) / ready : NaN,
      cpuPerUpgradeUs: ready > 0 ? (serverCpuS / ready) * 1e6 : NaN,
      stallMaxMsBefore: stallBefore ?? null, stallMaxMs: stallAfter ?? null,
      connectP50Us: connect.p50Us, connectP99Us: connect.p99Us, connectMaxUs: connect.maxUs, stormS,
    };
    return cfg.which.map((scenario) => ({
      ...common,
      scenario,
      variant: variantOf(scenario, cfg),
      ...(scenario === 'S5' ? { latency: connect } : {}),
      extra,
    }));
  } finally {
    await pool.all(() => ({ op: 'reset' }), 60_000);
  }
}
