// HAProxy in front of the chaos cluster: a configuration made per run from
// the checked deploy/haproxy/haproxy.cfg (only the ports, sizes and check
// timing change; `haproxyConfig` is pure and unit-tested), one process per
// load balancer started in the foreground (-db) by pid, and its stats socket
// read to see which servers it takes as up.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { REPO_ROOT } from '../src/lib/spawn.ts';
import { withFileLimit } from '@sluice/gateway/testing';
import { requireSystemDep, systemDepError } from '../../tools/system-deps.mjs';

export const DEPLOY_CFG = join(REPO_ROOT, 'deploy/haproxy/haproxy.cfg');

/** One backend server: a node on `host` (127.0.0.1 when absent), with its own source address when set. */
export interface HaproxyServer {
  readonly name: string;
  readonly port: number;
  /**
   * The node's address: a node in a network namespace listens on the
   * namespace's end of its veth pair (netfault.ts), not on loopback.
   */
  readonly host?: string;
  /**
   * Source address of the connections to this server, instead of the
   * backend's: a loopback source cannot reach a namespace (the packets
   * would leave the host with a 127/8 source), so such a server gets the
   * host end's address.
   */
  readonly source?: string;
}

export interface HaproxyOptions {
  readonly bindPort: number;
  readonly servers: ReadonlyArray<HaproxyServer>;
  /** Source address of the connections to the nodes (and of the checks), unless a server has its own. */
  readonly source: string;
  /** Connections this process takes at once; it needs two descriptors per proxied connection. */
  readonly maxconn: number;
  readonly ulimitN: number;
  readonly statsSocket: string;
  /** Health-check timing, as HAProxy spells it (`500ms`). */
  readonly inter: string;
  readonly fall: number;
  readonly rise: number;
}

function replaceOnce(text: string, re: RegExp, by: string, what: string): string {
  const n = [...text.matchAll(new RegExp(re.source, re.flags.includes('g') ? re.flags : `${re.flags}g`))].length;
  if (n !== 1) throw new Error(`deploy/haproxy/haproxy.cfg changed shape: expected one ${what}, found ${n}`);
  return text.replace(re, by);
}

/**
 * The run's configuration: the deploy file with its global `maxconn` sized to
 * the fd limit (and `ulimit-n`, a stats socket), the frontend on the run's
 * port adding `X-Forwarded-For` (the nodes run with WS_TRUST_PROXY=1), the
 * backend with the run's servers (each on its address, a namespace's with
 * a source address of its own), its source address, a redispatch of a
 * failed connect to the other node, shorter checks, and the check on
 * /health/ready the deploy file's (HTTP/1.1 with a Host header). Balance,
 * the expected status and the timeouts are the deploy file's.
 */
export function haproxyConfig(base: string, o: HaproxyOptions): string {
  if (o.ulimitN < 2 * o.maxconn + 100) throw new Error(`ulimit-n ${o.ulimitN} is too small for maxconn ${o.maxconn} (two fds per connection)`);
  let c = base;
  c = replaceOnce(c, /^ {4}maxconn \d+$/m, `    maxconn ${o.maxconn}\n    ulimit-n ${o.ulimitN}\n    stats socket ${o.statsSocket} level admin`, 'global maxconn');
  c = replaceOnce(c, /^ {4}bind 127\.0\.0\.1:\d+$/m, `    bind 127.0.0.1:${o.bindPort}\n    option forwardfor`, 'frontend bind line');
  c = replaceOnce(c, /^backend sluice$/m, `backend sluice\n    source ${o.source}\n    option redispatch 1\n    retries 3`, 'backend sluice');
  c = replaceOnce(c, /^ {4}default-server inter \S+ fall \d+ rise \d+$/m, `    default-server inter ${o.inter} fall ${o.fall} rise ${o.rise}`, 'default-server line');
  if (!/^ {4}balance leastconn$/m.test(c)) throw new Error('deploy/haproxy/haproxy.cfg changed shape: no balance leastconn');
  // The deploy file's check, as it is: /health/ready over HTTP/1.1 with a Host header (HAProxy's default,
  // HTTP/1.0 without Host, is left unanswered by the gateway's public port, and every server would stay DOWN).
  if (!/^ {4}option httpchk\n {4}http-check send meth GET uri \/health\/ready ver HTTP\/1\.1 hdr Host \S+$/m.test(c)) {
    throw new Error('deploy/haproxy/haproxy.cfg changed shape: no HTTP/1.1 check of /health/ready with a Host header');
  }
  const servers = [...c.matchAll(/^ {4}server .*$/gm)];
  if (servers.length === 0) throw new Error('deploy/haproxy/haproxy.cfg changed shape: no server lines');
  c = c.replace(/^ {4}server .*\n?/gm, '');
  c = `${c.trimEnd()}\n${o.servers.map((s) => `    server ${s.name} ${s.host ?? '127.0.0.1'}:${s.port} check${s.source === undefined ? '' : ` source ${s.source}`}`).join('\n')}\n`;
  return `# Made by benchmarks/chaos from deploy/haproxy/haproxy.cfg for one run.\n${c}`;
}

