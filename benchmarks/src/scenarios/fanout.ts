// S3 fan-out: one publisher, N subscribers on one topic. The publisher keeps
// `depth` publishes awaiting their reply and never runs more than `window`
// events ahead of the slowest subscriber (subscriber processes report the
// highest sequence every one of their sockets has received; the orchestrator
// turns the minimum into credit). So server buffers stay small, no server's
// slow-consumer policy is triggered, and every event counts exactly once.

import type { ConnectResult, JoinResult, MarkResult, StopResult } from '../loadgen/messages.ts';
import { FullDelivery, LoadPool, split } from '../loadgen/pool.ts';
import type { Proto } from '../lib/codec.ts';
import type { ServerProc, TargetName } from '../lib/server.ts';
import { diff, interleave, sleep, snapshot, type RunOptions, type Sample, type ScenarioId, type Snapshot, windowFields } from './common.ts';

export interface FanoutConfig {
  subscribers: number;
  depth: number;
  window: number;
  size: number;
  warmupMs: number;
  /**
   * Warm up until this many events reached every subscriber as well (S8: the
   * topic's history full, so that it is trimmed on every publish in the
   * window), for at most WARMUP_EVENTS_MAX_MS more.
   */
  warmupEvents?: number;
  measureMs: number;
  /** Subscriber processes; the publisher gets one more of its own. */
  procs: number;
  ephemeral: boolean;
  /**
   * S8: before publishing, the servers' CPU is read over this many ms with
   * every socket joined and no traffic (what the nodes cost at rest, paid
   * again by each node of a cluster); 0 or absent: not measured.
   */
  restMs?: number;
}

export const S3_DEFAULT: FanoutConfig = { subscribers: 2000, depth: 8, window: 8, size: 64, warmupMs: 1000, measureMs: 3000, procs: 2, ephemeral: false };

const TOPIC = 'bench';
const STALL_MS = 3000;
const WARMUP_EVENTS_MAX_MS = 20_000;
const REST_SETTLE_MS = 1000;

export async function runFanout(opts: RunOptions, cfg: FanoutConfig): Promise<Sample[]> {
  const pool = await LoadPool.start(cfg.procs + 1, 30 * 60_000);
  try {
    return await interleave(opts, [{ scenario: 'S3', variant: `${cfg.size}B` }], async (srv, spec, repeat) => [
      (await fanoutOnce(pool, oneNode(srv), cfg, { scenario: 'S3', variant: `${cfg.size}B`, target: spec.name, repeat, threads: spec.threads })).sample,
    ]);
  } finally {
    await pool.close();
  }
}

/** The servers a fan-out run talks to: one (S3) or several nodes of a cluster (S8). */
export interface FanoutNodes {
  readonly proto: Proto;
  /** The port load-generator process `proc` connects to (0: the publisher). */
  portOf(proc: number): number;
  /** CPU seconds of every server process so far (all their threads). */
  cpuSeconds(): number;
  /** Read at both edges of the window, right after the CPU and the marks (S8: Redis CPU and command counters). */
  probe?: () => Promise<Record<string, number>>;
}

export function oneNode(srv: ServerProc): FanoutNodes {
  return { proto: srv.spec.proto, portOf: () => srv.port, cpuSeconds: () => srv.cpuSeconds() };
}

/** What a fan-out sample is filed under; `threads` is how many cores the servers can use (for `bound`). */
export interface FanoutKey {
  scenario: ScenarioId;
  variant: string;
  target: TargetName;
  repeat: number;
  threads: number;
}

export interface FanoutRun {
  sample: Sample;
  /** The window's edges, for whatever else a scenario reads from them (S8: latency per node). */
  a: Snapshot;
  b: Snapshot;
  /** `nodes.probe` at the window's edges (empty without a probe). */
  probeA: Record<string, number>;
  probeB: Record<string, number>;
}

