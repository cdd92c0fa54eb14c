// Network faults for the chaos harness: a network namespace joined to the
// host by a veth pair, and reversible faults on that link. A process started
// inside the namespace (a gateway node) reaches the host's services through
// the link, so that cutting or slowing the link cuts or slows that one
// process's traffic and nobody else's.
//
//   host                                     namespace sluice-<pid>-<n>
//   ┌──────────────────────────┐             ┌─────────────────────────┐
//   │ Redis, echo servers, ... │             │ lo (its own 127.0.0.1)  │
//   │ slv<pid>-<n>h  hostAddr ─┼── veth ─────┼─ veth0  nsAddr          │
//   └──────────────────────────┘             └─────────────────────────┘
//
// Addressing. The pair gets a /30 out of 10.251.0.0/16 (one per namespace,
// unique in this process, and not overlapping any address or route the host
// already has): `hostAddr` on the host end, `nsAddr` inside. The namespace
// has no default route and the host forwards nothing to it, so its processes
// can reach exactly one host address: hostAddr.
//  - A process inside reaches a host service at hostAddr:port, which means
//    the service must listen on 0.0.0.0 or on hostAddr: one bound to
//    127.0.0.1 only (startRedis's redis-server) cannot be reached, since
//    127.0.0.1 inside the namespace is the namespace's own loopback. (Redis
//    7 can add the address at run time: CONFIG SET bind "127.0.0.1 <hostAddr>".)
//  - The host reaches a server inside at nsAddr:port, which means that
//    server must listen on 0.0.0.0 or nsAddr, not 127.0.0.1.
//
// A gateway node inside (what test/netfault.test.ts does):
//   const ns = await NetNs.create('a');            // before Redis binds hostAddr
//   await redis.cli('CONFIG', 'SET', 'bind', `127.0.0.1 ${ns.hostAddr}`);
//   const gw = await startGateway(
//     { HOST: ns.nsAddr, ADMIN_HOST: ns.nsAddr, REDIS_URL: `redis://${ns.hostAddr}:${redis.port}` },
//     { command: ns.command(process.execPath, ...gatewayArgs()), raiseFileLimit: true });
//   await ns.dropPort(redis.port); ... await ns.restore();
// nsenter --net execs the command in place, so the pid is the node's and
// the IPC channel of the ready message goes through. gw.url(), gw.admin(),
// gw.metrics() and gw.adminFetch() say 127.0.0.1: build the URLs from
// ns.nsAddr and gw.port / gw.adminPort instead.
//
// The faults are made with `tc` (iproute2), no iptables or nft. The kernel
// this was written on has few tc modules: no netem (CONFIG_NET_SCH_NETEM),
// no gact (`action drop`), no police, no prio/flower; it has clsact, u32,
// cls_bpf, mirred, htb/tbf/fifo, and macvtap. So:
//  - dropPort: a classic-BPF program (cls_bpf, direct-action) on the ingress
//    hook of each end that returns TC_ACT_SHOT for the port's TCP segments:
//    ns -> host at the host end, host -> ns at the namespace end. Dropped on
//    the receiving side, both senders see their packets leave: TCP sees
//    silence (retransmissions with back-off), never an RST or an error, and
//    the connection survives when the drop is lifted. ARP is left alone.
//  - slowLink loss: the same kind of program, dropping a matching packet when
//    the kernel's per-packet random number (cBPF `ld rand`) is below lossPct.
//  - slowLink delay: the kernel here has no qdisc that delays, so matching
//    frames take a detour through this machine's userspace: a tc mirred
//    redirect sends them down a second veth pair (slv...a/slv...b) whose far
//    end carries a macvtap; a small Node process (the pump) reads each frame
//    from /dev/tapN, holds it delayMs, and writes it back with a marked
//    source MAC; a filter on the detour pair sends it on to where it was
//    going (into the host's stack, or out to the namespace), and the marked
//    MAC keeps it from being detoured twice. Frames keep their offload
//    header (virtio-net), so large TCP segments (GSO) go through whole, as
//    they would through netem. The pump runs only while a delay is set.
//
// Cleanup. Everything is named with this process's pid: the namespace
// `sluice-[label-]<pid>-<n>`, the links `slv<pid base 36>-<n><role>`
// (interface names have 15 characters at most). destroy() removes what one
// NetNs made; on exit (and on SIGTERM/SIGINT/SIGHUP, which then exit) every
// NetNs still alive is removed synchronously; and the first create() of a
// process sweeps namespaces and links with our prefixes whose pid is no
// longer running (left by a run that was SIGKILLed), killing what still runs
// inside them. A namespace lives on while a process is inside it, so its
// processes are killed before it is deleted.
//
// Needs root (CAP_NET_ADMIN to make links and filters, CAP_SYS_ADMIN for
// `ip netns`) and iproute2's `ip` and `tc`; NetNs.preflight() says at once
// which is missing.

import { execFile, execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findInPath, overrideVar } from '../../tools/system-deps.mjs';

/** Every namespace this module makes is named with it. */
export const NS_PREFIX = 'sluice-';
/** Every link this module makes on the host is named with it. */
export const LINK_PREFIX = 'slv';
/** The pool the /30s come from. */
export const ADDR_POOL = '10.251.0.0/16';

