// S16's load process (issue 20): holds up to ~17k raw sockets (one fd each,
// under the 20,000 open-file limit) from the loopback source addresses it is
// given, joins each to the big topic, its room and its feed, checks every
// durable event's sequence number per subscription, stamps latency from the
// `t` in each event's data, and reconnects a socket whose node closed it, as
// a client SDK would: after the close's retryAfterMs (1012 of a drain), to
// the node restarted last (a least-connections balancer's pick) or the next
// one up, rejoining the durable topics with `since` = the last id it got
// (or, before any event, the position its join's reply gave).
// One process of the run is the publisher instead: a few sockets publishing
// durable events with idempotency keys (resent after a reconnect until
// acknowledged) and keyed feed updates, at the rates it is told.
//
// Run by the orchestrator (scenarios/scale.ts) with --scale-child; answers
// over IPC (lib/child-rpc.ts); exits when the orchestrator goes away.

import { fileURLToPath, pathToFileURL } from 'node:url';
import { RawConn, type ConnHandlers, type Target } from '../lib/conn.ts';
import { Kind, S_BASE, T_BASE, encodeClientFrame, eventDataPos, eventS, eventT, indexWithin, replyRefChar } from '../lib/codec.ts';
import { stampNow } from '../lib/clock.ts';
import { encodeHistogram, newHistogram, type Histogram } from '../lib/hist.ts';
import { serveRequests } from '../lib/child-rpc.ts';
import { openFileLimit } from '../lib/proc.ts';
import { BIG_TOPIC, SeqTrack, feedTopic, nodeOf, reconnectNode, roomTopic, topicsOf, type Mix, type Rates } from '../scenarios/scale-plan.ts';

export interface Nodes {
  /** Each node's WebSocket port (a restarted node listens on a new one). */
  readonly ports: readonly number[];
  /** Whether a client may connect to it (false from just before its SIGTERM until it is back). */
  readonly up: readonly boolean[];
  /** The node restarted last, where dropped clients go first; -1: none. */
  readonly prefer: number;
}

export type ScaleRequest =
  | { op: 'setup'; mix: Mix; idBase: number; count: number; sources: string[]; nodes: Nodes; concurrency: number; timeoutMs: number }
  | { op: 'publisher'; mix: Mix; sockets: number; size: number; nodes: Nodes; timeoutMs: number }
  | { op: 'nodes'; nodes: Nodes }
  | { op: 'rates'; rates: Rates }
  | { op: 'status' }
  | { op: 'mark' }
  | { op: 'pubStatus' }
  | { op: 'drainPublishes'; timeoutMs: number }
  | { op: 'verify'; bigPublished: number; roomPublished: number[]; unackedBig: number[]; unackedRoom: Record<string, number[]> }
  | { op: 'exit' };

export interface SetupResult {
  subscribed: number;
  failed: number;
  reasons: Record<string, number>;
  elapsedMs: number;
  /** Socket start to its third join's reply, µs, HDR base64. */
  hist: string;
}

export interface ScaleStatus {
  sockets: number;
  /** Deliveries so far (every class). */
  delivered: number;
  subscribed: number;
  /** Subscribed sockets per node. */
  perNode: number[];
  /** Sockets bound to each source address now (open or opening). */
  perSource: Record<string, number>;
  closes: Record<string, number>;
  reconnects: number;
  joinErrors: Record<string, number>;
  recoveredFalse: number;
}

export interface ScaleMark {
  /** Cumulative deliveries, by class. */
  big: number;
  room: number;
  feed: number;
  /** Since the previous mark: every delivery's latency, and the big topic's alone, µs, HDR base64. */
  hist: string;
  bigHist: string;
}

export interface PubStatus {
  sent: { big: number; room: number; feed: number };
  acked: { big: number; room: number; feed: number };
  pending: number;
  errors: Record<string, number>;
  resent: number;
  /** Publish to its reply, µs, HDR base64, since the previous pubStatus. */
  ackHist: string;
}

export interface PubFinal {
  bigPublished: number;
  roomPublished: number[];
  unackedBig: number[];
  unackedRoom: Record<string, number[]>;
  unackedFeed: number;
  status: PubStatus;
}

export interface VerifyResult {
  subscriptions: number;
  /** (subscription, acknowledged event) pairs never received. */
  lost: number;
  lostExamples: string[];
  duplicates: number;
  /** Events that came after a later one (filled a gap). */
  late: number;
  /** Keyed feed updates skipped (allowed: a keyed feed keeps the latest value, and a rejoin has no `since`). */
  feedSkipped: number;
}

