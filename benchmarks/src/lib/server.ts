// The servers under test, each started as its own process by the gateway's
// test kit, told apart only by how they start and where they report their
// stall gauge.

import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseMetrics, PLAIN_ENV, startGateway, type Gateway } from '@sluice/gateway/testing';
import { BENCH_ROOT, REPO_ROOT } from './spawn.ts';
import { cpuSeconds, rssBytes } from './proc.ts';
import type { Proto } from './codec.ts';
import { loadUws } from '@sluice/uws';

/** The uWS build of this runtime (20.30 on Node 20, 20.57 on 22 and 24): the raw-uWS peer's and the gateway's. */
const UWS_VERSION = loadUws().build.uws;

export type TargetName = 'sluice' | 'sluice-w1' | 'sluice-traced' | 'sluice-base' | 'sluice-base-w1' | 'uws' | 'ws' | 'sio';
export const ALL_TARGETS: readonly TargetName[] = ['sluice', 'sluice-w1', 'uws', 'ws', 'sio'];
/** Targets only run when named with --targets (not part of `all`). */
export const KNOWN_TARGETS: readonly TargetName[] = [...ALL_TARGETS, 'sluice-traced', 'sluice-base', 'sluice-base-w1'];
/**
 * `sluice-base` (and `sluice-base-w1`, one worker): the gateway of another checkout (a `git worktree` of the
 * commit before a change, installed), for before/after runs of one change
 * in one run, the two targets interleaved.
 */
const BASE_CHECKOUT = process.env.SLUICE_BENCH_BASE;
/**
 * How the gateway runs: its build (`node dist/main.js`, what production
 * runs; the default) or its sources under tsx (`--from-source`, which sets
 * this). The build is the one to measure: under tsx every `export *` of a
 * workspace package is a getter on the hot path (about 10% of S1's samples,
 * results.md "S1: what remains").
 */
export const runsFromSource = (): boolean => process.env.SLUICE_BENCH_FROM_SOURCE === '1';

/** The newest source file of the gateway and the packages it bundles, against its build: a reason to refuse, or undefined. */
export function staleBuild(root: string): string | undefined {
  const built = join(root, 'apps/gateway/dist/main.js');
  if (!existsSync(built)) return `the gateway is not built (${built} is missing): run \`pnpm build\`, or measure the sources with --from-source`;
  const builtAt = statSync(built).mtimeMs;
  const dirs = ['apps/gateway/src', ...['protocol', 'core', 'telemetry', 'redis', 'uws'].map((p) => `packages/${p}/src`)];
  for (const d of dirs) {
    for (const f of readdirSync(join(root, d), { recursive: true, withFileTypes: true })) {
      if (!f.isFile()) continue;
      const path = join(f.parentPath, f.name);
      if (statSync(path).mtimeMs > builtAt) return `${path} is newer than the gateway's build: run \`pnpm build\`, or measure the sources with --from-source`;
    }
  }
  return undefined;
}
/** The SDK setup of `sluice-traced`: every span sampled and recorded, then dropped. */
export const BENCH_TRACING_MODULE = join(BENCH_ROOT, 'src/lib/otel-bench.mjs');

export interface TargetSpec {
  readonly name: TargetName;
  readonly proto: Proto;
  /** Threads that serve sockets: the most cores the server can use. */
  readonly threads: number;
  readonly describe: string;
}

export const TARGETS: Readonly<Record<TargetName, TargetSpec>> = {
  sluice: { name: 'sluice', proto: 'sluice', threads: 2, describe: 'Sluice gateway, WS_WORKERS=2 (coordinator + 2 uWS shard threads)' },
  'sluice-w1': { name: 'sluice-w1', proto: 'sluice', threads: 1, describe: 'Sluice gateway, WS_WORKERS=1 (like-for-like with the single-threaded peers)' },
  'sluice-traced': { name: 'sluice-traced', proto: 'sluice', threads: 2,
    describe: 'Sluice gateway, WS_WORKERS=2, tracing on: WS_TRACING_MODULE with an SDK that samples and records every span and drops it' },
  'sluice-base': { name: 'sluice-base', proto: 'sluice', threads: 2,
    describe: `Sluice gateway of the checkout at SLUICE_BENCH_BASE (${BASE_CHECKOUT ?? 'unset'}), WS_WORKERS=2: the build before a change` },
  'sluice-base-w1': { name: 'sluice-base-w1', proto: 'sluice', threads: 1,
    describe: `Sluice gateway of the checkout at SLUICE_BENCH_BASE (${BASE_CHECKOUT ?? 'unset'}), WS_WORKERS=1: the build before a change` },
  uws: { name: 'uws', proto: 'sluice', threads: 1, describe: `raw uWebSockets.js ${UWS_VERSION} (native binary, the build the gateway loads on Node ${process.versions.node}), one thread, uWS topics` },
  ws: { name: 'ws', proto: 'sluice', threads: 1, describe: 'ws 8.23 (with bufferutil), one thread, Map<topic, Set<socket>> loop' },
  sio: { name: 'sio', proto: 'sio', threads: 1, describe: 'Socket.IO 4.8, one thread, websocket transport only, rooms + acks' },
};

