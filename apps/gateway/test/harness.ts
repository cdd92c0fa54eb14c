/**
 * Test harness: starts the real gateway (`node --import tsx src/main.ts`, the
 * same entry `pnpm start` runs, or the build, `node dist/main.js`) on free
 * ports, and a small client on `ws`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { UWS_BUILDS } from '@sluice/uws';

const GATEWAY_DIR = fileURLToPath(new URL('..', import.meta.url));

export interface Gateway {
  readonly port: number;
  readonly adminPort: number;
  readonly proc: ChildProcess;
  /** Every stdout line so far, parsed where it is JSON. */
  readonly logs: Record<string, unknown>[];
  stderr(): string;
  url(path?: string): string;
  admin(path: string): string;
  /** Sends a signal and resolves with the exit code (or signal name). */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

export const running = new Set<Gateway>();

/** How a test starts the gateway: from source under tsx (what `pnpm start` runs), or the build (`node dist/main.js`, after `pnpm build`). */
export interface StartOptions {
  readonly built?: boolean;
  /** Another command altogether (e.g. `npx sluice` in a project that installed the tarball), run in `cwd`. */
  readonly command?: readonly [string, ...string[]];
  readonly cwd?: string;
  /** Start it in a process group of its own (a command such as npx runs the gateway as its child). */
  readonly detached?: boolean;
  /** The environment the test's variables are laid over: this process's unless given (the npx test gives one without npm's and pnpm's). */
  readonly baseEnv?: NodeJS.ProcessEnv;
}

/** The gateway's command line, from source or from the build. */
export function gatewayArgs(opts: StartOptions = {}): string[] {
  return opts.built === true ? ['dist/main.js'] : ['--import', 'tsx', 'src/main.ts'];
}

export async function startGateway(env: Record<string, string> = {}, opts: StartOptions = {}): Promise<Gateway> {
  const [cmd, ...args] = opts.command ?? [process.execPath, ...gatewayArgs(opts)];
  const proc = spawn(cmd, args, {
    cwd: opts.cwd ?? GATEWAY_DIR,
    detached: opts.detached === true,
    // Every test client comes from 127.0.0.1 as one tenant: the per-IP and
    // per-tenant windows are opened wide unless a test sets them.
    env: { ...(opts.baseEnv ?? process.env), PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1', WS_WORKERS: '2',
      LOG_LEVEL: 'info', WS_DRAIN_DELAY_MS: '0', WS_IP_CONNECT_LIMIT: '1000000', WS_TENANT_MSG_LIMIT: '100000000', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: Record<string, unknown>[] = [];
  let err = '';
  let buf = '';
  let exited: number | string | undefined;
  const exit = new Promise<number | string>((resolve) => {
    proc.on('exit', (code, signal) => {
      exited = code ?? signal ?? 'unknown';
      resolve(exited);
    });
  });
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const ready = new Promise<{ port: number; adminPort: number }>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      buf += c.toString();
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const rec = JSON.parse(line) as Record<string, unknown>;
          logs.push(rec);
          if (rec.msg === 'gateway ready') resolve({ port: rec.port as number, adminPort: rec.adminPort as number });
        } catch {
          logs.push({ raw: line });
        }
      }
    });
    void exit.then((code) => reject(new Error(`gateway exited (${code}) before ready: ${err}`)));
    setTimeout(() => reject(new Error(`gateway not ready in 20s: ${err}`)), 20_000).unref();
  });
  const { port, adminPort } = await ready;
  const gw: Gateway = {
    port, adminPort, proc, logs,
    stderr: () => err,
    url: (path = '/ws') => `ws://127.0.0.1:${port}${path}`,
    admin: (path) => `http://127.0.0.1:${adminPort}${path}`,
    async stop(signal = 'SIGTERM') {
      running.delete(gw);
      // A command that runs the gateway as its child (npx) is signalled as a terminal's Ctrl-C is: its whole process group.
      if (exited === undefined) {
        if (opts.detached === true) process.kill(-proc.pid!, signal);
        else proc.kill(signal);
      }
      return exit;
    },
  };
  running.add(gw);
  return gw;
}

