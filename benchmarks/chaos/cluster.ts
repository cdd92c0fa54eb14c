// The chaos cluster on loopback: the scenario's Redis (one redis-server with
// an append-only file; or a Sentinel group, a master with 2 replicas under 3
// sentinels; or a Redis Cluster of 3 masters with a replica each), two
// gateway nodes (separate processes, WS_WORKERS shard threads each) on fixed
// ports the harness picked and checked, and two HAProxy processes in front
// (see haproxy.ts for why two). Every process is started by pid and stopped
// by pid, also when the run fails or the harness is interrupted.
//
// Node A can run in a network namespace of its own (netfault.ts; the
// partition and slowlink scenarios): it listens on the namespace's address
// (nsAddr) and reaches Redis on the host end of the veth pair (hostAddr),
// which the redis-server is told to bind as well; HAProxy, the poller and
// the harness's own requests reach A at nsAddr. Faults on that link then
// touch A's traffic and nobody else's. The namespace is made before Redis
// starts and destroyed when the cluster stops (or a start fails).

import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, type WriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  startRedis, startRedisCluster, startRedisSentinel, type RedisCluster, type RedisSentinel, type RedisServer,
} from '@sluice/redis/testing';
import { gatewayArgs, metricByLabel, metricSum, parseMetrics, PLAIN_ENV, startGateway, type Gateway } from '@sluice/gateway/testing';
import { Haproxy } from './haproxy.ts';
import { NetNs } from './netfault.ts';
import type { CounterPoll } from '../src/lib/series.ts';

/** Processes to kill if the harness goes away before it stopped them. */
const live = new Set<{ killNow(): void }>();
let hooked = false;
function track(p: { killNow(): void }): void {
  live.add(p);
  if (hooked) return;
  hooked = true;
  process.once('exit', () => { for (const x of live) x.killNow(); });
}

/** Ports below the kernel's ephemeral range (no outgoing connection can hold them), free on 127.0.0.1 when checked. */
export async function pickPorts(n: number, lo = 20_000, hi = 32_000): Promise<number[]> {
  let ephemeralLo = 32_768;
  try { ephemeralLo = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'latin1').trim().split(/\s+/)[0]); } catch { /* keep the default */ }
  const top = Math.min(hi, ephemeralLo);
  const out: number[] = [];
  for (let tries = 0; out.length < n && tries < 500; tries++) {
    const p = lo + Math.floor(Math.random() * (top - lo));
    if (out.includes(p)) continue;
    if (await canBind(p)) out.push(p);
  }
  if (out.length < n) throw new Error(`could not find ${n} free ports in [${lo}, ${top})`);
  return out;
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen({ port, host: '127.0.0.1', exclusive: true }, () => s.close(() => resolve(true)));
  });
}

/** One gateway node: restartable on the same ports; error lines and peak RSS counted over every process it ran as. */
export class GatewayNode {
  private gw: Gateway | undefined;
  starts = 0;
  /** Between its ready message and the next signal: a failed /metrics poll then counts. */
  serving = false;
  errorLines = 0;
  readonly errorExamples: string[] = [];
  stderrLines = 0;
  /** Warning lines by message, over every start. */
  readonly warnings = new Map<string, number>();
  /** The first lines above info, whole. */
  readonly notable: string[] = [];
  readonly stderrExamples: string[] = [];
  peakRssBytes = 0;
  /** Called with every log record (the scenario looks for `drain finished`). */
  onLine: ((rec: Record<string, unknown>) => void) | undefined;
  /** Every log record and stderr line of every start, when the run keeps the nodes' logs (`logFile`). */
  private logOut: WriteStream | undefined;
  /** The gateway's node id of each start (`starting sluice`, `node`): the first part of its connection ids. */
  readonly nodeIds: string[] = [];

