/**
 * A shard: one worker thread, one uWS app listening on the shared port
 * (SO_REUSEPORT lets the kernel spread connections over the shards). It owns
 * its sockets from upgrade to close and applies the socket guard before any
 * frame is decoded. It talks to the rest of the node only through its Broker
 * and the shared flags.
 */
import type { MessagePort } from 'node:worker_threads';
import { allows, ANONYMOUS, clientAddress, Coalescer, type Config, type Identity, type OriginRule, originAllowed,
  parseOriginList, type Rights, type WindowState, type Delivery, effectiveSlowBufferBytes, type FixedWindowState,
  type HistoryRead, hitFixedWindow, jitter, type Mailbox, type MailItem, type PublishFields, type PublishResult, topicKey } from '@sluice/core';
import {
  type CloseReason, closeSpecs, decodeClientFrame, encodeCloseReason, encodePong, encodeRejection, encodeReplyOk,
  compareEventIds, type ErrorReason, ErrorReasons, type EventId, isStrike, type JoinFrame, type LeaveFrame, parseEventId, PEEK_REF_BYTES, peekRef,
  PROTOCOL_VERSION, type PublishFrame, type UpgradeRefusal, welcomeFrame, welcomePrefix, EventClass,
} from '@sluice/protocol';
import { counterFrom, createLogger, endSpan, gaugeFrom, IndexedHistogram, type Logger, LogThrottle,
  registerThreadMetrics, Registry, type Span, SpanKind, startSpan, suppressedCounts, type Tracer, traceparentOf,
  loadTracing } from '@sluice/telemetry';
import { tokenFrom, Verifier } from './auth.ts';
import type { FromShardControl, ToShardControl } from './control.ts';
import { ExpiryTimers } from './expiry.ts';
import { Limits, tenantWindowKey } from './limits.ts';
import { MeshBroker } from './mesh-broker.ts';
import { REDIS_OPS, RedisBroker, RedisOp } from './redis-broker.ts';
import type { ShardBroker } from './shard-broker.ts';
import { type LaneData, SlowLane } from './slow-lane.ts';
import { Flag, SharedState } from './shared-state.ts';
import { loadUws, upgradeCorked, useUpgradeCork, type Uws, type HttpRequest, type HttpResponse, type TemplatedApp, type us_listen_socket,
  type us_socket_context_t, type WebSocket } from '@sluice/uws';

export interface ShardTask {
  readonly shard: number;
  /** Restart count of this shard, part of connection ids so they never repeat. */
  readonly generation: number;
  readonly nodeId: string;
  readonly config: Config;
  readonly shared: SharedArrayBuffer;
  /** To and from the coordinator. */
  readonly control: MessagePort;
  /** One port to every other shard. */
  readonly peers: readonly { readonly shard: number; readonly port: MessagePort }[];
  /** The concrete public port (the first shard may get 0 and report what it bound). */
  readonly listenPort: number;
  /** Enables the `debug.crash` frame that tests use to crash a shard on purpose. */
  readonly testHooks: boolean;
  /** The uWS build the coordinator loaded (its upstream version): every shard loads the same. */
  readonly uws: string;
  /** The coordinator's cork probe: whether an upgrade keeps the socket's address (see @sluice/uws's cork.ts). */
  readonly corkInPlace: boolean;
}

export interface ShardExit {
  readonly shard: number;
}

/** Per-socket state, typed, stored as the uWS user data. */
interface SocketData extends FixedWindowState, LaneData {
  readonly id: string;
  /** Who the socket is: fixed at the upgrade, never changed. */
  readonly tenant: string;
  /** The tenant's publish-window key, made once here rather than per frame. */
  readonly tenantWindowKey: string;
  readonly user: string;
  /** The client address (X-Forwarded-For only behind WS_TRUST_PROXY). */
  readonly ip: string;
  /** Topics the socket may join and publish to. */
  readonly join: Rights;
  readonly pub: Rights;
  /** The token's exp in ms; Infinity without a token. The socket is closed with 4001 then. */
  readonly expiresAt: number;
  open: boolean;
  strikes: number;
  /** Publishes sent to the broker whose ack the client has not been sent yet. */
  inflight: number;
  /** Joined topics: client name to tenant-scoped key. Created on first join. */
  topics: Map<string, string> | null;
  /** Since when the socket's unsent bytes are above the soft limit; -1 when they are not. */
  congestedSince: number;
  /** The socket's mailbox while it is in the slow lane. */
  mailbox: Mailbox<MailItem> | null;
  unsent: number;
}

type Socket = WebSocket<SocketData>;

/**
 * A join with `since` whose replay is on its way: live events meanwhile wait
 * in `buffered`. After the replay, until this shard's live delivery of the
 * topic reaches the last replayed id (`after`), live events go to the socket
 * one by one, those not after `after` left out (see `recover`).
 */
interface Recovery {
  readonly ws: Socket;
  readonly d: SocketData;
  readonly topic: string;
  readonly key: string;
  readonly buffered: Delivery[];
  after: EventId | undefined;
}

/** A topic some socket of this shard has joined: the shard's single broker subscription. */
interface TopicState {
  count: number;
  ready: boolean;
  waiters: ((ok: boolean) => void)[];
}

/**
 * How often congested sockets are looked for while events flow: a socket on
 * the native lane can pass the soft limit by at most what its topics deliver
 * in this time before it moves to its mailbox.
 */
const LANE_SWEEP_MS = 10;
const CRASH_FRAME = '{"type":"debug.crash"}';
/** A Sec-WebSocket-Key: 16 bytes in base64. */
const WS_KEY = /^[A-Za-z0-9+/]{22}==$/;
const utf8 = new TextDecoder();
/** The `class` label of the latency histograms, indexed by EventClass. */
const CLASS_LABELS = ['durable', 'keyed', 'ephemeral'];
/** Lines of one kind (rejected frames, refused upgrades, closed abusers) a shard writes per second at most. */
const LOG_LINES_PER_SECOND = 20;
const TRACEPARENT_FIELD = '"traceparent":"';
const DATA_FIELD = ',"data":';

export default async function runShard(task: ShardTask): Promise<ShardExit> {
  // WS_TRACING_MODULE registers an SDK in this thread's copy of the OpenTelemetry API.
  const tracer = await loadTracing(task.config.tracingModule, PROTOCOL_VERSION);
  return new Shard(task, tracer).run();
}

/**
 * The shard this thread runs now. After a crash the thread is not ended
 * (uWS aborts the whole process if a thread exits while its app still holds
 * a connection, and a half-received handshake is one that JavaScript cannot
 * reach); the coordinator starts the shard again, usually on this thread.
 */
let active: Shard | undefined;
let hooked = false;

