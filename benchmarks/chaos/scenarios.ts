// The chaos scenarios. Each one starts its own cluster (its Redis, nodes A
// and B, two HAProxy processes) and its own clients, lets them settle and
// publish, breaks the cluster one way, waits (bounded) for the clients to
// come back, stops publishing, waits for every outbox to empty, publishes a
// fence on every topic, and then checks: every acked publish is in history
// once and reached every subscriber once (where a scenario allows loss, the
// acked publishes lost are counted instead). Everything it started is
// stopped in the end, whatever happened (node A's network namespace, in the
// network-fault scenarios, too).

import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { topicKey, topicRedisKeys } from '@sluice/core';
import { Client } from '@sluice/gateway/testing';
import type { RedisServer } from '@sluice/redis/testing';
import {
  ackedByTopic, ackLatency, checkHistory, mergeDeliveryChecks, mergeStateStats, reconnectStats, recoveryStats, returnSplit, stallsIn, stateStats,
  type FailoverResult, type HistoryEvent, type LatencyStats, type NetFaultResult, type ReadinessExpectation, type ScenarioResult, type StateSample, type StepResult,
} from './analysis.ts';
import { accumulate, bucketGrowth, peakInWindow, peakRate, sumSeries, type CounterPoll } from '../src/lib/series.ts';
import { Cluster, describeRedis, type GatewayNode, Poller, type RedisTopology } from './cluster.ts';
import { durableTopic, Fleet, keyedTopic, publishedTopics, type Roles, type Status } from './fleet.ts';
import type { SlowLinkOptions } from './netfault.ts';
import { cpuBetween, CpuSampler, describeCpu } from './cpu.ts';

export type ScenarioName = 'rolling' | 'kill' | 'redis' | 'storm' | 'sentinel' | 'sentinel-n0' | 'cluster' | 'cluster-n0' | 'partition' | 'slowlink';
export const ALL_SCENARIOS: readonly ScenarioName[] = ['rolling', 'kill', 'redis', 'storm', 'sentinel', 'sentinel-n0', 'cluster', 'cluster-n0', 'partition', 'slowlink'];

export const DESCRIBE: Readonly<Record<ScenarioName, string>> = {
  rolling: 'rolling restart: SIGTERM A (drain), start A, then the same for B',
  kill: 'SIGKILL A (no drain), start it again',
  redis: 'Redis stopped (SIGTERM, append-only file) for 10 s, started again',
  storm: 'both load balancers killed (SIGKILL) and started again: every socket of both nodes cut at once',
  sentinel: 'Sentinel (a master, 2 replicas, 3 sentinels), WS_REDIS_ACK_REPLICAS=1: the master SIGKILLed under publishing; ' +
    'after the failover publishing goes on, then the old master is started again and rejoins as a replica',
  'sentinel-n0': 'the same as sentinel with WS_REDIS_ACK_REPLICAS=0: acknowledged events the failover loses are counted and reported, not failed',
  cluster: 'Redis Cluster (3 masters, a replica each), WS_REDIS_ACK_REPLICAS=1: the master serving the most published topics SIGKILLed under publishing; ' +
    'after its replica took over, it is started again and rejoins as that replica\'s replica (until then its slots have no replica to confirm an ack: unavailable, the SDK resends)',
  'cluster-n0': 'the same as cluster with WS_REDIS_ACK_REPLICAS=0: acknowledged events the failover loses are counted and reported, not failed',
  partition: 'node A in a network namespace (a veth pair to the host): its Redis traffic dropped both ways (silence, no reset) for 20 s under publishing, then restored; ' +
    'A must fail readiness 3 to 5 s after the cut and be ready about 1 s after the link is back (docs/operations.md), its clients stay connected',
  slowlink: 'node A in a network namespace: its Redis traffic slowed, 200 ms delay and 5% loss in each direction, for 40 s under publishing, then cleared; ' +
    'A may reconnect (a PING unanswered for 2 s): outages and readiness flaps counted, A ready at the end',
};

export interface ScenarioSetup {
  readonly redis: RedisTopology;
  /** WS_REDIS_ACK_REPLICAS of both nodes, when set (else the gateway's default, 0). */
  readonly ackReplicas?: number;
  /** Acknowledged events may be lost: counted and reported, no violation (analysis.ts `violations`). */
  readonly lossAllowed?: boolean;
  /** Node A runs in a network namespace (netfault.ts: root and iproute2 needed), for a fault on its link to Redis. */
  readonly nodeAInNetns?: boolean;
}

export const SETUP: Readonly<Record<ScenarioName, ScenarioSetup>> = {
  rolling: { redis: 'standalone' },
  kill: { redis: 'standalone' },
  redis: { redis: 'standalone' },
  storm: { redis: 'standalone' },
  sentinel: { redis: 'sentinel', ackReplicas: 1 },
  'sentinel-n0': { redis: 'sentinel', ackReplicas: 0, lossAllowed: true },
  cluster: { redis: 'cluster', ackReplicas: 1 },
  'cluster-n0': { redis: 'cluster', ackReplicas: 0, lossAllowed: true },
  partition: { redis: 'standalone', nodeAInNetns: true },
  slowlink: { redis: 'standalone', nodeAInNetns: true },
};

/** The scenarios `--ci` runs. */
export const CI_SCENARIOS: readonly ScenarioName[] = ['rolling', 'sentinel'];

export interface ChaosConfig {
  readonly clients: number;
  readonly procs: number;
  readonly shards: number;
  /** Handshakes in flight per client process while the clients first connect. */
  readonly concurrency: number;
  /** WS_DRAIN_RATE of both nodes (the gateway's default is 500). */
  readonly drainRate: number;
  /** WS_UPGRADE_RATE of both nodes (the gateway's default is 2000; 0 = off). */
  readonly upgradeRate: number;
  readonly redisDownMs: number;
  /** Redis failovers: how long the kit may take to see the new master, and how long publishing goes on after it before the old master starts again. */
  readonly failoverWaitMs: number;
  readonly afterFailoverMs: number;
  /** partition: how long A's Redis traffic is dropped, and the readiness it must show (see `partitionExpect`). */
  readonly partitionMs: number;
  readonly partitionExpect: ReadinessExpectation;
  /** slowlink: the fault on A's Redis traffic (its port is the run's Redis), and how long it holds. */
  readonly slowLink: Required<Pick<SlowLinkOptions, 'delayMs' | 'lossPct' | 'directions'>> & { readonly ms: number };
  /** Network faults: publishing before the fault (the baseline of ack latency), and watching after the node is back (late flaps). */
  readonly netBaselineMs: number;
  readonly netAfterMs: number;
  readonly roles: Omit<Roles, 'run'>;
  /** Bound on the time until 99% of a step's dropped clients are back. */
  readonly max99Ms: number;
  readonly haproxyInter: string;
  /** Keep every node's log in `<nodeLogs>/<scenario run>/<A|B>.log`. */
  readonly nodeLogs?: string;
}

