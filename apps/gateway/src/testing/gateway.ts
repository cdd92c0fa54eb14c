/**
 * Starts the real gateway as a child process (`node --import tsx
 * src/main.ts`, what `pnpm start` runs, or the build, `node dist/main.js`)
 * and knows it is serving when the gateway says so over the IPC channel:
 * `{type: 'sluice.ready', port, adminPort, pid}` (main.ts, `ReadyMessage`).
 * No log text is read for that; stdout lines are only collected, for tests
 * that look at what was logged.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ReadyMessage } from '../main.ts';

export type { ReadyMessage };

/** The gateway package's folder: where it runs from unless told otherwise. */
export const GATEWAY_DIR = fileURLToPath(new URL('../..', import.meta.url));

/** The admin token of TEST_ENV: `gw.adminFetch` sends it. */
export const TEST_ADMIN_TOKEN = 'sluice-test-admin-token';

/**
 * Every test client comes from 127.0.0.1 as one tenant: the per-IP and
 * per-tenant windows are opened wide, the node's upgrade budget is off
 * (tests open hundreds of sockets at once; the budget's own tests set
 * WS_UPGRADE_RATE), free ports are taken, and the drain
 * does not wait before closing. The admin API needs TEST_ADMIN_TOKEN, as a
 * deployment's would. `/metrics` waits for every shard's fresh figures (up
 * to 2 s, as for a shard's first scrape), since tests read a counter right
 * after the action that moves it; the default wait, and the previous
 * answer standing in for a busy shard, are tested in node-metrics.test.ts.
 * A test's own variables are laid over these.
 */
export const TEST_ENV: Readonly<Record<string, string>> = {
  PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1', WS_WORKERS: '2', LOG_LEVEL: 'info',
  WS_DRAIN_DELAY_MS: '0', WS_IP_CONNECT_LIMIT: '1000000', WS_TENANT_MSG_LIMIT: '100000000', ADMIN_TOKEN: TEST_ADMIN_TOKEN,
  WS_METRICS_WAIT_MS: '2000', WS_UPGRADE_RATE: '0',
};

