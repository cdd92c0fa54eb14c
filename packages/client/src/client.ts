/**
 * SluiceClient: one logical connection to a Sluice gateway that outlives its
 * sockets. It reconnects as the server tells it to, keeps every publish until
 * it is acknowledged, and rejoins every topic from the last event it saw.
 *
 * The facade over the parts: the connection (sockets, heartbeat, reconnects),
 * the outbox (publishes until acknowledged), the subscriptions (topics and
 * their resume positions and presence). It owns what travels on an open
 * socket: the pacing of frames, their refs, and the replies that settle
 * them.
 *
 * Runs in browsers and in Node: it uses only the standard WebSocket surface
 * of an injected constructor, a clock (setTimeout/clearTimeout and
 * performance.now by default), and queueMicrotask.
 */
import { decodeServerFrameObject, type Limits, type PongFrame, type ReplyFrame, type ServerFrame, USER_TOPIC, type WelcomeFrame } from '@sluice/protocol';
import { type Clock, systemClock, Timer, type TimerHandle } from './clock.ts';
import { Connection } from './connection.ts';
import { Emitter } from './emitter.ts';
import { errorCode, SluiceError } from './errors.ts';
import { FALLBACK_LIMITS, type Settings, settingsOf } from './options.ts';
import { type Entry, Outbox } from './outbox.ts';
import { Pacer } from './pacer.ts';
import { type Disposition, fullJitter } from './policy.ts';
import { replaceState } from './presence.ts';
import type { WebSocketLike } from './socket.ts';
import { type JoinRequest, Subscriptions, topicError, type TopicState } from './subscriptions.ts';
import type { ClientEvents, ClientState, EventHandler, PresenceState, PublishOptions, PublishResult, SluiceClientOptions, SubscribeOptions,
  Subscription } from './types.ts';

/** A `refresh` on the open socket: `done` gets its reply, or undefined when the socket went first. */
type Refresh = { readonly kind: 'refresh'; readonly token: string; readonly done: (reply: ReplyFrame | undefined) => void };

/** A `presence` frame of fetchPresence(), until its reply: asked again on every new socket until then. */
interface Ask {
  readonly topic: string;
  readonly resolve: (state: PresenceState) => void;
  readonly reject: (err: SluiceError) => void;
}

type Ctrl = { readonly kind: 'join'; readonly topic: TopicState } | { readonly kind: 'leave'; readonly topic: string } | { readonly kind: 'ping' }
  | Refresh | { readonly kind: 'presence'; readonly ask: Ask };

type Pending =
  | { readonly kind: 'publish'; readonly entry: Entry }
  | ({ readonly kind: 'join' } & JoinRequest)
  | { readonly kind: 'leave' }
  | { readonly kind: 'ping' }
  | Refresh
  | { readonly kind: 'presence'; readonly ask: Ask };

export class SluiceClient extends Emitter<ClientEvents> {
  private readonly settings: Settings;
  private readonly clock: Clock;
  private readonly conn: Connection;
  private readonly outbox: Outbox;
  private readonly subs: Subscriptions;

  private limits: Limits = FALLBACK_LIMITS;
  private pacer = new Pacer(FALLBACK_LIMITS.maxMessages, FALLBACK_LIMITS.rateWindowMs);
  private readonly pumpTimer: Timer;
  /** Joins to try again on this socket (rate_limited, unavailable). */
  private readonly retryTimers = new Set<TimerHandle>();
  private refSeq = 0;
  private readonly pending = new Map<string, Pending>();
  /** Control frames (join, leave, ping, refresh, presence): sent before publishes. */
  private ctrl: Ctrl[] = [];
  /** fetchPresence() calls not answered yet. */
  private readonly asks = new Set<Ask>();
  /** Consecutive `unavailable` answers, for the backoff of the resends and rejoins they cause. */
  private unavailableStreak = 0;