  /**
   * `ns`: the node runs inside that network namespace (`ip netns exec`),
   * listening on ns.nsAddr; `env` must then give it a REDIS_URL on ns.hostAddr.
   */
  constructor(readonly name: string, readonly port: number, readonly adminPort: number, private readonly env: Record<string, string>,
    private readonly logFile?: string, readonly ns?: NetNs) {
    track(this);
  }

  /** The address the node listens on (both ports): 127.0.0.1, or its namespace's. */
  get host(): string {
    return this.ns?.nsAddr ?? '127.0.0.1';
  }

  /** Its WebSocket URL, straight (not through a load balancer). */
  get wsUrl(): string {
    return `ws://${this.host}:${this.port}/ws`;
  }

  /** Closes the kept log, if any. */
  async closeLog(): Promise<void> {
    const out = this.logOut;
    this.logOut = undefined;
    if (out !== undefined) await new Promise<void>((r) => out.end(() => r()));
  }

  get pid(): number | undefined {
    return this.alive ? this.gw?.pid : undefined;
  }

  get alive(): boolean {
    return this.gw?.alive === true;
  }

  get exitCode(): number | null { return this.gw?.exitCode ?? null; }
  get exitSignal(): string | null { return this.gw?.exitSignal ?? null; }

  async start(timeoutMs = 60_000): Promise<void> {
    if (this.alive) throw new Error(`${this.name} is running`);
    this.starts++;
    if (this.logFile !== undefined && this.logOut === undefined) this.logOut = createWriteStream(this.logFile, { flags: 'a' });
    const onLog = (rec: Record<string, unknown>): void => {
      const line = JSON.stringify(rec);
      this.logOut?.write(`${line}\n`);
      if (rec['msg'] === 'starting sluice' && typeof rec['node'] === 'string') this.nodeIds.push(rec['node']);
      if (rec['level'] === 'warn' && !String(rec['msg']).startsWith('unknown')) {
        const k = String(rec['msg']);
        this.warnings.set(k, (this.warnings.get(k) ?? 0) + 1);
      }
      if (rec['level'] !== 'info' && rec['level'] !== 'debug' && this.notable.length < 40) this.notable.push(line.slice(0, 600));
      if (rec['level'] === 'error' || rec['level'] === 'fatal') {
        this.errorLines++;
        if (this.errorExamples.length < 5) this.errorExamples.push(`${this.name}: ${line.slice(0, 400)}`);
      }
      this.onLine?.(rec);
    };
    const onStderr = (l: string): void => {
      if (l.trim() === '') return;
      this.logOut?.write(`stderr ${new Date().toISOString()} ${l}\n`);
      this.stderrLines++;
      if (this.stderrExamples.length < 5) this.stderrExamples.push(`${this.name}: ${l.slice(0, 300)}`);
    };
    try {
      const inNs: Record<string, string> = this.ns === undefined ? {} : { HOST: this.ns.nsAddr, ADMIN_HOST: this.ns.nsAddr };
      this.gw = await startGateway({ ...this.env, ...inNs, PORT: String(this.port), ADMIN_PORT: String(this.adminPort) }, {
        defaults: PLAIN_ENV, raiseFileLimit: true, timeoutMs, onLog, onStderr,
        // ip execs the node in place: the pid, the signals and the IPC channel of the ready message are the node's.
        ...(this.ns === undefined ? {} : { command: this.ns.command(process.execPath, ...gatewayArgs()) }),
      });
    } catch (err) {
      throw new Error(`${this.name}: ${(err as Error).message}`, { cause: err });
    }
    this.serving = true;
    // The port the node says it listens on must be the one it was given: a node that took another is no node of this run.
    if (this.gw.port !== this.port) { this.killNow(); throw new Error(`${this.name} listens on ${this.gw.port}, not ${this.port}`); }
    this.sampleRss();
  }

  signal(sig: NodeJS.Signals): void {
    this.serving = false;
    this.gw?.signal(sig);
  }

  killNow(): void {
    this.signal('SIGKILL');
  }

  /** Waits up to `ms` for the process to exit; true when it did. */
  async waitExit(ms: number): Promise<boolean> {
    return this.gw === undefined || this.gw.waitExit(ms);
  }

