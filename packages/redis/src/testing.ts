/**
 * Private redis-server instances for tests and benchmarks: standalone, a
 * Cluster of 3 masters (with replicas if asked), or a Sentinel group (a
 * master, its replicas and the sentinels that watch them), on free loopback
 * ports, in temporary directories, with persistence off. Each server can be
 * stopped and started again on the same port (the fault tests). Needs
 * Debian's `redis-server` and `redis-cli` on PATH: without them each start
 * fails at once naming the package (tools/system-deps.mjs).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  /** Comma-separated `redis://` URLs of every node, as REDIS_URL takes them with REDIS_CLUSTER=1 (any node is a startup node). */
  readonly url: string;
  readonly nodes: readonly RedisServer[];
  /**
   * The masters serving slots now, in the order of their first slot, as the
   * first running node's CLUSTER NODES says (during a failover or a node's
   * restart the views differ: after a kill, waitFailover first).
   */
  masters(): Promise<RedisServer[]>;
  /** The replicas of `master` now, as the master itself says (CLUSTER NODES). */
  replicasOf(master: RedisServer): Promise<RedisServer[]>;
  /**
   * After the master on `killedPort` was stopped: waits until every running
   * node reports cluster_state:ok and sees its slots served by one of its
   * former replicas, which says role:master, and returns that replica.
   * Rejects after `timeoutMs` saying what was still missing.
   */
  waitFailover(killedPort: number, timeoutMs: number): Promise<RedisServer>;
  stop(): Promise<void>;
}