function hookProcess(): void {
  if (hooked) return;
  hooked = true;
  process.on('uncaughtException', (err) => active?.die(err));
  process.on('unhandledRejection', (err) => active?.die(err instanceof Error ? err : new Error(String(err))));
}

class Shard {
  private readonly uws: Uws;
  private readonly cfg: Config;
  private readonly shared: SharedState;
  private readonly broker: ShardBroker;
  private readonly limits: Limits;
  /** Settles waiting for the coordinator's memory window store. */
  private readonly settles = new Map<number, (states: readonly WindowState[]) => void>();
  private settleRid = 0;
  private readonly log: Logger;
  private readonly app: TemplatedApp;
  private readonly sockets = new Set<Socket>();
  private readonly topics = new Map<string, TopicState>();
  private readonly recoveries = new Map<string, Set<Recovery>>();
  /**
   * Per subscribed topic, the newest durable id this shard delivered live.
   * Kept as the id string (a topic's deliveries come in id order, so the
   * last is the newest): nothing is parsed or allocated per delivery.
   */
  private readonly liveLast = new Map<string, string>();
  private readonly registry = new Registry();
  private readonly welcome: string;
  private readonly replies = new Map<Socket, string[]>();
  private readonly lane: SlowLane<SocketData>;
  /** WS_AUTH=jwt: the token checker; null with WS_AUTH=none. */
  private readonly verifier: Verifier | null;
  private readonly origins: readonly OriginRule[] | undefined;
  private readonly expiry = new ExpiryTimers<Socket>((ws) => this.closeWith(ws, ws.getUserData(), 'token_expired'));
  /** Unsent bytes of every socket of this shard, summed by the last sweep. */
  private bufferedBytes = 0;
  private deliveredSinceSweep = false;
  /** WS_COALESCE_INTERVAL_MS: keyed events held per (topic, key), newest wins. */
  private readonly coalescer: Coalescer<Delivery> | null;
  private coalesceTimer: NodeJS.Timeout | undefined;
  private readonly released: Delivery[] = [];
  private idleSweeps = 0;
  private repliesQueued = false;
  private listenSocket: us_listen_socket | null = null;
  private sweepTimer: NodeJS.Timeout | undefined;
  private laneTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  private dying = false;
  private seq = 0;
  private finish: (exit: ShardExit) => void = () => {};
  private fail: (err: Error) => void = () => {};

  private readonly ackLatency = new IndexedHistogram(this.registry, 'sluice_publish_ack_seconds',
    'From a client publish frame received to its ok ack written, by class.', 'class', CLASS_LABELS);
  private readonly deliveryLag = new IndexedHistogram(this.registry, 'sluice_delivery_lag_seconds',
    'From an event accepted by the broker (stored, for a durable one) to its fan-out by a subscribed shard, by class.', 'class', CLASS_LABELS);
  private readonly suppressed = suppressedCounts();
  /** Log lines that a flood of bad input could multiply: each kind is throttled. */
  private readonly lines = {
    rejected: new LogThrottle(LOG_LINES_PER_SECOND, 'debug', this.suppressed),
    refused: new LogThrottle(LOG_LINES_PER_SECOND, 'debug', this.suppressed),
    closed: new LogThrottle(LOG_LINES_PER_SECOND, 'info', this.suppressed),
    degraded: new LogThrottle(LOG_LINES_PER_SECOND, 'warn', this.suppressed),
  };
  private readonly threadMetrics: { stop(): void };

  private readonly m = {
    framesIn: 0,
    drained: 0,
    rejections: Object.fromEntries(ErrorReasons.map((r) => [r, 0])) as Record<ErrorReason, number>,
    upgrades: { accepted: 0, unavailable: 0, unauthorized: 0, forbidden_origin: 0, ip_rate_limited: 0, tenant_rate_limited: 0,
      bad_request: 0, headers_too_large: 0, aborted: 0 } as
      Record<UpgradeRefusal | 'accepted' | 'aborted', number>,
    closes: { abusive: 0, payload_too_large: 0, unavailable: 0, internal: 0, buffer_limit: 0, congested: 0, slow_consumer: 0,
      token_expired: 0 } as
      Record<string, number>,
  };

  constructor(
    private readonly task: ShardTask,
    /** WS_TRACING_MODULE set: spans for upgrades, joins, publishes and fan-out. null: no tracing code runs. */
    private readonly tracer: Tracer | null,
  ) {
    this.cfg = task.config;
    this.uws = loadUws(task.uws).uws;
    this.shared = new SharedState(task.shared);
    this.log = createLogger(this.cfg.logLevel, { shard: task.shard });
    const mesh = new MeshBroker(task.shard, this.cfg.workers, this.cfg, this.log);
    // Cluster mode: how long Redis commands took, by operation.
    const redisLatency = this.cfg.redisUrl === undefined ? undefined : new IndexedHistogram(this.registry, 'sluice_redis_command_seconds',
      'How long Redis commands took, answered or failed (cluster mode), by operation.', 'op', REDIS_OPS);
    this.broker = this.cfg.redisUrl === undefined ? mesh
      : new RedisBroker(task.shard, mesh, this.cfg, this.log, (op, seconds) => redisLatency!.observe(op, seconds));
    this.limits = new Limits(this.cfg, this.broker instanceof RedisBroker ? this.broker.client : undefined,
      (hits, limit, windowMs, now) => new Promise((resolve) => {
        const rid = ++this.settleRid;
        this.settles.set(rid, resolve);
        this.tell({ op: 'settle', rid, hits, limit, windowMs, now });
      }), this.log, (seconds) => redisLatency?.observe(RedisOp.Window, seconds));
    for (const p of task.peers) this.broker.addPeer(p.shard, p.port);
    this.broker.onDelivery((d) => this.deliver(d));
    task.control.on('message', (m: ToShardControl) => this.control(m));
    this.welcome = welcomePrefix(this.cfg.heartbeatMs, this.cfg);
    this.verifier = this.cfg.auth === 'jwt' ? new Verifier(this.cfg) : null;
    this.origins = this.cfg.allowedOrigins === undefined ? undefined : parseOriginList(this.cfg.allowedOrigins);
    this.lane = new SlowLane<SocketData>(
      {
        maxBufferedBytes: this.cfg.maxBufferedBytes,
        slowBufferBytes: effectiveSlowBufferBytes(this.cfg.slowClientBufferBytes, this.cfg.maxBufferedBytes).value,
        maxCongestedMs: this.cfg.maxCongestedMs,
      },
      { ephemeralDropLen: this.cfg.ephemeralDropQueueLen, slowConsumerLen: this.cfg.slowConsumerQueueLen },
      (ws, d, reason) => {
        this.throttled(this.lines.closed, 'info', { conn: d.id, ip: d.ip, reason, queued: d.mailbox?.size ?? 0 },
          'closing a socket that reads too slowly');
        this.closeWith(ws, d, reason, jitter(this.cfg.retryAfterMinMs, this.cfg.retryAfterMaxMs, Math.random));
      },
    );
    this.coalescer = this.cfg.coalesceIntervalMs > 0 ? new Coalescer<Delivery>(this.cfg.coalesceIntervalMs) : null;
    this.registerMetrics();
    this.threadMetrics = registerThreadMetrics(this.registry, `shard${task.shard}`);
    this.app = this.buildApp();
  }

