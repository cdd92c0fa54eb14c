// One load-generator process. It holds at most ~15k sockets (the open-file
// limit is 20000 per process), runs whatever the orchestrator asks over IPC,
// and exits by itself when the orchestrator goes away or its lifetime ends.

import { RawConn, teardownDeferred, type ConnHandlers, type Target } from '../lib/conn.ts';
import {
  Kind, S_BASE, S_WIDTH, T_BASE, T_WIDTH, encodeClientFrame, eventDataPos, eventS, eventT, joinFrame, patchDigits, publishTemplate, replyRef,
  type PublishTemplate,
} from '../lib/codec.ts';
import { monoUs, stampNow } from '../lib/clock.ts';
import { tokenFor } from '../lib/jwt.ts';
import { encodeHistogram, newHistogram, type Histogram } from '../lib/hist.ts';
import { openFileLimit } from '../lib/proc.ts';
import type {
  ChildEvent, ClosesResult, ConnectResult, Envelope, JoinResult, MarkResult, RefreshResult, Request, Response, StopResult, UnstallResult,
} from './messages.ts';

const LIFETIME_MS = Number(process.env['LOADGEN_LIFETIME_MS'] ?? 15 * 60_000);
setTimeout(() => {
  process.stderr.write(`loadgen ${process.pid}: lifetime of ${LIFETIME_MS} ms over, exiting\n`);
  process.exit(3);
}, LIFETIME_MS).unref();
process.on('disconnect', () => process.exit(0));

type Phase = 'idle' | 'connect' | 'join' | 'pump' | 'track' | 'publish' | 'stopping' | 'stalled' | 'watch' | 'refresh';

const RING = 1 << 14;
const RING_MASK = RING - 1;

class Generator implements ConnHandlers {
  conns: RawConn[] = [];
  phase: Phase = 'idle';
  hist: Histogram = newHistogram();
  replies = 0;
  replyErrors = 0;
  events = 0;
  publishes = 0;
  gaps = 0;
  duplicates = 0;
  closedAfterReady = 0;
  closeReasons: Record<string, number> = {};

  // S7: closes seen since watchCloses
  private watched: ClosesResult = { atUs: [], codes: [], retryAfterMs: [], other: {}, open: 0 };

  // connect phase
  private connectReasons: Record<string, number> = {};
  private connectFailed = 0;
  private connectReady = 0;
  private connectPending = 0;
  private connectDone: (() => void) | null = null;
  private startNext: (() => void) | null = null;

  // tokens signed ahead for the next connect (socket id -> JWT)
  private upgradeTokens = new Map<number, string>();

  // refresh phase (S11)
  private refreshOk = 0;
  private refreshErrors = 0;
  private refreshErrorSamples: string[] = [];
  private refreshAwaiting = 0;
  private refreshNext: (() => void) | null = null;

  // join phase
  private joined = 0;
  private joinErrors = 0;
  private joinDone: (() => void) | null = null;

  // pump / publish
  private template: Map<RawConn, PublishTemplate> = new Map();
  private depth = 1;
  private frameLen = 0;
  private stopWaiter: (() => void) | null = null;

  // fan-out tracking
  private ring = new Uint32Array(RING);
  private full = -1;
  private trackSubs = 0;
  private progressScheduled = false;

  // publisher
  private pub: RawConn | null = null;
  private pubTemplate: PublishTemplate | null = null;
  private nextSeq = 0;
  private creditUpTo = -1;

  ready(c: RawConn): void {
    if (this.phase !== 'connect') return;
    this.connectReady++;
    this.hist.recordValue(Math.max(1, c.readyAt - c.startedAt));
    this.connectPending--;
    this.startNext?.();
  }