  /** SIGTERM (the drain), SIGKILL after `graceMs`. */
  async stop(graceMs: number): Promise<void> {
    this.serving = false;
    if (this.alive) await this.gw!.stop('SIGTERM', graceMs);
  }

  /** Reads VmHWM (the process's own peak RSS) into peakRssBytes. */
  sampleRss(): void {
    const pid = this.pid;
    if (pid === undefined) return;
    try {
      const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
      if (m !== null) this.peakRssBytes = Math.max(this.peakRssBytes, Number(m[1]) * 1024);
    } catch { /* exited meanwhile */ }
  }

  async metrics(timeoutMs = 1000): Promise<string> {
    if (this.gw === undefined) throw new Error(`${this.name} never started`);
    const res = await fetch(`http://${this.host}:${this.adminPort}/metrics`, { signal: AbortSignal.timeout(timeoutMs) });
    if (res.status !== 200) throw new Error(`${this.name} /metrics: ${res.status}`);
    return res.text();
  }

  /** One counter or gauge summed over its labels, from /metrics now (NaN when the node does not answer). */
  async metric(name: string, timeoutMs = 2000): Promise<number> {
    try {
      return metricSum(parseMetrics(await this.metrics(timeoutMs)), name);
    } catch {
      return NaN;
    }
  }

  async ready(): Promise<boolean> {
    try {
      return (await fetch(`http://${this.host}:${this.adminPort}/health/ready`, { signal: AbortSignal.timeout(1000) })).status === 200;
    } catch {
      return false;
    }
  }

  /** Server-side publish through the admin API; resolves with the event id (durable). */
  async publish(body: Record<string, unknown>): Promise<string | undefined> {
    const res = await fetch(`http://${this.host}:${this.adminPort}/v1/publish`, {
      method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(5000), headers: { 'content-type': 'application/json' },
    });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`admin publish on ${this.name}: ${res.status} ${text}`);
    const id = (JSON.parse(text) as { id?: unknown }).id;
    return typeof id === 'string' ? id : undefined;
  }
}

export interface NodeSeries {
  /** Accepted upgrades, made monotonic over restarts. */
  accepted: CounterPoll[];
  connected: CounterPoll[];
}

/**
 * Polls every running node's /metrics every `everyMs` (accepted upgrades and
 * open sockets) and samples its peak RSS, until stopped. `now()` is the
 * run's clock (ms).
 */
