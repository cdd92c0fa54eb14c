/**
 * Private redis-server instances for tests and benchmarks: standalone or a
 * 3-master Cluster, on free loopback ports, in a temporary directory, with
 * persistence off. Each can be stopped and started again on the same port
 * (the fault tests). Needs Debian's `redis-server` and `redis-cli` on PATH:
 * without them each start fails at once naming the package (tools/system-deps.mjs).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
// A relative import of the repository's tools (not a package dependency): the
// one table of system binaries that tools/test.mjs installs from.
import { requireSystemDep, systemDepError } from '../../../tools/system-deps.mjs';

const run = promisify(execFile);
/** redis-cli with `args`; a missing redis-cli rejects naming its package. */
async function redisCli(args: string[]): Promise<{ stdout: string; stderr: string }> {
  const bin = requireSystemDep('redis-cli');
  try {
    return await run(bin, args);
  } catch (e) {
    throw systemDepError('redis-cli', e);
  }
}

export interface RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  /** Stops the process and waits for it to exit (SIGTERM with `persist`, so the append-only file is complete; else SIGKILL). */
  stop(): Promise<void>;
  /** Starts it again on the same port: empty, or with `persist` holding what it held. */
  start(): Promise<void>;
  /** Runs a redis-cli command against it and returns stdout. */
  cli(...args: string[]): Promise<string>;
}

export interface RedisCluster {
  readonly ports: readonly number[];
  /** Comma-separated `redis://` URLs of every master, as REDIS_URL takes them with REDIS_CLUSTER=1. */
  readonly url: string;
  readonly nodes: readonly RedisServer[];
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Waits until redis-server answers PING on `port` (a listener alone could be
 * another process's). `failed` ends the wait at once with its error: a
 * binary that could not be run, or a process that exited before it
 * listened (a port taken between `freePort` and the bind).
 */
async function waitForPort(port: number, ms: number, failed: () => Error | undefined = () => undefined): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const f = failed();
    if (f !== undefined) throw f;
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      let got = '';
      const done = (v: boolean): void => {
        clearTimeout(t);
        s.destroy();
        resolve(v);
      };
      const t = setTimeout(() => done(false), 500);
      s.once('connect', () => s.write('PING\r\n'));
      s.on('data', (c: Buffer) => {
        got += c.toString();
        if (got.includes('\r\n')) done(got.startsWith('+PONG'));
      });
      s.once('error', () => done(false));
      s.once('close', () => done(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw failed() ?? new Error(`redis-server on port ${port} did not start in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Thrown when redis-server exited before listening; `bindFailed` when it said an address was in use. */
class RedisStartFailed extends Error {
  constructor(message: string, readonly bindFailed: boolean) {
    super(message);
  }
}

export async function startRedis(opts: { cluster?: boolean; port?: number; persist?: boolean } = {}): Promise<RedisServer> {
  // Ports come from freePort, which lets go of them before redis-server binds:
  // another process (a client's source port, in the ephemeral range) can take
  // one in between. Redis says so and exits; then new ports are chosen, up to
  // three times. A port the caller gave is never changed.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startRedisOnce(opts);
    } catch (e) {
      if (!(e instanceof RedisStartFailed) || !e.bindFailed || opts.port !== undefined || attempt === 3) throw e;
    }
  }
}

async function startRedisOnce(opts: { cluster?: boolean; port?: number; persist?: boolean }): Promise<RedisServer> {
  const redisServer = requireSystemDep('redis-server');
  const port = opts.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), `sluice-redis-${port}-`));
  let proc: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  // persist: an append-only file, so that a stop and start keeps the data (the fault tests).
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', opts.persist === true ? 'yes' : 'no',
    '--daemonize', 'no', '--loglevel', 'warning', '--protected-mode', 'no'];
  // The cluster bus port is chosen free too: by default it is port + 10000,
  // which nothing reserved and a client's source port may hold.
  if (opts.cluster === true) {
    args.push('--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-node-timeout', '2000', '--cluster-port', String(await freePort()));
  }
  const server: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      // Its log (stdout) is kept, not shown: the last lines say why a start failed.
      const p = spawn(redisServer, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      proc = p;
      let said = '';
      const keep = (c: Buffer): void => {
        said = (said + c.toString()).slice(-2000);
      };
      p.stdout.on('data', keep);
      p.stderr.on('data', keep);
      exited = new Promise((resolve) => p.once('exit', () => resolve()));
      // A spawn that fails (ENOENT) rejects at once, as does an exit before the port listens.
      let failure: Error | undefined;
      p.once('error', (e) => (failure = systemDepError('redis-server', e) as Error));
      p.once('exit', (code, signal) => {
        const why = said.trim().split('\n').slice(-3).join(' | ');
        failure ??= new RedisStartFailed(`redis-server on port ${port} exited (${code ?? signal}) before it listened: ${why}`, /in use|EADDRINUSE/i.test(said));
      });
      try {
        await waitForPort(port, 5000, () => failure);
      } catch (e) {
        p.kill('SIGKILL');
        throw e;
      }
    },
    async stop() {
      if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill(opts.persist === true ? 'SIGTERM' : 'SIGKILL');
      await exited;
    },
    async cli(...cmd: string[]) {
      const { stdout } = await redisCli(['-p', String(port), ...cmd]);
      return stdout;
    },
  };
  try {
    await server.start();
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const stop = server.stop;
  // The directory goes when the server is stopped for good (process exit); restarts reuse it.
  process.once('exit', () => {
    proc?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  return { ...server, stop };
}

// When the runner's per-file timeout ends this process it sends SIGTERM,
// and Node runs no 'exit' handlers on a signal by default: exit instead, so
// that they kill this file's children. Once, whichever kit loads first; a
// process with a SIGTERM handler of its own is left to it.
if (process.listenerCount('SIGTERM') === 0) {
  process.once('SIGTERM', () => {
    if (process.listenerCount('SIGTERM') === 0) process.exit(143);
  });
}

/** Three masters, no replicas, slots spread by `redis-cli --cluster create`. */
export async function startRedisCluster(): Promise<RedisCluster> {
  requireSystemDep('redis-cli');
  const nodes: RedisServer[] = [];
  // A start that fails stops what it started: a live child would hold the
  // test file's process open after its tests ended.
  try {
    for (let i = 0; i < 3; i++) nodes.push(await startRedis({ cluster: true }));
    await redisCli(['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes']);
    // Wait until every node agrees the cluster is up.
    const deadline = Date.now() + 10_000;
    for (const n of nodes) {
      while (!(await n.cli('cluster', 'info')).includes('cluster_state:ok')) {
        if (Date.now() > deadline) throw new Error('redis cluster did not reach cluster_state:ok');
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  } catch (e) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw e;
  }
  return {
    ports: nodes.map((n) => n.port),
    url: nodes.map((n) => n.url).join(','),
    nodes,
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}
