// The network faults of the chaos harness (chaos/netfault.ts), for real: a
// namespace joined to the host by a veth pair, two TCP echo servers on the
// host end's address, and a client inside the namespace (a node process
// started with ns.spawn, driven over its IPC channel). Dropping a port stalls
// that port's connections silently while the other answers, and lifting it
// lets the same connection carry on; a slow link delays and loses; a gateway
// node started by startGateway inside the namespace reaches Redis through
// the link and loses it during a drop; nothing is left behind, also when the
// process that made a namespace is killed. Traffic goes only to the host end
// of the link and into namespaces this file made. Needs root, ip and tc
// (iproute2): without them the first hook fails saying so.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readlinkSync, statSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { gatewayArgs, startGateway, TEST_ADMIN_TOKEN } from '@sluice/gateway/testing';
import { startRedis } from '@sluice/redis/testing';
import { BENCH_ROOT } from '../src/lib/spawn.ts';
import { requireSystemDep } from '../../tools/system-deps.mjs';
import { LINK_PREFIX, matchProgram, NetNs, sluiceLinks, sluiceNamespaces } from '../chaos/netfault.ts';

const NETFAULT = fileURLToPath(new URL('../chaos/netfault.ts', import.meta.url));

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A TCP echo server on `host`, counting the connections it accepted. */
class Echo {
  accepted = 0;
  private readonly socks = new Set<Socket>();
  private constructor(readonly server: Server, readonly port: number) {}

  static async start(host: string): Promise<Echo> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, host, resolve); });
    const e = new Echo(server, (server.address() as { port: number }).port);
    server.on('connection', (s) => {
      e.accepted++;
      e.socks.add(s);
      s.on('error', () => undefined);
      s.on('close', () => e.socks.delete(s));
      s.pipe(s);
    });
    return e;
  }

  async stop(): Promise<void> {
    for (const s of this.socks) s.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

/** The client inside the namespace: plain node:net sockets, one per id, commanded and reporting over IPC. */
const PROBE = `
const net = require('net');
const socks = new Map();
process.on('message', (m) => {
  if (m.op === 'connect') {
    const s = net.connect(m.port, m.host);
    socks.set(m.id, s);
    s.on('connect', () => process.send({ ev: 'connect', id: m.id }));
    s.on('data', (d) => process.send({ ev: 'data', id: m.id, data: d.toString() }));
    s.on('error', (e) => process.send({ ev: 'error', id: m.id, code: e.code }));
    s.on('close', () => process.send({ ev: 'close', id: m.id }));
  } else if (m.op === 'write') socks.get(m.id).write(m.data);
  else if (m.op === 'destroy') { const s = socks.get(m.id); if (s) s.destroy(); }
});
process.on('disconnect', () => process.exit(0));
process.send({ ev: 'ready', pid: process.pid });
`;

interface ProbeEvent { ev: string; id?: string; data?: string; code?: string; pid?: number; at: number }

class Probe {
  readonly events: ProbeEvent[] = [];
  private readonly received = new Map<string, string>();
  private wake: (() => void) | undefined;

  private constructor(readonly proc: ChildProcess) {
    proc.on('message', (m: Omit<ProbeEvent, 'at'>) => {
      this.events.push({ ...m, at: performance.now() });
      if (m.ev === 'data') this.received.set(m.id!, (this.received.get(m.id!) ?? '') + m.data!);
      this.wake?.();
    });
    proc.on('exit', () => this.wake?.());
  }

  /** Started inside `ns` through ns.spawn, with an IPC channel: its ready message shows the channel goes through nsenter. */
  static async start(ns: NetNs): Promise<{ probe: Probe; readyPid: number }> {
    const proc = ns.spawn(process.execPath, ['-e', PROBE], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const probe = new Probe(proc);
    const ready = await probe.until((e) => e.ev === 'ready', 10_000);
    assert.ok(ready !== undefined, 'the probe inside the namespace sent no ready message over IPC');
    return { probe, readyPid: ready.pid! };
  }

  /** The first event matching `pred` (already there or coming within `ms`), or undefined. */
  async until(pred: (e: ProbeEvent) => boolean, ms: number): Promise<ProbeEvent | undefined> {
    const deadline = performance.now() + ms;
    for (;;) {
      const hit = this.events.find(pred);
      if (hit !== undefined) return hit;
      const left = deadline - performance.now();
      if (left <= 0 || this.proc.exitCode !== null || this.proc.signalCode !== null) return undefined;
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.wake = () => { clearTimeout(t); r(); };
      });
    }
  }

  /** When (performance.now()) the data received on `id` first came to include `token`, if it does within `ms`. */
  async echoed(id: string, token: string, ms: number): Promise<number | undefined> {
    const got = await this.until((x) => x.ev === 'data' && x.id === id && (this.received.get(id) ?? '').includes(token), ms);
    if (got === undefined) return undefined;
    // The event that brought the token's last byte.
    const end = this.received.get(id)!.indexOf(token) + token.length;
    let upTo = 0;
    for (const e of this.events) {
      if (e.ev !== 'data' || e.id !== id) continue;
      upTo += e.data!.length;
      if (upTo >= end) return e.at;
    }
    return undefined;
  }

  async connect(id: string, host: string, port: number, ms = 5000): Promise<void> {
    this.proc.send({ op: 'connect', id, host, port });
    const e = await this.until((x) => x.id === id && x.ev !== 'data', ms);
    assert.equal(e?.ev, 'connect', `connect ${id} to ${host}:${port}: ${JSON.stringify(e)}`);
  }

  write(id: string, data: string): number {
    this.proc.send({ op: 'write', id, data });
    return performance.now();
  }

  /** One echo round trip on `id`, in ms. */
  async roundTrip(id: string, ms = 10_000): Promise<number> {
    const token = `<${id}:${Math.random().toString(36).slice(2)}>`;
    const t0 = this.write(id, token);
    const at = await this.echoed(id, token, ms);
    assert.ok(at !== undefined, `no echo of ${token} on ${id} within ${ms} ms`);
    return at - t0;
  }

  /** The error and close events of `id` (a reset shows there). */
  failures(id: string): ProbeEvent[] {
    return this.events.filter((e) => e.id === id && (e.ev === 'error' || e.ev === 'close'));
  }

  stop(): void {
    if (this.proc.connected) this.proc.disconnect();
    this.proc.kill('SIGKILL');
  }
}

