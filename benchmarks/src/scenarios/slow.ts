// S6 slow consumers (issue 4): one publisher, `healthy` subscribers and
// `stalled` subscribers on one topic. A stalled subscriber completes the
// handshake and the join, then never reads its TCP socket again. Every second:
// the server's RSS, and the healthy subscribers' publish-to-receive latency
// (an HDR histogram per second). The same run without the stalled subscribers,
// on a fresh server of the same target, gives the baseline p99.
//
// The publisher runs as fast as the healthy subscribers take it: `depth`
// publishes awaiting their reply and at most `window` events ahead of the
// slowest *healthy* subscriber (the S3 credit; stalled ones are not asked).
// Without that bound the healthy subscribers' own processes would fall behind
// on this 2-core machine and become slow consumers themselves.
//
// Bounded: `seconds` of publishing, and earlier when the server's RSS passes
// `rssLimitMiB` (the `ws` peer buffers every event for every stalled socket),
// when the server dies, a healthy subscriber is closed, or no event reached
// every healthy subscriber for 5 s. Stalled sockets are never reconnected; at
// the end they read again for a bounded time, so that the close frame queued
// behind their backlog is seen, and the closes are counted by code.

import { readFileSync } from 'node:fs';
import type { ConnectResult, JoinResult, MarkResult, StopResult, UnstallResult } from '../loadgen/messages.ts';
import { FullDelivery, LoadPool, split } from '../loadgen/pool.ts';
import { mergeEncoded, summarize, type LatencySummary } from '../lib/hist.ts';
import { ServerProc, type TargetSpec } from '../lib/server.ts';
import { machineBusySeconds } from '../lib/proc.ts';
import { metricByLabel, metricSum } from '@sluice/gateway/testing';
import { closesByCode, secondHalfSlope } from '../lib/series.ts';
import { interleave, measuredFields, otherUtil, sleep, type RunOptions, type Sample } from './common.ts';

export interface SlowConfig {
  healthy: number;
  stalled: number;
  /** Payload (`data`) bytes. */
  size: number;
  /** Publishing time per run (with and without stalled subscribers). */
  seconds: number;
  /** Publishes awaiting their reply. */
  depth: number;
  /** Events the publisher may run ahead of the slowest healthy subscriber; 0: no credit, only `depth` acks in flight. */
  window: number;
  /** Healthy subscriber processes (the publisher and the stalled subscribers get one each). */
  procs: number;
  /** Stop a run early when the server's RSS passes this. */
  rssLimitMiB: number;
  /** Seconds at the start of publishing left out of the overall latency. */
  warmupS: number;
  /** Time the stalled sockets get at the end to read up to the close frame. */
  drainMs: number;
}

export const S6_DEFAULT: SlowConfig = {
  healthy: 1000, stalled: 200, size: 300, seconds: 60, depth: 8, window: 64, procs: 2, rssLimitMiB: 2048, warmupS: 2, drainMs: 5000,
};

const TOPIC = 'slow';
const NO_PROGRESS_MS = 5000;
const MIB = 1 << 20;

/** One second of a run. */
export interface SlowSecond {
  /** Seconds since publishing started. */
  t: number;
  rssBytes: number;
  /** Events received by the healthy subscribers in this second. */
  deliveries: number;
  publishes: number;
  p50Us: number;
  p99Us: number;
  maxUs: number;
  /** Server CPU and the rest of the machine's CPU (kernel softirq work on loopback included) in this second, in cores. */
  serverCpu: number;
  otherCpu: number;
  /** Gateway only (from /metrics): sockets it closed so far by reason, sockets in the slow lane, unsent bytes. */
  closedByGateway?: Record<string, number>;
  slowLaneSockets?: number;
  bufferedBytes?: number;
}

export function variantOf(cfg: SlowConfig, withStalled: boolean): string {
  return withStalled ? `${cfg.healthy} healthy + ${cfg.stalled} stalled` : `${cfg.healthy} healthy, no stalled`;
}