const PEER_MAIN = join(BENCH_ROOT, 'src/peers/main.ts');

/**
 * Over the kit's test environment (free ports, loopback, per-IP and
 * per-tenant windows lifted, no drain delay), the per-socket window is
 * lifted too; every other setting is the gateway's default.
 */
function gatewayEnv(workers: number): Record<string, string> {
  return {
    WS_WORKERS: String(workers),
    WS_MAX_MESSAGES: '1000000', // per-socket fixed window; the default of 20/s would throttle every scenario
  };
}

/**
 * One server under test, started by the kit (@sluice/gateway/testing): the
 * gateway from source, or a peer, which sends the same ready message.
 */
export class ServerProc {
  private constructor(readonly spec: TargetSpec, readonly gw: Gateway) {}

  /** `extraEnv` overrides the environment above (S7: the drain settings). */
  static async start(spec: TargetSpec, timeoutMs = 60_000, extraEnv: Record<string, string> = {}): Promise<ServerProc> {
    const built = !runsFromSource();
    const opts = { raiseFileLimit: true, timeoutMs, built } as const;
    if (spec.name === 'sluice-base' || spec.name === 'sluice-base-w1') {
      if (BASE_CHECKOUT === undefined) throw new Error(`target ${spec.name} needs SLUICE_BENCH_BASE: the root of an installed checkout of the base commit`);
      // Measured the way `sluice` is: its build (checked as ours is), or its sources.
      const stale = built ? staleBuild(BASE_CHECKOUT) : undefined;
      if (stale !== undefined) throw new Error(`${spec.name}: ${stale}`);
      // An older gateway may predate the IPC ready message: its log line is the readiness there.
      const gw = await startGateway({ ...gatewayEnv(spec.threads), ...extraEnv },
        { ...opts, command: [process.execPath, ...(built ? ['dist/main.js'] : ['--import', 'tsx', 'src/main.ts'])],
          cwd: join(BASE_CHECKOUT, 'apps/gateway'), readyFrom: 'log' });
      return new ServerProc(spec, gw);
    }
    const gw = spec.name.startsWith('sluice')
      ? await startGateway({ ...gatewayEnv(spec.threads), ...(spec.name === 'sluice-traced' ? { WS_TRACING_MODULE: BENCH_TRACING_MODULE } : {}), ...extraEnv }, opts)
      : await startGateway({ ...extraEnv }, { ...opts, command: [process.execPath, '--import', 'tsx', PEER_MAIN, spec.name], cwd: REPO_ROOT, defaults: PLAIN_ENV });
    return new ServerProc(spec, gw);
  }

  get port(): number { return this.gw.port; }
  get adminPort(): number { return this.gw.adminPort; }
  get pid(): number { return this.gw.pid; }
  get alive(): boolean { return this.gw.alive; }
  get exitCode(): number | null { return this.gw.exitCode; }
  get exitSignal(): string | null { return this.gw.exitSignal; }
  /** The server's log records (the gateway's; a peer logs nothing). */
  get logs(): readonly Record<string, unknown>[] { return this.gw.logs; }

  cpuSeconds(): number {
    return cpuSeconds(this.pid);
  }

  rssBytes(): number {
    return rssBytes(this.pid);
  }

  /** Lowest RSS seen over `ms` (sampled every 100 ms): garbage the GC frees meanwhile is not charged to sockets. */
  async minRssBytes(ms: number): Promise<number> {
    let min = this.rssBytes();
    for (const end = performance.now() + ms; performance.now() < end;) {
      await new Promise((r) => setTimeout(r, 100));
      min = Math.min(min, this.rssBytes());
    }
    return min;
  }

  /** Longest event-loop stall since start, ms (max over threads for the gateway); undefined when not exported. */
  async stallMaxMs(): Promise<number | undefined> {
    try {
      if (this.spec.name.startsWith('sluice')) {
        const v = parseMetrics(await this.gw.metrics()).filter((m) => m.name === 'sluice_eventloop_stall_max_seconds' && Number.isFinite(m.value));
        return v.length === 0 ? undefined : Math.max(...v.map((m) => m.value)) * 1000;
      }
      const body = await (await fetch(`http://127.0.0.1:${this.port}/stats`, { signal: AbortSignal.timeout(5000) })).json() as { stallMaxMs?: unknown };
      return typeof body.stallMaxMs === 'number' ? body.stallMaxMs : undefined;
    } catch {
      return undefined;
    }
  }

  /** Waits up to `timeoutMs` for the process to exit by itself; true when it did. */
  waitExit(timeoutMs: number): Promise<boolean> {
    return this.gw.waitExit(timeoutMs);
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Resolves with how it ended. */
  async stop(graceMs = 40_000): Promise<{ code: number | null; signal: string | null; killed: boolean }> {
    let killed = false;
    if (this.alive) {
      this.gw.signal('SIGTERM');
      killed = !(await this.waitExit(graceMs));
    }
    await this.gw.stop('SIGKILL');
    return { code: this.exitCode, signal: this.exitSignal, killed };
  }
}