/** Only the ports and hosts of TEST_ENV: every other setting stays the gateway's default. */
export const PLAIN_ENV: Readonly<Record<string, string>> = { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1' };

export interface StartOptions {
  /** true: the build (`node dist/main.js`, after `pnpm build`); false: the sources under tsx; unset: see `runsBuild`. */
  readonly built?: boolean;
  /** Another command altogether (`npx sluice` in a project that installed the tarball, a benchmark peer), run in `cwd`. */
  readonly command?: readonly [string, ...string[]];
  readonly cwd?: string;
  /** Start it in a process group of its own (a command such as npx runs the gateway as its child); stop() signals the group. */
  readonly detached?: boolean;
  /** The environment the variables are laid over: this process's unless given. */
  readonly baseEnv?: NodeJS.ProcessEnv;
  /** The defaults under the caller's variables: TEST_ENV unless given (PLAIN_ENV: the gateway's own defaults). */
  readonly defaults?: Readonly<Record<string, string>>;
  /**
   * How readiness is known: 'ipc' (the default), the ready message; 'log',
   * the `gateway ready` log line, only for a command that does not pass an
   * IPC channel on to the gateway (npx runs it as a grandchild without one).
   */
  readonly readyFrom?: 'ipc' | 'log';
  /** Raise the soft open-file limit to the hard one first (through /bin/sh, which then execs: the pid stays the gateway's). */
  readonly raiseFileLimit?: boolean;
  /** How long to wait for readiness; default 20 s. */
  readonly timeoutMs?: number;
  /** Called with every stdout line that is JSON (a log record), and every stderr line. */
  readonly onLog?: (rec: Record<string, unknown>) => void;
  readonly onStderr?: (line: string) => void;
}

export interface Gateway {
  readonly port: number;
  readonly adminPort: number;
  readonly pid: number;
  readonly proc: ChildProcess;
  /** Every stdout line so far, parsed where it is JSON (`{raw}` where not). */
  readonly logs: Record<string, unknown>[];
  stderr(): string;
  url(path?: string): string;
  admin(path: string): string;
  /**
   * A request to the admin port with the admin token of the environment it
   * was started with (TEST_ENV's unless overridden); a body that is not a
   * string is sent as JSON.
   */
  adminFetch(path: string, init?: { method?: string; body?: unknown; headers?: Record<string, string> }): Promise<Response>;
  /** POST `body` (JSON) to an admin route with the token. */
  adminPost(path: string, body: unknown): Promise<Response>;
  /** GET /metrics on the admin port. */
  metrics(timeoutMs?: number): Promise<string>;
  readonly alive: boolean;
  /** null while it runs. */
  readonly exitCode: number | null;
  readonly exitSignal: NodeJS.Signals | null;
  /** Resolves with the exit code (or signal name) once it exited. */
  readonly exited: Promise<number | string>;
  /** Waits up to `ms` for the exit; true when it exited. */
  waitExit(ms: number): Promise<boolean>;
  /** Sends a signal (to the process group when started detached); nothing once it exited. */
  signal(sig: NodeJS.Signals): void;
  /** Sends `signal`, SIGKILL after `killAfterMs` if given, and resolves with the exit code (or signal name). */
  stop(signal?: NodeJS.Signals, killAfterMs?: number): Promise<number | string>;
}

/** Gateways started and not yet stopped: a test file stops what is left at its end. */
export const running = new Set<Gateway>();
// The last resort: a gateway a failed hook never stopped goes with the test
// file's process, rather than living on and loading the machine for the
// files after it.
process.once('exit', () => {
  for (const gw of running) if (gw.alive) gw.signal('SIGKILL');
});
// When the runner's per-file timeout ends this process it sends SIGTERM,
// and Node runs no 'exit' handlers on a signal by default: exit instead, so
// that they kill this file's children. Once, whichever kit loads first; a
// process with a SIGTERM handler of its own is left to it.
if (process.listenerCount('SIGTERM') === 0) {
  process.once('SIGTERM', () => {
    if (process.listenerCount('SIGTERM') === 0) process.exit(143);
  });
}

/** The gateway's command line, from source or from the build (`runsBuild()` when `built` is not given). */
export function gatewayArgs(opts: Pick<StartOptions, 'built'> = {}): string[] {
  return (opts.built ?? runsBuild()) ? ['dist/main.js'] : ['--import', 'tsx', 'src/main.ts'];
}

let built: boolean | undefined;

/**
 * The folders the build is made of, under `repo`: apps/gateway and every
 * workspace package it depends on (`workspace:` in its package.json; the
 * build bundles them, and copies the admin page's). Read from the
 * manifests, so that a package added to the gateway is watched too.
 */
export function bundledFolders(repo: string): string[] {
  const manifest = (dir: string): { name?: string; [deps: string]: unknown } =>
    JSON.parse(readFileSync(join(repo, dir, 'package.json'), 'utf8')) as { name?: string };
  const gateway = manifest('apps/gateway');
  const wanted = new Set<string>();
  for (const field of ['dependencies', 'devDependencies', 'optionalDependencies']) {
    for (const [name, spec] of Object.entries((gateway[field] ?? {}) as Record<string, string>)) if (spec.startsWith('workspace:')) wanted.add(name);
  }
  const found = ['apps', 'packages'].flatMap((top) => readdirSync(join(repo, top)).map((d) => `${top}/${d}`))
    .filter((d) => existsSync(join(repo, d, 'package.json')) && wanted.has(manifest(d).name ?? ''));
  return ['apps/gateway', ...found];
}

/**
 * Whether a test that does not choose runs the build or the sources.
 * SLUICE_TEST_GATEWAY=built or =source decides; unset, the build runs when
 * apps/gateway/dist/main.js is newer than every file it is made of (the
 * workspace packages it bundles, tests and this kit aside), and the sources under tsx
 * otherwise, so that an edit is tested before it is built. The build
 * starts in half the time (1.3 s against 2.6 s on 2 cores: tsx compiles
 * the TypeScript at every start, in the main thread and each shard) and is
 * what users run; `npm test` builds first. Decided once per process.
 */
export function runsBuild(): boolean {
  if (built !== undefined) return built;
  const choice = gatewayChoice(process.env.SLUICE_TEST_GATEWAY);
  return (built = choice === 'auto' ? buildIsFresh(join(GATEWAY_DIR, '../..')) : choice === 'built');
}

/** SLUICE_TEST_GATEWAY's value: built, source, or unset/empty (auto); anything else is an error naming it. */
export function gatewayChoice(value: string | undefined): 'built' | 'source' | 'auto' {
  if (value === undefined || value === '') return 'auto';
  if (value === 'built' || value === 'source') return value;
  throw new Error(`SLUICE_TEST_GATEWAY=${value}: must be built or source (or unset: the build when it is fresh)`);
}

/**
 * Whether `repo`'s apps/gateway/dist/main.js exists and is newer than every
 * file of the folders the build is made of (`bundledFolders`; their
 * node_modules, dist and test folders, dot files and the gateway's
 * src/testing aside).
 */
export function buildIsFresh(repo: string): boolean {
  let made: number;
  try {
    made = statSync(join(repo, 'apps/gateway/dist/main.js')).mtimeMs;
  } catch {
    return false;
  }
  const testing = join(repo, 'apps/gateway/src/testing');
  const newer = (dir: string): boolean => readdirSync(dir, { withFileTypes: true }).some((e) => {
    if (e.name.startsWith('.') || ['node_modules', 'dist', 'test'].includes(e.name)) return false;
    const p = join(dir, e.name);
    if (e.isDirectory()) return p !== testing && newer(p);
    return statSync(p).mtimeMs > made;
  });
  return !bundledFolders(repo).some((d) => newer(join(repo, d)));
}

/** /bin/sh arguments that raise the soft open-file limit to the hard one and exec `argv`. */
export function withFileLimit(argv: readonly string[]): [string, ...string[]] {
  return ['/bin/sh', '-c', 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"', 'sh', ...argv];
}

function isReady(m: unknown): m is ReadyMessage {
  const r = m as Partial<ReadyMessage> | null;
  return typeof r === 'object' && r !== null && r.type === 'sluice.ready' && typeof r.port === 'number' && typeof r.adminPort === 'number';
}

/** Starts a gateway with `env` over the defaults and resolves once it is serving; rejects when it exits first or is not ready in time. */
export async function startGateway(env: Record<string, string> = {}, opts: StartOptions = {}): Promise<Gateway> {
  const command = opts.command ?? [process.execPath, ...gatewayArgs(opts)];
  const [cmd, ...args] = opts.raiseFileLimit === true ? withFileLimit(command) : command;
  const ipc = opts.readyFrom !== 'log';
  const proc = spawn(cmd, args, {
    cwd: opts.cwd ?? GATEWAY_DIR,
    detached: opts.detached === true,
    env: { ...(opts.baseEnv ?? process.env), ...(opts.defaults ?? TEST_ENV), ...env },
    stdio: ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  });
  const logs: Record<string, unknown>[] = [];
  let err = '';
  let onLine: ((rec: Record<string, unknown>) => void) | undefined;
  const exited = new Promise<number | string>((resolve) => proc.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  lines(proc.stdout!, (line) => {
    let rec: Record<string, unknown>;
    try {
      rec = JSON.parse(line) as Record<string, unknown>;
    } catch {
      logs.push({ raw: line });
      return;
    }
    logs.push(rec);
    opts.onLog?.(rec);
    onLine?.(rec);
  });
  lines(proc.stderr!, (line) => {
    err += `${line}\n`;
    opts.onStderr?.(line);
  });
  const timeoutMs = opts.timeoutMs ?? 20_000;
  let timer: NodeJS.Timeout | undefined;
  const ready = await new Promise<{ port: number; adminPort: number }>((resolve, reject) => {
    const tail = (): string => `${err}${logs.slice(-10).map((l) => JSON.stringify(l)).join('\n')}`;
    if (ipc) proc.on('message', (m) => { if (isReady(m)) resolve(m); });
    else onLine = (rec) => { if (rec['msg'] === 'gateway ready') resolve({ port: rec['port'] as number, adminPort: rec['adminPort'] as number }); };
    void exited.then((code) => reject(new Error(`gateway exited (${code}) before ready: ${tail()}`)));
    timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`gateway not ready in ${timeoutMs} ms: ${tail()}`));
    }, timeoutMs);
  }).finally(() => clearTimeout(timer));
  // The channel was only for the ready message: it must not keep this process alive.
  if (ipc) proc.disconnect();
  const gw: Gateway = {
    ...ready,
    pid: proc.pid!,
    proc,
    logs,
    exited,
    stderr: () => err,
    url: (path = '/ws') => `ws://127.0.0.1:${ready.port}${path}`,
    admin: (path) => `http://127.0.0.1:${ready.adminPort}${path}`,
    adminFetch: (path, init = {}) => {
      const token = env.ADMIN_TOKEN ?? (opts.defaults ?? TEST_ENV).ADMIN_TOKEN;
      const body = init.body === undefined || typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
      return fetch(gw.admin(path), {
        method: init.method ?? (body === undefined ? 'GET' : 'POST'),
        headers: { ...(token === undefined || token === '' ? {} : { authorization: `Bearer ${token}` }), ...init.headers },
        ...(body === undefined ? {} : { body: body as string }),
        signal: AbortSignal.timeout(10_000),
      });
    },
    adminPost: (path, body) => gw.adminFetch(path, { method: 'POST', body }),
    metrics: async (ms = 5000) => (await fetch(gw.admin('/metrics'), { signal: AbortSignal.timeout(ms) })).text(),
    get alive() { return proc.exitCode === null && proc.signalCode === null; },
    get exitCode() { return proc.exitCode; },
    get exitSignal() { return proc.signalCode; },
    async waitExit(ms) {
      if (!gw.alive) return true;
      let t: NodeJS.Timeout | undefined;
      const ok = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => { t = setTimeout(() => r(false), ms); })]);
      clearTimeout(t);
      return ok;
    },
    signal(sig) {
      if (!gw.alive) return;
      // A command that runs the gateway as its child (npx) is signalled as a terminal's Ctrl-C is: its whole process group.
      if (opts.detached === true) process.kill(-proc.pid!, sig);
      else proc.kill(sig);
    },
    async stop(sig = 'SIGTERM', killAfterMs) {
      running.delete(gw);
      gw.signal(sig);
      if (killAfterMs !== undefined && !(await gw.waitExit(killAfterMs))) gw.signal('SIGKILL');
      return exited;
    },
  };
  running.add(gw);
  return gw;
}

/** Calls `each` with every complete line of a stream. */
function lines(stream: NodeJS.ReadableStream, each: (line: string) => void): void {
  let buf = '';
  stream.setEncoding('utf8');
  stream.on('data', (c: string) => {
    buf += c;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      each(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  });
}

/** Runs a gateway (one shard; the build or the sources, as `runsBuild()`) that is expected to fail at start; resolves with its exit code and output. */
export async function runUntilExit(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, gatewayArgs(), {
    cwd: GATEWAY_DIR,
    env: { ...process.env, ...PLAIN_ENV, WS_WORKERS: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
  const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, stdout, stderr };
}