export interface RedisSentinel {
  /** The name the sentinels monitor the master under (`sentinel monitor <name>`). */
  readonly name: string;
  readonly sentinels: readonly { readonly host: string; readonly port: number }[];
  /** `127.0.0.1:<p1>,127.0.0.1:<p2>,...`: the form REDIS_SENTINELS takes. */
  readonly sentinelsSpec: string;
  /** The Redis servers: index 0 the first master, the others its replicas at the start. */
  readonly servers: readonly RedisServer[];
  /** The server the first sentinel names as master now (SENTINEL get-master-addr-by-name). */
  master(): Promise<RedisServer>;
  /**
   * SIGKILLs the current master (no shutdown, nothing said to the replicas)
   * and returns it. Start it again only after waitFailover: back before the
   * failover, it would be the master again, empty, and its replicas would
   * copy that.
   */
  killMaster(): Promise<RedisServer>;
  /**
   * Waits until every sentinel names one master other than the server on
   * `oldPort` and that server says role:master, and returns it. Rejects after
   * `timeoutMs` with what each sentinel names and their last log lines.
   */
  waitFailover(oldPort: number, timeoutMs: number): Promise<RedisServer>;
  /** Runs a redis-cli command against sentinel `i` and returns stdout: `sentinelCli(0, 'SENTINEL', 'replicas', name)`. */
  sentinelCli(i: number, ...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

/** A process the kit started: a RedisServer, with what the kit's own waits and errors need. */
interface Child extends RedisServer {
  /** How errors name it: `redis-server on port 6390`. */
  readonly what: string;
  /** Its temporary directory (a Cluster node's nodes.conf is there). */
  readonly dir: string;
  /** Whether its process is alive: started and not exited. */
  running(): boolean;
  /** The last `n` lines it logged since its last start, joined by ` | `. */
  tail(n: number): string;
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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until redis-server answers PING on `port` (a listener alone could be
 * another process's). `failed` ends the wait at once with its error: a
 * binary that could not be run, or a process that exited before it
 * listened (a port taken between `freePort` and the bind).
 */
async function waitForPort(what: string, port: number, ms: number, failed: () => Error | undefined): Promise<void> {
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
    if (Date.now() > deadline) throw failed() ?? new Error(`${what} did not start in ${ms} ms`);
    await sleep(20);
  }
}

/**
 * Runs `check` every 100 ms until it returns undefined (done); it returns
 * what is still missing otherwise. After `ms` rejects with `fail(missing)`.
 * A check that throws (a redis-cli that could not connect) ends the wait.
 */
async function waitFor(ms: number, check: () => Promise<string | undefined>, fail: (missing: string) => string): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const missing = await check();
    if (missing === undefined) return;
    if (Date.now() > deadline) throw new Error(fail(missing));
    await sleep(100);
  }
}

/** Thrown when redis-server exited before listening; `bindFailed` when it said an address was in use. */
class RedisStartFailed extends Error {
  constructor(message: string, readonly bindFailed: boolean) {
    super(message);
  }
}

// What to undo when this process exits: kill each child and remove its
// directory (restarts reuse it until then). One 'exit' listener for all: one
// per child would pass Node's limit of 10 listeners, and warn, in a file that
// starts a Sentinel group and a Cluster.
const atExit = new Set<() => void>();
process.once('exit', () => {
  for (const undo of atExit) undo();
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

/**
 * Runs `redis-server <args>` (which listens on `port`, in `dir`) and waits
 * until it answers PING. The returned Child's start() runs the same command
 * again; its stop() sends `stopSignal`. A failed first start removes `dir`.
 */
async function launch(what: string, port: number, dir: string, args: string[], stopSignal: NodeJS.Signals): Promise<Child> {
  const redisServer = requireSystemDep('redis-server');
  let proc: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let said = '';
  const child: Child = {
    port,
    url: `redis://127.0.0.1:${port}`,
    what,
    dir,
    running: () => proc !== undefined && proc.exitCode === null && proc.signalCode === null,
    tail: (n) => said.trim().split('\n').slice(-n).join(' | '),
    async start() {
      // Its log (stdout) is kept, not shown: the last lines say why a start failed.
      const p = spawn(redisServer, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      proc = p;
      said = '';
      const keep = (c: Buffer): void => {
        said = (said + c.toString()).slice(-4000);
      };
      p.stdout.on('data', keep);
      p.stderr.on('data', keep);
      exited = new Promise((resolve) => p.once('exit', () => resolve()));
      // A spawn that fails (ENOENT) rejects at once, as does an exit before the port listens.
      let failure: Error | undefined;
      p.once('error', (e) => (failure = systemDepError('redis-server', e) as Error));
      p.once('exit', (code, signal) => {
        failure ??= new RedisStartFailed(`${what} exited (${code ?? signal}) before it listened: ${child.tail(3)}`, /in use|EADDRINUSE/i.test(said));
      });
      try {
        await waitForPort(what, port, 5000, () => failure);
      } catch (e) {
        p.kill('SIGKILL');
        throw e;
      }
    },
    async stop() {
      if (!child.running()) return;
      proc!.kill(stopSignal);
      await exited;
    },
    async cli(...cmd: string[]) {
      const { stdout } = await redisCli(['-p', String(port), ...cmd]);
      return stdout;
    },
  };
  try {
    await child.start();
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  atExit.add(() => {
    proc?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  return child;
}

/**
 * Ports come from freePort, which lets go of them before redis-server binds:
 * another process (a client's source port, in the ephemeral range) can take
 * one in between. Redis says so and exits; then `once` runs again with new
 * ports, up to three times in all.
 */
async function retryBindRace<T>(once: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await once();
    } catch (e) {
      if (!(e instanceof RedisStartFailed) || !e.bindFailed || attempt === 3) throw e;
    }
  }
}

export interface StartRedisOptions {
  cluster?: boolean;
  /** A port of one's own: never changed, so a bind race is not retried. */
  port?: number;
  persist?: boolean;
  /** The port of a master on 127.0.0.1 to replicate (`--replicaof`). */
  replicaOf?: number;
}

export async function startRedis(opts: StartRedisOptions = {}): Promise<RedisServer> {
  return startChild(opts);
}

async function startChild(opts: StartRedisOptions): Promise<Child> {
  return opts.port !== undefined ? startRedisOnce(opts) : retryBindRace(() => startRedisOnce(opts));
}

async function startRedisOnce(opts: StartRedisOptions): Promise<Child> {
  requireSystemDep('redis-server');
  const port = opts.port ?? (await freePort());
  // persist: an append-only file, so that a stop and start keeps the data (the fault tests).
  // A master sends a replica its first copy (diskless) only after
  // repl-diskless-sync-delay, 5 s by default, in case more replicas come to
  // share it: here they come one by one, and 5 s each would be the start's time.
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', opts.persist === true ? 'yes' : 'no',
    '--daemonize', 'no', '--loglevel', 'warning', '--protected-mode', 'no', '--repl-diskless-sync-delay', '0'];
  if (opts.replicaOf !== undefined) args.push('--replicaof', '127.0.0.1', String(opts.replicaOf));
  const dir = mkdtempSync(join(tmpdir(), `sluice-redis-${port}-`));
  args.push('--dir', dir);
  // The cluster bus port is chosen free too: by default it is port + 10000,
  // which nothing reserved and a client's source port may hold. A node
  // timeout of 2 s makes a failover take a few seconds. The replica validity
  // factor stays at its default (10): a replica may fail over if its link to
  // the master was up within 2 s × 10 + the 10 s replication ping period. The
  // kit returns a cluster only once every replica's link is up, so a master
  // killed after that always fails over; at 0, a replica that never synced
  // (empty) could be promoted, a loss the production default would refuse.
  if (opts.cluster === true) {
    args.push('--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-node-timeout', '2000', '--cluster-port', String(await freePort()));
  }
  return launch(`redis-server on port ${port}`, port, dir, args, opts.persist === true ? 'SIGTERM' : 'SIGKILL');
}

/** One line of CLUSTER NODES (or of a nodes.conf, which has the same form). */
interface ClusterNodeLine {
  id: string;
  port: number;
  flags: string[];
  /** The id of the master it replicates; undefined for a master. */
  masterId: string | undefined;
  connected: boolean;
  /** Slot ranges served, inclusive: [[0, 5460]]. */
  slots: [number, number][];
}

function parseClusterNodes(text: string): ClusterNodeLine[] {
  return text.trim().split('\n').filter((l) => l !== '' && !l.startsWith('vars ')).map((line) => {
    // <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot> ...
    const [id = '', addr = '', flags = '', master = '-', , , , link = '', ...slots] = line.split(' ');
    const hostPort = addr.split('@')[0] ?? '';
    return {
      id,
      port: Number(hostPort.slice(hostPort.lastIndexOf(':') + 1)),
      flags: flags.split(','),
      masterId: master === '-' ? undefined : master,
      connected: link === 'connected',
      // A slot being migrated is listed as [slot->-id] too: not a range served.
      slots: slots.filter((s) => !s.startsWith('[')).map((s) => {
        const [from, to = from] = s.split('-').map(Number);
        return [from!, to!];
      }),
    };
  });
}

const rangesText = (slots: [number, number][]): string => slots.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(',');

const DOWN_FLAGS = ['fail', 'fail?', 'handshake', 'noaddr'];

/** The line of `field` (`cluster_state:ok`) in INFO-like output, for errors. */
function infoField(text: string, field: string): string {
  return text.split('\n').find((l) => l.startsWith(`${field}:`))?.trim() ?? `no ${field}`;
}

/**
 * What is still missing before a new cluster can fail over, or undefined:
 * every node reports cluster_state:ok, knows every node as connected and
 * none as failing, all agree on who replicates whom (a master votes for a
 * replica's failover only if it knows it as the failed master's replica),
 * and every replica's link to its master is up.
 */
async function clusterUnsettled(nodes: readonly Child[], replicaCount: number): Promise<string | undefined> {
  let agreed: string | undefined;
  for (const n of nodes) {
    const state = infoField(await n.cli('cluster', 'info'), 'cluster_state');
    if (state !== 'cluster_state:ok') return `${n.what} reports ${state}`;
    const view = parseClusterNodes(await n.cli('cluster', 'nodes'));
    const down = view.filter((l) => !l.connected || l.flags.some((f) => DOWN_FLAGS.includes(f)));
    if (view.length !== nodes.length || down.length > 0) {
      return `${n.what} knows ${view.length} of ${nodes.length} nodes${down.length > 0 ? `, not ${down.map((l) => `${l.port} (${l.flags.join(',')})`).join(', ')}` : ''}`;
    }
    const portOf = new Map(view.map((l) => [l.id, l.port]));
    const replication = view.filter((l) => l.masterId !== undefined).map((l) => `${l.port}->${portOf.get(l.masterId!)}`).sort().join(' ');
    if (view.filter((l) => l.masterId !== undefined).length !== replicaCount) return `${n.what} knows replicas ${replication || 'none'}, not ${replicaCount}`;
    if (agreed !== undefined && replication !== agreed) return `nodes disagree on the replicas: ${agreed} and, from ${n.what}, ${replication}`;
    agreed = replication;
    if (view.find((l) => l.flags.includes('myself'))?.masterId !== undefined) {
      const link = infoField(await n.cli('info', 'replication'), 'master_link_status');
      if (link !== 'master_link_status:up') return `${n.what} (a replica) reports ${link}`;
    }
  }
  return undefined;
}

/**
 * Three masters, slots spread by `redis-cli --cluster create`, and with
 * `replicas` (default 0) that many replicas for each master.
 */
export async function startRedisCluster(opts: { replicas?: number } = {}): Promise<RedisCluster> {
  const replicas = opts.replicas ?? 0;
  requireSystemDep('redis-cli');
  const nodes: Child[] = [];
  // A start that fails stops what it started: a live child would hold the
  // test file's process open after its tests ended.
  try {
    for (let i = 0; i < 3 * (1 + replicas); i++) nodes.push(await startChild({ cluster: true }));
    try {
      await redisCli(['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes']);
    } catch (e) {
      // redis-cli says what went wrong on stdout (`[ERR] ...`).
      const said = String((e as { stdout?: string }).stdout ?? '').trim().split('\n').slice(-3).join(' | ');
      throw new Error(`redis-cli --cluster create failed: ${said || (e as Error).message}`, { cause: e });
    }
    await waitFor(10_000, () => clusterUnsettled(nodes, 3 * replicas), (missing) =>
      `redis cluster did not reach cluster_state:ok with every replica linked in 10000 ms: ${missing}; ` +
      `last log lines: ${nodes.map((n) => `${n.what}: ${n.tail(3)}`).join('; ')}`);
  } catch (e) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw e;
  }
  const nodeAt = (port: number): Child => {
    const n = nodes.find((m) => m.port === port);
    if (n === undefined) throw new Error(`port ${port} is not a node of this cluster (${nodes.map((m) => m.port).join(', ')})`);
    return n;
  };
  return {
    ports: nodes.map((n) => n.port),
    url: nodes.map((n) => n.url).join(','),
    nodes,
    async masters() {
      const asked = nodes.find((n) => n.running());
      if (asked === undefined) throw new Error('no node of the cluster is running');
      return parseClusterNodes(await asked.cli('cluster', 'nodes'))
        .filter((l) => l.masterId === undefined && l.slots.length > 0 && !l.flags.some((f) => DOWN_FLAGS.includes(f)))
        .sort((a, b) => a.slots[0]![0] - b.slots[0]![0])
        .map((l) => nodeAt(l.port));
    },
    async replicasOf(master) {
      const view = parseClusterNodes(await master.cli('cluster', 'nodes'));
      const me = view.find((l) => l.flags.includes('myself'))!;
      return view.filter((l) => l.masterId === me.id && !l.flags.some((f) => DOWN_FLAGS.includes(f))).map((l) => nodeAt(l.port));
    },
    async waitFailover(killedPort, timeoutMs) {
      const killed = nodeAt(killedPort);
      if (killed.running()) throw new Error(`waitFailover: ${killed.what} is still running`);
      // Once a replica took over, no node says which slots the killed master
      // served nor which replicas it had: its line keeps no slots, and the
      // replica's line names no master. Its own last word does: the
      // nodes.conf it saved at each change of the configuration.
      const last = parseClusterNodes(readFileSync(join(killed.dir, 'nodes.conf'), 'utf8'));
      const me = last.find((l) => l.flags.includes('myself'));
      if (me === undefined || me.slots.length === 0) throw new Error(`waitFailover: ${killed.what} served no slots when it stopped (its nodes.conf): it was not a master`);
      const formerReplicas = last.filter((l) => l.masterId === me.id).map((l) => nodeAt(l.port));
      if (formerReplicas.length === 0) throw new Error(`waitFailover: ${killed.what} had no replica when it stopped (its nodes.conf): its slots cannot fail over`);
      let promoted: Child | undefined;
      await waitFor(timeoutMs, async () => {
        promoted = undefined;
        for (const n of nodes.filter((m) => m.running())) {
          const state = infoField(await n.cli('cluster', 'info'), 'cluster_state');
          if (state !== 'cluster_state:ok') return `${n.what} reports ${state}`;
          // The node whose ranges hold every range the killed master served.
          const owner = parseClusterNodes(await n.cli('cluster', 'nodes'))
            .find((l) => me.slots.every(([a, b]) => l.slots.some(([c, d]) => c <= a && b <= d)));
          const replica = formerReplicas.find((r) => r.port === owner?.port);
          if (replica === undefined) return `${n.what} sees those slots served by ${owner === undefined ? 'no one node' : `port ${owner.port}`}`;
          if (promoted !== undefined && promoted !== replica) return `nodes disagree: ports ${promoted.port} and ${replica.port} serve them`;
          promoted = replica;
        }
        if (promoted === undefined) return 'no node is running';
        const role = infoField(await promoted.cli('info', 'replication'), 'role');
        return role === 'role:master' ? undefined : `${promoted.what} serves them but reports ${role}`;
      }, (missing) => `the slots ${rangesText(me.slots)} of ${killed.what} did not fail over to its replica ` +
        `(${formerReplicas.map((r) => `${r.port}${r.running() ? '' : ', stopped'}`).join('; ')}) in ${timeoutMs} ms: ${missing}; ` +
        `last log lines: ${formerReplicas.map((r) => `${r.what}: ${r.tail(5)}`).join('; ')}`);
      return promoted!;
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

export interface StartRedisSentinelOptions {
  /** Replicas of the master (default 2). */
  replicas?: number;
  /** Sentinels (default 3); the quorum is a majority of them. */
  sentinels?: number;
  /** The name they monitor the master under (default `mymaster`). */
  name?: string;
  /**
   * How long a server may not answer before a sentinel deems it down
   * (default 2000 ms). At 1000 ms on a busy 2-core machine, a sentinel once
   * deemed the just-promoted master down 1.03 s after its switch (its link
   * to it is new, and the first PONG was late); the other sentinels' "down"
   * answers about the killed master still counted toward the quorum, so it
   * failed over again at once, to the other replica, and the write made on
   * the first new master was lost (Redis 7.0.15; 1 run in 25 under load).
   */
  downAfterMs?: number;
  /** Sentinel's failover-timeout (default 3000 ms): a failed election is tried again after twice this. */
  failoverTimeoutMs?: number;
}

async function startSentinelOnce(masterPort: number, quorum: number, o: Required<Omit<StartRedisSentinelOptions, 'replicas' | 'sentinels'>>): Promise<Child> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `sluice-sentinel-${port}-`));
  // A file of its own: Sentinel rewrites it with what it learns (its id, the
  // replicas and other sentinels it found, the master after a failover).
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(conf, [
    `port ${port}`,
    'bind 127.0.0.1',
    'protected-mode no',
    `dir ${dir}`,
    // notice, not warning: +convert-to-slave and the like, for the errors' log lines.
    'loglevel notice',
    'sentinel resolve-hostnames no',
    `sentinel monitor ${o.name} 127.0.0.1 ${masterPort} ${quorum}`,
    `sentinel down-after-milliseconds ${o.name} ${o.downAfterMs}`,
    `sentinel failover-timeout ${o.name} ${o.failoverTimeoutMs}`,
    `sentinel parallel-syncs ${o.name} 1`,
    '',
  ].join('\n'));
  return launch(`redis-sentinel on port ${port}`, port, dir, [conf, '--sentinel'], 'SIGKILL');
}

/** The entries of `SENTINEL replicas|sentinels <name>` from sentinel `s`: their fields as strings (`port`, `flags`). */
async function sentinelList(s: Child, what: 'replicas' | 'sentinels', name: string): Promise<Record<string, string>[]> {
  const { stdout } = await redisCli(['--json', '-p', String(s.port), 'SENTINEL', what, name]);
  let list: unknown;
  try {
    list = JSON.parse(stdout);
  } catch {
    list = undefined;
  }
  if (!Array.isArray(list)) throw new Error(`${s.what} answered SENTINEL ${what} ${name} with ${stdout.trim()}`);
  return list as Record<string, string>[];
}

/**
 * A master on a free port, `replicas` replicas of it, and `sentinels`
 * sentinels monitoring it, all on 127.0.0.1 and without persistence. It
 * returns once every replica's link is up and every sentinel knows every
 * replica and every other sentinel, so that a failover can start at once.
 */
export async function startRedisSentinel(opts: StartRedisSentinelOptions = {}): Promise<RedisSentinel> {
  const replicaCount = opts.replicas ?? 2;
  const sentinelCount = opts.sentinels ?? 3;
  const o = { name: opts.name ?? 'mymaster', downAfterMs: opts.downAfterMs ?? 2000, failoverTimeoutMs: opts.failoverTimeoutMs ?? 3000 };
  const { name } = o;
  if (sentinelCount < 1) throw new RangeError(`startRedisSentinel: sentinels must be at least 1, not ${sentinelCount}`);
  requireSystemDep('redis-cli');
  const servers: Child[] = [];
  const sentinels: Child[] = [];
  // A start that fails stops what it started (see startRedisCluster).
  try {
    servers.push(await startChild({}));
    const masterPort = servers[0]!.port;
    for (let i = 0; i < replicaCount; i++) servers.push(await startChild({ replicaOf: masterPort }));
    // Linked before the sentinels start: a sentinel learns the replicas from
    // the master's INFO, which it reads at once and then every 10 s.
    await waitFor(10_000, async () => {
      for (const r of servers.slice(1)) {
        const link = infoField(await r.cli('info', 'replication'), 'master_link_status');
        if (link !== 'master_link_status:up') return `${r.what}, replica of ${masterPort}, reports ${link}; its last log lines: ${r.tail(3)}`;
      }
      return undefined;
    }, (missing) => `a replica did not link to its master in 10000 ms: ${missing}; the master's last log lines: ${servers[0]!.tail(3)}`);
    const quorum = Math.floor(sentinelCount / 2) + 1;
    for (let i = 0; i < sentinelCount; i++) sentinels.push(await retryBindRace(() => startSentinelOnce(masterPort, quorum, o)));
    // Sentinels find each other by the hellos they publish every 2 s through
    // the servers. One that lacks a peer or a replica could not get its
    // quorum, or pick that replica, when a test kills the master.
    await waitFor(10_000, async () => {
      for (const s of sentinels) {
        const seenReplicas = await sentinelList(s, 'replicas', name);
        const seenSentinels = await sentinelList(s, 'sentinels', name);
        const seen = (list: Record<string, string>[], port: number, flags: string): boolean => list.some((e) => Number(e.port) === port && e.flags === flags);
        const replicasOk = servers.slice(1).every((r) => seen(seenReplicas, r.port, 'slave'));
        const sentinelsOk = sentinels.every((p) => p === s || seen(seenSentinels, p.port, 'sentinel'));
        if (!replicasOk || !sentinelsOk) {
          const list = (l: Record<string, string>[]): string => l.map((e) => `${e.port} (${e.flags})`).join(', ') || 'none';
          return `${s.what} knows replicas ${list(seenReplicas)} and sentinels ${list(seenSentinels)}`;
        }
      }
      return undefined;
    }, (missing) => `the sentinels did not all know the ${replicaCount} replicas and each other in 10000 ms: ${missing}; ` +
      `last log lines: ${sentinels.map((s) => `${s.what}: ${s.tail(3)}`).join('; ')}`);
  } catch (e) {
    await Promise.all([...sentinels, ...servers].map((c) => c.stop()));
    throw e;
  }
  /** The port sentinel `s` names as the master's, or undefined when it names none. */
  const masterPortOf = async (s: Child): Promise<number | undefined> => {
    const [, port] = (await s.cli('SENTINEL', 'get-master-addr-by-name', name)).trim().split('\n');
    return port === undefined || port === '' ? undefined : Number(port);
  };
  const serverAt = (port: number | undefined, by: Child): Child => {
    const server = servers.find((s) => s.port === port);
    if (server === undefined) throw new Error(`${by.what} names 127.0.0.1:${port} as master of ${name}: not a server of this group`);
    return server;
  };
  const master = async (): Promise<Child> => serverAt(await masterPortOf(sentinels[0]!), sentinels[0]!);
  return {
    name,
    sentinels: sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
    sentinelsSpec: sentinels.map((s) => `127.0.0.1:${s.port}`).join(','),
    servers,
    master,
    async killMaster() {
      const m = await master();
      // Without persistence stop() is a SIGKILL.
      await m.stop();
      return m;
    },
    async waitFailover(oldPort, timeoutMs) {
      let promoted: Child | undefined;
      await waitFor(timeoutMs, async () => {
        const named = await Promise.all(sentinels.map(masterPortOf));
        if (named[0] === oldPort || named.some((p) => p !== named[0])) {
          return `the sentinels name ${sentinels.map((s, i) => `${named[i] ?? 'none'} (${s.port})`).join(', ')}`;
        }
        const server = serverAt(named[0], sentinels[0]!);
        const role = infoField(await server.cli('info', 'replication'), 'role');
        if (role !== 'role:master') return `every sentinel names ${server.what}, which reports ${role}`;
        promoted = server;
        return undefined;
      }, (missing) => `Sentinel did not fail ${name} over from port ${oldPort} in ${timeoutMs} ms: ${missing}; ` +
        `last log lines: ${sentinels.map((s) => `${s.what}: ${s.tail(5)}`).join('; ')}`);
      return promoted!;
    },
    async sentinelCli(i, ...args) {
      const s = sentinels[i];
      if (s === undefined) throw new RangeError(`sentinelCli: no sentinel ${i} (there are ${sentinels.length})`);
      return s.cli(...args);
    },
    async stop() {
      await Promise.all([...sentinels, ...servers].map((c) => c.stop()));
    },
  };
}