  closed(c: RawConn, why: string): void {
    if (c.readyAt === 0) {
      // Failed before ready: a connect failure.
      this.connectFailed++;
      this.connectReasons[why] = (this.connectReasons[why] ?? 0) + 1;
      this.connectPending--;
      this.startNext?.();
      return;
    }
    if (this.phase === 'idle') return; // our own reset
    if (this.phase === 'watch') this.recordClose(why);
    this.closedAfterReady++;
    this.closeReasons[why] = (this.closeReasons[why] ?? 0) + 1;
    c.inFlight = 0;
    if (c.refreshSentAt !== 0) {
      c.refreshSentAt = 0;
      this.refreshAwaiting--;
      this.refreshNext?.();
    }
    this.checkStopped();
  }

  frame(c: RawConn, kind: Kind, buf: Buffer, s: number, e: number, now: number): void {
    switch (this.phase) {
      case 'pump':
      case 'stopping':
      case 'publish':
        if (kind === Kind.ReplyOk || kind === Kind.ReplyErr) {
          if (kind === Kind.ReplyOk) {
            this.replies++;
            const ref = replyRef(c.target.proto, buf, s, e);
            if (ref > T_BASE) this.hist.recordValue(Math.max(1, now - (ref - T_BASE)));
          } else {
            this.replyErrors++;
          }
          c.inFlight--;
          if (this.phase === 'pump') c.owed++;
          else if (this.phase === 'stopping') this.checkStopped();
        } else if (kind === Kind.Event) {
          if (c === this.pub) return;
          c.events++;
          this.events++;
        }
        return;
      case 'track':
        if (kind === Kind.Event) this.onTrackedEvent(c, buf, s, e, now);
        return;
      case 'refresh':
        if (kind !== Kind.ReplyOk && kind !== Kind.ReplyErr) return;
        if (c.refreshSentAt === 0) return;
        this.hist.recordValue(Math.max(1, now - c.refreshSentAt));
        c.refreshSentAt = 0;
        this.refreshAwaiting--;
        if (kind === Kind.ReplyOk) this.refreshOk++;
        else {
          this.refreshErrors++;
          if (this.refreshErrorSamples.length < 5) this.refreshErrorSamples.push(buf.toString('utf8', s, Math.min(e, s + 200)));
        }
        this.refreshNext?.();
        return;
      case 'join':
        if (kind === Kind.ReplyOk) this.joined++;
        else if (kind === Kind.ReplyErr) this.joinErrors++;
        else return;
        if (this.joined + this.joinErrors >= this.liveCount()) this.joinDone?.();
        return;
      default:
        return;
    }
  }

  flush(c: RawConn): void {
    if (c.owed > 0 && this.phase === 'pump') {
      const n = c.owed;
      c.owed = 0;
      this.sendBatch(c, n);
    } else if (c === this.pub && this.phase === 'publish') {
      this.trySendPublishes();
    }
  }

  private liveCount(): number {
    let n = 0;
    for (const c of this.conns) if (c.state === 'ready') n++;
    return n;
  }

  // ---- connect ----