const HOST = '127.0.0.1';
const TOPIC_AT = '{"type":"event","topic":"'.length;
const C_b = 98, C_r = 114, C_f = 102, C_QUOTE = 34, C_i = 105;
const RECOVERED_FALSE = Buffer.from('"recovered":false');
const POSITION = Buffer.from('"position":"');
const RETRY_AFTER = /"retryAfterMs":(\d+)/;

const J_BIG = 1, J_ROOM = 2, J_FEED = 4, J_ALL = 7;

function count(m: Record<string, number>, k: string): void {
  m[k] = (m[k] ?? 0) + 1;
}

/** The close's category, for counting: `1012` (drain), `1006`/`closed by peer`, an errno. */
function closeKind(why: string): string {
  const m = /^ws close (\d+)/.exec(why);
  if (m !== null) return `ws ${m[1]}`;
  return why.slice(0, 60);
}

/** How long to wait before reconnecting: the close's retryAfterMs (1012, 4000, ...), else a jittered backoff. */
function reconnectDelay(why: string, attempts: number): number {
  const m = RETRY_AFTER.exec(why);
  if (m !== null) return Number(m[1]);
  return Math.min(5000, 250 * 2 ** Math.min(attempts, 4)) * (0.5 + Math.random());
}

class Sub {
  conn: RawConn | null = null;
  node = -1;
  subscribed = false;
  joined = 0;
  attempts = 0;
  startedAt = 0;
  bigId = '';
  roomId = '';
  readonly big = new SeqTrack();
  readonly roomSeq = new SeqTrack();
  feedLast = -1;
  feedSkipped = 0;
  constructor(readonly index: number, readonly room: number, readonly feed: number, readonly source: string) {}
}

class Subscribers implements ConnHandlers {
  subs: Sub[] = [];
  nodes: Nodes = { ports: [], up: [], prefer: -1 };
  /** Sockets waiting for a connection, oldest first (`head`: the next to take). */
  private queue: number[] = [];
  private head = 0;
  private inflight = 0;
  private concurrency = 200;
  subscribedCount = 0;
  private perSource: Record<string, number> = {};
  closes: Record<string, number> = {};
  joinErrors: Record<string, number> = {};
  recoveredFalse = 0;
  reconnects = 0;
  private setupWaiter: (() => void) | null = null;
  private connectHist: Histogram = newHistogram();
  private counts = { big: 0, room: 0, feed: 0 };
  private hist: Histogram = newHistogram();
  private bigHist: Histogram = newHistogram();
  private joinFrames = new Map<string, Buffer>();

