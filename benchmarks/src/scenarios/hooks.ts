// S15 backend hooks (issue 19): what the connect hook costs an upgrade beside
// WS_AUTH=jwt, and what the subscribe hook and its cache cost a join.
//
// One backend process for the run (src/lib/hook-backend.ts: node:http on
// 127.0.0.1, keep-alive, its CPU its own). Per repeat, on fresh gateways:
//  (a) WS_AUTH=jwt: S11's storm, `sockets` upgrades, each with an HS256 token
//      new to the gateway (signed by the generators before the timed part);
//  (b) WS_AUTH=hook: the same storm, socket i sending `?token=u<i>`, which the
//      backend answers at once as user u<i> (every client distinct: one
//      backend call per upgrade);
//  then on the (b) sockets, each joining `topics` topics, topic by topic,
//  `concurrency` awaiting their reply per generator process:
//  (d) `room:t<k>`, matching WS_SUBSCRIBE_HOOK_TOPICS=room:*: first joins,
//      every one a backend call (the cache holds (tenant, user, topic));
//  (e) the same sockets leave them (not timed) and join them again: the
//      cached decisions (cacheMs 600 s), no backend call;
//  (f) `bench.t<k>`, not hooked: the join without any hook;
//  (c) the (b) storm again on a fresh hook gateway (the same history as
//      (b)), new users, the backend holding every answer `delayMs` (5 ms):
//      upgrades overlap while they wait, so the rate is not 1 / delay.
// Each timed part waits for a quiet machine first; 300 warm-up upgrades
// (and, on the hook gateway, warm-up joins of both kinds) precede the first.
// Gateway CPU: utime+stime of every gateway thread (/proc); backend CPU
// likewise, apart; backend calls from the backend's own counters; the
// gateway's sluice_hook_{connect,subscribe}_calls_total by outcome as a check.

