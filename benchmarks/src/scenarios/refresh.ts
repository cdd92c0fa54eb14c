// S11 refresh cost (issue 17): what a `refresh` of the token on an open socket
// costs the server, beside what the upgrade with a token costs, both on the
// same gateway process (WS_AUTH=jwt, HS256) in one repeat.
//
// Per repeat and target, on a fresh gateway with WS_AUTH=jwt: 300 warm-up
// upgrades, each refreshed once, closed again; then `sockets` upgrades (S5's
// storm: `concurrency` handshakes in flight per generator process, 8 loopback
// source addresses), each with a token of its own (socket i is user u<i>, its
// own jti); one quiet second (the server's idle CPU); then `rounds` rounds in
// which every socket sends one `refresh` with a new token (same user, a new
// jti, an exp one second later each round), `concurrency` awaiting their
// reply per process. The gateway keeps verified tokens per shard, so every
// token here is one it has not seen: each upgrade and each refresh pays a
// signature check. Tokens are signed by the generators before each timed
// part. Server CPU (utime+stime of every thread, /proc) over the storm /
// upgrades, and over the refresh rounds (the signing between rounds left
// out) / accepted refreshes. The same storm against a second fresh gateway
// without WS_AUTH (S5's setting at this size) gives what the token adds to
// an upgrade.

import { availableParallelism } from 'node:os';
import { metricByLabel } from '@sluice/gateway/testing';
import type { ConnectResult, RefreshResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { mergeEncoded, summarize } from '../lib/hist.ts';
import { authSpec, jwtEnv, type AuthSpec } from '../lib/jwt.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { ServerProc, type TargetSpec } from '../lib/server.ts';
import { SOURCES } from './connect.ts';
import { failedSample, interleave, measuredFields, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface RefreshConfig {
  sockets: number;
  /** Refreshes per socket, each with a new token. */
  rounds: number;
  procs: number;
  /** Handshakes, then refreshes awaiting their reply, in flight per generator process. */
  concurrency: number;
}

export const S11_DEFAULT: RefreshConfig = { sockets: 2000, rounds: 5, procs: 2, concurrency: 250 };

const PER_PROC_MAX = 15_000;
const WARMUP_SOCKETS = 300;
/** The warm-up sockets' ids: apart from the measured ones, so no token repeats. */
const WARMUP_ID_BASE = 1_000_000;

export function variantsOf(cfg: RefreshConfig): { upgrade: string; refresh: string; plain: string } {
  return {
    upgrade: `${cfg.sockets} upgrades, jwt`,
    refresh: `${cfg.sockets} x ${cfg.rounds} refreshes, jwt`,
    plain: `${cfg.sockets} upgrades, no auth`,
  };
}

export async function runRefresh(opts: RunOptions, cfg: RefreshConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  const v = variantsOf(cfg);
  const auth = authSpec();
  try {
    const keys = [v.upgrade, v.refresh, v.plain].map((variant) => ({ scenario: 'S11' as const, variant }));
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      const jwt = await onJwt(pool, srv, spec, repeat, cfg, auth);
      await srv.stop();
      // The same storm without tokens, on a fresh gateway: S5 at this size.
      let plain: Sample;
      let bare: ServerProc | undefined;
      try {
        bare = await ServerProc.start(spec);
        plain = (await storm(pool, bare, spec, repeat, cfg, v.plain, undefined)).sample;
      } catch (err) {
        plain = failedSample('S11', v.plain, spec.name, repeat, (err as Error).message);
      } finally {
        await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
        await bare?.stop();
      }
      for (const s of jwt) if (s.variant === v.upgrade && plain.ok) s.extra['vsNoAuth'] = ratio(s.extra['cpuPerOpUs'], plain.extra['cpuPerOpUs']);
      return [...jwt, plain];
    }, jwtEnv(auth));
  } finally {
    await pool.close();
  }
}

function ratio(a: unknown, b: unknown): number | null {
  return typeof a === 'number' && typeof b === 'number' && b > 0 ? Math.round((a / b) * 1000) / 1000 : null;
}

interface Storm {
  sample: Sample;
}

