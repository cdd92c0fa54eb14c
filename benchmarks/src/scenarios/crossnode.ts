// S8 cross-node fan-out (issue 7, cluster mode): S3's publisher, subscribers
// and flow control, measured three ways in one repeat, each on fresh servers:
//
// - `1 node, embedded`: S3 itself (one gateway, no Redis), the baseline;
// - `1 node on Redis`: the same gateway with REDIS_URL set, every socket on it
//   (what the Redis hop costs without a second node);
// - `N nodes on Redis`: N gateway processes (each S3's configuration plus
//   REDIS_URL) on one private redis-server; the publisher on node 0, the
//   subscriber processes spread over the nodes (process i on node (i-1) mod N).
//
// Deliveries are counted at the subscribers, as in S3, and checked for gaps and
// duplicates. Server CPU is every gateway process's; redis-server's CPU is read
// from /proc/<pid>/stat as well and reported beside it. Redis commands per
// published event come from the gateways' `sluice_redis_commands_total` (summed
// over the nodes) against their `sluice_messages_published_total{class="durable"}`,
// both read at the window's edges; what redis-server itself executed
// (INFO commandstats, the Lua script's inner calls included) is kept beside them.

import { startRedis, type RedisServer } from '@sluice/redis/testing';
import { LoadPool } from '../loadgen/pool.ts';
import { cpuSeconds } from '../lib/proc.ts';
import { ServerProc, type TargetSpec } from '../lib/server.ts';
import { metricByLabel } from '@sluice/gateway/testing';
import { fanoutOnce, oneNode, S3_DEFAULT, type FanoutConfig, type FanoutKey, type FanoutNodes, type FanoutRun } from './fanout.ts';
import { diff, failedSample, interleave, otherUtil, type RunOptions, type Sample } from './common.ts';

export interface CrossConfig extends FanoutConfig {
  /** Gateway processes on the one redis-server. */
  nodes: number;
}

/**
 * S3's settings, two nodes, and the warm-up lasting until the topic's history
 * is full (WS_HISTORY_SIZE, 1000 by default: the benchmark leaves it so), so
 * that the window sees the steady state where every publish also trims.
 * Subscriber processes are raised to one per node at least.
 */
export const S8_DEFAULT: CrossConfig = { ...S3_DEFAULT, warmupEvents: 1001, nodes: 2 };

export function variantsOf(cfg: CrossConfig): { embedded: string; redisOne: string; cluster: string } {
  return { embedded: '1 node, embedded', redisOne: '1 node on Redis', cluster: `${cfg.nodes} nodes on Redis` };
}

export async function runCrossNode(opts: RunOptions, cfg: CrossConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, cfg.nodes);
  const c: CrossConfig = { ...cfg, procs };
  const v = variantsOf(c);
  const pool = await LoadPool.start(procs + 1, 30 * 60_000);
  const keys = [v.embedded, v.redisOne, v.cluster].map((variant) => ({ scenario: 'S8' as const, variant }));
  try {
    // `srv` is the embedded baseline; Redis and the Redis-backed gateways are started per repeat, fresh.
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      const key = (variant: string, threads: number): FanoutKey => ({ scenario: 'S8', variant, target: spec.name, repeat, threads });
      const base = (await fanoutOnce(pool, oneNode(srv), c, key(v.embedded, spec.threads))).sample;
      await srv.stop();
      const redis = await startRedis();
      try {
        const info = await redis.cli('info', 'server');
        const r: RedisProc = { server: redis, pid: Number(/^process_id:(\d+)/m.exec(info)?.[1]), version: /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown' };
        if (!Number.isInteger(r.pid) || r.pid <= 0) throw new Error('redis-server did not tell its process_id');
        // A failed Redis measurement is filed as such; the baseline stays.
        const measure = (n: number, variant: string): Promise<Sample> =>
          onRedis(pool, spec, n, r, c, key(variant, spec.threads * n), base)
            .catch((err: unknown) => failedSample('S8', variant, spec.name, repeat, (err as Error).message));
        return [base, await measure(1, v.redisOne), await measure(c.nodes, v.cluster)];
      } finally {
        await redis.stop();
      }
    });
  } finally {
    await pool.close();
  }
}

interface RedisProc {
  server: RedisServer;
  pid: number;
  version: string;
}