export function defaultConfig(clients: number): ChaosConfig {
  return {
    clients, procs: Math.max(2, Math.ceil(clients / 2500)), shards: 2, concurrency: 100, drainRate: 500, upgradeRate: 5000, redisDownMs: 10_000,
    failoverWaitMs: 30_000, afterFailoverMs: 3000,
    // docs/operations.md: a node cut from Redis fails readiness 3 to 5 s after the cut (a PING each second, dropped after 2 s
    // without a reply) and is ready within about a second of the link's return. Polled every 200 ms: 1 s of slack on the first,
    // 2 s on the second (the polls, and the reconnect's own timing).
    partitionMs: 20_000,
    partitionExpect: { unreadyByMs: 6000, readyWithinMs: 3000, outage: true },
    // netem on A's interface would delay and lose only A -> Redis; a slow link is slow both ways: 200 ms and 5% in each
    // direction (a round trip 400 ms longer, replies and pub/sub traffic lost too), the harder of the two.
    slowLink: { delayMs: 200, lossPct: 5, directions: 'both', ms: 40_000 },
    netBaselineMs: 5000, netAfterMs: 5000,
    roles: {
      // 50 durable topics, two per client: ~400 subscribers a topic at 10k clients.
      topics: 50, topicsPerClient: 2,
      // 2% publish, each every 5 s: 40 durable publishes a second at 10k (16k deliveries a second).
      publisherEvery: 50, publishIntervalMs: 5000,
      // 10% follow one of 5 keyed feeds; 0.5% publish keyed updates every 2 s (4 keys a feed).
      keyedTopics: 5, keyedEvery: 10, keyedPublisherEvery: 200, keyedIntervalMs: 2000, keysPerFeed: 4,
    },
    // The drain of 10k sockets at the default rate: delay 5 s + 20 s, a retry hint up to 6 s, and 15 s to spare.
    max99Ms: (5 + clients / 500 + 6 + 15) * 1000,
    haproxyInter: '500ms',
  };
}

/** Polls `check` every `everyMs` until it is true; false after `ms`. */
export async function until(check: () => Promise<boolean> | boolean, ms: number, everyMs = 250): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    try { if (await check()) return true; } catch { /* try again */ }
    if (Date.now() > deadline) return false;
    await sleep(everyMs);
  }
}

/**
 * A plain test socket that waits out the node's upgrade budget: a 503 at
 * the upgrade (WS_UPGRADE_RATE spent, by the fleet or by the harness's own
 * reads of every topic) is tried again a little later, for up to 30 s.
 */
export async function connectPatiently(url: string, opts: { localAddress?: string }): Promise<Client> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return await Client.connect(url, opts);
    } catch (e) {
      if (!/Unexpected server response: 503/.test((e as Error).message) || Date.now() > deadline) throw e;
      await sleep(100 + Math.random() * 200);
    }
  }
}

/** Every event of `topic` in history, read by a plain socket straight to a node joining with since 0-0. */
async function readHistory(node: GatewayNode, topic: string, trimmed: string[]): Promise<HistoryEvent[]> {
  // From a loopback address of its own (not the clients'); a node in a namespace is reached from the host end of its link.
  const c = await connectPatiently(node.wsUrl, node.ns === undefined ? { localAddress: '127.0.0.10' } : {});
  try {
    const reply = await c.request({ type: 'join', topic, since: '0-0' }, 10_000);
    if (reply['status'] !== 'ok') throw new Error(`history of ${topic}: ${JSON.stringify(reply)}`);
    // recovered: false from 0-0 means the history no longer reaches back to the topic's first event (WS_HISTORY_SIZE or TTL).
    if ((reply['data'] as { recovered?: unknown } | undefined)?.recovered === false) trimmed.push(topic);
    return c.takeEvents(topic).filter((f) => typeof f['id'] === 'string').map((f) => {
      const d = f['data'] as { p?: unknown; n?: unknown } | null;
      return { id: f['id'] as string, key: typeof d === 'object' && d !== null && typeof d.p === 'number' ? `${d.p}.${String(d.n)}` : undefined };
    });
  } finally {
    c.ws.terminate();
  }
}

interface StepWindow { name: string; survivors: string[]; from: number; to: number }