const NS_RE = /^sluice-(?:[a-z0-9_]+-)?(\d+)-(\d+)$/;
const LINK_RE = /^slv([0-9a-z]+)-([0-9a-z]+)[a-z]$/;
const POOL_BASE = ((10 << 24) | (251 << 16)) >>> 0;
const POOL_BLOCKS = 1 << 14; // /30s in a /16
const NS_DEV = 'veth0';
const SBIN = ['/usr/local/sbin', '/usr/sbin', '/sbin'];
/** Bytes of virtio_net_hdr macvtap puts before each frame (its default). */
const VNET_HDR = 10;
/** Source MAC the pump stamps on frames it sends back: 02:51:1c:e0:00:01 into the host, :02 out to the namespace. */
const MAGIC_HI = 0x02511ce0;
const MAGIC_TO_HOST = 1;
const MAGIC_TO_NS = 2;
/** tc filter priorities: drops first, then loss, then the detour. */
const PREF_DROP = 10;
const PREF_LOSS = 20;
const PREF_DETOUR = 30;
const TC_ACT_SHOT = 2;
const TC_ACT_UNSPEC = 0xffff_ffff; // -1: no verdict, the next filter decides

// ---------------------------------------------------------------------------
// Tools and privileges

export interface Tools {
  readonly ip: string;
  readonly tc: string;
}

let tools: Tools | undefined;

function findTool(bin: 'ip' | 'tc'): string | undefined {
  const forced = process.env[overrideVar(bin)];
  if (forced !== undefined && forced !== '') return existsSync(forced) ? forced : undefined;
  // A non-root PATH on Debian lacks the sbin directories, where iproute2 puts ip and tc.
  return findInPath(bin, { PATH: [process.env['PATH'] ?? '', ...SBIN].join(':') });
}

function missing(what: string, fix: string): Error {
  const err = new Error(`${what}: ${fix}`) as Error & { code: string };
  err.code = 'SLUICE_SYSTEM_DEP_MISSING';
  return err;
}

/** Effective capability bits of this process (CapEff in /proc/self/status). */
function capEff(): bigint {
  const m = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'latin1'));
  return m === null ? 0n : BigInt(`0x${m[1]}`);
}

function ipError(args: readonly string[], e: unknown): Error {
  const err = e as { stderr?: string | Buffer; message?: string };
  const said = String(err.stderr ?? '').trim() || String(err.message ?? e);
  let hint = '';
  if (/qdisc kind is unknown|classifier not found|Failed to load TC action|Unknown filter|Unknown device type/i.test(said)) {
    hint = ' (the kernel lacks a feature this needs: clsact (CONFIG_NET_SCH_INGRESS), cls_bpf (CONFIG_NET_CLS_BPF), ' +
      'mirred (CONFIG_NET_ACT_MIRRED), veth (CONFIG_VETH), macvtap (CONFIG_MACVTAP))';
  } else if (/Operation not permitted|Permission denied/i.test(said)) {
    hint = ' (needs root: CAP_NET_ADMIN and CAP_SYS_ADMIN)';
  }
  return new Error(`${args.join(' ')}: ${said}${hint}`, { cause: e });
}

/**
 * The paths of `ip` and `tc`, or an error saying what to install or what is
 * needed: run it before anything else (a test's first line) so that a
 * machine without them fails at once.
 */
function preflight(): Tools {
  if (tools !== undefined) return tools;
  if (process.platform !== 'linux') throw missing('network namespaces', `Linux only (this is ${process.platform})`);
  const ip = findTool('ip');
  const tc = findTool('tc');
  for (const [bin, path] of [['ip', ip], ['tc', tc]] as const) {
    if (path === undefined) {
      const forced = process.env[overrideVar(bin)];
      const looked = forced !== undefined && forced !== '' ? `${overrideVar(bin)}=${forced} is not there` : `not found in PATH nor in ${SBIN.join(', ')}`;
      throw missing(`${bin} is not installed (${looked})`,
        'network-fault tests need the Debian package iproute2 (apt-get install iproute2)');
    }
  }
  const caps = capEff();
  const NET_ADMIN = 1n << 12n;
  const SYS_ADMIN = 1n << 21n;
  if ((caps & NET_ADMIN) === 0n || (caps & SYS_ADMIN) === 0n) {
    throw missing('not enough privileges for network namespaces',
      `needs CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root, with those capabilities (uid ${process.getuid?.() ?? '?'}, CapEff ${caps.toString(16)})`);
  }
  tools = { ip: ip!, tc: tc! };
  return tools;
}

/** nsenter (util-linux, in every Debian): a command in a namespace's network only. */
const NSENTER = '/usr/bin/nsenter';

/** The network namespace's handle that `ip netns add` made. */
const nsPath = (name: string): string => `/run/netns/${name}`;

/**
 * `ip -n NAME ...` and `tc -n NAME ...` as nsenter --net: iproute2's own
 * switch also makes a mount namespace and remounts `/` rslave, which fails
 * (EINVAL) where `/` is not a mount point (a chroot, as the fresh-machine
 * check runs the suite in); a socket, a link or a filter needs only the
 * network namespace.
 */
function inNs(bin: string, args: readonly string[]): [string, readonly string[]] {
  if (args[0] !== '-n' || args[1] === undefined) return [bin, args];
  return [NSENTER, [`--net=${nsPath(args[1])}`, bin, ...args.slice(2)]];
}

function run(tool: string, toolArgs: readonly string[], timeoutMs = 10_000): Promise<string> {
  const [bin, args] = inNs(tool, toolArgs);
  return new Promise((resolve, reject) => {
    execFile(bin, args, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err !== null) reject(ipError([bin.split('/').pop()!, ...args], Object.assign(err, { stderr })));
      else resolve(stdout);
    });
  });
}