  constructor(options: SluiceClientOptions);
  /** @internal A client on another clock: the tests' virtual one. */
  constructor(options: SluiceClientOptions, clock: Clock);
  constructor(options: SluiceClientOptions, clock: Clock = systemClock) {
    super();
    this.settings = settingsOf(options);
    this.clock = clock;
    this.pumpTimer = new Timer(clock);
    const report = (err: SluiceError): void => this.emit('error', err);
    const emit = this.emit.bind(this);
    this.outbox = new Outbox(this.settings, report);
    this.subs = new Subscriptions(emit, report, (t) => {
      if (this.conn.welcomedNow) this.queue({ kind: 'join', topic: t });
    }, (t) => {
      if (this.conn.welcomedNow) this.queue({ kind: 'leave', topic: t.name });
    }, (topic) => this.fetchPresence(topic));
    this.conn = new Connection(this.settings, clock, {
      emit,
      report,
      opened: (w) => this.opened(w),
      frame: (f, now) => this.frame(f, now),
      ping: () => this.queue({ kind: 'ping' }),
      refresh: (token) => new Promise((done) => this.queue({ kind: 'refresh', token, done })),
      lost: (d, code) => this.lost(d, code),
      failAll: (err, onlyUnjoined) => this.failAll(err, onlyUnjoined),
    });
  }

  get state(): ClientState {
    return this.conn.state;
  }

  /** Starts connecting. Does nothing unless the client is idle or closed. */
  connect(): void {
    this.conn.connect();
  }

  /**
   * Closes the socket (code 1000) and stops reconnecting. Publishes not yet
   * acknowledged reject with `closed`. Subscriptions stay registered and are
   * joined again by a later connect(). Resolves once the socket is closed.
   */
  close(): Promise<void> {
    return this.conn.close();
  }

  /**
   * Publishes and resolves on the server's acknowledgement. Until then the
   * publish is kept in the outbox and resent as needed: durable publishes
   * with their idempotencyKey (exactly once), keyed ones as they are (at
   * least once), ephemeral ones never (at most once).
   */
  publish(topic: string, data: unknown, options: PublishOptions = {}): Promise<PublishResult> {
    const r = this.conn.state === 'closed' ? new SluiceError('closed', 'the client is closed: connect() first') : this.outbox.add(topic, data, options);
    if (r instanceof SluiceError) {
      this.emit('error', r);
      return Promise.reject(r);
    }
    this.pump();
    return r;
  }

  /**
   * Joins `topic` and calls `handler` with each event. The subscription
   * survives reconnects: the topic is joined again with `since` set to the
   * last durable event's id, so nothing is missed or repeated while history
   * reaches back that far (else `recovered: false` is emitted). A second
   * subscribe() to a topic adds a handler that gets events from then on;
   * its `since` is not used. A topic the server subscribed the client to
   * (the `subscribed` event) is such a topic already: subscribe() adds a
   * handler to it and sends no join.
   */
  subscribe(topic: string, handler: EventHandler, options: SubscribeOptions = {}): Subscription {
    return this.subs.add(topic, handler, options);
  }

  /**
   * Asks the server who is present on `topic` now (a `presence` frame),
   * whether the client subscribed to it or not: the token must allow
   * joining it. Resolves with the reply; the presence a subscription keeps
   * is not changed by it. Waits for the socket like a publish does, and is
   * asked again on the next socket if this one goes first. Rejects with
   * `bad_request` (a topic without presence), `forbidden`, or `closed`.
   */
  fetchPresence(topic: string): Promise<PresenceState> {
    const bad = this.conn.state === 'closed' ? new SluiceError('closed', 'the client is closed: connect() first') : topicError(topic);
    if (bad !== undefined) {
      this.emit('error', bad);
      return Promise.reject(bad);
    }
    return new Promise((resolve, reject) => {
      const ask: Ask = { topic, resolve, reject };
      this.asks.add(ask);
      if (this.conn.welcomedNow) this.queue({ kind: 'presence', ask });
    });
  }

  // --- the socket's life, as the connection tells it ----------------------------

  private opened(w: WelcomeFrame): void {
    this.limits = w.limits ?? FALLBACK_LIMITS;
    this.pacer = new Pacer(this.limits.maxMessages, this.limits.rateWindowMs);
    // Joins first, queued before `connected` is emitted so that a listener's own subscribe() is not joined twice.
    for (const t of this.subs.all()) this.ctrl.push({ kind: 'join', topic: t });
    for (const ask of this.asks) this.ctrl.push({ kind: 'presence', ask });
    this.pump();
    this.emit('connected', { connectionId: w.connectionId, url: this.conn.url, heartbeatMs: w.heartbeatMs, limits: this.limits });
  }

  private lost(d: Disposition, code: number): void {
    this.pumpTimer.cancel();
    for (const t of this.retryTimers) this.clock.clearTimeout(t);
    this.retryTimers.clear();
    // What was in flight on this socket: resent, except what must not be.
    const inflight: Entry[] = [];
    for (const p of this.pending.values()) {
      if (p.kind === 'publish') inflight.push(p.entry);
      else if (p.kind === 'refresh') p.done(undefined);
    }
    this.pending.clear();
    for (const c of this.ctrl) if (c.kind === 'refresh') c.done(undefined);
    this.ctrl = [];
    this.subs.unjoinAll();
    this.outbox.inflightLost(inflight, d.kind === 'reconnect' && d.dropOversized, code);
  }

