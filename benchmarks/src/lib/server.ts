// The servers under test, each started as its own process from the repo root,
// told apart only by how they start and where they report their stall gauge.

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BENCH_ROOT, REPO_ROOT, shellWithFileLimit } from './spawn.ts';
import { cpuSeconds, rssBytes } from './proc.ts';
import type { Proto } from './codec.ts';
import { loadUws } from '@sluice/uws';

/** The uWS build of this runtime (20.30 on Node 20, 20.57 on 22 and 24): the raw-uWS peer's and the gateway's. */
const UWS_VERSION = loadUws().build.uws;

export type TargetName = 'sluice' | 'sluice-w1' | 'sluice-traced' | 'uws' | 'ws' | 'sio';
export const ALL_TARGETS: readonly TargetName[] = ['sluice', 'sluice-w1', 'uws', 'ws', 'sio'];
/** Targets only run when named with --targets (not part of `all`). */
export const KNOWN_TARGETS: readonly TargetName[] = [...ALL_TARGETS, 'sluice-traced'];
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
  uws: { name: 'uws', proto: 'sluice', threads: 1, describe: `raw uWebSockets.js ${UWS_VERSION} (native binary, the build the gateway loads on Node ${process.versions.node}), one thread, uWS topics` },
  ws: { name: 'ws', proto: 'sluice', threads: 1, describe: 'ws 8.23 (with bufferutil), one thread, Map<topic, Set<socket>> loop' },
  sio: { name: 'sio', proto: 'sio', threads: 1, describe: 'Socket.IO 4.8, one thread, websocket transport only, rooms + acks' },
};

export const GATEWAY_MAIN = join(REPO_ROOT, 'apps/gateway/src/main.ts');
const PEER_MAIN = join(BENCH_ROOT, 'src/peers/main.ts');

/**
 * Limits that would throttle or refuse benchmark traffic are lifted; every
 * other setting is the gateway's default. Unknown WS_* variables only warn,
 * so limits the gateway does not have yet are harmless.
 */
export function gatewayEnv(workers: number): Record<string, string> {
  return {
    PORT: '0',
    ADMIN_PORT: '0',
    HOST: '127.0.0.1',
    ADMIN_HOST: '127.0.0.1',
    WS_WORKERS: String(workers),
    LOG_LEVEL: 'info', // the ready line is logged at info; nothing per frame or per socket is
    WS_MAX_MESSAGES: '1000000', // per-socket fixed window; the default of 20/s would throttle every scenario
    WS_TENANT_MSG_LIMIT: '100000000', // every benchmark socket is tenant "default"
    WS_IP_CONNECT_LIMIT: '1000000', // S4/S5 open 15k sockets from 8 loopback addresses
    WS_DRAIN_DELAY_MS: '0', // the run closes its sockets before SIGTERM; do not wait to exit
  };
}

export function gatewayAvailable(): boolean {
  return existsSync(GATEWAY_MAIN);
}

export class ServerProc {
  readonly lines: string[] = [];
  exitCode: number | null = null;
  exitSignal: string | null = null;
  private exited: Promise<void>;

  private constructor(
    readonly spec: TargetSpec,
    readonly proc: ChildProcess,
    readonly pid: number,
    readonly port: number,
    readonly adminPort: number | undefined,
    exited: Promise<void>,
    lines: string[],
  ) {
    this.exited = exited;
    this.lines = lines;
  }

