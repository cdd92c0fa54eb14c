// The chaos clients: @sluice/client SDK clients on `ws`, held by child
// processes (this file, run with --chaos-child; at most 2500 clients each, one
// fd per client), from the loopback source addresses 127.0.0.2 to .9. Roles
// by the client's global index:
//
// - every client subscribes to `topicsPerClient` durable topics of `topics`;
// - every `publisherEvery`-th client also publishes durable events, one every
//   `publishIntervalMs`, each with its own idempotency key `<client>.<n>`
//   (also in its data), to one topic (publishers spread evenly over them);
// - every `keyedEvery`-th client (offset 1) subscribes to a keyed feed, and
//   every `keyedPublisherEvery`-th (offset 2) publishes keyed updates to one.
//
// Each process records what its clients' handlers got (ids and publish keys
// per subscription), what came on the wire (ids per client over all its
// sockets, to see duplicates the SDK would hide), when each connection ended
// and began, every acknowledged publish (with when it was published and
// acked, and the node whose socket carried the ack: the first part of the
// connection id of the client's latest welcome), and the `unavailable` answers its clients got (the SDK resends
// without saying so). The orchestrator (`Fleet`) asks
// over IPC; every request has a timeout, and a child exits when the
// orchestrator goes away or after its lifetime.

import { fileURLToPath, pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { SluiceClient, type WebSocketConstructor } from '@sluice/client';
import { decodeServerFrame } from '@sluice/protocol';
import { RpcChild, serveRequests } from '../src/lib/child-rpc.ts';
import { checkSubscription, emptyDeliveryCheck, type Acked, type ClientTimeline, type DeliveryCheck } from './analysis.ts';

export const CLIENT_SOURCES = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7', '127.0.0.8', '127.0.0.9'];
export const PER_PROC_MAX = 2500;
/** The client processes' loop watch: a tick every STALL_TICK_MS, a stall kept when the tick is STALL_MS late or more. */
const STALL_TICK_MS = 100;
const STALL_MS = 50;

export interface Roles {
  readonly run: string;
  readonly topics: number;
  readonly topicsPerClient: number;
  readonly publisherEvery: number;
  readonly publishIntervalMs: number;
  readonly keyedTopics: number;
  readonly keyedEvery: number;
  readonly keyedPublisherEvery: number;
  readonly keyedIntervalMs: number;
  readonly keysPerFeed: number;
}

export const durableTopic = (r: Roles, k: number): string => `chaos.${r.run}.d${k}`;
export const keyedTopic = (r: Roles, k: number): string => `chaos.${r.run}.k${k}`;

/** The durable topics (indexes) some client of `clients` publishes to: each publisher has one (see `start`). */
export function publishedTopics(r: Roles, clients: number): number[] {
  const out = new Set<number>();
  if (r.publisherEvery > 0) for (let i = 0; i < clients; i += r.publisherEvery) out.add(Math.floor(i / r.publisherEvery) % r.topics);
  return [...out].sort((a, b) => a - b);
}

/** The durable topics of client `i`: distinct, spread evenly. */
export function topicsOf(r: Roles, i: number): number[] {
  const out: number[] = [];
  const n = Math.min(r.topicsPerClient, r.topics);
  const step = 1 + (Math.floor(i / r.topics) % Math.max(1, r.topics - 1));
  for (let j = 0; j < n; j++) {
    let t = (i + j * step) % r.topics;
    while (out.includes(t)) t = (t + 1) % r.topics;
    out.push(t);
  }
  return out;
}

/**
 * One string per distinct event id and publish key in this process: every
 * subscriber keeps the ids it got until the final check (28 million
 * deliveries in the 30-minute soak), and a string per delivery made the
 * client processes 5.5 GiB, whose collections took the CPU the gateway
 * under test shares on a small box. A topic's event reaches some hundred
 * subscribers of a process, so keeping one copy saves nearly all of it.
 */
const interned = new Map<string, string>();
function intern(s: string): string {
  const x = interned.get(s);
  if (x !== undefined) return x;
  interned.set(s, s);
  return s;
}

const EVENT_PREFIX = '{"type":"event","topic":"';
const ID_FIELD = '","id":"';

/**
 * A durable event frame's topic and id, for the wire record: sliced from
 * the gateway's frame (`encodeEventFrame` writes topic, then id, first) with
 * no parse; any other shape is parsed. Undefined for an event without id.
 */
export function wireEvent(s: string): { topic: string; id: string } | undefined {
  if (s.startsWith(EVENT_PREFIX)) {
    const end = s.indexOf('"', EVENT_PREFIX.length);
    if (end > 0 && s.startsWith(ID_FIELD, end)) {
      const from = end + ID_FIELD.length;
      const to = s.indexOf('"', from);
      if (to > from) return { topic: s.slice(EVENT_PREFIX.length, end), id: s.slice(from, to) };
    }
  }
  const d = decodeServerFrame(s);
  return d.ok && d.frame.type === 'event' && d.frame.id !== undefined ? { topic: d.frame.topic, id: d.frame.id } : undefined;
}

type Request =
  | { op: 'connect'; urls: string[]; count: number; idBase: number; roles: Roles; concurrency: number; timeoutMs: number; t0: number }
  | { op: 'status'; fence: number }
  | { op: 'publishing'; on: boolean }
  | { op: 'acked' }
  | { op: 'verify'; acked: Record<string, string[]>; lost: Record<string, string[]> }
  | { op: 'timelines' }
  | { op: 'keyedStale'; fence: number }
  | { op: 'close' }
  | { op: 'exit' };

export interface Status {
  clients: number;
  open: number;
  closed: number;
  /** Publishes not yet acknowledged nor rejected. */
  pending: number;
  acked: number;
  /** Subscriptions (durable and keyed) that got no event yet. */
  cold: number;
  /** Durable subscriptions whose last fence is below the one asked about, and keyed ones the same. */
  fenceMissing: number;
  keyedFenceMissing: number;
  keyedSubscribers: number;
}

export interface Extras {
  rejected: Record<string, number>;
  recoveredFalse: number;
  /** Rejoins of keyed feeds, which have no resume position (reported by the SDK as recovered: false, since undefined). */
  keyedNoPosition: number;
  errors: Record<string, number>;
  closeCodes: Record<string, number>;
  refusals: Record<string, number>;
  keyedReceived: number;
  /** `unavailable` answers on the wire (publishes and joins, which the SDK tries again). */
  unavailable: number;
  odd: string[];
}


interface Sub {
  topic: string;
  ids: string[];
  keys: string[];
  fence: number;
  got: number;
  /** When the last event came (the orchestrator's clock). */
  lastAt: number;
}

interface Held {
  index: number;
  client: SluiceClient;
  subs: Sub[];
  keyed: Sub | undefined;
  /** Wire ids per topic over all sockets of this client, with the socket (1, 2, ...) and time of each. */
  wire: Map<string, { ids: string[]; socks: number[]; at: number[] }>;
  sockets: number;
  joins: string[];
  downs: number[];
  ups: number[];
  /** The reconnects the SDK scheduled, as pairs: when (ms on the orchestrator's clock), and the wait it chose (`inMs`). */
  waits: number[];
  /** The gateway node id of the latest welcome (connection ids are `<node>.<shard>.<generation>.<seq>`). */
  node: string | undefined;
  /** The latest welcome's connection id, whole: which node and shard the client is on. */
  conn: string | undefined;
  publisher: { topic: string; n: number; nextAt: number } | undefined;
  keyedPublisher: { topic: string; n: number; nextAt: number } | undefined;
}

class Clients {
  held: Held[] = [];
  acked: Acked[] = [];
  pending = 0;
  rejected: Record<string, number> = {};
  recoveredFalse = 0;
  keyedNoPosition = 0;
  errors: Record<string, number> = {};
  closeCodes: Record<string, number> = {};
  refusals: Record<string, number> = {};
  keyedReceived = 0;
  unavailable = 0;
  odd: string[] = [];
  roles: Roles | undefined;
  publishTimer: NodeJS.Timeout | undefined;
  explained: string[] = [];
  /** The orchestrator's clock: epoch ms of its 0. */
  t0 = 0;
  /** This process's event-loop stalls, as pairs: when one ended (ms on the orchestrator's clock) and how long past its tick it was. */
  stalls: number[] = [];
  private stallTimer: NodeJS.Timeout | undefined;

  /**
   * Watches this process's own event loop: a 100 ms tick that comes later
   * than that is a stall of the clients it holds (their timers, reads and
   * connects wait too). Kept when over STALL_MS, so that a chaos report can
   * tell time spent by the gateways from time spent in here.
   */
  private watchStalls(): void {
    if (this.stallTimer !== undefined) return;
    let last = performance.now();
    this.stallTimer = setInterval(() => {
      const at = performance.now();
      const late = at - last - STALL_TICK_MS;
      last = at;
      if (late >= STALL_MS) this.stalls.push(Math.round(this.now()), Math.round(late));
    }, STALL_TICK_MS);
    this.stallTimer.unref();
  }

  private now(): number {
    return performance.timeOrigin + performance.now() - this.t0;
  }

  private count(m: Record<string, number>, k: string): void {
    m[k] = (m[k] ?? 0) + 1;
  }

  private ctor(local: string, h: () => Held | undefined): WebSocketConstructor {
    const now = (): number => this.now();
    const unavailable = (): void => { this.unavailable++; };
    return class extends WebSocket {
      private readonly sock: number;
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols, { localAddress: local });
        const held0 = h();
        this.sock = held0 === undefined ? -1 : ++held0.sockets;
        this.on('message', (data: Buffer, isBinary: boolean) => {
          if (isBinary) return;
          const s = data.toString();
          if (!s.includes('"type":"event"')) {
            if (s.includes('"reason":"unavailable"')) unavailable();
            else if (s.startsWith('{"type":"welcome"')) {
              const held = h();
              const conn = /"connectionId":"([^"]+)"/.exec(s)?.[1];
              if (held !== undefined && conn !== undefined) {
                held.conn = conn;
                held.node = conn.slice(0, conn.indexOf('.'));
              }
            }
            return;
          }
          const f = wireEvent(s);
          const held = h();
          if (held === undefined || f === undefined) return;
          let w = held.wire.get(f.topic);
          if (w === undefined) held.wire.set(f.topic, (w = { ids: [], socks: [], at: [] }));
          w.ids.push(intern(f.id));
          w.socks.push(this.sock);
          w.at.push(Math.round(now()));
        });
      }

      override send(data: string): void {
        // Joins are kept (socket, topic, since) to explain a repeat on the wire.
        if (data.startsWith('{"type":"join"')) h()?.joins.push(`${this.sock}@${Math.round(now())}:${data}`);
        super.send(data);
      }
    };
  }

  /** Where each copy of a repeated wire id came from, and the joins of that topic: for the report. */
  private explain(h: Held, topic: string, id: string): string {
    const w = h.wire.get(topic);
    if (w === undefined) return '';
    const copies = w.ids.flatMap((x, i) => (x === id ? [`socket ${w.socks[i]} at ${w.at[i]} ms`] : []));
    const joins = h.joins.filter((j) => j.includes(JSON.stringify(topic))).map((j) => j.replace(/"ref":"[^"]*",/, '').replace(/"topic":"[^"]*",?/, ''));
    const downs = h.downs.map((d) => Math.round(d)).join(', ');
    return `copies: ${copies.join(', ')}; joins: ${joins.join(' ')}; downs at ${downs}`;
  }

  async connect(r: Extract<Request, { op: 'connect' }>): Promise<{ ready: number; failed: number; reasons: Record<string, number> }> {
    this.roles = r.roles;
    this.t0 = r.t0;
    this.watchStalls();
    const roles = r.roles;
    let ready = 0;
    let failed = 0;
    const reasons: Record<string, number> = {};
    const deadline = Date.now() + r.timeoutMs;
    let next = 0;
    await new Promise<void>((resolveAll) => {
      let inflight = 0;
      const pump = (): void => {
        while (inflight < r.concurrency && next < r.count) {
          if (Date.now() > deadline) { failed += r.count - next; this.count(reasons, 'not started in time'); next = r.count; break; }
          const local = next++;
          const index = r.idBase + local;
          inflight++;
          void this.start(index, r.urls, roles).then((why) => {
            inflight--;
            if (why === undefined) ready++; else { failed++; this.count(reasons, why); }
            pump();
          });
        }
        if (inflight === 0 && next >= r.count) resolveAll();
      };
      pump();
    });
    return { ready, failed, reasons };
  }

  /** Starts client `index`; resolves when it is connected and every subscription answered (undefined), or why not. */
  private start(index: number, urls: string[], roles: Roles): Promise<string | undefined> {
    const ref: { h?: Held } = {};
    const client = new SluiceClient({ url: urls, WebSocket: this.ctor(CLIENT_SOURCES[index % CLIENT_SOURCES.length]!, () => ref.h) });
    const h: Held = { index, client, subs: [], keyed: undefined, wire: new Map(), sockets: 0, joins: [], downs: [], ups: [], waits: [], node: undefined, conn: undefined, publisher: undefined, keyedPublisher: undefined };
    ref.h = h;
    this.held.push(h);
    const readies: Promise<unknown>[] = [];
    const addSub = (topic: string): Sub => {
      const sub: Sub = { topic, ids: [], keys: [], fence: 0, got: 0, lastAt: 0 };
      const s = client.subscribe(topic, (e) => {
        sub.got++;
        sub.lastAt = this.now();
        const d = e.data as { p?: unknown; n?: unknown; fence?: unknown } | null;
        if (typeof d === 'object' && d !== null && typeof d.fence === 'number') sub.fence = Math.max(sub.fence, d.fence);
        if (e.id !== undefined) {
          sub.ids.push(intern(e.id));
          if (typeof d === 'object' && d !== null && typeof d.p === 'number') sub.keys.push(intern(`${d.p}.${String(d.n)}`));
        } else this.keyedReceived++;
      });
      readies.push(s.ready);
      return sub;
    };
    const mine = topicsOf(roles, index);
    for (const k of mine) h.subs.push(addSub(durableTopic(roles, k)));
    if (roles.keyedEvery > 0 && index % roles.keyedEvery === 1 % roles.keyedEvery) h.keyed = addSub(keyedTopic(roles, Math.floor(index / roles.keyedEvery) % roles.keyedTopics));
    if (roles.publisherEvery > 0 && index % roles.publisherEvery === 0) {
      // Publishers spread evenly over the topics (not only their own): each topic's history stays well inside WS_HISTORY_SIZE.
      h.publisher = { topic: durableTopic(roles, Math.floor(index / roles.publisherEvery) % roles.topics), n: 0, nextAt: Infinity };
    }
    if (roles.keyedPublisherEvery > 0 && index % roles.keyedPublisherEvery === 2 % roles.keyedPublisherEvery) {
      h.keyedPublisher = { topic: keyedTopic(roles, Math.floor(index / roles.keyedPublisherEvery) % roles.keyedTopics), n: 0, nextAt: Infinity };
    }
    client.on('connected', () => { h.ups.push(this.now()); });
    client.on('disconnected', (e) => {
      h.downs.push(this.now());
      this.count(this.closeCodes, `${e.code}${e.reason === undefined ? '' : ` ${e.reason}`}`);
    });
    client.on('reconnecting', (e) => {
      h.waits.push(this.now(), e.inMs);
      if (e.status !== undefined) this.count(this.refusals, String(e.status));
    });
    client.on('recovered', (e) => {
      // A keyed feed has no durable event: it resumes from its join's position, or, when that join got none (Redis did not answer), rejoins without since, reported as recovered: false, since undefined.
      if (!e.recovered && e.topic === h.keyed?.topic && e.since === undefined) { this.keyedNoPosition++; return; }
      if (!e.recovered) {
        this.recoveredFalse++;
        if (this.odd.length < 10) this.odd.push(`client ${index}: ${e.topic} resumed from ${String(e.since)} with recovered: false`);
      }
    });
    client.on('error', (e) => this.count(this.errors, e.code));
    client.connect();
    return new Promise((resolve) => {
      let done = false;
      const t = setTimeout(() => { if (!done) { done = true; resolve('no connection and joins in 60 s'); } }, 60_000);
      void Promise.all(readies).then(() => { if (!done) { done = true; clearTimeout(t); resolve(undefined); } },
        (err: unknown) => { if (!done) { done = true; clearTimeout(t); resolve(`join failed: ${(err as Error).message}`); } });
    });
  }

  publishing(on: boolean): void {
    clearInterval(this.publishTimer);
    this.publishTimer = undefined;
    if (!on || this.roles === undefined) return;
    const roles = this.roles;
    const now = Date.now();
    for (const h of this.held) {
      // Spread evenly: each publisher starts at a random phase of its interval.
      if (h.publisher !== undefined) h.publisher.nextAt = now + Math.random() * roles.publishIntervalMs;
      if (h.keyedPublisher !== undefined) h.keyedPublisher.nextAt = now + Math.random() * roles.keyedIntervalMs;
    }
    this.publishTimer = setInterval(() => {
      const t = Date.now();
      for (const h of this.held) {
        const p = h.publisher;
        if (p !== undefined && p.nextAt <= t) {
          p.nextAt += roles.publishIntervalMs;
          const n = p.n++;
          const key = `${h.index}.${n}`;
          this.pending++;
          const sentAt = Math.round(this.now());
          h.client.publish(p.topic, { p: h.index, n }, { idempotencyKey: `${roles.run}.${key}` }).then((ack) => {
            this.pending--;
            if (ack.id !== undefined) this.acked.push({ topic: p.topic, id: ack.id, key, sentAt, ackAt: Math.round(this.now()), node: h.node });
            else this.count(this.rejected, 'acked without id');
          }, (err: { code?: string }) => { this.pending--; this.count(this.rejected, String(err.code)); });
        }
        const k = h.keyedPublisher;
        if (k !== undefined && k.nextAt <= t) {
          k.nextAt += roles.keyedIntervalMs;
          const n = k.n++;
          h.client.publish(k.topic, { p: h.index, n }, { key: `sym${n % roles.keysPerFeed}` }).catch(() => undefined);
        }
      }
    }, 50);
  }

  status(fence: number): Status {
    let open = 0;
    let closed = 0;
    let cold = 0;
    let fenceMissing = 0;
    let keyedFenceMissing = 0;
    let keyedSubscribers = 0;
    for (const h of this.held) {
      if (h.client.state === 'open') open++;
      if (h.client.state === 'closed') closed++;
      for (const s of h.subs) { if (s.got === 0) cold++; if (s.fence < fence) fenceMissing++; }
      if (h.keyed !== undefined) {
        keyedSubscribers++;
        if (h.keyed.got === 0) cold++;
        if (h.keyed.fence < fence) keyedFenceMissing++;
      }
    }
    return { clients: this.held.length, open, closed, pending: this.pending, acked: this.acked.length, cold, fenceMissing, keyedFenceMissing, keyedSubscribers };
  }

  /**
   * Keyed subscribers without the fence, for the report: grouped by node
   * and shard of their socket, and a few whole (their socket's connection
   * id, state, last (re)connect, and the joins they sent on the feed).
   */
  keyedStale(fence: number): { by: Record<string, number>; examples: string[] } {
    const by: Record<string, number> = {};
    const examples: string[] = [];
    for (const h of this.held) {
      const k = h.keyed;
      if (k === undefined || k.fence >= fence) continue;
      const where = h.conn === undefined ? '?' : h.conn.split('.').slice(0, 2).join('.');
      this.count(by, `${where} ${h.client.state}`);
      if (examples.length < 12) {
        const joins = h.joins.filter((j) => j.includes(JSON.stringify(k.topic))).slice(-3).map((j) => j.replace(/"ref":"[^"]*",/, '').replace(/"topic":"[^"]*",?/, ''));
        examples.push(`client ${h.index} on ${h.conn ?? '?'} (${h.client.state}, ${h.sockets} sockets, up at ${Math.round(h.ups.at(-1) ?? NaN)} ms, ` +
          `down at ${Math.round(h.downs.at(-1) ?? NaN)} ms): ${k.got} keyed events, the last at ${Math.round(k.lastAt)} ms; joins ${joins.join(' ')}`);
      }
    }
    return { by, examples };
  }

  verify(acked: Record<string, string[]>, lost: Record<string, string[]>): DeliveryCheck {
    const byTopic = new Map(Object.entries(acked).map(([t, ids]) => [t, new Set(ids)]));
    const lostByTopic = new Map(Object.entries(lost).map(([t, ids]) => [t, new Set(ids)]));
    const acc = emptyDeliveryCheck();
    for (const h of this.held) {
      for (const s of h.subs) {
        const before = acc.wireDuplicates;
        const wire = h.wire.get(s.topic)?.ids ?? [];
        checkSubscription(acc, byTopic, { client: h.index, topic: s.topic, ids: s.ids, keys: s.keys, wire }, lostByTopic);
        if (acc.wireDuplicates > before && this.explained.length < 10) {
          const seen = new Set<string>();
          const dup = wire.find((x) => (seen.has(x) ? true : (seen.add(x), false)))!;
          this.explained.push(`client ${h.index} ${s.topic} ${dup}: ${this.explain(h, s.topic, dup)}`);
        }
      }
    }
    acc.examples.unshift(...this.explained);
    return acc;
  }

  extras(): Extras {
    return {
      rejected: this.rejected, recoveredFalse: this.recoveredFalse, keyedNoPosition: this.keyedNoPosition, errors: this.errors, closeCodes: this.closeCodes,
      refusals: this.refusals, keyedReceived: this.keyedReceived, unavailable: this.unavailable, odd: this.odd,
    };
  }

  async close(): Promise<void> {
    this.publishing(false);
    await Promise.all(this.held.map((h) => h.client.close()));
  }
}