export async function runSlow(opts: RunOptions, cfg: SlowConfig): Promise<Sample[]> {
  // publisher, healthy subscriber processes, one process for the stalled subscribers
  const pool = await LoadPool.start(cfg.procs + 2, 30 * 60_000);
  const keys = [{ scenario: 'S6' as const, variant: variantOf(cfg, false) }, { scenario: 'S6' as const, variant: variantOf(cfg, true) }];
  try {
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      // The baseline on a server of its own, started and stopped here; then the run with stalled subscribers on `srv`.
      let base: Sample;
      const baseSrv = await ServerProc.start(spec);
      try {
        base = await slowOnce(pool, baseSrv, spec, repeat, cfg, false, opts.log);
      } finally {
        await baseSrv.stop();
      }
      opts.log(`  S6 ${spec.name} r${repeat}: baseline done, now with ${cfg.stalled} stalled subscribers`);
      const run = await slowOnce(pool, srv, spec, repeat, cfg, true, opts.log);
      const bp = base.latency?.p99Us ?? NaN;
      run.extra['baselineP99Us'] = Number.isFinite(bp) ? bp : null;
      const ratio = (run.latency?.p99Us ?? NaN) / bp;
      run.extra['p99VsBaseline'] = Number.isFinite(ratio) ? ratio : null;
      return [base, run];
    });
  } finally {
    await pool.close();
  }
}

async function gatewayMetrics(srv: ServerProc): Promise<Pick<SlowSecond, 'closedByGateway' | 'slowLaneSockets' | 'bufferedBytes'> | undefined> {
  if (!srv.spec.name.startsWith('sluice') || srv.adminPort === undefined) return undefined;
  try {
    const text = await (await fetch(`http://127.0.0.1:${srv.adminPort}/metrics`, { signal: AbortSignal.timeout(800) })).text();
    const closed = metricByLabel(text, 'sluice_clients_closed_total', 'reason');
    for (const k of Object.keys(closed)) if (closed[k] === 0) delete closed[k];
    return {
      closedByGateway: closed,
      slowLaneSockets: metricSum(text, 'sluice_slow_lane_sockets'),
      bufferedBytes: metricSum(text, 'sluice_buffered_bytes'),
    };
  } catch {
    return undefined;
  }
}

const TCP_KEYS = ['PruneCalled', 'RcvPruned', 'TCPRcvCollapsed', 'TCPRcvQDrop', 'TCPZeroWindowDrop', 'TCPToZeroWindowAdv'] as const;

function r2(x: number): number {
  return Math.round(x * 100) / 100;
}

/** TcpExt counters of /proc/net/netstat (this network namespace). */
function tcpExt(): Record<string, number> {
  try {
    const lines = readFileSync('/proc/net/netstat', 'latin1').split('\n').filter((l) => l.startsWith('TcpExt:'));
    if (lines.length < 2) return {};
    const names = lines[0]!.split(/\s+/).slice(1);
    const vals = lines[1]!.split(/\s+/).slice(1).map(Number);
    return Object.fromEntries(names.map((n, i) => [n, vals[i] ?? 0]));
  } catch {
    return {};
  }
}