/** Starts `n` gateways on `redis`, runs the fan-out over them, stops them, and files what Redis cost. */
async function onRedis(pool: LoadPool, spec: TargetSpec, n: number, redis: RedisProc, cfg: CrossConfig, key: FanoutKey, base: Sample): Promise<Sample> {
  await redis.server.cli('flushall');
  const started = await Promise.allSettled(Array.from({ length: n }, () => ServerProc.start(spec, 60_000, { REDIS_URL: redis.server.url })));
  const nodes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason as Error;
    const nodeOf = (proc: number): number => (proc === 0 ? 0 : (proc - 1) % n);
    const over: FanoutNodes = {
      proto: spec.proto,
      portOf: (proc) => nodes[nodeOf(proc)]!.port,
      cpuSeconds: () => nodes.reduce((a, s) => a + s.cpuSeconds(), 0),
      probe: () => probeRedis(nodes, redis),
    };
    const run = await fanoutOnce(pool, over, cfg, key);
    const s = run.sample;
    const gone = nodes.filter((srv) => !srv.alive).map((srv) => `a node exited during the run (code ${String(srv.exitCode)}, signal ${String(srv.exitSignal)})`);
    if (gone.length > 0) Object.assign(s, { ok: false, error: [s.error, ...gone].filter((e) => e !== undefined).join('; ') });
    if (!s.ok) return s;
    Object.assign(s.extra, redisExtras(run, base, n, nodeOf), { redisVersion: redis.version });
    // Redis is part of the system measured, not load from outside.
    s.otherUtil = otherUtil(run.b.machineBusy - run.a.machineBusy, s.serverCpuS + run.probeB['redisCpuS']! - run.probeA['redisCpuS']!, s.clientCpuS, s.wallS);
    return s;
  } finally {
    await Promise.all(nodes.map((srv) => srv.stop()));
  }
}

async function probeRedis(nodes: readonly ServerProc[], redis: RedisProc): Promise<Record<string, number>> {
  const redisCpuS = cpuSeconds(redis.pid);
  const [texts, stats] = await Promise.all([
    Promise.all(nodes.map(async (srv) => (await fetch(`http://127.0.0.1:${srv.adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text())),
    redis.server.cli('info', 'commandstats'),
  ]);
  const sum = (name: string, label: string, value: string): number =>
    texts.reduce((a, t) => a + (metricByLabel(t, name, label)[value] ?? 0), 0);
  return {
    redisCpuS,
    gatewayCommands: sum('sluice_redis_commands_total', 'x', ''),
    durablePublished: sum('sluice_messages_published_total', 'class', 'durable'),
    ...Object.fromEntries(Object.entries(redisCalls(stats)).map(([cmd, n]) => [`${CALLS}${cmd}`, n])),
  };
}

const CALLS = 'calls:';

/** Calls redis-server executed per command (INFO commandstats), every command but INFO (the probe's own). */
export function redisCalls(commandstats: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of commandstats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (m[1] !== 'info') out[m[1]!] = Number(m[2]);
  return out;
}

function redisExtras(run: FanoutRun, base: Sample, n: number, nodeOf: (proc: number) => number): Sample['extra'] {
  const s = run.sample;
  const d = (k: string): number => (run.probeB[k] ?? 0) - (run.probeA[k] ?? 0);
  const published = d('durablePublished');
  // Per published event, by command.
  const calls: Record<string, number> = {};
  let totalCalls = 0;
  for (const k of Object.keys(run.probeB)) {
    if (!k.startsWith(CALLS) || d(k) <= 0) continue;
    totalCalls += d(k);
    calls[k.slice(CALLS.length)] = Math.round((d(k) / published) * 1000) / 1000;
  }
  const redisCpuS = d('redisCpuS');
  const perTotal = s.count / (s.serverCpuS + redisCpuS);
  const basePerCpu = base.ok ? base.perServerCpuS : NaN;
  const baseP99 = base.ok ? (base.latency?.p99Us ?? NaN) : NaN;
  const p99 = s.latency?.p99Us ?? NaN;
  const nodeP99 = Array.from({ length: n }, (_, k) => diff(run.a, run.b, (i) => i > 0 && nodeOf(i) === k).latency.p99Us);
  const num = (x: number): number | null => (Number.isFinite(x) ? x : null);
  return {
    nodes: n,
    redisCpuS, redisUtil: redisCpuS / s.wallS,
    perTotalCpuS: perTotal,
    durablePublished: published,
    gatewayRedisCommands: d('gatewayCommands'),
    redisCommandsPerEvent: num(d('gatewayCommands') / published),
    redisCallsPerEvent: num(totalCalls / published),
    redisCallsByCommand: JSON.stringify(calls),
    redisCpuUsPerEvent: num((redisCpuS * 1e6) / published),
    // Subscribers on the publisher's node, then on each other node.
    nodeP99Us: JSON.stringify(nodeP99.map((x) => Math.round(x))),
    node0P99Us: num(nodeP99[0]!),
    otherNodesP99Us: num(Math.max(...nodeP99.slice(1))),
    // Against the embedded single node of the same repeat (S3's setup).
    oneNodePerServerCpuS: num(basePerCpu),
    perServerCpuVsOneNode: num(s.perServerCpuS / basePerCpu),
    perTotalCpuVsOneNode: num(perTotal / basePerCpu),
    oneNodeP99Us: num(baseP99),
    p99AddedUs: num(p99 - baseP99),
    p99VsOneNode: num(p99 / baseP99),
  };
}