/** Warm-up upgrades (refreshed once each with a token when `auth` is given), then the measured storm; the sockets stay open. */
async function storm(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: RefreshConfig, variant: string,
  auth: AuthSpec | undefined): Promise<Storm> {
  const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
  const withTokens = auth !== undefined;
  const first = pool.procs[0]!;
  if (auth !== undefined) await first.call({ op: 'sign', purpose: 'upgrade', auth, idBase: WARMUP_ID_BASE, count: WARMUP_SOCKETS });
  const warm = await first.call<ConnectResult>({
    op: 'connect', target, count: WARMUP_SOCKETS, idBase: WARMUP_ID_BASE, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 20_000, withTokens,
  }, 30_000);
  if (warm.ready < WARMUP_SOCKETS) throw new Error(`warm-up: ${warm.ready}/${WARMUP_SOCKETS} sockets connected: ${JSON.stringify(warm.reasons)}`);
  if (auth !== undefined) {
    await first.call({ op: 'sign', purpose: 'refresh', auth, round: 1 });
    const r = await first.call<RefreshResult>({ op: 'refresh', concurrency: cfg.concurrency, timeoutMs: 20_000 }, 30_000);
    if (r.ok < WARMUP_SOCKETS) throw new Error(`warm-up: ${r.ok}/${WARMUP_SOCKETS} refreshes accepted: ${r.errorSamples.join(' | ')}`);
  }
  await pool.all(() => ({ op: 'reset' }), 30_000);
  const counts = split(cfg.sockets, pool.size);
  const bases = counts.map((_, i) => counts.slice(0, i).reduce((a, b) => a + b, 0));
  if (auth !== undefined) await pool.all((p) => ({ op: 'sign', purpose: 'upgrade', auth, idBase: bases[p.index]!, count: counts[p.index]! }), 30_000);
  await sleep(1000);
  const quiet = await waitQuiet();
  const t0 = performance.now();
  const busy0 = machineBusySeconds();
  const cpu0 = srv.cpuSeconds();
  const gen0 = pool.cpuSeconds();
  const results = await pool.all<ConnectResult>((p) => ({
    op: 'connect', target, count: counts[p.index]!, idBase: bases[p.index]!, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000, withTokens,
  }), 90_000);
  const busy1 = machineBusySeconds();
  const cpu1 = srv.cpuSeconds();
  const gen1 = pool.cpuSeconds();
  const wallS = (performance.now() - t0) / 1000;
  const ready = results.reduce((a, r) => a + r.ready, 0);
  const failed = results.reduce((a, r) => a + r.failed, 0);
  const reasons: Record<string, number> = {};
  for (const r of results) for (const [k, n] of Object.entries(r.reasons)) reasons[k] = (reasons[k] ?? 0) + n;
  const serverCpuS = cpu1 - cpu0;
  const stormS = Math.max(...results.map((r) => r.elapsedMs)) / 1000;
  const problems = failed > 0 ? [`${failed} connects failed: ${JSON.stringify(reasons)}`] : [];
  const connect = summarize(mergeEncoded(results.map((r) => r.hist)));
  return {
    sample: {
      scenario: 'S11', variant, target: spec.name, repeat,
      ...measuredFields({
        count: ready, wallS, serverCpuS, clientCpuS: gen1.map((g, i) => g - (gen0[i] ?? 0)), machineBusyS: busy1 - busy0,
        serverThreads: spec.threads, perSec: ready / stormS,
      }, problems),
      latency: connect,
      extra: {
        sockets: cfg.sockets, procs: pool.size, concurrencyPerProc: cfg.concurrency, cores: availableParallelism(), auth: withTokens ? 'jwt HS256' : 'none',
        cpuPerOpUs: ready > 0 ? (serverCpuS / ready) * 1e6 : NaN, stormS, quietWaitMs: quiet.waitedMs, quietBusyCores: quiet.busyCores,
      },
    },
  };
}