function runSync(tool: string, toolArgs: readonly string[]): string {
  const [bin, args] = inNs(tool, toolArgs);
  try {
    return execFileSync(bin, args, { timeout: 10_000, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw ipError([bin.split('/').pop()!, ...args], e);
  }
}

function quiet(f: () => unknown): void {
  try {
    f();
  } catch {
    /* best effort: a piece that is already gone */
  }
}

/** Whether `pid` runs (a zombie does not: killed, waiting for its parent or init to reap it). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------
// What is there: namespaces, links, host addresses

/** Names of the namespaces with our prefix (`ip netns list`). */
export function sluiceNamespaces(): string[] {
  const { ip } = preflight();
  return runSync(ip, ['netns', 'list']).split('\n').map((l) => l.split(' ')[0] ?? '').filter((n) => n.startsWith(NS_PREFIX));
}

/** Names of the host's links with our prefix (`ip -o link show`). */
export function sluiceLinks(): string[] {
  const { ip } = preflight();
  return runSync(ip, ['-o', 'link', 'show']).split('\n').map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? '')
    .filter((n) => n.startsWith(LINK_PREFIX) && LINK_RE.test(n));
}

function ipToInt(s: string): number {
  const p = s.split('.').map(Number);
  return (((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0);
}

function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/**
 * The IPv4 ranges the host already uses: the subnet of every address, and
 * every route at least as specific as our pool (a wider route, 10.0.0.0/8
 * to a VPN, does not take a /30 of ours: the /30 is the more specific).
 */
async function takenRanges(ip: string): Promise<Array<[number, number]>> {
  const out: Array<[number, number]> = [];
  const add = (cidr: string, minLen: number): void => {
    const m = /^(\d+\.\d+\.\d+\.\d+)(?:\/(\d+))?$/.exec(cidr);
    if (m === null) return;
    const len = m[2] === undefined ? 32 : Number(m[2]);
    if (len < minLen) return;
    const size = len === 0 ? 2 ** 32 : 2 ** (32 - len);
    const start = Math.floor(ipToInt(m[1]!) / size) * size;
    out.push([start, start + size - 1]);
  };
  for (const line of (await run(ip, ['-4', '-o', 'addr', 'show'])).split('\n')) {
    const m = /\sinet\s+(\S+)/.exec(line);
    if (m !== null) add(m[1]!, 0);
  }
  for (const line of (await run(ip, ['-4', 'route', 'show', 'table', 'all'])).split('\n')) {
    const dst = line.split(/\s+/).find((t) => /^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(t));
    if (dst !== undefined && !line.startsWith('default')) add(dst, 16);
  }
  return out;
}

const blocksInUse = new Set<number>();

async function pickBlock(ip: string, seq: number): Promise<number> {
  const taken = await takenRanges(ip);
  // Start somewhere that depends on the pid, so that two processes making namespaces at once rarely try the same /30.
  const first = (process.pid * 97 + seq * 13) % POOL_BLOCKS;
  for (let k = 0; k < POOL_BLOCKS; k++) {
    const idx = (first + k) % POOL_BLOCKS;
    if (blocksInUse.has(idx)) continue;
    const lo = POOL_BASE + idx * 4;
    if (taken.some(([a, b]) => a <= lo + 3 && lo <= b)) continue;
    blocksInUse.add(idx);
    return idx;
  }
  throw new Error(`no free /30 left in ${ADDR_POOL} on this host`);
}

// ---------------------------------------------------------------------------
// Classic BPF for cls_bpf: a few instructions, assembled here (no bpf_asm,
// no tcpdump needed). Frames are seen from their Ethernet header on both
// hooks.

interface Ins { code: number; jt?: string; jf?: string; k: number; label?: string }

const LD_W_ABS = 0x20, LD_H_ABS = 0x28, LD_B_ABS = 0x30, LD_H_IND = 0x48, LDX_B_MSH = 0xb1;
const JEQ = 0x15, JGE = 0x35, JSET = 0x45, RET_K = 0x06;
const SKF_AD_RANDOM = 0xfffff000 + 56; // `ld rand`: a fresh random u32 per packet

/** tc's `bytecode` string for `prog`, jumps resolved from labels (forward only, as cBPF wants). */
function assemble(prog: Ins[]): string {
  const at = new Map<string, number>();
  prog.forEach((ins, i) => { if (ins.label !== undefined) at.set(ins.label, i); });
  const off = (i: number, l: string | undefined): number => {
    if (l === undefined) return 0;
    const to = at.get(l);
    if (to === undefined || to <= i || to - i - 1 > 255) throw new Error(`cBPF: bad jump to ${l}`);
    return to - i - 1;
  };
  return [prog.length, ...prog.map((ins, i) => `${ins.code} ${off(i, ins.jt)} ${off(i, ins.jf)} ${ins.k >>> 0}`)].join(',');
}

export interface Match {
  /** TCP segments whose source port is one of these. */
  readonly srcPorts?: readonly number[];
  /** ... or whose destination port is one of these. Without either: every IPv4 packet. */
  readonly dstPorts?: readonly number[];
}

/**
 * A program returning `hit` for the IPv4 packets `m` matches (with
 * probability `fraction` when given) and `miss` for the rest, frames the pump
 * sent back (marked source MAC) included: they have been through this hook.
 * Exported for the tests.
 */
export function matchProgram(m: Match, hit: number, miss: number, fraction?: number): string {
  const src = m.srcPorts ?? [];
  const dst = m.dstPorts ?? [];
  const p: Ins[] = [
    // Marked frames (02:51:1c:e0:00:xx) are not touched.
    { code: LD_W_ABS, k: 6 },
    { code: JEQ, k: MAGIC_HI, jt: 'mark', jf: 'ipv4' },
    { code: LD_B_ABS, k: 10, label: 'mark' },
    { code: JEQ, k: 0, jt: 'miss', jf: 'ipv4' },
    { code: LD_H_ABS, k: 12, label: 'ipv4' },
    { code: JEQ, k: 0x0800, jf: 'miss' },
  ];
  if (src.length + dst.length > 0) {
    p.push(
      { code: LD_B_ABS, k: 23 }, // IP protocol
      { code: JEQ, k: 6, jf: 'miss' },
      { code: LD_H_ABS, k: 20 }, // not a fragment after the first (no TCP header there)
      { code: JSET, k: 0x1fff, jt: 'miss' },
      { code: LDX_B_MSH, k: 14 }, // X = IP header length
    );
    const list = (ports: readonly number[], at: number, label: string, otherwise: string): void => {
      p.push({ code: LD_H_IND, k: 14 + at, label });
      ports.forEach((port, i) => p.push({ code: JEQ, k: port, jt: 'match', ...(i === ports.length - 1 ? { jf: otherwise } : {}) }));
    };
    if (src.length > 0) list(src, 0, 'src', dst.length > 0 ? 'dst' : 'miss');
    if (dst.length > 0) list(dst, 2, 'dst', 'miss');
  }
  if (fraction !== undefined) {
    const threshold = Math.min(0xffff_ffff, Math.round(Math.max(0, fraction) * 2 ** 32));
    p.push(
      { code: LD_W_ABS, k: SKF_AD_RANDOM, label: 'match' },
      { code: JGE, k: threshold, jt: 'miss', jf: 'hit' },
      { code: RET_K, k: hit, label: 'hit' },
    );
  } else {
    p.push({ code: RET_K, k: hit, label: 'match' });
  }
  p.push({ code: RET_K, k: miss, label: 'miss' });
  return assemble(p);
}

/** A program that matches the frames the pump marked `which` (source MAC 02:51:1c:e0:00:0<which>). */
function markedProgram(which: number): string {
  return assemble([
    { code: LD_W_ABS, k: 6 },
    { code: JEQ, k: MAGIC_HI, jf: 'miss' },
    { code: LD_H_ABS, k: 10 },
    { code: JEQ, k: which, jf: 'miss' },
    { code: RET_K, k: TC_ACT_UNSPEC },
    { code: RET_K, k: 0, label: 'miss' },
  ]);
}

// ---------------------------------------------------------------------------
// The pump: the userspace half of the delay (see the top of the file).

const PUMP_SOURCE = String.raw`
'use strict';
// Reads frames from a macvtap, holds each one delayMs and writes it back
// marked (source MAC 02:51:1c:e0:00:01 towards the host, :02 towards the
// namespace), so that the detour filters send it on. Exits when stdin closes
// (its parent went away). One JSON object per stdin line changes delayMs.
const fs = require('fs');
const cfg = JSON.parse(process.argv[1]);
const V = ${VNET_HDR};
const mac = (s) => Buffer.from(s.replace(/:/g, ''), 'hex');
const hostMac = mac(cfg.hostMac), nsMac = mac(cfg.nsMac), detourMac = mac(cfg.detourMac);
const toHost = mac('02:51:1c:e0:00:0${MAGIC_TO_HOST}'), toNs = mac('02:51:1c:e0:00:0${MAGIC_TO_NS}');
let delayMs = cfg.delayMs;
let writeErrors = 0;
const fd = fs.openSync(cfg.tap, 'r+');
const buf = Buffer.allocUnsafe(256 * 1024);
const send = (f) => { try { fs.writeSync(fd, f); } catch (e) { if (writeErrors++ < 5) process.stderr.write('pump: write: ' + e.message + '\n'); } };
function next() {
  fs.read(fd, buf, 0, buf.length, null, (err, n) => {
    if (err) {
      if (err.code === 'EAGAIN' || err.code === 'EINTR') return next();
      process.stderr.write('pump: read: ' + err.message + '\n');
      process.exit(1);
    }
    if (n > V + 14) {
      const f = Buffer.from(buf.subarray(0, n));
      const src = f.subarray(V + 6, V + 12);
      // Towards the host the frame must arrive on the detour link addressed to it (else the stack takes it
      // for another host's); towards the namespace it keeps its destination, the namespace end's MAC.
      if (src.equals(nsMac)) { detourMac.copy(f, V); toHost.copy(f, V + 6); }
      else if (src.equals(hostMac)) toNs.copy(f, V + 6);
      else return next(); // not one we were sent (IPv6 chatter of the detour links)
      if (delayMs > 0) setTimeout(send, delayMs, f); else send(f);
    }
    next();
  });
}
let line = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (c) => {
  line += c;
  let i;
  while ((i = line.indexOf('\n')) >= 0) {
    const m = JSON.parse(line.slice(0, i));
    line = line.slice(i + 1);
    if (typeof m.delayMs === 'number') delayMs = m.delayMs;
  }
});
process.stdin.on('end', () => process.exit(0));
process.stdout.write('ready\n');
next();
`;

// ---------------------------------------------------------------------------
// Cleanup of this process's namespaces, and of earlier runs'

const live = new Set<NetNs>();
let hooked = false;
let swept = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.once('exit', () => { for (const ns of live) ns.destroySync(); });
  // Node runs no 'exit' handler when a signal ends the process: exit on it
  // instead, unless the process has a handler of its own (the chaos harness,
  // the gateway kit), which then exits itself. As the gateway kit does.
  for (const [sig, code] of [['SIGTERM', 143], ['SIGINT', 130], ['SIGHUP', 129]] as const) {
    if (process.listenerCount(sig) > 0) continue;
    process.once(sig, () => { if (process.listenerCount(sig) === 0) process.exit(code); });
  }
}

/** Kills what runs in namespace `name` (it outlives its mount while a process is inside). */
function killInside(ip: string, name: string): void {
  let pids: number[] = [];
  quiet(() => { pids = runSync(ip, ['netns', 'pids', name]).split(/\s+/).filter((s) => s !== '').map(Number); });
  for (const pid of pids) quiet(() => process.kill(pid, 'SIGKILL'));
}

/**
 * Removes the namespaces and links with our prefixes that belong to no
 * running process: what a SIGKILLed run left. Runs at the first create() of
 * a process; returns what it removed.
 */
function sweep(): string[] {
  const { ip } = preflight();
  const removed: string[] = [];
  for (const name of sluiceNamespaces()) {
    const m = NS_RE.exec(name);
    // A name of ours whose pid runs (this process, another test, another harness) is left alone; any other sluice- name is stale.
    const pid = m === null ? undefined : Number(m[1]);
    if (pid !== undefined && (pid === process.pid || alive(pid))) continue;
    killInside(ip, name);
    quiet(() => runSync(ip, ['netns', 'del', name]));
    removed.push(name);
  }
  for (const name of sluiceLinks()) {
    const pid = parseInt(LINK_RE.exec(name)![1]!, 36);
    if (pid === process.pid || alive(pid)) continue;
    quiet(() => runSync(ip, ['link', 'del', name]));
    removed.push(name);
  }
  swept = true;
  return removed;
}

// ---------------------------------------------------------------------------
// The namespace

export interface DropOptions {
  /**
   * Whose port it is: 'host' (the default), a service on the host the
   * namespace connects to (Redis); 'ns', a server inside the namespace the
   * host connects to (the node's client port).
   */
  readonly side?: 'host' | 'ns';
}

export interface SlowLinkOptions {
  /** Added to every matching packet, in each direction it applies to: a round trip through both takes 2 × delayMs longer. */
  readonly delayMs?: number;
  /** Percentage of matching packets dropped, in each direction it applies to (0-100). */
  readonly lossPct?: number;
  /** Only the TCP traffic of this port (the whole IPv4 traffic of the link when absent). */
  readonly port?: number;
  /** Whose port it is, as for dropPort. */
  readonly side?: 'host' | 'ns';
  /**
   * 'both' (the default); 'toHost': only packets from the namespace to the
   * host, as `tc qdisc add dev veth0 root netem ...` inside the namespace
   * would; 'toNs': only packets from the host to the namespace.
   */
  readonly directions?: 'both' | 'toHost' | 'toNs';
}

interface Slow { delayMs: number; lossPct: number; port: number | undefined; side: 'host' | 'ns'; directions: 'both' | 'toHost' | 'toNs' }

let seqCounter = 0;

export class NetNs {
  /** Pieces of the delay detour, made by the first slowLink with a delay. */
  private detour: { a: string; b: string; tap: string; tapPath: string; tmpDir?: string; aMac: string } | undefined;
  private pump: ChildProcess | undefined;
  private readonly children = new Set<ChildProcess>();
  /** Ports dropped: host-side ports (ns -> host dport, host -> ns sport) and ns-side ports. */
  private readonly drops = { host: new Set<number>(), ns: new Set<number>() };
  private slow: Slow | undefined;
  private destroyed = false;
  /** Set when the pump died on its own while a delay was on: what it said. The delay is then off (the detour removed). */
  pumpFailure: string | undefined;

  private constructor(
    /** The namespace's name (/run/netns/<name>). */
    readonly name: string,
    /** The host end of the veth pair. */
    readonly hostLink: string,
    /** The host's address on the link: a process inside reaches host services here. */
    readonly hostAddr: string,
    /** The namespace's address: the host reaches servers inside here. */
    readonly nsAddr: string,
    /** The link's subnet (a /30). */
    readonly cidr: string,
    private readonly block: number,
    private readonly seq: number,
    private readonly tools: Tools,
    private hostMac = '',
    private nsMac = '',
  ) {}

  /** Checks that `ip`, `tc` and the privileges are there; throws saying what to install or what is needed. */
  static preflight(): Tools {
    return preflight();
  }

  /** Removes stale namespaces and links of runs that are gone (create() does it once per process). */
  static sweep(): string[] {
    return sweep();
  }

  /**
   * Makes a namespace `sluice-[label-]<pid>-<n>` joined to the host by a
   * veth pair with a /30 of 10.251.0.0/16, lo and both ends up, and an empty
   * clsact on each end for the faults. `label`: [a-z0-9_], up to 16.
   */
  static async create(label?: string): Promise<NetNs> {
    const t = preflight();
    if (label !== undefined && !/^[a-z0-9_]{1,16}$/.test(label)) throw new Error(`NetNs label ${JSON.stringify(label)}: [a-z0-9_], 1 to 16 characters`);
    if (!swept) sweep();
    hookExit();
    const seq = seqCounter++;
    const name = `${NS_PREFIX}${label === undefined ? '' : `${label}-`}${process.pid}-${seq}`;
    const hostLink = linkName(seq, 'h');
    const block = await pickBlock(t.ip, seq);
    const base = POOL_BASE + block * 4;
    const ns = new NetNs(name, hostLink, intToIp(base + 1), intToIp(base + 2), `${intToIp(base)}/30`, block, seq, t);
    live.add(ns); // from here on, exit cleans up whatever part of it exists
    try {
      await run(t.ip, ['netns', 'add', name]);
      // The peer is made inside the namespace at once: no moment with both ends on the host.
      await run(t.ip, ['link', 'add', hostLink, 'type', 'veth', 'peer', 'name', NS_DEV, 'netns', name]);
      await run(t.ip, ['addr', 'add', `${ns.hostAddr}/30`, 'dev', hostLink]);
      await run(t.ip, ['link', 'set', hostLink, 'up']);
      await run(t.ip, ['-n', name, 'addr', 'add', `${ns.nsAddr}/30`, 'dev', NS_DEV]);
      await run(t.ip, ['-n', name, 'link', 'set', NS_DEV, 'up']);
      await run(t.ip, ['-n', name, 'link', 'set', 'lo', 'up']);
      await run(t.tc, ['qdisc', 'add', 'dev', hostLink, 'clsact']);
      await run(t.tc, ['-n', name, 'qdisc', 'add', 'dev', NS_DEV, 'clsact']);
      ns.hostMac = readFileSync(`/sys/class/net/${hostLink}/address`, 'latin1').trim();
      ns.nsMac = /link\/ether\s+(\S+)/.exec(await run(t.ip, ['-n', name, '-o', 'link', 'show', NS_DEV]))?.[1] ?? '';
      if (ns.nsMac === '') throw new Error(`no MAC address on ${NS_DEV} in ${name}`);
    } catch (e) {
      await ns.destroy();
      throw e;
    }
    return ns;
  }

  /**
   * argv that runs `cmd args` inside the namespace: `nsenter --net=/run/netns/<name> cmd args`.
   * ip execs the command in its own process (same pid, same file descriptors,
   * environment kept), so an IPC channel (fd 3) and signals go through: this
   * is what startGateway's `command` option takes.
   */
  command(cmd: string, ...args: string[]): [string, ...string[]] {
    // Not `ip netns exec`: see inNs (its mount namespace fails in a chroot); the process keeps its pid and fds.
    return [NSENTER, `--net=${nsPath(this.name)}`, cmd, ...args];
  }

  /**
   * Starts `cmd args` inside the namespace (spawn of nsenter, which execs it; its pid
   * is the command's). A command that cannot be run makes ip exit with 255
   * and say so on stderr (no 'error' event). Killed by destroy() if still running.
   */
  spawn(cmd: string, args: readonly string[] = [], opts: SpawnOptions = {}): ChildProcess {
    this.check();
    const [bin, ...argv] = this.command(cmd, ...args);
    const child = spawn(bin, argv, opts);
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    return child;
  }

  /**
   * Drops, in both directions, the TCP traffic between the namespace and
   * the host on `port` (by default a port of the host: a service the
   * namespace connects to). Both ends see silence: no RST, no error;
   * retransmissions are dropped too, so connections stall, and new
   * connections hang in SYN-SENT. Other ports are untouched. Cumulative.
   */
  async dropPort(port: number, opts: DropOptions = {}): Promise<void> {
    this.check();
    checkPort(port);
    this.drops[opts.side ?? 'host'].add(port);
    await this.applyDrops();
  }

  /**
   * Lifts the drop of `port` (of every port when absent). The stalled
   * connections carry on where they were: the next retransmission goes
   * through (TCP's back-off: after a drop of d seconds it can take up to
   * about d more before the peer retransmits).
   */
  async restore(port?: number): Promise<void> {
    this.check();
    if (port === undefined) { this.drops.host.clear(); this.drops.ns.clear(); } else { this.drops.host.delete(port); this.drops.ns.delete(port); }
    await this.applyDrops();
  }

  /**
   * Slows the link: delays and/or loses packets (see SlowLinkOptions),
   * replacing an earlier slowLink. The loss is in the kernel; the delay
   * goes through the pump, a child process of this one, while it is set.
   */
  async slowLink(o: SlowLinkOptions): Promise<void> {
    this.check();
    const delayMs = o.delayMs ?? 0;
    const lossPct = o.lossPct ?? 0;
    if (!(delayMs >= 0 && delayMs <= 60_000)) throw new Error(`slowLink delayMs ${delayMs}: 0 to 60000`);
    if (!(lossPct >= 0 && lossPct <= 100)) throw new Error(`slowLink lossPct ${lossPct}: 0 to 100`);
    if (o.port !== undefined) checkPort(o.port);
    const before = this.slow;
    this.slow = { delayMs, lossPct, port: o.port, side: o.side ?? 'host', directions: o.directions ?? 'both' };
    await this.applyLoss();
    if (delayMs > 0) {
      await this.startPump(delayMs);
      await this.applyDetour();
    } else {
      await this.stopDetour(before?.delayMs ?? 0);
    }
  }

  /** Removes every fault: drops, loss, delay (the delayed packets still in the pump are delivered first). */
  async clear(): Promise<void> {
    this.check();
    const before = this.slow;
    this.drops.host.clear();
    this.drops.ns.clear();
    this.slow = undefined;
    for (const [dev, hook, n] of this.hooks()) await run(this.tools.tc, [...n, 'filter', 'del', 'dev', dev, hook]).catch(() => undefined);
    await this.stopDetour(before?.delayMs ?? 0);
  }

  /** Kills what runs inside, deletes the namespace and every link it made. Safe to call twice. */
  async destroy(): Promise<void> {
    if (this.destroyed) return;
    const { ip } = this.tools;
    this.pump?.kill('SIGKILL');
    for (const c of this.children) c.kill('SIGKILL');
    killInside(ip, this.name);
    // Deleting one end of a veth pair deletes both; the macvtap goes with its lower link.
    await run(ip, ['link', 'del', this.hostLink]).catch(() => undefined);
    if (this.detour !== undefined) await run(ip, ['link', 'del', this.detour.a]).catch(() => undefined);
    await run(ip, ['netns', 'del', this.name]).catch(() => undefined);
    this.finish();
  }

  /** destroy() without waiting: for 'exit', where nothing asynchronous runs any more. */
  destroySync(): void {
    if (this.destroyed) return;
    const { ip } = this.tools;
    quiet(() => this.pump?.kill('SIGKILL'));
    for (const c of this.children) quiet(() => c.kill('SIGKILL'));
    killInside(ip, this.name);
    quiet(() => runSync(ip, ['link', 'del', this.hostLink]));
    if (this.detour !== undefined) quiet(() => runSync(ip, ['link', 'del', this.detour!.a]));
    quiet(() => runSync(ip, ['netns', 'del', this.name]));
    this.finish();
  }

  private finish(): void {
    this.destroyed = true;
    if (this.detour?.tmpDir !== undefined) rmSync(this.detour.tmpDir, { recursive: true, force: true });
    blocksInUse.delete(this.block);
    live.delete(this);
  }

  private check(): void {
    if (this.destroyed) throw new Error(`${this.name} was destroyed`);
  }

  /** [dev, hook, tc prefix] of every hook a fault uses. */
  private hooks(): Array<[string, 'ingress' | 'egress', string[]]> {
    return [[this.hostLink, 'ingress', []], [this.hostLink, 'egress', []], [NS_DEV, 'ingress', ['-n', this.name]]];
  }

  /** Puts `bytecode` at priority `pref` of a hook (replacing what was there), or removes that priority when null. */
  private async filter(n: string[], dev: string, hook: 'ingress' | 'egress', pref: number, bytecode: string | null, tail: string[] = []): Promise<void> {
    const at = [...n, 'filter', 'DO', 'dev', dev, hook, 'protocol', 'all', 'pref', String(pref)];
    if (bytecode === null) {
      await run(this.tools.tc, at.map((a) => (a === 'DO' ? 'del' : a))).catch(() => undefined);
      return;
    }
    await run(this.tools.tc, [...at.map((a) => (a === 'DO' ? 'replace' : a)), 'handle', '1', 'bpf', ...(tail.length === 0 ? ['da'] : []), 'bytecode', bytecode, ...tail]);
  }

  /**
   * Drops on the ingress hooks, where they are network losses for both
   * senders: at the host end for packets from the namespace, at the namespace
   * end for packets from the host.
   */
  private async applyDrops(): Promise<void> {
    const host = [...this.drops.host];
    const ns = [...this.drops.ns];
    const none = host.length + ns.length === 0;
    // ns -> host: to a host port (dst), from an ns port (src).
    await this.filter([], this.hostLink, 'ingress', PREF_DROP, none ? null : matchProgram({ dstPorts: host, srcPorts: ns }, TC_ACT_SHOT, TC_ACT_UNSPEC));
    // host -> ns: from a host port, to an ns port.
    await this.filter(['-n', this.name], NS_DEV, 'ingress', PREF_DROP, none ? null : matchProgram({ srcPorts: host, dstPorts: ns }, TC_ACT_SHOT, TC_ACT_UNSPEC));
  }

  /** What slowLink matches, per direction, or null where it does not apply. */
  private slowMatch(): { toHost: Match | null; toNs: Match | null } {
    const s = this.slow;
    if (s === undefined) return { toHost: null, toNs: null };
    const p = s.port === undefined ? [] : [s.port];
    const hostSide = s.side === 'host';
    return {
      toHost: s.directions === 'toNs' ? null : (hostSide ? { dstPorts: p } : { srcPorts: p }),
      toNs: s.directions === 'toHost' ? null : (hostSide ? { srcPorts: p } : { dstPorts: p }),
    };
  }

  private async applyLoss(): Promise<void> {
    const { toHost, toNs } = this.slowMatch();
    const f = (this.slow?.lossPct ?? 0) / 100;
    await this.filter([], this.hostLink, 'ingress', PREF_LOSS, toHost === null || f === 0 ? null : matchProgram(toHost, TC_ACT_SHOT, TC_ACT_UNSPEC, f));
    await this.filter(['-n', this.name], NS_DEV, 'ingress', PREF_LOSS, toNs === null || f === 0 ? null : matchProgram(toNs, TC_ACT_SHOT, TC_ACT_UNSPEC, f));
  }

  /** The detour filters: matching frames leave the host end for the pump, on its way in (ingress) or out (egress). */
  private async applyDetour(): Promise<void> {
    const d = this.detour!;
    const { toHost, toNs } = this.slowMatch();
    const redirect = ['action', 'mirred', 'egress', 'redirect', 'dev', d.a];
    // Without `da` a cBPF program is a classifier: -1 is a match (run the action), 0 none.
    await this.filter([], this.hostLink, 'ingress', PREF_DETOUR, toHost === null ? null : matchProgram(toHost, TC_ACT_UNSPEC, 0), redirect);
    await this.filter([], this.hostLink, 'egress', PREF_DETOUR, toNs === null ? null : matchProgram(toNs, TC_ACT_UNSPEC, 0), redirect);
  }

  /** Makes the detour links (once) and starts the pump, or gives the running one the new delay. */
  private async startPump(delayMs: number): Promise<void> {
    const { ip, tc } = this.tools;
    if (this.detour === undefined) {
      const a = linkName(this.seq, 'a');
      const b = linkName(this.seq, 'b');
      const tap = linkName(this.seq, 't');
      this.detour = { a, b, tap, tapPath: '', aMac: '' };
      await run(ip, ['link', 'add', a, 'type', 'veth', 'peer', 'name', b]);
      await run(ip, ['link', 'add', 'link', b, 'name', tap, 'type', 'macvtap', 'mode', 'passthru']);
      for (const dev of [a, b, tap]) {
        // No IPv6 chatter (router solicitations, DAD) on links that carry only detoured frames.
        quiet(() => writeFileSync(`/proc/sys/net/ipv6/conf/${dev}/disable_ipv6`, '1'));
        await run(ip, ['link', 'set', dev, 'up']);
      }
      this.detour.aMac = readFileSync(`/sys/class/net/${a}/address`, 'latin1').trim();
      const ifindex = readFileSync(`/sys/class/net/${tap}/ifindex`, 'latin1').trim();
      this.detour.tapPath = `/dev/tap${ifindex}`;
      if (!existsSync(this.detour.tapPath)) {
        // No devtmpfs node (a container's /dev): make one from the device number sysfs gives.
        const [maj, min] = readFileSync(`/sys/class/net/${tap}/tap${ifindex}/dev`, 'latin1').trim().split(':');
        this.detour.tmpDir = mkdtempSync(join(tmpdir(), 'sluice-netfault-'));
        this.detour.tapPath = join(this.detour.tmpDir, `tap${ifindex}`);
        await run('mknod', [this.detour.tapPath, 'c', maj!, min!]);
      }
      await run(tc, ['qdisc', 'add', 'dev', a, 'clsact']);
      // Frames the pump sends back arrive on `a`: those marked for the host enter the host's stack as if
      // they had come in on the host end; those for the namespace leave through the host end.
      await run(tc, ['filter', 'add', 'dev', a, 'ingress', 'protocol', 'all', 'pref', '1', 'handle', '1', 'bpf', 'bytecode', markedProgram(MAGIC_TO_HOST),
        'action', 'mirred', 'ingress', 'redirect', 'dev', this.hostLink]);
      await run(tc, ['filter', 'add', 'dev', a, 'ingress', 'protocol', 'all', 'pref', '2', 'handle', '1', 'bpf', 'bytecode', markedProgram(MAGIC_TO_NS),
        'action', 'mirred', 'egress', 'redirect', 'dev', this.hostLink]);
    }
    if (this.pump !== undefined && this.pump.exitCode === null && this.pump.signalCode === null) {
      this.pump.stdin!.write(`${JSON.stringify({ delayMs })}\n`);
      return;
    }
    const cfg = { tap: this.detour.tapPath, delayMs, hostMac: this.hostMac, nsMac: this.nsMac, detourMac: this.detour.aMac };
    const pump = spawn(process.execPath, ['-e', PUMP_SOURCE, JSON.stringify(cfg)], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.pump = pump;
    let said = '';
    pump.stderr!.setEncoding('utf8');
    pump.stderr!.on('data', (c: string) => { said = (said + c).slice(-2000); });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { pump.kill('SIGKILL'); reject(new Error(`netfault pump not ready in 10 s: ${said}`)); }, 10_000);
      pump.stdout!.once('data', () => { clearTimeout(timer); resolve(); });
      pump.once('exit', (code, sig) => { clearTimeout(timer); reject(new Error(`netfault pump exited (${code ?? sig}): ${said}`)); });
    });
    // Its stdout has said all it will; its stderr is kept for the messages.
    pump.stdout!.resume();
    // A running pump does not hold this process open: at exit, destroySync kills it.
    pump.unref();
    for (const s of [pump.stdin, pump.stdout, pump.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();
    pump.once('exit', (code, sig) => {
      if (this.pump !== pump) return; // stopped on purpose
      // Without it the detoured frames would go nowhere: undo the detour (the link is then fast) and say why.
      this.pump = undefined;
      this.pumpFailure = `netfault pump of ${this.name} exited (${code ?? sig}); the delay is off: ${said.trim()}`;
      void this.filter([], this.hostLink, 'ingress', PREF_DETOUR, null).then(() => this.filter([], this.hostLink, 'egress', PREF_DETOUR, null));
    });
  }

  /** Removes the detour filters, lets the pump deliver what it holds, then stops it. */
  private async stopDetour(heldMs: number): Promise<void> {
    if (this.detour === undefined) return;
    await this.filter([], this.hostLink, 'ingress', PREF_DETOUR, null);
    await this.filter([], this.hostLink, 'egress', PREF_DETOUR, null);
    const pump = this.pump;
    if (pump === undefined) return;
    this.pump = undefined;
    await new Promise((r) => setTimeout(r, heldMs + 50));
    pump.stdin!.end();
    const t = setTimeout(() => pump.kill('SIGKILL'), 2000);
    if (pump.exitCode === null && pump.signalCode === null) await new Promise((r) => pump.once('exit', r));
    clearTimeout(t);
  }
}

function linkName(seq: number, role: string): string {
  return `${LINK_PREFIX}${process.pid.toString(36)}-${seq.toString(36)}${role}`;
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`port ${port}: 1 to 65535`);
}