const fmtS = (ms: number): string => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(1)} s` : 'not reached');

/**
 * A publish through the admin API, tried again for up to `ms` while it is
 * refused (503 while a Redis failover settles; with WS_REDIS_ACK_REPLICAS a
 * slot without its replica yet).
 */
export async function publishPatiently(node: GatewayNode, body: Record<string, unknown>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      await node.publish(body);
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(250);
    }
  }
}

/**
 * The end of a run: one more event on every durable topic and keyed feed,
 * from the admin API, then waits (up to `ms`) until every subscriber has it.
 * A durable fence is published once: a subscriber that reconnects resumes
 * past it. A keyed one is not stored, so a subscriber whose socket was
 * being replaced at that moment never gets it (the protocol's promise is
 * the newest value to a subscriber that is there): it is published again
 * every 2 s while some keyed subscriber lacks it, as a live feed would
 * tick, and a subscriber still without it at the end was connected through
 * many of them. Answers the fleet's status then, and what the report should
 * say (repeated keyed fences, subscribers without a fence, where they were).
 */
export async function fenceAndWait(node: GatewayNode, f: Fleet, roles: Roles, ms: number): Promise<{ status: Status; findings: string[] }> {
  for (let k = 0; k < roles.topics; k++) await publishPatiently(node, { topic: durableTopic(roles, k), data: { fence: 1 } });
  let keyed = 0;
  const keyedFence = async (): Promise<void> => {
    for (let k = 0; k < roles.keyedTopics; k++) await publishPatiently(node, { topic: keyedTopic(roles, k), key: 'fence', data: { fence: 1 } });
    keyed++;
  };
  await keyedFence();
  let last = Date.now();
  await until(async () => {
    const s = await f.status(1);
    if (s.keyedFenceMissing > 0 && Date.now() - last >= 2000) {
      await keyedFence();
      last = Date.now();
    }
    return s.fenceMissing === 0 && s.keyedFenceMissing === 0;
  }, ms, 500);
  const status = await f.status(1);
  const findings: string[] = [];
  if (keyed > 1) findings.push(`the keyed fence went out ${keyed} times before every keyed subscriber had it (subscribers reconnecting when it was published)`);
  if (status.fenceMissing > 0) findings.push(`${status.fenceMissing} durable subscriptions never got the fence`);
  if (status.keyedFenceMissing > 0) {
    const ks = await f.keyedStale(1);
    findings.push(`keyed subscribers without the fence, by node.shard and state: ${JSON.stringify(ks.by)}`, ...ks.examples);
  }
  return { status, findings };
}

interface Ctx {
  cfg: ChaosConfig;
  roles: Roles;
  cluster: Cluster;
  fleet: Fleet;
  now: () => number;
  log: (s: string) => void;
  findings: string[];
  /** Set by a Redis failover: when the master was killed, and what the failover took (the recovery is computed from the acks in the end). */
  failover?: Omit<FailoverResult, 'recovery'> & { killedAt: number };
  /** Set by a network fault: what it did and when (the ack latency and recovery are computed from the acks in the end). */
  netFault?: Omit<NetFaultResult, 'ackBefore' | 'ackDuring' | 'recovery'> & { from: number; to: number };
}

/** Waits until every client is open again, or 99% have been for 5 s, or the bound from `from` runs out. */
async function waitBack(ctx: Ctx, from: number, what: string): Promise<Status> {
  const total = ctx.cfg.clients;
  let at99: number | undefined;
  let st: Status | undefined;
  await until(async () => {
    st = await ctx.fleet.status();
    if (st.open >= Math.ceil(0.99 * total)) at99 ??= ctx.now(); else at99 = undefined;
    return st.open >= total || (at99 !== undefined && ctx.now() - at99 >= 5000) || ctx.now() - from > ctx.cfg.max99Ms;
  }, ctx.cfg.max99Ms + 30_000, 200);
  ctx.log(`    ${what}: ${st?.open ?? '?'}/${total} open ${((ctx.now() - from) / 1000).toFixed(1)} s after`);
  return st!;
}

async function drainStep(ctx: Ctx, node: GatewayNode, other: GatewayNode): Promise<StepWindow> {
  const from = ctx.now();
  ctx.log(`    SIGTERM ${node.name}`);
  node.signal('SIGTERM');
  // WS_DRAIN_MAX_MS (30 s by default) bounds the drain; then it exits 0.
  if (!(await node.waitExit(45_000))) {
    ctx.findings.push(`${node.name} did not exit within 45 s of SIGTERM`);
    node.killNow();
    await node.waitExit(5000);
  } else if (node.exitCode !== 0) ctx.findings.push(`${node.name} exited with ${String(node.exitCode ?? node.exitSignal)} after SIGTERM`);
  ctx.log(`    ${node.name} exited ${((ctx.now() - from) / 1000).toFixed(1)} s after SIGTERM (code ${String(node.exitCode)})`);
  await waitBack(ctx, from, `after the drain of ${node.name}`);
  await node.start();
  await ctx.cluster.waitUp([Cluster.serverName(node), Cluster.serverName(other)], 20_000);
  ctx.log(`    ${node.name} started again and UP in both load balancers`);
  return { name: `drain ${node.name}`, survivors: [other.name], from, to: ctx.now() };
}

/** A Redis master to kill, and how to wait for its failover (the kit's waitFailover, which returns the promoted server). */
interface FailoverTarget {
  readonly victim: RedisServer;
  /** How the report names it. */
  readonly what: string;
  readonly waitFailover: (killedPort: number, timeoutMs: number) => Promise<RedisServer>;
}

/**
 * Kills `t.victim` (SIGKILL: the kit's servers run without persistence)
 * under publishing, waits for the failover, lets publishing go on for
 * `afterFailoverMs`, starts the old master again and waits until it is a
 * replica with its link up. Meanwhile both nodes' /health/ready is watched
 * (every 200 ms) for when they are ready again.
 */
async function redisFailover(ctx: Ctx, t: FailoverTarget): Promise<StepWindow[]> {
  const { a, b } = ctx.cluster;
  const from = ctx.now();
  let lastUnready: number | undefined;
  let unreadyAtEnd = false;
  let watching = true;
  const watch = (async () => {
    while (watching) {
      const asked = ctx.now();
      const [ra, rb] = await Promise.all([a.ready(), b.ready()]);
      unreadyAtEnd = !ra || !rb;
      if (unreadyAtEnd) lastUnready = asked;
      await sleep(200);
    }
  })();
  try {
    ctx.log(`    SIGKILL ${t.what}`);
    await t.victim.stop();
    const promoted = await t.waitFailover(t.victim.port, ctx.cfg.failoverWaitMs);
    const failoverMs = ctx.now() - from;
    ctx.log(`    :${promoted.port} is the new master ${fmtS(failoverMs)} after the kill`);
    const bothReady = async (): Promise<boolean> => (await a.ready()) && (await b.ready());
    if (!(await until(bothReady, 30_000, 200))) {
      ctx.findings.push(`a node was not ready 30 s after the failover (A ${await a.ready()}, B ${await b.ready()}); Redis then: ${await ctx.cluster.redisState()}`);
      ctx.log(`    ${ctx.findings.at(-1)!}`);
    }
    await sleep(ctx.cfg.afterFailoverMs);
    await t.victim.start();
    ctx.log(`    old master :${t.victim.port} started again ${fmtS(ctx.now() - from)} after the kill`);
    let rejoinedMs = NaN;
    if (await until(async () => {
      const info = await t.victim.cli('INFO', 'replication');
      return /^role:slave\r?$/m.test(info) && /^master_link_status:up\r?$/m.test(info);
    }, 60_000, 200)) rejoinedMs = ctx.now() - from;
    else ctx.findings.push(`the old master :${t.victim.port} was not a linked replica 60 s after it started again`);
    ctx.log(`    old master :${t.victim.port} ${Number.isNaN(rejoinedMs) ? 'not a replica yet' : `a replica with its link up ${fmtS(rejoinedMs)} after the kill`}`);
    watching = false;
    await watch;
    // NaN: a node was still not ready when the step ended.
    const readyMs = lastUnready === undefined ? 0 : unreadyAtEnd ? NaN : lastUnready + 200 - from;
    ctx.log(`    nodes ${lastUnready === undefined ? 'never unready' : Number.isNaN(readyMs) ? 'NOT READY at the end of the step' : `ready again by ${fmtS(readyMs)} after the kill`}`);
    if (Number.isNaN(readyMs)) ctx.findings.push(`a node was still not ready ${fmtS(ctx.now() - from)} after the kill (A ${await a.ready()}, B ${await b.ready()}); Redis then: ${await ctx.cluster.redisState()}`);
    ctx.failover = { killed: t.what, promoted: `:${promoted.port}`, failoverMs, readyMs, rejoinedMs, killedAt: from };
    ctx.findings.push(`Redis after the failover: ${await ctx.cluster.redisState()}`);
    return [{ name: 'kill master', survivors: ['A', 'B'], from, to: ctx.now() }];
  } finally {
    watching = false;
    await watch;
  }
}

/** Readiness of every node and the load balancers' view of one server, polled every `everyMs` until stopped; changes are logged. */
function watchStates(ctx: Ctx, server: string, everyMs = 200): { stop(): Promise<{ ready: Map<string, StateSample[]>; lb: Map<string, StateSample[]> }> } {
  const ready = new Map<string, StateSample[]>(ctx.cluster.nodes.map((n) => [n.name, []]));
  const lb = new Map<string, StateSample[]>(ctx.cluster.lbs.map((l) => [l.name, []]));
  const said = new Map<string, string>();
  const note = (who: string, state: string, at: number): void => {
    if (said.has(who) && said.get(who) !== state) ctx.log(`      ${fmtS(at)}: ${who} ${state}`);
    said.set(who, state);
  };
  let watching = true;
  const loop = (async () => {
    while (watching) {
      const asked = ctx.now();
      await Promise.all([
        ...ctx.cluster.nodes.map(async (n) => {
          const up = await n.ready();
          ready.get(n.name)!.push({ ms: asked, up });
          note(`${n.name} /health/ready`, up ? '200' : 'not 200', asked);
        }),
        ...ctx.cluster.lbs.map(async (l) => {
          // A stats socket that does not answer is no sample.
          const st = (await l.servers().catch(() => ({} as Record<string, string>)))[server];
          if (st === undefined) return;
          lb.get(l.name)!.push({ ms: asked, up: st.startsWith('UP') });
          note(`${l.name} ${server}`, st.startsWith('UP') ? 'UP' : 'DOWN', asked);
        }),
      ]);
      await sleep(Math.max(0, everyMs - (ctx.now() - asked)));
    }
  })();
  return {
    async stop() {
      watching = false;
      await loop;
      return { ready, lb };
    },
  };
}

interface LinkFault {
  /** For the report: `A's Redis traffic (:6379) dropped both ways`. */
  readonly what: string;
  readonly name: string;
  readonly apply: () => Promise<void>;
  readonly lift: () => Promise<void>;
  readonly holdMs: number;
  readonly expect: ReadinessExpectation;
  /** Read just before the fault is lifted: why it did not hold as asked, if it did not. */
  readonly failure?: () => string | undefined;
}