/** Server states from `show stat` CSV: backend server name -> status (`UP`, `DOWN`, `UP 1/2`, ...). */
export function parseShowStat(csv: string, backend = 'sluice'): Record<string, string> {
  const lines = csv.split('\n').filter((l) => l.trim() !== '');
  const header = lines[0]?.replace(/^# /, '').split(',') ?? [];
  const px = header.indexOf('pxname');
  const sv = header.indexOf('svname');
  const st = header.indexOf('status');
  const out: Record<string, string> = {};
  if (px < 0 || sv < 0 || st < 0) return out;
  for (const l of lines.slice(1)) {
    const f = l.split(',');
    if (f[px] === backend && f[sv] !== 'BACKEND' && f[sv] !== 'FRONTEND') out[f[sv]!] = f[st]!;
  }
  return out;
}

export class Haproxy {
  private proc: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  readonly stderr: string[] = [];
  readonly cfgPath: string;
  readonly statsSocket: string;

  constructor(readonly name: string, readonly port: number, dir: string, opts: Omit<HaproxyOptions, 'bindPort' | 'statsSocket'>) {
    this.cfgPath = join(dir, `${name}.cfg`);
    this.statsSocket = join(dir, `${name}.sock`);
    writeFileSync(this.cfgPath, haproxyConfig(readFileSync(DEPLOY_CFG, 'utf8'), { ...opts, bindPort: port, statsSocket: this.statsSocket }));
  }

  get pid(): number | undefined {
    return this.alive ? this.proc?.pid : undefined;
  }

  get alive(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** `haproxy -c`: throws with its output when the configuration does not check. */
  static check(cfgPath: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const p = spawn(requireSystemDep('haproxy'), ['-c', '-q', '-f', cfgPath], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (c: Buffer) => (out += c.toString()));
      p.stderr.on('data', (c: Buffer) => (out += c.toString()));
      p.on('error', (e) => reject(systemDepError('haproxy', e)));
      p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`haproxy -c failed (${code}): ${out}`))));
    });
  }

  async start(timeoutMs = 10_000): Promise<void> {
    const [sh, ...shArgs] = withFileLimit([requireSystemDep('haproxy'), '-db', '-f', this.cfgPath]);
    const p = spawn(sh, shArgs, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc = p;
    this.exited = new Promise((r) => p.once('exit', () => r()));
    p.stderr!.setEncoding('utf8');
    p.stderr!.on('data', (c: string) => { for (const l of c.split('\n')) if (l.trim() !== '' && this.stderr.length < 200) this.stderr.push(l); });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!this.alive) throw new Error(`${this.name} exited at start: ${this.stderr.join(' | ')}`);
      try {
        await this.showStat();
        if (await portOpen(this.port)) return;
      } catch { /* not up yet */ }
      if (Date.now() > deadline) throw new Error(`${this.name} did not come up in ${timeoutMs} ms: ${this.stderr.join(' | ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Sends `signal` (SIGTERM: hard stop; SIGKILL: the crash) and waits for the exit, SIGKILL after 5 s. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (!this.alive) return;
    this.proc!.kill(signal);
    const t = setTimeout(() => { if (this.alive) this.proc!.kill('SIGKILL'); }, 5000);
    await this.exited;
    clearTimeout(t);
  }

  killNow(): void {
    if (this.alive) this.proc!.kill('SIGKILL');
  }

  showStat(): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = connect(this.statsSocket);
      let out = '';
      const t = setTimeout(() => { s.destroy(); reject(new Error('stats socket: no answer in 2 s')); }, 2000);
      s.on('connect', () => s.write('show stat\n'));
      s.on('data', (c) => (out += c.toString()));
      s.on('error', (e) => { clearTimeout(t); reject(e); });
      s.on('close', () => { clearTimeout(t); resolve(out); });
    });
  }

  async servers(): Promise<Record<string, string>> {
    return parseShowStat(await this.showStat());
  }
}

export function portOpen(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, host);
    const t = setTimeout(() => { s.destroy(); resolve(false); }, 1000);
    s.once('connect', () => { clearTimeout(t); s.destroy(); resolve(true); });
    s.once('error', () => { clearTimeout(t); resolve(false); });
  });
}
