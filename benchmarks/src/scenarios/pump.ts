// S1 (publish-ack throughput) and S2 (latency): every socket joins its own
// topic and keeps `depth` publishes in flight to it. The server answers each
// with a reply and delivers the event back to the sender (its only
// subscriber). Counted at the reply; latency is now minus the send time
// carried in the ref.

import type { ConnectResult, JoinResult, StopResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import type { AuthSpec } from '../lib/jwt.ts';
import type { ServerProc, TargetSpec } from '../lib/server.ts';
import { TEST_ADMIN_TOKEN } from '@sluice/gateway/testing';
import { diff, interleave, sleep, snapshot, type RunOptions, type Sample, type ScenarioId, windowFields } from './common.ts';

export interface PumpConfig {
  scenario: ScenarioId;
  sockets: number;
  depth: number;
  sizes: number[];
  warmupMs: number;
  measureMs: number;
  procs: number;
  ephemeral: boolean;
  /**
   * S1 --hashed: every socket's topic is owned by the shard its name's hash
   * names, as all topics were before a topic became its first toucher's:
   * the harness reads each topic's history through the admin API before
   * the joins, and the coordinator claims an untouched topic for the
   * hash's shard. With 2 workers about half the publishes then cross
   * threads; set against the plain run (none does), it measures what a
   * crossing costs. The same as without for the other targets.
   */
  hashed?: boolean;
}

export const S1_DEFAULT: PumpConfig = { scenario: 'S1', sockets: 100, depth: 16, sizes: [32, 1024], warmupMs: 1000, measureMs: 3000, procs: 1, ephemeral: false };
export const S2_DEFAULT: PumpConfig = { scenario: 'S2', sockets: 50, depth: 1, sizes: [32], warmupMs: 1000, measureMs: 3000, procs: 1, ephemeral: false };

export function sizeLabel(size: number, hashed = false): string {
  return `${size >= 1024 && size % 1024 === 0 ? `${size / 1024}KB` : `${size}B`}${hashed ? ', hashed owners' : ''}`;
}

export async function runPump(opts: RunOptions, cfg: PumpConfig): Promise<Sample[]> {
  const pool = await LoadPool.start(cfg.procs, 30 * 60_000);
  try {
    const keys = cfg.sizes.map((size) => ({ scenario: cfg.scenario, variant: sizeLabel(size, cfg.hashed) }));
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      const out: Sample[] = [];
      for (const size of cfg.sizes) out.push(await pumpOnce(pool, srv, spec, repeat, size, cfg));
      return out;
    });
  } finally {
    await pool.close();
  }
}

/**
 * One S1/S2 measurement on `srv`. With `auth` (S13: WS_AUTH=jwt) every socket
 * upgrades with a token of its own, signed by the generator before connecting.
 * `variant` names the sample (default: the payload size).
 */
export async function pumpOnce(pool: LoadPool, srv: ServerProc, spec: TargetSpec, repeat: number, size: number, cfg: PumpConfig,
  auth?: AuthSpec, variant = sizeLabel(size, cfg.hashed)): Promise<Sample> {
  const counts = split(cfg.sockets, pool.size);
  let base = 0;
  const bases = counts.map((c) => { const b = base; base += c; return b; });
  try {
    if (auth !== undefined) await pool.all((p) => ({ op: 'sign', purpose: 'upgrade', auth, idBase: bases[p.index]!, count: counts[p.index]! }));
    const conn = await pool.all<ConnectResult>((p) => ({
      op: 'connect',
      target: { host: '127.0.0.1', port: srv.port, proto: spec.proto },
      count: counts[p.index]!, idBase: bases[p.index]!, sources: ['127.0.0.1'], concurrency: 100, timeoutMs: 15_000, withTokens: auth !== undefined,
    }));
    const ready = conn.reduce((a, c) => a + c.ready, 0);
    if (ready < cfg.sockets) throw new Error(`only ${ready}/${cfg.sockets} sockets connected: ${JSON.stringify(conn.map((c) => c.reasons))}`);
    // Topics of this measurement's own: a size's sockets are new connections on the same gateway, and
    // the earlier size's topics keep the owners their first sockets gave them (a shard picked anew per socket).
    const prefix = `bench.${variant.replace(/[^A-Za-z0-9]/g, '')}`;
    if (cfg.hashed === true && spec.name.startsWith('sluice') && spec.threads > 1) await claimByHash(srv.adminPort, prefix, cfg.sockets);
    const joins = await pool.all<JoinResult>(() => ({ op: 'join', topic: null, timeoutMs: 10_000, prefix }));
    const joined = joins.reduce((a, j) => a + j.joined, 0);
    if (joined < cfg.sockets) throw new Error(`only ${joined}/${cfg.sockets} joins succeeded (${joins.reduce((a, j) => a + j.errors, 0)} errors)`);
    await pool.all(() => ({ op: 'pump', depth: cfg.depth, size, ephemeral: cfg.ephemeral }));
    await sleep(cfg.warmupMs);
    const a = await snapshot(srv, pool);
    await sleep(cfg.measureMs);
    const b = await snapshot(srv, pool);
    const stops = await pool.all<StopResult>(() => ({ op: 'stop', timeoutMs: 5_000 }), 10_000);
    const w = diff(a, b);
    const outstanding = stops.reduce((x, s) => x + s.outstanding, 0);
    const count = w.delta.replies;
    const problems: string[] = [];
    if (w.delta.replyErrors > 0) problems.push(`${w.delta.replyErrors} error replies`);
    if (w.delta.closed > 0) problems.push(`${w.delta.closed} sockets closed: ${JSON.stringify(w.closeReasons)}`);
    if (count === 0) problems.push('no replies in the window');
    return {
      scenario: cfg.scenario,
      variant,
      target: spec.name,
      repeat,
      ...windowFields(w, count, spec.threads, problems),
      extra: {
        sockets: cfg.sockets, depth: cfg.depth, payloadBytes: size, events: w.delta.events,
        eventsPerReply: count > 0 ? w.delta.events / count : 0, outstandingAtStop: outstanding, ephemeral: cfg.ephemeral,
        // The batching the closed loop settled into: replies (each with its event) per read of the generator.
        repliesPerRead: w.delta.reads > 0 ? count / w.delta.reads : 0,
      },
    };
  } finally {
    await pool.all(() => ({ op: 'reset' }));
  }
}

/**
 * S1 --hashed: reads the history of every socket's topic (`<prefix>.<id>`,
 * ids 0 to sockets - 1) through the admin API before any socket touches
 * it, so that the coordinator claims each for the shard its hash names.
 */
export async function claimByHash(adminPort: number | undefined, prefix: string, sockets: number): Promise<void> {
  if (adminPort === undefined) throw new Error('--hashed needs the gateway\'s admin port');
  for (let id = 0; id < sockets; id++) {
    const res = await fetch(`http://127.0.0.1:${adminPort}/v1/history?topic=${prefix}.${id}`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    if (res.status !== 200) throw new Error(`GET /v1/history of ${prefix}.${id}: ${res.status} ${await res.text()}`);
  }
}