export async function fanoutOnce(pool: LoadPool, nodes: FanoutNodes, cfg: FanoutConfig, key: FanoutKey): Promise<FanoutRun> {
  const publisher = pool.procs[0]!;
  const subProcs = pool.procs.slice(1);
  const counts = split(cfg.subscribers, subProcs.length);
  const delivery = new FullDelivery(subProcs, publisher, cfg.window);
  const edge = async (): Promise<[Snapshot, Record<string, number>]> => [await snapshot(nodes, pool), (await nodes.probe?.()) ?? {}];
  try {
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target: { host: '127.0.0.1', port: nodes.portOf(p.index), proto: nodes.proto },
      count: p.index === 0 ? 1 : counts[p.index - 1]!,
      idBase: p.index === 0 ? 0 : 1 + counts.slice(0, p.index - 1).reduce((a, b) => a + b, 0),
      sources: ['127.0.0.1', '127.0.0.2'], concurrency: 200, timeoutMs: 20_000,
    }));
    const ready = conn.reduce((a, c) => a + c.ready, 0);
    if (ready < cfg.subscribers + 1) throw new Error(`only ${ready}/${cfg.subscribers + 1} sockets connected: ${JSON.stringify(conn.map((c) => c.reasons))}`);
    // The publisher joins too (a gateway may require it); its own events are not counted.
    const joins = await pool.all<JoinResult>(() => ({ op: 'join', topic: TOPIC, timeoutMs: 15_000 }), 20_000);
    const joined = joins.reduce((a, j) => a + j.joined, 0);
    if (joined < cfg.subscribers + 1) throw new Error(`only ${joined}/${cfg.subscribers + 1} joins succeeded`);

    let restUtil = NaN;
    if ((cfg.restMs ?? 0) > 0) {
      // After the joins' own work has settled.
      await sleep(REST_SETTLE_MS);
      const c0 = nodes.cpuSeconds();
      const t0 = performance.now();
      await sleep(cfg.restMs!);
      restUtil = (nodes.cpuSeconds() - c0) / ((performance.now() - t0) / 1000);
    }
    await pool.all((p) => (p.index === 0 ? null : { op: 'track' }));
    await publisher.call({ op: 'publish', topic: TOPIC, depth: cfg.depth, size: cfg.size, ephemeral: cfg.ephemeral, credit: cfg.window - 1 });

    const stalled = async (ms: number): Promise<void> => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        await sleep(Math.min(250, Math.max(1, end - performance.now())));
        if (performance.now() - delivery.at > STALL_MS) {
          const m = await pool.all<MarkResult>(() => ({ op: 'mark' }));
          const subs = m.slice(1);
          throw new Error(`fan-out stalled: no event reached every subscriber for ${STALL_MS} ms (all have up to seq ${delivery.full}; ` +
            `published ${m[0]!.publishes}, acked ${m[0]!.replies}, ${m[0]!.replyErrors} error replies; subscribers: last seq ` +
            `${Math.min(...subs.map((x) => x.seqMin))} to ${Math.max(...subs.map((x) => x.seqMax))}, ${subs.reduce((a, x) => a + x.seqNone, 0)} saw none, ` +
            `${subs.reduce((a, x) => a + x.gaps, 0)} missing, ${subs.reduce((a, x) => a + x.closed, 0)} closed ${JSON.stringify(subs.map((x) => x.closeReasons))})`);
        }
      }
    };
    await stalled(cfg.warmupMs);
    const warmupEnd = performance.now() + WARMUP_EVENTS_MAX_MS;
    while (delivery.full + 1 < (cfg.warmupEvents ?? 0) && performance.now() < warmupEnd) await stalled(100);
    const [a, probeA] = await edge();
    const seqA = delivery.full;
    await stalled(cfg.measureMs);
    const [b, probeB] = await edge();
    const seqB = delivery.full;
    const stops = await pool.all<StopResult>(() => ({ op: 'stop', timeoutMs: 5_000 }), 10_000);
    const subs = diff(a, b, (i) => i > 0);
    const pub = diff(a, b, (i) => i === 0);
    const count = subs.delta.events;
    const problems: string[] = [];
    if (subs.delta.gaps > 0) problems.push(`${subs.delta.gaps} events missing at subscribers`);
    if (subs.delta.duplicates > 0) problems.push(`${subs.delta.duplicates} duplicate events`);
    if (pub.delta.replyErrors > 0) problems.push(`${pub.delta.replyErrors} error replies to the publisher`);
    if (subs.delta.closed + pub.delta.closed > 0) problems.push(`sockets closed: ${JSON.stringify(subs.closeReasons)}`);
    if (count === 0) problems.push('no deliveries in the window');
    const sample: Sample = {
      scenario: key.scenario,
      variant: key.variant,
      target: key.target,
      repeat: key.repeat,
      ...windowFields(subs, count, key.threads, problems),
      extra: {
        subscribers: cfg.subscribers, depth: cfg.depth, window: cfg.window, payloadBytes: cfg.size,
        publishes: pub.delta.publishes, publishAcks: pub.delta.replies, fullyDeliveredSeqs: seqB - seqA, eventsBeforeWindow: seqA + 1,
        outstandingAtStop: stops.reduce((x, s) => x + s.outstanding, 0), ephemeral: cfg.ephemeral,
        // How many events the server's sends packed per read of a subscriber socket (more: fewer sends per delivery).
        deliveriesPerRead: subs.delta.reads > 0 ? count / subs.delta.reads : 0,
        // S8: the servers at rest (share of a core), and deliveries per server-CPU-s over what they used beyond it.
        ...(Number.isFinite(restUtil) ? { restUtil, perServerCpuSAboveRest: count / (subs.serverCpuS - restUtil * subs.wallS) } : {}),
      },
    };
    return { sample, a, b, probeA, probeB };
  } finally {
    for (const p of subProcs) p.progress = null;
    await pool.all(() => ({ op: 'reset' }));
  }
}