let ns: NetNs;
let echo1: Echo;
let echo2: Echo;
let probe: Probe;
let probePid = 0;

before(async () => {
  // Fails at once, naming what is missing (iproute2, root), before anything starts.
  NetNs.preflight();
  ns = await NetNs.create('t');
  echo1 = await Echo.start(ns.hostAddr);
  echo2 = await Echo.start(ns.hostAddr);
  const p = await Probe.start(ns);
  probe = p.probe;
  probePid = p.readyPid;
});

after(async () => {
  probe?.stop();
  await echo1?.stop();
  await echo2?.stop();
  await ns?.destroy();
});

/** Inode of a process's network namespace. */
function netnsOf(pid: number): string {
  return readlinkSync(`/proc/${pid}/ns/net`);
}

test('NetNs.create: a namespace with our prefix, a veth pair on a private /30, addresses and links up', async () => {
  assert.match(ns.name, new RegExp(`^sluice-t-${process.pid}-\\d+$`));
  assert.ok(sluiceNamespaces().includes(ns.name));
  assert.ok(ns.hostLink.startsWith(LINK_PREFIX) && ns.hostLink.length <= 15, ns.hostLink);
  assert.ok(sluiceLinks().includes(ns.hostLink));
  const [a, b, c, d] = ns.hostAddr.split('.').map(Number);
  assert.deepEqual([a, b], [10, 251]);
  assert.equal(d! % 4, 1);
  assert.equal(ns.nsAddr, `10.251.${c}.${d! + 1}`);
  assert.equal(ns.cidr, `10.251.${c}.${d! - 1}/30`);
  // A second namespace gets another /30.
  const other = await NetNs.create();
  try {
    assert.notEqual(other.cidr, ns.cidr);
    assert.match(other.name, new RegExp(`^sluice-${process.pid}-\\d+$`));
  } finally {
    await other.destroy();
  }
  assert.ok(!sluiceNamespaces().includes(other.name));
  assert.ok(!sluiceLinks().includes(other.hostLink));
  // The probe runs inside the namespace, as the very process spawn returned (nsenter execs it).
  assert.equal(probePid, probe.proc.pid);
  assert.equal(netnsOf(probePid), `net:[${statSync(`/var/run/netns/${ns.name}`).ino}]`);
  assert.notEqual(netnsOf(probePid), netnsOf(process.pid));
});