async function slowOnce(
  pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: SlowConfig, withStalled: boolean, log: (line: string) => void,
): Promise<Sample> {
  const publisher = pool.procs[0]!;
  const healthyProcs = pool.procs.slice(1, 1 + cfg.procs);
  const stalledProc = pool.procs[1 + cfg.procs]!;
  const counts = split(cfg.healthy, healthyProcs.length);
  const delivery = new FullDelivery(healthyProcs, publisher, cfg.window > 0 ? cfg.window : undefined);
  const isHealthy = (i: number): boolean => i >= 1 && i <= cfg.procs;
  const variant = variantOf(cfg, withStalled);
  try {
    const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
    const countOf = (i: number): number => (i === 0 ? 1 : isHealthy(i) ? counts[i - 1]! : withStalled ? cfg.stalled : 0);
    const want = 1 + cfg.healthy + (withStalled ? cfg.stalled : 0);
    let idBase = 0;
    const bases = pool.procs.map((p) => { const b = idBase; idBase += countOf(p.index); return b; });
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target, count: countOf(p.index), idBase: bases[p.index]!,
      sources: ['127.0.0.1', '127.0.0.2'], concurrency: 200, timeoutMs: 20_000,
    }), 30_000);
    const ready = conn.reduce((a, c) => a + c.ready, 0);
    if (ready < want) throw new Error(`only ${ready}/${want} sockets connected: ${JSON.stringify(conn.map((c) => c.reasons))}`);
    const joins = await pool.all<JoinResult>(() => ({ op: 'join', topic: TOPIC, timeoutMs: 15_000 }), 20_000);
    const joined = joins.reduce((a, j) => a + j.joined, 0);
    if (joined < want) throw new Error(`only ${joined}/${want} joins succeeded`);
    const paused = withStalled ? await stalledProc.call<number>({ op: 'stall' }) : 0;

    await sleep(1000);
    const idleRss = await srv.minRssBytes(1000);

    await Promise.all(healthyProcs.map((p) => p.call({ op: 'track' })));
    const markHealthy = (): Promise<MarkResult[]> => Promise.all(healthyProcs.map((p) => p.call<MarkResult>({ op: 'mark' }, 20_000)));
    await markHealthy(); // empties the histograms
    await publisher.call({ op: 'mark' });
    const t0 = performance.now();
    const busy0 = machineBusySeconds();
    const cpu0 = srv.cpuSeconds();
    const gen0 = pool.cpuSeconds();
    delivery.at = t0;
    await publisher.call({ op: 'publish', topic: TOPIC, depth: cfg.depth, size: cfg.size, ephemeral: false, credit: cfg.window > 0 ? cfg.window - 1 : Number.MAX_SAFE_INTEGER });

    const timeline: SlowSecond[] = [];
    const overallHists: string[] = [];
    let prevEvents = 0;
    let prevCpu = cpu0;
    let prevBusy = busy0;
    let prevGen = gen0;
    let prevT = t0;
    const tcp0 = tcpExt();
    let prevPublishes = 0;
    let stoppedEarly: string | null = null;
    let lastHealthy: MarkResult[] = [];
    let lastPub: MarkResult | undefined;
    for (let sec = 1; sec <= cfg.seconds; sec++) {
      const due = t0 + sec * 1000;
      while (performance.now() < due) {
        await sleep(Math.max(1, Math.min(250, due - performance.now())));
        if (!srv.alive) break;
      }
      if (!srv.alive) { stoppedEarly = `server exited at ${sec} s`; break; }
      const rssBytes = srv.rssBytes();
      const nowT = performance.now();
      const cpuNow = srv.cpuSeconds();
      const busyNow = machineBusySeconds();
      const genNow = pool.cpuSeconds();
      const dt = (nowT - prevT) / 1000;
      const secCpu = { serverCpu: r2((cpuNow - prevCpu) / dt), otherCpu: r2(otherUtil(busyNow - prevBusy, cpuNow - prevCpu, genNow.map((g, i) => g - (prevGen[i] ?? 0)), dt)) };
      prevCpu = cpuNow; prevBusy = busyNow; prevGen = genNow; prevT = nowT;
      const [hm, pm, gm] = await Promise.all([markHealthy(), publisher.call<MarkResult>({ op: 'mark' }), gatewayMetrics(srv)]);
      lastHealthy = hm;
      lastPub = pm;
      const events = hm.reduce((a, m) => a + m.events, 0);
      const lat = summarize(mergeEncoded(hm.map((m) => m.hist)));
      if (sec > cfg.warmupS) overallHists.push(...hm.map((m) => m.hist));
      timeline.push({
        t: Math.round((performance.now() - t0) / 100) / 10, rssBytes, deliveries: events - prevEvents, publishes: pm.publishes - prevPublishes,
        p50Us: lat.p50Us, p99Us: lat.p99Us, maxUs: lat.maxUs, ...secCpu, ...(gm ?? {}),
      });
      prevEvents = events;
      prevPublishes = pm.publishes;
      const last = timeline.at(-1)!;
      if (sec % 5 === 0 || sec === 1) {
        log(`    S6 ${spec.name} ${withStalled ? 'stalled' : 'baseline'} ${sec}s: RSS ${(rssBytes / MIB).toFixed(0)} MiB, ${last.deliveries}/s deliveries, ` +
          `p99 ${(last.p99Us / 1000).toFixed(1)} ms${gm !== undefined ? `, slow lane ${gm.slowLaneSockets}, gateway closed ${JSON.stringify(gm.closedByGateway)}` : ''}`);
      }
      if (rssBytes > cfg.rssLimitMiB * MIB) { stoppedEarly = `RSS ${(rssBytes / MIB).toFixed(0)} MiB passed the ${cfg.rssLimitMiB} MiB limit at ${sec} s`; break; }
      const healthyClosed = hm.reduce((a, m) => a + m.closed, 0);
      if (healthyClosed > 0) { stoppedEarly = `${healthyClosed} healthy subscribers closed at ${sec} s: ${JSON.stringify(hm.map((m) => m.closeReasons))}`; break; }
      if (performance.now() - delivery.at > NO_PROGRESS_MS) { stoppedEarly = `no event reached every healthy subscriber for ${NO_PROGRESS_MS} ms at ${sec} s`; break; }
    }
    const t1 = performance.now();
    const busy1 = machineBusySeconds();
    const cpu1 = srv.alive ? srv.cpuSeconds() : cpu0;
    const gen1 = pool.cpuSeconds();
    const tcp1 = tcpExt();
    const stops = await publisher.call<StopResult>({ op: 'stop', timeoutMs: 5_000 }, 10_000);
    const finalGateway = srv.alive ? await gatewayMetrics(srv) : undefined;
    let seen: UnstallResult | undefined;
    if (withStalled) seen = await stalledProc.call<UnstallResult>({ op: 'unstall', timeoutMs: cfg.drainMs }, cfg.drainMs + 10_000);

    const wallS = (t1 - t0) / 1000;
    const serverCpuS = cpu1 - cpu0;
    const clientCpuS = gen1.map((g, i) => g - (gen0[i] ?? 0));
    const count = lastHealthy.reduce((a, m) => a + m.events, 0);
    const gaps = lastHealthy.reduce((a, m) => a + m.gaps, 0);
    const duplicates = lastHealthy.reduce((a, m) => a + m.duplicates, 0);
    const latency: LatencySummary = summarize(mergeEncoded(overallHists));
    const rss = timeline.map((s) => s.rssBytes);
    const maxRss = rss.length > 0 ? Math.max(...rss) : NaN;
    const at10 = timeline.find((s) => s.t >= 10)?.rssBytes ?? NaN;
    const slope = secondHalfSlope(timeline.map((s) => ({ x: s.t, y: s.rssBytes })));
    const problems: string[] = [];
    if (gaps > 0) problems.push(`${gaps} events missing at healthy subscribers`);
    if (duplicates > 0) problems.push(`${duplicates} duplicate events at healthy subscribers`);
    if ((lastPub?.replyErrors ?? 0) > 0) problems.push(`${lastPub!.replyErrors} error replies to the publisher`);
    if (count === 0) problems.push('no deliveries');
    // Stopping at the RSS limit is the bound working, not a failure; the others are.
    if (stoppedEarly !== null && !stoppedEarly.startsWith('RSS')) problems.push(stoppedEarly);
    const closesSeen = seen === undefined ? {} : closesByCode(seen.closeReasons);
    const extra: Sample['extra'] = {
      healthy: cfg.healthy, stalled: withStalled ? paused : 0, payloadBytes: cfg.size, depth: cfg.depth, window: cfg.window,
      plannedSeconds: cfg.seconds, ranSeconds: Math.round(wallS * 10) / 10, stoppedEarly,
      idleRssBytes: idleRss, maxRssBytes: maxRss, rssAt10sBytes: at10, rssEndBytes: rss.at(-1) ?? NaN,
      rssSlopeSecondHalfBytesPerS: slope,
      goalRssSlopeBytesPerS: withStalled ? slope : null,
      rssGrowthPerStalledBytes: withStalled && paused > 0 ? (maxRss - idleRss) / paused : null,
      rssBudgetBytes: withStalled ? idleRss + paused * 1.5 * MIB : null,
      publishes: lastPub?.publishes ?? 0, publishAcks: lastPub?.replies ?? 0, outstandingAtStop: stops.outstanding, gaps, duplicates,
      closedByGateway: finalGateway?.closedByGateway !== undefined ? JSON.stringify(finalGateway.closedByGateway) : null,
      closesSeenByStalled: withStalled ? JSON.stringify(closesSeen) : null,
      stalledStillOpen: seen?.open ?? null,
      // Kernel TCP work on loopback while publishing (/proc/net/netstat TcpExt): receive queues of non-reading sockets being pruned/collapsed.
      ...Object.fromEntries(TCP_KEYS.map((k) => [`tcp${k}`, (tcp1[k] ?? 0) - (tcp0[k] ?? 0)])),
    };
    return {
      scenario: 'S6', variant, target: spec.name, repeat,
      ...measuredFields({ count, wallS, serverCpuS, clientCpuS, machineBusyS: busy1 - busy0, serverThreads: spec.threads }, problems),
      latency,
      extra,
      timeline,
    };
  } finally {
    for (const p of healthyProcs) p.progress = null;
    await pool.all(() => ({ op: 'reset' }), 60_000);
  }
}
