// S14 presence at scale (issue 18 point 7, which calls it "S11": that id was
// taken by the refresh benchmark). Two gateways in cluster mode on one private
// redis-server, WS_AUTH=jwt, WS_PRESENCE_TOPICS=room:*; `sockets` sockets of
// distinct users (socket i is user u<i>) from `procs` generator processes,
// process p on node p mod 2. In one run, on the same sockets:
//
// 1. plain join: every socket joins `plain:1` (no presence) at `joinRate` a
//    second: what a join costs without presence (CPU, RSS), the baseline;
// 2. presence join: every socket joins `room:1` at `joinRate` a second; the
//    first socket of each process to join is its observer (it keeps the full
//    set of users from the frames);
// 3. churn: `churnShare` of the sockets (never an observer) leave and rejoin
//    in a loop, one phase per entry of `churn` (leaves a second, how long a
//    socket stays out), for `seconds` each;
// 4. who is here: new sockets on node A, on node B and on a third node C
//    started for it (it has no replica and reads the others from Redis) join
//    and time their presence_state; each then asks `presence` once; and
//    `GET /v1/presence` on the admin port of A and B;
// 5. SIGKILL of node B: how long until node A says its users are gone (the
//    admin count, polled), until A's observers and every socket on A show
//    them gone, and until A's `sluice_cluster_nodes` drops.
//
// After each of 1-3 (and 4) the run waits until every joined socket's count
// (its presence_state's `count`, then + joins - leaves of every diff) is the
// number of users present, which it reads from the admin API, and reports
// the sockets that never got there. Throughout, once a second: the frames and
// bytes of presence_state and presence_diff the generators received, the
// sockets joined, and both nodes' CPU: the chart (results-s14.svg).
//
// Then the same `sockets` on two Socket.IO servers with @socket.io/redis-adapter
// on one fresh redis-server (the `sio-redis` peer): joined to one room at
// `joinRate`, then `io.in(room).fetchSockets()` timed `fetches` times on
// server A: Socket.IO's "who is in this room".
//
// Server CPU is both gateways' (utime+stime of every thread, /proc) over a
// phase; redis-server's beside it. Redis calls: the gateways'
// `sluice_presence_redis_calls_total` by op, and what redis-server executed
// (INFO commandstats: every command, a script's inner calls included, the
// node leases and the bus too), over the phase's joins and leaves. Memory per
// presence member: the nodes' RSS (lowest over a second) after the presence
// join less after the plain join, over the members, and redis-server's
// used_memory likewise.

