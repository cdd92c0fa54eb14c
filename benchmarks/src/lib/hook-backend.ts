// S15's application backend for the gateway's hooks (WS_AUTH=hook, the
// subscribe hook): a node:http server on 127.0.0.1, port 0, keep-alive, in a
// child process of its own, so that its CPU is neither the gateway's nor the
// orchestrator's. It admits every connect as the user named by the token
// (`?token=u<N>` -> user `u<N>`), allows every subscribe for `cacheMs`, and
// counts the calls it answered, by hook. `delayMs` (set over IPC) holds every
// answer that long: a backend with latency.
//
// Run as a child: `node --import tsx hook-backend.ts`; it sends
// `{ ready: port }`, then answers `{ op: 'stats' }` with its counts and
// `{ op: 'set', delayMs }` with `{ ok: true }`; it exits when the parent goes.

import { fork, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { cpuSeconds } from './proc.ts';

export interface BackendStats {
  connect: number;
  subscribe: number;
  other: number;
  bad: number;
  /** TCP connections the gateway opened to it. */
  connections: number;
}

type Ctl = { op: 'stats'; id: number } | { op: 'set'; id: number; delayMs: number };

/** The topics every admitted user may join and publish to: the hooked ones and the plain ones. */
export const BACKEND_TOPICS = ['room:*', 'bench.*'];
/** How long the gateway may keep a subscribe decision. */
export const BACKEND_CACHE_MS = 600_000;

function serve(): void {
  const stats: BackendStats = { connect: 0, subscribe: 0, other: 0, bad: 0, connections: 0 };
  let delayMs = 0;
  const answer = (raw: string): string => {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      stats.bad++;
      return '{}';
    }
    if (body['hook'] === 'connect' || body['hook'] === 'refresh') {
      stats.connect++;
      const token = typeof body['token'] === 'string' ? body['token'] : '';
      if (token === '') return JSON.stringify({ refuse: { status: 401, message: 'no token' } });
      return JSON.stringify({ user: token, tenant: 'default', topics: BACKEND_TOPICS, publish: BACKEND_TOPICS });
    }
    if (body['hook'] === 'subscribe') {
      stats.subscribe++;
      return JSON.stringify({ allow: true, cacheMs: BACKEND_CACHE_MS });
    }
    stats.other++;
    return JSON.stringify({ allow: true });
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const out = answer(Buffer.concat(chunks).toString('utf8'));
      const write = (): void => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
      };
      if (delayMs > 0) setTimeout(write, delayMs);
      else write();
    });
  });
  server.on('connection', () => { stats.connections++; });
  server.keepAliveTimeout = 600_000;
  server.headersTimeout = 610_000;
  server.listen(0, '127.0.0.1', () => process.send!({ ready: (server.address() as AddressInfo).port }));
  process.on('message', (m: Ctl) => {
    if (m.op === 'set') delayMs = m.delayMs;
    process.send!({ id: m.id, stats: { ...stats } });
  });
  process.on('disconnect', () => process.exit(0));
  setTimeout(() => process.exit(0), 30 * 60_000).unref();
}

/** The orchestrator's handle on a backend process. */
export class HookBackendProc {
  private nextId = 1;
  private readonly waiting = new Map<number, (s: BackendStats) => void>();

  private constructor(private readonly child: ChildProcess, readonly port: number) {
    child.on('message', (m: { id?: number; stats?: BackendStats }) => {
      if (m.id === undefined || m.stats === undefined) return;
      this.waiting.get(m.id)?.(m.stats);
      this.waiting.delete(m.id);
    });
  }

  static start(timeoutMs = 30_000): Promise<HookBackendProc> {
    const child = fork(fileURLToPath(import.meta.url), ['serve'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error('hook backend: no ready message')); }, timeoutMs);
      child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`hook backend exited with ${String(code)}`)); });
      child.once('message', (m: { ready?: number }) => {
        clearTimeout(timer);
        if (typeof m.ready === 'number') resolve(new HookBackendProc(child, m.ready));
        else reject(new Error('hook backend: unexpected first message'));
      });
    });
  }

  get pid(): number { return this.child.pid!; }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  cpuSeconds(): number {
    return cpuSeconds(this.pid);
  }

  private call(m: { op: 'stats' } | { op: 'set'; delayMs: number }): Promise<BackendStats> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { this.waiting.delete(id); reject(new Error('hook backend: no answer')); }, 10_000);
      this.waiting.set(id, (s) => { clearTimeout(timer); resolve(s); });
      this.child.send({ ...m, id });
    });
  }

  stats(): Promise<BackendStats> { return this.call({ op: 'stats' }); }

  setDelay(delayMs: number): Promise<BackendStats> { return this.call({ op: 'set', delayMs }); }

  stop(): void {
    this.child.removeAllListeners('exit');
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

if (process.argv[2] === 'serve' && process.send !== undefined) serve();
