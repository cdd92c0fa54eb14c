// S16 (issue 20's "S12"; S12 here is the revocation benchmark): 100,000
// sockets on this one box. `nodes` gateway processes (WS_WORKERS=2 each,
// cluster mode) on one private redis-server, the sockets held by `procs`
// load processes (loadgen/scale-child.ts, at most ~17k sockets each: the
// open-file limit is 20,000 per process) from the eight loopback source
// addresses S4/S9 use (about 28k ephemeral ports each), socket i first on
// node i mod nodes. Every socket joins three topics: the big topic (all
// sockets), its room (`roomSize` neighbours) and a keyed feed (`feeds` of
// them, striped). One more process publishes, over a few sockets of its own:
// durable events to the big topic and to rooms (round robin) and keyed
// updates to feeds, at stated rates, each event stamped in its data.
//
// Phases, sampled every `sampleMs` (the timeline of the chart):
//   idle     sockets joined, nothing published: the idle CPU per socket;
//   warm     the rates on, not measured;
//   steady   the measured window: deliveries, gateway CPU per delivery (every
//            thread of every node, /proc), redis-server's CPU (/proc) and
//            calls (INFO commandstats) per published event, delivery p50/p99
//            (HDR, from each event's stamp), RSS per socket per node;
//   ramp xN  the rates times N, shorter: what the box holds beyond them;
//   restart  every node in turn: marked down for new connections, SIGTERM
//            (the gateway's drain: 1012 with retryAfterMs at WS_DRAIN_RATE),
//            started again on a new port; the dropped clients reconnect after
//            the retryAfterMs to the node restarted last (a least-connections
//            balancer's pick) or the next up, and rejoin the durable topics
//            with `since`; the publisher's sockets the same, resending what
//            was not acknowledged with its idempotency key;
//   tail     the rates on, then off; every publish waited for.
// Then every subscription's sequence numbers are checked against what was
// acknowledged: (subscription, acknowledged event) pairs never received are
// the acknowledged publishes lost, counted. Loopback only; every loop is
// bounded; not part of `all` or `ci` (it takes several minutes and most of
// the machine).