  run(): Promise<ShardExit> {
    active = this; // eslint-disable-line @typescript-eslint/no-this-alias -- the thread's process hooks reach the shard it runs now
    hookProcess();
    return new Promise<ShardExit>((resolve, reject) => {
      this.finish = resolve;
      this.fail = reject;
      // Cluster mode: listen once Redis answers (or after a short wait, degraded as in an outage).
      const connected = this.broker instanceof RedisBroker ? this.broker.connected(3000) : Promise.resolve();
      // The coordinator's probe said, once for the process, which cork this allocator needs.
      const cork = useUpgradeCork(this.uws, this.task.corkInPlace);
      void Promise.all([connected, cork]).then(() => this.listen(reject), reject);
    });
  }

  private listen(reject: (err: Error) => void): void {
    this.app.listen(this.cfg.host, this.task.listenPort, (ls) => {
      if (ls === false) {
        reject(new Error(`shard ${this.task.shard} could not listen on ${this.cfg.host}:${this.task.listenPort}`));
        return;
      }
      this.listenSocket = ls;
      this.sweepTimer = setInterval(() => this.broker.sweep(Date.now()), 1000);
      this.sweepTimer.unref();
      this.laneTimer = setInterval(() => this.sweepLanes(), LANE_SWEEP_MS);
      this.laneTimer.unref();
      this.limits.start();
      this.tell({ op: 'listening', port: this.uws.us_socket_local_port(ls as never) });
    });
  }

  private buildApp(): TemplatedApp {
    const cfg = this.cfg;
    // uWS drops a frame above maxPayloadLength by closing the TCP connection
    // (the client sees 1006). Leaving room above the hard cap lets the guard
    // answer every frame up to twice the cap with a proper 1009.
    const maxPayloadLength = Math.min(2 * cfg.hardMaxFrameBytes, 0x7fffffff);
    const idleTimeout = Math.min(960, Math.max(8, Math.ceil((2 * cfg.heartbeatMs) / 4000) * 4));
    return this.uws
      .App()
      .ws<SocketData>('/ws', {
        maxPayloadLength,
        idleTimeout,
        sendPingsAutomatically: true,
        // The slow lane closes a socket at WS_MAX_BUFFERED_BYTES with 1013. A
        // socket still on the native lane can pass that between two sweeps;
        // uWS's own limit, well above, stays as the last guard: it closes
        // rather than skip a socket silently.
        maxBackpressure: 2 * cfg.maxBufferedBytes + 2 * cfg.hardMaxFrameBytes,
        closeOnBackpressureLimit: true,
        upgrade: (res, req, context) => {
          // uWS aborts the whole process when an upgrade handler throws
          // without answering: a bug here must cost one request, not the node.
          try {
            this.upgrade(res, req, context);
          } catch (err) {
            this.log.error({ err }, 'upgrade handler failed');
            try {
              res.cork(() => res.writeStatus('500 Internal Server Error').end('{"reason":"internal"}', true));
            } catch {
              // Already answered before the failure.
            }
          }
        },
        open: (ws) => this.open(ws),
        message: (ws, message, isBinary) => this.message(ws, message, isBinary),
        close: (ws) => this.close(ws),
        drain: (ws) => this.lane.drained(ws, ws.getUserData(), Date.now()),
      })
      // Reached only by a request to /ws that uWS did not take as a WebSocket handshake.
      .any('/ws', (res, req) => {
        if (req.getHeader('upgrade').toLowerCase() === 'websocket') {
          this.refuse(res, 'bad_request', '400 Bad Request', undefined, undefined, 'no sec-websocket-key');
        } else {
          this.refuse(res, 'bad_request', '426 Upgrade Required', 'upgrade', 'websocket', 'not an upgrade');
        }
      })
      .get('/health/live', (res) => httpJson(res, '200 OK', '{"status":"live"}'))
      .get('/health/ready', (res) => {
        const ready = this.shared.ready(cfg.workers, cfg.maxSockets);
        httpJson(res, ready ? '200 OK' : '503 Service Unavailable', ready ? '{"status":"ready"}' : '{"status":"unavailable"}');
      })
      .any('/*', (res) => httpJson(res, '404 Not Found', '{"reason":"not_found"}'));
  }

  // --- upgrade and lifecycle -------------------------------------------------