test('the cBPF programs: jumps resolve, ports and the loss threshold are in the code', () => {
  const prog = matchProgram({ dstPorts: [6379, 7000], srcPorts: [80] }, 2, 0xffff_ffff, 0.05);
  const ins = prog.split(',');
  assert.equal(Number(ins[0]), ins.length - 1);
  for (const i of ins.slice(1)) assert.match(i, /^\d+ \d+ \d+ \d+$/);
  assert.ok(ins.some((i) => / 6379$/.test(i)) && ins.some((i) => / 7000$/.test(i)) && ins.some((i) => / 80$/.test(i)));
  assert.ok(ins.includes(`53 1 0 ${Math.round(0.05 * 2 ** 32)}`), prog); // jge #threshold
  assert.ok(ins.includes('32 0 0 4294963256'), prog); // ld rand
  // Every IPv4 packet when no port is given: no TCP checks.
  assert.ok(!matchProgram({}, 2, 0).split(',').some((i) => i.startsWith('72 '))); // ldh [x+k]
});

test('from inside the namespace both echo servers on the host answer', async () => {
  await probe.connect('a1', ns.hostAddr, echo1.port);
  await probe.connect('b1', ns.hostAddr, echo2.port);
  assert.ok((await probe.roundTrip('a1')) < 1000);
  assert.ok((await probe.roundTrip('b1')) < 1000);
});

test('dropPort: the port stalls without a reset while the other answers; restore: the same connection delivers what was sent meanwhile', async (t) => {
  await probe.connect('a2', ns.hostAddr, echo1.port);
  await probe.connect('b2', ns.hostAddr, echo2.port);
  await probe.roundTrip('a2');
  const acceptedBefore = echo1.accepted;
  await ns.dropPort(echo1.port);
  try {
    const sent = probe.write('a2', '<during-drop>');
    // The other port is untouched.
    assert.ok((await probe.roundTrip('b2')) < 1000);
    // No echo within 1 s, and no RST: neither an error nor a close.
    assert.equal(await probe.echoed('a2', '<during-drop>', 1000), undefined, 'data went through a dropped port');
    assert.deepEqual(probe.failures('a2'), []);
    // A new connection hangs in SYN-SENT (not refused).
    probe.proc.send({ op: 'connect', id: 'a3', host: ns.hostAddr, port: echo1.port });
    assert.equal(await probe.until((e) => e.id === 'a3', 1000), undefined, 'a connection to a dropped port was answered');
    assert.equal(echo1.accepted, acceptedBefore);
    const restored = performance.now();
    await ns.restore();
    // TCP retransmits: what was written during the drop arrives, on the same connection.
    const at = await probe.echoed('a2', '<during-drop>', 15_000);
    assert.ok(at !== undefined, 'the data sent during the drop never arrived after restore');
    t.diagnostic(`dropped ${(restored - sent).toFixed(0)} ms; the echo came ${(at - restored).toFixed(0)} ms after restore`);
    assert.ok(at - sent >= 1000);
    assert.deepEqual(probe.failures('a2'), []);
    assert.ok((await probe.roundTrip('a2')) < 1000);
    // The hanging connect completes with its next SYN.
    const a3 = await probe.until((e) => e.id === 'a3', 15_000);
    assert.equal(a3?.ev, 'connect');
  } finally {
    await ns.restore();
  }
});

