// S8 cross-node fan-out (issue 7, cluster mode): S3's publisher, subscribers
// and flow control, measured three ways in one repeat (four with
// `ackReplicas`), each on fresh servers:
//
// - `1 node, embedded`: S3 itself (one gateway, no Redis), the baseline;
// - `1 node on Redis`: the same gateway with REDIS_URL set, every socket on it
//   (what the Redis hop costs without a second node);
// - `N nodes on Redis`: N gateway processes (each S3's configuration plus
//   REDIS_URL) on one private redis-server; the publisher on node 0, the
//   subscriber processes spread over the nodes (process i on node (i-1) mod N);
// - with `ackReplicas` R > 0, `N nodes on Redis, WS_REDIS_ACK_REPLICAS=R`: the
//   same N nodes with WS_REDIS_ACK_REPLICAS=R, the redis-server now followed
//   by R replicas of its own (each a private redis-server, REPLICAOF it), so
//   that every durable publish is acked only after a WAIT saw R replicas hold
//   it. The replicas are attached after the plain N-node variant: the three
//   others run as without the option;
// - with `nodeWorkers` W > 0, `N nodes on Redis, WS_WORKERS=W each`: the N
//   nodes again with W shards each (W = 1, N = 2: as many shard threads as
//   the embedded node has, on the same cores, so that the comparison is of
//   the cross-node path, not of more threads than cores);
// - with `embeddedWorkers` E > 0, `1 node, embedded, WS_WORKERS=E`: one node
//   without Redis with E shards (4: as many as two nodes of 2), what more
//   shards on the same cores cost without any node crossing.
//
// Before publishing, each variant's gateways are read at rest for
// `restMs` (every socket joined, no traffic): what a node costs doing
// nothing, which every node of a cluster pays again.
//
// Deliveries are counted at the subscribers, as in S3, and checked for gaps and
// duplicates. Server CPU is every gateway process's; redis-server's CPU is read
// from /proc/<pid>/stat as well and reported beside it (the replicas' too,
// summed; both part of the system measured, not other load). Redis commands per
// published event come from the gateways' `sluice_redis_commands_total` (summed
// over the nodes) against their `sluice_messages_published_total{class="durable"}`,
// both read at the window's edges; what redis-server itself executed
// (INFO commandstats, the Lua script's inner calls included) is kept beside them.
// Publish-ack latency (send to the publisher's reply, the publisher process's
// histogram, which S3's sample leaves out) is filed for every variant.

import { startRedis, type RedisServer } from '@sluice/redis/testing';
import { LoadPool } from '../loadgen/pool.ts';
import { cpuSeconds } from '../lib/proc.ts';
import { ServerProc, type TargetSpec } from '../lib/server.ts';
import { metricByLabel } from '@sluice/gateway/testing';
import { fanoutOnce, oneNode, S3_DEFAULT, type FanoutConfig, type FanoutKey, type FanoutNodes, type FanoutRun } from './fanout.ts';
import { diff, failedSample, interleave, otherUtil, sleep, type RunOptions, type Sample } from './common.ts';

export interface CrossConfig extends FanoutConfig {
  /** Gateway processes on the one redis-server. */
  nodes: number;
  /**
   * WS_REDIS_ACK_REPLICAS of a fourth variant: the `nodes` gateways again, the
   * redis-server with this many replicas; 0: no such variant.
   */
  ackReplicas: number;
  /**
   * WS_WORKERS of each node of a further variant: the `nodes` gateways
   * again with this many shards each (1 with 2 nodes: as many shard threads
   * in all as the embedded node's 2, on the same cores); 0: no such variant.
   */
  nodeWorkers?: number;
  /**
   * WS_WORKERS of a further embedded variant: one node, no Redis, with this
   * many shards (4: as many as two nodes of 2), to tell what more shards
   * cost on these cores from what crossing nodes costs; 0: no such variant.
   */
  embeddedWorkers?: number;
}

/**
 * S3's settings, two nodes, and the warm-up lasting until the topic's history
 * is full (WS_HISTORY_SIZE, 1000 by default: the benchmark leaves it so), so
 * that the window sees the steady state where every publish also trims; the
 * nodes again with one shard each, and one node with four, so that the
 * cross-node path is told apart from more shard threads than cores.
 * Subscriber processes are raised to one per node at least.
 */
export const S8_DEFAULT: CrossConfig = { ...S3_DEFAULT, warmupEvents: 1001, nodes: 2, ackReplicas: 0, restMs: 3000, nodeWorkers: 1, embeddedWorkers: 4 };

