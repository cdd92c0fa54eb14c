// The chaos cluster on loopback: one redis-server with an append-only file,
// two gateway nodes (separate processes, WS_WORKERS shard threads each) on
// fixed ports the harness picked and checked, and two HAProxy processes in
// front (see haproxy.ts for why two). Every process is started by pid and
// stopped by pid, also when the run fails or the harness is interrupted.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRedis, type RedisServer } from '@sluice/redis/testing';
import { metricByLabel, metricSum, PLAIN_ENV, startGateway, type Gateway } from '@sluice/gateway/testing';
import { Haproxy } from './haproxy.ts';
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

  constructor(readonly name: string, readonly port: number, readonly adminPort: number, private readonly env: Record<string, string>) {
    track(this);
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
    const onLog = (rec: Record<string, unknown>): void => {
      const line = JSON.stringify(rec);
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
      this.stderrLines++;
      if (this.stderrExamples.length < 5) this.stderrExamples.push(`${this.name}: ${l.slice(0, 300)}`);
    };
    try {
      this.gw = await startGateway({ ...this.env, PORT: String(this.port), ADMIN_PORT: String(this.adminPort) },
        { defaults: PLAIN_ENV, raiseFileLimit: true, timeoutMs, onLog, onStderr });
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
    return this.gw.metrics(timeoutMs);
  }

  async ready(): Promise<boolean> {
    try {
      return (await fetch(`http://127.0.0.1:${this.adminPort}/health/ready`, { signal: AbortSignal.timeout(1000) })).status === 200;
    } catch {
      return false;
    }
  }

  /** Server-side publish through the admin API; resolves with the event id (durable). */
  async publish(body: Record<string, unknown>): Promise<string | undefined> {
    const res = await fetch(`http://127.0.0.1:${this.adminPort}/v1/publish`, {
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
  errors = 0;
  private stopped = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly nodes: readonly GatewayNode[], private readonly now: () => number, private readonly everyMs = 100, private readonly maxMs = 30 * 60_000) {
    for (const n of nodes) { this.raw.set(n.name, []); this.connected.set(n.name, []); }
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
            const acc = metricByLabel(text, 'sluice_upgrades_total', 'outcome')['accepted'] ?? 0;
            const conn = metricSum(text, 'sluice_connected_sockets');
            this.raw.get(n.name)!.push({ ms, value: acc, gen: n.starts });
            this.connected.get(n.name)!.push({ ms, value: conn });
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

export interface ClusterOptions {
  readonly shards: number;
  /** Extra gateway environment (both nodes). */
  readonly env: Readonly<Record<string, string>>;
  readonly haproxyInter: string;
}

/** Redis + two nodes + two HAProxy processes. */
export class Cluster {
  private constructor(
    readonly dir: string,
    readonly redis: RedisServer,
    readonly nodes: readonly [GatewayNode, GatewayNode],
    readonly lbs: readonly [Haproxy, Haproxy],
  ) {}

  get a(): GatewayNode { return this.nodes[0]; }
  get b(): GatewayNode { return this.nodes[1]; }

  /** The client URLs: one per load balancer. */
  get urls(): string[] {
    return this.lbs.map((l) => `ws://127.0.0.1:${l.port}/ws`);
  }

  static async start(o: ClusterOptions, log: (s: string) => void): Promise<Cluster> {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-chaos-'));
    const [redisPort, pa, aa, pb, ab, l1, l2] = await pickPorts(7);
    const redis = await startRedis({ persist: true, port: redisPort });
    const redisHandle = { killNow: () => { void redis.stop(); } };
    track(redisHandle);
    const env: Record<string, string> = {
      HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1', WS_WORKERS: String(o.shards), LOG_LEVEL: 'info', REDIS_URL: redis.url,
      // Behind HAProxy with `option forwardfor`: the client's address is the last X-Forwarded-For entry.
      WS_TRUST_PROXY: '1',
      // The run's clients come from 8 loopback addresses (about 1250 per address at 10k): the per-IP
      // upgrade window of 60 a minute would refuse most reconnects. Real clients each have their own.
      WS_IP_CONNECT_LIMIT: '1000000',
      ...o.env,
    };
    const a = new GatewayNode('A', pa!, aa!, env);
    const b = new GatewayNode('B', pb!, ab!, env);
    // One after the other: each start compiles the gateway under tsx, and two at once on 2 cores only take longer.
    await a.start();
    await b.start();
    const servers = [{ name: 'node-a', port: a.port }, { name: 'node-b', port: b.port }];
    const lbOpts = { servers, maxconn: 9000, ulimitN: 19_000, inter: o.haproxyInter, fall: 2, rise: 2 };
    const lbs: [Haproxy, Haproxy] = [
      new Haproxy('lb1', l1!, dir, { ...lbOpts, source: '127.0.0.20' }),
      new Haproxy('lb2', l2!, dir, { ...lbOpts, source: '127.0.0.21' }),
    ];
    for (const l of lbs) track(l);
    const cluster = new Cluster(dir, redis, [a, b], lbs);
    try {
      for (const l of lbs) { await Haproxy.check(l.cfgPath); await l.start(); }
      await cluster.waitUp(['node-a', 'node-b'], 20_000);
      log(`    cluster: redis :${redis.port}, A :${a.port} (admin :${a.adminPort}), B :${b.port} (admin :${b.adminPort}), lb1 :${l1}, lb2 :${l2}`);
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

  /** The name HAProxy knows a node by. */
  static serverName(n: GatewayNode): string {
    return `node-${n.name.toLowerCase()}`;
  }

  async stop(): Promise<void> {
    await Promise.all(this.lbs.map((l) => l.stop('SIGTERM')));
    await Promise.all(this.nodes.map((n) => n.stop(5000)));
    await this.redis.stop();
    for (const l of this.lbs) live.delete(l);
    for (const n of this.nodes) live.delete(n);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