  /** `extraEnv` overrides the environment above (S7: the drain settings). */
  static start(spec: TargetSpec, timeoutMs = 60_000, extraEnv: Record<string, string> = {}): Promise<ServerProc> {
    let argv: string[];
    let env: Record<string, string>;
    if (spec.name.startsWith('sluice')) {
      if (!gatewayAvailable()) return Promise.reject(new Error(`${GATEWAY_MAIN} does not exist yet`));
      argv = [process.execPath, '--import', 'tsx', GATEWAY_MAIN];
      env = { ...gatewayEnv(spec.threads), ...(spec.name === 'sluice-traced' ? { WS_TRACING_MODULE: BENCH_TRACING_MODULE } : {}), ...extraEnv };
    } else {
      argv = [process.execPath, '--import', 'tsx', PEER_MAIN, spec.name];
      env = { PORT: '0', HOST: '127.0.0.1' };
    }
    const proc = spawn('/bin/sh', shellWithFileLimit(argv), {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    const lines: string[] = [];
    const keep = (line: string): void => {
      lines.push(line);
      if (lines.length > 40) lines.shift();
    };
    let exitInfo: { code: number | null; signal: string | null } | null = null;
    const exited = new Promise<void>((r) => proc.once('exit', (code, signal) => { exitInfo = { code, signal }; r(); }));
    return new Promise<ServerProc>((resolve, reject) => {
      let done = false;
      const fail = (why: string): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        if (exitInfo === null && proc.pid !== undefined) process.kill(proc.pid, 'SIGKILL');
        reject(new Error(`${spec.name}: ${why}\n  last output:\n    ${lines.join('\n    ')}`));
      };
      const timer = setTimeout(() => fail(`no ready line in ${timeoutMs} ms`), timeoutMs);
      let partial = '';
      proc.stdout!.setEncoding('utf8');
      proc.stdout!.on('data', (chunk: string) => {
        partial += chunk;
        let nl: number;
        while ((nl = partial.indexOf('\n')) !== -1) {
          const line = partial.slice(0, nl);
          partial = partial.slice(nl + 1);
          keep(line);
          if (done || !line.startsWith('{')) continue;
          let msg: { msg?: unknown; port?: unknown; adminPort?: unknown };
          try { msg = JSON.parse(line) as typeof msg; } catch { continue; }
          if ((msg.msg === 'gateway ready' || msg.msg === 'peer ready') && typeof msg.port === 'number') {
            done = true;
            clearTimeout(timer);
            const s = new ServerProc(spec, proc, proc.pid!, msg.port, typeof msg.adminPort === 'number' ? msg.adminPort : undefined, exited, lines);
            void exited.then(() => { s.exitCode = exitInfo?.code ?? null; s.exitSignal = exitInfo?.signal ?? null; });
            resolve(s);
          }
        }
      });
      proc.stderr!.setEncoding('utf8');
      proc.stderr!.on('data', (chunk: string) => { for (const l of chunk.split('\n')) if (l !== '') keep(`[stderr] ${l}`); });
      void exited.then(() => fail(`exited before ready (code ${String(exitInfo?.code)}, signal ${String(exitInfo?.signal)})`));
    });
  }

  get alive(): boolean {
    return this.exitCode === null && this.exitSignal === null;
  }

  cpuSeconds(): number {
    return cpuSeconds(this.pid);
  }

  rssBytes(): number {
    return rssBytes(this.pid);
  }

  /** Longest event-loop stall since start, ms (max over threads for the gateway); undefined when not exported. */
  async stallMaxMs(): Promise<number | undefined> {
    try {
      if (this.spec.proto === 'sluice' && this.spec.name.startsWith('sluice')) {
        if (this.adminPort === undefined) return undefined;
        const text = await (await fetch(`http://127.0.0.1:${this.adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
        let max: number | undefined;
        for (const m of text.matchAll(/^sluice_eventloop_stall_max_seconds(?:\{[^}]*\})?\s+(\S+)/gm)) {
          const v = Number(m[1]) * 1000;
          if (Number.isFinite(v)) max = max === undefined ? v : Math.max(max, v);
        }
        return max;
      }
      const body = await (await fetch(`http://127.0.0.1:${this.port}/stats`, { signal: AbortSignal.timeout(5000) })).json() as { stallMaxMs?: unknown };
      return typeof body.stallMaxMs === 'number' ? body.stallMaxMs : undefined;
    } catch {
      return undefined;
    }
  }

  /** Waits up to `timeoutMs` for the process to exit by itself; true when it did. */
  async waitExit(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<false>((r) => { timer = setTimeout(() => r(false), timeoutMs); });
    const ok = await Promise.race([this.exited.then(() => true as const), timedOut]);
    clearTimeout(timer);
    return ok;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Resolves with how it ended. */
  async stop(graceMs = 40_000): Promise<{ code: number | null; signal: string | null; killed: boolean }> {
    let killed = false;
    if (this.alive) {
      process.kill(this.pid, 'SIGTERM');
      const timer = setTimeout(() => { killed = true; process.kill(this.pid, 'SIGKILL'); }, graceMs);
      await this.exited;
      clearTimeout(timer);
    }
    return { code: this.exitCode, signal: this.exitSignal, killed };
  }
}
