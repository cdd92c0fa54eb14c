/**
 * The connection: one socket at a time, and the decisions between sockets.
 * It asks for the token, opens the socket, reads a refused upgrade, waits for
 * `welcome` (connect timeout), watches the socket (heartbeat), and once a
 * socket is gone decides from the close table whether and when to try again.
 * What travels on an open socket is the facade's.
 */
import { decodeServerFrame, MAX_TOKEN_LENGTH, PROTOCOL_VERSION, type ReplyFrame, type ServerFrame, type WelcomeFrame } from '@sluice/protocol';
import { type Clock, Timer } from './clock.ts';
import { errorCode, SluiceError } from './errors.ts';
import type { Settings } from './options.ts';
import { afterClose, afterRefusal, type Disposition, reconnectDelay } from './policy.ts';
import { type CloseEventLike, hasNodeEvents, type MessageEventLike, OPEN, type UpgradeResponseLike, type WebSocketLike } from './socket.ts';
import type { ClientState, Emit, TokenRequest } from './types.ts';

/** What the connection needs of the facade. */
export interface ConnectionHost {
  readonly emit: Emit;
  report(err: SluiceError): void;
  /** `welcome` arrived: the socket is open for frames. */
  opened(welcome: WelcomeFrame): void;
  /** A frame after `welcome`. */
  frame(frame: ServerFrame, now: number): void;
  /** The heartbeat asks for a `ping`. */
  ping(): void;
  /** Sends `refresh` with `token` on the open socket: its reply, or undefined when the socket went first. */
  refresh(token: string): Promise<ReplyFrame | undefined>;
  /** The socket is gone: settle what was in flight on it (before any event says so). */
  lost(d: Disposition, code: number): void;
  /** Every publish, and every subscription (`onlyUnjoined`: those not joined yet), fails with `err`. */
  failAll(err: SluiceError, onlyUnjoined: boolean): void;
}

interface Refusal {
  readonly status: number;
  readonly body: string;
  readonly retryAfter: string | undefined;
}

interface Cause {
  readonly code: number | undefined;
  readonly status: number | undefined;
  readonly reason: string | undefined;
  readonly wasOpen: boolean;
  readonly openFor?: number;
}

/**
 * Exact-hint 503s in a row a client takes from one URL, coming back to it
 * each time (the upgrade budget's place: going elsewhere would leave it
 * unused), before it tries another URL (a draining node answers the same).
 */
const PLACED_STAYS = 3;

/** How long close() waits for the server's close frame before cutting the socket. */
const CLOSE_WAIT_MS = 3000;
/** How long a refused upgrade's body is read. */
const REFUSAL_WAIT_MS = 2000;
/** How much of a refusal body is read. */
const MAX_REFUSAL_BODY = 4096;
/**
 * When an open socket's token is refreshed: after this share of its
 * remaining life, drawn over [0.75, 0.9] so that a fleet of clients whose
 * tokens were issued together does not refresh in one wave; and at least
 * REFRESH_MARGIN_MS before `expiresAt` (at once when less is left).
 */
const REFRESH_AT = 0.75;
const REFRESH_JITTER = 0.15;
const REFRESH_MARGIN_MS = 1000;
/**
 * Refused refreshes (`unauthorized`) of one token tried again at most this
 * often: each is a strike on the socket, and the 4001 at `expiresAt`, then
 * the reconnect with a new token, is the way out.
 */