  connect(req: Extract<Request, { op: 'connect' }>): Promise<ConnectResult> {
    this.phase = 'connect';
    this.hist = newHistogram();
    this.connectReasons = {};
    this.connectFailed = 0;
    this.connectReady = 0;
    this.connectPending = 0;
    if (req.withTokens === true) {
      for (let i = 0; i < req.count; i++) {
        if (!this.upgradeTokens.has(req.idBase + i)) return Promise.reject(new Error(`no token signed for socket ${req.idBase + i}`));
      }
    }
    const limit = openFileLimit().soft;
    if (this.conns.length + req.count + 64 > limit) {
      return Promise.reject(new Error(`open-file limit ${limit} is too low for ${req.count} sockets in one process`));
    }
    const t0 = Date.now();
    let next = 0;
    const target: Target = req.target;
    return new Promise<ConnectResult>((resolve) => {
      let finished = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        this.startNext = null;
        this.connectDone = null;
        for (const c of this.conns) {
          if (c.state !== 'ready' && c.state !== 'closed') c.close('connect timeout');
        }
        this.phase = 'idle';
        resolve({
          ready: this.connectReady,
          failed: req.count - this.connectReady,
          reasons: this.connectReasons,
          hist: encodeHistogram(this.hist),
          elapsedMs: Date.now() - t0,
        });
      };
      const timer = setTimeout(finish, req.timeoutMs);
      this.connectDone = finish;
      this.startNext = () => {
        while (next < req.count && this.connectPending < req.concurrency) {
          const i = next++;
          this.connectPending++;
          const src = req.sources.length === 0 ? undefined : req.sources[(req.idBase + i) % req.sources.length];
          const id = req.idBase + i;
          let token: string | undefined;
          if (req.withTokens === true) {
            token = this.upgradeTokens.get(id);
            this.upgradeTokens.delete(id);
          }
          this.conns.push(new RawConn(id, target, this, src, token));
        }
        if (next >= req.count && this.connectPending === 0) this.connectDone?.();
      };
      this.startNext();
    });
  }

  // ---- tokens and refresh (WS_AUTH=jwt; S11, S12, S13) ----

  sign(req: Extract<Request, { op: 'sign' }>): number {
    const nowS = Math.floor(Date.now() / 1000);
    if (req.purpose === 'upgrade') {
      for (let i = 0; i < req.count; i++) this.upgradeTokens.set(req.idBase + i, tokenFor(req.auth, req.idBase + i, 0, nowS));
      return req.count;
    }
    let n = 0;
    for (const c of this.conns) {
      if (c.state !== 'ready') continue;
      c.refreshToken = tokenFor(req.auth, c.id, req.round, nowS);
      n++;
    }
    return n;
  }

  /** One refresh per ready socket, with the token `sign` made for it; at most `concurrency` awaiting a reply. */
  refresh(req: Extract<Request, { op: 'refresh' }>): Promise<RefreshResult> {
    this.phase = 'refresh';
    this.hist = newHistogram();
    this.refreshOk = 0;
    this.refreshErrors = 0;
    this.refreshErrorSamples = [];
    this.refreshAwaiting = 0;
    const todo = this.conns.filter((c) => c.state === 'ready' && c.refreshToken !== '');
    const t0 = Date.now();
    let next = 0;
    return new Promise<RefreshResult>((resolve) => {
      let finished = false;
      const finish = (): void => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        this.refreshNext = null;
        this.phase = 'idle';
        let unanswered = todo.length - next;
        for (const c of todo) if (c.refreshSentAt !== 0) { c.refreshSentAt = 0; unanswered++; }
        resolve({
          ok: this.refreshOk, errors: this.refreshErrors, unanswered, errorSamples: this.refreshErrorSamples,
          hist: encodeHistogram(this.hist), elapsedMs: Date.now() - t0,
        });
      };
      const timer = setTimeout(finish, req.timeoutMs);
      this.refreshNext = () => {
        while (next < todo.length && this.refreshAwaiting < req.concurrency) {
          const c = todo[next++]!;
          if (c.state !== 'ready') continue;
          const stamp = stampNow();
          c.send(encodeClientFrame(`{"type":"refresh","ref":"${stamp}","token":${JSON.stringify(c.refreshToken)}}`).bytes);
          c.refreshToken = '';
          c.refreshSentAt = stamp - T_BASE;
          this.refreshAwaiting++;
        }
        if (next >= todo.length && this.refreshAwaiting === 0) finish();
      };
      this.refreshNext();
    });
  }

  // ---- join ----

  join(req: Extract<Request, { op: 'join' }>): Promise<JoinResult> {
    this.phase = 'join';
    this.joined = 0;
    this.joinErrors = 0;
    const t0 = Date.now();
    return new Promise<JoinResult>((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        this.joinDone = null;
        this.phase = 'idle';
        resolve({ joined: this.joined, errors: this.joinErrors, elapsedMs: Date.now() - t0 });
      };
      const timer = setTimeout(finish, req.timeoutMs);
      this.joinDone = finish;
      let sent = 0;
      for (const c of this.conns) {
        if (c.state !== 'ready') continue;
        c.topic = req.topic ?? `bench.${c.id}`;
        c.send(joinFrame(c.target.proto, c.topic));
        sent++;
      }
      if (sent === 0) finish();
    });
  }

  // ---- closed-loop publish (S1, S2) ----

  pump(req: Extract<Request, { op: 'pump' }>): void {
    this.resetCounters();
    this.phase = 'pump';
    this.depth = req.depth;
    for (const c of this.conns) {
      if (c.state !== 'ready') continue;
      const t = publishTemplate(c.target.proto, c.topic, req.size, false, req.ephemeral);
      this.template.set(c, t);
      this.loadBatch(c, t, req.depth);
      c.inFlight = 0;
      c.owed = 0;
      this.sendBatch(c, req.depth);
    }
  }

  /** `depth` copies of the template's frame, back to back: `c`'s batch. */
  private loadBatch(c: RawConn, t: PublishTemplate, depth: number): void {
    this.frameLen = t.frame.bytes.length;
    const batch = Buffer.allocUnsafe(this.frameLen * depth);
    for (let i = 0; i < depth; i++) t.frame.bytes.copy(batch, i * this.frameLen);
    c.batch = batch;
  }

  /** Stamps the first `n` frames of `c`'s batch with the send time (ref and data.t) and, unless `seq` is -1, sequence numbers from `seq`. */
  private stamped(c: RawConn, t: PublishTemplate, n: number, seq: number): Buffer {
    const len = t.frame.bytes.length;
    let b = c.batch!;
    // A write the kernel did not take at once still points at this memory.
    if (c.sock.writableLength > 0) { b = Buffer.from(b); c.batch = b; }
    const stamp = stampNow();
    for (let i = 0; i < n; i++) {
      patchDigits(b, i * len, t.frame, t.refPos, stamp, T_WIDTH);
      patchDigits(b, i * len, t.frame, t.tPos, stamp, T_WIDTH);
      if (seq !== -1) patchDigits(b, i * len, t.frame, t.sPos, S_BASE + seq + i, S_WIDTH);
    }
    return b;
  }

  private sendBatch(c: RawConn, n: number): void {
    const t = this.template.get(c)!;
    const len = t.frame.bytes.length;
    const b = this.stamped(c, t, n, -1);
    c.sock.write(n === b.length / len ? b : b.subarray(0, n * len));
    c.inFlight += n;
    this.publishes += n;
  }

  // ---- fan-out (S3) ----

  track(): void {
    this.resetCounters();
    this.ring.fill(0);
    this.full = -1;
    this.trackSubs = 0;
    for (const c of this.conns) {
      c.lastSeq = -1;
      c.events = 0;
      if (c.state === 'ready') this.trackSubs++;
    }
    this.phase = 'track';
  }

  private onTrackedEvent(c: RawConn, buf: Buffer, s: number, e: number, now: number): void {
    this.events++;
    const pos = eventDataPos(buf, s, e);
    if (pos === -1) return;
    const t = eventT(buf, pos, e);
    if (t > T_BASE) this.hist.recordValue(Math.max(1, now - (t - T_BASE)));
    const seq = eventS(buf, pos, e) - S_BASE;
    if (seq < 0) return;
    if (seq <= c.lastSeq) { this.duplicates++; return; }
    if (seq !== c.lastSeq + 1) this.gaps += seq - c.lastSeq - 1;
    c.lastSeq = seq;
    const ring = this.ring;
    ring[seq & RING_MASK]!++;
    if (seq !== this.full + 1) return;
    const subs = this.trackSubs;
    let moved = false;
    while (ring[(this.full + 1) & RING_MASK] === subs) {
      ring[(this.full + 1) & RING_MASK] = 0;
      this.full++;
      moved = true;
    }
    if (moved && !this.progressScheduled) {
      this.progressScheduled = true;
      setImmediate(() => {
        this.progressScheduled = false;
        send({ event: 'progress', full: this.full });
      });
    }
  }

  publish(req: Extract<Request, { op: 'publish' }>): void {
    this.resetCounters();
    const c = this.conns.find((x) => x.state === 'ready');
    if (c === undefined) throw new Error('no ready socket to publish from');
    this.pub = c;
    const t = publishTemplate(c.target.proto, req.topic, req.size, true, req.ephemeral);
    this.pubTemplate = t;
    this.depth = req.depth;
    this.loadBatch(c, t, req.depth);
    c.inFlight = 0;
    this.nextSeq = 0;
    this.creditUpTo = req.credit;
    this.phase = 'publish';
    this.trySendPublishes();
  }

  credit(upTo: number): void {
    if (upTo > this.creditUpTo) this.creditUpTo = upTo;
    if (this.phase === 'publish') this.trySendPublishes();
  }

  private trySendPublishes(): void {
    const c = this.pub;
    const t = this.pubTemplate;
    if (c === null || t === null || c.state !== 'ready') return;
    const n = Math.min(this.depth - c.inFlight, this.creditUpTo - this.nextSeq + 1);
    if (n <= 0) return;
    c.sock.write(this.stamped(c, t, n, this.nextSeq).subarray(0, n * this.frameLen));
    this.nextSeq += n;
    c.inFlight += n;
    this.publishes += n;
  }

  // ---- stalled subscribers (S6) ----

  /** Stops reading every ready socket: Node reads at most its stream high-water mark more, then the kernel buffers fill. */
  stall(): number {
    this.resetCounters();
    this.phase = 'stalled';
    let n = 0;
    for (const c of this.conns) {
      if (c.state !== 'ready') continue;
      c.sock.pause();
      n++;
    }
    return n;
  }

  /** Reads again (frames are ignored) and waits until every socket closed or timeoutMs passed. */
  unstall(timeoutMs: number): Promise<UnstallResult> {
    for (const c of this.conns) if (c.state === 'ready') c.sock.resume();
    const t0 = Date.now();
    return new Promise<UnstallResult>((resolve) => {
      const check = (): void => {
        const open = this.liveCount();
        if (open === 0 || Date.now() - t0 >= timeoutMs) {
          resolve({ closeReasons: { ...this.closeReasons }, open });
          return;
        }
        setTimeout(check, 50);
      };
      check();
    });
  }

  // ---- drain pacing (S7) ----

  watchCloses(deferTeardown: boolean): number {
    RawConn.deferTeardown = deferTeardown;
    this.resetCounters();
    this.watched = { atUs: [], codes: [], retryAfterMs: [], other: {}, open: 0 };
    this.phase = 'watch';
    return this.liveCount();
  }

  private recordClose(why: string): void {
    const w = this.watched;
    w.atUs.push(monoUs());
    const m = /^ws close (\d+) ?(.*)$/s.exec(why);
    let retry = -1;
    if (m !== null) {
      try {
        const r = (JSON.parse(m[2]!) as { retryAfterMs?: unknown }).retryAfterMs;
        if (typeof r === 'number') retry = r;
      } catch { /* not JSON: counted under other */ }
    }
    w.codes.push(m === null ? 0 : Number(m[1]));
    w.retryAfterMs.push(retry);
    if (retry < 0) w.other[why.slice(0, 120)] = (w.other[why.slice(0, 120)] ?? 0) + 1;
  }

  closes(timeoutMs: number): Promise<ClosesResult> {
    const t0 = Date.now();
    return new Promise<ClosesResult>((resolve) => {
      const check = (): void => {
        const open = this.liveCount();
        if (open === 0 || Date.now() - t0 >= timeoutMs) {
          this.phase = 'idle';
          RawConn.deferTeardown = false;
          teardownDeferred();
          resolve({ ...this.watched, open });
          return;
        }
        setTimeout(check, 50);
      };
      check();
    });
  }

  // ---- common ----

  mark(): MarkResult {
    let seqMin = Infinity;
    let seqMax = -1;
    let seqNone = 0;
    for (const c of this.conns) {
      if (c.state !== 'ready' || c === this.pub) continue;
      if (c.lastSeq < 0) seqNone++;
      seqMin = Math.min(seqMin, c.lastSeq);
      seqMax = Math.max(seqMax, c.lastSeq);
    }
    const r: MarkResult = {
      seqMin: Number.isFinite(seqMin) ? seqMin : -1,
      seqMax,
      seqNone,
      replies: this.replies,
      replyErrors: this.replyErrors,
      events: this.events,
      publishes: this.publishes,
      gaps: this.gaps,
      duplicates: this.duplicates,
      closed: this.closedAfterReady,
      closeReasons: { ...this.closeReasons },
      hist: encodeHistogram(this.hist),
    };
    this.hist = newHistogram();
    return r;
  }

  stop(timeoutMs: number): Promise<StopResult> {
    const wasSending = this.phase === 'pump' || this.phase === 'publish';
    this.phase = wasSending ? 'stopping' : 'idle';
    return new Promise<StopResult>((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        this.stopWaiter = null;
        this.phase = 'idle';
        resolve({ outstanding: this.outstanding() });
      };
      const timer = setTimeout(finish, timeoutMs);
      this.stopWaiter = finish;
      this.checkStopped();
    });
  }

  private outstanding(): number {
    let n = 0;
    for (const c of this.conns) if (c.state === 'ready') n += c.inFlight;
    return n;
  }

  private checkStopped(): void {
    if (this.stopWaiter !== null && this.outstanding() === 0) this.stopWaiter();
  }

  reset(): void {
    this.phase = 'idle';
    RawConn.deferTeardown = false;
    teardownDeferred();
    for (const c of this.conns) c.close('reset');
    this.conns = [];
    this.upgradeTokens.clear();
    this.template.clear();
    this.pub = null;
    this.pubTemplate = null;
    this.resetCounters();
  }

  private resetCounters(): void {
    this.hist = newHistogram();
    this.replies = 0;
    this.replyErrors = 0;
    this.events = 0;
    this.publishes = 0;
    this.gaps = 0;
    this.duplicates = 0;
    this.closedAfterReady = 0;
    this.closeReasons = {};
  }
}