  setup(r: Extract<ScaleRequest, { op: 'setup' }>): Promise<SetupResult> {
    const limit = openFileLimit().soft;
    if (r.count + 64 > limit) return Promise.reject(new Error(`open-file limit ${limit} is too low for ${r.count} sockets in one process`));
    this.nodes = r.nodes;
    this.concurrency = r.concurrency;
    for (let k = 0; k < r.count; k++) {
      const i = r.idBase + k;
      const t = topicsOf(r.mix, i);
      this.subs.push(new Sub(i, t.room, t.feed, r.sources[i % r.sources.length]!));
      this.queue.push(k);
    }
    const t0 = performance.now();
    return new Promise((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        this.setupWaiter = null;
        const reasons: Record<string, number> = { ...this.closes };
        resolve({
          subscribed: this.subscribedCount, failed: this.subs.length - this.subscribedCount, reasons,
          elapsedMs: Math.round(performance.now() - t0), hist: encodeHistogram(this.connectHist),
        });
      };
      const timer = setTimeout(finish, r.timeoutMs);
      this.setupWaiter = () => { if (this.subscribedCount >= this.subs.length) finish(); };
      this.pump();
    });
  }

  private pump(): void {
    while (this.inflight < this.concurrency && this.head < this.queue.length) {
      const k = this.queue[this.head++]!;
      if (this.head > 4096 && this.head * 2 > this.queue.length) { this.queue = this.queue.slice(this.head); this.head = 0; }
      const s = this.subs[k]!;
      const node = s.node === -1 ? nodeOf(s.index, this.nodes.ports.length) : reconnectNode(this.nodes.up, this.nodes.prefer, s.node, s.index + s.attempts);
      if (node === -1 || this.nodes.up[node] !== true) {
        // Nowhere to go now: try again shortly.
        setTimeout(() => { this.queue.push(k); this.pump(); }, 200);
        continue;
      }
      this.open(k, s, node);
    }
  }

  private open(k: number, s: Sub, node: number): void {
    const target: Target = { host: HOST, port: this.nodes.ports[node]!, proto: 'sluice' };
    s.node = node;
    s.joined = 0;
    s.startedAt = performance.now();
    this.inflight++;
    this.perSource[s.source] = (this.perSource[s.source] ?? 0) + 1;
    s.conn = new RawConn(k, target, this, s.source);
  }

  private joinFrame(topic: string, ref: string, since: string): Buffer {
    if (since !== '') return encodeClientFrame(`{"type":"join","ref":"${ref}","topic":"${topic}","since":"${since}"}`).bytes;
    const key = `${ref}:${topic}`;
    let f = this.joinFrames.get(key);
    if (f === undefined) {
      f = encodeClientFrame(`{"type":"join","ref":"${ref}","topic":"${topic}"}`).bytes;
      if (this.joinFrames.size < 20_000) this.joinFrames.set(key, f);
    }
    return f;
  }

  private sendJoins(s: Sub, c: RawConn, which: number): void {
    if ((which & J_BIG) !== 0) c.send(this.joinFrame(BIG_TOPIC, 'b', s.bigId));
    if ((which & J_ROOM) !== 0) c.send(this.joinFrame(roomTopic(s.room), 'r', s.roomId));
    if ((which & J_FEED) !== 0) c.send(this.joinFrame(feedTopic(s.feed), 'f', ''));
  }

  ready(c: RawConn): void {
    const s = this.subs[c.id]!;
    if (s.conn !== c) return;
    this.sendJoins(s, c, J_ALL);
  }

  frame(c: RawConn, kind: Kind, buf: Buffer, st: number, e: number, now: number): void {
    if (kind === Kind.Event) { this.onEvent(c, buf, st, e, now); return; }
    if (kind !== Kind.ReplyOk && kind !== Kind.ReplyErr) return;
    const s = this.subs[c.id]!;
    if (s.conn !== c) return;
    const r = replyRefChar(buf, st, e);
    const bit = r === 'b' ? J_BIG : r === 'r' ? J_ROOM : r === 'f' ? J_FEED : 0;
    if (bit === 0) return;
    if (kind === Kind.ReplyErr) {
      const m = /"reason":"([^"]*)"/.exec(buf.toString('utf8', st, Math.min(e, st + 300)));
      count(this.joinErrors, m?.[1] ?? 'error');
      setTimeout(() => { if (s.conn === c && c.state === 'ready') this.sendJoins(s, c, bit); }, 500);
      return;
    }
    if (indexWithin(buf, RECOVERED_FALSE, st, e) !== -1) this.recoveredFalse++;
    // A join without since answers the topic's position: the resume point
    // until the first event (as the SDK keeps it), so a rejoin before any
    // event still gets everything published after this join.
    if (bit !== J_FEED && (bit === J_BIG ? s.bigId : s.roomId) === '') {
      const p = indexWithin(buf, POSITION, st, e);
      if (p !== -1) {
        const a = p + POSITION.length;
        const b = buf.indexOf(C_QUOTE, a);
        if (b !== -1 && b < e) {
          if (bit === J_BIG) s.bigId = buf.toString('latin1', a, b);
          else s.roomId = buf.toString('latin1', a, b);
        }
      }
    }
    if ((s.joined & bit) !== 0) return;
    s.joined |= bit;
    if (s.joined !== J_ALL) return;
    s.subscribed = true;
    s.attempts = 0;
    this.subscribedCount++;
    this.inflight--;
    this.connectHist.recordValue(Math.max(1, Math.round((performance.now() - s.startedAt) * 1000)));
    this.setupWaiter?.();
    this.pump();
  }

  private onEvent(c: RawConn, buf: Buffer, st: number, e: number, now: number): void {
    const s = this.subs[c.id]!;
    if (s.conn !== c) return;
    const c0 = buf[st + TOPIC_AT];
    const q = buf.indexOf(C_QUOTE, st + TOPIC_AT);
    if (q === -1 || q >= e) return;
    let from = q;
    let id = '';
    if (buf[q + 3] === C_i) {
      const a = q + 8;
      const b = buf.indexOf(C_QUOTE, a);
      if (b === -1 || b >= e) return;
      id = buf.toString('latin1', a, b);
      from = b;
    }
    const pos = eventDataPos(buf, from, e);
    if (pos === -1) return;
    const t = eventT(buf, pos, e);
    const seq = eventS(buf, pos, e) - S_BASE;
    if (t > T_BASE) {
      const us = Math.max(1, now - (t - T_BASE));
      this.hist.recordValue(us);
      if (c0 === C_b) this.bigHist.recordValue(us);
    }
    if (c0 === C_b) {
      this.counts.big++;
      s.bigId = id;
      s.big.see(seq);
    } else if (c0 === C_r) {
      this.counts.room++;
      s.roomId = id;
      s.roomSeq.see(seq);
    } else if (c0 === C_f) {
      this.counts.feed++;
      if (seq > s.feedLast + 1 && s.feedLast >= 0) s.feedSkipped += seq - s.feedLast - 1;
      if (seq > s.feedLast) s.feedLast = seq;
    }
  }

  flush(): void { /* nothing batched */ }

  closed(c: RawConn, why: string): void {
    const k = c.id;
    const s = this.subs[k]!;
    if (s.conn !== c) return;
    s.conn = null;
    this.perSource[s.source] = (this.perSource[s.source] ?? 1) - 1;
    if (s.subscribed) { s.subscribed = false; this.subscribedCount--; } else this.inflight--;
    count(this.closes, closeKind(why));
    if (exiting) return;
    this.reconnects++;
    const delay = reconnectDelay(why, s.attempts++);
    setTimeout(() => { this.queue.push(k); this.pump(); }, delay);
    this.pump();
  }

  status(): ScaleStatus {
    const perNode = this.nodes.ports.map(() => 0);
    for (const s of this.subs) if (s.subscribed) perNode[s.node]!++;
    return {
      sockets: this.subs.length, delivered: this.counts.big + this.counts.room + this.counts.feed, subscribed: this.subscribedCount, perNode, perSource: { ...this.perSource }, closes: { ...this.closes },
      reconnects: this.reconnects, joinErrors: { ...this.joinErrors }, recoveredFalse: this.recoveredFalse,
    };
  }

  mark(): ScaleMark {
    const out: ScaleMark = { ...this.counts, hist: encodeHistogram(this.hist), bigHist: encodeHistogram(this.bigHist) };
    this.hist = newHistogram();
    this.bigHist = newHistogram();
    return out;
  }

  verify(r: Extract<ScaleRequest, { op: 'verify' }>): VerifyResult {
    const unackedBig = new Set(r.unackedBig);
    const unackedRoom = new Map(Object.entries(r.unackedRoom).map(([k, v]) => [Number(k), new Set(v)]));
    const out: VerifyResult = { subscriptions: 0, lost: 0, lostExamples: [], duplicates: 0, late: 0, feedSkipped: 0 };
    const note = (s: Sub, topic: string, lost: number[]): void => {
      out.lost += lost.length;
      if (lost.length > 0 && out.lostExamples.length < 5) out.lostExamples.push(`socket ${s.index} ${topic}: seq ${lost.slice(0, 5).join(',')}${lost.length > 5 ? ` (+${lost.length - 5})` : ''}`);
    };
    for (const s of this.subs) {
      out.subscriptions += 2;
      note(s, BIG_TOPIC, s.big.lost(r.bigPublished, unackedBig));
      note(s, roomTopic(s.room), s.roomSeq.lost(r.roomPublished[s.room] ?? 0, unackedRoom.get(s.room)));
      out.duplicates += s.big.duplicates + s.roomSeq.duplicates;
      out.late += s.big.late + s.roomSeq.late;
      out.feedSkipped += s.feedSkipped;
    }
    return out;
  }
}

