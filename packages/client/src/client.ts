/**
 * SluiceClient: one logical connection to a Sluice gateway that outlives its
 * sockets. It reconnects as the server tells it to, keeps every publish until
 * it is acknowledged, and rejoins every topic from the last event it saw.
 *
 * Runs in browsers and in Node: it uses only the standard WebSocket surface
 * of an injected constructor, setTimeout/clearTimeout, and queueMicrotask.
 */
import { compareEventIdStrings, decodeFrameObject, EVENT_ID_PATTERN, type Limits, PROTOCOL_VERSION, TOPIC_PATTERN } from '@sluice/protocol';
import { callSafely, Emitter } from './emitter.ts';
import { SluiceError, type SluiceErrorCode } from './errors.ts';
import { Pacer } from './pacer.ts';
import { afterClose, afterRefusal, type Backoff, DEFAULT_BACKOFF, type Disposition, fullJitter, reconnectDelay } from './policy.ts';
import { type CloseEventLike, hasNodeEvents, type MessageEventLike, OPEN, type UpgradeResponseLike, type WebSocketConstructor,
  type WebSocketLike } from './socket.ts';
import { randomId, utf8Length } from './util.ts';

export type ClientState = 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed';

/** What the `token` callback is told. */
export interface TokenRequest {
  /**
   * True when the server refused the last token: after a close with 4001
   * `token_expired`, or a 401 at the upgrade. A cached token must not be
   * handed out again.
   */
  readonly refresh: boolean;
  readonly reason: 'token_expired' | 'unauthorized' | undefined;
}

export interface SluiceClientOptions {
  /** `ws://host:port/ws`, or a list: each attempt picks one at random, never the one that just failed or closed. */
  readonly url: string | readonly string[];
  /** Asked before every connection attempt; with `refresh: true` after 4001 or 401. */
  readonly token?: (request: TokenRequest) => string | Promise<string>;
  /**
   * Where the token travels. `protocol` (default): a `bearer.<jwt>`
   * subprotocol next to `sluice.v1`, the only way a browser can send it
   * without the query string. `query`: `?token=<jwt>`, which proxies log.
   */
  readonly tokenIn?: 'protocol' | 'query';
  /** The WebSocket implementation: default `globalThis.WebSocket`; in Node 20 pass the `ws` package's export. */
  readonly WebSocket?: WebSocketConstructor;
  /** Reconnect backoff with full jitter. `resetAfterMs`: a connection open at least this long resets the failure count. */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number; readonly resetAfterMs?: number };
  /** Most unacknowledged publishes kept (default 1000); one more rejects with `outbox_full`. */
  readonly outboxLimit?: number;
  /**
   * Idle time before the client sends a `ping` frame, and the time it then
   * waits for any frame before it declares the socket dead. Default: the
   * server's `heartbeatMs` from `welcome`; 0 turns the check off.
   */
  readonly heartbeatMs?: number;
  /** Random source for jitter and the choice of URL, in [0, 1). Default Math.random. */
  readonly random?: () => number;
  /** From the socket's creation to `welcome` (default 15000); longer counts as a failed attempt. */
  readonly connectTimeoutMs?: number;
  /**
   * How long after its first send an unacknowledged durable publish may still
   * be resent with its idempotencyKey (default 290000, under the gateway's
   * WS_IDEMPOTENCY_TTL_MS of 300000). Past it the publish is rejected with
   * `outcome_unknown` rather than risk a second delivery.
   */
  readonly idempotencyWindowMs?: number;
}

export interface ConnectedEvent {
  readonly connectionId: string;
  readonly url: string;
  /** The server's heartbeat interval from `welcome`. */
  readonly heartbeatMs: number;
  /** The per-socket limits from `welcome`; the client paces its frames under them. */
  readonly limits: Limits;
}

export interface DisconnectedEvent {
  /** The close code (1006 when the socket was cut, or when the client gave up on it: see `reason`). */
  readonly code: number;
  /** The close reason's `reason` (e.g. `unavailable`, `slow_consumer`), or the client's own: `heartbeat_timeout`, `client_closed`. */
  readonly reason: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly willReconnect: boolean;
  readonly url: string;
}

export interface ReconnectingEvent {
  /** The wait before the next attempt. Never less than `retryAfterMs`. */
  readonly inMs: number;
  /** 1 for the first attempt after a good connection, counting up while attempts fail. */
  readonly attempt: number;
  /** The server's hint, when it gave one (close reason, refusal body, Retry-After, ...). */
  readonly retryAfterMs: number | undefined;
  /** Why: a close or refusal reason (`unavailable`, `token_expired`, `ip_rate_limited`, ...) or the client's own. */
  readonly reason: string | undefined;
  /** The close code, when a socket closed. */
  readonly code: number | undefined;
  /** The HTTP status, when the upgrade was refused and the WebSocket implementation showed it (`ws` does, browsers do not). */
  readonly status: number | undefined;
}

export interface RecoveredEvent {
  readonly topic: string;
  /**
   * True when every event after `since` was replayed. False when some may be
   * missing: the application should refetch the topic's state another way.
   */
  readonly recovered: boolean;
  /** The id the join resumed from; undefined when the client had none (no durable event seen yet), in which case `recovered` is false. */
  readonly since: string | undefined;
}

export interface ClientEvents {
  connected: ConnectedEvent;
  disconnected: DisconnectedEvent;
  reconnecting: ReconnectingEvent;
  recovered: RecoveredEvent;
  error: SluiceError;
}