import { availableParallelism } from 'node:os';
import { metricByLabel } from '@sluice/gateway/testing';
import type { ConnectResult, RefreshResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { mergeEncoded, summarize } from '../lib/hist.ts';
import { BACKEND_TOPICS, HookBackendProc, type BackendStats } from '../lib/hook-backend.ts';
import { authSpec, jwtEnv, type AuthSpec } from '../lib/jwt.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { ServerProc, type TargetSpec } from '../lib/server.ts';
import { SOURCES } from './connect.ts';
import { failedSample, interleave, measuredFields, otherUtil, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface HooksConfig {
  sockets: number;
  /** Topics each socket joins (room:t0.. and bench.t0..). */
  topics: number;
  procs: number;
  /** Handshakes, then joins awaiting their reply, in flight per generator process. */
  concurrency: number;
  /** Variant (c): the backend's delay per answer, ms (0: no variant c). */
  delayMs: number;
}

export const S15_DEFAULT: HooksConfig = { sockets: 2000, topics: 5, procs: 2, concurrency: 250, delayMs: 5 };
export const S15_QUICK: HooksConfig = { sockets: 500, topics: 3, procs: 2, concurrency: 100, delayMs: 5 };

const WARMUP_SOCKETS = 300;
const WARMUP_ID_BASE = 1_000_000;
const DELAYED_ID_BASE = 2_000_000;
const DELAYED_WARMUP_ID_BASE = 3_000_000; // warm-up ids: WARMUP_SOCKETS per generator from these

export function variantsOf(cfg: HooksConfig): { jwt: string; hook: string; slow: string; cold: string; warm: string; plain: string } {
  return {
    jwt: `(a) ${cfg.sockets} upgrades, jwt`,
    hook: `(b) ${cfg.sockets} upgrades, connect hook`,
    slow: `(c) ${cfg.sockets} upgrades, connect hook +${cfg.delayMs} ms`,
    cold: `(d) ${cfg.sockets} x ${cfg.topics} joins, subscribe hook, cache cold`,
    warm: `(e) ${cfg.sockets} x ${cfg.topics} rejoins, subscribe hook, cache warm`,
    plain: `(f) ${cfg.sockets} x ${cfg.topics} joins, no hook`,
  };
}

function hookEnv(be: HookBackendProc): Record<string, string> {
  return {
    WS_AUTH: 'hook', WS_CONNECT_HOOK_URL: be.url('/connect'), WS_SUBSCRIBE_HOOK_URL: be.url('/subscribe'), WS_SUBSCRIBE_HOOK_TOPICS: 'room:*',
  };
}

export async function runHooks(opts: RunOptions, cfg: HooksConfig): Promise<Sample[]> {
  const pool = await LoadPool.start(cfg.procs, 30 * 60_000);
  const be = await HookBackendProc.start();
  const v = variantsOf(cfg);
  const auth = authSpec({ topics: BACKEND_TOPICS, publish: BACKEND_TOPICS });
  try {
    const names = [v.jwt, v.hook, ...(cfg.delayMs > 0 ? [v.slow] : []), v.cold, v.warm, v.plain];
    const keys = names.map((variant) => ({ scenario: 'S15' as const, variant }));
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      const out: Sample[] = [];
      try {
        out.push(await storm(pool, srv, spec, repeat, cfg, v.jwt, { kind: 'jwt', auth }, 0, WARMUP_ID_BASE, be));
      } finally {
        await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
      }
      await srv.stop();
      let hooked: ServerProc | undefined;
      try {
        await be.setDelay(0);
        hooked = await ServerProc.start(spec, 60_000, hookEnv(be));
        const up = await storm(pool, hooked, spec, repeat, cfg, v.hook, { kind: 'hook' }, 0, WARMUP_ID_BASE, be);
        out.push(up);
        if (!up.ok) {
          for (const n of [v.cold, v.warm, v.plain]) out.push(failedSample('S15', n, spec.name, repeat, `upgrades failed: ${up.error ?? ''}`));
        } else {
          const rooms = Array.from({ length: cfg.topics }, (_, k) => `room:t${k}`);
          const plain = Array.from({ length: cfg.topics }, (_, k) => `bench.t${k}`);
          // Warm-up sockets joined one of each kind in storm(); now the measured ones.
          out.push(await joins(pool, hooked, spec, repeat, cfg, v.cold, 'join', rooms, be, up.count * cfg.topics));
          await pool.all(() => ({ op: 'topics', action: 'leave', topics: rooms, concurrency: cfg.concurrency, timeoutMs: 60_000 }), 90_000);
          out.push(await joins(pool, hooked, spec, repeat, cfg, v.warm, 'join', rooms, be, 0));
          out.push(await joins(pool, hooked, spec, repeat, cfg, v.plain, 'join', plain, be, 0));
          for (const s of out) {
            if (s.variant === v.jwt || !s.ok) continue;
            const base = s.variant === v.hook ? out.find((x) => x.variant === v.jwt) : out.find((x) => x.variant === v.plain);
            if (base?.ok === true && s !== base) s.extra['vsBase'] = ratio(s.extra['cpuPerOpUs'], base.extra['cpuPerOpUs']);
          }
        }
        await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
        if (cfg.delayMs > 0) {
          // On a fresh gateway of its own, like (b): a gateway that has served the joins is warmer, and its upgrades read cheaper.
          await hooked.stop();
          hooked = undefined;
          await be.setDelay(cfg.delayMs);
          hooked = await ServerProc.start(spec, 60_000, hookEnv(be));
          const slow = await storm(pool, hooked, spec, repeat, cfg, v.slow, { kind: 'hook' }, DELAYED_ID_BASE, DELAYED_WARMUP_ID_BASE, be);
          const b = out.find((x) => x.variant === v.hook);
          if (slow.ok && b?.ok === true) slow.extra['vsBase'] = ratio(slow.extra['cpuPerOpUs'], b.extra['cpuPerOpUs']);
          out.push(slow);
        }
      } catch (err) {
        const have = new Set(out.map((s) => s.variant));
        for (const n of names) if (!have.has(n)) out.push(failedSample('S15', n, spec.name, repeat, (err as Error).message));
      } finally {
        await be.setDelay(0).catch(() => undefined);
        await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
        await hooked?.stop();
      }
      // (a) to (f), whatever the order they ran in.
      return out.sort((x, y) => x.variant.localeCompare(y.variant));
    }, jwtEnv(auth));
  } finally {
    be.stop();
    await pool.close();
  }
}