export class Poller {
  readonly raw = new Map<string, CounterPoll[]>();
  readonly connected = new Map<string, CounterPoll[]>();
  /** Per node and process (gen): the last sluice_shard_restarts_total and sluice_redis_replica_ack_failures_total seen. */
  private readonly restarts = new Map<string, Map<number, number>>();
  private readonly ackFailures = new Map<string, Map<number, number>>();
  private readonly outages = new Map<string, Map<number, number>>();
  /** Upgrades refused for WS_UPGRADE_RATE (outcome over_budget), as polled: made monotonic over restarts like `raw`. */
  readonly overBudget = new Map<string, CounterPoll[]>();
  errors = 0;
  private stopped = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly nodes: readonly GatewayNode[], private readonly now: () => number, private readonly everyMs = 100, private readonly maxMs = 30 * 60_000) {
    for (const n of nodes) {
      this.raw.set(n.name, []);
      this.connected.set(n.name, []);
      this.restarts.set(n.name, new Map());
      this.ackFailures.set(n.name, new Map());
      this.outages.set(n.name, new Map());
      this.overBudget.set(n.name, []);
    }
  }

  /** Shard threads restarted after a crash, per node, summed over its processes (as last polled). */
  shardRestarts(): Record<string, number> {
    return Object.fromEntries([...this.restarts].map(([n, byGen]) => [n, [...byGen.values()].reduce((x, y) => x + y, 0)]));
  }

  /** Durable acks whose WAIT for replicas fell short (answered unavailable), per node, summed over its processes. */
  replicaAckFailures(): Record<string, number> {
    return Object.fromEntries([...this.ackFailures].map(([n, byGen]) => [n, [...byGen.values()].reduce((x, y) => x + y, 0)]));
  }

  /** Times a node lost Redis (sluice_redis_outages_total), per node, summed over its processes (as last polled). */
  redisOutages(): Record<string, number> {
    return Object.fromEntries([...this.outages].map(([n, byGen]) => [n, [...byGen.values()].reduce((x, y) => x + y, 0)]));
  }

  start(): void {
    this.loop = (async () => {
      const end = this.now() + this.maxMs;
      while (!this.stopped && this.now() < end) {
        const t0 = this.now();
        await Promise.all(this.nodes.map(async (n) => {
          n.sampleRss();
          if (!n.alive) return;
          const asked = this.now();
          try {
            const text = await n.metrics(Math.max(200, this.everyMs * 5));
            // The shards' counters are read somewhere between the request and the answer: a busy node answers late.
            const ms = (asked + this.now()) / 2;
            const samples = parseMetrics(text);
            const outcomes = metricByLabel(samples, 'sluice_upgrades_total', 'outcome');
            const acc = outcomes['accepted'] ?? 0;
            this.overBudget.get(n.name)!.push({ ms, value: outcomes['over_budget'] ?? 0, gen: n.starts });
            const conn = metricSum(samples, 'sluice_connected_sockets');
            this.raw.get(n.name)!.push({ ms, value: acc, gen: n.starts });
            this.connected.get(n.name)!.push({ ms, value: conn });
            this.restarts.get(n.name)!.set(n.starts, metricSum(samples, 'sluice_shard_restarts_total'));
            this.ackFailures.get(n.name)!.set(n.starts, metricSum(samples, 'sluice_redis_replica_ack_failures_total'));
            this.outages.get(n.name)!.set(n.starts, metricSum(samples, 'sluice_redis_outages_total'));
          } catch {
            if (n.serving) this.errors++;
          }
        }));
        await new Promise((r) => setTimeout(r, Math.max(0, this.everyMs - (this.now() - t0))));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}

/**
 * Which Redis a scenario runs on: `standalone`, one redis-server with an
 * append-only file on a port the harness picked; `sentinel`, a master with 2
 * replicas under 3 sentinels (down after 2 s, failover timeout 3 s: the
 * kit's defaults), the nodes given REDIS_SENTINELS and REDIS_SENTINEL_NAME;
 * `cluster`, 3 masters with a replica each (node timeout 2 s), the nodes
 * given REDIS_CLUSTER=1 and every node's URL. The Sentinel and Cluster
 * servers are the test kit's (@sluice/redis/testing): persistence off, free
 * ports from the kernel.
 */
export type RedisTopology = 'standalone' | 'sentinel' | 'cluster';

export type RedisSetup =
  | { readonly kind: 'standalone'; readonly server: RedisServer }
  | { readonly kind: 'sentinel'; readonly group: RedisSentinel }
  | { readonly kind: 'cluster'; readonly cluster: RedisCluster };

/** The name the sentinels of a `sentinel` run monitor the master under. */
export const SENTINEL_NAME = 'chaos';

async function startRedisSetup(kind: RedisTopology, port: number): Promise<RedisSetup> {
  switch (kind) {
    case 'standalone': {
      const server = await startRedis({ persist: true, port });
      track({ killNow: () => { void server.stop(); } });
      return { kind, server };
    }
    // The kit kills what it started when this process exits.
    case 'sentinel': return { kind, group: await startRedisSentinel({ replicas: 2, sentinels: 3, name: SENTINEL_NAME }) };
    case 'cluster': return { kind, cluster: await startRedisCluster({ replicas: 1 }) };
  }
}

/** The nodes' Redis variables for `r`. */
export function redisEnv(r: RedisSetup): Record<string, string> {
  switch (r.kind) {
    case 'standalone': return { REDIS_URL: r.server.url };
    case 'sentinel': return { REDIS_SENTINELS: r.group.sentinelsSpec, REDIS_SENTINEL_NAME: r.group.name };
    case 'cluster': return { REDIS_URL: r.cluster.url, REDIS_CLUSTER: '1' };
  }
}

/** One line for the log and the report: which servers on which ports. */
export function describeRedis(r: RedisSetup): string {
  switch (r.kind) {
    case 'standalone': return `redis :${r.server.port}`;
    case 'sentinel': return `sentinel group ${r.group.name}: servers :${r.group.servers.map((x) => x.port).join(', :')} (first master :${r.group.servers[0]!.port}), ` +
      `sentinels :${r.group.sentinels.map((x) => x.port).join(', :')}`;
    case 'cluster': return `redis cluster :${r.cluster.nodes.map((x) => x.port).join(', :')}`;
  }
}

export interface ClusterOptions {
  readonly shards: number;
  /** Extra gateway environment (both nodes). */
  readonly env: Readonly<Record<string, string>>;
  readonly haproxyInter: string;
  /** Default `standalone`. */
  readonly redis?: RedisTopology;
  /** Keep every node's log records and stderr lines in `<nodeLogs>/<A|B>.log` (the directory is made). */
  readonly nodeLogs?: string;
  /**
   * Run node A in a network namespace of its own (netfault.ts: root and
   * iproute2), its Redis traffic over the namespace's veth pair: `standalone`
   * Redis only.
   */
  readonly nodeAInNetns?: boolean;
}

/**
 * Lets a redis-server bound to 127.0.0.1 take connections from `ns` too
 * (on the host end of its veth pair). A server started again loses it: call
 * this after every start.
 */
export async function bindForNetns(server: RedisServer, ns: NetNs): Promise<void> {
  const said = (await server.cli('CONFIG', 'SET', 'bind', `127.0.0.1 ${ns.hostAddr}`)).trim();
  if (said !== 'OK') throw new Error(`redis :${server.port} CONFIG SET bind "127.0.0.1 ${ns.hostAddr}": ${said}`);
}

/** Redis + two nodes + two HAProxy processes. */
export class Cluster {
  private constructor(
    readonly dir: string,
    readonly redisSetup: RedisSetup,
    readonly nodes: readonly [GatewayNode, GatewayNode],
    readonly lbs: readonly [Haproxy, Haproxy],
    /** Node A's network namespace, when it runs in one. */
    readonly netns: NetNs | undefined,
  ) {}

  /** Node A's network namespace (a run with nodeAInNetns). */
  get nsA(): NetNs {
    if (this.netns === undefined) throw new Error('node A of this run is not in a network namespace');
    return this.netns;
  }

  get a(): GatewayNode { return this.nodes[0]; }
  get b(): GatewayNode { return this.nodes[1]; }

  /** The redis-server of a `standalone` run. */
  get redis(): RedisServer {
    if (this.redisSetup.kind !== 'standalone') throw new Error(`this run's Redis is a ${this.redisSetup.kind}, not one server`);
    return this.redisSetup.server;
  }

  /** The Sentinel group of a `sentinel` run. */
  get sentinel(): RedisSentinel {
    if (this.redisSetup.kind !== 'sentinel') throw new Error(`this run's Redis is ${this.redisSetup.kind}, not a Sentinel group`);
    return this.redisSetup.group;
  }

  /** The Redis Cluster of a `cluster` run. */
  get redisCluster(): RedisCluster {
    if (this.redisSetup.kind !== 'cluster') throw new Error(`this run's Redis is ${this.redisSetup.kind}, not a Redis Cluster`);
    return this.redisSetup.cluster;
  }

  /** The client URLs: one per load balancer. */
  get urls(): string[] {
    return this.lbs.map((l) => `ws://127.0.0.1:${l.port}/ws`);
  }

  static async start(o: ClusterOptions, log: (s: string) => void): Promise<Cluster> {
    if (o.nodeAInNetns === true && (o.redis ?? 'standalone') !== 'standalone') throw new Error(`node A in a network namespace: standalone Redis only, not ${o.redis}`);
    const dir = mkdtempSync(join(tmpdir(), 'sluice-chaos-'));
    const [redisPort, pa, aa, pb, ab, l1, l2] = await pickPorts(7);
    let redis: RedisSetup;
    let ns: NetNs | undefined;
    try {
      // The namespace first: Redis can bind the host end's address only once it exists.
      if (o.nodeAInNetns === true) ns = await NetNs.create('chaos');
      redis = await startRedisSetup(o.redis ?? 'standalone', redisPort!);
    } catch (err) {
      await ns?.destroy();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    if (ns !== undefined && redis.kind === 'standalone') {
      try {
        await bindForNetns(redis.server, ns);
      } catch (err) {
        await redis.server.stop();
        await ns.destroy();
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
    const env: Record<string, string> = {
      HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1', WS_WORKERS: String(o.shards), LOG_LEVEL: 'info', ...redisEnv(redis),
      // Behind HAProxy with `option forwardfor`: the client's address is the last X-Forwarded-For entry.
      WS_TRUST_PROXY: '1',
      // The run's clients come from 8 loopback addresses (about 1250 per address at 10k): the per-IP
      // upgrade window of 60 a minute would refuse most reconnects. Real clients each have their own.
      WS_IP_CONNECT_LIMIT: '1000000',
      ...o.env,
    };
    if (o.nodeLogs !== undefined) mkdirSync(o.nodeLogs, { recursive: true });
    const logOf = (n: string): string | undefined => (o.nodeLogs === undefined ? undefined : join(o.nodeLogs, `${n}.log`));
    const envA = ns === undefined ? env : { ...env, REDIS_URL: `redis://${ns.hostAddr}:${redisPort}` };
    const a = new GatewayNode('A', pa!, aa!, envA, logOf('A'), ns);
    const b = new GatewayNode('B', pb!, ab!, env, logOf('B'));
    const servers = [
      // A namespace is reached from the host end's address (a 127/8 source cannot leave loopback).
      ns === undefined ? { name: 'node-a', port: a.port } : { name: 'node-a', port: a.port, host: ns.nsAddr, source: ns.hostAddr },
      { name: 'node-b', port: b.port },
    ];
    const lbOpts = { servers, maxconn: 9000, ulimitN: 19_000, inter: o.haproxyInter, fall: 2, rise: 2 };
    const lbs: [Haproxy, Haproxy] = [
      new Haproxy('lb1', l1!, dir, { ...lbOpts, source: '127.0.0.20' }),
      new Haproxy('lb2', l2!, dir, { ...lbOpts, source: '127.0.0.21' }),
    ];
    for (const l of lbs) track(l);
    const cluster = new Cluster(dir, redis, [a, b], lbs, ns);
    // A start that fails stops what started (Redis too: the next scenario of the run starts its own).
    try {
      // One after the other: each start compiles the gateway under tsx, and two at once on 2 cores only take longer.
      await a.start();
      await b.start();
      for (const l of lbs) { await Haproxy.check(l.cfgPath); await l.start(); }
      await cluster.waitUp(['node-a', 'node-b'], 20_000);
      const where = ns === undefined ? '' : ` in namespace ${ns.name} at ${ns.nsAddr} (Redis on ${ns.hostAddr})`;
      log(`    cluster: ${describeRedis(redis)}, A${where} :${a.port} (admin :${a.adminPort}), B :${b.port} (admin :${b.adminPort}), lb1 :${l1}, lb2 :${l2}`);
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  /** Waits until every load balancer has each of `servers` UP; throws after `ms`. */
  async waitUp(servers: readonly string[], ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    let last: Record<string, string>[] = [];
    while (Date.now() < deadline) {
      try {
        last = await Promise.all(this.lbs.map((l) => l.servers()));
        if (last.every((s) => servers.every((n) => s[n] === 'UP'))) return;
      } catch { /* a stats socket that is not there yet */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`servers ${servers.join(', ')} not UP in every load balancer within ${ms} ms: ${JSON.stringify(last)}`);
  }

  /**
   * What each Redis server says it is now (role, its master, its link,
   * replicas) and which of the nodes' connections it holds (CLIENT LIST
   * names `sluice-*`: count by name), and for Sentinel what each sentinel
   * names as master: for a finding when a failover goes wrong. A server that
   * does not answer is said so.
   */
  async redisState(): Promise<string> {
    const r = this.redisSetup;
    const servers = r.kind === 'standalone' ? [r.server] : r.kind === 'sentinel' ? r.group.servers : r.cluster.nodes;
    const field = (info: string, k: string): string => new RegExp(`^${k}:(.*)$`, 'm').exec(info)?.[1]?.trim() ?? '?';
    const all = new Map<string, number>();
    const parts = await Promise.all(servers.map(async (s) => {
      try {
        const info = await s.cli('INFO', 'replication');
        const role = field(info, 'role');
        const names = new Map<string, number>();
        for (const m of (await s.cli('CLIENT', 'LIST')).matchAll(/ name=(sluice-\S+)/g)) {
          names.set(m[1]!, (names.get(m[1]!) ?? 0) + 1);
          all.set(m[1]!, (all.get(m[1]!) ?? 0) + 1);
        }
        const conns = [...names].sort().map(([n, c]) => (c === 1 ? n : `${n} x${c}`)).join(' ') || 'no sluice connection';
        const rel = role === 'master' ? `${field(info, 'connected_slaves')} replicas` : `of :${field(info, 'master_port')} link ${field(info, 'master_link_status')}`;
        return `:${s.port} ${role} ${rel}; ${conns}`;
      } catch (e) {
        return `:${s.port} does not answer (${(e as Error).message.split('\n')[0]})`;
      }
    }));
    if (r.kind === 'sentinel') {
      const named = await Promise.all(r.group.sentinels.map(async (x, i) => {
        try {
          return `:${(await r.group.sentinelCli(i, 'SENTINEL', 'get-master-addr-by-name', r.group.name)).trim().split('\n')[1] ?? 'none'}`;
        } catch { return `sentinel :${x.port} does not answer`; }
      }));
      parts.push(`sentinels name ${named.join(', ')}`);
    }
    if (r.kind !== 'cluster') {
      // Each running node holds one connection of each name (a Cluster client holds one per master it uses).
      const nodes = this.nodes.filter((n) => n.alive).length;
      const short = [...all].filter(([, c]) => c < nodes).map(([n, c]) => `${n} (${c} of ${nodes})`);
      if (short.length > 0) parts.push(`connections some running node lacks: ${short.join(', ')}`);
    }
    return parts.join(' | ');
  }

  /** The name HAProxy knows a node by. */
  static serverName(n: GatewayNode): string {
    return `node-${n.name.toLowerCase()}`;
  }

  /** Stops everything, node A's namespace last (also when a stop before it failed). */
  async stop(): Promise<void> {
    try {
      // A fault still on (a scenario that failed half-way) is lifted first, so that A stops as it would.
      await this.netns?.clear().catch(() => undefined);
      await Promise.all(this.lbs.map((l) => l.stop('SIGTERM')));
      await Promise.all(this.nodes.map((n) => n.stop(5000)));
      await Promise.all(this.nodes.map((n) => n.closeLog()));
      const r = this.redisSetup;
      await (r.kind === 'standalone' ? r.server.stop() : r.kind === 'sentinel' ? r.group.stop() : r.cluster.stop());
      for (const l of this.lbs) live.delete(l);
      for (const n of this.nodes) live.delete(n);
      rmSync(this.dir, { recursive: true, force: true });
    } finally {
      // Whatever failed above: the namespace goes (destroy kills what still runs inside).
      await this.netns?.destroy();
    }
  }
}