/** Resolves with the exit code of a gateway that is expected to fail at start. */
export async function runUntilExit(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: GATEWAY_DIR,
    env: { ...process.env, PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1', WS_WORKERS: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
  const [code] = (await once(proc, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, stdout, stderr };
}

export type Frame = Record<string, unknown> & { type: string };

/** A WebSocket client that queues every frame it gets and waits for the ones a test expects. */
export class Client {
  readonly frames: Frame[] = [];
  private waiters: (() => void)[] = [];
  closed: { code: number; reason: string } | undefined;
  welcome!: Frame;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      this.frames.push(isBinary ? { type: '<binary>' } : (JSON.parse(data.toString()) as Frame));
      this.wake();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.wake();
    });
  }

  static async connect(url: string, opts: { protocols?: string[]; headers?: Record<string, string> } = {}): Promise<Client> {
    const ws = new WebSocket(url, opts.protocols ?? ['sluice.v1'], { headers: opts.headers });
    const c = new Client(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    c.welcome = await c.next((f) => f.type === 'welcome');
    return c;
  }

  /** The shard this socket landed on (connection ids are node.shard.generation.seq). */
  get shard(): number {
    return Number(String(this.welcome.connectionId).split('.')[1]);
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** Sends a frame with a ref and resolves with the reply (or error) that answers it. */
  async request(frame: Record<string, unknown>): Promise<Frame> {
    const ref = (frame.ref as string | undefined) ?? `r${Math.random().toString(36).slice(2)}`;
    this.send({ ...frame, ref });
    return this.next((f) => (f.type === 'reply' || f.type === 'pong') && f.ref === ref);
  }

  /** Removes and returns the first queued frame matching `pred`, waiting up to `ms`. */
  async next(pred: (f: Frame) => boolean = () => true, ms = 5000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.frames.findIndex(pred);
      if (i >= 0) return this.frames.splice(i, 1)[0]!;
      if (this.closed) throw new Error(`socket closed (${this.closed.code} ${this.closed.reason}) while waiting`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for a frame; queued: ${JSON.stringify(this.frames).slice(0, 500)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Waits until the server closes the socket. */
  async closedBy(ms = 5000): Promise<{ code: number; reason: string }> {
    const deadline = Date.now() + ms;
    while (!this.closed) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('socket not closed in time');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.closed;
  }

  /** Events received on a topic, in order, taken off the queue. */
  takeEvents(topic: string): Frame[] {
    const out: Frame[] = [];
    for (let i = 0; i < this.frames.length; ) {
      const f = this.frames[i]!;
      if (f.type === 'event' && f.topic === topic) {
        out.push(f);
        this.frames.splice(i, 1);
      } else i++;
    }
    return out;
  }

  close(): void {
    this.ws.close();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}

/** Opens sockets until one lands on each shard in `want`; closes the extra ones. */
export async function clientsOnShards(url: string, want: number[]): Promise<Client[]> {
  const found = new Map<number, Client>();
  for (let i = 0; i < 200 && found.size < want.length; i++) {
    const c = await Client.connect(url);
    if (want.includes(c.shard) && !found.has(c.shard)) found.set(c.shard, c);
    else c.close();
  }
  if (found.size < want.length) throw new Error(`could not land sockets on shards ${want.join(',')}`);
  return want.map((s) => found.get(s)!);
}

export async function metricValue(gw: Gateway, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(gw.admin('/metrics'))).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `) || (labels === '' && l.startsWith(`${name} `)));
  if (line === undefined) throw new Error(`metric ${name}${labels} not found`);
  return Number(line.split(' ').at(-1));
}

/** Waits until `check` is true, polling; for state that settles asynchronously (counters, gauges). */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface RawResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * An upgrade request by hand (fetch refuses the upgrade header). Resolves
 * with the plain-HTTP refusal; rejects when the server upgrades instead.
 * `headers` are added to (or, set to null, removed from) a valid handshake.
 */
export function rawUpgrade(port: number, opts: { path?: string; headers?: Record<string, string | null> } = {}): Promise<RawResponse> {
  const headers: Record<string, string> = {
    upgrade: 'websocket', connection: 'Upgrade', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'sec-websocket-version': '13',
  };
  for (const [k, v] of Object.entries(opts.headers ?? {})) {
    if (v === null) delete headers[k];
    else headers[k] = v;
  }
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: opts.path ?? '/ws', headers });
    req.on('upgrade', (_res, socket) => {
      socket.destroy();
      reject(new Error('upgraded although refused'));
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string>, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * How long uWS leaves a connection whose request never completes, in the
 * build this gateway loaded (its start line names it): the build's fixed
 * HTTP idle timeout, up to one 4 s check late, and 2 s for a loaded box.
 * 16 s on 20.30 (Node 20), 36 s on 20.57 (Node 22 and 24).
 */
export function httpIdleBoundMs(gw: Gateway): number {
  const uws = gw.logs.find((l) => typeof l['uws'] === 'string' && typeof l['cork'] === 'string')?.['uws'];
  const build = UWS_BUILDS.find((b) => b.uws === uws);
  if (build === undefined) throw new Error(`the gateway's start line names no known uWS build (${String(uws)})`);
  return (build.httpIdleTimeoutS + 4 + 2) * 1000;
}