/** The storm with tokens, then the refresh rounds, on one gateway. */
async function onJwt(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: RefreshConfig, auth: AuthSpec): Promise<Sample[]> {
  const v = variantsOf(cfg);
  try {
    const up = (await storm(pool, srv, spec, repeat, cfg, v.upgrade, auth)).sample;
    if (!up.ok) return [up, failedSample('S11', v.refresh, spec.name, repeat, `upgrades failed: ${up.error ?? ''}`)];
    // The server's CPU with the sockets open and nothing sent: what a window of the same length would cost anyway.
    const q0 = performance.now();
    const qc0 = srv.cpuSeconds();
    await sleep(1000);
    const idleCores = (srv.cpuSeconds() - qc0) / ((performance.now() - q0) / 1000);
    const before = await refreshCounts(srv);
    const quiet = await waitQuiet();
    let wallS = 0;
    let serverCpuS = 0;
    let busyS = 0;
    let clientCpuS = pool.cpuSeconds().map(() => 0);
    const all: RefreshResult[] = [];
    for (let round = 1; round <= cfg.rounds; round++) {
      await pool.all(() => ({ op: 'sign', purpose: 'refresh', auth, round }), 30_000);
      const t0 = performance.now();
      const busy0 = machineBusySeconds();
      const cpu0 = srv.cpuSeconds();
      const gen0 = pool.cpuSeconds();
      const got = await pool.all<RefreshResult>(() => ({ op: 'refresh', concurrency: cfg.concurrency, timeoutMs: 60_000 }), 90_000);
      const gen1 = pool.cpuSeconds();
      serverCpuS += srv.cpuSeconds() - cpu0;
      busyS += machineBusySeconds() - busy0;
      wallS += (performance.now() - t0) / 1000;
      clientCpuS = clientCpuS.map((c, i) => c + (gen1[i] ?? 0) - (gen0[i] ?? 0));
      all.push(...got);
    }
    const after = await refreshCounts(srv);
    const ok = all.reduce((a, r) => a + r.ok, 0);
    const errors = all.reduce((a, r) => a + r.errors, 0);
    const unanswered = all.reduce((a, r) => a + r.unanswered, 0);
    const expected = up.count * cfg.rounds;
    const problems: string[] = [];
    if (errors > 0) problems.push(`${errors} refreshes refused: ${[...new Set(all.flatMap((r) => r.errorSamples))].slice(0, 3).join(' | ')}`);
    if (unanswered > 0) problems.push(`${unanswered} refreshes unanswered`);
    if (ok < expected) problems.push(`${ok}/${expected} refreshes accepted`);
    const d = (k: string): number | null => (before === undefined || after === undefined ? null : (after[k] ?? 0) - (before[k] ?? 0));
    const refresh: Sample = {
      scenario: 'S11', variant: v.refresh, target: spec.name, repeat,
      ...measuredFields({ count: ok, wallS, serverCpuS, clientCpuS, machineBusyS: busyS, serverThreads: spec.threads }, problems),
      latency: summarize(mergeEncoded(all.map((r) => r.hist))),
      extra: {
        sockets: up.count, rounds: cfg.rounds, procs: pool.size, concurrencyPerProc: cfg.concurrency,
        cpuPerOpUs: ok > 0 ? (serverCpuS / ok) * 1e6 : NaN,
        // The part of that figure the server would have spent idle over the same wall time.
        idleCores, idleCpuPerOpUs: ok > 0 ? ((idleCores * wallS) / ok) * 1e6 : NaN,
        upgradeCpuUs: up.extra['cpuPerOpUs'] ?? null,
        vsUpgrade: ratio(ok > 0 ? (serverCpuS / ok) * 1e6 : NaN, up.extra['cpuPerOpUs']),
        quietWaitMs: quiet.waitedMs, quietBusyCores: quiet.busyCores,
        gatewayRefreshesOk: d('ok'), gatewayRefreshesUnauthorized: d('unauthorized'), gatewayRefreshesForbidden: d('forbidden'),
      },
    };
    return [up, refresh];
  } finally {
    await pool.all(() => ({ op: 'reset' }), 60_000);
  }
}

/** sluice_refreshes_total by outcome; undefined when /metrics did not answer. */
async function refreshCounts(srv: ServerProc): Promise<Record<string, number> | undefined> {
  try {
    return metricByLabel(await srv.gw.metrics(10_000), 'sluice_refreshes_total', 'outcome');
  } catch {
    return undefined;
  }
}