function send(msg: Response | ChildEvent): void {
  process.send?.(msg);
}

const gen = new Generator();

async function handle(req: Request): Promise<unknown> {
  switch (req.op) {
    case 'connect': return gen.connect(req);
    case 'join': return gen.join(req);
    case 'sign': return gen.sign(req);
    case 'refresh': return gen.refresh(req);
    case 'pump': gen.pump(req); return null;
    case 'track': gen.track(); return null;
    case 'publish': gen.publish(req); return null;
    case 'credit': gen.credit(req.upTo); return null;
    case 'stall': return gen.stall();
    case 'unstall': return gen.unstall(req.timeoutMs);
    case 'watchCloses': return gen.watchCloses(req.deferTeardown === true);
    case 'closes': return gen.closes(req.timeoutMs);
    case 'mark': return gen.mark();
    case 'stop': return gen.stop(req.timeoutMs);
    case 'reset': gen.reset(); return null;
    case 'exit':
      gen.reset();
      setImmediate(() => process.exit(0));
      return null;
  }
}

process.on('message', (msg: Envelope) => {
  handle(msg.req).then(
    (result) => { if (msg.req.op !== 'credit') send({ id: msg.id, ok: true, result }); },
    (err: unknown) => send({ id: msg.id, ok: false, error: err instanceof Error ? err.message : String(err) }),
  );
});

send({ event: 'hello', pid: process.pid });
