// Request/answer over Node's IPC channel between an orchestrator and the
// client processes it starts (S9's storm clients, the chaos harness's
// fleet): one file is both sides, started again with a flag for the child.
// The orchestrator's ids, pending map, timeouts and fail-on-exit are core's
// PendingRequests, as the gateway's own requests between threads; the load
// generator's processes (loadgen/pool.ts) ask theirs with the same two helpers.

import { spawn, type ChildProcess } from 'node:child_process';
import { PendingRequests, RequestFailed } from '@sluice/core';
import { cpuSeconds } from './proc.ts';
import { REPO_ROOT } from './spawn.ts';
import { withFileLimit } from '@sluice/gateway/testing';

export type RpcReply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };
interface Envelope<R> { id: number; req: R }

/**
 * The child's side: answers every request with `handle`, one after the
 * other (those `concurrent` says so at once), and exits after answering an
 * `exit`, when the parent goes away, or when `lifetimeMs` has passed (a
 * bound, should the orchestrator hang). Announces itself with its pid.
 */
export function serveRequests<R extends { op: string }>(label: string, lifetimeMs: number, handle: (req: R) => Promise<unknown> | unknown,
  concurrent: (req: R) => boolean = () => false): void {
  const lifetime = setTimeout(() => {
    process.stderr.write(`${label} ${process.pid}: lifetime over, exiting\n`);
    process.exit(3);
  }, lifetimeMs);
  lifetime.unref();
  process.on('disconnect', () => process.exit(0));
  let chain = Promise.resolve();
  process.on('message', (m: Envelope<R>) => {
    const run = async (): Promise<void> => {
      let reply: RpcReply;
      try {
        reply = { id: m.id, ok: true, result: (m.req.op === 'exit' ? null : await handle(m.req)) ?? null };
      } catch (err) {
        reply = { id: m.id, ok: false, error: (err as Error).stack ?? String(err) };
      }
      process.send!(reply);
      if (m.req.op === 'exit') setTimeout(() => process.exit(0), 10);
    };
    if (concurrent(m.req)) void run();
    else chain = chain.then(run);
  });
  process.send!({ hello: process.pid });
}

/** The requests to one child process: answered by its replies, failed when it exits. */
export function childRequests(proc: ChildProcess, label: string): PendingRequests<RpcReply> {
  const requests = new PendingRequests<RpcReply>({ set: setTimeout, clear: (t) => clearTimeout(t as NodeJS.Timeout) });
  proc.on('message', (m: RpcReply) => requests.answer(m.id, m)); // other messages (events) have no id
  proc.on('exit', (code, signal) => requests.close(`${label} exited (${code ?? signal})`));
  return requests;
}

/** Asks a child: its result, or an error named by `label` (and the op, when the answer is late). */
export async function askChild<T>(requests: PendingRequests<RpcReply>, proc: ChildProcess, label: string, req: { op: string }, timeoutMs: number): Promise<T> {
  const m = await requests.request((id) => proc.send({ id, req }), { timeoutMs }).catch((err: Error) => {
    throw err instanceof RequestFailed && err.code === 'timeout' ? new Error(`${label}: ${req.op} got no answer in ${timeoutMs} ms`) : err;
  });
  if (m.ok) return m.result as T;
  throw new Error(`${label}: ${m.error}`);
}

/** The orchestrator's side of one child process. */
export class RpcChild<R extends { op: string }> {
  private readonly requests: PendingRequests<RpcReply>;
  exited = false;

  private constructor(private readonly label: string, readonly proc: ChildProcess, readonly pid: number) {
    this.requests = childRequests(proc, label);
    proc.on('exit', () => { this.exited = true; });
  }

  /** Starts `file` with `flag` under the hard open-file limit; resolves once it said hello. `label` names it in errors. */
  static start<R extends { op: string }>(file: string, flag: string, label: string): Promise<RpcChild<R>> {
    const [sh, ...shArgs] = withFileLimit([process.execPath, '--import', 'tsx', file, flag]);
    const proc = spawn(sh, shArgs, {
      cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`${label} did not start in 30 s`)); }, 30_000);
      proc.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${label} exited at start (${code})`)); });
      proc.once('message', (m: { hello?: number }) => {
        clearTimeout(timer);
        if (typeof m.hello === 'number') resolve(new RpcChild<R>(label, proc, m.hello)); else reject(new Error(`${label} said something else than hello`));
      });
    });
  }

  call<T>(req: R, timeoutMs: number): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`${this.label} exited`));
    return askChild<T>(this.requests, this.proc, this.label, req, timeoutMs);
  }

  cpuSeconds(): number {
    try { return this.exited ? 0 : cpuSeconds(this.pid); } catch { return 0; }
  }

  /** Asks it to exit; SIGKILL after 5 s if it does not. */
  async exit(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise<void>((r) => this.proc.once('exit', () => r()));
    try { await this.call({ op: 'exit' } as R, 5000); } catch { /* gone already; the kill below makes sure */ }
    const timer = setTimeout(() => this.killNow(), 5000);
    await gone;
    clearTimeout(timer);
  }

  killNow(): void {
    if (this.exited) return;
    try { process.kill(this.pid, 'SIGKILL'); } catch { /* already gone */ }
    this.proc.kill('SIGKILL');
  }
}