  private failAll(err: SluiceError, onlyUnjoined: boolean): void {
    this.outbox.failAll(err);
    for (const [ref, p] of this.pending) if (p.kind === 'publish') this.pending.delete(ref);
    this.subs.failAll(err, onlyUnjoined);
    for (const ask of this.asks) ask.reject(err);
    this.asks.clear();
  }

  // --- inbound ------------------------------------------------------------------

  private frame(f: ServerFrame, now: number): void {
    switch (f.type) {
      case 'event':
        // Addressed to the user, not to a topic: no subscription can hold `$user`.
        if (f.topic === USER_TOPIC) this.emit('user-event', f.data);
        else this.subs.event(f);
        return;
      case 'presence_state':
        this.subs.presenceState(f);
        return;
      case 'presence_diff':
        this.subs.presenceDiff(f);
        return;
      case 'reply':
      case 'pong':
        this.reply(f, now);
        return;
      case 'subscribed':
        this.subs.subscribed(f.topic);
        return;
      case 'unsubscribed':
        this.subs.removed(f.topic, f.reason);
        return;
      case 'position':
        this.subs.position(f);
        return;
      case 'error':
        // An answer without ref: nothing of ours to settle, but a hint to obey.
        if (f.reason === 'rate_limited' && f.retryAfterMs !== undefined) this.pacer.pauseUntil(now + f.retryAfterMs);
        else this.emit('error', new SluiceError(errorCode(f.reason), `server: ${f.message ?? f.reason}`));
        return;
    }
  }

  private reply(f: ReplyFrame | PongFrame, now: number): void {
    if (f.ref === undefined) return;
    const p = this.pending.get(f.ref);
    if (p === undefined) return;
    this.pending.delete(f.ref);
    if (p.kind === 'leave' || p.kind === 'ping') return;
    if (p.kind === 'refresh') {
      p.done(f.type === 'reply' ? f : undefined);
      return;
    }
    if (p.kind === 'presence') {
      this.answered(p.ask, f, now);
      return;
    }
    if (f.type === 'pong' || f.status === 'ok') {
      const data = f.type === 'pong' ? undefined : f.data;
      if (p.kind === 'join') this.subs.joined(p, data);
      else {
        this.unavailableStreak = 0;
        this.outbox.acked(p.entry, data);
      }
      return;
    }
    const { reason, retryAfterMs, message } = f;
    const wait = (): number => (reason === 'unavailable'
      // The store or the topic's shard is down: try again after a growing, jittered wait.
      ? Math.max(1, fullJitter(this.unavailableStreak++, this.settings.backoff, this.settings.random))
      : (retryAfterMs ?? this.limits.rateWindowMs));
    if (p.kind === 'join') {
      if (!this.subs.refused(p.topic, reason, message)) return;
      const ms = wait();
      if (reason === 'rate_limited') this.pacer.pauseUntil(now + ms);
      this.retryJoin(p.topic, ms);
      return;
    }
    const e = p.entry;
    switch (reason) {
      case 'rate_limited':
        // Per socket: every frame waits, not only publishes.
        this.pacer.pauseUntil(now + wait());
        break;
      case 'tenant_rate_limited':
      case 'user_rate_limited':
      case 'unavailable':
        this.outbox.pausedUntil = Math.max(this.outbox.pausedUntil, now + wait());
        break;
      default:
        // payload_too_large, bad_request, forbidden, internal: resending cannot help.
        this.outbox.fail(e, new SluiceError(errorCode(reason), `publish refused: ${message ?? reason}`, { topic: e.topic }));
        return;
    }
    this.outbox.requeue(e);
    this.pump();
  }