export interface SluiceEvent {
  readonly topic: string;
  /** Durable events only. */
  readonly id?: string;
  /** Keyed events only. */
  readonly key?: string;
  readonly traceparent?: string;
  readonly data: unknown;
}

export type EventHandler = (event: SluiceEvent) => void;

export interface SubscribeOptions {
  /** Start after this event id: every later event still in history is replayed first. */
  readonly since?: string;
}

export interface JoinResult {
  /** The server's answer to a join with `since`; undefined for a join without. */
  readonly recovered: boolean | undefined;
}

export interface Subscription {
  readonly topic: string;
  /** The id of the last durable event delivered on this topic (or the `since` it started from). */
  readonly lastId: string | undefined;
  /** Settles at the first join's reply: rejects with `forbidden`, `too_many_joins`, or `closed`. */
  readonly ready: Promise<JoinResult>;
  unsubscribe(): void;
}

export interface PublishOptions {
  /** Durable publishes only. Default: generated by the client, unique per publish. */
  readonly idempotencyKey?: string;
  /** A keyed publish: only the newest per (topic, key) matters. */
  readonly key?: string;
  /** An ephemeral publish: not stored, never resent. */
  readonly ephemeral?: boolean;
  /** W3C Trace Context, carried to the event frames. */
  readonly traceparent?: string;
}

export interface PublishResult {
  /** The event's id (durable publishes). */
  readonly id?: string;
  /** True when the server had already stored this idempotencyKey: `id` is the first publish's. */
  readonly duplicate?: boolean;
}

type PublishClass = 'durable' | 'keyed' | 'ephemeral';

interface Entry {
  readonly seq: number;
  readonly cls: PublishClass;
  readonly topic: string;
  /** The frame after `{"type":"publish","ref":"..."`: built once, resent unchanged. */
  readonly body: string;
  readonly bodyBytes: number;
  readonly resolve: (r: PublishResult) => void;
  readonly reject: (e: SluiceError) => void;
  firstSentAt: number | undefined;
  /** Size of the frame as last sent. */
  bytes: number;
}

interface TopicState {
  readonly name: string;
  readonly subs: Set<SubscriptionImpl>;
  /** The resume position: the last durable event's id, or the `since` of the first subscribe(). */
  lastId: string | undefined;
  /** On the current socket: waiting to send the join, join sent, or joined. */
  status: 'pending' | 'sent' | 'joined';
  everJoined: boolean;
}

type Ctrl = { readonly kind: 'join'; readonly topic: TopicState } | { readonly kind: 'leave'; readonly topic: string } | { readonly kind: 'ping' };

type Pending =
  | { readonly kind: 'publish'; readonly entry: Entry }
  | { readonly kind: 'join'; readonly topic: TopicState; readonly since: string | undefined; readonly rejoin: boolean }
  | { readonly kind: 'leave' }
  | { readonly kind: 'ping' };

interface Refusal {
  readonly status: number;
  readonly body: string;
  readonly retryAfter: string | undefined;
}

type Timer = ReturnType<typeof setTimeout>;

interface WireFrame {
  type?: unknown;
  ref?: unknown;
  status?: unknown;
  reason?: unknown;
  retryAfterMs?: unknown;
  message?: unknown;
  data?: unknown;
  topic?: unknown;
  id?: unknown;
  key?: unknown;
  traceparent?: unknown;
  connectionId?: unknown;
  heartbeatMs?: unknown;
  limits?: unknown;
}

const DEFAULT_OUTBOX_LIMIT = 1000;
const DEFAULT_CONNECT_TIMEOUT_MS = 15_000;
const DEFAULT_IDEMPOTENCY_WINDOW_MS = 290_000;
const DEFAULT_RESET_AFTER_MS = 5000;
/** How long close() waits for the server's close frame before cutting the socket. */
const CLOSE_WAIT_MS = 3000;
/** How much of a refusal body is read. */
const MAX_REFUSAL_BODY = 4096;
/** A token that can travel as a subprotocol (RFC 7230 tchar); JWTs (base64url and dots) always are. */
const TCHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

const FALLBACK_LIMITS: Limits = { maxFrameBytes: 131_072, hardMaxFrameBytes: 1_048_576, maxMessages: 20, rateWindowMs: 1000, maxJoins: 50 };

class SubscriptionImpl implements Subscription {
  readonly ready: Promise<JoinResult>;
  private settled = false;
  private resolveReady!: (r: JoinResult) => void;
  private rejectReady!: (e: SluiceError) => void;