const REFRESH_RETRIES = 3;
/** A token that can travel as a subprotocol (RFC 7230 tchar); JWTs (base64url and dots) always are. */
const TCHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export class Connection {
  state: ClientState = 'idle';
  /** The socket's URL (the last one tried). */
  url = '';
  private readonly reconnectTimer: Timer;
  private readonly connectTimer: Timer;
  private readonly heartbeatTimer: Timer;
  private readonly refreshTimer: Timer;
  /** Refused refreshes of the open socket's current token, for REFRESH_RETRIES. */
  private refreshRetries = 0;
  /** Bumped whenever an attempt is abandoned, so that a late token or socket event of an old attempt is ignored. */
  private gen = 0;
  private ws: WebSocketLike | undefined;
  private avoid: string | undefined;
  /**
   * The URL whose 503 gave this client a place (an exact hint): the next
   * attempt goes back there, at that time, rather than to another URL, up
   * to PLACED_STAYS times in a row.
   */
  private placedAt: string | undefined;
  /** Exact-hint 503s in a row from `placedAt`. */
  private placedTimes = 0;
  private stay = false;
  private welcomed = false;
  private openedAt = 0;
  private refusal: Refusal | undefined;
  private failures = 0;
  /**
   * The failures the full-jitter backoff grows with: those without an exact
   * hint. A refusal that gave this client a time (the server pacing it) does
   * not make the next unhinted wait longer.
   */
  private streak = 0;
  private refresh: TokenRequest['reason'];
  private closing = false;
  private closePromise: Promise<void> | undefined;
  private closeDone: (() => void) | undefined;
  private heartbeatMs = 0;
  private lastRx = 0;
  private pingSentAt: number | undefined;

  constructor(private readonly settings: Settings, private readonly clock: Clock, private readonly host: ConnectionHost) {
    this.reconnectTimer = new Timer(clock);
    this.connectTimer = new Timer(clock);
    this.heartbeatTimer = new Timer(clock);
    this.refreshTimer = new Timer(clock);
  }

  /** The welcomed socket that frames may be sent on now, if any. */
  get open(): WebSocketLike | undefined {
    const ws = this.ws;
    return ws !== undefined && this.welcomed && ws.readyState === OPEN ? ws : undefined;
  }

  /** The current socket, open or not: a timer set on one socket checks it is still the one. */
  get socket(): WebSocketLike | undefined {
    return this.ws;
  }

  get welcomedNow(): boolean {
    return this.welcomed;
  }

  connect(): void {
    if (this.state !== 'idle' && this.state !== 'closed') return;
    // A close() still waiting for its socket: finish it now, the new connection replaces that socket.
    if (this.closing && this.ws !== undefined) {
      this.cut(this.ws);
      this.gone(1000, '', 'client_closed');
    }
    this.closing = false;
    this.failures = this.streak = 0;
    void this.attempt();
  }

  close(): Promise<void> {
    if (this.closePromise !== undefined) return this.closePromise;
    this.gen++;
    this.reconnectTimer.cancel();
    this.refreshTimer.cancel();
    const ws = this.ws;
    this.state = 'closed';
    this.host.failAll(new SluiceError('closed', 'the client was closed'), true);
    if (ws === undefined) return Promise.resolve();
    this.closing = true;
    const timer = new Timer(this.clock);
    timer.set(() => {
      if (this.ws !== ws) return;
      this.cut(ws);
      this.gone(1000, '', 'client_closed');
    }, CLOSE_WAIT_MS);
    this.closePromise = new Promise<void>((resolve) => {
      this.closeDone = () => {
        timer.cancel();
        this.closePromise = undefined;
        resolve();
      };
    });
    ws.close(1000);
    return this.closePromise;
  }

  // --- connecting -------------------------------------------------------------

  private async attempt(): Promise<void> {
    const gen = ++this.gen;
    this.state = 'connecting';
    const url = this.pickUrl();
    this.url = url;
    const { options } = this.settings;
    let token: string | undefined;
    if (options.token !== undefined) {
      const request: TokenRequest = { refresh: this.refresh !== undefined, reason: this.refresh };
      try {
        token = await options.token(request);
        this.refresh = undefined;
        checkToken(token, (options.tokenIn ?? 'protocol') === 'protocol');
      } catch (err) {
        if (gen !== this.gen) return;
        this.host.report(new SluiceError('token_failed', `the token callback failed: ${String(err)}`, { cause: err }));
        this.scheduleReconnect(afterClose(1006, ''), { code: undefined, status: undefined, reason: 'token_failed', wasOpen: false });
        return;
      }
      if (gen !== this.gen) return;
    }
    const protocols = [PROTOCOL_VERSION];
    let target = url;
    if (token !== undefined) {
      if (options.tokenIn === 'query') target = `${url}${url.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}`;
      else protocols.push(`bearer.${token}`);
    }
    let ws: WebSocketLike;
    try {
      ws = new this.settings.Ctor(target, protocols);
    } catch (err) {
      // A malformed URL: no later attempt can do better.
      this.state = 'closed';
      const e = new SluiceError('bad_request', `cannot open a WebSocket to ${url}: ${String(err)}`, { cause: err });
      this.host.report(e);
      this.host.failAll(e, false);
      return;
    }
    this.ws = ws;
    this.welcomed = false;
    this.refusal = undefined;
    ws.onmessage = (ev: MessageEventLike) => {
      if (this.ws === ws) this.message(ev.data);
    };
    ws.onclose = (ev: CloseEventLike) => {
      if (this.ws === ws) this.gone(ev.code, ev.reason);
    };
    // Every error is followed by a close, which says what happened.
    ws.onerror = () => undefined;
    if (hasNodeEvents(ws)) ws.on('unexpected-response', (_req, res) => this.readRefusal(ws, res));
    this.connectTimer.set(() => {
      if (this.ws !== ws || this.welcomed) return;
      this.cut(ws);
      this.gone(1006, '', 'connect_timeout');
    }, this.settings.connectTimeoutMs);
  }

  private pickUrl(): string {
    const { urls, random } = this.settings;
    if (this.stay && urls.includes(this.url)) return this.url;
    const choices = urls.length > 1 ? urls.filter((u) => u !== this.avoid) : urls;
    const list = choices.length > 0 ? choices : urls;
    return list[Math.min(list.length - 1, Math.floor(Math.max(0, random()) * list.length))]!;
  }

  /** `ws` only: the status, Retry-After and JSON body of a refused upgrade. */
  private readRefusal(ws: WebSocketLike, res: UpgradeResponseLike): void {
    const status = res.statusCode ?? 0;
    const header = res.headers['retry-after'];
    const retryAfter = Array.isArray(header) ? header[0] : header;
    let body = '';
    let done = false;
    const timer = new Timer(this.clock);
    const finish = (): void => {
      if (done) return;
      done = true;
      timer.cancel();
      if (this.ws !== ws) return;
      this.refusal = { status, body, retryAfter };
      // Having listened to the event, the socket is ours to abort; its close follows.
      this.cut(ws);
    };
    timer.set(finish, REFUSAL_WAIT_MS);
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
    // Any frame is traffic for the heartbeat, one of a newer type too.
    const now = this.clock.now();
    this.lastRx = now;
    this.pingSentAt = undefined;
    const decoded = decodeServerFrame(data);
    if (!decoded.ok) return; // not from the gateway, or a frame of a newer one: nothing to act on
    const f = decoded.frame;
    if (this.welcomed) this.host.frame(f, now);
    else if (f.type === 'welcome') this.welcome(f, now);
  }

  private welcome(f: WelcomeFrame, now: number): void {
    this.connectTimer.cancel();
    this.welcomed = true;
    this.openedAt = now;
    this.refresh = undefined;
    this.state = 'open';
    this.heartbeatMs = this.settings.options.heartbeatMs ?? f.heartbeatMs;
    if (this.heartbeatMs > 0) this.heartbeatTimer.set(() => this.heartbeat(), this.heartbeatMs);
    this.scheduleRefresh(f.expiresAt);
    this.host.opened(f);
  }

  // --- token refresh on the open socket ---------------------------------------

  /** With a token callback and a welcome that said when the token expires: refresh ahead of it, jittered. */
  private scheduleRefresh(expiresAt: number | undefined): void {
    this.refreshTimer.cancel();
    this.refreshRetries = 0;
    if (expiresAt === undefined || this.settings.options.token === undefined) return;
    const left = expiresAt - this.clock.wall();
    const share = REFRESH_AT + REFRESH_JITTER * Math.min(1, Math.max(0, this.settings.random()));
    this.refreshAfter(Math.max(0, Math.min(left * share, left - REFRESH_MARGIN_MS)), expiresAt);
  }

  private refreshAfter(ms: number, expiresAt: number): void {
    const ws = this.ws;
    this.refreshTimer.set(() => {
      if (this.ws === ws && this.welcomed) void this.refreshNow(ws!, expiresAt);
    }, ms);
  }

  /**
   * Asks the token callback (`reason: 'expiring'`) and sends the token on
   * this socket. Accepted: the next refresh is set from the new
   * `expiresAt`. Refused as `unauthorized`, or the callback failed: tried
   * again while the token lasts. Refused as `forbidden` (a token of another
   * user) or `bad_request`: asking again cannot help; the socket then
   * closes at `expiresAt` (4001) and the reconnect asks for a token anew.
   */
  private async refreshNow(ws: WebSocketLike, expiresAt: number): Promise<void> {
    let token: string;
    try {
      token = await this.settings.options.token!({ refresh: true, reason: 'expiring' });
      checkToken(token, false);
    } catch (err) {
      if (this.ws !== ws) return;
      this.host.report(new SluiceError('token_failed', `the token callback failed: ${String(err)}`, { cause: err }));
      this.retryRefresh(expiresAt);
      return;
    }
    if (this.ws !== ws || !this.welcomed) return;
    const reply = await this.host.refresh(token);
    // The socket went first: the next one asks for its token when it connects.
    if (this.ws !== ws || reply === undefined) return;
    if (reply.status === 'ok') {
      // Only a later expiry sets the next refresh: a token that does not
      // move it (a cached one, or a clock far off the server's) would
      // otherwise be sent again at once, in a loop.
      const next = (reply.data as { expiresAt?: unknown } | undefined)?.expiresAt;
      if (typeof next === 'number' && next > expiresAt) this.scheduleRefresh(next);
      return;
    }
    this.host.report(new SluiceError(errorCode(reply.reason), `token refresh refused: ${reply.message ?? reply.reason}`));
    if (reply.reason === 'unauthorized' && ++this.refreshRetries <= REFRESH_RETRIES) this.retryRefresh(expiresAt);
  }

  /** A refresh that failed is tried again after a tenth of what is left (at least 1 s), while the token lasts. */
  private retryRefresh(expiresAt: number): void {
    const left = expiresAt - this.clock.wall();
    if (left > REFRESH_MARGIN_MS) this.refreshAfter(Math.max(1000, left / 10), expiresAt);
  }

  // --- heartbeat ------------------------------------------------------------------

  /**
   * After `heartbeatMs` without a frame the client sends a ping; after
   * `heartbeatMs` more without any frame the socket is declared dead. A dead
   * connection is thus noticed within 2 x heartbeatMs of the last frame.
   */
  private heartbeat(): void {
    const ws = this.ws;
    if (ws === undefined || !this.welcomed) return;
    const now = this.clock.now();
    const beat = (ms: number): void => this.heartbeatTimer.set(() => this.heartbeat(), ms);
    if (this.pingSentAt !== undefined) {
      const left = this.pingSentAt + this.heartbeatMs - now;
      if (left > 0) {
        beat(left);
        return;
      }
      this.cut(ws);
      this.gone(1006, '', 'heartbeat_timeout');
      return;
    }
    const idle = now - this.lastRx;
    if (idle < this.heartbeatMs) {
      beat(this.heartbeatMs - idle);
      return;
    }
    this.pingSentAt = now;
    this.host.ping();
    beat(this.heartbeatMs);
  }

  // --- closes ------------------------------------------------------------------------

  /**
   * The socket is gone: closed by the server, cut, refused at the upgrade, or
   * abandoned by the client (`local` says why). Decides what comes next from
   * the close table.
   */
  private gone(code: number, reasonText: string, local?: string): void {
    const ws = this.ws;
    this.ws = undefined;
    if (ws !== undefined) {
      ws.onmessage = null;
      ws.onclose = null;
    }
    this.connectTimer.cancel();
    this.heartbeatTimer.cancel();
    this.refreshTimer.cancel();
    const wasOpen = this.welcomed;
    this.welcomed = false;
    const openFor = wasOpen ? this.clock.now() - this.openedAt : 0;
    const refusal = this.refusal;
    this.refusal = undefined;
    const d: Disposition = local !== undefined
      ? afterClose(1006, '')
      : refusal !== undefined ? afterRefusal(refusal.status, refusal.body, refusal.retryAfter) : afterClose(code, reasonText);
    const reason = local ?? d.reason;
    this.pingSentAt = undefined;
    this.host.lost(d, code);

    const retryAfterMs = d.kind === 'reconnect' ? d.retryAfterMs : undefined;
    const { emit } = this.host;
    if (this.closing) {
      this.closing = false;
      const done = this.closeDone;
      this.closeDone = undefined;
      if (wasOpen) emit('disconnected', { code, reason: reason ?? 'client_closed', retryAfterMs, willReconnect: false, url: this.url });
      done?.();
      return;
    }
    if (d.kind === 'stop') {
      this.state = 'closed';
      const err = new SluiceError(d.error, `the server ${refusal !== undefined ? `refused the upgrade (${refusal.status})` : `closed with ${code}`}: ${d.reason ?? d.error}; not reconnecting`,
        { closeCode: refusal === undefined ? code : undefined, status: refusal?.status });
      if (wasOpen) emit('disconnected', { code, reason, retryAfterMs: undefined, willReconnect: false, url: this.url });
      this.host.report(err);
      this.host.failAll(err, false);
      return;
    }
    if (d.refreshToken) this.refresh = d.tokenReason ?? (refusal !== undefined ? 'unauthorized' : 'token_expired');
    if (d.report !== undefined) {
      this.host.report(new SluiceError(d.report, `the server refused the upgrade (${refusal?.status ?? code}): ${d.reason ?? d.report}`,
        { status: refusal?.status }));
    }
    if (this.state === 'closed') return; // close() from an error listener
    this.scheduleReconnect(d, { code: refusal === undefined ? code : undefined, status: refusal?.status, reason, wasOpen, openFor });
  }

  private scheduleReconnect(d: Disposition, cause: Cause): void {
    const retryAfterMs = d.kind === 'reconnect' ? d.retryAfterMs : undefined;
    const { urls, backoff, random, resetAfterMs } = this.settings;
    if (urls.length > 1) {
      // A place at a URL (an upgrade budget's 503) is kept once; otherwise, and the second time, another URL.
      if (cause.wasOpen) this.placedAt = undefined;
      const placed = cause.status === 503 && d.kind === 'reconnect' && d.hintExact;
      this.placedTimes = placed && this.placedAt === this.url ? this.placedTimes + 1 : placed ? 1 : 0;
      this.stay = placed && this.placedTimes <= PLACED_STAYS;
      this.placedAt = placed ? this.url : undefined;
      if (!this.stay) this.avoid = this.url;
    }
    if (cause.wasOpen && (cause.openFor ?? 0) >= resetAfterMs) this.failures = this.streak = 0;
    const exact = d.kind === 'reconnect' && d.hintExact;
    const inMs = reconnectDelay(this.streak, backoff, random, retryAfterMs, exact);
    this.failures++;
    if (!exact) this.streak++;
    this.state = 'reconnecting';
    // Never sooner than `inMs` after the disconnect was told: Node fires a
    // timer once its millisecond clock reaches the due tick, up to a
    // millisecond of real time early, so the wait is measured on the
    // monotonic clock and a timer that fires early is set again for the rest.
    let due = this.clock.now() + inMs;
    const fire = (): void => {
      const left = due - this.clock.now();
      if (left > 0) {
        this.reconnectTimer.set(fire, left);
        return;
      }
      void this.attempt();
    };
    this.reconnectTimer.set(fire, inMs);
    if (cause.wasOpen) {
      this.host.emit('disconnected', { code: cause.code ?? 1006, reason: cause.reason, retryAfterMs, willReconnect: true, url: this.url });
    }
    due = this.clock.now() + inMs;
    if (this.state !== 'reconnecting') return; // close() from a listener
    this.host.emit('reconnecting', { inMs, attempt: this.failures, retryAfterMs, reason: cause.reason, code: cause.code, status: cause.status });
  }
}

/** A token the callback handed out: a non-empty string of at most MAX_TOKEN_LENGTH; for the upgrade's subprotocol, tchars only. */
function checkToken(token: unknown, asSubprotocol: boolean): asserts token is string {
  if (typeof token !== 'string' || token === '' || token.length > MAX_TOKEN_LENGTH || (asSubprotocol && !TCHARS.test(token))) {
    throw new TypeError('the token callback must return a non-empty token (a JWT)');
  }
}