test('dropPort by side: a port of a server inside the namespace, the host\'s other traffic untouched', async () => {
  // A server inside the namespace: the probe's own echo cannot be used (it is a client), so use a tiny node server.
  const srv = ns.spawn(process.execPath, ['-e', `require('net').createServer((s) => s.pipe(s)).listen(0, '${ns.nsAddr}', function () { process.send(this.address().port); })`],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => { srv.once('message', (p) => resolve(p as number)); srv.once('exit', (c) => reject(new Error(`server exited ${c}`))); });
    const rt = async (ms: number): Promise<boolean> => new Promise((resolve) => {
      const s = connect(port, ns.nsAddr);
      const t = setTimeout(() => { s.destroy(); resolve(false); }, ms);
      s.on('connect', () => s.write('x'));
      s.on('data', () => { clearTimeout(t); s.destroy(); resolve(true); });
      s.on('error', () => { clearTimeout(t); resolve(false); });
    });
    assert.equal(await rt(2000), true);
    await ns.dropPort(port, { side: 'ns' });
    assert.equal(await rt(1000), false);
    // The probe's connections to the host go on.
    await probe.connect('b3', ns.hostAddr, echo2.port);
    assert.ok((await probe.roundTrip('b3')) < 1000);
    await ns.restore(port);
    assert.equal(await rt(5000), true);
  } finally {
    srv.kill('SIGKILL');
    await ns.restore();
  }
});

test('slowLink delay: 200 ms each way on one port (a round trip >= 400 ms), the other port fast; then one direction only', async (t) => {
  await probe.connect('a4', ns.hostAddr, echo1.port);
  await probe.connect('b4', ns.hostAddr, echo2.port);
  try {
    await ns.slowLink({ delayMs: 200, port: echo1.port });
    const slow = [await probe.roundTrip('a4'), await probe.roundTrip('a4'), await probe.roundTrip('a4')];
    const fast = [await probe.roundTrip('b4'), await probe.roundTrip('b4')];
    for (const ms of slow) assert.ok(ms >= 400, `round trip on the slow port took ${ms.toFixed(1)} ms`);
    // The delay is a lower bound; the other port only needs to be clearly faster.
    for (const ms of fast) assert.ok(ms < 200, `round trip on the other port took ${ms.toFixed(1)} ms`);
    t.diagnostic(`slow port: ${slow.map((x) => x.toFixed(1)).join(', ')} ms; other port: ${fast.map((x) => x.toFixed(1)).join(', ')} ms`);
    // netem on the namespace's end only: every port, one way.
    await ns.slowLink({ delayMs: 200, directions: 'toHost' });
    for (const id of ['a4', 'b4']) {
      const ms = await probe.roundTrip(id);
      assert.ok(ms >= 200, `${id}: ${ms.toFixed(1)} ms`);
      t.diagnostic(`toHost only, ${id}: ${ms.toFixed(1)} ms`);
    }
    await ns.clear();
    assert.ok((await probe.roundTrip('a4')) < 200);
    assert.deepEqual([...probe.failures('a4'), ...probe.failures('b4')], []);
  } finally {
    await ns.clear();
  }
});