/**
 * A fault on node A's link under publishing: a baseline, the fault for
 * `holdMs`, lifted, then until A is ready and UP in both load balancers
 * (bounded), and `netAfterMs` more for late flaps. Readiness of both nodes
 * and A's state in each load balancer are polled every 200 ms throughout,
 * and each node's sluice_redis_outages_total read before and after.
 */
async function linkFault(ctx: Ctx, f: LinkFault): Promise<StepWindow[]> {
  const { a } = ctx.cluster;
  const nodes = ctx.cluster.nodes;
  const outages = async (): Promise<number[]> => Promise.all(nodes.map((n) => n.metric('sluice_redis_outages_total')));
  const before = await outages();
  const watch = watchStates(ctx, Cluster.serverName(a));
  let stopped = false;
  try {
    await sleep(ctx.cfg.netBaselineMs);
    const from = ctx.now();
    await f.apply();
    ctx.log(`    ${f.what} (${fmtS(from)})`);
    await sleep(Math.max(0, f.holdMs - (ctx.now() - from)));
    const failure = f.failure?.();
    // The fault ends when its lifting begins (slowLink's clear takes the loss off first, then lets the pump deliver what it holds).
    const to = ctx.now();
    await f.lift();
    ctx.log(`    fault lifted after ${fmtS(to - from)} (lifting took ${fmtS(ctx.now() - to)})${failure === undefined ? '' : `; it did not hold: ${failure}`}`);
    if (!(await until(() => a.ready(), 60_000, 200))) ctx.findings.push(`A was not ready 60 s after the fault was lifted; Redis then: ${await ctx.cluster.redisState()}`);
    else ctx.log(`    A ready ${fmtS(ctx.now() - to)} after the lifting began`);
    try {
      await ctx.cluster.waitUp(['node-a', 'node-b'], 30_000);
    } catch (e) {
      ctx.findings.push((e as Error).message);
    }
    await sleep(ctx.cfg.netAfterMs);
    const states = await watch.stop();
    stopped = true;
    const after = await outages();
    await waitBack(ctx, from, 'after the fault');
    const lbStats = [...states.lb.values()].map((x) => stateStats(x, from, to));
    const othersUnready = nodes.filter((n) => n !== a).reduce((k, n) => k + stateStats(states.ready.get(n.name)!, from, to).downs, 0);
    ctx.netFault = {
      node: a.name, what: f.what, faultMs: to - from, from, to,
      ready: stateStats(states.ready.get(a.name)!, from, to),
      lb: mergeStateStats(lbStats),
      othersUnready,
      outages: Object.fromEntries(nodes.map((n, i) => [n.name, after[i]! - before[i]!])),
      expect: f.expect,
      ...(failure === undefined ? {} : { faultFailure: failure }),
    };
    const lbText = [...states.lb.keys()].map((l, i) => {
      const x = lbStats[i]!;
      return `${l}: ${x.downs} DOWN${x.downs === 0 ? '' : `, first ${fmtS(x.firstDownMs)} after the start, UP again ${fmtS(x.upAgainMs)} after the end, ${fmtS(x.downMs)} DOWN`}`;
    }).join('; ');
    const r = ctx.netFault.ready;
    ctx.findings.push(`network fault: ${f.what} for ${fmtS(to - from)}; A /health/ready: ${r.downs} times not 200` +
      `${r.downs === 0 ? '' : `, first ${fmtS(r.firstDownMs)} after the start, 200 again ${fmtS(r.upAgainMs)} after the end, ${fmtS(r.downMs)} not ready in all`}; ` +
      `B /health/ready: ${othersUnready} times not 200; load balancers (node-a): ${lbText}; ` +
      `sluice_redis_outages_total over the step: ${JSON.stringify(ctx.netFault.outages)}`);
    return [{ name: f.name, survivors: ['A', 'B'], from, to: ctx.now() }];
  } finally {
    if (!stopped) await watch.stop();
  }
}