// ---- the publisher -------------------------------------------------------------------

interface Pending {
  readonly frame: Buffer;
  readonly kind: 'big' | 'room' | 'feed';
  readonly topic: number;
  readonly seq: number;
  sentAt: number;
}

class PubSock {
  conn: RawConn | null = null;
  node = -1;
  ready = false;
  attempts = 0;
  /** Sent or to be sent, not yet acknowledged; insertion order = send order. */
  readonly pending = new Map<string, Pending>();
  constructor(readonly index: number) {}
}

class Publisher implements ConnHandlers {
  socks: PubSock[] = [];
  nodes: Nodes = { ports: [], up: [], prefer: -1 };
  mix: Mix = { sockets: 0, roomSize: 1, feeds: 1 };
  private pad = '';
  private bigSeq = 0;
  private roomSeq = new Int32Array(0);
  private feedSeq = new Int32Array(0);
  private roomNext = 0;
  private feedNext = 0;
  private rates: Rates = { big: 0, room: 0, feed: 0 };
  private rateT0 = 0;
  private due = { big: 0, room: 0, feed: 0 };
  private timer: NodeJS.Timeout | undefined;
  private sent = { big: 0, room: 0, feed: 0 };
  private acked = { big: 0, room: 0, feed: 0 };
  private errors: Record<string, number> = {};
  private resent = 0;
  private ackHist: Histogram = newHistogram();