function ratio(a: unknown, b: unknown): number | null {
  return typeof a === 'number' && typeof b === 'number' && b > 0 ? Math.round((a / b) * 1000) / 1000 : null;
}

type Auth = { kind: 'jwt'; auth: AuthSpec } | { kind: 'hook' };

/** Signs (jwt) or names (hook: `u<id>`) the tokens of sockets [idBase, idBase + count) on generator `proc`. */
async function prepare(pool: LoadPool, auth: Auth, proc: number, idBase: number, count: number): Promise<void> {
  await pool.procs[proc]!.call(auth.kind === 'jwt'
    ? { op: 'sign', purpose: 'upgrade', auth: auth.auth, idBase, count }
    : { op: 'sign', purpose: 'ids', prefix: 'u', idBase, count }, 30_000);
}

interface HookCounts { connect: Record<string, number>; subscribe: Record<string, number> }

/** sluice_hook_{connect,subscribe}_calls_total by outcome; undefined when /metrics did not answer. */
async function hookCounts(srv: ServerProc): Promise<HookCounts | undefined> {
  try {
    const text = await srv.gw.metrics(10_000);
    return { connect: metricByLabel(text, 'sluice_hook_connect_calls_total', 'outcome'), subscribe: metricByLabel(text, 'sluice_hook_subscribe_calls_total', 'outcome') };
  } catch {
    return undefined;
  }
}

/** "allowed 2000" of the outcomes that moved between two readings. */
function moved(a: Record<string, number> | undefined, b: Record<string, number> | undefined): string {
  if (a === undefined || b === undefined) return 'n/a';
  const parts = Object.keys(b).map((k) => [k, (b[k] ?? 0) - (a[k] ?? 0)] as const).filter(([, n]) => n !== 0).map(([k, n]) => `${k} ${n}`);
  return parts.length === 0 ? '0' : parts.join(', ');
}

interface Around {
  t0: number; busy0: number; cpu0: number; gen0: number[]; be0: number; calls0: BackendStats; hooks0: HookCounts | undefined;
}

async function before(pool: LoadPool, srv: ServerProc, be: HookBackendProc): Promise<Around & { quiet: { waitedMs: number; busyCores: number } }> {
  const hooks0 = await hookCounts(srv);
  const calls0 = await be.stats();
  const quiet = await waitQuiet();
  return { quiet, t0: performance.now(), busy0: machineBusySeconds(), cpu0: srv.cpuSeconds(), gen0: pool.cpuSeconds(), be0: be.cpuSeconds(), calls0, hooks0 };
}

async function after(pool: LoadPool, srv: ServerProc, be: HookBackendProc, a: Around): Promise<{
  wallS: number; serverCpuS: number; clientCpuS: number[]; machineBusyS: number; backendCpuS: number; connectCalls: number; subscribeCalls: number;
  backendConnections: number; hookConnect: string; hookSubscribe: string;
}> {
  const busy1 = machineBusySeconds();
  const cpu1 = srv.cpuSeconds();
  const gen1 = pool.cpuSeconds();
  const be1 = be.cpuSeconds();
  const wallS = (performance.now() - a.t0) / 1000;
  const calls1 = await be.stats();
  const hooks1 = await hookCounts(srv);
  return {
    wallS, serverCpuS: cpu1 - a.cpu0, clientCpuS: gen1.map((g, i) => g - (a.gen0[i] ?? 0)), machineBusyS: busy1 - a.busy0, backendCpuS: be1 - a.be0,
    connectCalls: calls1.connect - a.calls0.connect, subscribeCalls: calls1.subscribe - a.calls0.subscribe,
    backendConnections: calls1.connections - a.calls0.connections,
    hookConnect: moved(a.hooks0?.connect, hooks1?.connect), hookSubscribe: moved(a.hooks0?.subscribe, hooks1?.subscribe),
  };
}

