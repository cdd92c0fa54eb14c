// S12 revocation at scale (issue 17): one `POST /v1/revoke {"user":...}` to
// node A of a two-node cluster closes every socket of that user on both
// nodes with 4003; how long from the request to the last close the clients
// see. Per repeat: one private redis-server (startRedis of @sluice/redis/
// testing, as S8), two fresh gateways on it in cluster mode with
// WS_AUTH=jwt (HS256) and the kit's ADMIN_TOKEN; `sockets` sockets of ONE
// user (each with a token of its own jti, issued before the revocation) from
// `procs` generator processes, process p on node p mod 2 (5000 per node by
// default), 8 loopback source addresses. Every generator records each close
// (CLOCK_MONOTONIC, shared by the processes; code; reason) from one second
// before the request. The orchestrator stamps the clock, POSTs the revocation
// to node A, and waits for every socket to close (at most `timeoutMs`).
//
// Reported: request to last close, and the p50/p99 of the close arrivals
// after the request, over all sockets and per node; the close codes (all must
// be 4003 token_revoked); the admin answer's time; and, per node, when the
// coordinator logged that its shards had carried the revocation out
// (`admin action carried out on this node`: after every shard's close loop
// returned; ms resolution, wall clock) against when the last of that node's
// closes reached its client: the gap is how far the clients lagged behind
// the server. Server CPU is both gateways' over the window (request to last
// close), redis-server's beside it; generator CPU per close tells what the
// clients' close handling costs.