function childMain(): void {
  // A rejected publish or join is counted where it happens; nothing may end the process meanwhile.
  process.on('unhandledRejection', () => undefined);
  const c = new Clients();
  serveRequests<Request>('chaos clients', Number(process.env['CHAOS_CHILD_LIFETIME_MS'] ?? 30 * 60_000), async (r) => {
    switch (r.op) {
      case 'connect': return c.connect(r);
      case 'status': return c.status(r.fence);
      case 'publishing': c.publishing(r.on); return null;
      case 'acked': return { acked: c.acked, extras: c.extras() };
      case 'verify': return c.verify(r.acked, r.lost);
      case 'keyedStale': return c.keyedStale(r.fence);
      case 'timelines': return { clients: c.held.map((h) => ({ client: h.index, downs: h.downs, ups: h.ups, waits: h.waits })), stalls: c.stalls };
      case 'close': await c.close(); return null;
      case 'exit': return null;
    }
  // Status polls answer at once; everything else in order.
  }, (r) => r.op === 'status');
}

// ---- the orchestrator's side --------------------------------------------------------

const SELF = fileURLToPath(import.meta.url);

type FleetProc = RpcChild<Request>;

const startFleetProc = (index: number): Promise<FleetProc> => RpcChild.start<Request>(SELF, '--chaos-child', `chaos clients ${index}`);

