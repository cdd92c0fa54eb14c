// One load-generator process. It holds at most ~15k sockets (the open-file
// limit is 20000 per process), runs whatever the orchestrator asks over IPC,
// and exits by itself when the orchestrator goes away or its lifetime ends.

import { RawConn, reads, teardownDeferred, type ConnHandlers, type Target } from '../lib/conn.ts';
import {
  Kind, S_BASE, S_WIDTH, T_BASE, T_WIDTH, bytesAt, encodeClientFrame, eventDataPos, eventS, eventT, indexWithin, joinFrame, leaveFrame, patchDigits,
  publishTemplate, replyRef, replyRefChar, type PublishTemplate,
} from '../lib/codec.ts';
import { DiffCache, PresenceView, listedUsers, presenceKind, stateCount } from './presence.ts';
import { monoUs, stampNow } from '../lib/clock.ts';
import { tokenFor } from '../lib/jwt.ts';
import { encodeHistogram, newHistogram, type Histogram } from '../lib/hist.ts';
import { openFileLimit } from '../lib/proc.ts';
import type {
  ChildEvent, ClosesResult, ConnectResult, Envelope, JoinResult, MarkResult, PacedResult, PresenceCheck, PresenceStats, ProbeResult, RefreshResult,
  Request, Response, StopResult, UnstallResult,
} from './messages.ts';

const LIFETIME_MS = Number(process.env['LOADGEN_LIFETIME_MS'] ?? 15 * 60_000);
setTimeout(() => {
  process.stderr.write(`loadgen ${process.pid}: lifetime of ${LIFETIME_MS} ms over, exiting\n`);
  process.exit(3);
}, LIFETIME_MS).unref();
process.on('disconnect', () => process.exit(0));

type Phase = 'idle' | 'connect' | 'join' | 'pump' | 'track' | 'publish' | 'stopping' | 'stalled' | 'watch' | 'refresh' | 'presence' | 'topics';

/** RawConn.pState: where a socket stands on the presence topic (S14). */
const P_OUT = 0, P_JOINING = 1, P_JOINED = 2, P_LEAVING = 3;
const TRUNCATED = Buffer.from('"truncated":true');
const USERS_KEY = Buffer.from('"users":{');

interface PresenceWatch {
  readonly prefix: string;
  readonly cache: DiffCache;
  readonly stats: PresenceStats;
  joinHist: Histogram;
  stateHist: Histogram;
  gapHist: Histogram;
  observer: RawConn | null;
  readonly view: PresenceView;
  events: Array<{ atUs: number; size: number }>;
}