import { availableParallelism } from 'node:os';
import { metricSum } from '@sluice/gateway/testing';
import { startRedis } from '@sluice/redis/testing';
import type { ClosesResult, ConnectResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { monoUs } from '../lib/clock.ts';
import { authSpec, jwtEnv } from '../lib/jwt.ts';
import { cpuSeconds, cpuSplit, machineBusySeconds, processCpuTable, topCpuBetween, unchargedSeconds } from '../lib/proc.ts';
import { percentile } from '../lib/series.ts';
import { ServerProc, TARGETS, type TargetSpec } from '../lib/server.ts';
import { SOURCES } from './connect.ts';
import { failedSample, measuredFields, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface RevokeConfig {
  sockets: number;
  /** Generator processes, alternating between the two nodes (at least 2; at most 15 000 sockets each). */
  procs: number;
  /** Handshakes in flight per generator process. */
  concurrency: number;
  /** How long to wait for the last close. */
  timeoutMs: number;
  /**
   * A generator records a close frame and sends its RST only once every socket
   * closed (false: at once, as S7 does), so that a close is timed when its
   * frame is read, not after the teardown of the sockets before it.
   */
  deferTeardown: boolean;
}

export const S12_DEFAULT: RevokeConfig = { sockets: 10_000, procs: 4, concurrency: 250, timeoutMs: 15_000, deferTeardown: true };

const PER_PROC_MAX = 15_000;
const USER = 'revoked-user';
const NODES = 2;

export function variantOf(cfg: RevokeConfig): string {
  return `${cfg.sockets} sockets of one user, 2 nodes${cfg.deferTeardown ? '' : ', RST at each close'}`;
}

/** Times (ms after the request) at nearest-rank quantiles, and the last. */
export interface ArrivalStats {
  n: number;
  firstMs: number;
  p50Ms: number;
  p99Ms: number;
  lastMs: number;
}

export function arrivalStats(ms: readonly number[]): ArrivalStats {
  const last = ms.reduce((a, b) => Math.max(a, b), -Infinity);
  const first = ms.reduce((a, b) => Math.min(a, b), Infinity);
  return { n: ms.length, firstMs: ms.length > 0 ? first : NaN, p50Ms: percentile(ms, 0.5), p99Ms: percentile(ms, 0.99), lastMs: ms.length > 0 ? last : NaN };
}

/** Close codes counted ('no close frame' for a socket that ended without one), and the reasons other than `expect`. */
export function closeCodes(results: readonly Pick<ClosesResult, 'codes' | 'other'>[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of results) for (const c of r.codes) { const k = c === 0 ? 'no close frame' : String(c); out[k] = (out[k] ?? 0) + 1; }
  return out;
}

export async function runRevoke(opts: RunOptions, cfg: RevokeConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, NODES, Math.ceil(cfg.sockets / PER_PROC_MAX));
  const pool = await LoadPool.start(procs, 30 * 60_000);
  const out: Sample[] = [];
  try {
    for (let r = 0; r < opts.repeats; r++) {
      for (const name of opts.targets) {
        const spec = TARGETS[name];
        try {
          const s = await revokeOnce(pool, spec, r, cfg, opts.log);
          opts.log(`  S12 ${name} r${r}: ${s.ok ? '' : `FAILED ${s.error ?? ''}; `}last close ${String(s.extra['lastCloseMs'])} ms after the request, ` +
            `p50 ${String(s.extra['p50Ms'])} ms, p99 ${String(s.extra['p99Ms'])} ms; nodes done (log) ${String(s.extra['serverDoneMs'])} ms; ` +
            `codes ${String(s.extra['closeCodes'])}; gen busiest ${(s.clientUtilMax * 100).toFixed(0)}%`);
          out.push(s);
        } catch (err) {
          opts.log(`  S12 ${name} r${r}: failed: ${(err as Error).message}`);
          out.push(failedSample('S12', variantOf(cfg), name, r, (err as Error).message));
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

async function revokeOnce(pool: LoadPool, spec: TargetSpec, repeat: number, cfg: RevokeConfig, log: (l: string) => void): Promise<Sample> {
  const redis = await startRedis();
  const nodes: ServerProc[] = [];
  try {
    const info = await redis.cli('info', 'server');
    const redisPid = Number(/^process_id:(\d+)/m.exec(info)?.[1]);
    if (!Number.isInteger(redisPid) || redisPid <= 0) throw new Error('redis-server did not tell its process_id');
    const auth = authSpec({ sub: USER, topics: [], publish: [] });
    const env = { ...jwtEnv(auth), REDIS_URL: redis.url };
    const started = await Promise.allSettled(Array.from({ length: NODES }, () => ServerProc.start(spec, 60_000, env)));
    for (const s of started) if (s.status === 'fulfilled') nodes.push(s.value);
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason as Error;
    const nodeOf = (proc: number): number => proc % NODES;
    const counts = split(cfg.sockets, pool.size);
    const bases = counts.map((_, i) => counts.slice(0, i).reduce((a, b) => a + b, 0));
    await pool.all((p) => ({ op: 'sign', purpose: 'upgrade', auth, idBase: bases[p.index]!, count: counts[p.index]! }), 30_000);
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target: { host: '127.0.0.1', port: nodes[nodeOf(p.index)]!.port, proto: spec.proto },
      count: counts[p.index]!, idBase: bases[p.index]!, sources: SOURCES, concurrency: cfg.concurrency, timeoutMs: 60_000, withTokens: true,
    }), 90_000);
    const ready = conn.reduce((a, c) => a + c.ready, 0);
    if (ready < cfg.sockets) {
      // What the nodes said meanwhile (warnings and errors), for the record.
      const said = nodes.map((n, k) => `node ${'AB'[k]!}: ${n.logs.filter((l) => typeof l['level'] === 'number' && l['level'] >= 40)
        .slice(-3).map((l) => JSON.stringify(l).slice(0, 300)).join(' | ') || 'no warnings'}${n.gw.stderr() === '' ? '' : `; stderr ${n.gw.stderr().slice(-300)}`}`);
      throw new Error(`only ${ready}/${cfg.sockets} sockets connected (per process, on nodes ${conn.map((_, i) => 'AB'[nodeOf(i)]).join('')}: ` +
        `${JSON.stringify(conn.map((c) => c.reasons))}); ${said.join('; ')}`);
    }
    const open = await Promise.all(nodes.map(async (n) => metricSum(await n.gw.metrics(10_000), 'sluice_connected_sockets')));
    log(`  S12: ${ready} sockets of user ${USER} open (nodes say ${open.join(' + ')})`);
    const watching = (await pool.all<number>(() => ({ op: 'watchCloses', deferTeardown: cfg.deferTeardown }))).reduce((a, b) => a + b, 0);
    await sleep(1000);
    const quiet = await waitQuiet();
    const stallBefore = await Promise.all(nodes.map((n) => n.stallMaxMs()));

    const procs0 = processCpuTable();
    const un0 = unchargedSeconds();
    const self0 = process.cpuUsage();
    const busy0 = machineBusySeconds();
    const gen0 = pool.cpuSeconds();
    const cpu0 = nodes.map((n) => n.cpuSeconds());
    const split0 = nodes.map((n) => cpuSplit(n.pid));
    const redis0 = cpuSeconds(redisPid);
    const logsBefore = nodes.map((n) => n.logs.length);
    const t0 = performance.now();
    const t0Us = monoUs();
    const wall0 = Date.now();
    const res = await nodes[0]!.gw.adminPost('/v1/revoke', { user: USER });
    const answerMs = performance.now() - t0;
    const body = await res.text();
    if (res.status !== 202) throw new Error(`POST /v1/revoke answered ${res.status}: ${body.slice(0, 200)}`);
    const closes = await pool.all<ClosesResult>(() => ({ op: 'closes', timeoutMs: cfg.timeoutMs }), cfg.timeoutMs + 10_000);
    const wallS = (performance.now() - t0) / 1000;
    const cpu1 = nodes.map((n) => n.cpuSeconds());
    const split1 = nodes.map((n) => cpuSplit(n.pid));
    const redis1 = cpuSeconds(redisPid);
    const gen1 = pool.cpuSeconds();
    const busy1 = machineBusySeconds();
    const self1 = process.cpuUsage(self0);
    const un1 = unchargedSeconds();
    const procs1 = processCpuTable();
    // The coordinators' lines come over stdout; and the sockets' teardown (the clients' RSTs, the servers' close handlers) follows.
    await sleep(1000);
    const cpu2 = nodes.map((n) => n.cpuSeconds());
    const stallAfter = await Promise.all(nodes.map((n) => n.stallMaxMs()));

    const rel = (c: ClosesResult): number[] => c.atUs.map((u) => (u - t0Us) / 1000);
    const all = arrivalStats(closes.flatMap(rel));
    const perNode = Array.from({ length: NODES }, (_, k) => arrivalStats(closes.filter((_, i) => nodeOf(i) === k).flatMap(rel)));
    const codes = closeCodes(closes);
    const other: Record<string, number> = {};
    for (const c of closes) for (const [k, n] of Object.entries(c.other)) other[k] = (other[k] ?? 0) + n;
    const stillOpen = closes.reduce((a, c) => a + c.open, 0);
    // When each node's coordinator had every shard's answer (wall clock, ms), and how many sockets it says it closed.
    const done = nodes.map((n, k) => {
      const line = n.logs.slice(logsBefore[k]).find((l) => l['msg'] === 'admin action carried out on this node');
      const at = typeof line?.['time'] === 'string' ? Date.parse(line['time']) : NaN;
      return { ms: at - wall0, sockets: typeof line?.['sockets'] === 'number' ? line['sockets'] : NaN };
    });
    const serverCpuS = cpu1.reduce((a, c, k) => a + c - cpu0[k]!, 0);
    const clientCpuS = gen1.map((g, i) => g - (gen0[i] ?? 0));
    const redisCpuS = redis1 - redis0;
    const window = Number.isFinite(all.lastMs) ? all.lastMs / 1000 : wallS;
    // A generator's CPU over the span from the request to its own last close: near 100% means its close handling set the pace.
    const genBusy = closes.map((c, i) => {
      const last = Math.max(...rel(c));
      return Number.isFinite(last) && last > 0 ? clientCpuS[i]! / (last / 1000) : NaN;
    });

    const problems: string[] = [];
    if (stillOpen > 0) problems.push(`${stillOpen} sockets still open ${cfg.timeoutMs} ms after the request`);
    if ((codes['4003'] ?? 0) !== cfg.sockets) problems.push(`not every socket closed with 4003: ${JSON.stringify(codes)}`);
    const r1 = (x: number): number | null => (Number.isFinite(x) ? Math.round(x * 10) / 10 : null);
    const r3 = (x: number): number | null => (Number.isFinite(x) ? Math.round(x * 1000) / 1000 : null);
    const closed = codes['4003'] ?? 0;
    return {
      scenario: 'S12', variant: variantOf(cfg), target: spec.name, repeat,
      ...measuredFields({
        count: closed, wallS, serverCpuS, clientCpuS, machineBusyS: busy1 - busy0 - redisCpuS, perSec: Number.isFinite(all.lastMs) ? closed / (all.lastMs / 1000) : NaN,
      }, problems),
      latency: { count: all.n, p50Us: all.p50Ms * 1000, p99Us: all.p99Ms * 1000, p999Us: percentile(closes.flatMap(rel), 0.999) * 1000, maxUs: all.lastMs * 1000 },
      extra: {
        sockets: cfg.sockets, nodes: NODES, procs: pool.size, cores: availableParallelism(), socketsWatched: watching,
        nodeSockets: JSON.stringify(open),
        answerStatus: res.status, answerMs: r1(answerMs),
        firstCloseMs: r1(all.firstMs), p50Ms: r1(all.p50Ms), p99Ms: r1(all.p99Ms), lastCloseMs: r1(all.lastMs),
        nodeALastMs: r1(perNode[0]!.lastMs), nodeAP50Ms: r1(perNode[0]!.p50Ms), nodeAP99Ms: r1(perNode[0]!.p99Ms), nodeAFirstMs: r1(perNode[0]!.firstMs),
        nodeBLastMs: r1(perNode[1]!.lastMs), nodeBP50Ms: r1(perNode[1]!.p50Ms), nodeBP99Ms: r1(perNode[1]!.p99Ms), nodeBFirstMs: r1(perNode[1]!.firstMs),
        nodeADoneMs: r1(done[0]!.ms), nodeBDoneMs: r1(done[1]!.ms), serverDoneMs: r1(Math.max(done[0]!.ms, done[1]!.ms)),
        nodeAClosedByServer: done[0]!.sockets, nodeBClosedByServer: done[1]!.sockets,
        // How far the last close reached its client after that node's shards were done.
        nodeAClientLagMs: r1(perNode[0]!.lastMs - done[0]!.ms), nodeBClientLagMs: r1(perNode[1]!.lastMs - done[1]!.ms),
        closeCodes: JSON.stringify(codes), closeReasons: JSON.stringify(other), stillOpen,
        underOneSecond: Number.isFinite(all.lastMs) && all.lastMs < 1000 && problems.length === 0,
        serverCpuUsPerClose: r1(closed > 0 ? (serverCpuS / closed) * 1e6 : NaN),
        serverCoresOverWindow: r3(serverCpuS / window),
        // Of the servers' CPU per close, the kernel's share (system time: the close frames' sends, loopback TCP).
        serverSysUsPerClose: r1(closed > 0 ? (split1.reduce((a, c, k) => a + c.sys - split0[k]!.sys, 0) / closed) * 1e6 : NaN),
        // The servers' CPU in the second after: the sockets' teardown (with deferTeardown it comes only then), plus idle.
        serverCpuUsPerCloseAfter: r1(closed > 0 ? (cpu2.reduce((a, c, k) => a + c - cpu1[k]!, 0) / closed) * 1e6 : NaN),
        // The longest event-loop stall of any thread of each node since its start (sluice_eventloop_stall_max_seconds), before and
        // after the revocation: a shard closes its sockets of the user in one synchronous loop.
        stallMsBefore: JSON.stringify(stallBefore.map((x) => (x === undefined ? null : Math.round(x)))),
        stallMsAfter: JSON.stringify(stallAfter.map((x) => (x === undefined ? null : Math.round(x)))),
        stallMaxMsAfter: r1(Math.max(...stallAfter.map((x) => x ?? NaN))),
        deferTeardown: cfg.deferTeardown, quietWaitMs: quiet.waitedMs, quietBusyCores: quiet.busyCores,
        redisCpuS: r3(redisCpuS),
        genCpuUsPerClose: r1(closed > 0 ? (clientCpuS.reduce((a, b) => a + b, 0) / closed) * 1e6 : NaN),
        genBusyToOwnLastClose: JSON.stringify(genBusy.map((b) => r3(b))),
        genBusyMax: r3(Math.max(...genBusy.filter(Number.isFinite))),
        // Who else used the machine over the window: this orchestrator, the kernel's irq/softirq time, the busiest other processes.
        orchestratorCpuS: r3((self1.user + self1.system) / 1e6),
        irqS: r3(un1.irq - un0.irq), softirqS: r3(un1.softirq - un0.softirq), stealS: r3(un1.steal - un0.steal),
        otherProcesses: JSON.stringify(topCpuBetween(procs0, procs1, new Set([...nodes.map((n) => n.pid), ...pool.procs.map((p) => p.pid), redisPid]))),
      },
    };
  } finally {
    await Promise.all(nodes.map((n) => n.stop()));
    await redis.stop();
  }
}