function sumStatus(xs: readonly Status[]): Status {
  const out: Status = { clients: 0, open: 0, closed: 0, pending: 0, acked: 0, cold: 0, fenceMissing: 0, keyedFenceMissing: 0, keyedSubscribers: 0 };
  for (const x of xs) for (const k of Object.keys(out) as (keyof Status)[]) out[k] += x[k];
  return out;
}

function mergeCounts(parts: ReadonlyArray<Record<string, number>>): Record<string, number> {
  const m: Record<string, number> = {};
  for (const p of parts) for (const [k, v] of Object.entries(p)) m[k] = (m[k] ?? 0) + v;
  return m;
}

/** The client processes, as one. */
export class Fleet {
  private constructor(readonly procs: readonly FleetProc[], readonly counts: readonly number[]) {}

  static async start(clients: number, procs: number): Promise<Fleet> {
    const n = Math.max(procs, Math.ceil(clients / PER_PROC_MAX));
    const started = await Promise.allSettled(Array.from({ length: n }, (_, i) => startFleetProc(i)));
    const ok = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const bad = started.find((s) => s.status === 'rejected');
    if (bad !== undefined) {
      for (const p of ok) p.killNow();
      throw (bad as PromiseRejectedResult).reason as Error;
    }
    const counts = Array.from({ length: n }, (_, i) => Math.floor(clients / n) + (i < clients % n ? 1 : 0));
    process.once('exit', () => { for (const p of ok) p.killNow(); });
    return new Fleet(ok, counts);
  }