import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { metricByLabel, metricSum, PLAIN_ENV, startGateway, type Gateway } from '@sluice/gateway/testing';
import { startRedis, type RedisServer } from '@sluice/redis/testing';
import type { ConnectResult, PacedResult, PresenceCheck, PresenceStats, ProbeResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { monoUs } from '../lib/clock.ts';
import { mergeEncoded, summarize } from '../lib/hist.ts';
import { authSpec, jwtEnv, type AuthSpec } from '../lib/jwt.ts';
import { cpuSeconds, machineBusySeconds, processCpuTable, rssBytes, topCpuBetween, unchargedSeconds } from '../lib/proc.ts';
import { median, percentile } from '../lib/series.ts';
import { ServerProc, TARGETS, type TargetSpec } from '../lib/server.ts';
import { BENCH_ROOT, REPO_ROOT } from '../lib/spawn.ts';
import { SOURCES } from './connect.ts';
import { failedSample, measuredFields, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface ChurnPhase {
  /** Leaves a second over the churning sockets (each leave is followed by a rejoin). */
  rate: number;
  /** How long a socket stays out after its leave was answered. */
  holdMs: number;
  seconds: number;
}

export interface PresenceConfig {
  sockets: number;
  /** Generator processes, alternating between the two nodes (at least 2; at most 15 000 sockets each). */
  procs: number;
  /** Handshakes in flight per generator process. */
  concurrency: number;
  /** Joins a second, all processes together (the plain join, the presence join, Socket.IO's). */
  joinRate: number;
  /** The share of the sockets that churn. */
  churnShare: number;
  churn: ChurnPhase[];
  /** WS_PRESENCE_TTL_MS of the nodes: what bounds the SIGKILL phase. */
  ttlMs: number;
  /** WS_PRESENCE_DIFF_MS. */
  diffMs: number;
  /** WS_PRESENCE_MAX_USERS. */
  maxUsers: number;
  /** New sockets per node in the "who is here" phase. */
  probes: number;
  /** A third node for a probe with no replica on it. */
  thirdNode: boolean;
  /** The Socket.IO comparison, and its fetchSockets() calls. */
  sio: boolean;
  fetches: number;
  /** The longest wait for a quiet machine before a timed part (other engineers' tests share it). */
  quietMaxMs: number;
}

export const S14_DEFAULT: PresenceConfig = {
  sockets: 20_000, procs: 4, concurrency: 250, joinRate: 1000, churnShare: 0.1,
  churn: [{ rate: 100, holdMs: 2000, seconds: 12 }, { rate: 400, holdMs: 2000, seconds: 12 }, { rate: 2000, holdMs: 100, seconds: 12 }],
  ttlMs: 30_000, diffMs: 1000, maxUsers: 1000, probes: 3, thirdNode: true, sio: true, fetches: 5, quietMaxMs: 10_000,
};

/** `--quick`: the same phases at a tenth of the sockets, shorter, with a 4 s TTL; about a minute. */
export const S14_QUICK: PresenceConfig = {
  ...S14_DEFAULT, sockets: 2000, procs: 2, joinRate: 500,
  churn: [{ rate: 20, holdMs: 2000, seconds: 5 }, { rate: 200, holdMs: 100, seconds: 5 }], ttlMs: 4000, probes: 2, fetches: 3, quietMaxMs: 3000,
};

const PER_PROC_MAX = 15_000;
const NODES = 2;
const TOPIC = 'room:1';
const PLAIN_TOPIC = 'plain:1';
const PREFIX = 'u';
const PEER_MAIN = join(BENCH_ROOT, 'src/peers/main.ts');
/** How long a phase may take to settle (every socket showing the right count) after its last frame went out. */
const SETTLE_MS = 15_000;

export type PhaseKind = 'plain' | 'join' | 'churn' | 'probe' | 'kill' | 'sio-join' | 'sio-fetch';

export function variantOf(cfg: PresenceConfig, kind: PhaseKind, churn?: ChurnPhase): string {
  const n = cfg.sockets;
  switch (kind) {
    case 'plain': return `plain join (no presence), ${n} sockets at ${cfg.joinRate}/s`;
    case 'join': return `presence join, ${n} users at ${cfg.joinRate}/s`;
    case 'churn': return `churn ${Math.round(cfg.churnShare * 100)}% (${Math.round(n * cfg.churnShare)}): ${churn!.rate} leaves/s, back after ${churn!.holdMs} ms`;
    case 'probe': return `who is here, ${n} members`;
    case 'kill': return `SIGKILL node B (${n / NODES} of ${n} members), TTL ${cfg.ttlMs} ms`;
    case 'sio-join': return `Socket.IO room join, ${n} sockets at ${cfg.joinRate}/s, 2 nodes (redis-adapter)`;
    case 'sio-fetch': return `Socket.IO fetchSockets() of ${n} over 2 nodes`;
  }
}

/** One point of the chart: what the generators received in one second and the nodes' CPU. */
export interface PresencePoint {
  /** Seconds since the presence join began (the end of the second). */
  t: number;
  phase: string;
  joined: number;
  diffFrames: number;
  diffBytes: number;
  stateFrames: number;
  stateBytes: number;
  /** Joins and leaves sent in that second. */
  ops: number;
  /** Both nodes' CPU over it, in cores (node B: 0 once killed). */
  cpu: number;
}

/** Mean and max over a phase's seconds of diff frames and bytes per joined socket; seconds with under half the sockets joined left out of the max. */
export function perSocketRates(points: readonly PresencePoint[]): { framesMean: number; framesMax: number; bytesMean: number; bytesMax: number; seconds: number } {
  let frames = 0;
  let bytes = 0;
  let socketSeconds = 0;
  let framesMax = NaN;
  let bytesMax = NaN;
  const peak = Math.max(0, ...points.map((p) => p.joined));
  for (const p of points) {
    if (p.joined <= 0) continue;
    frames += p.diffFrames;
    bytes += p.diffBytes;
    socketSeconds += p.joined;
    if (p.joined * 2 < peak) continue;
    const f = p.diffFrames / p.joined;
    const b = p.diffBytes / p.joined;
    if (!(f <= framesMax)) framesMax = f;
    if (!(b <= bytesMax)) bytesMax = b;
  }
  return {
    framesMean: socketSeconds > 0 ? frames / socketSeconds : NaN, framesMax, bytesMean: socketSeconds > 0 ? bytes / socketSeconds : NaN, bytesMax,
    seconds: points.length,
  };
}

/** `cmdstat_<name>:calls=N,...` lines of INFO commandstats, as name -> calls. */
export function commandCalls(info: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

function deltaOf(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
    const d = (b[k] ?? 0) - (a[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
const r1 = (x: number): number | null => (Number.isFinite(x) ? Math.round(x * 10) / 10 : null);
const r3 = (x: number): number | null => (Number.isFinite(x) ? Math.round(x * 1000) / 1000 : null);

interface NodeMetrics {
  calls: Record<string, number>;
  diffs: number;
  deliveries: number;
  flushes: number;
  members: number;
  redisCommands: number;
  clusterNodes: number;
  /** V8 heap in use, every thread of the node. */
  heapUsed: number;
}

async function nodeMetrics(gw: Gateway): Promise<NodeMetrics> {
  const text = await gw.metrics(10_000);
  return {
    calls: metricByLabel(text, 'sluice_presence_redis_calls_total', 'op'),
    diffs: metricSum(text, 'sluice_presence_diffs_total'),
    deliveries: metricSum(text, 'sluice_presence_diff_deliveries_total'),
    flushes: metricSum(text, 'sluice_presence_flushes_total'),
    members: metricSum(text, 'sluice_presence_members'),
    redisCommands: metricSum(text, 'sluice_redis_commands_total'),
    clusterNodes: metricSum(text, 'sluice_cluster_nodes'),
    heapUsed: metricSum(text, 'sluice_heap_used_bytes'),
  };
}

interface PresenceData { count: number; listed: number; truncated: boolean; ms: number; bytes: number }

async function adminPresence(gw: Gateway): Promise<PresenceData> {
  const t0 = performance.now();
  const res = await gw.adminFetch(`/v1/presence?tenant=default&topic=${encodeURIComponent(TOPIC)}`);
  const text = await res.text();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`GET /v1/presence answered ${res.status}: ${text.slice(0, 200)}`);
  const d = JSON.parse(text) as { users?: Record<string, unknown>; count?: number; truncated?: boolean };
  return { count: d.count ?? NaN, listed: Object.keys(d.users ?? {}).length, truncated: d.truncated === true, ms, bytes: Buffer.byteLength(text) };
}

/** The once-a-second sampler of the generators' presence counters and the nodes' CPU. */
class Sampler {
  readonly points: PresencePoint[] = [];
  phase = '';
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private last: { t: number; stats: PresenceStats[]; cpu: number[] } | undefined;
  private readonly t0 = performance.now();

  constructor(private readonly pool: LoadPool, private readonly nodes: ReadonlyArray<ServerProc | null>) {}

  private cpu(): number[] {
    return this.nodes.map((n) => (n !== null && n.alive ? n.cpuSeconds() : 0));
  }

  async start(): Promise<void> {
    this.last = { t: performance.now(), stats: await this.pool.all<PresenceStats>(() => ({ op: 'presenceStats' })), cpu: this.cpu() };
    this.timer = setInterval(() => { void this.tick(); }, 1000);
  }

  private async tick(): Promise<void> {
    if (this.busy || this.last === undefined) return;
    this.busy = true;
    try {
      const cpu = this.cpu();
      const stats = await this.pool.all<PresenceStats>(() => ({ op: 'presenceStats' }), 10_000);
      const t = performance.now();
      const a = this.last;
      const d = (k: keyof PresenceStats): number => sum(stats.map((x, i) => (x[k] as number) - ((a.stats[i]?.[k] as number | undefined) ?? 0)));
      const wall = (t - a.t) / 1000;
      // Per second: a late tick's counts are scaled to one second.
      const per = (x: number): number => x / wall;
      this.points.push({
        t: Math.round((t - this.t0) / 100) / 10, phase: this.phase, joined: sum(stats.map((x) => x.joined)),
        diffFrames: per(d('diffFrames')), diffBytes: per(d('diffBytes')), stateFrames: per(d('stateFrames')), stateBytes: per(d('stateBytes')),
        ops: per(d('joinsSent') + d('leavesSent')),
        cpu: cpu.reduce((acc, c, i) => acc + Math.max(0, c - (a.cpu[i] ?? 0)), 0) / wall,
      });
      this.last = { t, stats, cpu };
    } catch {
      // A tick that could not read a generator is left out; the next one covers both seconds.
    } finally {
      this.busy = false;
    }
  }

  between(phase: string): PresencePoint[] {
    return this.points.filter((p) => p.phase === phase);
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }
}

interface PhaseTotals {
  /** The kernel's irq and softirq seconds (loopback TCP is largely softirq), and the busiest other processes, over the phase. */
  irqS: number;
  softirqS: number;
  others: Array<{ pid: number; comm: string; cpuS: number }>;
  wallS: number;
  serverCpuS: number;
  nodeCpuS: number[];
  redisCpuS: number;
  clientCpuS: number[];
  machineBusyS: number;
  metrics: NodeMetrics[];
  commands: Record<string, number>;
  stats: PresenceStats[];
}

interface Edge {
  t: number;
  cpu: number[];
  redis: number;
  gen: number[];
  busy: number;
  metrics: NodeMetrics[];
  commands: Record<string, number>;
  stats: PresenceStats[];
  uncharged: { irq: number; softirq: number; steal: number };
  procs: Map<number, { comm: string; cpuS: number }>;
}

async function edge(pool: LoadPool, nodes: readonly ServerProc[], redis: RedisServer, redisPid: number, withStats: boolean): Promise<Edge> {
  const alive = nodes.filter((n) => n.alive);
  const [metrics, commands, stats] = await Promise.all([
    Promise.all(alive.map((n) => nodeMetrics(n.gw))),
    redis.cli('info', 'commandstats').then(commandCalls),
    withStats ? pool.all<PresenceStats>(() => ({ op: 'presenceStats' })) : Promise.resolve([]),
  ]);
  return {
    t: performance.now(), cpu: nodes.map((n) => (n.alive ? n.cpuSeconds() : NaN)), redis: cpuSeconds(redisPid), gen: pool.cpuSeconds(), busy: machineBusySeconds(),
    metrics, commands, stats, uncharged: unchargedSeconds(), procs: processCpuTable(),
  };
}

function totals(a: Edge, b: Edge, skip: ReadonlySet<number>): PhaseTotals {
  const nodeCpuS = b.cpu.map((c, i) => (Number.isFinite(c) ? c - a.cpu[i]! : NaN));
  const sumCalls = (m: NodeMetrics[]): NodeMetrics => ({
    calls: m.reduce<Record<string, number>>((acc, x) => { for (const [k, v] of Object.entries(x.calls)) acc[k] = (acc[k] ?? 0) + v; return acc; }, {}),
    diffs: sum(m.map((x) => x.diffs)), deliveries: sum(m.map((x) => x.deliveries)), flushes: sum(m.map((x) => x.flushes)),
    members: sum(m.map((x) => x.members)), redisCommands: sum(m.map((x) => x.redisCommands)), clusterNodes: Math.max(0, ...m.map((x) => x.clusterNodes)),
    heapUsed: sum(m.map((x) => x.heapUsed)),
  });
  const ma = sumCalls(a.metrics);
  const mb = sumCalls(b.metrics);
  return {
    irqS: b.uncharged.irq - a.uncharged.irq, softirqS: b.uncharged.softirq - a.uncharged.softirq, others: topCpuBetween(a.procs, b.procs, skip),
    wallS: (b.t - a.t) / 1000,
    serverCpuS: sum(nodeCpuS.filter(Number.isFinite)),
    nodeCpuS,
    redisCpuS: b.redis - a.redis,
    clientCpuS: b.gen.map((g, i) => g - (a.gen[i] ?? 0)),
    machineBusyS: b.busy - a.busy,
    metrics: [ma, mb],
    commands: deltaOf(a.commands, b.commands),
    stats: b.stats.map((s, i) => {
      const o = a.stats[i];
      if (o === undefined) return s;
      const d = { ...s };
      for (const k of ['stateFrames', 'stateBytes', 'diffFrames', 'diffBytes', 'diffJoins', 'diffLeaves', 'distinctDiffs', 'joinsSent', 'leavesSent', 'closed'] as const) d[k] = s[k] - o[k];
      return d;
    }),
  };
}

/** Waits until every joined socket shows `expected` (per process), or `ms` passed; the last check and how long it took. */
async function settle(pool: LoadPool, expected: (i: number) => number, ms: number): Promise<{ checks: PresenceCheck[]; settleMs: number; settled: boolean }> {
  const t0 = performance.now();
  for (;;) {
    const checks = await pool.all<PresenceCheck>((p) => ({ op: 'presenceCheck', expected: expected(p.index), take: false }), 20_000);
    const off = sum(checks.map((c) => c.wrong + c.noState));
    const waited = performance.now() - t0;
    if (off === 0 || waited >= ms) {
      const taken = await pool.all<PresenceCheck>((p) => ({ op: 'presenceCheck', expected: expected(p.index), take: true }), 20_000);
      return { checks: taken, settleMs: Math.round(waited), settled: off === 0 };
    }
    await sleep(250);
  }
}

const offCount = (checks: readonly PresenceCheck[]): number => sum(checks.map((c) => c.wrong + c.noState));
/** How far the wrong counts were off, per generator process (`{"-1645": 5000}`: 5000 sockets showed 1645 too few), and the sockets without a state. */
const offSamples = (checks: readonly PresenceCheck[]): string =>
  `off by, per generator: ${JSON.stringify(checks.map((c) => c.offBy))}, ${sum(checks.map((c) => c.noState))} without a state`;

function pacedSum(rs: readonly PacedResult[]): PacedResult {
  const out: PacedResult = { joinsSent: 0, joinsOk: 0, joinErrors: 0, leavesSent: 0, leavesOk: 0, leaveErrors: 0, leavesSkipped: 0, unanswered: 0, errorSamples: [], elapsedMs: 0 };
  for (const r of rs) {
    for (const k of ['joinsSent', 'joinsOk', 'joinErrors', 'leavesSent', 'leavesOk', 'leaveErrors', 'leavesSkipped', 'unanswered'] as const) out[k] += r[k];
    out.errorSamples.push(...r.errorSamples);
    out.elapsedMs = Math.max(out.elapsedMs, r.elapsedMs);
  }
  out.errorSamples = out.errorSamples.slice(0, 5);
  return out;
}

function closeReasons(stats: readonly PresenceStats[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of stats) for (const [k, v] of Object.entries(s.closeReasons)) out[k.slice(0, 80)] = (out[k.slice(0, 80)] ?? 0) + v;
  return out;
}

/** The lowest RSS of each process over `ms` (sampled every 100 ms). */
async function minRss(pids: readonly number[], ms: number): Promise<number[]> {
  const min = pids.map((p) => rssBytes(p));
  for (const end = performance.now() + ms; performance.now() < end;) {
    await sleep(100);
    pids.forEach((p, i) => { min[i] = Math.min(min[i]!, rssBytes(p)); });
  }
  return min;
}

/**
 * What may explain a count that never settled: per node its warnings and errors by message (and error), its
 * `sluice_presence_redis_errors_total`, its `sluice_presence_members`, and the fields of each node's hash in Redis.
 */
async function diagnostics(nodes: readonly ServerProc[], redis: RedisServer): Promise<Record<string, string>> {
  const warnings = nodes.map((n) => {
    const out: Record<string, number> = {};
    for (const l of n.logs) {
      const lv = l['level'];
      // The gateway logs the level's name (pino's label formatter); a number is pino's default.
      if (!(lv === 'warn' || lv === 'error' || lv === 'fatal' || (typeof lv === 'number' && lv >= 40))) continue;
      const k = `${String(l['msg']).slice(0, 100)}${typeof l['err'] === 'object' && l['err'] !== null ? `: ${String((l['err'] as { message?: unknown }).message).slice(0, 80)}` : ''}`;
      out[k] = (out[k] ?? 0) + 1;
    }
    return out;
  });
  const metrics = await Promise.all(nodes.map(async (n) => {
    if (!n.alive) return null;
    const text = await n.gw.metrics(10_000).catch(() => '');
    return {
      errors: metricSum(text, 'sluice_presence_redis_errors_total'), members: metricSum(text, 'sluice_presence_members'),
      dropped: metricByLabel(text, 'sluice_messages_dropped_total', 'reason'), closed: metricByLabel(text, 'sluice_clients_closed_total', 'reason'),
    };
  }));
  const keys = (await redis.cli('--scan', '--pattern', 'sluice:p:*')).split('\n').map((k) => k.trim()).filter((k) => k !== '').sort();
  const fields = await Promise.all(keys.map(async (k) => [k.slice(-12), Number((await redis.cli('hlen', k)).trim())] as const));
  return {
    nodeWarnings: JSON.stringify(warnings), nodePresence: JSON.stringify(metrics),
    redisHashFields: JSON.stringify(Object.fromEntries(fields)),
  };
}

/** The lowest V8 heap in use (every thread of every node, summed per node) over `n` scrapes 250 ms apart: garbage a GC frees meanwhile is not counted. */
async function minHeap(nodes: readonly ServerProc[], n = 5): Promise<number> {
  let min = Infinity;
  for (let k = 0; k < n; k++) {
    const hs = await Promise.all(nodes.map(async (x) => metricSum(await x.gw.metrics(10_000), 'sluice_heap_used_bytes')));
    min = Math.min(min, sum(hs));
    await sleep(250);
  }
  return min;
}

async function redisUsedMemory(redis: RedisServer): Promise<number> {
  return Number(/^used_memory:(\d+)/m.exec(await redis.cli('info', 'memory'))?.[1]);
}

async function redisPidOf(redis: RedisServer): Promise<number> {
  const pid = Number(/^process_id:(\d+)/m.exec(await redis.cli('info', 'server'))?.[1]);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error('redis-server did not tell its process_id');
  return pid;
}

/** The extras every load phase carries: ops, CPU and Redis per op, what the sockets received. */
function loadExtras(t: PhaseTotals, ops: number, idleCores: number, points: readonly PresencePoint[], checks: readonly PresenceCheck[],
  paced: PacedResult): Record<string, number | string | boolean | null> {
  const calls = t.metrics[1]!.calls;
  const callsBefore = t.metrics[0]!.calls;
  const callDelta = deltaOf(callsBefore, calls);
  const gwCalls = sum(Object.values(callDelta));
  const redisCmds = sum(Object.values(t.commands));
  const rates = perSocketRates(points);
  const st = t.stats;
  const stateFrames = sum(st.map((s) => s.stateFrames));
  const stateBytes = sum(st.map((s) => s.stateBytes));
  const diffFrames = sum(st.map((s) => s.diffFrames));
  const diffBytes = sum(st.map((s) => s.diffBytes));
  const stateLat = summarize(mergeEncoded(checks.map((c) => c.stateHist).filter((h) => h !== '')));
  const joinLat = summarize(mergeEncoded(checks.map((c) => c.joinHist).filter((h) => h !== '')));
  const gaps = mergeEncoded(checks.map((c) => c.gapHist).filter((h) => h !== ''));
  return {
    ops, joinsOk: paced.joinsOk, leavesOk: paced.leavesOk, joinErrors: paced.joinErrors, leaveErrors: paced.leaveErrors, leavesSkipped: paced.leavesSkipped,
    unanswered: paced.unanswered, errorSamples: paced.errorSamples.join(' | ').slice(0, 300),
    cpuPerOpUs: r1(ops > 0 ? (t.serverCpuS / ops) * 1e6 : NaN),
    idleCpuPerOpUs: r1(ops > 0 ? ((idleCores * t.wallS) / ops) * 1e6 : NaN),
    nodeCpuS: JSON.stringify(t.nodeCpuS.map((x) => r3(x))),
    redisCpuS: r3(t.redisCpuS),
    redisCpuUsPerOp: r1(ops > 0 ? (t.redisCpuS / ops) * 1e6 : NaN),
    gatewayRedisCallsPerOp: r3(ops > 0 ? gwCalls / ops : NaN), gatewayRedisCalls: JSON.stringify(callDelta),
    redisCommandsPerOp: r3(ops > 0 ? redisCmds / ops : NaN), redisCommands: JSON.stringify(t.commands),
    // Every Redis command of the gateways (the bus, leases and limiter included), for comparison.
    gatewayAllRedisCommands: t.metrics[1]!.redisCommands - t.metrics[0]!.redisCommands,
    serverDiffs: t.metrics[1]!.diffs - t.metrics[0]!.diffs, serverDiffDeliveries: t.metrics[1]!.deliveries - t.metrics[0]!.deliveries,
    serverFlushes: t.metrics[1]!.flushes - t.metrics[0]!.flushes,
    diffFrames, diffBytes, stateFrames, stateBytes,
    distinctDiffs: sum(st.map((s) => s.distinctDiffs)),
    diffJoins: sum(st.map((s) => s.diffJoins)), diffLeaves: sum(st.map((s) => s.diffLeaves)),
    framesPerSocketS: r3(rates.framesMean), framesPerSocketSMax: r3(rates.framesMax),
    bytesPerSocketS: r1(rates.bytesMean), bytesPerSocketSMax: r1(rates.bytesMax),
    diffBytesAvg: r1(diffFrames > 0 ? diffBytes / diffFrames : NaN),
    stateBytesAvg: r1(stateFrames > 0 ? stateBytes / stateFrames : NaN),
    stateP50Ms: r1(stateLat.p50Us / 1000), stateP99Ms: r1(stateLat.p99Us / 1000), stateMaxMs: r1(stateLat.maxUs / 1000), states: stateLat.count,
    joinReplyP50Ms: r1(joinLat.p50Us / 1000), joinReplyP99Ms: r1(joinLat.p99Us / 1000),
    // The gap between two diffs on one socket: WS_PRESENCE_DIFF_MS apart at the server; the network and the generators' reading move it.
    gapMinMs: r1(gaps.totalCount > 0 ? gaps.minNonZeroValue / 1000 : NaN), gapP1Ms: r1(gaps.totalCount > 0 ? gaps.getValueAtPercentile(1) / 1000 : NaN),
    gapP50Ms: r1(gaps.totalCount > 0 ? gaps.getValueAtPercentile(50) / 1000 : NaN), gaps: gaps.totalCount,
    wrongCounts: sum(checks.map((c) => c.wrong)), noState: sum(checks.map((c) => c.noState)), checked: sum(checks.map((c) => c.checked)),
    wrongSamples: JSON.stringify(checks.flatMap((c) => c.wrongSamples).slice(0, 5)), offBy: JSON.stringify(checks.map((c) => c.offBy)),
    closed: sum(st.map((s) => s.closed)), closeReasons: JSON.stringify(closeReasons(st)),
    irqS: r3(t.irqS), softirqS: r3(t.softirqS), softirqCores: r3(t.softirqS / t.wallS), otherProcesses: JSON.stringify(t.others),
    heapDeltaBytes: t.metrics[1]!.heapUsed - t.metrics[0]!.heapUsed,
  };
}

export async function runPresence(opts: RunOptions, cfg: PresenceConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, NODES, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  const out: Sample[] = [];
  try {
    for (let r = 0; r < opts.repeats; r++) {
      for (const name of opts.targets) {
        const spec = TARGETS[name];
        try {
          const got = await sluiceOnce(pool, spec, r, cfg, opts.log);
          for (const s of got) opts.log(`  S14 ${s.variant} r${r}: ${s.ok ? '' : `FAILED ${s.error ?? ''}; `}${summaryLine(s)}`);
          out.push(...got);
        } catch (err) {
          opts.log(`  S14 ${name} r${r}: failed: ${(err as Error).message}`);
          out.push(failedSample('S14', variantOf(cfg, 'join'), name, r, (err as Error).message));
        } finally {
          await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
        }
      }
      if (cfg.sio) {
        try {
          const got = await sioOnce(pool, r, cfg, opts.log);
          for (const s of got) opts.log(`  S14 ${s.variant} r${r}: ${s.ok ? '' : `FAILED ${s.error ?? ''}; `}${summaryLine(s)}`);
          out.push(...got);
        } catch (err) {
          opts.log(`  S14 Socket.IO r${r}: failed: ${(err as Error).message}`);
          out.push(failedSample('S14', variantOf(cfg, 'sio-fetch'), 'sio', r, (err as Error).message));
        } finally {
          await pool.all(() => ({ op: 'reset' }), 60_000).catch(() => undefined);
        }
      }
    }
    return out;
  } finally {
    await pool.close();
  }
}

function summaryLine(s: Sample): string {
  const e = s.extra;
  const f = (k: string): string => String(e[k] ?? '-');
  if (s.variant.startsWith('who is here')) return `state on A ${f('stateMsA')} ms (${f('stateBytesA')} B, count ${f('countA')}), on B ${f('stateMsB')} ms, on C ${f('stateMsC')} ms; admin ${f('adminMsA')} ms`;
  if (s.variant.startsWith('SIGKILL')) return `gone at A's admin ${f('goneAdminMs')} ms, at every socket of A ${f('goneAllSocketsMs')} ms; cluster_nodes ${f('nodesDropMs')} ms`;
  if (s.variant.includes('fetchSockets')) return `fetchSockets p50 ${f('fetchP50Ms')} ms, max ${f('fetchMaxMs')} ms, count ${f('fetchCount')}, ${f('fetchBytes')} B`;
  return `${f('ops')} ops, ${f('cpuPerOpUs')} us CPU/op, Redis calls/op ${f('gatewayRedisCallsPerOp')} (redis-server ${f('redisCommandsPerOp')}), ` +
    `diffs/socket/s ${f('framesPerSocketS')} (max ${f('framesPerSocketSMax')}), B/socket/s ${f('bytesPerSocketS')} (max ${f('bytesPerSocketSMax')}), ` +
    `state p50 ${f('stateP50Ms')} ms, wrong ${f('wrongCounts')}/${f('checked')}, settle ${f('settleMs')} ms`;
}

async function connectAll(pool: LoadPool, ports: readonly number[], proto: 'sluice' | 'sio', cfg: PresenceConfig, auth: AuthSpec | null): Promise<{ ready: number; reasons: string }> {
  const counts = split(cfg.sockets, pool.size);
  const bases = counts.map((_, i) => sum(counts.slice(0, i)));
  if (auth !== null) await pool.all((p) => ({ op: 'sign', purpose: 'upgrade', auth, idBase: bases[p.index]!, count: counts[p.index]! }), 60_000);
  const conn = await pool.all<ConnectResult>((p) => ({
    op: 'connect', target: { host: '127.0.0.1', port: ports[p.index % NODES]!, proto },
    count: counts[p.index]!, idBase: bases[p.index]!, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 120_000, withTokens: auth !== null,
  }), 180_000);
  return { ready: sum(conn.map((c) => c.ready)), reasons: JSON.stringify(conn.map((c) => c.reasons)) };
}

async function sluiceOnce(pool: LoadPool, spec: TargetSpec, repeat: number, cfg: PresenceConfig, log: (l: string) => void): Promise<Sample[]> {
  const redis = await startRedis();
  const nodes: ServerProc[] = [];
  let sampler: Sampler | undefined;
  try {
    const redisPid = await redisPidOf(redis);
    const auth = authSpec({ topics: ['room:*', 'plain:*'], publish: [], jtiPrefix: 's14', userPrefix: PREFIX });
    const env = {
      ...jwtEnv(auth), REDIS_URL: redis.url, WS_PRESENCE_TOPICS: 'room:*', WS_PRESENCE_TTL_MS: String(cfg.ttlMs),
      WS_PRESENCE_DIFF_MS: String(cfg.diffMs), WS_PRESENCE_MAX_USERS: String(cfg.maxUsers),
    };
    const started = await Promise.allSettled(Array.from({ length: NODES }, () => ServerProc.start(spec, 60_000, env)));
    for (const s of started) if (s.status === 'fulfilled') nodes.push(s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason as Error;
    const [a, b] = [nodes[0]!, nodes[1]!];
    const onNode = (proc: number): number => proc % NODES;
    const countsPerProc = split(cfg.sockets, pool.size);
    const onA = sum(countsPerProc.filter((_, i) => onNode(i) === 0));

    await pool.all(() => ({ op: 'presenceWatch', userPrefix: PREFIX }));
    const conn = await connectAll(pool, nodes.map((n) => n.port), 'sluice', cfg, auth);
    if (conn.ready < cfg.sockets) throw new Error(`only ${conn.ready}/${cfg.sockets} sockets connected: ${conn.reasons}`);
    log(`  S14: ${conn.ready} sockets open (${onA} on node A), each its own user`);
    const samples: Sample[] = [];
    const pids = nodes.map((n) => n.pid);
    // Ours: the nodes, the generators, redis-server and this process; the rest is other engineers' load (or the kernel's).
    const ours = new Set([...pids, ...pool.procs.map((p) => p.pid), redisPid, process.pid]);

    const idleRate = async (): Promise<number> => {
      const c0 = sum(nodes.filter((n) => n.alive).map((n) => n.cpuSeconds()));
      const t0 = performance.now();
      await sleep(1000);
      return (sum(nodes.filter((n) => n.alive).map((n) => n.cpuSeconds())) - c0) / ((performance.now() - t0) / 1000);
    };

    // 1. Plain join: the baseline.
    const quiet0 = await waitQuiet(cfg.quietMaxMs);
    const rss0 = await minRss(pids, 1000);
    const heap0 = await minHeap(nodes);
    const redisMem0 = await redisUsedMemory(redis);
    const idle0 = await idleRate();
    const p0 = await edge(pool, nodes, redis, redisPid, true);
    const plain = pacedSum(await pool.all<PacedResult>(() => ({
      op: 'paceJoin', topic: PLAIN_TOPIC, perSecond: cfg.joinRate / pool.size, timeoutMs: (cfg.sockets / cfg.joinRate) * 1000 + 60_000, presence: false,
    }), (cfg.sockets / cfg.joinRate) * 1000 + 90_000));
    // The end edge a diff interval later: what the phase set off (its last flushes, their Redis writes) is in it, and the nodes answer /metrics on time.
    await sleep(cfg.diffMs * 2);
    const p1 = await edge(pool, nodes, redis, redisPid, true);
    const tPlain = totals(p0, p1, ours);
    await pool.all<PresenceCheck>(() => ({ op: 'presenceCheck', expected: 0, take: true }));
    const rss1 = await minRss(pids, 1000);
    const heap1 = await minHeap(nodes);
    const redisMem1 = await redisUsedMemory(redis);
    {
      const problems: string[] = [];
      if (plain.joinsOk < cfg.sockets) problems.push(`${plain.joinsOk}/${cfg.sockets} plain joins answered ok (${plain.joinErrors} refused, ${plain.unanswered} unanswered)`);
      const ex = loadExtras(tPlain, plain.joinsOk, idle0, [], [], plain);
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'plain'), target: spec.name, repeat,
        ...measuredFields({ count: plain.joinsOk, wallS: tPlain.wallS, serverCpuS: tPlain.serverCpuS, clientCpuS: tPlain.clientCpuS,
          machineBusyS: tPlain.machineBusyS - tPlain.redisCpuS, serverThreads: spec.threads * NODES, perSec: plain.joinsOk / (plain.elapsedMs / 1000) }, problems),
        extra: {
          ...ex, sockets: cfg.sockets, nodes: NODES, procs: pool.size, cores: availableParallelism(), quietWaitMs: quiet0.waitedMs,
          rssPerSocketBytes: Math.round((sum(rss1) - sum(rss0)) / cfg.sockets), heapPerSocketBytes: Math.round((heap1 - heap0) / cfg.sockets), redisBytesPerSocket: r1((redisMem1 - redisMem0) / cfg.sockets),
        },
      });
    }

    // 2. Presence join, sampled once a second from here on.
    sampler = new Sampler(pool, nodes);
    await sampler.start();
    const quiet1 = await waitQuiet(cfg.quietMaxMs);
    const idle1 = await idleRate();
    sampler.phase = 'join';
    const j0 = await edge(pool, nodes, redis, redisPid, true);
    const joined = pacedSum(await pool.all<PacedResult>(() => ({
      op: 'paceJoin', topic: TOPIC, perSecond: cfg.joinRate / pool.size, timeoutMs: (cfg.sockets / cfg.joinRate) * 1000 + 60_000, presence: true,
    }), (cfg.sockets / cfg.joinRate) * 1000 + 90_000));
    sampler.phase = 'join settle';
    const s1 = await settle(pool, () => cfg.sockets, SETTLE_MS);
    await sleep(cfg.diffMs);
    const j1 = await edge(pool, nodes, redis, redisPid, true);
    const tJoin = totals(j0, j1, ours);
    const admin1 = await adminPresence(a.gw);
    const rss2 = await minRss(pids, 1000);
    const heap2 = await minHeap(nodes);
    const redisMem2 = await redisUsedMemory(redis);
    const keys = (await redis.cli('--scan', '--pattern', 'sluice:p:*')).split('\n').map((k) => k.trim()).filter((k) => k !== '');
    const keyBytes = await Promise.all(keys.map(async (k) => Number((await redis.cli('memory', 'usage', k, 'samples', '0')).trim())));
    const members = admin1.count;
    {
      const problems: string[] = [];
      if (joined.joinsOk < cfg.sockets) problems.push(`${joined.joinsOk}/${cfg.sockets} presence joins answered ok (${joined.joinErrors} refused, ${joined.unanswered} unanswered)`);
      if (members !== cfg.sockets) problems.push(`GET /v1/presence counts ${members} members, not ${cfg.sockets}`);
      if (!s1.settled) problems.push(`${offCount(s1.checks)} sockets did not show ${cfg.sockets} members ${SETTLE_MS} ms after the last join (${offSamples(s1.checks)})`);
      const ex = loadExtras(tJoin, joined.joinsOk, idle1, sampler.between('join'), s1.checks, joined);
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'join'), target: spec.name, repeat,
        ...measuredFields({ count: joined.joinsOk, wallS: tJoin.wallS, serverCpuS: tJoin.serverCpuS, clientCpuS: tJoin.clientCpuS,
          machineBusyS: tJoin.machineBusyS - tJoin.redisCpuS, serverThreads: spec.threads * NODES, perSec: joined.joinsOk / (joined.elapsedMs / 1000) }, problems),
        extra: {
          ...ex, sockets: cfg.sockets, members, settleMs: s1.settleMs, quietWaitMs: quiet1.waitedMs,
          adminCount: members, adminListed: admin1.listed, adminTruncated: admin1.truncated,
          observerSizes: JSON.stringify(s1.checks.map((c) => c.observerSize)), observersExact: s1.checks.every((c) => c.observerExact),
          // Memory per presence member: the nodes' RSS after the presence join less after the plain join (both nodes), over the members.
          rssPerMemberBytes: Math.round((sum(rss2) - sum(rss1)) / members), heapPerMemberBytes: Math.round((heap2 - heap1) / members), rssNodesMiB: JSON.stringify(rss2.map((x) => Math.round(x / 2 ** 20))),
          redisBytesPerMember: r1((redisMem2 - redisMem1) / members), redisHashBytes: JSON.stringify(keyBytes), redisHashes: keys.length,
          diffMs: cfg.diffMs, maxUsers: cfg.maxUsers, ...(await diagnostics(nodes, redis)),
        },
      });
    }

    // 3. Churn.
    const churners = Math.round(cfg.sockets * cfg.churnShare);
    const churnSplit = split(churners, pool.size);
    for (const [i, ch] of cfg.churn.entries()) {
      const label = `churn ${i + 1}`;
      const quiet = await waitQuiet(cfg.quietMaxMs);
      const idle = await idleRate();
      sampler.phase = label;
      const c0 = await edge(pool, nodes, redis, redisPid, true);
      const res = pacedSum(await pool.all<PacedResult>((p) => ({
        op: 'churn', topic: TOPIC, count: churnSplit[p.index]!, perSecond: ch.rate / pool.size, holdMs: ch.holdMs, durationMs: ch.seconds * 1000,
        timeoutMs: ch.seconds * 1000 + 60_000,
      }), ch.seconds * 1000 + 90_000));
      sampler.phase = `${label} settle`;
      const st = await settle(pool, () => cfg.sockets, SETTLE_MS);
      await sleep(cfg.diffMs);
      const c1 = await edge(pool, nodes, redis, redisPid, true);
      const t = totals(c0, c1, ours);
      const admin = await adminPresence(a.gw);
      const ops = res.joinsOk + res.leavesOk;
      const problems: string[] = [];
      if (admin.count !== cfg.sockets) problems.push(`GET /v1/presence counts ${admin.count} members after the churn, not ${cfg.sockets}`);
      if (res.joinErrors + res.leaveErrors + res.unanswered > 0) problems.push(`${res.joinErrors + res.leaveErrors} refused, ${res.unanswered} unanswered: ${res.errorSamples.join(' | ').slice(0, 200)}`);
      if (!st.settled) problems.push(`${offCount(st.checks)} sockets did not show ${cfg.sockets} members ${SETTLE_MS} ms after the churn (${offSamples(st.checks)})`);
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'churn', ch), target: spec.name, repeat,
        ...measuredFields({ count: ops, wallS: t.wallS, serverCpuS: t.serverCpuS, clientCpuS: t.clientCpuS, machineBusyS: t.machineBusyS - t.redisCpuS,
          serverThreads: spec.threads * NODES, perSec: ops / (res.elapsedMs / 1000) }, problems),
        extra: {
          ...loadExtras(t, ops, idle, sampler.between(label), st.checks, res), churners, rate: ch.rate, holdMs: ch.holdMs, seconds: ch.seconds,
          settleMs: st.settleMs, quietWaitMs: quiet.waitedMs, members: admin.count,
          leavesPerS: r1(res.leavesOk / (res.elapsedMs / 1000)), joinsPerS: r1(res.joinsOk / (res.elapsedMs / 1000)), ...(await diagnostics(nodes, redis)),
        },
      });
    }

    // 4. Who is here: new sockets on A, B and (a third node) C; the presence frame; the admin read.
    sampler.phase = 'who is here';
    await waitQuiet(cfg.quietMaxMs);
    const probeOn = async (port: number, proc: number, id: number): Promise<ProbeResult> =>
      pool.procs[proc]!.call<ProbeResult>({ op: 'probe', target: { host: '127.0.0.1', port, proto: 'sluice' }, auth, id, topic: TOPIC, timeoutMs: 30_000 }, 40_000);
    let nextId = cfg.sockets + 1;
    const probes: Record<'A' | 'B' | 'C', ProbeResult[]> = { A: [], B: [], C: [] };
    for (let k = 0; k < cfg.probes; k++) {
      probes.A.push(await probeOn(a.port, 0, nextId++));
      probes.B.push(await probeOn(b.port, 1 % pool.size, nextId++));
      await sleep(200);
    }
    const adminA: PresenceData[] = [];
    const adminB: PresenceData[] = [];
    for (let k = 0; k < cfg.probes; k++) { adminA.push(await adminPresence(a.gw)); adminB.push(await adminPresence(b.gw)); }
    let cStart = NaN;
    const cWarnings: Record<string, number> = {};
    const cNodes: number[] = [];
    if (cfg.thirdNode) {
      for (let k = 0; k < cfg.probes; k++) {
        // A fresh node each time: its first subscriber waits for the others' entries, read from Redis.
        const t0 = performance.now();
        const c = await ServerProc.start(spec, 60_000, env);
        cStart = performance.now() - t0;
        try {
          await sleep(500);
          probes.C.push(await probeOn(c.port, 0, nextId++));
          cNodes.push((await nodeMetrics(c.gw)).clusterNodes);
        } finally {
          await c.stop();
          const w = JSON.parse((await diagnostics([c], redis)).nodeWarnings ?? '[]') as Array<Record<string, number>>;
          for (const [m, n] of Object.entries(w[0] ?? {})) cWarnings[m] = (cWarnings[m] ?? 0) + n;
        }
      }
    }
    {
      const med = (xs: readonly ProbeResult[], k: keyof ProbeResult): number => median(xs.map((x) => Number(x[k])).filter(Number.isFinite));
      const errs = [...probes.A, ...probes.B, ...probes.C].map((p) => p.error).filter((e): e is string => e !== undefined);
      const problems: string[] = [];
      if (errs.length > 0) problems.push(`probes failed: ${errs.slice(0, 3).join(' | ')}`);
      // Every probe's state counts the members and itself.
      for (const n of ['A', 'B', 'C'] as const) {
        const counts = probes[n].map((p) => p.count);
        if (counts.some((c) => c !== cfg.sockets + 1)) problems.push(`a new socket's presence_state on node ${n} counted ${counts.join(', ')}, not ${cfg.sockets + 1}`);
      }
      const x: Record<string, number | string | boolean | null> = {
        members: cfg.sockets, probes: cfg.probes, thirdNodeStartMs: r1(cStart), thirdNodeWarnings: JSON.stringify(cWarnings),
        // What node C's sluice_cluster_nodes said after its probe: 3 once its lease and the others' were read.
        thirdNodeClusterNodes: JSON.stringify(cNodes), countsC: JSON.stringify(probes.C.map((p) => p.count)),
      };
      for (const n of ['A', 'B', 'C'] as const) {
        const ps = probes[n];
        if (ps.length === 0) continue;
        x[`stateMs${n}`] = r1(med(ps, 'stateMs'));
        x[`stateMaxMs${n}`] = r1(Math.max(...ps.map((p) => p.stateMs).filter(Number.isFinite)));
        x[`replyMs${n}`] = r1(med(ps, 'replyMs'));
        x[`connectMs${n}`] = r1(med(ps, 'connectMs'));
        x[`stateBytes${n}`] = med(ps, 'stateBytes');
        x[`count${n}`] = med(ps, 'count');
        x[`listed${n}`] = med(ps, 'listed');
        x[`truncated${n}`] = ps.every((p) => p.truncated);
        x[`queryMs${n}`] = r1(med(ps, 'queryMs'));
        x[`queryBytes${n}`] = med(ps, 'queryBytes');
        x[`queryCount${n}`] = med(ps, 'queryCount');
      }
      x['adminMsA'] = r1(median(adminA.map((d) => d.ms)));
      x['adminMsB'] = r1(median(adminB.map((d) => d.ms)));
      x['adminBytes'] = median(adminA.map((d) => d.bytes));
      x['adminCount'] = median(adminA.map((d) => d.count));
      x['adminListed'] = median(adminA.map((d) => d.listed));
      const all = [...probes.A, ...probes.B, ...probes.C];
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'probe'), target: spec.name, repeat,
        ...measuredFields({ count: all.length, wallS: sum(all.map((p) => p.stateMs)) / 1000, serverCpuS: 0, clientCpuS: [0], machineBusyS: 0 }, problems),
        latency: { count: all.length, p50Us: median(all.map((p) => p.stateMs)) * 1000, p99Us: percentile(all.map((p) => p.stateMs), 0.99) * 1000,
          p999Us: NaN, maxUs: Math.max(...all.map((p) => p.stateMs)) * 1000 },
        extra: x,
      });
    }

    // 5. SIGKILL node B.
    const settledBefore = await settle(pool, () => cfg.sockets, SETTLE_MS);
    const adminBefore = await Promise.all([a, b].map((n) => adminPresence(n.gw).then((d) => d.count, () => NaN)));
    const diagBefore = await diagnostics(nodes, redis);
    await waitQuiet(cfg.quietMaxMs);
    sampler.phase = 'kill';
    const killUs = monoUs();
    const killT = performance.now();
    b.gw.signal('SIGKILL');
    let goneAdminMs = NaN;
    let nodesDropMs = NaN;
    let lastCount = NaN;
    const deadline = killT + cfg.ttlMs + 15_000;
    while (performance.now() < deadline && (!Number.isFinite(goneAdminMs) || !Number.isFinite(nodesDropMs))) {
      const [d, m] = await Promise.all([adminPresence(a.gw).catch(() => undefined), nodeMetrics(a.gw).catch(() => undefined)]);
      const at = performance.now() - killT;
      if (d !== undefined) lastCount = d.count;
      if (d !== undefined && d.count <= onA && !Number.isFinite(goneAdminMs)) goneAdminMs = at;
      if (m !== undefined && m.clusterNodes <= 1 && !Number.isFinite(nodesDropMs)) nodesDropMs = at;
      await sleep(100);
    }
    sampler.phase = 'kill settle';
    const sk = await settle(pool, (i) => (onNode(i) === 0 ? onA : -1), SETTLE_MS);
    const aChecks = sk.checks.filter((_, i) => onNode(i) === 0);
    const lastChange = Math.max(...aChecks.map((c) => c.lastChangeMaxUs));
    const p50Change = median(aChecks.map((c) => c.lastChangeP50Us));
    const observerGone = aChecks.map((c) => c.observer.find((e) => e.size <= onA)?.atUs ?? NaN).map((u) => (u - killUs) / 1000);
    // Two more points for the chart: the seconds in which the kill's diff reached the sockets.
    await sleep(2500);
    sampler.stop();
    {
      const problems: string[] = [];
      if (!Number.isFinite(goneAdminMs)) problems.push(`node A still counted ${lastCount} members ${cfg.ttlMs + 15_000} ms after the SIGKILL (expected ${onA})`);
      if (!sk.settled) problems.push(`${offCount(aChecks)} sockets on A did not show ${onA} members (${offSamples(aChecks)})`);
      if (!settledBefore.settled) {
        problems.push(`before the kill, ${offCount(settledBefore.checks)} sockets did not show ${cfg.sockets} members (${offSamples(settledBefore.checks)}; ` +
          `admin A ${adminBefore[0]}, B ${adminBefore[1]})`);
      }
      const bound = cfg.ttlMs / 2 + cfg.ttlMs / 4 + cfg.diffMs;
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'kill'), target: spec.name, repeat,
        ...measuredFields({ count: cfg.sockets - onA, wallS: goneAdminMs / 1000, serverCpuS: 0, clientCpuS: [0], machineBusyS: 0 }, problems),
        extra: {
          goneAdminMs: r1(goneAdminMs), nodesDropMs: r1(nodesDropMs),
          goneAllSocketsMs: r1((lastChange - killUs) / 1000), goneP50SocketsMs: r1((p50Change - killUs) / 1000),
          goneObserversMs: JSON.stringify(observerGone.map((x) => r1(x))),
          ttlMs: cfg.ttlMs, boundMs: bound, withinTtl: Number.isFinite(goneAdminMs) && goneAdminMs <= cfg.ttlMs,
          wrongCounts: sum(aChecks.map((c) => c.wrong)), checked: sum(aChecks.map((c) => c.checked)), settleMs: sk.settleMs, remaining: onA,
          adminBeforeA: adminBefore[0]!, adminBeforeB: adminBefore[1]!, ...diagBefore,
        },
      });
    }
    // The chart's series rides on the presence join's sample.
    const js = samples.find((x) => x.variant === variantOf(cfg, 'join'));
    if (js !== undefined) js.timeline = sampler.points;
    return samples;
  } finally {
    sampler?.stop();
    await Promise.all(nodes.map((n) => n.stop()));
    await redis.stop();
  }
}