  private answered(ask: Ask, f: ReplyFrame | PongFrame, now: number): void {
    if (!this.asks.has(ask)) return; // already rejected by close()
    if (f.type === 'reply' && f.status === 'error' && f.reason === 'rate_limited') {
      // Per socket: every frame waits; asking again is harmless.
      this.pacer.pauseUntil(now + (f.retryAfterMs ?? this.limits.rateWindowMs));
      this.queue({ kind: 'presence', ask });
      return;
    }
    this.asks.delete(ask);
    const { topic } = ask;
    let err: SluiceError;
    if (f.type === 'reply' && f.status === 'error') {
      err = new SluiceError(errorCode(f.reason), `presence of ${topic} refused: ${f.message ?? f.reason}`, { topic });
    } else {
      // The reply's data is a presence_state without type and topic: checked by the same decoder.
      const data: unknown = f.type === 'reply' ? f.data : undefined;
      const d = decodeServerFrameObject({ ...(typeof data === 'object' && data !== null ? data : {}), type: 'presence_state', topic });
      if (d.ok && d.frame.type === 'presence_state') {
        ask.resolve(replaceState(undefined, d.frame).state);
        return;
      }
      err = new SluiceError('internal', `the server's answer to presence of ${topic} is malformed`, { topic });
    }
    ask.reject(err);
    this.emit('error', err);
  }

  private retryJoin(t: TopicState, wait: number): void {
    const ws = this.conn.socket;
    const timer = this.clock.setTimeout(() => {
      this.retryTimers.delete(timer);
      if (this.conn.socket !== ws || !this.conn.welcomedNow || !this.subs.wantsJoin(t)) return;
      this.queue({ kind: 'join', topic: t });
    }, wait);
    this.retryTimers.add(timer);
  }

  // --- outbound -----------------------------------------------------------------

  private queue(c: Ctrl): void {
    this.ctrl.push(c);
    this.pump();
  }

  /** Sends what may go now under the pacer; control frames (join, leave, ping) before publishes. */
  private pump(): void {
    this.pumpTimer.cancel();
    const ws = this.conn.open;
    if (ws === undefined) return;
    for (;;) {
      const now = this.clock.now();
      const hasCtrl = this.ctrl.length > 0;
      if (!hasCtrl && !this.outbox.waiting) return;
      let wait = this.pacer.wait(now);
      if (!hasCtrl) wait = Math.max(wait, this.outbox.pausedUntil - now);
      if (wait > 0) {
        this.pumpTimer.set(() => this.pump(), wait);
        return;
      }
      const sent = hasCtrl ? this.sendCtrl(ws, this.ctrl.shift()!) : this.sendPublish(ws, now);
      if (sent) this.pacer.sent(now);
    }
  }

  /**
   * Refs are short and alphanumeric, and written right after `type`: the
   * gateway finds them even in frames it answers without decoding
   * (`rate_limited`, `payload_too_large`).
   */
  private nextRef(prefix: string): string {
    return `${prefix}${(++this.refSeq).toString(36)}`;
  }

  private sendCtrl(ws: WebSocketLike, c: Ctrl): boolean {
    switch (c.kind) {
      case 'join': {
        const t = c.topic;
        if (!this.subs.wantsJoin(t)) return false;
        const ref = this.nextRef('j');
        const since = t.lastId;
        this.pending.set(ref, { kind: 'join', topic: t, since, rejoin: t.everJoined });
        t.status = 'sent';
        ws.send(`{"type":"join","ref":"${ref}","topic":${JSON.stringify(t.name)}${since === undefined ? '' : `,"since":${JSON.stringify(since)}`}}`);
        return true;
      }
      case 'leave': {
        if (this.subs.has(c.topic)) return false; // subscribed again meanwhile: keep the join
        const ref = this.nextRef('l');
        this.pending.set(ref, { kind: 'leave' });
        ws.send(`{"type":"leave","ref":"${ref}","topic":${JSON.stringify(c.topic)}}`);
        return true;
      }
      case 'ping': {
        const ref = this.nextRef('h');
        this.pending.set(ref, { kind: 'ping' });
        ws.send(`{"type":"ping","ref":"${ref}"}`);
        return true;
      }
      case 'refresh': {
        const ref = this.nextRef('r');
        this.pending.set(ref, c);
        ws.send(`{"type":"refresh","ref":"${ref}","token":${JSON.stringify(c.token)}}`);
        return true;
      }
      case 'presence': {
        if (!this.asks.has(c.ask)) return false;
        const ref = this.nextRef('q');
        this.pending.set(ref, c);
        ws.send(`{"type":"presence","ref":"${ref}","topic":${JSON.stringify(c.ask.topic)}}`);
        return true;
      }
    }
  }

  private sendPublish(ws: WebSocketLike, now: number): boolean {
    const next = this.outbox.take(now, this.limits.maxFrameBytes, () => this.nextRef('p'));
    if (next === undefined) return false;
    this.pending.set(next.ref, { kind: 'publish', entry: next.entry });
    ws.send(next.frame);
    return true;
  }
}