/** Master port -> the slot ranges it serves, from one node's CLUSTER NODES (failed nodes left out). */
export function clusterMasters(nodesText: string): Map<number, [number, number][]> {
  const out = new Map<number, [number, number][]>();
  for (const line of nodesText.trim().split('\n')) {
    // <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot> ...
    const f = line.split(' ');
    const flags = (f[2] ?? '').split(',');
    if (!flags.includes('master') || flags.some((x) => x.startsWith('fail'))) continue;
    const hostPort = (f[1] ?? '').split('@')[0]!;
    // A slot being migrated is listed as [slot->-id]: not a range served.
    const ranges = f.slice(8).filter((x) => !x.startsWith('[')).map((x): [number, number] => {
      const [lo, hi = lo] = x.split('-').map(Number);
      return [lo!, hi!];
    });
    if (ranges.length > 0) out.set(Number(hostPort.slice(hostPort.lastIndexOf(':') + 1)), ranges);
  }
  return out;
}

/**
 * The Cluster master whose slots hold the most published topics (a topic's
 * keys share one slot, that of its stream `sluice:h:{default/<topic>}`, as
 * CLUSTER KEYSLOT says); ties go to the master of the lowest slots. Checked:
 * each of its topics' slots holds a key there (the warm-up stored one).
 */
async function clusterTarget(ctx: Ctx): Promise<FailoverTarget> {
  const rc = ctx.cluster.redisCluster;
  const masters = await rc.masters();
  const asked = masters[0]!;
  const ranges = clusterMasters(await asked.cli('CLUSTER', 'NODES'));
  const topics = publishedTopics(ctx.roles, ctx.cfg.clients);
  const byMaster = new Map<number, { topic: number; slot: number }[]>(masters.map((m) => [m.port, []]));
  for (const k of topics) {
    const slot = Number((await asked.cli('CLUSTER', 'KEYSLOT', topicRedisKeys(topicKey('default', durableTopic(ctx.roles, k))).stream)).trim());
    const port = [...ranges].find(([, rs]) => rs.some(([lo, hi]) => lo <= slot && slot <= hi))?.[0];
    if (port === undefined || !byMaster.has(port)) throw new Error(`no master serves slot ${slot} of topic ${k}: ${JSON.stringify([...ranges])}`);
    byMaster.get(port)!.push({ topic: k, slot });
  }
  const [port, mine] = [...byMaster].reduce((best, e) => (e[1].length > best[1].length ? e : best));
  const victim = masters.find((m) => m.port === port)!;
  for (const { topic, slot } of mine) {
    if (Number((await victim.cli('CLUSTER', 'COUNTKEYSINSLOT', String(slot))).trim()) === 0) {
      throw new Error(`slot ${slot} of ${durableTopic(ctx.roles, topic)} holds no key on :${port}: the harness's key names are not the gateway's`);
    }
  }
  const replicas = await rc.replicasOf(victim);
  if (replicas.length === 0) throw new Error(`master :${port} has no replica to fail over to`);
  ctx.log(`    published topics per master: ${[...byMaster].map(([p, ts]) => `:${p} ${ts.length}`).join(', ')}`);
  return {
    victim, what: `master :${port} (${mine.length} of ${topics.length} published topics; its replica :${replicas.map((x) => x.port).join(', :')})`,
    waitFailover: (p, ms) => rc.waitFailover(p, ms),
  };
}