export interface CrossVariants {
  embedded: string;
  redisOne: string;
  cluster: string;
  /** Only with `ackReplicas` > 0. */
  acked?: string;
  /** Only with `nodeWorkers` > 0. */
  fewerShards?: string;
  /** Only with `embeddedWorkers` > 0. */
  moreShards?: string;
}

export function variantsOf(cfg: Pick<CrossConfig, 'nodes' | 'ackReplicas' | 'nodeWorkers' | 'embeddedWorkers'>): CrossVariants {
  const cluster = `${cfg.nodes} nodes on Redis`;
  const w = cfg.nodeWorkers ?? 0;
  const e = cfg.embeddedWorkers ?? 0;
  return {
    embedded: '1 node, embedded', redisOne: '1 node on Redis', cluster,
    ...(cfg.ackReplicas > 0 ? { acked: `${cluster}, WS_REDIS_ACK_REPLICAS=${cfg.ackReplicas}` } : {}),
    ...(w > 0 ? { fewerShards: `${cluster}, WS_WORKERS=${w} each` } : {}),
    ...(e > 0 ? { moreShards: `1 node, embedded, WS_WORKERS=${e}` } : {}),
  };
}

export async function runCrossNode(opts: RunOptions, cfg: CrossConfig): Promise<Sample[]> {
  const procs = Math.max(cfg.procs, cfg.nodes);
  const c: CrossConfig = { ...cfg, procs };
  const v = variantsOf(c);
  const pool = await LoadPool.start(procs + 1, 30 * 60_000);
  const keys = [v.embedded, ...(v.moreShards !== undefined ? [v.moreShards] : []), v.redisOne, v.cluster,
    ...(v.fewerShards !== undefined ? [v.fewerShards] : []), ...(v.acked !== undefined ? [v.acked] : [])]
    .map((variant) => ({ scenario: 'S8' as const, variant }));
  try {
    // `srv` is the embedded baseline; Redis and the Redis-backed gateways are started per repeat, fresh.
    return await interleave(opts, keys, async (srv, spec, repeat) => {
      const key = (variant: string, threads: number): FanoutKey => ({ scenario: 'S8', variant, target: spec.name, repeat, threads });
      const baseRun = await fanoutOnce(pool, oneNode(srv), c, key(v.embedded, spec.threads));
      const base = baseRun.sample;
      Object.assign(base.extra, ackExtras(baseRun));
      await srv.stop();
      const more: Sample[] = [];
      if (v.moreShards !== undefined) {
        const moreShards = v.moreShards;
        const w = c.embeddedWorkers!;
        more.push(await ServerProc.start(spec, 60_000, { WS_WORKERS: String(w) }).then(async (one) => {
          try {
            const run = await fanoutOnce(pool, oneNode(one), c, key(moreShards, w));
            Object.assign(run.sample.extra, ackExtras(run), vsOneNode(run.sample, base));
            return run.sample;
          } finally {
            await one.stop();
          }
        }).catch((err: unknown) => failedSample('S8', moreShards, spec.name, repeat, (err as Error).message)));
      }
      const redis = await startRedis();
      const replicaServers: RedisServer[] = [];
      try {
        const r = await redisProc(redis);
        // A failed Redis measurement is filed as such; the baseline stays.
        const failed = (variant: string) => (err: unknown): Sample => failedSample('S8', variant, spec.name, repeat, (err as Error).message);
        const measure = (n: number, variant: string, replicas: readonly RedisProc[] = [], env: Record<string, string> = {}): Promise<Sample> =>
          onRedis(pool, spec, n, r, replicas, env, c, key(variant, spec.threads * n), base).catch(failed(variant));
        const out = [base, ...more, await measure(1, v.redisOne), await measure(c.nodes, v.cluster)];
        if (v.fewerShards !== undefined) {
          const w = c.nodeWorkers!;
          out.push(await onRedis(pool, spec, c.nodes, r, [], { WS_WORKERS: String(w) }, c, key(v.fewerShards, w * c.nodes), base)
            .catch(failed(v.fewerShards)));
        }
        if (v.acked !== undefined) {
          const acked = v.acked;
          out.push(await startReplicas(r, c.ackReplicas, replicaServers)
            .then((replicas) => measure(c.nodes, acked, replicas, { WS_REDIS_ACK_REPLICAS: String(c.ackReplicas) }), failed(acked)));
        }
        return out;
      } finally {
        await Promise.all(replicaServers.map((x) => x.stop()));
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

async function redisProc(server: RedisServer): Promise<RedisProc> {
  const info = await server.cli('info', 'server');
  const r: RedisProc = { server, pid: Number(/^process_id:(\d+)/m.exec(info)?.[1]), version: /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown' };
  if (!Number.isInteger(r.pid) || r.pid <= 0) throw new Error(`redis-server on port ${server.port} did not tell its process_id`);
  return r;
}

/** Polls `ok` every 50 ms for up to `ms`; throws `what` when it never held. */
async function until(ok: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = performance.now() + ms;
  for (;;) {
    if (await ok()) return;
    if (performance.now() > end) throw new Error(`${what} (waited ${ms} ms)`);
    await sleep(50);
  }
}

const REPLICA_SYNC_MS = 30_000;

/** A field of `INFO replication` as a number (NaN when absent). */
function replField(info: string, field: string): number {
  return Number(new RegExp(`^${field}:(\\S+)`, 'm').exec(info)?.[1]);
}

/**
 * Starts `n` private redis-servers (into `servers`, for the caller to stop) as
 * replicas of `master`, and waits until each one's link to it is up.
 */
async function startReplicas(master: RedisProc, n: number, servers: RedisServer[]): Promise<RedisProc[]> {
  // The first sync starts at once, not after the master's default 5 s wait for more replicas (diskless sync).
  await master.server.cli('config', 'set', 'repl-diskless-sync-delay', '0');
  const out: RedisProc[] = [];
  for (let i = 0; i < n; i++) {
    const server = await startRedis();
    servers.push(server);
    out.push(await redisProc(server));
  }
  await Promise.all(out.map(async (r) => {
    const said = (await r.server.cli('replicaof', '127.0.0.1', String(master.server.port))).trim();
    if (!said.startsWith('OK')) throw new Error(`REPLICAOF on port ${r.server.port}: ${said}`);
    await until(async () => /^master_link_status:up/m.test(await r.server.cli('info', 'replication')), REPLICA_SYNC_MS,
      `replica on port ${r.server.port} never reported master_link_status:up`);
  }));
  return out;
}

/** Waits until every replica processed the master's replication stream up to where it stands now. */
async function caughtUp(master: RedisProc, replicas: readonly RedisProc[]): Promise<void> {
  const offset = replField(await master.server.cli('info', 'replication'), 'master_repl_offset');
  if (!Number.isFinite(offset)) throw new Error('the master did not tell its master_repl_offset');
  await Promise.all(replicas.map((r) => until(async () => replField(await r.server.cli('info', 'replication'), 'slave_repl_offset') >= offset,
    REPLICA_SYNC_MS, `replica on port ${r.server.port} did not reach the master's offset ${offset}`)));
}

/**
 * A variant's deliveries per gateway-CPU-s against the embedded node of the same repeat: as measured, and both sides over
 * what their nodes used beyond their rest (fanoutOnce's restUtil); null where either is missing.
 */
function vsOneNode(s: Sample, base: Sample): Sample['extra'] {
  const num = (x: number): number | null => (Number.isFinite(x) ? x : null);
  if (!base.ok) return { perServerCpuVsOneNode: null, aboveRestVsOneNode: null };
  return {
    perServerCpuVsOneNode: num(s.perServerCpuS / base.perServerCpuS),
    aboveRestVsOneNode: num(Number(s.extra['perServerCpuSAboveRest']) / Number(base.extra['perServerCpuSAboveRest'])),
  };
}

/** Publish-ack latency: the publisher's (process 0's) histogram over the window, send to reply. */
function ackExtras(run: FanoutRun): Sample['extra'] {
  const ack = diff(run.a, run.b, (i) => i === 0).latency;
  const num = (x: number): number | null => (ack.count > 0 && Number.isFinite(x) ? x : null);
  return { ackCount: ack.count, ackP50Us: num(ack.p50Us), ackP99Us: num(ack.p99Us), ackP999Us: num(ack.p999Us) };
}

/**
 * Starts `n` gateways on `redis` (with `env` laid over: S8's acked variant), runs the fan-out over them, stops them, and files what
 * Redis cost; `replicas` (if any) are flushed with the master and caught up before the gateways start, and their CPU counts as Redis's.
 */
async function onRedis(pool: LoadPool, spec: TargetSpec, n: number, redis: RedisProc, replicas: readonly RedisProc[], env: Record<string, string>,
  cfg: CrossConfig, key: FanoutKey, base: Sample): Promise<Sample> {
  await redis.server.cli('flushall');
  if (replicas.length > 0) await caughtUp(redis, replicas);
  const started = await Promise.allSettled(Array.from({ length: n }, () => ServerProc.start(spec, 60_000, { REDIS_URL: redis.server.url, ...env })));
  const nodes = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason as Error;
    const nodeOf = (proc: number): number => (proc === 0 ? 0 : (proc - 1) % n);
    const over: FanoutNodes = {
      proto: spec.proto,
      portOf: (proc) => nodes[nodeOf(proc)]!.port,
      cpuSeconds: () => nodes.reduce((a, s) => a + s.cpuSeconds(), 0),
      probe: () => probeRedis(nodes, redis, replicas),
    };
    const run = await fanoutOnce(pool, over, cfg, key);
    const s = run.sample;
    const gone = nodes.filter((srv) => !srv.alive).map((srv) => `a node exited during the run (code ${String(srv.exitCode)}, signal ${String(srv.exitSignal)})`);
    if (gone.length > 0) Object.assign(s, { ok: false, error: [s.error, ...gone].filter((e) => e !== undefined).join('; ') });
    // An acked variant whose gateways sent no WAIT measured nothing of what it is named for (a build without WS_REDIS_ACK_REPLICAS).
    const waits = (run.probeB[`${CALLS}wait`] ?? 0) - (run.probeA[`${CALLS}wait`] ?? 0);
    if (s.ok && env['WS_REDIS_ACK_REPLICAS'] !== undefined && waits <= 0) Object.assign(s, { ok: false, error: 'no WAIT reached redis-server in the window' });
    Object.assign(s.extra, ackExtras(run));
    if (!s.ok) return s;
    Object.assign(s.extra, redisExtras(run, base, n, nodeOf, replicas.length), { redisVersion: redis.version });
    // Redis (and its replicas) are part of the system measured, not load from outside.
    const redisCpuS = run.probeB['redisCpuS']! - run.probeA['redisCpuS']! + run.probeB['replicaCpuS']! - run.probeA['replicaCpuS']!;
    s.otherUtil = otherUtil(run.b.machineBusy - run.a.machineBusy, s.serverCpuS + redisCpuS, s.clientCpuS, s.wallS);
    return s;
  } finally {
    await Promise.all(nodes.map((srv) => srv.stop()));
  }
}

async function probeRedis(nodes: readonly ServerProc[], redis: RedisProc, replicas: readonly RedisProc[]): Promise<Record<string, number>> {
  const redisCpuS = cpuSeconds(redis.pid);
  const replicaCpuS = replicas.reduce((a, r) => a + cpuSeconds(r.pid), 0);
  const [texts, stats] = await Promise.all([
    Promise.all(nodes.map(async (srv) => (await fetch(`http://127.0.0.1:${srv.adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text())),
    redis.server.cli('info', 'commandstats'),
  ]);
  const sum = (name: string, label: string, value: string): number =>
    texts.reduce((a, t) => a + (metricByLabel(t, name, label)[value] ?? 0), 0);
  return {
    redisCpuS,
    replicaCpuS,
    gatewayCommands: sum('sluice_redis_commands_total', 'x', ''),
    replicaAckFailures: sum('sluice_redis_replica_ack_failures_total', 'x', ''),
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

function redisExtras(run: FanoutRun, base: Sample, n: number, nodeOf: (proc: number) => number, replicas: number): Sample['extra'] {
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
  const replicaCpuS = d('replicaCpuS');
  // The replicas are part of what an acked publish costs: counted with Redis.
  const perTotal = s.count / (s.serverCpuS + redisCpuS + replicaCpuS);
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
    // With replicas (WS_REDIS_ACK_REPLICAS): their CPU summed, beside the master's; the WAITs redis-server executed per event.
    ...(replicas > 0 ? {
      replicas, replicaCpuS, replicaUtil: replicaCpuS / s.wallS, replicaCpuUsPerEvent: num((replicaCpuS * 1e6) / published),
      waitsPerEvent: num(d(`${CALLS}wait`) / published), replicaAckFailures: d('replicaAckFailures'),
    } : {}),
    // Subscribers on the publisher's node, then on each other node.
    nodeP99Us: JSON.stringify(nodeP99.map((x) => Math.round(x))),
    node0P99Us: num(nodeP99[0]!),
    otherNodesP99Us: num(Math.max(...nodeP99.slice(1))),
    // Against the embedded single node of the same repeat (S3's setup).
    oneNodePerServerCpuS: num(basePerCpu),
    ...vsOneNode(s, base),
    perTotalCpuVsOneNode: num(perTotal / basePerCpu),
    oneNodeP99Us: num(baseP99),
    p99AddedUs: num(p99 - baseP99),
    p99VsOneNode: num(p99 / baseP99),
  };
}