test('slowLink loss: 100% stalls the port like a drop; 20% loses packets that TCP retransmits, and every echo arrives', async (t) => {
  await probe.connect('a5', ns.hostAddr, echo1.port);
  await probe.connect('b5', ns.hostAddr, echo2.port);
  try {
    await ns.slowLink({ lossPct: 100, port: echo1.port });
    probe.write('a5', '<lost>');
    assert.equal(await probe.echoed('a5', '<lost>', 800), undefined);
    assert.ok((await probe.roundTrip('b5')) < 1000);
    await ns.clear();
    assert.ok((await probe.echoed('a5', '<lost>', 15_000)) !== undefined);
    await ns.slowLink({ lossPct: 20, port: echo1.port });
    const times: number[] = [];
    for (let i = 0; i < 25; i++) times.push(await probe.roundTrip('a5', 30_000));
    // A lost segment waits for a retransmission (tail loss probe or RTO), 200 ms at least; with 20% loss each
    // way, 25 round trips without one happen with probability 0.64^25 (1.4e-5).
    t.diagnostic(`round trips at 20% loss (ms): ${times.map((x) => x.toFixed(0)).join(' ')}`);
    assert.ok(Math.max(...times) >= 190, `no round trip was slowed by a loss: ${times.map((t) => t.toFixed(0)).join(' ')}`);
    assert.deepEqual(probe.failures('a5'), []);
  } finally {
    await ns.clear();
  }
  assert.ok((await probe.roundTrip('a5')) < 1000);
});

test('a gateway node inside the namespace (startGateway with command: ns.command(...)) reaches Redis on hostAddr; a drop of the Redis port fails its publishes, restore heals them', async (t) => {
  requireSystemDep('redis-server');
  const redis = await startRedis();
  let gw: Awaited<ReturnType<typeof startGateway>> | undefined;
  try {
    // startRedis binds 127.0.0.1 only, which the namespace cannot reach: add the host end's address.
    assert.match(await redis.cli('CONFIG', 'SET', 'bind', `127.0.0.1 ${ns.hostAddr}`), /OK/);
    gw = await startGateway(
      { HOST: '0.0.0.0', ADMIN_HOST: '0.0.0.0', WS_WORKERS: '1', REDIS_URL: `redis://${ns.hostAddr}:${redis.port}` },
      // As cluster.ts starts its nodes (raiseFileLimit: through /bin/sh, which execs ip, which execs node), the ready message over IPC.
      { command: ns.command(process.execPath, ...gatewayArgs()), raiseFileLimit: true, timeoutMs: 60_000 },
    );
    assert.equal(netnsOf(gw.pid), netnsOf(probePid), 'the gateway is not in the namespace');
    const admin = `http://${ns.nsAddr}:${gw.adminPort}`;
    const ready = await fetch(`${admin}/health/ready`, { signal: AbortSignal.timeout(5000) });
    assert.equal(ready.status, 200);
    // The node's Redis connections come from the namespace.
    assert.match(await redis.cli('CLIENT', 'LIST'), new RegExp(`addr=${ns.nsAddr.replace(/\./g, '\\.')}:`));
    const publish = async (): Promise<number> => {
      try {
        return (await fetch(`${admin}/v1/publish`, {
          method: 'POST', body: JSON.stringify({ topic: 'room:1', data: 1 }), signal: AbortSignal.timeout(8000),
          headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
        })).status;
      } catch {
        return 0; // no answer in time
      }
    };
    assert.equal(await publish(), 200);
    await ns.dropPort(redis.port);
    const t0 = performance.now();
    const during = await publish();
    t.diagnostic(`publish during the drop: ${during === 0 ? 'no answer in 8 s' : `HTTP ${during}`} after ${(performance.now() - t0).toFixed(0)} ms`);
    assert.notEqual(during, 200, 'a publish succeeded while the node was cut from Redis');
    // The admin port (a port of the namespace) still answers: only Redis's traffic is dropped.
    assert.equal((await fetch(`${admin}/health/live`, { signal: AbortSignal.timeout(5000) })).status, 200);
    await ns.restore();
    const t1 = performance.now();
    let after = 0;
    const deadline = Date.now() + 30_000;
    while (after !== 200 && Date.now() < deadline) {
      after = await publish();
      if (after !== 200) await sleep(250);
    }
    assert.equal(after, 200, 'publishes did not recover within 30 s of restore');
    t.diagnostic(`publishes answered 200 again ${(performance.now() - t1).toFixed(0)} ms after restore`);
  } finally {
    await ns.restore();
    await gw?.stop('SIGTERM', 5000);
    await redis.stop();
  }
});

