// S3 fan-out: one publisher, N subscribers on one topic. The publisher keeps
// `depth` publishes awaiting their reply and never runs more than `window`
// events ahead of the slowest subscriber (subscriber processes report the
// highest sequence every one of their sockets has received; the orchestrator
// turns the minimum into credit). So server buffers stay small, no server's
// slow-consumer policy is triggered, and every event counts exactly once.

import type { ConnectResult, JoinResult, MarkResult, StopResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import type { ServerProc, TargetSpec } from '../lib/server.ts';
import { diff, interleave, sleep, snapshot, type RunOptions, type Sample, windowFields } from './common.ts';

export interface FanoutConfig {
  subscribers: number;
  depth: number;
  window: number;
  size: number;
  warmupMs: number;
  measureMs: number;
  /** Subscriber processes; the publisher gets one more of its own. */
  procs: number;
  ephemeral: boolean;
}

export const S3_DEFAULT: FanoutConfig = { subscribers: 2000, depth: 8, window: 8, size: 64, warmupMs: 1000, measureMs: 3000, procs: 2, ephemeral: false };

const TOPIC = 'bench';
const STALL_MS = 3000;

export async function runFanout(opts: RunOptions, cfg: FanoutConfig): Promise<Sample[]> {
  const pool = await LoadPool.start(cfg.procs + 1, 30 * 60_000);
  try {
    return await interleave(opts, [{ scenario: 'S3', variant: `${cfg.size}B` }], async (srv, spec, repeat) => [await fanoutOnce(pool, srv, spec, repeat, cfg)]);
  } finally {
    await pool.close();
  }
}

async function fanoutOnce(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, cfg: FanoutConfig): Promise<Sample> {
  const publisher = pool.procs[0]!;
  const subProcs = pool.procs.slice(1);
  const counts = split(cfg.subscribers, subProcs.length);
  const fulls = subProcs.map(() => -1);
  let globalFull = -1;
  let lastProgressAt = performance.now();
  try {
    const target = { host: '127.0.0.1', port: srv.port, proto: spec.proto };
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target,
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

    subProcs.forEach((p, i) => {
      p.progress = (full) => {
        fulls[i] = full;
        const g = Math.min(...fulls);
        if (g > globalFull) {
          globalFull = g;
          lastProgressAt = performance.now();
          publisher.tell({ op: 'credit', upTo: g + cfg.window });
        }
      };
    });
    await pool.all((p) => (p.index === 0 ? null : { op: 'track' }));
    await publisher.call({ op: 'publish', topic: TOPIC, depth: cfg.depth, size: cfg.size, ephemeral: cfg.ephemeral, credit: cfg.window - 1 });

    const stalled = async (ms: number): Promise<void> => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        await sleep(Math.min(250, Math.max(1, end - performance.now())));
        if (performance.now() - lastProgressAt > STALL_MS) {
          const m = await pool.all<MarkResult>(() => ({ op: 'mark' }));
          const subs = m.slice(1);
          throw new Error(`fan-out stalled: no event reached every subscriber for ${STALL_MS} ms (all have up to seq ${globalFull}; ` +
            `published ${m[0]!.publishes}, acked ${m[0]!.replies}, ${m[0]!.replyErrors} error replies; subscribers: last seq ` +
            `${Math.min(...subs.map((x) => x.seqMin))} to ${Math.max(...subs.map((x) => x.seqMax))}, ${subs.reduce((a, x) => a + x.seqNone, 0)} saw none, ` +
            `${subs.reduce((a, x) => a + x.gaps, 0)} missing, ${subs.reduce((a, x) => a + x.closed, 0)} closed ${JSON.stringify(subs.map((x) => x.closeReasons))})`);
        }
      }
    };
    await stalled(cfg.warmupMs);
    const a = await snapshot(srv, pool);
    const seqA = globalFull;
    await stalled(cfg.measureMs);
    const b = await snapshot(srv, pool);
    const seqB = globalFull;
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
    return {
      scenario: 'S3',
      variant: `${cfg.size}B`,
      target: spec.name,
      repeat,
      ...windowFields(subs, count, spec.threads, problems),
      extra: {
        subscribers: cfg.subscribers, depth: cfg.depth, window: cfg.window, payloadBytes: cfg.size,
        publishes: pub.delta.publishes, publishAcks: pub.delta.replies, fullyDeliveredSeqs: seqB - seqA,
        outstandingAtStop: stops.reduce((x, s) => x + s.outstanding, 0), ephemeral: cfg.ephemeral,
      },
    };
  } finally {
    for (const p of subProcs) p.progress = null;
    await pool.all(() => ({ op: 'reset' }));
  }
}