  async connect(urls: string[], roles: Roles, concurrency: number, t0: number): Promise<{ ready: number; failed: number; reasons: Record<string, number> }> {
    const rs = await Promise.all(this.procs.map((p, i) => p.call<{ ready: number; failed: number; reasons: Record<string, number> }>({
      op: 'connect', urls, count: this.counts[i]!, idBase: this.counts.slice(0, i).reduce((x, y) => x + y, 0), roles, concurrency, timeoutMs: 120_000, t0,
    }, 240_000)));
    return { ready: rs.reduce((x, r) => x + r.ready, 0), failed: rs.reduce((x, r) => x + r.failed, 0), reasons: mergeCounts(rs.map((r) => r.reasons)) };
  }

  async status(fence = 0): Promise<Status> {
    return sumStatus(await Promise.all(this.procs.map((p) => p.call<Status>({ op: 'status', fence }, 10_000))));
  }

  async publishing(on: boolean): Promise<void> {
    await Promise.all(this.procs.map((p) => p.call({ op: 'publishing', on }, 10_000)));
  }

  async acked(): Promise<{ acked: Acked[]; extras: Extras }> {
    const rs = await Promise.all(this.procs.map((p) => p.call<{ acked: Acked[]; extras: Extras }>({ op: 'acked' }, 30_000)));
    const ex = rs.map((r) => r.extras);
    return {
      acked: rs.flatMap((r) => r.acked),
      extras: {
        rejected: mergeCounts(ex.map((e) => e.rejected)), recoveredFalse: ex.reduce((x, e) => x + e.recoveredFalse, 0),
        keyedNoPosition: ex.reduce((x, e) => x + e.keyedNoPosition, 0),
        errors: mergeCounts(ex.map((e) => e.errors)), closeCodes: mergeCounts(ex.map((e) => e.closeCodes)),
        refusals: mergeCounts(ex.map((e) => e.refusals)), keyedReceived: ex.reduce((x, e) => x + e.keyedReceived, 0),
        unavailable: ex.reduce((x, e) => x + e.unavailable, 0),
        odd: ex.flatMap((e) => e.odd).slice(0, 10),
      },
    };
  }