const SCRIPTS: Readonly<Record<ScenarioName, (ctx: Ctx) => Promise<StepWindow[]>>> = {
  async rolling(ctx) {
    const { a, b } = ctx.cluster;
    const one = await drainStep(ctx, a, b);
    await sleep(2000);
    const two = await drainStep(ctx, b, a);
    return [one, two];
  },
  async kill(ctx) {
    const { a, b } = ctx.cluster;
    const from = ctx.now();
    ctx.log('    SIGKILL A');
    a.signal('SIGKILL');
    await a.waitExit(5000);
    await waitBack(ctx, from, 'after SIGKILL A');
    await a.start();
    await ctx.cluster.waitUp(['node-a', 'node-b'], 20_000);
    ctx.log('    A started again and UP in both load balancers');
    return [{ name: 'SIGKILL A', survivors: [b.name], from, to: ctx.now() }];
  },
  async redis(ctx) {
    const from = ctx.now();
    ctx.log(`    redis stopped for ${ctx.cfg.redisDownMs / 1000} s`);
    await ctx.cluster.redis.stop();
    await sleep(ctx.cfg.redisDownMs);
    await ctx.cluster.redis.start();
    ctx.log(`    redis started again ${((ctx.now() - from) / 1000).toFixed(1)} s after the stop`);
    if (!(await until(async () => (await ctx.cluster.a.ready()) && (await ctx.cluster.b.ready()), 30_000))) ctx.findings.push('a node was not ready 30 s after Redis came back');
    await ctx.cluster.waitUp(['node-a', 'node-b'], 20_000);
    ctx.log(`    both nodes UP again ${((ctx.now() - from) / 1000).toFixed(1)} s after the stop`);
    await waitBack(ctx, from, 'after the outage');
    return [{ name: 'redis down', survivors: ['A', 'B'], from, to: ctx.now() }];
  },
  async storm(ctx) {
    const from = ctx.now();
    ctx.log('    SIGKILL both load balancers, start them again');
    for (const l of ctx.cluster.lbs) l.killNow();
    await Promise.all(ctx.cluster.lbs.map((l) => l.stop('SIGKILL')));
    await Promise.all(ctx.cluster.lbs.map((l) => l.start()));
    ctx.log(`    load balancers back ${((ctx.now() - from) / 1000).toFixed(1)} s after the kill`);
    await waitBack(ctx, from, 'after the cut');
    return [{ name: 'all cut', survivors: ['A', 'B'], from, to: ctx.now() }];
  },
  async sentinel(ctx) {
    return sentinelFailover(ctx);
  },
  async 'sentinel-n0'(ctx) {
    return sentinelFailover(ctx);
  },
  async cluster(ctx) {
    return redisFailover(ctx, await clusterTarget(ctx));
  },
  async 'cluster-n0'(ctx) {
    return redisFailover(ctx, await clusterTarget(ctx));
  },
  async partition(ctx) {
    const ns = ctx.cluster.nsA;
    const port = ctx.cluster.redis.port;
    return linkFault(ctx, {
      what: `A's Redis traffic (:${port}) dropped both ways`, name: 'cut A from Redis',
      apply: () => ns.dropPort(port), lift: () => ns.restore(), holdMs: ctx.cfg.partitionMs, expect: ctx.cfg.partitionExpect,
    });
  },
  async slowlink(ctx) {
    const ns = ctx.cluster.nsA;
    const port = ctx.cluster.redis.port;
    const s = ctx.cfg.slowLink;
    const dirs = s.directions === 'both' ? 'each way' : s.directions === 'toHost' ? 'from A to Redis' : 'from Redis to A';
    return linkFault(ctx, {
      what: `A's Redis traffic (:${port}) slowed, ${s.delayMs} ms and ${s.lossPct}% loss ${dirs}`, name: 'slow A\'s link',
      apply: () => ns.slowLink({ delayMs: s.delayMs, lossPct: s.lossPct, port, directions: s.directions }),
      lift: () => ns.clear(), holdMs: s.ms, expect: {}, failure: () => ns.pumpFailure,
    });
  },
};

async function sentinelFailover(ctx: Ctx): Promise<StepWindow[]> {
  const group = ctx.cluster.sentinel;
  const victim = await group.master();
  return redisFailover(ctx, { victim, what: `master :${victim.port}`, waitFailover: (p, ms) => group.waitFailover(p, ms) });
}