/** A separate process that makes a namespace (and a process inside it), says their names, and waits to be killed. */
async function maker(): Promise<{ proc: ChildProcess; name: string; link: string; inside: number }> {
  const code = `
    import { NetNs } from ${JSON.stringify(NETFAULT)};
    const ns = await NetNs.create('crash');
    const sleeper = ns.spawn('sleep', ['600'], { stdio: 'ignore', detached: true });
    sleeper.unref();
    console.log(JSON.stringify({ name: ns.name, link: ns.hostLink, inside: sleeper.pid }));
    setInterval(() => {}, 1000);`;
  const proc = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: BENCH_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    const t = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('the namespace maker said nothing in 30 s')); }, 30_000);
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('\n')) { clearTimeout(t); resolve(out.split('\n')[0]!); }
    });
    proc.once('exit', (c) => { clearTimeout(t); reject(new Error(`the namespace maker exited (${c})`)); });
  });
  return { proc, ...(JSON.parse(line) as { name: string; link: string; inside: number }) };
}

const exited = (p: ChildProcess): Promise<unknown> => (p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', r)));

/** Runs and is not a zombie (a killed process whose parent died waits for init to reap it). */
const running = (pid: number): boolean => {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'latin1'));
  } catch {
    return false;
  }
};

test('cleanup: a SIGTERMed process removes its namespace and links; a SIGKILLed one\'s are swept, with what ran inside', async () => {
  const a = await maker();
  assert.ok(sluiceNamespaces().includes(a.name));
  assert.ok(sluiceLinks().includes(a.link));
  a.proc.kill('SIGTERM');
  await exited(a.proc);
  assert.equal(a.proc.exitCode, 143);
  assert.ok(!sluiceNamespaces().includes(a.name), `${a.name} left behind after SIGTERM`);
  assert.ok(!sluiceLinks().includes(a.link), `${a.link} left behind after SIGTERM`);
  assert.equal(running(a.inside), false, 'the process inside the namespace survived');

  const b = await maker();
  b.proc.kill('SIGKILL');
  await exited(b.proc);
  // Nothing ran: all of it is still there, the process inside too.
  assert.ok(sluiceNamespaces().includes(b.name));
  assert.ok(sluiceLinks().includes(b.link));
  assert.equal(running(b.inside), true);
  const removed = NetNs.sweep();
  assert.ok(removed.includes(b.name), `sweep removed ${removed.join(', ')}`);
  assert.ok(!sluiceNamespaces().includes(b.name));
  assert.ok(!sluiceLinks().includes(b.link));
  await sleep(100);
  assert.equal(running(b.inside), false, 'the process inside the stale namespace survived the sweep');
  // This file's own namespace was left alone.
  assert.ok(sluiceNamespaces().includes(ns.name));
});

test('destroy: the namespace, its links and its pump go; at the end nothing of this file is left', async () => {
  const extra = await NetNs.create('gone');
  await extra.slowLink({ delayMs: 10 });
  const prefix = extra.hostLink.slice(0, -1);
  assert.deepEqual(sluiceLinks().filter((l) => l.startsWith(prefix)).sort(), ['a', 'b', 'h', 't'].map((r) => prefix + r));
  await extra.destroy();
  await extra.destroy(); // twice is fine
  assert.ok(!sluiceNamespaces().includes(extra.name));
  assert.deepEqual(sluiceLinks().filter((l) => l.startsWith(prefix)), []);
  await assert.rejects(extra.dropPort(1), /destroyed/);
  // The file's own namespace (with the detour links of the slowLink tests) and the probe inside it.
  probe.stop();
  await ns.destroy();
  const mine = `${LINK_PREFIX}${process.pid.toString(36)}-`;
  assert.deepEqual(sluiceNamespaces().filter((n) => n.includes(`-${process.pid}-`)), []);
  assert.deepEqual(sluiceLinks().filter((l) => l.startsWith(mine)), []);
  assert.equal(running(probePid), false);
});
