// The chaos scenarios. Each one starts its own cluster (Redis, nodes A and B,
// two HAProxy processes) and its own clients, lets them settle and publish,
// breaks the cluster one way, waits (bounded) for the clients to come back,
// stops publishing, waits for every outbox to empty, publishes a fence on
// every topic, and then checks: every acked publish is in history once and
// reached every subscriber once. Everything it started is stopped in the end,
// whatever happened.

import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '@sluice/gateway/testing';
import { ackedByTopic, checkHistory, mergeDeliveryChecks, reconnectStats, type HistoryEvent, type ScenarioResult, type StepResult } from './analysis.ts';
import { accumulate, peakInWindow, peakRate, sumSeries, type CounterPoll } from '../src/lib/series.ts';
import { Cluster, type GatewayNode, Poller } from './cluster.ts';
import { durableTopic, Fleet, keyedTopic, type Roles, type Status } from './fleet.ts';

export type ScenarioName = 'rolling' | 'kill' | 'redis' | 'storm';
export const ALL_SCENARIOS: readonly ScenarioName[] = ['rolling', 'kill', 'redis', 'storm'];

export const DESCRIBE: Readonly<Record<ScenarioName, string>> = {
  rolling: 'rolling restart: SIGTERM A (drain), start A, then the same for B',
  kill: 'SIGKILL A (no drain), start it again',
  redis: 'Redis stopped (SIGTERM, append-only file) for 10 s, started again',
  storm: 'both load balancers killed (SIGKILL) and started again: every socket of both nodes cut at once',
};

export interface ChaosConfig {
  readonly clients: number;
  readonly procs: number;
  readonly shards: number;
  /** Handshakes in flight per client process while the clients first connect. */
  readonly concurrency: number;
  /** WS_DRAIN_RATE of both nodes (the gateway's default is 500). */
  readonly drainRate: number;
  readonly redisDownMs: number;
  readonly roles: Omit<Roles, 'run'>;
  /** Bound on the time until 99% of a step's dropped clients are back. */
  readonly max99Ms: number;
  readonly haproxyInter: string;
}

export function defaultConfig(clients: number): ChaosConfig {
  return {
    clients, procs: Math.max(2, Math.ceil(clients / 2500)), shards: 2, concurrency: 100, drainRate: 500, redisDownMs: 10_000,
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
async function until(check: () => Promise<boolean> | boolean, ms: number, everyMs = 250): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    try { if (await check()) return true; } catch { /* try again */ }
    if (Date.now() > deadline) return false;
    await sleep(everyMs);
  }
}