  constructor(private readonly client: SluiceClient, readonly state: TopicState, readonly handler: EventHandler) {
    this.ready = new Promise<JoinResult>((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    // Awaiting `ready` is optional: a rejection nobody awaits must not become an unhandled rejection.
    this.ready.catch(() => undefined);
  }

  get topic(): string {
    return this.state.name;
  }

  get lastId(): string | undefined {
    return this.state.lastId;
  }

  unsubscribe(): void {
    this.client.unsubscribeInternal(this);
  }

  settle(result: JoinResult | SluiceError): void {
    if (this.settled) return;
    this.settled = true;
    if (result instanceof SluiceError) this.rejectReady(result);
    else this.resolveReady(result);
  }
}

export class SluiceClient extends Emitter<ClientEvents> {
  private readonly urls: readonly string[];
  private readonly Ctor: WebSocketConstructor;
  private readonly backoff: Backoff;
  private readonly resetAfterMs: number;
  private readonly outboxLimit: number;
  private readonly random: () => number;
  private readonly connectTimeoutMs: number;
  private readonly idempotencyWindowMs: number;
  private readonly clientId: string;
  private readonly options: SluiceClientOptions;

  private stateValue: ClientState = 'idle';
  /** Bumped whenever an attempt is abandoned, so that a late token or socket event of an old attempt is ignored. */
  private gen = 0;
  private ws: WebSocketLike | undefined;
  private url = '';
  private avoid: string | undefined;
  private welcomed = false;
  private openedAt = 0;
  private refusal: Refusal | undefined;
  private failures = 0;
  private refresh: TokenRequest['reason'];
  private closing = false;
  private closePromise: Promise<void> | undefined;
  private closeDone: (() => void) | undefined;

  private limits: Limits = FALLBACK_LIMITS;
  private pacer = new Pacer(FALLBACK_LIMITS.maxMessages, FALLBACK_LIMITS.rateWindowMs);
  private heartbeatMs = 0;
  private lastRx = 0;
  private pingSentAt: number | undefined;

  private reconnectTimer: Timer | undefined;
  private connectTimer: Timer | undefined;
  private heartbeatTimer: Timer | undefined;
  private pumpTimer: Timer | undefined;
  private readonly retryTimers = new Set<Timer>();

  private refSeq = 0;
  private publishSeq = 0;
  private readonly pending = new Map<string, Pending>();
  private ctrl: Ctrl[] = [];
  /** Unacknowledged publishes, in publish() order. */
  private readonly unacked = new Set<Entry>();
  /** Publishes waiting to be sent (never sent, or to be resent), in publish() order. */
  private queue: Entry[] = [];
  private publishPausedUntil = 0;
  private unavailableStreak = 0;
  private readonly topics = new Map<string, TopicState>();

  constructor(options: SluiceClientOptions) {
    super();
    const urls = typeof options.url === 'string' ? [options.url] : [...options.url];
    if (urls.length === 0 || urls.some((u) => typeof u !== 'string' || u === '')) throw new TypeError('url must be a URL or a non-empty list of URLs');
    this.urls = urls;
    const Ctor = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (Ctor === undefined) throw new TypeError('no global WebSocket here: pass one as the WebSocket option (in Node: the `ws` package)');
    this.Ctor = Ctor;
    this.backoff = {
      initialMs: positive(options.backoff?.initialMs, DEFAULT_BACKOFF.initialMs, 'backoff.initialMs'),
      maxMs: positive(options.backoff?.maxMs, DEFAULT_BACKOFF.maxMs, 'backoff.maxMs'),
    };
    this.resetAfterMs = positive(options.backoff?.resetAfterMs, DEFAULT_RESET_AFTER_MS, 'backoff.resetAfterMs');
    this.outboxLimit = positive(options.outboxLimit, DEFAULT_OUTBOX_LIMIT, 'outboxLimit');
    this.connectTimeoutMs = positive(options.connectTimeoutMs, DEFAULT_CONNECT_TIMEOUT_MS, 'connectTimeoutMs');
    this.idempotencyWindowMs = positive(options.idempotencyWindowMs, DEFAULT_IDEMPOTENCY_WINDOW_MS, 'idempotencyWindowMs');
    if (options.heartbeatMs !== undefined && !(options.heartbeatMs >= 0)) throw new TypeError('heartbeatMs must be 0 or more');
    this.random = options.random ?? Math.random;
    this.clientId = randomId(this.random);
    this.options = options;
  }

  get state(): ClientState {
    return this.stateValue;
  }

  /** Starts connecting. Does nothing unless the client is idle or closed. */
  connect(): void {
    if (this.stateValue !== 'idle' && this.stateValue !== 'closed') return;
    // A close() still waiting for its socket: finish it now, the new connection replaces that socket.
    if (this.closing && this.ws !== undefined) {
      this.cut(this.ws);
      this.socketGone(1000, '', 'client_closed');
    }
    this.closing = false;
    this.failures = 0;
    void this.attempt();
  }

  /**
   * Closes the socket (code 1000) and stops reconnecting. Publishes not yet
   * acknowledged reject with `closed`. Subscriptions stay registered and are
   * joined again by a later connect(). Resolves once the socket is closed.
   */
  close(): Promise<void> {
    if (this.closePromise !== undefined) return this.closePromise;
    this.gen++;
    this.clearTimer('reconnectTimer');
    const ws = this.ws;
    this.stateValue = 'closed';
    this.failAll(new SluiceError('closed', 'the client was closed'), false);
    if (ws === undefined) return Promise.resolve();
    this.closing = true;
    const timer = setTimeout(() => {
      if (this.ws !== ws) return;
      this.cut(ws);
      this.socketGone(1000, '', 'client_closed');
    }, CLOSE_WAIT_MS);
    this.closePromise = new Promise<void>((resolve) => {
      this.closeDone = () => {
        clearTimeout(timer);
        this.closePromise = undefined;
        resolve();
      };
    });
    ws.close(1000);
    return this.closePromise;
  }

  /**
   * Publishes and resolves on the server's acknowledgement. Until then the
   * publish is kept in the outbox and resent as needed: durable publishes
   * with their idempotencyKey (exactly once), keyed ones as they are (at
   * least once), ephemeral ones never (at most once).
   */
  publish(topic: string, data: unknown, options: PublishOptions = {}): Promise<PublishResult> {
    if (this.stateValue === 'closed') return this.refuse(new SluiceError('closed', 'the client is closed: connect() first'));
    const cls: PublishClass = options.key !== undefined ? 'keyed' : options.ephemeral === true ? 'ephemeral' : 'durable';
    const seq = ++this.publishSeq;
    const idempotencyKey = options.idempotencyKey ?? (cls === 'durable' ? `${this.clientId}.${seq}` : undefined);
    // The server's own decoder: a publish it would refuse as bad_request never leaves the client.
    const checked = decodeFrameObject({
      type: 'publish', topic, data, key: options.key, ephemeral: options.ephemeral, idempotencyKey, traceparent: options.traceparent,
    });
    if (!checked.ok) return this.refuse(new SluiceError('bad_request', checked.message, { topic: typeof topic === 'string' ? topic : undefined }));
    if (this.unacked.size >= this.outboxLimit) {
      return this.refuse(new SluiceError('outbox_full', `${this.unacked.size} publishes are waiting for their acknowledgement (outboxLimit)`, { topic }));
    }
    let body = `,"topic":${JSON.stringify(topic)},"data":${checked.frame.type === 'publish' ? checked.frame.dataJson : 'null'}`;
    if (options.key !== undefined) body += `,"key":${JSON.stringify(options.key)}`;
    if (cls === 'ephemeral') body += ',"ephemeral":true';
    if (idempotencyKey !== undefined) body += `,"idempotencyKey":${JSON.stringify(idempotencyKey)}`;
    if (options.traceparent !== undefined) body += `,"traceparent":${JSON.stringify(options.traceparent)}`;
    body += '}';
    return new Promise<PublishResult>((resolve, reject) => {
      const bodyBytes = utf8Length(body);
      const entry: Entry = { seq, cls, topic, body, bodyBytes, resolve, reject, firstSentAt: undefined, bytes: bodyBytes };
      this.unacked.add(entry);
      this.queue.push(entry);
      this.pump();
    });
  }

  /**
   * Joins `topic` and calls `handler` with each event. The subscription
   * survives reconnects: the topic is joined again with `since` set to the
   * last durable event's id, so nothing is missed or repeated while history
   * reaches back that far (else `recovered: false` is emitted). A second
   * subscribe() to a topic adds a handler that gets events from then on;
   * its `since` is not used.
   */
  subscribe(topic: string, handler: EventHandler, options: SubscribeOptions = {}): Subscription {
    if (typeof topic !== 'string' || !TOPIC_PATTERN.test(topic)) throw new SluiceError('bad_request', 'topic must match ^[A-Za-z0-9:_.\\-]{1,200}$');
    if (options.since !== undefined && !EVENT_ID_PATTERN.test(options.since)) {
      throw new SluiceError('bad_request', 'since must be an event id such as "1732900000000-0"', { topic });
    }
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    let state = this.topics.get(topic);
    if (state === undefined) {
      state = { name: topic, subs: new Set(), lastId: options.since, status: 'pending', everJoined: false };
      this.topics.set(topic, state);
      if (this.welcomed) {
        this.ctrl.push({ kind: 'join', topic: state });
        this.pump();
      }
    }
    const sub = new SubscriptionImpl(this, state, handler);
    state.subs.add(sub);
    if (state.status === 'joined') sub.settle({ recovered: undefined });
    return sub;
  }

  /** @internal */
  unsubscribeInternal(sub: SubscriptionImpl): void {
    const state = sub.state;
    if (!state.subs.delete(sub)) return;
    sub.settle(new SluiceError('closed', 'unsubscribed before the join completed', { topic: state.name }));
    if (state.subs.size > 0 || this.topics.get(state.name) !== state) return;
    this.topics.delete(state.name);
    // A join still queued is skipped when its turn comes; one sent is undone with a leave.
    if (this.welcomed && state.status !== 'pending') {
      this.ctrl.push({ kind: 'leave', topic: state.name });
      this.pump();
    }
  }

  // --- connecting -------------------------------------------------------------

  private async attempt(): Promise<void> {
    const gen = ++this.gen;
    this.stateValue = 'connecting';
    const url = this.pickUrl();
    this.url = url;
    let token: string | undefined;
    if (this.options.token !== undefined) {
      const request: TokenRequest = { refresh: this.refresh !== undefined, reason: this.refresh };
      try {
        token = await this.options.token(request);
        this.refresh = undefined;
        if (typeof token !== 'string' || token === '' || ((this.options.tokenIn ?? 'protocol') === 'protocol' && !TCHARS.test(token))) {
          throw new TypeError('the token callback must return a non-empty token (a JWT)');
        }
      } catch (err) {
        if (gen !== this.gen) return;
        this.report(new SluiceError('token_failed', `the token callback failed: ${String(err)}`, { cause: err }));
        this.scheduleReconnect(afterClose(1006, ''), { code: undefined, status: undefined, reason: 'token_failed', wasOpen: false });
        return;
      }
      if (gen !== this.gen) return;
    }
    const protocols = [PROTOCOL_VERSION];
    let target = url;
    if (token !== undefined) {
      if (this.options.tokenIn === 'query') target = `${url}${url.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}`;
      else protocols.push(`bearer.${token}`);
    }
    let ws: WebSocketLike;
    try {
      ws = new this.Ctor(target, protocols);
    } catch (err) {
      // A malformed URL: no later attempt can do better.
      this.stateValue = 'closed';
      const e = new SluiceError('bad_request', `cannot open a WebSocket to ${url}: ${String(err)}`, { cause: err });
      this.report(e);
      this.failAll(e, true);
      return;
    }
    this.ws = ws;
    this.welcomed = false;
    this.refusal = undefined;
    ws.onmessage = (ev: MessageEventLike) => {
      if (this.ws === ws) this.message(ev.data);
    };
    ws.onclose = (ev: CloseEventLike) => {
      if (this.ws === ws) this.socketGone(ev.code, ev.reason);
    };
    // Every error is followed by a close, which says what happened.
    ws.onerror = () => undefined;
    if (hasNodeEvents(ws)) ws.on('unexpected-response', (_req, res) => this.readRefusal(ws, res));
    this.connectTimer = setTimeout(() => {
      if (this.ws !== ws || this.welcomed) return;
      this.cut(ws);
      this.socketGone(1006, '', 'connect_timeout');
    }, this.connectTimeoutMs);
  }

  private pickUrl(): string {
    const choices = this.urls.length > 1 ? this.urls.filter((u) => u !== this.avoid) : this.urls;
    const list = choices.length > 0 ? choices : this.urls;
    return list[Math.min(list.length - 1, Math.floor(Math.max(0, this.random()) * list.length))]!;
  }

  /** `ws` only: the status, Retry-After and JSON body of a refused upgrade. */
  private readRefusal(ws: WebSocketLike, res: UpgradeResponseLike): void {
    const status = res.statusCode ?? 0;
    const header = res.headers['retry-after'];
    const retryAfter = Array.isArray(header) ? header[0] : header;
    let body = '';
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (this.ws !== ws) return;
      this.refusal = { status, body, retryAfter };
      // Having listened to the event, the socket is ours to abort; its close follows.
      this.cut(ws);
    };
    const timer = setTimeout(finish, 2000);
    res.setEncoding?.('utf8');
    res.on('data', (chunk) => {
      if (body.length < MAX_REFUSAL_BODY) body += String(chunk);
    });
    res.on('end', finish);
    res.on('close', finish);
    res.on('error', finish);
  }

  /** Abandons a socket without waiting for a closing handshake. */
  private cut(ws: WebSocketLike): void {
    const t = ws as WebSocketLike & { terminate?: () => void };
    if (typeof t.terminate === 'function') t.terminate();
    else ws.close();
  }

  // --- inbound ------------------------------------------------------------------

  private message(data: unknown): void {
    if (typeof data !== 'string') return; // the gateway sends text frames only
    let f: WireFrame;
    try {
      f = JSON.parse(data) as WireFrame;
    } catch {
      return; // not from the gateway; nothing to act on
    }
    if (typeof f !== 'object' || f === null) return;
    const now = Date.now();
    this.lastRx = now;
    this.pingSentAt = undefined;
    if (!this.welcomed) {
      if (f.type === 'welcome') this.welcome(f, now);
      return;
    }
    switch (f.type) {
      case 'event':
        this.event(f);
        return;
      case 'reply':
      case 'pong':
        this.reply(f, now);
        return;
      case 'error':
        // An answer without ref: nothing of ours to settle, but a hint to obey.
        if (f.reason === 'rate_limited' && typeof f.retryAfterMs === 'number') this.pacer.pauseUntil(now + f.retryAfterMs);
        else this.report(new SluiceError(errorCode(f.reason), `server: ${String(f.message ?? f.reason)}`));
        return;
    }
  }

  private welcome(f: WireFrame, now: number): void {
    this.clearTimer('connectTimer');
    this.welcomed = true;
    this.openedAt = now;
    this.refresh = undefined;
    this.stateValue = 'open';
    this.limits = readLimits(f.limits);
    this.pacer = new Pacer(this.limits.maxMessages, this.limits.rateWindowMs);
    const serverHeartbeat = typeof f.heartbeatMs === 'number' ? f.heartbeatMs : 25_000;
    this.heartbeatMs = this.options.heartbeatMs ?? serverHeartbeat;
    if (this.heartbeatMs > 0) this.armHeartbeat(this.heartbeatMs);
    // Joins first, queued before `connected` is emitted so that a listener's own subscribe() is not joined twice.
    for (const t of this.topics.values()) {
      t.status = 'pending';
      this.ctrl.push({ kind: 'join', topic: t });
    }
    this.pump();
    this.emit('connected', {
      connectionId: String(f.connectionId), url: this.url, heartbeatMs: serverHeartbeat, limits: this.limits,
    });
  }

  private event(f: WireFrame): void {
    if (typeof f.topic !== 'string') return;
    const t = this.topics.get(f.topic);
    if (t === undefined) return; // left, or a leave still under way
    const id = typeof f.id === 'string' ? f.id : undefined;
    if (id !== undefined) {
      // The gateway sends no duplicate across replay and live; this guards the resume position all the same.
      if (t.lastId !== undefined && (compareEventIdStrings(id, t.lastId) ?? 1) <= 0) return;
      t.lastId = id;
    }
    const ev: SluiceEvent = {
      topic: f.topic,
      data: f.data,
      ...(id === undefined ? {} : { id }),
      ...(typeof f.key === 'string' ? { key: f.key } : {}),
      ...(typeof f.traceparent === 'string' ? { traceparent: f.traceparent } : {}),
    };
    for (const sub of [...t.subs]) callSafely(sub.handler, ev);
  }

  private reply(f: WireFrame, now: number): void {
    if (typeof f.ref !== 'string') return;
    const p = this.pending.get(f.ref);
    if (p === undefined) return;
    this.pending.delete(f.ref);
    const ok = f.status === 'ok' || f.type === 'pong';
    const retryAfterMs = typeof f.retryAfterMs === 'number' ? f.retryAfterMs : undefined;
    switch (p.kind) {
      case 'publish':
        if (ok) this.acked(p.entry, f.data);
        else this.publishRefused(p.entry, String(f.reason), retryAfterMs, f.message, now);
        return;
      case 'join':
        if (ok) this.joined(p, f.data);
        else this.joinRefused(p.topic, String(f.reason), retryAfterMs, f.message, now);
        return;
      case 'leave':
      case 'ping':
        return;
    }
  }

  private acked(e: Entry, data: unknown): void {
    this.unavailableStreak = 0;
    this.unacked.delete(e);
    const d = (typeof data === 'object' && data !== null ? data : {}) as { id?: unknown; duplicate?: unknown };
    e.resolve({
      ...(typeof d.id === 'string' ? { id: d.id } : {}),
      ...(d.duplicate === true ? { duplicate: true } : {}),
    });
  }

  private publishRefused(e: Entry, reason: string, retryAfterMs: number | undefined, message: unknown, now: number): void {
    switch (reason) {
      case 'rate_limited':
        // Per socket: every frame waits, not only publishes.
        this.pacer.pauseUntil(now + (retryAfterMs ?? this.limits.rateWindowMs));
        this.requeue(e);
        return;
      case 'tenant_rate_limited':
        this.publishPausedUntil = Math.max(this.publishPausedUntil, now + (retryAfterMs ?? this.limits.rateWindowMs));
        this.requeue(e);
        return;
      case 'unavailable':
        // The store or the topic's shard is down: resend with the same key after a growing, jittered wait.
        this.publishPausedUntil = Math.max(this.publishPausedUntil,
          now + Math.max(1, fullJitter(this.unavailableStreak++, this.backoff, this.random)));
        this.requeue(e);
        return;
      default:
        // payload_too_large, bad_request, forbidden, internal: resending cannot help.
        this.fail(e, new SluiceError(errorCode(reason), `publish refused: ${String(message ?? reason)}`, { topic: e.topic }));
    }
  }

  private joined(p: Extract<Pending, { kind: 'join' }>, data: unknown): void {
    const t = p.topic;
    if (this.topics.get(t.name) !== t) return;
    t.status = 'joined';
    t.everJoined = true;
    const r = (typeof data === 'object' && data !== null ? data : {}) as { recovered?: unknown };
    const recovered = typeof r.recovered === 'boolean' ? r.recovered : undefined;
    for (const sub of t.subs) sub.settle({ recovered });
    if (p.since !== undefined && recovered !== undefined) this.emit('recovered', { topic: t.name, recovered, since: p.since });
    else if (p.rejoin && p.since === undefined) this.emit('recovered', { topic: t.name, recovered: false, since: undefined });
  }

  private joinRefused(t: TopicState, reason: string, retryAfterMs: number | undefined, message: unknown, now: number): void {
    if (this.topics.get(t.name) !== t) return;
    t.status = 'pending';
    if (reason === 'rate_limited' || reason === 'unavailable') {
      const wait = reason === 'rate_limited'
        ? (retryAfterMs ?? this.limits.rateWindowMs)
        : Math.max(1, fullJitter(this.unavailableStreak++, this.backoff, this.random));
      if (reason === 'rate_limited') this.pacer.pauseUntil(now + wait);
      const ws = this.ws;
      const timer = setTimeout(() => {
        this.retryTimers.delete(timer);
        if (this.ws !== ws || !this.welcomed || this.topics.get(t.name) !== t || t.status !== 'pending') return;
        this.ctrl.push({ kind: 'join', topic: t });
        this.pump();
      }, wait);
      this.retryTimers.add(timer);
      return;
    }
    // forbidden, too_many_joins, bad_request: the topic cannot be joined; it is dropped.
    this.topics.delete(t.name);
    const err = new SluiceError(errorCode(reason), `join of ${t.name} refused: ${String(message ?? reason)}`, { topic: t.name });
    for (const sub of t.subs) sub.settle(err);
    this.report(err);
  }

  // --- outbound -----------------------------------------------------------------

  /** Sends what may go now under the pacer; control frames (join, leave, ping) before publishes. */
  private pump(): void {
    this.clearTimer('pumpTimer');
    const ws = this.ws;
    if (ws === undefined || !this.welcomed || ws.readyState !== OPEN) return;
    for (;;) {
      const now = Date.now();
      const hasCtrl = this.ctrl.length > 0;
      if (!hasCtrl && this.queue.length === 0) return;
      let wait = this.pacer.wait(now);
      if (!hasCtrl) wait = Math.max(wait, this.publishPausedUntil - now);
      if (wait > 0) {
        this.pumpTimer = setTimeout(() => this.pump(), wait);
        return;
      }
      const sent = hasCtrl ? this.sendCtrl(ws, this.ctrl.shift()!) : this.sendPublish(ws, this.queue.shift()!, now);
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
        if (this.topics.get(t.name) !== t || t.status !== 'pending') return false;
        const ref = this.nextRef('j');
        const since = t.lastId;
        this.pending.set(ref, { kind: 'join', topic: t, since, rejoin: t.everJoined });
        t.status = 'sent';
        ws.send(`{"type":"join","ref":"${ref}","topic":${JSON.stringify(t.name)}${since === undefined ? '' : `,"since":${JSON.stringify(since)}`}}`);
        return true;
      }
      case 'leave': {
        if (this.topics.has(c.topic)) return false; // subscribed again meanwhile: keep the join
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
    }
  }

  private sendPublish(ws: WebSocketLike, e: Entry, now: number): boolean {
    if (!this.unacked.has(e)) return false;
    if (e.cls === 'durable' && e.firstSentAt !== undefined && now - e.firstSentAt > this.idempotencyWindowMs) {
      this.fail(e, new SluiceError('outcome_unknown',
        'unacknowledged for longer than idempotencyWindowMs: it may or may not have been stored, and a resend could deliver it twice',
        { topic: e.topic }));
      return false;
    }
    const ref = this.nextRef('p');
    const head = `{"type":"publish","ref":"${ref}"`;
    e.bytes = head.length + e.bodyBytes;
    if (e.bytes > this.limits.maxFrameBytes) {
      // Refused locally: the server would answer payload_too_large (a strike), or close with 1009 above the hard cap.
      this.fail(e, new SluiceError('payload_too_large', `a ${e.bytes}-byte frame is above the server's maxFrameBytes (${this.limits.maxFrameBytes})`,
        { topic: e.topic }));
      return false;
    }
    e.firstSentAt ??= now;
    this.pending.set(ref, { kind: 'publish', entry: e });
    ws.send(head + e.body);
    return true;
  }

  /** Puts a publish back in line, in publish() order. */
  private requeue(e: Entry): void {
    let lo = 0;
    let hi = this.queue.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.queue[mid]!.seq < e.seq) lo = mid + 1;
      else hi = mid;
    }
    this.queue.splice(lo, 0, e);
    this.pump();
  }

  private fail(e: Entry, err: SluiceError): void {
    if (!this.unacked.delete(e)) return;
    const i = this.queue.indexOf(e);
    if (i >= 0) this.queue.splice(i, 1);
    e.reject(err);
    this.report(err);
  }

  /** Rejects every unacknowledged publish (and, when `subs`, every subscription not yet joined). */
  private failAll(err: SluiceError, subs: boolean): void {
    const entries = [...this.unacked];
    this.unacked.clear();
    this.queue = [];
    for (const [ref, p] of this.pending) if (p.kind === 'publish') this.pending.delete(ref);
    for (const e of entries) e.reject(err);
    if (subs) for (const t of this.topics.values()) for (const sub of t.subs) sub.settle(err);
    if (!subs) for (const t of this.topics.values()) if (t.status !== 'joined') for (const sub of t.subs) sub.settle(err);
  }

  private refuse(err: SluiceError): Promise<never> {
    this.report(err);
    return Promise.reject(err);
  }

  private report(err: SluiceError): void {
    this.emit('error', err);
  }

  // --- heartbeat ------------------------------------------------------------------

  private armHeartbeat(ms: number): void {
    this.clearTimer('heartbeatTimer');
    this.heartbeatTimer = setTimeout(() => this.heartbeat(), ms);
  }

  /**
   * After `heartbeatMs` without a frame the client sends a ping; after
   * `heartbeatMs` more without any frame the socket is declared dead. A dead
   * connection is thus noticed within 2 x heartbeatMs of the last frame.
   */
  private heartbeat(): void {
    const ws = this.ws;
    if (ws === undefined || !this.welcomed) return;
    const now = Date.now();
    if (this.pingSentAt !== undefined) {
      const left = this.pingSentAt + this.heartbeatMs - now;
      if (left > 0) {
        this.armHeartbeat(left);
        return;
      }
      this.cut(ws);
      this.socketGone(1006, '', 'heartbeat_timeout');
      return;
    }
    const idle = now - this.lastRx;
    if (idle < this.heartbeatMs) {
      this.armHeartbeat(this.heartbeatMs - idle);
      return;
    }
    this.pingSentAt = now;
    this.ctrl.push({ kind: 'ping' });
    this.pump();
    this.armHeartbeat(this.heartbeatMs);
  }

  // --- closes ------------------------------------------------------------------------

  /**
   * The socket is gone: closed by the server, cut, refused at the upgrade, or
   * abandoned by the client (`local` says why). Decides what comes next from
   * the close table.
   */
  private socketGone(code: number, reasonText: string, local?: string): void {
    const ws = this.ws;
    this.ws = undefined;
    if (ws !== undefined) {
      ws.onmessage = null;
      ws.onclose = null;
    }
    for (const k of ['connectTimer', 'heartbeatTimer', 'pumpTimer'] as const) this.clearTimer(k);
    for (const t of this.retryTimers) clearTimeout(t);
    this.retryTimers.clear();
    const wasOpen = this.welcomed;
    this.welcomed = false;
    const openFor = wasOpen ? Date.now() - this.openedAt : 0;
    const refusal = this.refusal;
    this.refusal = undefined;
    const d: Disposition = local !== undefined
      ? afterClose(1006, '')
      : refusal !== undefined ? afterRefusal(refusal.status, refusal.body, refusal.retryAfter) : afterClose(code, reasonText);
    const reason = local ?? d.reason;

    // What was in flight on this socket: resent, except what must not be.
    const inflight: Entry[] = [];
    for (const p of this.pending.values()) if (p.kind === 'publish' && this.unacked.has(p.entry)) inflight.push(p.entry);
    this.pending.clear();
    this.ctrl = [];
    this.pingSentAt = undefined;
    for (const t of this.topics.values()) t.status = 'pending';
    if (d.kind === 'reconnect' && d.dropOversized && inflight.length > 0) {
      // 1009: the frame above the hard cap was the largest in flight. It is never resent.
      const big = inflight.reduce((a, b) => (b.bytes > a.bytes ? b : a));
      inflight.splice(inflight.indexOf(big), 1);
      this.fail(big, new SluiceError('payload_too_large', `the server closed with 1009 after a ${big.bytes}-byte frame`, { topic: big.topic, closeCode: code }));
    }
    for (const e of inflight.sort((a, b) => a.seq - b.seq)) {
      if (e.cls === 'ephemeral') this.fail(e, new SluiceError('disconnected', 'the socket closed before the ephemeral publish was acknowledged', { topic: e.topic }));
      else this.requeue(e);
    }

    const retryAfterMs = d.kind === 'reconnect' ? d.retryAfterMs : undefined;
    if (this.closing) {
      this.closing = false;
      const done = this.closeDone;
      this.closeDone = undefined;
      if (wasOpen) this.emit('disconnected', { code, reason: reason ?? 'client_closed', retryAfterMs, willReconnect: false, url: this.url });
      done?.();
      return;
    }
    if (d.kind === 'stop') {
      this.stateValue = 'closed';
      const err = new SluiceError(d.error, `the server ${refusal !== undefined ? `refused the upgrade (${refusal.status})` : `closed with ${code}`}: ${d.reason ?? d.error}; not reconnecting`,
        { closeCode: refusal === undefined ? code : undefined, status: refusal?.status });
      if (wasOpen) this.emit('disconnected', { code, reason, retryAfterMs: undefined, willReconnect: false, url: this.url });
      this.report(err);
      this.failAll(err, true);
      return;
    }
    if (d.refreshToken) this.refresh = refusal !== undefined ? 'unauthorized' : 'token_expired';
    if (d.report !== undefined) {
      this.report(new SluiceError(d.report, `the server refused the upgrade (${refusal?.status ?? code}): ${d.reason ?? d.report}`,
        { status: refusal?.status }));
    }
    if (this.stateValue === 'closed') return; // close() from an error listener
    this.scheduleReconnect(d, { code: refusal === undefined ? code : undefined, status: refusal?.status, reason, wasOpen, openFor });
  }

  private scheduleReconnect(d: Disposition, cause: { code: number | undefined; status: number | undefined; reason: string | undefined; wasOpen: boolean;
    openFor?: number; }): void {
    const retryAfterMs = d.kind === 'reconnect' ? d.retryAfterMs : undefined;
    if (this.urls.length > 1) this.avoid = this.url;
    if (cause.wasOpen && (cause.openFor ?? 0) >= this.resetAfterMs) this.failures = 0;
    const inMs = reconnectDelay(this.failures, this.backoff, this.random, retryAfterMs);
    this.failures++;
    this.stateValue = 'reconnecting';
    // Never sooner than `inMs` after the disconnect was told: Node fires a
    // timer once its millisecond clock reaches the due tick, up to a
    // millisecond of real time early, so the wait is measured on the
    // monotonic clock and a timer that fires early is set again for the rest.
    let due = performance.now() + inMs;
    const fire = (): void => {
      const left = due - performance.now();
      if (left > 0) {
        this.reconnectTimer = setTimeout(fire, left);
        return;
      }
      this.reconnectTimer = undefined;
      void this.attempt();
    };
    this.reconnectTimer = setTimeout(fire, inMs);
    if (cause.wasOpen) {
      this.emit('disconnected', { code: cause.code ?? 1006, reason: cause.reason, retryAfterMs, willReconnect: true, url: this.url });
    }
    due = performance.now() + inMs;
    if (this.stateValue !== 'reconnecting') return; // close() from a listener
    this.emit('reconnecting', { inMs, attempt: this.failures, retryAfterMs, reason: cause.reason, code: cause.code, status: cause.status });
  }

  private clearTimer(k: 'reconnectTimer' | 'connectTimer' | 'heartbeatTimer' | 'pumpTimer'): void {
    const t = this[k];
    if (t !== undefined) clearTimeout(t);
    this[k] = undefined;
  }
}