  private upgrade(res: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
    const cfg = this.cfg;
    if (this.unavailable()) {
      this.refuseUnavailable(res);
      return;
    }
    // uWS: every header MUST be read before upgrade() returns; req is gone afterwards.
    // One pass over the headers: their size, and every X-Forwarded-For line
    // (a proxy may add its own line rather than append to the client's).
    const query = req.getQuery() ?? ''; // undefined when the URL has none, whatever the typings say
    let headerBytes = req.getUrl().length + query.length;
    let forwardedFor = '';
    req.forEach((k, v) => {
      headerBytes += k.length + v.length + 4;
      if (k === 'x-forwarded-for') forwardedFor = forwardedFor === '' ? v : `${forwardedFor},${v}`;
    });
    if (headerBytes > cfg.maxHeaderBytes) {
      this.refuse(res, 'headers_too_large', '431 Request Header Fields Too Large');
      return;
    }
    const key = req.getHeader('sec-websocket-key');
    const version = req.getHeader('sec-websocket-version');
    if (version !== '13') {
      this.refuse(res, 'bad_request', '426 Upgrade Required', 'sec-websocket-version', '13');
      return;
    }
    if (!WS_KEY.test(key)) {
      this.refuse(res, 'bad_request', '400 Bad Request');
      return;
    }
    const origin = req.getHeader('origin');
    if (this.origins !== undefined && origin !== '' && !originAllowed(this.origins, origin)) {
      this.refuse(res, 'forbidden_origin', '403 Forbidden');
      return;
    }
    const ip = clientAddress(Buffer.from(res.getRemoteAddressAsText()).toString(), forwardedFor, cfg.trustProxy);
    const offered = req.getHeader('sec-websocket-protocol');
    const extensions = req.getHeader('sec-websocket-extensions');
    const protocol = offered.split(',').some((p) => p.trim() === PROTOCOL_VERSION) ? PROTOCOL_VERSION : '';
    const token = this.verifier === null ? undefined
      : tokenFrom({ authorization: req.getHeader('authorization'), protocols: offered, query });
    const span = this.tracer === null ? undefined : startSpan(this.tracer, 'sluice.upgrade', SpanKind.SERVER,
      req.getHeader('traceparent') || undefined, { 'sluice.auth': cfg.auth, 'sluice.shard': this.task.shard });
    // The async part of the upgrade: the IP window (one call to the window
    // store) and the token. uWS requires an abort handler meanwhile, and
    // everything written afterwards goes in one cork.
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
      this.m.upgrades.aborted++;
    });
    void this.admit(ip, token, span).then((who) => {
      let outcome: string;
      if (aborted) outcome = 'aborted';
      else if (typeof who === 'number') outcome = this.refuseIp(res, who);
      else if (typeof who === 'string') outcome = this.refuse(res, 'unauthorized', '401 Unauthorized', undefined, undefined, who);
      else if (this.unavailable()) outcome = this.refuseUnavailable(res);
      else outcome = this.accept(res, context, key, protocol, extensions, ip, who);
      if (span !== undefined) {
        span.setAttribute('sluice.outcome', outcome);
        if (typeof who === 'object') span.setAttribute('sluice.tenant', who.tenant);
        span.end();
      }
    }, (err: unknown) => {
      this.throttled(this.lines.degraded, 'warn', { err }, 'upgrade check failed');
      if (!aborted) this.refuseUnavailable(res);
      endSpan(span, 'unavailable');
    });
  }

  /**
   * Who may come in: the identity, or the ms to wait (IP window full), or
   * why the token was refused. Every attempt counts toward the IP window.
   */
  private async admit(ip: string, token: string | undefined, span: Span | undefined): Promise<Identity | number | string> {
    const wait = await this.limits.connect(ip);
    if (wait !== 0) return wait;
    if (this.verifier === null) return ANONYMOUS;
    if (token === undefined) return 'no token';
    const auth = span === undefined ? undefined : startSpan(this.tracer!, 'sluice.auth', SpanKind.INTERNAL, span);
    const v = await this.verifier.verify(token, Date.now());
    endSpan(auth, v.ok ? undefined : 'unauthorized');
    return v.ok ? v.identity : v.why;
  }

  private refuseIp(res: HttpResponse, waitMs: number): 'ip_rate_limited' {
    this.m.upgrades.ip_rate_limited++;
    res.cork(() => {
      res.writeStatus('429 Too Many Requests')
        .writeHeader('retry-after', String(Math.max(1, Math.ceil(waitMs / 1000))))
        .writeHeader('content-type', 'application/json')
        .end(`{"reason":"ip_rate_limited","retryAfterMs":${waitMs}}`, true);
    });
    return 'ip_rate_limited';
  }

  private unavailable(): boolean {
    const cfg = this.cfg;
    return this.stopping || this.shared.has(Flag.Draining) ||
      (cfg.maxSockets !== 0 && this.shared.totalSockets(cfg.workers) >= cfg.maxSockets);
  }

  private refuseUnavailable(res: HttpResponse): 'unavailable' {
    const cfg = this.cfg;
    this.m.upgrades.unavailable++;
    const retryAfterMs = jitter(cfg.retryAfterMinMs, cfg.retryAfterMaxMs, Math.random);
    res.cork(() => {
      res.writeStatus('503 Service Unavailable')
        .writeHeader('retry-after', String(Math.max(1, Math.ceil(retryAfterMs / 1000))))
        .writeHeader('content-type', 'application/json')
        .end(`{"reason":"unavailable","retryAfterMs":${retryAfterMs}}`, true);
    });
    return 'unavailable';
  }

  /** A plain-HTTP refusal at the upgrade; no socket is opened. `why` goes to the debug log, never a token. */
  private refuse(res: HttpResponse, reason: Exclude<UpgradeRefusal, 'unavailable'>, status: string, header?: string,
    value?: string, why?: string): typeof reason {
    this.m.upgrades[reason]++;
    if (this.log.isLevelEnabled('debug')) {
      this.throttled(this.lines.refused, 'debug', { reason, why, ip: Buffer.from(res.getRemoteAddressAsText()).toString() }, 'upgrade refused');
    }
    res.cork(() => {
      res.writeStatus(status);
      if (header !== undefined) res.writeHeader(header, value!);
      res.writeHeader('content-type', 'application/json').end(`{"reason":"${reason}"}`, true);
    });
    return reason;
  }

  private accept(res: HttpResponse, context: us_socket_context_t, key: string, protocol: string, extensions: string, ip: string,
    who: Identity): 'accepted' {
    const data: SocketData = {
      id: `${this.task.nodeId}.${this.task.shard}.${this.task.generation}.${(++this.seq).toString(36)}`,
      tenant: who.tenant,
      tenantWindowKey: tenantWindowKey(who.tenant),
      user: who.user,
      ip,
      join: who.join,
      pub: who.publish,
      expiresAt: who.expiresAt,
      open: true,
      strikes: 0,
      inflight: 0,
      topics: null,
      congestedSince: -1,
      mailbox: null,
      unsent: 0,
      windowStart: 0,
      windowCount: 0,
    };
    this.m.upgrades.accepted++;
    // Not res.cork(): see upgradeCorked.
    upgradeCorked(res, () => res.upgrade(data, key, protocol, extensions, context));
    return 'accepted';
  }

  private open(ws: Socket): void {
    const d = ws.getUserData();
    this.sockets.add(ws);
    this.shared.addSockets(this.task.shard, 1);
    ws.send(welcomeFrame(this.welcome, d.id), false);
    if (d.expiresAt !== Infinity) {
      // The token may have expired between its check and now.
      if (d.expiresAt <= Date.now()) this.closeWith(ws, d, 'token_expired');
      else this.expiry.add(ws, d.expiresAt);
    }
  }

  private close(ws: Socket): void {
    const d = ws.getUserData();
    d.open = false;
    this.sockets.delete(ws);
    this.shared.addSockets(this.task.shard, -1);
    if (d.expiresAt !== Infinity) this.expiry.delete(ws, d.expiresAt);
    this.lane.forget(ws, d);
    if (d.topics !== null) {
      // uWS already removed the socket from its native topics.
      for (const key of d.topics.values()) {
        this.cancelRecovery(d, key);
        this.release(key);
      }
      d.topics = null;
    }
  }

  /** Closes a socket with the code and JSON reason of the protocol's close table. */
  private closeWith(ws: Socket, d: SocketData, reason: CloseReason, retryAfterMs?: number): void {
    if (!d.open) return;
    d.open = false;
    this.m.closes[reason] = (this.m.closes[reason] ?? 0) + 1;
    ws.end(closeSpecs[reason].code, encodeCloseReason(reason, retryAfterMs));
  }

  // --- the socket guard and dispatch -----------------------------------------

  private message(ws: Socket, buf: ArrayBuffer, isBinary: boolean): void {
    const d = ws.getUserData();
    if (!d.open) return;
    this.m.framesIn++;
    const cfg = this.cfg;
    const len = buf.byteLength;
    if (len > cfg.hardMaxFrameBytes) {
      this.throttled(this.lines.closed, 'info', { conn: d.id, ip: d.ip, bytes: len }, 'closing socket: frame above the hard cap');
      this.closeWith(ws, d, 'payload_too_large');
      return;
    }
    const wait = hitFixedWindow(d, Date.now(), cfg.maxMessages, cfg.rateWindowMs);
    if (wait !== 0) {
      this.reject(ws, d, this.peek(buf), 'rate_limited', wait);
      return;
    }
    if (isBinary) {
      this.reject(ws, d, undefined, 'bad_request', undefined, 'binary frames are not accepted: send JSON text');
      return;
    }
    if (len > cfg.maxFrameBytes) {
      this.reject(ws, d, this.peek(buf), 'payload_too_large', undefined, `frame above ${cfg.maxFrameBytes} bytes`);
      return;
    }
    const text = utf8.decode(buf);
    if (this.task.testHooks && text === CRASH_FRAME) throw new Error('debug.crash: shard crashed on purpose');
    const r = decodeClientFrame(text);
    if (!r.ok) {
      this.reject(ws, d, r.ref, r.reason, undefined, r.message);
      return;
    }
    const f = r.frame;
    switch (f.type) {
      case 'publish':
        this.publish(ws, d, f);
        return;
      case 'join':
        this.join(ws, d, f);
        return;
      case 'leave':
        this.leave(ws, d, f);
        return;
      case 'ping':
        d.strikes = 0;
        ws.send(encodePong(f.ref), false);
        return;
    }
  }

  private peek(buf: ArrayBuffer): string | undefined {
    return peekRef(Buffer.from(buf, 0, Math.min(buf.byteLength, PEEK_REF_BYTES)).toString('latin1'));
  }

  /** Answers a rejected frame; the frame goes no further and the socket stays open, unless it struck out. */
  private reject(ws: Socket, d: SocketData, ref: string | undefined, reason: ErrorReason, retryAfterMs?: number, message?: string): void {
    this.m.rejections[reason]++;
    ws.send(encodeRejection(ref, reason, retryAfterMs, message), false);
    if (this.log.isLevelEnabled('debug')) this.throttled(this.lines.rejected, 'debug', { conn: d.id, reason, ref }, 'frame rejected');
    if (isStrike(reason) && ++d.strikes >= this.cfg.maxStrikes) {
      this.throttled(this.lines.closed, 'info', { conn: d.id, ip: d.ip, strikes: d.strikes }, 'closing socket: too many rejected frames in a row');
      this.closeWith(ws, d, 'abusive');
    }
  }

  private publish(ws: Socket, d: SocketData, f: PublishFrame): void {
    if (!allows(d.pub, f.topic)) {
      this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow publishing to ${f.topic}`);
      return;
    }
    const wait = this.limits.publish(d.tenantWindowKey, Date.now());
    if (wait !== 0) {
      this.reject(ws, d, f.ref, 'tenant_rate_limited', wait);
      return;
    }
    d.strikes = 0;
    d.inflight++;
    let inline = true;
    const t0 = performance.now();
    const traced = this.tracer === null ? undefined : this.tracePublish(d.tenant, f);
    this.broker.publishThen(d.tenant, traced?.req ?? f, (res) => {
      d.inflight--;
      if (traced !== undefined) this.endPublish(traced, res);
      if (!d.open) return;
      let reply: string;
      if (!res.ok) reply = encodeRejection(f.ref, res.reason);
      else if (res.id === undefined) reply = encodeReplyOk(f.ref);
      else reply = encodeReplyOk(f.ref, res.duplicate ? `{"id":"${res.id}","duplicate":true}` : `{"id":"${res.id}"}`);
      // Answered within this message handler (this shard owns the topic):
      // uWS corks the handler's sends, and the send drains the event that
      // app.publish queued for this socket first.
      if (inline) ws.send(reply, false);
      else this.queueReply(ws, reply);
      if (res.ok) this.ackLatency.observe(f.cls, (performance.now() - t0) / 1000);
    });
    inline = false;
  }

  /**
   * A publish's spans: `sluice.publish` (a child of the publisher's
   * traceparent, when it sent one) and its child `sluice.store`, the
   * broker's part. The event carries the publish span's traceparent onward,
   * so the fan-out on every shard and node is a child of it.
   */
  private tracePublish<F extends PublishFields>(tenant: string, f: F): { req: F; span: Span; store: Span } {
    const span = startSpan(this.tracer!, 'sluice.publish', SpanKind.PRODUCER, f.traceparent, {
      'messaging.system': 'sluice', 'messaging.operation.type': 'send', 'messaging.destination.name': f.topic, 'sluice.tenant': tenant,
      'sluice.class': CLASS_LABELS[f.cls]!, 'sluice.shard': this.task.shard,
    });
    const store = startSpan(this.tracer!, 'sluice.store', this.cfg.redisUrl === undefined ? SpanKind.INTERNAL : SpanKind.CLIENT, span,
      { 'sluice.store': this.cfg.redisUrl === undefined ? 'memory' : 'redis' });
    return { req: { ...f, traceparent: traceparentOf(span) }, span, store };
  }

  private endPublish(t: { span: Span; store: Span }, res: PublishResult): void {
    if (res.ok) {
      if (res.id !== undefined) t.span.setAttribute('messaging.message.id', res.id);
      if (res.duplicate) t.span.setAttribute('sluice.duplicate', true);
    }
    const error = res.ok ? undefined : res.reason;
    endSpan(t.store, error);
    endSpan(t.span, error);
  }

  /**
   * Acks of one broker batch go out together: one corked write per socket
   * instead of one per ack. A corked send also drains what app.publish queued
   * for that socket, so an event and its ack share the write. The flush runs
   * as a microtask queued after the acks' own continuations.
   */
  private queueReply(ws: Socket, frame: string): void {
    const list = this.replies.get(ws);
    if (list === undefined) this.replies.set(ws, [frame]);
    else list.push(frame);
    if (!this.repliesQueued) {
      this.repliesQueued = true;
      queueMicrotask(this.flushReplies);
    }
  }

  private readonly flushReplies = (): void => {
    this.repliesQueued = false;
    for (const [ws, frames] of this.replies) {
      if (!ws.getUserData().open) continue;
      ws.cork(() => {
        for (const f of frames) ws.send(f, false);
      });
    }
    this.replies.clear();
  };

  private join(ws: Socket, d: SocketData, f: JoinFrame): void {
    if (d.topics?.has(f.topic) === true) {
      d.strikes = 0;
      ws.send(encodeReplyOk(f.ref), false);
      return;
    }
    if (!allows(d.join, f.topic)) {
      this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow joining ${f.topic}`);
      return;
    }
    if ((d.topics?.size ?? 0) >= this.cfg.maxJoins) {
      this.reject(ws, d, f.ref, 'too_many_joins', undefined, `at most ${this.cfg.maxJoins} joined topics per socket`);
      return;
    }
    d.strikes = 0;
    const key = topicKey(d.tenant, f.topic);
    (d.topics ??= new Map()).set(f.topic, key);
    const since = f.since;
    const span = this.tracer === null ? undefined : startSpan(this.tracer, 'sluice.join', SpanKind.SERVER, undefined, {
      'messaging.destination.name': f.topic, 'sluice.tenant': d.tenant, 'sluice.since': since !== undefined, 'sluice.shard': this.task.shard,
    });
    this.acquire(key, (ok) => {
      if (!d.open) {
        endSpan(span, 'closed');
        return;
      }
      if (d.topics?.get(f.topic) !== key) {
        // Left before the join completed: the join happened, the leave undid it.
        ws.cork(() => ws.send(encodeReplyOk(f.ref), false));
        endSpan(span);
        return;
      }
      if (!ok) {
        d.topics.delete(f.topic);
        this.release(key);
        ws.cork(() => ws.send(encodeRejection(f.ref, 'unavailable'), false));
        endSpan(span, 'unavailable');
        return;
      }
      if (since === undefined) {
        ws.cork(() => {
          this.lane.subscribe(ws, d, key);
          ws.send(encodeReplyOk(f.ref), false);
        });
        endSpan(span);
        return;
      }
      this.recover(ws, d, f, key, since, span);
    });
  }

  /**
   * Replays history after `since`, then goes live with no gap and no
   * duplicate: the broker subscription is already up, so live events that
   * arrive while the history is fetched are buffered, and those the replay
   * already covered (id not above the last replayed id) are dropped.
   * Everything before the join's reply is replay; everything after is live.
   */
  private recover(ws: Socket, d: SocketData, f: JoinFrame, key: string, since: string, span: Span | undefined): void {
    const rec: Recovery = { ws, d, topic: f.topic, key, buffered: [], after: undefined };
    let set = this.recoveries.get(key);
    if (set === undefined) this.recoveries.set(key, (set = new Set()));
    set.add(rec);
    const done = (): boolean => {
      if (this.recoveries.get(key)?.delete(rec) === true) {
        if (this.recoveries.get(key)?.size === 0) this.recoveries.delete(key);
        return d.open && d.topics?.get(f.topic) === key;
      }
      // Left meanwhile: as for a plain join, the join happened and the leave
      // undid it, and the join still gets its reply. (Closed: nobody to tell.)
      if (d.open) ws.cork(() => ws.send(encodeReplyOk(f.ref), false));
      return false;
    };
    const readSpan = span === undefined ? undefined : startSpan(this.tracer!, 'sluice.history', SpanKind.INTERNAL, span);
    this.broker.history(key, since).then((read: HistoryRead) => {
      if (readSpan !== undefined) {
        readSpan.setAttributes({ 'sluice.replayed': read.events.length, 'sluice.recovered': read.recovered });
        readSpan.end();
      }
      if (!done()) {
        endSpan(span);
        return;
      }
      let last: EventId = parseEventId(since)!;
      const lastReplayed = read.events.at(-1)?.id;
      if (lastReplayed !== undefined) last = parseEventId(lastReplayed)!;
      ws.cork(() => {
        for (const e of read.events) ws.send(e.frame, false);
        ws.send(encodeReplyOk(f.ref, `{"recovered":${read.recovered}}`), false);
        for (const ev of rec.buffered) {
          if (ev.id === undefined || compareEventIds(parseEventId(ev.id)!, last) > 0) ws.send(ev.frame, false);
        }
        // In cluster mode the read and the live events come over two Redis
        // connections: the pub/sub message of an event the read returned may
        // still be on its way. Until live delivery has reached the last
        // replayed id, the socket gets live events one by one, without those
        // the replay covered; then it goes native (`forward`).
        const live = this.liveLast.get(key);
        if (live !== undefined && compareEventIds(parseEventId(live)!, last) >= 0) this.lane.subscribe(ws, d, key);
        else {
          rec.after = last;
          rec.buffered.length = 0;
          let again = this.recoveries.get(key);
          if (again === undefined) this.recoveries.set(key, (again = new Set()));
          again.add(rec);
        }
      });
      if (span !== undefined) {
        span.setAttributes({ 'sluice.replayed': read.events.length, 'sluice.recovered': read.recovered });
        span.end();
      }
    }, (err: unknown) => {
      // The topic's owner is unavailable: the join fails, the socket goes on.
      endSpan(readSpan, 'unavailable');
      if (!done()) {
        endSpan(span);
        return;
      }
      endSpan(span, 'unavailable');
      this.throttled(this.lines.degraded, 'warn', { topic: key, err }, 'history unavailable for a join');
      d.topics!.delete(f.topic);
      this.release(key);
      ws.cork(() => ws.send(encodeRejection(f.ref, 'unavailable'), false));
    });
  }

  /** A live event for a socket whose replay is done but whose topic's live delivery had not reached the replay's end. */
  private forward(rec: Recovery, d: Delivery, id: EventId | undefined): void {
    const after = rec.after!;
    const caughtUp = id !== undefined && compareEventIds(id, after) >= 0;
    if (rec.d.open) {
      rec.ws.cork(() => {
        if (id === undefined || compareEventIds(id, after) > 0) rec.ws.send(d.frame, false);
        if (caughtUp) this.lane.subscribe(rec.ws, rec.d, rec.key);
      });
    }
    if (caughtUp) {
      const set = this.recoveries.get(rec.key);
      set?.delete(rec);
      if (set?.size === 0) this.recoveries.delete(rec.key);
    }
  }

  private cancelRecovery(d: SocketData, key: string): void {
    const set = this.recoveries.get(key);
    if (set === undefined) return;
    for (const rec of set) if (rec.d === d) set.delete(rec);
    if (set.size === 0) this.recoveries.delete(key);
  }

  private leave(ws: Socket, d: SocketData, f: LeaveFrame): void {
    const key = d.topics?.get(f.topic);
    if (key === undefined) {
      this.reject(ws, d, f.ref, 'not_joined', undefined, `not joined to ${f.topic}`);
      return;
    }
    d.strikes = 0;
    d.topics!.delete(f.topic);
    this.cancelRecovery(d, key);
    this.lane.unsubscribe(ws, key);
    this.release(key);
    ws.send(encodeReplyOk(f.ref), false);
  }

  // --- topics: one broker subscription per shard, counted --------------------

  private acquire(key: string, cb: (ok: boolean) => void): void {
    const st = this.topics.get(key);
    if (st !== undefined) {
      st.count++;
      if (st.ready) cb(true);
      else st.waiters.push(cb);
      return;
    }
    const created: TopicState = { count: 1, ready: false, waiters: [cb] };
    this.topics.set(key, created);
    this.broker.subscribe(key).then(
      () => {
        created.ready = true;
        const waiters = created.waiters;
        created.waiters = [];
        for (const w of waiters) w(true);
      },
      (err: unknown) => {
        this.throttled(this.lines.degraded, 'warn', { topic: key, err }, 'broker subscribe failed');
        const waiters = created.waiters;
        created.waiters = [];
        for (const w of waiters) w(false);
      },
    );
  }

  private release(key: string): void {
    const st = this.topics.get(key);
    if (st === undefined) return;
    if (--st.count > 0) return;
    this.topics.delete(key);
    this.liveLast.delete(key);
    this.broker.unsubscribe(key);
  }

  private deliver(d: Delivery): void {
    const c = this.coalescer;
    if (c !== null && d.key !== undefined && d.cls === EventClass.Keyed) {
      const held = c.size;
      if (!c.offer(d.topic, d.key, d, Date.now())) {
        // Held: at most one event per (topic, key) per interval leaves this
        // shard, so each socket gets at most one; the newest held one wins,
        // and one it replaced counts as superseded.
        if (c.size === held) this.lane.counters.dropped.superseded++;
        this.armCoalesceTimer();
        return;
      }
    }
    this.fanOut(d);
  }

  private armCoalesceTimer(): void {
    if (this.coalesceTimer !== undefined || this.coalescer === null) return;
    const at = this.coalescer.nextDueAt();
    if (at === undefined) return;
    this.coalesceTimer = setTimeout(() => {
      this.coalesceTimer = undefined;
      const now = Date.now();
      this.coalescer!.due(now, this.released);
      for (const d of this.released) this.fanOut(d);
      this.released.length = 0;
      this.coalescer!.forget(now - this.cfg.coalesceIntervalMs);
      this.armCoalesceTimer();
    }, Math.max(0, at - Date.now()));
  }

  private fanOut(d: Delivery): void {
    const now = Date.now();
    this.deliveredSinceSweep = true;
    if (d.at !== 0) this.deliveryLag.observe(d.cls, now > d.at ? (now - d.at) / 1000 : 0);
    const span = this.tracer === null ? undefined : this.traceFanOut(d);
    const buffering = this.lane.beforeNative(d, now);
    // Native subscribers without a backlog get the event written out when uWS
    // drains its topic queue at the end of this turn; those with one (the
    // watched sockets) are counted when their buffer empties.
    this.lane.counters.sent += this.app.numSubscribers(d.topic) - buffering;
    this.app.publish(d.topic, d.frame, false, false);
    this.lane.deliver(d, now);
    if (d.id !== undefined) this.liveLast.set(d.topic, d.id);
    const recs = this.recoveries.get(d.topic);
    if (recs !== undefined) {
      const id = d.id === undefined ? undefined : parseEventId(d.id);
      for (const rec of recs) {
        if (rec.after === undefined) rec.buffered.push(d);
        else this.forward(rec, d, id);
      }
    }
    span?.end();
  }

  /**
   * `sluice.fanout`: this shard's delivery of an event, a child of the
   * publish span whose traceparent the event carries (from any shard or
   * node). An event without one (published without tracing) has no span.
   */
  private traceFanOut(d: Delivery): Span | undefined {
    const f = d.frame;
    const at = f.indexOf(TRACEPARENT_FIELD);
    // The frame's own field comes before its data; a match inside the data is not it.
    if (at < 0 || at > f.indexOf(DATA_FIELD)) return undefined;
    const start = at + TRACEPARENT_FIELD.length;
    const tp = f.slice(start, f.indexOf('"', start));
    return startSpan(this.tracer!, 'sluice.fanout', SpanKind.CONSUMER, tp, {
      'messaging.system': 'sluice', 'messaging.operation.type': 'process', 'messaging.destination.name': d.topic.slice(d.topic.indexOf('/') + 1),
      'sluice.class': CLASS_LABELS[d.cls]!, 'sluice.subscribers': this.app.numSubscribers(d.topic), 'sluice.shard': this.task.shard,
      ...(d.id === undefined ? {} : { 'messaging.message.id': d.id }),
    });
  }

  /**
   * Every LANE_SWEEP_MS: moves sockets that passed the soft limit to the slow
   * lane, evicts what waited too long, and sums unsent bytes for the gauge.
   */
  private sweepLanes(): void {
    const now = Date.now();
    // While events flow, every tick; when nothing was delivered, every tenth
    // (slow-lane sockets still need their congestion timers checked).
    if (!this.deliveredSinceSweep && ++this.idleSweeps < 10) return;
    this.deliveredSinceSweep = false;
    this.idleSweeps = 0;
    let buffered = 0;
    for (const ws of this.sockets) {
      const d = ws.getUserData();
      if (!d.open) continue;
      const b = ws.getBufferedAmount();
      buffered += b;
      this.lane.settle(ws, d, b);
      this.lane.check(ws, d, now, b);
      if (d.open) this.lane.watchIf(ws, b);
    }
    this.bufferedBytes = buffered;
  }

  // --- control, stop, crash --------------------------------------------------

  private control(m: ToShardControl): void {
    switch (m.op) {
      case 'stop':
        this.stop();
        return;
      case 'drain':
        this.drain(m.close);
        return;
      case 'metrics':
        void this.registry.getMetricsAsJSON().then((json) => this.tell({ op: 'metrics', rid: m.rid, json }));
        return;
      case 'publish': {
        // The coordinator sends an admin publish to the topic's owner: this shard.
        // Its traceparent is the coordinator's `sluice.http.publish` span.
        const traced = this.tracer === null ? undefined : this.tracePublish(m.req.tenant, m.req);
        void this.broker.publish(m.req.tenant, traced?.req ?? m.req).then((res) => {
          if (traced !== undefined) this.endPublish(traced, res);
          this.tell({ op: 'published', rid: m.rid, res });
        });
        return;
      }
      case 'peer':
        this.broker.addPeer(m.shard, m.port);
        return;
      case 'settled': {
        const done = this.settles.get(m.rid);
        this.settles.delete(m.rid);
        done?.(m.states);
        return;
      }
    }
  }

  /** A line of a kind a flood could multiply: at most LOG_LINES_PER_SECOND of it per second, with how many were left out. */
  private throttled(t: LogThrottle, level: 'debug' | 'info' | 'warn', fields: Record<string, unknown>, msg: string): void {
    const left = t.take(Date.now());
    if (left < 0) return;
    if (left > 0) fields.suppressed = left;
    this.log[level](fields, msg);
  }

  private tell(m: FromShardControl): void {
    this.task.control.postMessage(m);
  }

  /**
   * One tick of the node's drain: no more listening, and up to `budget`
   * sockets closed with 1012 and a retry hint, oldest first. A socket with a
   * publish whose ack it has not been sent is left for a later tick: it is
   * closed between frames, after its acks.
   */
  private drain(budget: number): void {
    this.closeListenSocket();
    const cfg = this.cfg;
    let left = budget;
    for (const ws of this.sockets) {
      if (left <= 0) break;
      const d = ws.getUserData();
      if (!d.open || d.inflight > 0) continue;
      this.m.drained++;
      this.closeWith(ws, d, 'unavailable', jitter(cfg.retryAfterMinMs, cfg.retryAfterMaxMs, Math.random));
      left--;
    }
  }

  /** Closes the listen socket and every socket (1012 with a retry hint), then ends the task. */
  private stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer);
    if (this.laneTimer !== undefined) clearInterval(this.laneTimer);
    if (this.coalesceTimer !== undefined) clearTimeout(this.coalesceTimer);
    this.expiry.clear();
    this.limits.stop();
    this.threadMetrics.stop();
    this.closeListenSocket();
    const cfg = this.cfg;
    for (const ws of [...this.sockets]) {
      this.closeWith(ws, ws.getUserData(), 'unavailable', jitter(cfg.retryAfterMinMs, cfg.retryAfterMaxMs, Math.random));
    }
    const deadline = Date.now() + 3000;
    const poll = (): void => {
      if (this.sockets.size > 0 && Date.now() < deadline) {
        setTimeout(poll, 20);
        return;
      }
      // Sockets whose peer never answered the close frame are cut: a worker
      // thread that exits with a socket open aborts the whole process.
      for (const ws of [...this.sockets]) ws.close();
      this.broker.flush();
      this.broker.close();
      // The coordinator waits for the kernel to drop the connections still
      // closing before it ends this thread (see proc-sockets.ts).
      setImmediate(() => this.finish({ shard: this.task.shard }));
    };
    poll();
  }

  private closeListenSocket(): void {
    if (this.listenSocket !== null) {
      this.uws.us_listen_socket_close(this.listenSocket);
      this.listenSocket = null;
    }
  }

  /**
   * A bug reached the top of this thread. Close every socket and timer this
   * shard holds and let go of its ports, then fail the task: the coordinator
   * starts the shard again. The thread itself lives on (see `active`): the
   * old app's unfinished handshakes time out there on their own, refused.
   */
  die(err: Error): void {
    if (this.dying) return;
    this.dying = true;
    this.stopping = true;
    this.log.error({ err }, 'shard crashed; closing its sockets');
    this.closeListenSocket();
    for (const t of [this.sweepTimer, this.laneTimer]) if (t !== undefined) clearInterval(t);
    if (this.coalesceTimer !== undefined) clearTimeout(this.coalesceTimer);
    this.expiry.clear();
    this.limits.stop();
    this.threadMetrics.stop();
    // A hard close, not end(): the other shards keep running and the
    // restart should not wait for peers to answer close frames.
    for (const ws of [...this.sockets]) {
      this.m.closes.internal!++;
      ws.close();
    }
    this.broker.close();
    this.task.control.close();
    this.fail(err);
  }

  private registerMetrics(): void {
    const r = this.registry;
    counterFrom(r, 'sluice_frames_in_total', 'Client frames received, accepted or not.', undefined, () => this.m.framesIn);
    counterFrom(r, 'sluice_limit_rejections_total', 'Client frames rejected, by reason.', 'reason', () => this.m.rejections);
    counterFrom(r, 'sluice_upgrades_total', 'WebSocket upgrades, by outcome.', 'outcome', () => this.m.upgrades);
    counterFrom(r, 'sluice_clients_closed_total', 'Sockets the server closed, by reason.', 'reason', () => this.m.closes);
    gaugeFrom(r, 'sluice_connected_sockets', 'Open WebSocket connections.', () => this.sockets.size);
    counterFrom(r, 'sluice_drained_sockets_total', 'Sockets closed by a drain (1012).', undefined, () => this.m.drained);
    counterFrom(r, 'sluice_messages_sent_total',
      'Events sent to sockets. For a socket with a backlog (a quarter of the soft limit unsent, or in the slow lane) an event counts once its buffer is empty.',
      undefined, () => this.lane.counters.sent);
    counterFrom(r, 'sluice_messages_dropped_total', 'Events not delivered to a congested socket, by reason.', 'reason',
      () => this.lane.counters.dropped);
    gaugeFrom(r, 'sluice_buffered_bytes', 'Bytes written to sockets and not yet sent, all sockets (sampled).', () => this.bufferedBytes);
    gaugeFrom(r, 'sluice_slow_lane_sockets', 'Sockets in the slow lane (a mailbox instead of native topics).', () => this.lane.sockets);
    const stats = this.broker.stats;
    counterFrom(r, 'sluice_messages_published_total', 'Events accepted by the broker, by class.', 'class', () => stats.published);
    counterFrom(r, 'sluice_publish_duplicates_total', 'Publishes answered from the idempotency table.', undefined, () => stats.duplicates);
    gaugeFrom(r, 'sluice_history_topics', 'Topics with history held in memory (embedded mode).', () => stats.historyTopics);
    counterFrom(r, 'sluice_redis_commands_total', 'Redis commands sent (cluster mode): bus, history and limits.', undefined,
      () => stats.redisCommands + this.limits.redisCommands);
    counterFrom(r, 'sluice_redis_errors_total', 'Redis commands that failed: unreachable, timed out or refused (cluster mode).', undefined,
      () => stats.redisErrors);
    counterFrom(r, 'sluice_limiter_settles_total', 'Batches of tenant and IP limit hits settled with a window store, by store.', 'store',
      () => this.limits.stats.settles);
    counterFrom(r, 'sluice_limiter_redis_commands_total', 'Redis commands sent to settle tenant and IP limits (part of sluice_redis_commands_total).',
      undefined, () => this.limits.redisCommands);
    counterFrom(r, 'sluice_limiter_settled_hits_total', 'Keys (tenants, addresses) settled in those batches, by store.', 'store',
      () => this.limits.stats.settled);
    counterFrom(r, 'sluice_log_lines_suppressed_total', 'Log lines left out by the per-kind log throttle (a flood of bad input), by level.',
      'level', () => this.suppressed);
    counterFrom(r, 'sluice_limiter_fallbacks_total', 'Limit settles Redis failed and this node\'s memory store took.', undefined,
      () => this.limits.stats.fallbacks);
  }
}

/**
 * Plain HTTP answers on the public port always close their connection: a
 * keep-alive connection left open would be a socket this thread cannot close
 * (uWS has no handle to it) when the shard stops or crashes.
 */
function httpJson(res: HttpResponse, status: string, body: string): void {
  res.cork(() => {
    res.writeStatus(status).writeHeader('content-type', 'application/json').end(body, true);
  });
}