/** Every event of `topic` in history, read by a plain socket straight to a node joining with since 0-0. */
async function readHistory(node: GatewayNode, topic: string, trimmed: string[]): Promise<HistoryEvent[]> {
  const c = await Client.connect(`ws://127.0.0.1:${node.port}/ws`, { localAddress: '127.0.0.10' });
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

interface Ctx {
  cfg: ChaosConfig;
  cluster: Cluster;
  fleet: Fleet;
  now: () => number;
  log: (s: string) => void;
  findings: string[];
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
};

export async function runScenario(name: ScenarioName, cfg: ChaosConfig, log: (s: string) => void, maxMs = 10 * 60_000): Promise<ScenarioResult> {
  const t0Epoch = performance.timeOrigin + performance.now();
  const now = (): number => performance.timeOrigin + performance.now() - t0Epoch;
  const run = `${name}${Date.now().toString(36)}`;
  const roles: Roles = { ...cfg.roles, run };
  const findings: string[] = [];
  let cluster: Cluster | undefined;
  let fleet: Fleet | undefined;
  let poller: Poller | undefined;
  const base = {
    scenario: name, planned: name === 'rolling', clients: cfg.clients, drainRate: cfg.drainRate,
  };
  let timer: NodeJS.Timeout | undefined;
  const overall = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`scenario took longer than ${maxMs / 1000} s`)), maxMs); });
  const body = async (): Promise<ScenarioResult> => {
    log(`  ${name}: ${DESCRIBE[name]}; ${cfg.clients} clients in ${cfg.procs} processes`);
    const env: Record<string, string> = { WS_DRAIN_RATE: String(cfg.drainRate) };
    cluster = await Cluster.start({ shards: cfg.shards, env, haproxyInter: cfg.haproxyInter }, log);
    poller = new Poller(cluster.nodes, now);
    poller.start();
    fleet = await Fleet.start(cfg.clients, cfg.procs);
    const tc = now();
    const conn = await fleet.connect(cluster.urls, roles, cfg.concurrency, t0Epoch);
    log(`    ${conn.ready}/${cfg.clients} clients connected and joined in ${((now() - tc) / 1000).toFixed(1)} s${conn.failed > 0 ? `; failed: ${JSON.stringify(conn.reasons)}` : ''}`);
    const c = cluster;
    const f = fleet;
    // Warm-up: one durable event on every topic (so every subscription has a resume position) and a keyed one on every feed.
    for (let k = 0; k < roles.topics; k++) await c.a.publish({ topic: durableTopic(roles, k), data: { warm: 1 } });
    for (let k = 0; k < roles.keyedTopics; k++) await c.a.publish({ topic: keyedTopic(roles, k), key: 'sym0', data: { warm: 1 } });
    if (!(await until(async () => (await f.status()).cold === 0, 30_000))) findings.push(`subscriptions without the warm-up event: ${(await f.status()).cold}`);
    await f.publishing(true);
    await sleep(3000);
    const ctx: Ctx = { cfg, cluster: c, fleet: f, now, log, findings };
    const windows = await SCRIPTS[name](ctx);
    await sleep(3000);
    await f.publishing(false);
    const drained = await until(async () => (await f.status()).pending === 0, 90_000, 500);
    const st0 = await f.status();
    log(`    publishing stopped; outboxes ${drained ? 'empty' : `still hold ${st0.pending}`}; ${st0.acked} acked`);
    // The fence: one more event on every topic and feed, from the admin API; once every subscriber has it, delivery is over.
    const live = c.nodes.find((n) => n.alive) ?? c.a;
    for (let k = 0; k < roles.topics; k++) await live.publish({ topic: durableTopic(roles, k), data: { fence: 1 } });
    for (let k = 0; k < roles.keyedTopics; k++) await live.publish({ topic: keyedTopic(roles, k), key: 'fence', data: { fence: 1 } });
    await until(async () => { const s = await f.status(1); return s.fenceMissing === 0 && s.keyedFenceMissing === 0; }, 30_000, 500);
    const st = await f.status(1);
    if (st.fenceMissing > 0) findings.push(`${st.fenceMissing} durable subscriptions never got the fence`);
    const { acked, extras } = await f.acked();
    const byTopic = ackedByTopic(acked);
    const delivery = mergeDeliveryChecks(await f.verify(Object.fromEntries([...byTopic].map(([t, ids]) => [t, [...ids]]))));
    const history = new Map<string, HistoryEvent[]>();
    const trimmed: string[] = [];
    for (let k = 0; k < roles.topics; k++) history.set(durableTopic(roles, k), await readHistory(live, durableTopic(roles, k), trimmed));
    if (trimmed.length > 0) findings.push(`history trimmed (recovered: false from 0-0) on ${trimmed.length} topics: ${trimmed.slice(0, 5).join(', ')}`);
    const hist = checkHistory(acked, history);
    const timelines = await f.timelines();
    const series = (names: readonly string[]): CounterPoll[] => sumSeries(names.map((n) => accumulate(poller!.raw.get(n) ?? [])));
    const downsIn = (w: StepWindow): number[] => timelines.flatMap((t) => t.downs.filter((u) => u >= w.from && u < w.to)).sort((x, y) => x - y);
    const steps: StepResult[] = windows.map((w) => ({
      name: w.name, survivors: w.survivors,
      peakArrivalsPerS: peakRate(series(w.survivors), 1000, w.from, w.to),
      clientPeakPerS: peakInWindow(timelines.flatMap((t) => t.ups.filter((u) => u >= w.from && u < w.to)).sort((x, y) => x - y), 1000),
      closesPeakPerS: peakInWindow(downsIn(w), 1000),
      closesPeak5sPerS: peakInWindow(downsIn(w), 5000) / 5,
      reconnect: reconnectStats(timelines, w.from, w.to),
    }));
    await poller.stop();
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
      ...base, connected: conn.ready, wallS: now() / 1000,
      acked: acked.length, unacked: st.pending, rejected: extras.rejected,
      history: hist, delivery, recoveredFalse: extras.recoveredFalse,
      keyedStale: st.keyedFenceMissing, keyedSubscribers: st.keyedSubscribers,
      steps, notConnected: st.clients - st.open + (cfg.clients - st.clients),
      peakRssMiB: Object.fromEntries(c.nodes.map((n) => [n.name, n.peakRssBytes / 2 ** 20])),
      errorLines: Object.fromEntries(c.nodes.map((n) => [n.name, n.errorLines])),
      errorExamples: c.nodes.flatMap((n) => n.errorExamples),
      findings,
      notable: c.nodes.flatMap((n) => n.notable.map((l) => `${n.name}: ${l}`)),
    };
  };
  try {
    return await Promise.race([body(), overall]);
  } catch (err) {
    const msg = (err as Error).message;
    log(`  ${name}: FAILED: ${msg}`);
    return {
      ...base, connected: 0, wallS: now() / 1000, acked: 0, unacked: 0, rejected: {},
      history: { acked: 0, lost: 0, storedTwice: 0, sharedIds: 0, examples: [] },
      delivery: { subscriptions: 0, expected: 0, missing: 0, duplicateIds: 0, duplicateKeys: 0, wireDuplicates: 0, examples: [] },
      recoveredFalse: 0, keyedStale: 0, keyedSubscribers: 0, steps: [], notConnected: 0,
      peakRssMiB: cluster === undefined ? {} : Object.fromEntries(cluster.nodes.map((n) => [n.name, n.peakRssBytes / 2 ** 20])),
      errorLines: cluster === undefined ? {} : Object.fromEntries(cluster.nodes.map((n) => [n.name, n.errorLines])),
      errorExamples: cluster === undefined ? [] : cluster.nodes.flatMap((n) => n.errorExamples),
      findings, error: msg,
    };
  } finally {
    clearTimeout(timer);
    await poller?.stop().catch(() => undefined);
    if (fleet !== undefined) { await fleet.close().catch(() => undefined); await fleet.exit().catch(() => undefined); }
    if (cluster !== undefined) await cluster.stop().catch((e: unknown) => log(`    cleanup: ${(e as Error).message}`));
  }
}