function positive(v: number | undefined, dflt: number, name: string): number {
  if (v === undefined) return dflt;
  if (!(typeof v === 'number' && Number.isFinite(v) && v > 0)) throw new TypeError(`${name} must be a positive number`);
  return v;
}

const KNOWN_CODES = new Set<string>(['bad_request', 'payload_too_large', 'forbidden', 'too_many_joins', 'internal', 'abusive', 'unauthorized',
  'forbidden_origin']);

/** A server reason as an error code; a reason this SDK does not know (a newer server) maps to `internal`. */
function errorCode(reason: unknown): SluiceErrorCode {
  return typeof reason === 'string' && KNOWN_CODES.has(reason) ? (reason as SluiceErrorCode) : 'internal';
}

function readLimits(v: unknown): Limits {
  const l = (typeof v === 'object' && v !== null ? v : {}) as Partial<Record<keyof Limits, unknown>>;
  const num = (x: unknown, d: number): number => (typeof x === 'number' && Number.isFinite(x) && x > 0 ? x : d);
  return {
    maxFrameBytes: num(l.maxFrameBytes, FALLBACK_LIMITS.maxFrameBytes),
    hardMaxFrameBytes: num(l.hardMaxFrameBytes, FALLBACK_LIMITS.hardMaxFrameBytes),
    maxMessages: num(l.maxMessages, FALLBACK_LIMITS.maxMessages),
    rateWindowMs: num(l.rateWindowMs, FALLBACK_LIMITS.rateWindowMs),
    maxJoins: num(l.maxJoins, FALLBACK_LIMITS.maxJoins),
  };
}