  start(r: Extract<ScaleRequest, { op: 'publisher' }>): Promise<number> {
    this.nodes = r.nodes;
    this.mix = r.mix;
    const roomsN = Math.ceil(r.mix.sockets / r.mix.roomSize);
    this.roomSeq = new Int32Array(roomsN);
    this.feedSeq = new Int32Array(r.mix.feeds);
    // data: {"t":<15>,"s":<10>,"p":"x..."} of `size` bytes.
    this.pad = 'x'.repeat(Math.max(0, r.size - `{"t":${T_BASE},"s":${S_BASE},"p":""}`.length));
    for (let p = 0; p < r.sockets; p++) {
      const ps = new PubSock(p);
      this.socks.push(ps);
      this.open(ps, p % r.nodes.ports.length);
    }
    const t0 = performance.now();
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.socks.every((s) => s.ready)) { resolve(this.socks.length); return; }
        if (performance.now() - t0 > r.timeoutMs) { reject(new Error('publisher sockets not ready in time')); return; }
        setTimeout(check, 50);
      };
      check();
    });
  }

  private open(ps: PubSock, node: number): void {
    ps.node = node;
    ps.ready = false;
    ps.conn = new RawConn(ps.index, { host: HOST, port: this.nodes.ports[node]!, proto: 'sluice' }, this);
  }

  ready(c: RawConn): void {
    const ps = this.socks[c.id]!;
    if (ps.conn !== c) return;
    ps.ready = true;
    ps.attempts = 0;
    // Everything not acknowledged, again, in order: a durable publish with its idempotency key is answered with the first id if it was stored.
    const now = performance.now();
    for (const p of ps.pending.values()) {
      if (p.sentAt > 0) this.resent++;
      p.sentAt = now;
      c.send(p.frame);
    }
  }

  frame(c: RawConn, kind: Kind, buf: Buffer, s: number, e: number): void {
    if (kind !== Kind.ReplyOk && kind !== Kind.ReplyErr) return;
    const ps = this.socks[c.id]!;
    const text = buf.toString('utf8', s, e);
    const ref = /"ref":"([^"]*)"/.exec(text)?.[1];
    if (ref === undefined) return;
    const p = ps.pending.get(ref);
    if (p === undefined) return;
    if (kind === Kind.ReplyOk) {
      ps.pending.delete(ref);
      this.acked[p.kind]++;
      this.ackHist.recordValue(Math.max(1, Math.round((performance.now() - p.sentAt) * 1000)));
      return;
    }
    count(this.errors, /"reason":"([^"]*)"/.exec(text)?.[1] ?? 'error');
    // Refused (unavailable while Redis or a node is busy): sent again shortly, with the same key.
    setTimeout(() => {
      if (ps.conn === c && ps.ready && ps.pending.has(ref)) { this.resent++; p.sentAt = performance.now(); c.send(p.frame); }
    }, 250);
  }

  flush(): void { /* nothing batched */ }

  closed(c: RawConn, why: string): void {
    const ps = this.socks[c.id]!;
    if (ps.conn !== c) return;
    ps.conn = null;
    ps.ready = false;
    count(this.errors, `closed: ${closeKind(why)}`);
    if (exiting) return;
    const retry = (): void => {
      const node = reconnectNode(this.nodes.up, this.nodes.prefer, ps.node, ps.index + ps.attempts);
      if (node === -1) { setTimeout(retry, 200); return; }
      this.open(ps, node);
    };
    setTimeout(retry, reconnectDelay(why, ps.attempts++));
  }

  setRates(r: Rates): void {
    this.rates = r;
    this.rateT0 = performance.now();
    this.due = { big: 0, room: 0, feed: 0 };
    clearInterval(this.timer);
    this.timer = undefined;
    if (r.big + r.room + r.feed <= 0) return;
    this.timer = setInterval(() => this.tick(), 10);
    this.tick();
  }

  private tick(): void {
    const el = (performance.now() - this.rateT0) / 1000;
    const n = (k: 'big' | 'room' | 'feed'): number => Math.floor(el * this.rates[k]) + (this.rates[k] > 0 ? 1 : 0) - this.due[k];
    for (let i = n('big'); i > 0; i--) { this.due.big++; this.publish('big', 0, this.bigSeq++); }
    for (let i = n('room'); i > 0; i--) {
      this.due.room++;
      const k = this.roomNext;
      this.roomNext = (k + 1) % this.roomSeq.length;
      this.publish('room', k, this.roomSeq[k]!++);
    }
    for (let i = n('feed'); i > 0; i--) {
      this.due.feed++;
      const k = this.feedNext;
      this.feedNext = (k + 1) % this.feedSeq.length;
      this.publish('feed', k, this.feedSeq[k]!++);
    }
  }

  private publish(kind: 'big' | 'room' | 'feed', topic: number, seq: number): void {
    const ps = this.socks[kind === 'big' ? 0 : topic % this.socks.length]!;
    const ref = `${kind[0]}${topic}.${seq}`;
    const name = kind === 'big' ? BIG_TOPIC : kind === 'room' ? roomTopic(topic) : feedTopic(topic);
    const data = `{"t":${stampNow()},"s":${S_BASE + seq},"p":"${this.pad}"}`;
    const tail = kind === 'feed' ? `,"key":"k${seq % 8}"` : `,"idempotencyKey":"${ref}"`;
    const frame = encodeClientFrame(`{"type":"publish","ref":"${ref}","topic":"${name}","data":${data}${tail}}`).bytes;
    const p: Pending = { frame, kind, topic, seq, sentAt: 0 };
    ps.pending.set(ref, p);
    this.sent[kind]++;
    if (ps.ready && ps.conn !== null) { p.sentAt = performance.now(); ps.conn.send(frame); }
  }

  status(): PubStatus {
    let pending = 0;
    for (const s of this.socks) pending += s.pending.size;
    const out: PubStatus = {
      sent: { ...this.sent }, acked: { ...this.acked }, pending, errors: { ...this.errors }, resent: this.resent, ackHist: encodeHistogram(this.ackHist),
    };
    this.ackHist = newHistogram();
    return out;
  }

  /** Stops publishing, waits (up to timeoutMs) for every publish's ack, and says what was published and what never got its ack. */
  async finish(timeoutMs: number): Promise<PubFinal> {
    this.setRates({ big: 0, room: 0, feed: 0 });
    const t0 = performance.now();
    while (performance.now() - t0 < timeoutMs && this.socks.some((s) => s.pending.size > 0)) await new Promise((r) => setTimeout(r, 100));
    const unackedBig: number[] = [];
    const unackedRoom: Record<string, number[]> = {};
    let unackedFeed = 0;
    for (const s of this.socks) {
      for (const p of s.pending.values()) {
        if (p.kind === 'big') unackedBig.push(p.seq);
        else if (p.kind === 'room') (unackedRoom[String(p.topic)] ??= []).push(p.seq);
        else unackedFeed++;
      }
    }
    return { bigPublished: this.bigSeq, roomPublished: Array.from(this.roomSeq), unackedBig, unackedRoom, unackedFeed, status: this.status() };
  }
}

let exiting = false;

function childMain(): void {
  process.on('unhandledRejection', () => undefined);
  const subs = new Subscribers();
  const pub = new Publisher();
  serveRequests<ScaleRequest>('scale load', Number(process.env['SCALE_CHILD_LIFETIME_MS'] ?? 60 * 60_000), async (r) => {
    switch (r.op) {
      case 'setup': return subs.setup(r);
      case 'publisher': return pub.start(r);
      case 'nodes': subs.nodes = r.nodes; pub.nodes = r.nodes; return null;
      case 'rates': pub.setRates(r.rates); return null;
      case 'status': return subs.status();
      case 'mark': return subs.mark();
      case 'pubStatus': return pub.status();
      case 'drainPublishes': return pub.finish(r.timeoutMs);
      case 'verify': return subs.verify(r);
      case 'exit': exiting = true; return null;
    }
  }, (r) => r.op !== 'setup' && r.op !== 'publisher' && r.op !== 'drainPublishes');
}

const SELF = fileURLToPath(import.meta.url);
export const SCALE_CHILD = SELF;

if (process.argv.includes('--scale-child') && process.argv[1] !== undefined && pathToFileURL(process.argv[1]).href === import.meta.url) childMain();