/** Two Socket.IO servers with the Redis adapter on one fresh redis-server; the same sockets join one room; fetchSockets() timed on A. */
async function sioOnce(pool: LoadPool, repeat: number, cfg: PresenceConfig, log: (l: string) => void): Promise<Sample[]> {
  const redis = await startRedis();
  const peers: Gateway[] = [];
  try {
    const redisPid = await redisPidOf(redis);
    const started = await Promise.allSettled(Array.from({ length: NODES }, () => startGateway({ REDIS_URL: redis.url }, {
      command: [process.execPath, '--import', 'tsx', PEER_MAIN, 'sio-redis'], cwd: REPO_ROOT, defaults: PLAIN_ENV, raiseFileLimit: true, timeoutMs: 60_000,
    })));
    for (const s of started) if (s.status === 'fulfilled') peers.push(s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason as Error;
    const pids = peers.map((p) => p.pid);
    await pool.all(() => ({ op: 'presenceWatch', userPrefix: PREFIX }));
    const conn = await connectAll(pool, peers.map((p) => p.port), 'sio', cfg, null);
    if (conn.ready < cfg.sockets) throw new Error(`only ${conn.ready}/${cfg.sockets} Socket.IO sockets connected: ${conn.reasons}`);
    log(`  S14: ${conn.ready} Socket.IO sockets open on 2 servers with the Redis adapter`);
    const cpu = (): number => sum(pids.map((p) => cpuSeconds(p)));
    const samples: Sample[] = [];

    await waitQuiet(cfg.quietMaxMs);
    const rss0 = await minRss(pids, 1000);
    const c0 = cpu(); const r0 = cpuSeconds(redisPid); const g0 = pool.cpuSeconds(); const b0 = machineBusySeconds(); const t0 = performance.now();
    const cmd0 = commandCalls(await redis.cli('info', 'commandstats'));
    const joined = pacedSum(await pool.all<PacedResult>(() => ({
      op: 'paceJoin', topic: TOPIC, perSecond: cfg.joinRate / pool.size, timeoutMs: (cfg.sockets / cfg.joinRate) * 1000 + 60_000, presence: false,
    }), (cfg.sockets / cfg.joinRate) * 1000 + 90_000));
    const wallS = (performance.now() - t0) / 1000;
    const c1 = cpu(); const r1_ = cpuSeconds(redisPid); const g1 = pool.cpuSeconds(); const b1 = machineBusySeconds();
    const cmd1 = commandCalls(await redis.cli('info', 'commandstats'));
    await sleep(1000);
    const rss1 = await minRss(pids, 1000);
    {
      const problems: string[] = [];
      if (joined.joinsOk < cfg.sockets) problems.push(`${joined.joinsOk}/${cfg.sockets} room joins acked`);
      const cmds = sum(Object.values(deltaOf(cmd0, cmd1)));
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'sio-join'), target: 'sio', repeat,
        ...measuredFields({ count: joined.joinsOk, wallS, serverCpuS: c1 - c0, clientCpuS: g1.map((g, i) => g - (g0[i] ?? 0)), machineBusyS: b1 - b0 - (r1_ - r0),
          serverThreads: NODES }, problems),
        extra: {
          ops: joined.joinsOk, cpuPerOpUs: r1(((c1 - c0) / joined.joinsOk) * 1e6), redisCommandsPerOp: r3(cmds / joined.joinsOk), redisCpuS: r3(r1_ - r0),
          rssPerMemberBytes: Math.round((sum(rss1) - sum(rss0)) / cfg.sockets), sockets: cfg.sockets,
        },
      });
    }

    await waitQuiet(cfg.quietMaxMs);
    const fetchOnce = async (port: number): Promise<{ ms: number; count: number; local: number; bytes: number; clientMs: number; error?: string }> => {
      const t = performance.now();
      const res = await fetch(`http://127.0.0.1:${port}/fetch?room=${encodeURIComponent(TOPIC)}`, { signal: AbortSignal.timeout(30_000) });
      const body = await res.json() as { ms: number; count: number; local: number; bytes: number; error?: string };
      return { ...body, clientMs: performance.now() - t };
    };
    const fc0 = cpu(); const fr0 = cpuSeconds(redisPid); const ft0 = performance.now();
    const fetches: Array<Awaited<ReturnType<typeof fetchOnce>>> = [];
    for (let k = 0; k < cfg.fetches; k++) { fetches.push(await fetchOnce(peers[0]!.port)); await sleep(200); }
    const fwall = (performance.now() - ft0) / 1000;
    const fc1 = cpu(); const fr1 = cpuSeconds(redisPid);
    const fromB = await fetchOnce(peers[1]!.port);
    {
      const errs = [...fetches, fromB].map((f) => f.error).filter((e): e is string => e !== undefined);
      const problems: string[] = [];
      if (errs.length > 0) problems.push(`fetchSockets failed: ${errs[0]!}`);
      if (fetches.some((f) => f.count !== cfg.sockets)) problems.push(`fetchSockets counted ${fetches.map((f) => f.count).join(', ')}, not ${cfg.sockets}`);
      const ms = fetches.map((f) => f.ms);
      samples.push({
        scenario: 'S14', variant: variantOf(cfg, 'sio-fetch'), target: 'sio', repeat,
        ...measuredFields({ count: fetches.length, wallS: fwall, serverCpuS: fc1 - fc0, clientCpuS: [0], machineBusyS: 0 }, problems),
        latency: { count: ms.length, p50Us: median(ms) * 1000, p99Us: percentile(ms, 0.99) * 1000, p999Us: NaN, maxUs: Math.max(...ms) * 1000 },
        extra: {
          fetchP50Ms: r1(median(ms)), fetchMaxMs: r1(Math.max(...ms)), fetchMinMs: r1(Math.min(...ms)), fetchCount: median(fetches.map((f) => f.count)),
          fetchLocal: median(fetches.map((f) => f.local)), fetchBytes: median(fetches.map((f) => f.bytes)), fetches: fetches.length,
          fetchClientP50Ms: r1(median(fetches.map((f) => f.clientMs))), fetchFromBMs: r1(fromB.ms),
          // Both servers' CPU (and redis-server's) over the fetches, per fetch: the asking server serializes nothing, the other all its sockets.
          cpuPerFetchMs: r1(((fc1 - fc0) / fetches.length) * 1000), redisCpuPerFetchMs: r1(((fr1 - fr0) / fetches.length) * 1000),
          members: cfg.sockets,
        },
      });
    }
    return samples;
  } finally {
    await Promise.all(peers.map((p) => p.stop('SIGTERM', 10_000)));
    await redis.stop();
  }
}