import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { startRedis, type RedisServer } from '@sluice/redis/testing';
import { RpcChild } from '../lib/child-rpc.ts';
import { cpuSeconds, machineBusySeconds, rssBytes } from '../lib/proc.ts';
import { ServerProc, TARGETS } from '../lib/server.ts';
import { mergeEncoded, newHistogram, summarize, type Histogram, type LatencySummary } from '../lib/hist.ts';
import { split } from '../loadgen/pool.ts';
import {
  SCALE_CHILD, type Nodes, type PubFinal, type PubStatus, type ScaleMark, type ScaleRequest, type ScaleStatus, type SetupResult, type VerifyResult,
} from '../loadgen/scale-child.ts';
import { redisCalls } from './crossnode.ts';
import { deliveriesPerSecond, limits, rooms, type Mix, type Rates, type Usage } from './scale-plan.ts';
import { failedSample, fmtBytes, fmtInt, fmtUs, measuredFields, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface ScaleConfig {
  sockets: number;
  nodes: number;
  /** Subscriber load processes (one more publishes). */
  procs: number;
  roomSize: number;
  feeds: number;
  rates: Rates;
  /** Bytes of each event's data. */
  size: number;
  idleS: number;
  warmS: number;
  /** Each class alone for this long after the steady window (what a delivery and what an event costs, apart); 0: not. */
  apartS: number;
  steadyS: number;
  /** Multipliers of the rates, each run `rampS` after the steady window; none: no ramp. */
  ramp: number[];
  rampS: number;
  restart: boolean;
  tailS: number;
  /** WS_DRAIN_RATE of every node (sockets per second). */
  drainRate: number;
  /** Handshakes (to the third join's reply) in flight per load process. */
  concurrency: number;
  pubSockets: number;
  sampleMs: number;
}

/**
 * 100k sockets on 7 nodes: 14.3k each, 16.7k while one is down, under the
 * 20,000 open files of a process (6 nodes would reach 20k during the
 * restart). The rates were chosen from the runs (see results.md): one
 * big-topic event a second (100k deliveries a second) kept this 2-core box
 * at 2.00 cores with a p99 of 5-8 s and starved the restart; one in 5 s
 * leaves it room.
 */
export const S16_DEFAULT: ScaleConfig = {
  sockets: 100_000, nodes: 7, procs: 7, roomSize: 10, feeds: 1000, rates: { big: 0.2, room: 10, feed: 10 }, size: 64,
  idleS: 10, warmS: 10, apartS: 20, steadyS: 120, ramp: [3], rampS: 20, restart: true, tailS: 10, drainRate: 2000, concurrency: 100, pubSockets: 4, sampleMs: 2000,
};

/** One sample of the timeline: what the interval that ended at `t` saw. */
export interface ScalePoint {
  /** Seconds since the first sample (the end of the connect phase). */
  t: number;
  phase: string;
  wallS: number;
  deliveries: number;
  big: number;
  room: number;
  feed: number;
  published: number;
  gatewayCpuS: number;
  redisCpuS: number;
  loadCpuS: number;
  machineBusyS: number;
  redisCalls: number;
  p50Us: number | null;
  p99Us: number | null;
  subscribed: number;
  gatewayRssBytes: number;
  maxGatewayFds: number;
  memUsedBytes: number;
}

interface NodeProc {
  srv: ServerProc;
  /** CPU seconds of the node's earlier processes (before its restart): a node's CPU counts across restarts. */
  cpuBefore: number;
  /** The process's CPU seconds at the last reading: what it used, once it has exited. */
  lastSeen: number;
}

/** A node's CPU seconds over all its processes so far. */
function nodeCpuS(n: NodeProc): number {
  if (n.srv.alive) {
    try { n.lastSeen = n.srv.cpuSeconds(); } catch { /* exited meanwhile: the last reading stands */ }
  }
  return n.cpuBefore + n.lastSeen;
}

type Child = RpcChild<ScaleRequest>;

function fdCount(pid: number): number {
  try { return readdirSync(`/proc/${pid}/fd`).length; } catch { return 0; }
}

function fdLimit(pid: number): number {
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/limits`, 'latin1'));
    return m === null ? NaN : Number(m[1]);
  } catch { return NaN; }
}

function meminfo(): { total: number; used: number } {
  const t = readFileSync('/proc/meminfo', 'latin1');
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(t)?.[1] ?? NaN) * 1024;
  return { total: kb('MemTotal'), used: kb('MemTotal') - kb('MemAvailable') };
}

function portRange(): number {
  try {
    const [a, b] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'latin1').trim().split(/\s+/).map(Number);
    return b! - a! + 1;
  } catch { return 28_232; }
}

/**
 * Loopback source addresses: 32, not S4's 8. A socket bound to an address
 * with port 0 takes its port from the ephemeral range, and the kernel's
 * search for a free one grows long as the range fills (bind takes one half
 * of it first): at 100k sockets on 8 addresses (12.5k each) the connects of
 * the first run fell to about 120 a second near the end. At 32 each holds
 * about 3k.
 */
export const SCALE_SOURCES: readonly string[] = Array.from({ length: 32 }, (_, i) => `127.0.1.${i + 1}`);

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
const num = (x: number): number | null => (Number.isFinite(x) ? x : null);
const round = (x: number, d = 0): number => Math.round(x * 10 ** d) / 10 ** d;

export function variantOf(cfg: Pick<ScaleConfig, 'sockets' | 'nodes'>): string {
  return `${cfg.sockets} sockets, ${cfg.nodes} nodes`;
}

export async function runScale(opts: RunOptions, cfg: ScaleConfig): Promise<Sample[]> {
  const variant = variantOf(cfg);
  const log = (l: string): void => opts.log(`  S16 ${l}`);
  // Other sessions share this machine: wait (up to 5 min) for it to be quiet; the run's `other` column says how quiet it stayed.
  const quiet = await waitQuiet(300_000, 0.3, 2000);
  log(`machine quiet after ${quiet.waitedMs} ms (${quiet.busyCores} cores busy)`);
  const redis = await startRedis();
  const nodes: NodeProc[] = [];
  const children: Child[] = [];
  try {
    return [await run(cfg, redis, nodes, children, log, quiet)];
  } catch (err) {
    log(`failed: ${(err as Error).stack ?? String(err)}`);
    return [failedSample('S16', variant, 'sluice', 0, (err as Error).message)];
  } finally {
    await Promise.all(children.map((c) => c.exit().catch(() => undefined)));
    await Promise.all(nodes.map((n) => n.srv.stop(5000).catch(() => undefined)));
    await redis.stop();
  }
}

async function run(cfg: ScaleConfig, redis: RedisServer, nodes: NodeProc[], children: Child[], log: (l: string) => void,
  quiet: { waitedMs: number; busyCores: number }): Promise<Sample> {
  const mix: Mix = { sockets: cfg.sockets, roomSize: cfg.roomSize, feeds: cfg.feeds };
  const info = await redis.cli('info', 'server');
  const redisPid = Number(/^process_id:(\d+)/m.exec(info)?.[1]);
  const redisVersion = /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
  if (!Number.isInteger(redisPid) || redisPid <= 0) throw new Error('redis-server did not tell its process_id');
  const env = {
    REDIS_URL: redis.url, WS_DRAIN_RATE: String(cfg.drainRate), WS_DRAIN_DELAY_MS: '500', WS_DRAIN_MAX_MS: '120000',
    // For a profile of the nodes (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`): not set by the scenario itself.
    ...(process.env['S16_GATEWAY_NODE_OPTIONS'] !== undefined ? { NODE_OPTIONS: process.env['S16_GATEWAY_NODE_OPTIONS'] } : {}),
  };
  const spec = TARGETS.sluice;
  for (let k = 0; k < cfg.nodes; k++) nodes.push({ srv: await ServerProc.start(spec, 60_000, env), cpuBefore: 0, lastSeen: 0 });
  const state: { ports: number[]; up: boolean[]; prefer: number } = { ports: nodes.map((n) => n.srv.port), up: nodes.map(() => true), prefer: -1 };
  const nodesMsg = (): Nodes => ({ ports: [...state.ports], up: [...state.up], prefer: state.prefer });
  const started = await Promise.all(Array.from({ length: cfg.procs + 1 }, (_, i) => RpcChild.start<ScaleRequest>(SCALE_CHILD, '--scale-child', `scale load ${i}`)));
  children.push(...started);
  const subsProcs = children.slice(0, cfg.procs);
  const pubProc = children[cfg.procs]!;
  const nodeCpu = (): number[] => nodes.map(nodeCpuS);
  const broadcast = async (): Promise<void> => { await Promise.all(children.map((c) => c.call({ op: 'nodes', nodes: nodesMsg() }, 10_000))); };

  // The nodes without a socket (the publisher's few aside), settled for 10 s: their RSS, and their CPU (timers of every thread).
  await pubProc.call({ op: 'publisher', mix, sockets: cfg.pubSockets, size: cfg.size, nodes: nodesMsg(), timeoutMs: 30_000 }, 40_000);
  await sleep(10_000);
  const bareCpu0 = sum(nodeCpu());
  const bareT0 = performance.now();
  const rssBase = await Promise.all(nodes.map((n) => n.srv.minRssBytes(5000)));
  const bareCores = (sum(nodeCpu()) - bareCpu0) / ((performance.now() - bareT0) / 1000);
  log(`${cfg.nodes} nodes up (ports ${state.ports.join(',')}), base RSS ${rssBase.map((b) => fmtBytes(b)).join(', ')}, ` +
    `bare CPU ${bareCores.toFixed(2)} cores; redis ${redisVersion}`);

  // ---- connect and join ----
  const counts = split(cfg.sockets, cfg.procs);
  const cpuC0 = sum(nodeCpu());
  const busyC0 = machineBusySeconds();
  const tC0 = performance.now();
  const setupTimeout = 60_000 + cfg.sockets * 5;
  let connecting = true;
  const progress = (async (): Promise<void> => {
    while (connecting) {
      await sleep(10_000);
      if (!connecting) break;
      const st = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 20_000))).catch(() => []);
      const perSource: Record<string, number> = {};
      for (const x of st) for (const [src, n] of Object.entries(x.perSource)) perSource[src] = (perSource[src] ?? 0) + n;
      log(`connecting: ${sum(st.map((x) => x.subscribed))} joined after ${((performance.now() - tC0) / 1000).toFixed(0)} s, ` +
        `${sum(st.map((x) => x.reconnects))} reconnects, closes ${JSON.stringify(Object.assign({}, ...st.map((x) => x.closes)))}, ` +
        `load CPU ${children.map((c) => c.cpuSeconds().toFixed(0)).join('/')} s, gateways ${sum(nodeCpu()).toFixed(0)} s`);
    }
  })();
  const setups = await Promise.all(subsProcs.map((c, i) => c.call<SetupResult>({
    op: 'setup', mix, idBase: sum(counts.slice(0, i)), count: counts[i]!, sources: [...SCALE_SOURCES], nodes: nodesMsg(), concurrency: cfg.concurrency,
    timeoutMs: setupTimeout,
  }, setupTimeout + 30_000))).finally(() => { connecting = false; });
  await progress;
  const connectS = (performance.now() - tC0) / 1000;
  const connectCpuS = sum(nodeCpu()) - cpuC0;
  const connectBusyS = machineBusySeconds() - busyC0;
  const subscribed0 = sum(setups.map((s) => s.subscribed));
  const connectHist = summarize(mergeEncoded(setups.map((s) => s.hist)));
  log(`connected and joined ${subscribed0}/${cfg.sockets} in ${connectS.toFixed(1)} s (gateway CPU ${connectCpuS.toFixed(1)} s, ` +
    `machine ${(connectBusyS / connectS).toFixed(2)} cores); p99 socket-to-joined ${fmtUs(connectHist.p99Us)}`);
  if (subscribed0 < cfg.sockets) {
    const reasons: Record<string, number> = {};
    for (const s of setups) for (const [k, v] of Object.entries(s.reasons)) reasons[k] = (reasons[k] ?? 0) + v;
    throw new Error(`only ${subscribed0} of ${cfg.sockets} sockets joined their topics: ${JSON.stringify(reasons)}`);
  }
  await sleep(3000);
  const statuses0 = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 10_000)));
  const perNode0 = nodes.map((_, k) => sum(statuses0.map((s) => s.perNode[k] ?? 0)));
  const rssJoined = await Promise.all(nodes.map((n) => n.srv.minRssBytes(2000)));
  const rssPerSocket = nodes.map((_, k) => (rssJoined[k]! - rssBase[k]!) / perNode0[k]!);
  const rssPerSocketAll = (sum(rssJoined) - sum(rssBase)) / sum(perNode0);
  const loadRss = subsProcs.map((c) => safe(() => rssBytes(c.pid)));
  const redisMem = await redis.cli('info', 'memory');
  const redisUsed = Number(/^used_memory:(\d+)/m.exec(redisMem)?.[1] ?? NaN);
  log(`RSS per socket: ${fmtBytes(rssPerSocketAll)} over all nodes; per node ${rssPerSocket.map((b) => fmtBytes(b)).join(', ')}; load processes ${loadRss.map((b) => fmtBytes(b)).join(', ')}; ` +
    `redis used_memory ${fmtBytes(redisUsed)}`);

  // ---- the sampled phases ----
  const timeline: ScalePoint[] = [];
  const phaseHist = new Map<string, Histogram>();
  const phaseBig = new Map<string, Histogram>();
  const phaseAck = new Map<string, Histogram>();
  let phase = 'idle';
  let maxFds = nodes.map((n) => fdCount(n.srv.pid));
  let maxLoadFds = 0;
  let maxPerSource = 0;
  let maxMemUsed = 0;
  const read = async (): Promise<{ t: number; marks: ScaleMark[]; pub: PubStatus; status: ScaleStatus[]; cpu: number[]; redisCpu: number; load: number; busy: number; calls: Record<string, number> }> => {
    const [marks, pub, status, stats] = await Promise.all([
      Promise.all(subsProcs.map((c) => c.call<ScaleMark>({ op: 'mark' }, 20_000))),
      pubProc.call<PubStatus>({ op: 'pubStatus' }, 20_000),
      Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 20_000))),
      redis.cli('info', 'commandstats'),
    ]);
    return {
      t: performance.now(), marks, pub, status, cpu: nodeCpu(), redisCpu: cpuSeconds(redisPid), load: sum(children.map((c) => c.cpuSeconds())),
      busy: machineBusySeconds(), calls: redisCalls(stats),
    };
  };
  let prev = await read();
  const t0 = prev.t;
  const tick = async (): Promise<ScalePoint> => {
    const cur = await read();
    const at = phase;
    const wallS = (cur.t - prev.t) / 1000;
    const d = (k: 'big' | 'room' | 'feed'): number => sum(cur.marks.map((m) => m[k])) - sum(prev.marks.map((m) => m[k]));
    const h = mergeEncoded(cur.marks.map((m) => m.hist));
    const hb = mergeEncoded(cur.marks.map((m) => m.bigHist));
    const ha = mergeEncoded([cur.pub.ackHist]);
    for (const [map, x] of [[phaseHist, h], [phaseBig, hb], [phaseAck, ha]] as const) {
      let acc = map.get(at);
      if (acc === undefined) map.set(at, (acc = newHistogram()));
      acc.add(x);
    }
    const lat = summarize(h);
    const fds = nodes.map((n) => (n.srv.alive ? fdCount(n.srv.pid) : 0));
    maxFds = maxFds.map((m, k) => Math.max(m, fds[k]!));
    maxLoadFds = Math.max(maxLoadFds, ...children.map((c) => fdCount(c.pid)));
    const perSource: Record<string, number> = {};
    for (const s of cur.status) for (const [src, n] of Object.entries(s.perSource)) perSource[src] = (perSource[src] ?? 0) + n;
    maxPerSource = Math.max(maxPerSource, ...Object.values(perSource));
    const mem = meminfo();
    maxMemUsed = Math.max(maxMemUsed, mem.used);
    const published = sum(Object.values(cur.pub.sent)) - sum(Object.values(prev.pub.sent));
    const p: ScalePoint = {
      t: round((cur.t - t0) / 1000, 2), phase: at, wallS: round(wallS, 3),
      deliveries: d('big') + d('room') + d('feed'), big: d('big'), room: d('room'), feed: d('feed'), published,
      gatewayCpuS: round(sum(cur.cpu) - sum(prev.cpu), 2), redisCpuS: round(cur.redisCpu - prev.redisCpu, 2), loadCpuS: round(cur.load - prev.load, 2),
      machineBusyS: round(cur.busy - prev.busy, 2), redisCalls: sum(Object.values(cur.calls)) - sum(Object.values(prev.calls)),
      p50Us: num(lat.p50Us), p99Us: num(lat.p99Us), subscribed: sum(cur.status.map((s) => s.subscribed)),
      gatewayRssBytes: sum(nodes.map((n) => (n.srv.alive ? safe(() => n.srv.rssBytes()) : 0))), maxGatewayFds: Math.max(...fds), memUsedBytes: mem.used,
    };
    timeline.push(p);
    prev = cur;
    return p;
  };
  let sampling = true;
  let ticked: Array<() => void> = [];
  const nextTick = (): Promise<void> => new Promise((r) => { ticked.push(r); });
  const sampler = (async (): Promise<void> => {
    while (sampling) {
      await sleep(cfg.sampleMs);
      if (!sampling) break;
      const p = await tick();
      const waiting = ticked;
      ticked = [];
      for (const w of waiting) w();
      if (p.phase !== 'restart' || timeline.length % 5 === 0) {
        log(`[${p.phase}] t=${p.t}s ${fmtInt(p.deliveries / p.wallS)} deliveries/s, p99 ${fmtUs(p.p99Us ?? NaN)}, gateways ${(p.gatewayCpuS / p.wallS).toFixed(2)} ` +
          `redis ${(p.redisCpuS / p.wallS).toFixed(2)} load ${(p.loadCpuS / p.wallS).toFixed(2)} machine ${(p.machineBusyS / p.wallS).toFixed(2)} cores; ${p.subscribed} subscribed`);
      }
    }
  })();
  // Phases change right after a sample, so that every sample lies in one phase; each change keeps Redis's calls and the load processes' CPU then.
  const edges: Array<{ phase: string; calls: Record<string, number>; loadCpu: number[] }> = [];
  const switchTo = async (name: string, rates?: Rates): Promise<void> => {
    await nextTick();
    if (rates !== undefined) await pubProc.call({ op: 'rates', rates }, 10_000);
    phase = name;
    edges.push({ phase: name, calls: { ...prev.calls }, loadCpu: children.map((c) => c.cpuSeconds()) });
  };
  const during = async (name: string, ms: number, rates?: Rates): Promise<void> => {
    await switchTo(name, rates);
    await sleep(ms);
  };
  const scaled = (m: number): Rates => ({ big: cfg.rates.big * m, room: cfg.rates.room * m, feed: cfg.rates.feed * m });
  await during('idle', cfg.idleS * 1000);
  await during('warm', cfg.warmS * 1000, cfg.rates);
  await during('steady', cfg.steadyS * 1000);
  // Each class alone at its steady rate: what a delivery costs (the big topic: one event to every socket) apart from what a published event costs.
  if (cfg.apartS > 0) {
    await during('big only', cfg.apartS * 1000, { big: cfg.rates.big, room: 0, feed: 0 });
    await during('rooms only', cfg.apartS * 1000, { big: 0, room: cfg.rates.room, feed: 0 });
    await during('feeds only', cfg.apartS * 1000, { big: 0, room: 0, feed: cfg.rates.feed });
    await during('settle', 6000, cfg.rates);
  }
  for (const m of cfg.ramp) await during(`ramp x${m}`, cfg.rampS * 1000, scaled(m));
  if (cfg.ramp.length > 0) await during('settle', 10_000, cfg.rates);

  // ---- rolling restart ----
  const steps: Array<Record<string, number>> = [];
  const restartProblems: string[] = [];
  if (cfg.restart) {
    await switchTo('restart');
    for (let k = 0; k < nodes.length; k++) {
      const st = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 10_000)));
      const onNode = sum(st.map((x) => x.perNode[k] ?? 0));
      state.up[k] = false;
      await broadcast();
      const old = nodes[k]!;
      const tSig = performance.now();
      // Sockets joined, every 250 ms from the SIGTERM on: the dip and the way back.
      let minBack = cfg.sockets;
      let dipped = false;
      let t99 = NaN;
      let back = 0;
      let polling = true;
      const poll = (async (): Promise<void> => {
        const deadline = tSig + cfg.sockets / cfg.drainRate * 1000 + 180_000;
        while (polling && performance.now() < deadline) {
          const ss = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 10_000)));
          back = sum(ss.map((x) => x.subscribed));
          minBack = Math.min(minBack, back);
          if (cfg.sockets - back > onNode * 0.01) dipped = true;
          else if (dipped && !Number.isFinite(t99)) t99 = performance.now() - tSig;
          if (dipped && back >= cfg.sockets) break;
          nodeCpuS(old);
          await sleep(250);
        }
      })();
      old.srv.gw.signal('SIGTERM');
      const exited = await old.srv.waitExit(cfg.sockets / cfg.drainRate * 1000 + 60_000);
      const drainMs = performance.now() - tSig;
      const end = await old.srv.stop(1000);
      const srv = await ServerProc.start(spec, 60_000, env);
      nodes[k] = { srv, cpuBefore: old.cpuBefore + old.lastSeen, lastSeen: 0 };
      state.ports[k] = srv.port;
      state.up[k] = true;
      state.prefer = k;
      await broadcast();
      const startedMs = performance.now() - tSig;
      await poll;
      polling = false;
      const allMs = performance.now() - tSig;
      steps.push({
        node: k, dropped: onNode, drainMs: round(drainMs), exitCode: end.code ?? -1, exited: exited ? 1 : 0, restartedMs: round(startedMs),
        back99Ms: round(t99), backAllMs: back >= cfg.sockets ? round(allMs) : NaN, back, minJoined: minBack,
      });
      log(`restart node ${k}: ${onNode} sockets drained in ${(drainMs / 1000).toFixed(1)} s (exit ${String(end.code)}), new process after ${(startedMs / 1000).toFixed(1)} s, ` +
        `fewest joined ${minBack}, 99% back ${(t99 / 1000).toFixed(1)} s, ${back}/${cfg.sockets} back after ${(allMs / 1000).toFixed(1)} s`);
      if (back < cfg.sockets) {
        // Measured on, not thrown: what the run saw until then is kept, and the check below counts what the missing sockets lost.
        restartProblems.push(`after restarting node ${k} only ${back} of ${cfg.sockets} sockets came back in time`);
        break;
      }
    }
  }
  await during('tail', cfg.tailS * 1000);
  await switchTo('final');
  const fin = await pubProc.call<PubFinal>({ op: 'drainPublishes', timeoutMs: 30_000 }, 40_000);
  // Until deliveries stop: two looks a second apart with nothing new, every socket joined.
  let last = -1;
  for (let i = 0; i < 30; i++) {
    await sleep(1000);
    const st = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 10_000)));
    const delivered = sum(st.map((x) => x.delivered));
    if ((restartProblems.length > 0 || sum(st.map((x) => x.subscribed)) >= cfg.sockets) && delivered === last) break;
    last = delivered;
  }
  sampling = false;
  await sampler;
  const verify = await Promise.all(subsProcs.map((c) => c.call<VerifyResult>({
    op: 'verify', bigPublished: fin.bigPublished, roomPublished: fin.roomPublished, unackedBig: fin.unackedBig, unackedRoom: fin.unackedRoom,
  }, 60_000)));
  const finalStatus = await Promise.all(subsProcs.map((c) => c.call<ScaleStatus>({ op: 'status' }, 10_000)));
  const gone = nodes.filter((n) => !n.srv.alive);
  const lost = sum(verify.map((v) => v.lost));
  const unacked = fin.unackedBig.length + sum(Object.values(fin.unackedRoom).map((v) => v.length));
  log(`publishes: ${JSON.stringify(fin.status.sent)} sent, ${JSON.stringify(fin.status.acked)} acked, ${unacked} durable without ack; ` +
    `resent ${fin.status.resent}; errors ${JSON.stringify(fin.status.errors)}`);
  log(`verify: ${sum(verify.map((v) => v.subscriptions))} durable subscriptions, ${lost} acknowledged (subscription, event) pairs lost, ` +
    `${sum(verify.map((v) => v.duplicates))} duplicates, ${sum(verify.map((v) => v.late))} late; ${verify.flatMap((v) => v.lostExamples).slice(0, 5).join(' | ')}`);

  // ---- the numbers ----
  const pts = (name: string): ScalePoint[] => timeline.filter((p) => p.phase === name);
  const total = (ps: readonly ScalePoint[], k: keyof ScalePoint): number => sum(ps.map((p) => Number(p[k])));
  const steady = pts('steady');
  if (steady.length === 0) throw new Error('no sample fell in the steady window: --seconds too short for --sample-ms');
  const wallS = total(steady, 'wallS');
  const deliveries = total(steady, 'deliveries');
  const gwCpu = total(steady, 'gatewayCpuS');
  const redisCpu = total(steady, 'redisCpuS');
  const published = total(steady, 'published');
  const redisCallsN = total(steady, 'redisCalls');
  const idle = pts('idle');
  const idleCores = idle.length === 0 ? NaN : total(idle, 'gatewayCpuS') / total(idle, 'wallS');
  const idleCpuPerSocketUs = ((idleCores - bareCores) / cfg.sockets) * 1e6;
  const steadyLat: LatencySummary = summarize(phaseHist.get('steady') ?? newHistogram());
  const bigLat = summarize(phaseBig.get('steady') ?? newHistogram());
  const ackLat = summarize(phaseAck.get('steady') ?? newHistogram());
  const restartLat = summarize(phaseHist.get('restart') ?? newHistogram());
  const expected = deliveriesPerSecond(mix, cfg.rates);
  const callsByCmd: Record<string, number> = {};
  const si = edges.findIndex((x) => x.phase === 'steady');
  const cs = edges[si]!;
  const ce = edges[si + 1]!;
  for (const [cmd, n] of Object.entries(ce.calls)) {
    const dlt = n - (cs.calls[cmd] ?? 0);
    if (dlt > 0) callsByCmd[cmd] = round(dlt / published, 3);
  }
  const cores = availableParallelism();
  const usage: Usage = {
    cpuCores: total(steady, 'machineBusyS') / wallS, cores, memUsedBytes: maxMemUsed, memTotalBytes: meminfo().total,
    redisCores: redisCpu / wallS, portsPerSource: maxPerSource, portRange: portRange(),
    gatewayFds: Math.max(...maxFds), loadFds: maxLoadFds, fdLimit: fdLimit(nodes[0]!.srv.pid),
  };
  const lim = limits(usage);
  const ramps = cfg.ramp.map((m) => {
    const ps = pts(`ramp x${m}`);
    const w = total(ps, 'wallS');
    const lat = summarize(phaseHist.get(`ramp x${m}`) ?? newHistogram());
    return `x${m}: ${fmtInt(total(ps, 'deliveries') / w)}/s of ${fmtInt(deliveriesPerSecond(mix, scaled(m)).total)}/s wanted, p99 ${fmtUs(lat.p99Us)}, ` +
      `machine ${(total(ps, 'machineBusyS') / w).toFixed(2)} cores, gateways ${(total(ps, 'gatewayCpuS') / w).toFixed(2)}`;
  });
  // Above the idle gateways: per delivery from the big topic alone, then per event of each class after its deliveries.
  const apart = (name: string): { wall: number; cpu: number; redis: number; d: number; e: number; calls: number } => {
    const ps = pts(name);
    const wall = total(ps, 'wallS');
    return { wall, cpu: total(ps, 'gatewayCpuS') - idleCores * wall, redis: total(ps, 'redisCpuS'), d: total(ps, 'deliveries'), e: total(ps, 'published'), calls: total(ps, 'redisCalls') };
  };
  const ab = apart('big only');
  const ar = apart('rooms only');
  const af = apart('feeds only');
  const perDeliveryUs = (ab.cpu / ab.d) * 1e6;
  const perDurableUs = ((ar.cpu - (ab.cpu / ab.d) * ar.d) / ar.e) * 1e6;
  const perKeyedUs = ((af.cpu - (ab.cpu / ab.d) * af.d) / af.e) * 1e6;
  const loadCpuS = ce.loadCpu.map((c, i) => c - (cs.loadCpu[i] ?? 0));
  const problems: string[] = [];
  problems.push(...restartProblems);
  if (lost > 0) problems.push(`${lost} acknowledged (subscription, event) pairs lost`);
  if (gone.length > 0) problems.push(`${gone.length} node(s) not running at the end`);
  const closes: Record<string, number> = {};
  for (const s of finalStatus) for (const [k, v] of Object.entries(s.closes)) closes[k] = (closes[k] ?? 0) + v;
  const joinErrors: Record<string, number> = {};
  for (const s of finalStatus) for (const [k, v] of Object.entries(s.joinErrors)) joinErrors[k] = (joinErrors[k] ?? 0) + v;
  const s: Sample = {
    scenario: 'S16', variant: variantOf(cfg), target: 'sluice', repeat: 0,
    ...measuredFields({ count: deliveries, wallS, serverCpuS: gwCpu, clientCpuS: loadCpuS, machineBusyS: total(steady, 'machineBusyS') }, problems),
    latency: steadyLat,
    extra: {
      sockets: cfg.sockets, nodes: cfg.nodes, procs: cfg.procs, rooms: rooms(mix), roomSize: cfg.roomSize, feeds: cfg.feeds,
      rateBig: cfg.rates.big, rateRoom: cfg.rates.room, rateFeed: cfg.rates.feed, size: cfg.size, steadyS: round(wallS, 1),
      expectedPerS: round(expected.total), deliveredShare: round(deliveries / wallS / expected.total, 4),
      connectS: round(connectS, 1), connectGatewayCpuUsPerSocket: round((connectCpuS / cfg.sockets) * 1e6, 1), connectP99Us: num(connectHist.p99Us),
      rssPerSocketBytes: round(median(rssPerSocket)), rssPerSocketMinBytes: round(Math.min(...rssPerSocket)), rssPerSocketMaxBytes: round(Math.max(...rssPerSocket)),
      rssPerSocketByNode: JSON.stringify(rssPerSocket.map((b) => round(b))), socketsByNode: JSON.stringify(perNode0),
      rssPerSocketAllBytes: round(rssPerSocketAll), rssPerSocketSteadyBytes: round((Math.min(...steady.map((p) => p.gatewayRssBytes)) - sum(rssBase)) / cfg.sockets),
      rssBaseBytes: round(median(rssBase)), rssJoinedTotalBytes: sum(rssJoined),
      loadRssPerSocketBytes: round(sum(loadRss) / cfg.sockets), redisUsedMemoryBytes: redisUsed,
      idleCpuUsPerSocketS: num(round(idleCpuPerSocketUs, 3)), bareGatewayCores: round(bareCores, 3), idleGatewayCores: num(round(idleCores, 3)),
      gatewayCpuUsPerDelivery: round((gwCpu / deliveries) * 1e6, 3),
      apartDeliveryUs: num(round(perDeliveryUs, 3)), apartDurableEventUs: num(round(perDurableUs, 1)), apartKeyedEventUs: num(round(perKeyedUs, 1)),
      apartBigPerS: num(round(ab.d / ab.wall)), apartBigCores: num(round(ab.cpu / ab.wall, 3)),
      apartRedisDurableUs: num(round((ar.redis / ar.e) * 1e6, 1)), apartRedisKeyedUs: num(round((af.redis / af.e) * 1e6, 1)),
      apartRedisBigUs: num(round((ab.redis / ab.e) * 1e6, 1)),
      apartCallsDurable: num(round(ar.calls / ar.e, 2)), apartCallsKeyed: num(round(af.calls / af.e, 2)), gatewayUtil: round(gwCpu / wallS, 3),
      redisUtil: round(redisCpu / wallS, 3), redisCpuUsPerEvent: num(round((redisCpu / published) * 1e6, 1)),
      redisCallsPerEvent: num(round(redisCallsN / published, 3)), redisCallsByCommand: JSON.stringify(callsByCmd),
      publishedPerS: round(published / wallS, 1), loadUtil: round(total(steady, 'loadCpuS') / wallS, 3),
      machineUtil: round(usage.cpuCores, 3),
      otherCores: round(Math.max(0, total(steady, 'machineBusyS') - gwCpu - redisCpu - total(steady, 'loadCpuS')) / wallS, 3),
      quietWaitMs: quiet.waitedMs, quietBusyCores: quiet.busyCores, bigP50Us: num(bigLat.p50Us), bigP99Us: num(bigLat.p99Us), ackP50Us: num(ackLat.p50Us), ackP99Us: num(ackLat.p99Us),
      restartP99Us: num(restartLat.p99Us),
      firstLimit: lim[0]!.resource, limits: lim.map((l) => `${l.resource} ${(l.share * 100).toFixed(0)}% (${l.detail})`).join('; '),
      maxGatewayFds: Math.max(...maxFds), maxLoadFds, maxPerSource, memUsedMaxBytes: maxMemUsed,
      ramp: ramps.join('; '),
      restartSteps: JSON.stringify(steps),
      restartBack99MaxMs: steps.length === 0 ? null : Math.max(...steps.map((x) => x.back99Ms!)),
      restartBackAllMaxMs: steps.length === 0 ? null : Math.max(...steps.map((x) => x.backAllMs!)),
      restartDrainMaxMs: steps.length === 0 ? null : Math.max(...steps.map((x) => x.drainMs!)),
      sent: JSON.stringify(fin.status.sent), acked: JSON.stringify(fin.status.acked), ackedDurable: fin.status.acked.big + fin.status.acked.room,
      unackedDurable: unacked, resent: fin.status.resent, pubErrors: JSON.stringify(fin.status.errors),
      durableSubscriptions: sum(verify.map((v) => v.subscriptions)), lostPairs: lost, duplicates: sum(verify.map((v) => v.duplicates)),
      late: sum(verify.map((v) => v.late)), feedSkipped: sum(verify.map((v) => v.feedSkipped)),
      recoveredFalse: sum(finalStatus.map((x) => x.recoveredFalse)), reconnects: sum(finalStatus.map((x) => x.reconnects)),
      closes: JSON.stringify(closes), joinErrors: JSON.stringify(joinErrors), redisVersion,
    },
    timeline,
  };
  return s;
}

function safe(f: () => number): number {
  try { return f(); } catch { return 0; }
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
