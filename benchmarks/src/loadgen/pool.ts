// The orchestrator's side of the load-generator processes.

import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { REPO_ROOT } from '../lib/spawn.ts';
import { withFileLimit } from '@sluice/gateway/testing';
import { cpuSeconds } from '../lib/proc.ts';
import { askChild, childRequests, type RpcReply } from '../lib/child-rpc.ts';
import type { PendingRequests } from '@sluice/core';
import type { ChildEvent, Envelope, Request, Response } from './messages.ts';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));

export class LoadProc {
  private readonly requests: PendingRequests<RpcReply>;
  progress: ((full: number) => void) | null = null;
  exited = false;

  private constructor(readonly index: number, readonly proc: ChildProcess, readonly pid: number) {
    this.requests = childRequests(proc, `loadgen ${index}`);
    proc.on('message', (m: Response | ChildEvent) => {
      if ('event' in m && m.event === 'progress') this.progress?.(m.full);
    });
    proc.on('exit', () => { this.exited = true; });
  }

  static start(index: number, lifetimeMs: number): Promise<LoadProc> {
    const [sh, ...shArgs] = withFileLimit([process.execPath, '--import', 'tsx', CHILD]);
    const proc = spawn(sh, shArgs, {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, LOADGEN_LIFETIME_MS: String(lifetimeMs) },
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('loadgen did not start in 30 s')); }, 30_000);
      proc.once('error', (e) => { clearTimeout(timer); reject(e); });
      proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`loadgen exited at start (${code})`)); });
      proc.once('message', (m: ChildEvent) => {
        clearTimeout(timer);
        if ('event' in m && m.event === 'hello') resolve(new LoadProc(index, proc, m.pid));
        else reject(new Error('loadgen said something else than hello'));
      });
    });
  }

  call<T>(req: Request, timeoutMs = 60_000): Promise<T> {
    return askChild<T>(this.requests, this.proc, `loadgen ${this.index}`, req, timeoutMs);
  }

  /** Fire and forget (credits). */
  tell(req: Request): void {
    this.proc.send({ id: 0, req } satisfies Envelope);
  }

  cpuSeconds(): number {
    return this.exited ? 0 : cpuSeconds(this.pid);
  }

  async exit(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((r) => this.proc.once('exit', () => r()));
    try { await this.call({ op: 'exit' }, 5_000); } catch { /* it may be gone already; the kill below makes sure */ }
    const timer = setTimeout(() => { if (!this.exited) process.kill(this.pid, 'SIGKILL'); }, 5_000);
    await gone;
    clearTimeout(timer);
  }
}

export class LoadPool {
  private constructor(readonly procs: LoadProc[]) {}

  static async start(n: number, lifetimeMs: number): Promise<LoadPool> {
    const procs = await Promise.all(Array.from({ length: n }, (_, i) => LoadProc.start(i, lifetimeMs)));
    return new LoadPool(procs);
  }

  get size(): number {
    return this.procs.length;
  }

  all<T>(req: (p: LoadProc) => Request | null, timeoutMs?: number): Promise<T[]> {
    return Promise.all(this.procs.flatMap((p) => {
      const r = req(p);
      return r === null ? [] : [p.call<T>(r, timeoutMs)];
    }));
  }

  cpuSeconds(): number[] {
    return this.procs.map((p) => p.cpuSeconds());
  }

  async close(): Promise<void> {
    await Promise.all(this.procs.map((p) => p.exit()));
  }
}

/**
 * The highest seq every one of `subs` has seen (`full`, -1 before any) and
 * when it last rose (`at`, performance.now(); from construction until the
 * first). Each rise credits the publisher up to full + `window`, when a
 * window is given. Progress comes only from tracking processes.
 */
export class FullDelivery {
  full = -1;
  at = performance.now();

  constructor(subs: readonly LoadProc[], publisher: LoadProc, window: number | undefined) {
    const fulls = subs.map(() => -1);
    subs.forEach((p, i) => {
      p.progress = (full) => {
        fulls[i] = full;
        const g = Math.min(...fulls);
        if (g <= this.full) return;
        this.full = g;
        this.at = performance.now();
        if (window !== undefined) publisher.tell({ op: 'credit', upTo: g + window });
      };
    });
  }
}

/** Splits `total` into `parts` near-equal counts. */
export function split(total: number, parts: number): number[] {
  const base = Math.floor(total / parts);
  return Array.from({ length: parts }, (_, i) => base + (i < total % parts ? 1 : 0));
}