/** Warm-up upgrades (and on the hook gateway one join of each kind each), then the measured storm; the sockets stay open. */
async function storm(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: HooksConfig, variant: string, auth: Auth,
  idBase: number, warmBase: number, be: HookBackendProc): Promise<Sample> {
  const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
  // On every generator at the measured concurrency: the gateway's keep-alive connections to the backend are as many as the storm needs.
  await Promise.all(pool.procs.map((p) => prepare(pool, auth, p.index, warmBase + p.index * WARMUP_SOCKETS, WARMUP_SOCKETS)));
  const warm = await pool.all<ConnectResult>((p) => ({
    op: 'connect', target, count: WARMUP_SOCKETS, idBase: warmBase + p.index * WARMUP_SOCKETS, sources: SOURCES, concurrency: cfg.concurrency,
    timeoutMs: 20_000, withTokens: true,
  }), 30_000);
  const warmReady = warm.reduce((x, r) => x + r.ready, 0);
  if (warmReady < WARMUP_SOCKETS * pool.size) throw new Error(`warm-up: ${warmReady}/${WARMUP_SOCKETS * pool.size} sockets connected: ${JSON.stringify(warm.map((r) => r.reasons))}`);
  if (auth.kind === 'hook') {
    const w = await pool.all<RefreshResult>(() => ({ op: 'topics', action: 'join', topics: ['room:warm', 'bench.warm'], concurrency: cfg.concurrency, timeoutMs: 20_000 }), 30_000);
    const ok = w.reduce((x, r) => x + r.ok, 0);
    if (ok < WARMUP_SOCKETS * pool.size * 2) throw new Error(`warm-up joins: ${ok}/${WARMUP_SOCKETS * pool.size * 2}: ${w.flatMap((r) => r.errorSamples).join(' | ')}`);
  }
  await pool.all(() => ({ op: 'reset' }), 30_000);
  const counts = split(cfg.sockets, pool.size);
  const bases = counts.map((_, i) => idBase + counts.slice(0, i).reduce((a, b) => a + b, 0));
  await Promise.all(pool.procs.map((p) => prepare(pool, auth, p.index, bases[p.index]!, counts[p.index]!)));
  await sleep(1000);
  const a = await before(pool, srv, be);
  const results = await pool.all<ConnectResult>((p) => ({
    op: 'connect', target, count: counts[p.index]!, idBase: bases[p.index]!, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000, withTokens: true,
  }), 90_000);
  const m = await after(pool, srv, be, a);
  const ready = results.reduce((x, r) => x + r.ready, 0);
  const failed = results.reduce((x, r) => x + r.failed, 0);
  const reasons: Record<string, number> = {};
  for (const r of results) for (const [k, n] of Object.entries(r.reasons)) reasons[k] = (reasons[k] ?? 0) + n;
  const stormS = Math.max(...results.map((r) => r.elapsedMs)) / 1000;
  const problems = failed > 0 ? [`${failed} connects failed: ${JSON.stringify(reasons)}`] : [];
  return {
    scenario: 'S15', variant, target: spec.name, repeat,
    ...measuredFields({
      count: ready, wallS: m.wallS, serverCpuS: m.serverCpuS, clientCpuS: m.clientCpuS, machineBusyS: m.machineBusyS, serverThreads: spec.threads, perSec: ready / stormS,
    }, problems),
    otherUtil: otherBesides(m),
    latency: summarize(mergeEncoded(results.map((r) => r.hist))),
    extra: {
      sockets: cfg.sockets, procs: pool.size, concurrencyPerProc: cfg.concurrency, cores: availableParallelism(),
      auth: auth.kind === 'jwt' ? 'jwt HS256' : `hook${cfg.delayMs > 0 && variant.startsWith('(c)') ? ` +${cfg.delayMs} ms` : ''}`,
      cpuPerOpUs: ready > 0 ? (m.serverCpuS / ready) * 1e6 : NaN, backendCpuS: m.backendCpuS, backendCpuPerOpUs: ready > 0 ? (m.backendCpuS / ready) * 1e6 : NaN,
      backendCalls: m.connectCalls + m.subscribeCalls, backendConnections: m.backendConnections, backendConnectCalls: m.connectCalls, backendSubscribeCalls: m.subscribeCalls,
      gatewayHookConnect: m.hookConnect, gatewayHookSubscribe: m.hookSubscribe,
      stormS, quietWaitMs: a.quiet.waitedMs, quietBusyCores: a.quiet.busyCores,
    },
  };
}