export async function runScenario(name: ScenarioName, cfg: ChaosConfig, log: (s: string) => void, maxMs = 10 * 60_000): Promise<ScenarioResult> {
  const t0Epoch = performance.timeOrigin + performance.now();
  const now = (): number => performance.timeOrigin + performance.now() - t0Epoch;
  const run = `${name}${Date.now().toString(36)}`;
  const roles: Roles = { ...cfg.roles, run };
  const findings: string[] = [];
  let cluster: Cluster | undefined;
  let fleet: Fleet | undefined;
  let poller: Poller | undefined;
  const setup = SETUP[name];
  const base = {
    scenario: name, planned: name === 'rolling', clients: cfg.clients, drainRate: cfg.drainRate, upgradeRate: cfg.upgradeRate,
    lossAllowed: setup.lossAllowed === true, ackReplicas: setup.ackReplicas,
    // A fault on one node's link is no crash: nothing in it excuses an error line.
    ...(setup.nodeAInNetns === true ? { errorLinesBreak: true } : {}),
  };
  let redisText: string = setup.redis;
  // Known once the clients connected (a run that fails later still says how many did).
  let connected = 0;
  let timer: NodeJS.Timeout | undefined;
  const overall = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`scenario took longer than ${maxMs / 1000} s`)), maxMs); });
  const body = async (): Promise<ScenarioResult> => {
    log(`  ${name}: ${DESCRIBE[name]}; ${cfg.clients} clients in ${cfg.procs} processes`);
    const env: Record<string, string> = { WS_DRAIN_RATE: String(cfg.drainRate), WS_UPGRADE_RATE: String(cfg.upgradeRate) };
    if (setup.ackReplicas !== undefined) env['WS_REDIS_ACK_REPLICAS'] = String(setup.ackReplicas);
    cluster = await Cluster.start({
      shards: cfg.shards, env, haproxyInter: cfg.haproxyInter, redis: setup.redis, nodeLogs: cfg.nodeLogs === undefined ? undefined : join(cfg.nodeLogs, run),
      nodeAInNetns: setup.nodeAInNetns,
    }, log);
    const ns = cluster.netns;
    redisText = `${describeRedis(cluster.redisSetup)}${setup.ackReplicas === undefined ? '' : `; WS_REDIS_ACK_REPLICAS=${setup.ackReplicas}`}` +
      `${ns === undefined ? '' : `; node A in network namespace ${ns.name} (A at ${ns.nsAddr}, Redis reached at ${ns.hostAddr})`}`;
    poller = new Poller(cluster.nodes, now);
    poller.start();
    fleet = await Fleet.start(cfg.clients, cfg.procs);
    const tc = now();
    const conn = await fleet.connect(cluster.urls, roles, cfg.concurrency, t0Epoch);
    connected = conn.ready;
    log(`    ${conn.ready}/${cfg.clients} clients connected and joined in ${((now() - tc) / 1000).toFixed(1)} s${conn.failed > 0 ? `; failed: ${JSON.stringify(conn.reasons)}` : ''}`);
    const c = cluster;
    const f = fleet;
    // Warm-up: one durable event on every topic (so every subscription has a resume position) and a keyed one on every feed.
    for (let k = 0; k < roles.topics; k++) await c.a.publish({ topic: durableTopic(roles, k), data: { warm: 1 } });
    for (let k = 0; k < roles.keyedTopics; k++) await c.a.publish({ topic: keyedTopic(roles, k), key: 'sym0', data: { warm: 1 } });
    if (!(await until(async () => (await f.status()).cold === 0, 30_000))) findings.push(`subscriptions without the warm-up event: ${(await f.status()).cold}`);
    await f.publishing(true);
    await sleep(3000);
    const ctx: Ctx = { cfg, roles, cluster: c, fleet: f, now, log, findings };
    const fleetPids = new Set(f.procs.map((p) => p.pid));
    const cpu = new CpuSampler((pid, comm) => (c.nodes.some((n) => n.pid === pid) ? 'gateways' : fleetPids.has(pid) ? 'clients'
      : comm === 'haproxy' ? 'HAProxy' : comm.startsWith('redis-') ? 'Redis' : pid === process.pid ? 'orchestrator' : undefined), now);
    let windows: StepWindow[];
    try {
      windows = await SCRIPTS[name](ctx);
    } finally {
      cpu.stop();
    }
    await sleep(3000);
    await f.publishing(false);
    const drained = await until(async () => (await f.status()).pending === 0, 90_000, 500);
    const st0 = await f.status();
    log(`    publishing stopped; outboxes ${drained ? 'empty' : `still hold ${st0.pending}`}; ${st0.acked} acked`);
    if (!drained) findings.push(`outboxes still held ${st0.pending} publishes 90 s after publishing stopped; Redis then: ${await c.redisState()}`);
    // The fence: one more event on every topic and feed, from the admin API; once every subscriber has it, delivery is over.
    const live = c.nodes.find((n) => n.alive) ?? c.a;
    const fence = await fenceAndWait(live, f, roles, 30_000);
    const st = fence.status;
    findings.push(...fence.findings);
    const { acked, extras } = await f.acked();
    const byTopic = ackedByTopic(acked);
    const history = new Map<string, HistoryEvent[]>();
    const trimmed: string[] = [];
    for (let k = 0; k < roles.topics; k++) history.set(durableTopic(roles, k), await readHistory(live, durableTopic(roles, k), trimmed));
    if (trimmed.length > 0) findings.push(`history trimmed (recovered: false from 0-0) on ${trimmed.length} topics: ${trimmed.slice(0, 5).join(', ')}`);
    const hist = checkHistory(acked, history);
    // Deliveries of the events lost from history are counted apart (what a failover without replica acks may lose).
    const delivery = mergeDeliveryChecks(await f.verify(Object.fromEntries([...byTopic].map(([t, ids]) => [t, [...ids]])), hist.lostIds ?? {}));
    const { clients: timelines, stalls } = await f.timelines();
    const series = (names: readonly string[]): CounterPoll[] => sumSeries(names.map((n) => accumulate(poller!.raw.get(n) ?? [])));
    const downsIn = (w: StepWindow): number[] => timelines.flatMap((t) => t.downs.filter((u) => u >= w.from && u < w.to)).sort((x, y) => x - y);
    const steps: StepResult[] = windows.map((w) => {
      const reconnect = reconnectStats(timelines, w.from, w.to);
      // Who had the CPU from the first drop until 99% were back.
      const dropAt = w.from + reconnect.firstDropMs;
      const returnCpu = cpuBetween(cpu.samples, dropAt, dropAt + reconnect.t99FromDropMs);
      if (returnCpu !== undefined) findings.push(`${name}, ${w.name}: CPU from the first drop until 99% were back: ${describeCpu(returnCpu, availableParallelism())}`);
      return {
        name: w.name, survivors: w.survivors,
        peakArrivalsPerS: peakRate(series(w.survivors), 1000, w.from, w.to),
        peakArrivalsByNode: Object.fromEntries(w.survivors.map((n) => [n, peakRate(series([n]), 1000, w.from, w.to)])),
        overBudgetByNode: Object.fromEntries(w.survivors.map((n) => [n, bucketGrowth(accumulate(poller!.overBudget.get(n) ?? []), w.from, w.to, w.to - w.from)[0] ?? 0])),
        clientPeakPerS: peakInWindow(timelines.flatMap((t) => t.ups.filter((u) => u >= w.from && u < w.to)).sort((x, y) => x - y), 1000),
        closesPeakPerS: peakInWindow(downsIn(w), 1000),
        closesPeak5sPerS: peakInWindow(downsIn(w), 5000) / 5,
        reconnect,
        returns: returnSplit(timelines, w.from, w.to),
        clientStalls: stallsIn(stalls, dropAt, dropAt + reconnect.t99FromDropMs),
        ...(returnCpu === undefined ? {} : { returnCpu }),
      };
    });
    await poller.stop();
    const shardRestarts = poller.shardRestarts();
    const replicaAckFailures = poller.replicaAckFailures();
    let failover: FailoverResult | undefined;
    if (ctx.failover !== undefined) {
      const { killedAt, ...rest } = ctx.failover;
      failover = { ...rest, recovery: recoveryStats(acked, killedAt) };
      const rec = failover.recovery;
      findings.push(`failover: killed ${rest.killed}; new master ${rest.promoted} ${fmtS(rest.failoverMs)} after the kill; nodes ready ` +
        `${rest.readyMs === 0 ? 'throughout' : `again ${fmtS(rest.readyMs)} after it`}; old master a linked replica again ${fmtS(rest.rejoinedMs)} after the kill; ` +
        `${rec.delayed} publishes acked more than ${rec.lateMs / 1000} s after publish(), the first of them ${fmtS(rec.resumeMs)} after the kill, ` +
        `the last ${fmtS(rec.recoverMs)} after it (the longest wait ${fmtS(rec.maxAckMs)})`);
    }
    let netFault: NetFaultResult | undefined;
    if (ctx.netFault !== undefined) {
      const { from, to, ...rest } = ctx.netFault;
      const byNode = (lo: number, hi: number): Record<string, LatencyStats> =>
        Object.fromEntries(c.nodes.map((n) => [n.name, ackLatency(acked, lo, hi, new Set(n.nodeIds))]));
      netFault = { ...rest, ackBefore: byNode(-Infinity, from), ackDuring: byNode(from, to), recovery: recoveryStats(acked, from) };
      const lat = (l: LatencyStats): string => (l.n === 0 ? 'none' : `p50 ${Math.round(l.p50Ms)} ms, p99 ${Math.round(l.p99Ms)} ms, max ${Math.round(l.maxMs)} ms (${l.n})`);
      const rec = netFault.recovery;
      findings.push(`publish ack latency by node: ${c.nodes.map((n) => `${n.name} before the fault ${lat(netFault!.ackBefore[n.name]!)}, during it ${lat(netFault!.ackDuring[n.name]!)}`).join('; ')}; ` +
        `acked without a node: ${acked.filter((x) => x.node === undefined).length}; ` +
        `${rec.delayed} publishes acked more than ${rec.lateMs / 1000} s after publish() from the fault on${rec.delayed === 0 ? '' : `, the first ${fmtS(rec.resumeMs)} after its start, the last ${fmtS(rec.recoverMs)} after it`}`);
    }
    const redisOutages = poller.redisOutages();
    findings.push(`unavailable answers seen by clients: ${extras.unavailable}; replica-ack (WAIT) shortfalls per node: ${JSON.stringify(replicaAckFailures)}; ` +
      `shard restarts per node: ${JSON.stringify(shardRestarts)}; Redis outages per node (sluice_redis_outages_total): ${JSON.stringify(redisOutages)}`);
    if (hist.lost > 0) findings.push(`acked lost: ${hist.lost} of ${acked.length} acknowledged publishes not in history${setup.lossAllowed === true ? ` (allowed with WS_REDIS_ACK_REPLICAS=${setup.ackReplicas ?? 0}: counted, not failed)` : ''}; ` +
      `${delivery.missingLost} (subscriber, lost event) pairs undelivered`);
    for (const n of c.nodes) if (n.warnings.size > 0) findings.push(`${n.name} warnings: ${JSON.stringify(Object.fromEntries(n.warnings))}`);
    for (const n of c.nodes) { n.sampleRss(); if (n.stderrLines > 0) findings.push(`${n.name} wrote ${n.stderrLines} stderr lines: ${n.stderrExamples.join(' | ')}`); }
    for (const l of c.lbs) {
      // HAProxy reports every server state change on stderr: those are counted, anything else is shown.
      const changes = l.stderr.filter((x) => /Server sluice\/node-\w+ is (UP|DOWN)/.test(x));
      const other = l.stderr.filter((x) => !changes.includes(x));
      findings.push(`${l.name}: ${changes.length} server state changes (${changes.map((x) => /node-\w+ is (UP|DOWN)/.exec(x)?.[0]).join(', ')})`);
      if (other.length > 0) findings.push(`${l.name} stderr: ${other.slice(0, 5).join(' | ')}`);
    }
    if (poller.errors > 0) findings.push(`${poller.errors} /metrics polls failed (a node down or busy)`);
    if (Object.keys(extras.refusals).length > 0) findings.push(`refused upgrades seen by clients, by status: ${JSON.stringify(extras.refusals)}`);
    if (Object.keys(extras.errors).length > 0) findings.push(`client errors by code: ${JSON.stringify(extras.errors)}`);
    findings.push(`client disconnects by close: ${JSON.stringify(extras.closeCodes)}; keyed events received: ${extras.keyedReceived}; keyed-feed rejoins without a resume position (no durable event on a feed): ${extras.keyedNoPosition}`);
    findings.push(...extras.odd, ...hist.examples, ...delivery.examples);
    return {
      ...base, redis: redisText, connected: conn.ready, wallS: now() / 1000,
      acked: acked.length, unacked: st.pending, rejected: extras.rejected,
      history: hist, delivery, recoveredFalse: extras.recoveredFalse,
      keyedStale: st.keyedFenceMissing, keyedSubscribers: st.keyedSubscribers,
      steps, notConnected: st.clients - st.open + (cfg.clients - st.clients),
      peakRssMiB: Object.fromEntries(c.nodes.map((n) => [n.name, n.peakRssBytes / 2 ** 20])),
      errorLines: Object.fromEntries(c.nodes.map((n) => [n.name, n.errorLines])),
      errorExamples: c.nodes.flatMap((n) => n.errorExamples),
      shardRestarts, replicaAckFailures, unavailableAnswers: extras.unavailable, failover, netFault, redisOutages,
      findings,
      notable: c.nodes.flatMap((n) => n.notable.map((l) => `${n.name}: ${l}`)),
    };
  };
  try {
    return await Promise.race([body(), overall]);
  } catch (err) {
    const msg = (err as Error).message;
    log(`  ${name}: FAILED: ${msg}`);
    if (cluster !== undefined) findings.push(`Redis when it failed: ${await cluster.redisState().catch((e: unknown) => String(e))}`);
    return {
      ...base, redis: redisText, connected, wallS: now() / 1000, acked: 0, unacked: 0, rejected: {},
      history: { acked: 0, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] },
      delivery: { subscriptions: 0, expected: 0, missing: 0, missingLost: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] },
      recoveredFalse: 0, keyedStale: 0, keyedSubscribers: 0, steps: [], notConnected: 0,
      peakRssMiB: cluster === undefined ? {} : Object.fromEntries(cluster.nodes.map((n) => [n.name, n.peakRssBytes / 2 ** 20])),
      errorLines: cluster === undefined ? {} : Object.fromEntries(cluster.nodes.map((n) => [n.name, n.errorLines])),
      errorExamples: cluster === undefined ? [] : cluster.nodes.flatMap((n) => n.errorExamples),
      shardRestarts: poller?.shardRestarts(),
      findings, error: msg,
      notable: cluster === undefined ? [] : cluster.nodes.flatMap((n) => n.notable.map((l) => `${n.name}: ${l}`)),
    };
  } finally {
    clearTimeout(timer);
    await poller?.stop().catch(() => undefined);
    if (fleet !== undefined) { await fleet.close().catch(() => undefined); await fleet.exit().catch(() => undefined); }
    if (cluster !== undefined) await cluster.stop().catch((e: unknown) => log(`    cleanup: ${(e as Error).message}`));
  }
}