  /**
   * Every subscriber's check against the acked ids by topic; `lost`, those missing from history, are counted apart.
   * The wait grows with the ids sent: a 2-hour soak's 285,028 (to each of 4 processes, together holding 7.6 GiB of
   * deliveries on 2 cores) did not get through in 60 s. One process with that soak's share (2475 clients, 2 topics
   * each, 5700 events a topic) checks in 18 s alone on this box; four at once on 2 cores and their heaps' collections
   * take a few times that: 1 s more per 500 ids, a bound against a hang, not an expected time.
   */
  async verify(acked: Record<string, string[]>, lost: Record<string, string[]> = {}): Promise<DeliveryCheck[]> {
    let ids = 0;
    for (const list of Object.values(acked)) ids += list.length;
    const waitMs = 60_000 + Math.ceil(ids / 500) * 1000;
    return Promise.all(this.procs.map((p) => p.call<DeliveryCheck>({ op: 'verify', acked, lost }, waitMs)));
  }

  async keyedStale(fence: number): Promise<{ by: Record<string, number>; examples: string[] }> {
    const rs = await Promise.all(this.procs.map((p) => p.call<{ by: Record<string, number>; examples: string[] }>({ op: 'keyedStale', fence }, 30_000)));
    return { by: mergeCounts(rs.map((r) => r.by)), examples: rs.flatMap((r) => r.examples).slice(0, 12) };
  }

  /** Every client's losses, returns and scheduled waits, and each client process's event-loop stalls. */
  async timelines(): Promise<{ clients: ClientTimeline[]; stalls: number[][] }> {
    const rs = await Promise.all(this.procs.map((p) => p.call<{ clients: ClientTimeline[]; stalls: number[] }>({ op: 'timelines' }, 30_000)));
    return { clients: rs.flatMap((r) => r.clients), stalls: rs.map((r) => r.stalls) };
  }

  async close(): Promise<void> {
    await Promise.all(this.procs.map((p) => p.call({ op: 'close' }, 30_000).catch(() => undefined)));
  }

  async exit(): Promise<void> {
    await Promise.all(this.procs.map((p) => p.exit()));
  }
}

if (process.argv.includes('--chaos-child') && process.argv[1] !== undefined && pathToFileURL(process.argv[1]).href === import.meta.url) childMain();