function emptyPaced(): PacedResult {
  return { joinsSent: 0, joinsOk: 0, joinErrors: 0, leavesSent: 0, leavesOk: 0, leaveErrors: 0, leavesSkipped: 0, unanswered: 0, errorSamples: [], elapsedMs: 0 };
}

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
    if (this.pw !== null) this.presenceClosed(c, why);
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
    if (kind === Kind.Presence) {
      if (this.pw !== null) this.onPresence(this.pw, c, buf, s, e, now);
      return;
    }
    switch (this.phase) {
      case 'presence':
        if (kind === Kind.ReplyOk || kind === Kind.ReplyErr) this.onPacedReply(c, kind === Kind.ReplyOk, buf, s, e, now);
        return;
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
      case 'topics': {
        if (kind !== Kind.ReplyOk && kind !== Kind.ReplyErr) return;
        const ref = replyRef(c.target.proto, buf, s, e);
        if (ref <= T_BASE) return;
        this.hist.recordValue(Math.max(1, now - (ref - T_BASE)));
        this.refreshAwaiting--;
        if (kind === Kind.ReplyOk) this.refreshOk++;
        else {
          this.refreshErrors++;
          if (this.refreshErrorSamples.length < 5) this.refreshErrorSamples.push(buf.toString('utf8', s, Math.min(e, s + 200)));
        }
        this.refreshNext?.();
        return;
      }
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
    if (req.purpose === 'ids') {
      for (let i = 0; i < req.count; i++) this.upgradeTokens.set(req.idBase + i, `${req.prefix}${req.idBase + i}`);
      return req.count;
    }
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

  /** S15: joins or leaves of `topics` on every ready socket, topic by topic, at most `concurrency` awaiting a reply (matched by ref). */
  topics(req: Extract<Request, { op: 'topics' }>): Promise<RefreshResult> {
    this.phase = 'topics';
    this.hist = newHistogram();
    this.refreshOk = 0;
    this.refreshErrors = 0;
    this.refreshErrorSamples = [];
    this.refreshAwaiting = 0;
    const ready = this.conns.filter((c) => c.state === 'ready');
    const total = ready.length * req.topics.length;
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
        resolve({
          ok: this.refreshOk, errors: this.refreshErrors, unanswered: total - this.refreshOk - this.refreshErrors, errorSamples: this.refreshErrorSamples,
          hist: encodeHistogram(this.hist), elapsedMs: Date.now() - t0,
        });
      };
      const timer = setTimeout(finish, req.timeoutMs);
      this.refreshNext = () => {
        while (next < total && this.refreshAwaiting < req.concurrency) {
          // Topic-major: a socket's next frame only after every other socket's, so one in flight per socket while concurrency < sockets.
          const c = ready[next % ready.length]!;
          const topic = req.topics[Math.floor(next / ready.length)]!;
          next++;
          if (c.state !== 'ready') { this.refreshErrors++; continue; }
          c.send(encodeClientFrame(`{"type":"${req.action}","ref":"${stampNow()}","topic":${JSON.stringify(topic)}}`).bytes);
          this.refreshAwaiting++;
        }
        if (next >= total && this.refreshAwaiting === 0) finish();
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
        c.topic = req.topic ?? `${req.prefix ?? 'bench'}.${c.id}`;
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

  // ---- presence (S14) ----

  private pw: PresenceWatch | null = null;
  private paced: PacedResult = emptyPaced();
  /** Joins and leaves sent and not answered yet. */
  private pAwaiting = 0;
  private pacedCheck: (() => void) | null = null;

  presenceWatch(prefix: string): void {
    this.pw = {
      prefix, cache: new DiffCache(), joinHist: newHistogram(), stateHist: newHistogram(), gapHist: newHistogram(), observer: null,
      view: new PresenceView(), events: [],
      stats: {
        stateFrames: 0, stateBytes: 0, diffFrames: 0, diffBytes: 0, diffJoins: 0, diffLeaves: 0, distinctDiffs: 0, joinsSent: 0, leavesSent: 0,
        joined: 0, closed: 0, closeReasons: {}, observerSize: -1, observerExact: false,
      },
    };
  }

  private onPresence(pw: PresenceWatch, c: RawConn, buf: Buffer, s: number, e: number, now: number): void {
    const kind = presenceKind(buf, s, e);
    const st = pw.stats;
    if (kind === 'state') {
      st.stateFrames++;
      st.stateBytes += e - s;
      if (c.pState === P_JOINED && c.pCount === -1 && c.pSentAt > 0) pw.stateHist.recordValue(Math.max(1, now - c.pSentAt));
      c.pCount = stateCount(buf, s, e);
      // The socket's own user listed first: the shard added it, its replica does not hold it yet (see presence.ts).
      const u = indexWithin(buf, USERS_KEY, s, e);
      c.pSelfCheck = u !== -1 && bytesAt(buf, u + USERS_KEY.length, Buffer.from(`"${pw.prefix}${c.id}":`)) ? 1 : 0;
      c.pChangedAt = now;
      if (c === pw.observer) pw.view.state(buf.toString('utf8', s, e));
      return;
    }
    if (kind !== 'diff') return;
    st.diffFrames++;
    st.diffBytes += e - s;
    const d = pw.cache.entries(buf, s, e);
    st.diffJoins += d.joins;
    st.diffLeaves += d.leaves;
    if (c.pState !== P_JOINED) return; // in flight across its leave
    if (c.pLastDiffAt > 0) pw.gapHist.recordValue(Math.max(1, now - c.pLastDiffAt));
    c.pLastDiffAt = now;
    if (c.pCount >= 0) {
      let net = d.joins - d.leaves;
      // The state counted the socket's own user from outside the replica; the flush that brings it must not count it again.
      if (c.pSelfCheck > 0 && d.joins > 0 && indexWithin(buf, Buffer.from(`"${pw.prefix}${c.id}":{"connections"`), s, e) !== -1) {
        net--;
        c.pSelfCheck = 0;
      }
      if (net !== 0) {
        c.pCount += net;
        c.pChangedAt = now;
      }
    }
    if (c === pw.observer) {
      const before = pw.view.users.size;
      pw.view.diff(buf.toString('utf8', s, e));
      if (pw.view.users.size !== before) pw.events.push({ atUs: now, size: pw.view.users.size });
    }
  }

  private presenceClosed(c: RawConn, why: string): void {
    const st = this.pw!.stats;
    st.closed++;
    st.closeReasons[why] = (st.closeReasons[why] ?? 0) + 1;
    if (c.pState === P_JOINING || c.pState === P_LEAVING) {
      this.pAwaiting--;
      this.paced.unanswered++;
    }
    c.pState = P_OUT;
    this.pacedCheck?.();
  }

  private onPacedReply(c: RawConn, ok: boolean, buf: Buffer, s: number, e: number, now: number): void {
    const r = c.target.proto === 'sio' ? 'j' : replyRefChar(buf, s, e);
    const p = this.paced;
    if (!ok && p.errorSamples.length < 5) p.errorSamples.push(buf.toString('utf8', s, Math.min(e, s + 200)));
    if (r === 'j' && c.pState === P_JOINING) {
      this.pAwaiting--;
      if (ok) {
        p.joinsOk++;
        this.pw?.joinHist.recordValue(Math.max(1, now - c.pSentAt));
        c.pState = P_JOINED;
        c.pAt = now;
        c.pLastDiffAt = 0;
      } else {
        p.joinErrors++;
        c.pState = P_OUT;
      }
    } else if (r === 'l' && c.pState === P_LEAVING) {
      this.pAwaiting--;
      if (ok) {
        p.leavesOk++;
        c.pState = P_OUT;
        c.pAt = now;
      } else {
        p.leaveErrors++;
        c.pState = P_JOINED;
      }
    } else {
      return;
    }
    this.pacedCheck?.();
  }

  private sendJoin(c: RawConn, frame: Buffer): void {
    c.pState = P_JOINING;
    c.pSentAt = monoUs();
    c.pCount = -1;
    c.pSelfCheck = 0;
    c.pLastDiffAt = 0;
    c.send(frame);
    this.paced.joinsSent++;
    if (this.pw !== null) this.pw.stats.joinsSent++;
    this.pAwaiting++;
  }

  private sendLeave(c: RawConn, frame: Buffer): void {
    c.pState = P_LEAVING;
    c.pSentAt = monoUs();
    c.pCount = -1;
    c.pLastDiffAt = 0;
    c.send(frame);
    this.paced.leavesSent++;
    if (this.pw !== null) this.pw.stats.leavesSent++;
    this.pAwaiting++;
  }

  /** Runs `tick` every 5 ms until it calls `done` (or the time is up): the paced loops of paceJoin and churn. */
  private pacedLoop(timeoutMs: number, tick: (done: () => void) => void): Promise<PacedResult> {
    this.phase = 'presence';
    this.paced = emptyPaced();
    this.pAwaiting = 0;
    const t0 = performance.now();
    return new Promise<PacedResult>((resolve) => {
      let finished = false;
      const done = (): void => {
        if (finished) return;
        finished = true;
        clearInterval(timer);
        clearTimeout(limit);
        this.pacedCheck = null;
        this.phase = 'idle';
        for (const c of this.conns) {
          if (c.pState === P_JOINING || c.pState === P_LEAVING) {
            this.paced.unanswered++;
            // An answer that comes later is not waited for; the socket counts as joined if it was joining.
            c.pState = c.pState === P_JOINING ? P_JOINED : P_OUT;
          }
        }
        this.paced.elapsedMs = Math.round(performance.now() - t0);
        resolve(this.paced);
      };
      const timer = setInterval(() => tick(done), 5);
      const limit = setTimeout(done, timeoutMs);
      this.pacedCheck = () => tick(done);
      tick(done);
    });
  }

  /** Every ready socket not joined yet joins, `perSecond` a second; the first of them is the observer when there is none yet. */
  async paceJoin(req: Extract<Request, { op: 'paceJoin' }>): Promise<PacedResult> {
    const todo = this.conns.filter((c) => c.state === 'ready' && c.pState === P_OUT);
    if (req.presence && this.pw !== null && this.pw.observer === null && todo.length > 0) this.pw.observer = todo[0]!;
    const frame = todo.length > 0 ? joinFrame(todo[0]!.target.proto, req.topic) : Buffer.alloc(0);
    const t0 = performance.now();
    let next = 0;
    const got = await this.pacedLoop(req.timeoutMs, (done) => {
      const due = Math.min(todo.length, Math.floor(((performance.now() - t0) * req.perSecond) / 1000) + 1);
      while (next < due) {
        const c = todo[next++]!;
        if (c.state === 'ready') this.sendJoin(c, frame);
      }
      if (next >= todo.length && this.pAwaiting === 0) done();
    });
    if (!req.presence) for (const c of todo) c.pState = P_OUT;
    return got;
  }

  /** The churn loop: leaves at `perSecond` over the last `count` joined sockets, each back `holdMs` after its leave was answered. */
  churn(req: Extract<Request, { op: 'churn' }>): Promise<PacedResult> {
    const observer = this.pw?.observer ?? null;
    const churners = this.conns.filter((c) => c.state === 'ready' && c.pState === P_JOINED && c !== observer).slice(-req.count);
    const join = joinFrame('sluice', req.topic);
    const leave = leaveFrame(req.topic);
    const out: RawConn[] = [];
    const holdUs = req.holdMs * 1000;
    const t0 = performance.now();
    let rr = 0;
    let leaves = 0;
    return this.pacedLoop(req.timeoutMs, (done) => {
      const el = performance.now() - t0;
      const ending = el >= req.durationMs;
      if (!ending && churners.length > 0) {
        const due = Math.floor((el * req.perSecond) / 1000) + 1;
        for (; leaves < due; leaves++) {
          let picked: RawConn | undefined;
          for (let k = 0; k < churners.length && picked === undefined; k++) {
            const c = churners[rr++ % churners.length]!;
            if (c.state === 'ready' && c.pState === P_JOINED) picked = c;
          }
          if (picked === undefined) { this.paced.leavesSkipped++; continue; }
          this.sendLeave(picked, leave);
          out.push(picked);
        }
      }
      const now = monoUs();
      while (out.length > 0) {
        const c = out[0]!;
        if (c.state !== 'ready' || c.pState === P_JOINED) { out.shift(); continue; } // closed, or its leave was refused
        if (c.pState !== P_OUT) break; // its leave not answered yet
        if (!ending && now - c.pAt < holdUs) break;
        out.shift();
        this.sendJoin(c, join);
      }
      if (ending && out.length === 0 && this.pAwaiting === 0) done();
    });
  }

  presenceStats(): PresenceStats {
    const pw = this.pw;
    if (pw === null) throw new Error('presenceWatch first');
    let joined = 0;
    for (const c of this.conns) if (c.state === 'ready' && c.pState === P_JOINED) joined++;
    return {
      ...pw.stats, closeReasons: { ...pw.stats.closeReasons }, joined, distinctDiffs: pw.cache.misses,
      observerSize: pw.observer === null ? -1 : pw.view.users.size, observerExact: pw.view.exact,
    };
  }

  presenceCheck(expected: number, take: boolean): PresenceCheck {
    const pw = this.pw;
    if (pw === null) throw new Error('presenceWatch first');
    let checked = 0;
    let wrong = 0;
    let noState = 0;
    const wrongSamples: number[] = [];
    const offBy: Record<string, number> = {};
    const changed: number[] = [];
    for (const c of this.conns) {
      if (c.state !== 'ready' || c.pState !== P_JOINED) continue;
      checked++;
      if (c.pCount < 0) { noState++; continue; }
      changed.push(c.pChangedAt);
      if (c.pCount !== expected) {
        wrong++;
        const k = String(c.pCount - expected);
        offBy[k] = (offBy[k] ?? 0) + 1;
        if (wrongSamples.length < 5) wrongSamples.push(c.pCount);
      }
    }
    changed.sort((a, b) => a - b);
    const out: PresenceCheck = {
      checked, wrong, wrongSamples, offBy, noState,
      lastChangeMaxUs: changed.length > 0 ? changed[changed.length - 1]! : -1,
      lastChangeP50Us: changed.length > 0 ? changed[Math.floor((changed.length - 1) / 2)]! : -1,
      joinHist: take ? encodeHistogram(pw.joinHist) : '', stateHist: take ? encodeHistogram(pw.stateHist) : '', gapHist: take ? encodeHistogram(pw.gapHist) : '',
      observer: take ? pw.events : [], observerSize: pw.observer === null ? -1 : pw.view.users.size, observerExact: pw.view.exact,
    };
    if (take) {
      pw.joinHist = newHistogram();
      pw.stateHist = newHistogram();
      pw.gapHist = newHistogram();
      pw.events = [];
    }
    return out;
  }

  /** One new socket: connect, join, its presence_state, one `presence` ask, close. */
  probe(req: Extract<Request, { op: 'probe' }>): Promise<ProbeResult> {
    const token = tokenFor(req.auth, req.id, 0, Math.floor(Date.now() / 1000));
    const res: ProbeResult = {
      connectMs: NaN, replyMs: NaN, stateMs: NaN, stateBytes: NaN, count: NaN, listed: NaN, truncated: false, queryMs: NaN, queryBytes: NaN, queryCount: NaN,
    };
    const t0 = monoUs();
    let joinAt = 0;
    let queryAt = 0;
    return new Promise<ProbeResult>((resolve) => {
      let finished = false;
      let conn: RawConn | null = null;
      const finish = (error?: string): void => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        if (error !== undefined) res.error = error;
        conn?.close('probe done');
        resolve(res);
      };
      const timer = setTimeout(() => finish('probe timed out'), req.timeoutMs);
      const h: ConnHandlers = {
        ready: (c) => {
          res.connectMs = (c.readyAt - t0) / 1000;
          joinAt = monoUs();
          c.send(joinFrame('sluice', req.topic));
        },
        frame: (c, kind, buf, s, e, now) => {
          if (kind === Kind.ReplyOk || kind === Kind.ReplyErr) {
            const r = replyRefChar(buf, s, e);
            if (kind === Kind.ReplyErr) { finish(`refused: ${buf.toString('utf8', s, Math.min(e, s + 200))}`); return; }
            if (r === 'j') res.replyMs = (now - joinAt) / 1000;
            else if (r === 'q') {
              res.queryMs = (now - queryAt) / 1000;
              res.queryBytes = e - s;
              res.queryCount = stateCount(buf, s, e);
              finish();
            }
            return;
          }
          if (kind === Kind.Presence && presenceKind(buf, s, e) === 'state' && Number.isNaN(res.stateMs)) {
            res.stateMs = (now - joinAt) / 1000;
            res.stateBytes = e - s;
            res.count = stateCount(buf, s, e);
            res.listed = listedUsers(buf, s, e);
            res.truncated = indexWithin(buf, TRUNCATED, s, e) !== -1;
            queryAt = monoUs();
            c.send(encodeClientFrame(`{"type":"presence","ref":"q","topic":${JSON.stringify(req.topic)}}`).bytes);
          }
        },
        flush: () => {},
        closed: (_c, why) => finish(`closed: ${why}`),
      };
      conn = new RawConn(req.id, req.target, h, undefined, token);
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
      reads: reads.count,
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
    this.pw = null;
    this.pacedCheck = null;
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
    case 'topics': return gen.topics(req);
    case 'pump': gen.pump(req); return null;
    case 'track': gen.track(); return null;
    case 'publish': gen.publish(req); return null;
    case 'credit': gen.credit(req.upTo); return null;
    case 'stall': return gen.stall();
    case 'unstall': return gen.unstall(req.timeoutMs);
    case 'watchCloses': return gen.watchCloses(req.deferTeardown === true);
    case 'closes': return gen.closes(req.timeoutMs);
    case 'presenceWatch': gen.presenceWatch(req.userPrefix); return null;
    case 'paceJoin': return gen.paceJoin(req);
    case 'churn': return gen.churn(req);
    case 'presenceStats': return gen.presenceStats();
    case 'presenceCheck': return gen.presenceCheck(req.expected, req.take);
    case 'probe': return gen.probe(req);
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