/** The rest of the machine's CPU in cores, the backend's left out (it has its own column). */
function otherBesides(m: { wallS: number; serverCpuS: number; clientCpuS: number[]; machineBusyS: number; backendCpuS: number }): number {
  return otherUtil(m.machineBusyS, m.serverCpuS + m.backendCpuS, m.clientCpuS, m.wallS);
}

/** Every open socket joins (or leaves) `topics`; `expectCalls`: the backend calls the variant should make. */
async function joins(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: HooksConfig, variant: string, action: 'join' | 'leave',
  topics: string[], be: HookBackendProc, expectCalls: number): Promise<Sample> {
  const a = await before(pool, srv, be);
  const got = await pool.all<RefreshResult>(() => ({ op: 'topics', action, topics, concurrency: cfg.concurrency, timeoutMs: 60_000 }), 90_000);
  const m = await after(pool, srv, be, a);
  const ok = got.reduce((x, r) => x + r.ok, 0);
  const errors = got.reduce((x, r) => x + r.errors, 0);
  const unanswered = got.reduce((x, r) => x + r.unanswered, 0);
  const expected = cfg.sockets * topics.length;
  const problems: string[] = [];
  if (errors > 0) problems.push(`${errors} ${action}s refused: ${[...new Set(got.flatMap((r) => r.errorSamples))].slice(0, 3).join(' | ')}`);
  if (unanswered > 0) problems.push(`${unanswered} ${action}s unanswered`);
  if (ok < expected) problems.push(`${ok}/${expected} ${action}s accepted`);
  const slack = Math.max(5, Math.ceil(expected * 0.001));
  if (Math.abs(m.subscribeCalls - expectCalls) > slack) problems.push(`backend saw ${m.subscribeCalls} subscribe calls, expected ${expectCalls}`);
  const joinS = Math.max(...got.map((r) => r.elapsedMs)) / 1000;
  return {
    scenario: 'S15', variant, target: spec.name, repeat,
    ...measuredFields({
      count: ok, wallS: m.wallS, serverCpuS: m.serverCpuS, clientCpuS: m.clientCpuS, machineBusyS: m.machineBusyS, serverThreads: spec.threads, perSec: ok / joinS,
    }, problems),
    otherUtil: otherBesides(m),
    latency: summarize(mergeEncoded(got.map((r) => r.hist))),
    extra: {
      sockets: cfg.sockets, topics: topics.length, procs: pool.size, concurrencyPerProc: cfg.concurrency,
      cpuPerOpUs: ok > 0 ? (m.serverCpuS / ok) * 1e6 : NaN, backendCpuS: m.backendCpuS, backendCpuPerOpUs: ok > 0 ? (m.backendCpuS / ok) * 1e6 : NaN,
      backendCalls: m.connectCalls + m.subscribeCalls, backendConnections: m.backendConnections, backendConnectCalls: m.connectCalls, backendSubscribeCalls: m.subscribeCalls,
      gatewayHookConnect: m.hookConnect, gatewayHookSubscribe: m.hookSubscribe,
      joinS, quietWaitMs: a.quiet.waitedMs, quietBusyCores: a.quiet.busyCores,
    },
  };
}
