/**
 * A shard: one worker thread, one uWS app listening on the shared port
 * (SO_REUSEPORT lets the kernel spread connections over the shards). It owns
 * its sockets from upgrade to close and applies the socket guard before any
 * frame is decoded. It talks to the rest of the node only through its Broker
 * and the shared flags.
 *
 * This file is the composition root: it makes each part once, wires them,
 * answers the coordinator, and has the one teardown for stop and crash. The
 * parts: admission (upgrades), session (frames and commands), topics,
 * recovery, fan-out (with the slow lane), replies, drain, metrics, tracing.
 */
import { BrokerUnavailable, effectiveSlowBufferBytes, type HistoryRequest, PendingRequests, retryHint, Revocations, topicKey, TopicOwners, type UserSocketStore,
  type WindowState } from '@sluice/core';
import { RedisUserSockets } from '@sluice/redis';
import { eventFrameData, PROTOCOL_VERSION } from '@sluice/protocol';
import { loadTracing, registerThreadMetrics } from '@sluice/telemetry';
import { loadUws, type us_listen_socket, useUpgradeCork, type Uws } from '@sluice/uws';
import { Verifier } from '../auth.ts';
import { anyHook, type Http, hookHttp, type ShardHooks, shardHooks } from '../hooks.ts';
import { Lifecycle } from './lifecycle.ts';
import { type Backplane, createBackplane, storeOf } from '../backplane.ts';
import type { FromShardControl, ToShardControl } from '../control.ts';
import { type SharedLimits, sharedWindows } from '../shared-limits.ts';
import type { ShardBroker } from '../shard-broker.ts';
import { Flag, SharedState } from '../shared-state.ts';
import { UpgradeBudget } from '../upgrade-budget.ts';
import { SlowLane } from '../slow-lane.ts';
import { UserSocketCap } from '../user-socket-cap.ts';
import { AdminActions } from './admin-actions.ts';
import { Admission } from './admission.ts';
import { buildApp } from './app.ts';
import { ShardContext } from './context.ts';
import { drainTick } from './drain.ts';
import { FanOut } from './fanout.ts';
import { ShardMetrics } from './metrics.ts';
import { Recoveries, type Recovery } from './recovery.ts';
import { Replies } from './replies.ts';
import { Session } from './session.ts';
import { type Socket, type SocketData, socketId } from './socket-data.ts';
import type { ShardExit, ShardTask } from './task.ts';
import { Topics } from './topics.ts';
import { ShardTracing } from './tracing.ts';
import { SocketIndex } from './socket-index.ts';

/** How long a shard's answer to GET /v1/topics stands (a page asks every 2 s). */
const TOP_TOPICS_CACHE_MS = 2000;
/** The most sockets of one user a shard lists for GET /v1/connections. */
const MAX_CONNECTIONS_LISTED = 1000;
import { ShardPresence } from './presence.ts';
import { PresenceCluster } from '../presence-redis.ts';

export type { ShardExit, ShardTask } from './task.ts';

export default async function runShard(task: ShardTask): Promise<ShardExit> {
  // WS_TRACING_MODULE registers an SDK in this thread's copy of the OpenTelemetry API.
  const tracer = await loadTracing(task.config.tracingModule, PROTOCOL_VERSION);
  const http = anyHook(task.config) ? await hookHttp(task.config) : null;
  return new Shard(task, tracer === null ? null : new ShardTracing(tracer, task.config, storeOf(task.config), task.shard), http).run();
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
  private readonly ctx: ShardContext;
  private readonly uws: Uws;
  private readonly shared: SharedState;
  private readonly backplane: Backplane;
  private readonly broker: ShardBroker;
  private readonly limits: SharedLimits;
  private readonly metrics = new ShardMetrics();
  private readonly session: Session;
  private readonly actions: AdminActions;
  private readonly topics: Topics<Recovery>;
  /** The last answer to GET /v1/topics, by limit and tenant. */
  private topTopics: { readonly key: string; readonly at: number; readonly top: [string, number][] } | undefined;
  private readonly revocations = new Revocations();
  private prunedAt = 0;
  private readonly fanOut: FanOut;
  private readonly app: ReturnType<typeof buildApp>;
  private readonly threadMetrics: { stop(): void };
  private readonly hooks: ShardHooks;
  /** WS_WEBHOOK_URL: the shard's lifecycle events, on their way to the coordinator; null without it. */
  private readonly lifecycle: Lifecycle | null;
  /** Settles waiting for the coordinator's memory window store. */
  private readonly settles = new PendingRequests<readonly WindowState[]>();
  /** Claims waiting for the coordinator's user-socket store (embedded mode). */
  private readonly userClaims = new PendingRequests<readonly boolean[]>();
  /** WS_MAX_USER_SOCKETS: null when off. */
  private readonly cap: UserSocketCap | null;
  /** WS_PRESENCE_TOPICS: null when no topic keeps presence. */
  private readonly presence: ShardPresence | null;
  /** WS_PRESENCE_TOPICS in cluster mode: the tables' link to the other nodes through Redis. */
  private readonly presenceCluster: PresenceCluster | null;
  private listenSocket: us_listen_socket | null = null;
  private sweepTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  private dying = false;
  private finish: (exit: ShardExit) => void = () => {};
  private fail: (err: Error) => void = () => {};

  /** `http`: undici for the backend hooks, null when no hook URL is set. */
  constructor(private readonly task: ShardTask, tracing: ShardTracing | null, http: Http | null) {
    const ctx = (this.ctx = new ShardContext(task, tracing));
    const cfg = ctx.cfg;
    this.uws = loadUws(task.uws).uws;
    this.shared = new SharedState(task.shared);
    const registry = this.metrics.registry;
    this.backplane = createBackplane({
      shard: task.shard, config: cfg, log: ctx.log, registry,
      localSettle: (hits, limit, windowMs, now) => this.settles.request((rid) => this.tell({ op: 'settle', rid, hits, limit, windowMs, now })),
      windows: task.windows === undefined ? undefined : sharedWindows(cfg, task.windows, task.shard, true),
      owners: new TopicOwners(cfg.workers, task.owners),
    });
    this.broker = this.backplane.broker;
    this.limits = this.backplane.limits;
    for (const p of task.peers) this.broker.addPeer(p.shard, p.port);

    const lane = new SlowLane<SocketData>(
      {
        maxBufferedBytes: cfg.maxBufferedBytes,
        slowBufferBytes: effectiveSlowBufferBytes(cfg.slowClientBufferBytes, cfg.maxBufferedBytes).value,
        maxCongestedMs: cfg.maxCongestedMs,
      },
      { ephemeralDropLen: cfg.ephemeralDropQueueLen, slowConsumerLen: cfg.slowConsumerQueueLen },
      (ws, d, reason) => {
        ctx.lines.closed.write({ conn: socketId(d), ip: d.ip, reason, queued: d.mailbox?.size ?? 0 }, 'closing a socket that reads too slowly');
        this.session.close(ws, d, reason, retryHint(cfg, Math.random));
      },
      ctx.compressEvents,
    );
    const topics = (this.topics = new Topics<Recovery>(this.broker, ctx.lines.degraded));
    const recoveries = new Recoveries(ctx, this.broker, topics, lane);
    const verifier = cfg.auth === 'jwt' ? new Verifier(cfg) : null;
    const hooks = (this.hooks = shardHooks(cfg, this.shared, task.shard, registry, ctx.lines.hooks, http));
    const lifecycle = (this.lifecycle = cfg.webhookUrl === undefined ? null
      : new Lifecycle(cfg, `${task.nodeId}.${task.shard}.${task.generation}`, task.nodeId, (events) => this.tell({ op: 'webhook', events })));
    if (lifecycle !== null) {
      this.backplane.mesh.hub.onOccupancy = (key, occupied) => lifecycle.occupancy(key, occupied);
      if (this.backplane.mesh.presence !== null) this.backplane.mesh.presence.onPresence = (key, user, joined) => lifecycle.presence(key, user, joined);
    }
    const now = Date.now();
    for (const r of task.revocations) this.revocations.add(r, now);
    const users = new SocketIndex<Socket>();
    const tokens = new SocketIndex<Socket>();
    this.cap = cfg.maxUserSockets === 0 || cfg.auth === 'none' ? null : new UserSocketCap(cfg.maxUserSockets, this.userStore(), `${task.nodeId}.${task.shard}.${task.generation}`,
      ctx.log, () => this.claimAll(), this.backplane.redis?.health);
    // Presence diffs go out as the fan-out's events do; the fan-out is made with the app, below.
    const presence = this.backplane.mesh.presence === null ? null
      : new ShardPresence(ctx, this.backplane.mesh, (ev) => this.fanOut.deliver(ev), (key) => this.app.numSubscribers(key),
        (key) => topics.get(key) !== undefined);
    this.presence = presence;
    if (presence !== null) topics.onDropped = (key) => presence.dropped(key);
    const hub = this.backplane.mesh.presence;
    this.presenceCluster = hub === null || cfg.redisUrl === undefined ? null
      : new PresenceCluster(cfg, task.nodeId, task.shard, hub, ctx.log, task.nodes);
    if (hub !== null) hub.cluster = this.presenceCluster;
    this.session = new Session(ctx, {
      metrics: this.metrics, broker: this.broker, mesh: this.backplane.mesh, limits: this.limits, shared: this.shared, topics, recoveries, lane,
      replies: new Replies(), verifier, revocations: this.revocations, users, tokens, cap: this.cap, presence, hooks, lifecycle,
    });
    this.actions = new AdminActions(ctx, this.session, users, tokens, this.revocations);
    const budget = cfg.upgradeRate === 0 ? null : new UpgradeBudget(task.shared, cfg.upgradeRate);
    const admission = new Admission(ctx, this.limits, verifier, () => !this.unavailable(), this.revocations, this.cap, hooks.connect, budget);
    const app = buildApp(this.uws, cfg, ctx.log, {
      admission,
      opened: this.session.opened,
      message: this.session.message,
      closed: this.session.closed,
      writable: (ws) => lane.writable(ws, ws.getUserData().d, Date.now()),
      ready: () => this.shared.ready(cfg.workers, cfg.maxSockets),
    });
    this.fanOut = new FanOut(ctx, app, lane, topics, recoveries, this.metrics, this.session.sockets);
    this.broker.onDelivery(this.fanOut.deliver);
    task.control.on('message', (m: ToShardControl) => this.control(m));
    this.metrics.register({
      counters: ctx.counters, sockets: () => this.session.sockets.size, users: () => users.size, lane, bufferedBytes: () => this.fanOut.bufferedBytes,
      broker: this.broker.stats, limits: this.limits, suppressed: ctx.suppressed, cap: this.cap, presence, presenceTables: this.backplane.mesh.presence,
      presenceRedis: this.presenceCluster?.calls ?? null,
    });
    this.threadMetrics = registerThreadMetrics(registry, `shard${task.shard}`);
    this.app = app;
  }

  /**
   * Every open socket, counted by user, each marked as holding a place: what
   * the cap claims again under a new holder after a Redis outage (sockets
   * opened during it were let through unclaimed).
   */
  private claimAll(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const ws of this.session.sockets) {
      const d = ws.getUserData().d;
      if (!d.open) continue;
      d.claimed = true;
      counts.set(d.userKey, (counts.get(d.userKey) ?? 0) + 1);
    }
    return counts;
  }

  /** Where user sockets are counted: Redis in cluster mode, else the coordinator's memory store (over the control port). */
  private userStore(): UserSocketStore {
    const redis = this.backplane.redis;
    if (redis !== undefined) return new RedisUserSockets(redis.client);
    return {
      claim: (holder, keys, max, now) => this.userClaims.request((rid) => this.tell({ op: 'claim', rid, holder, keys, max, now })),
      release: (holder, counts, now) => {
        this.tell({ op: 'release', holder, counts: [...counts], now });
        return Promise.resolve();
      },
      beat: (holder, now) => {
        this.tell({ op: 'beat', holder, now });
        return Promise.resolve();
      },
      // Embedded mode has no outage, so no reclaim: a holder ends with its shard (the coordinator drops it).
      retire: () => Promise.resolve(),
      count: () => Promise.reject(new Error('not asked of a shard')),
    };
  }

  run(): Promise<ShardExit> {
    active = this; // eslint-disable-line @typescript-eslint/no-this-alias -- the thread's process hooks reach the shard it runs now
    hookProcess();
    return new Promise<ShardExit>((resolve, reject) => {
      this.finish = resolve;
      this.fail = reject;
      // The coordinator's probe said, once for the process, which cork this allocator needs.
      const cork = useUpgradeCork(this.uws, this.task.corkInPlace);
      // Cluster mode: the backplane is ready once Redis answers (or after a short wait, degraded as in an outage).
      Promise.all([this.backplane.ready, cork]).then(() => this.listen(reject), reject);
    });
  }

  private listen(reject: (err: Error) => void): void {
    const cfg = this.ctx.cfg;
    this.app.listen(cfg.host, this.task.listenPort, (ls) => {
      if (ls === false) {
        reject(new Error(`shard ${this.task.shard} could not listen on ${cfg.host}:${this.task.listenPort}`));
        return;
      }
      this.listenSocket = ls;
      this.sweepTimer = setInterval(() => {
        const now = Date.now();
        this.broker.sweep(now);
        if (now - this.prunedAt >= 60_000) {
          this.prunedAt = now;
          this.revocations.prune(now);
        }
      }, 1000);
      this.sweepTimer.unref();
      this.fanOut.start();
      this.limits.start();
      this.cap?.start();
      this.presenceCluster?.start();
      this.tell({ op: 'listening', port: this.uws.us_socket_local_port(ls as never) });
    });
  }

  private unavailable(): boolean {
    const cfg = this.ctx.cfg;
    return this.stopping || this.shared.has(Flag.Draining) ||
      (cfg.maxSockets !== 0 && this.shared.totalSockets(cfg.workers) >= cfg.maxSockets);
  }

  private control(m: ToShardControl): void {
    switch (m.op) {
      case 'stop':
        this.stop();
        return;
      case 'drain': {
        this.closeListenSocket();
        const counters = this.ctx.counters;
        counters.drained += drainTick(this.session.sockets, m.close, this.ctx.cfg,
          (ws, d, retryAfterMs) => this.session.close(ws, d, 'unavailable', retryAfterMs));
        return;
      }
      case 'metrics':
        this.metrics.registry.getMetricsAsJSON().then((json) => this.tell({ op: 'metrics', rid: m.rid, json }), (err: unknown) => {
          // A collector that threw: the scrape gets nothing from this shard, the shard goes on.
          this.ctx.log.error({ err }, 'collecting metrics failed');
          this.tell({ op: 'metrics', rid: m.rid, json: [] });
        });
        return;
      case 'publish': {
        // The coordinator sends an admin publish to the topic's owner: this shard.
        // Its traceparent is the coordinator's `sluice.http.publish` span.
        const tracing = this.ctx.tracing;
        const traced = tracing === null ? undefined : tracing.publish(m.req.tenant, m.req);
        this.broker.publish(m.req.tenant, traced?.req ?? m.req).then((res) => {
          if (traced !== undefined) tracing!.endPublish(traced, res);
          this.tell({ op: 'published', rid: m.rid, res });
        }, (err: unknown) => {
          this.ctx.lines.degraded.write({ err }, 'admin publish failed');
          this.tell({ op: 'published', rid: m.rid, res: { ok: false, reason: 'unavailable' } });
        });
        return;
      }
      case 'history':
        this.history(m.rid, m.req);
        return;
      case 'control': {
        let sockets = 0;
        try {
          sockets = this.actions.apply(m.cmd);
        } catch (err) {
          // An admin command must not take the shard down: logged, answered as reaching nobody more.
          this.ctx.log.error({ err, op: m.cmd.op }, 'an admin command failed on this shard');
        }
        this.tell({ op: 'controlled', rid: m.rid, sockets });
        return;
      }
      case 'users': {
        let online: string[] = [];
        try {
          online = this.actions.toUsers(m.tenant, m.users, m.frame);
        } catch (err) {
          this.ctx.log.error({ err }, 'a publish to users failed on this shard');
        }
        this.tell({ op: 'usersSent', rid: m.rid, online });
        return;
      }
      case 'topics': {
        // One pass over the shard's topics per TOP_TOPICS_CACHE_MS at most, however many pages (or nodes) ask.
        const key = `${m.limit}/${m.tenant ?? ''}`;
        const now = Date.now();
        let cached = this.topTopics;
        if (cached === undefined || cached.key !== key || now - cached.at > TOP_TOPICS_CACHE_MS) {
          cached = this.topTopics = { key, at: now, top: this.topics.top(m.limit, m.tenant === undefined ? undefined : topicKey(m.tenant, '')) };
        }
        this.tell({ op: 'topicsTop', rid: m.rid, top: cached.top });
        return;
      }
      case 'connections':
        this.tell({ op: 'connectionsOf', rid: m.rid, connections: this.actions.connections(m.tenant, m.user, MAX_CONNECTIONS_LISTED) });
        return;
      case 'nodes':
        this.presenceCluster?.nodes(m.live, m.gone, m.joined);
        return;
      case 'presence':
        this.backplane.mesh.presenceRead(m.key).then((data) => this.tell({ op: 'presenceData', rid: m.rid, data }),
          () => this.tell({ op: 'presenceData', rid: m.rid, data: undefined }));
        return;
      case 'peer':
        this.broker.addPeer(m.shard, m.port);
        return;
      case 'settled':
        this.settles.answer(m.rid, m.states);
        return;
      case 'claimed':
        this.userClaims.answer(m.rid, m.fits);
        return;
    }
  }

  /**
   * An admin history read, sent here because this shard owns the topic
   * (embedded mode) or because any shard reads Redis (cluster mode). The
   * answer carries each event's data as the JSON text stored in its frame.
   */
  private history(rid: number, req: HistoryRequest): void {
    this.broker.history(topicKey(req.tenant, req.topic), req.since, req.limit).then((read) => {
      const events: { id: string; data: string }[] = [];
      for (const e of read.events) {
        const data = eventFrameData(e.frame);
        if (data === undefined) throw new Error(`stored event ${e.id} is not an event frame`);
        events.push({ id: e.id, data });
      }
      this.tell({ op: 'history', rid, res: { ok: true, events, recovered: read.recovered } });
    }).catch((err: unknown) => {
      if (err instanceof BrokerUnavailable) {
        const message = `the history cannot be read now (${err.message}); retry later`;
        this.tell({ op: 'history', rid, res: { ok: false, reason: 'unavailable', message } });
        return;
      }
      this.ctx.log.error({ err, tenant: req.tenant, topic: req.topic }, 'admin history read failed');
      const message = 'the history read failed inside the gateway; see its log';
      this.tell({ op: 'history', rid, res: { ok: false, reason: 'internal', message } });
    });
  }

  private tell(m: FromShardControl): void {
    this.task.control.postMessage(m);
  }

  /** Closes the listen socket and every socket (1012 with a retry hint), then ends the task. */
  private stop(): void {
    if (this.stopping) return;
    this.teardown();
    const cfg = this.ctx.cfg;
    const sockets = this.session.sockets;
    for (const ws of [...sockets]) this.session.close(ws, ws.getUserData().d, 'unavailable', retryHint(cfg, Math.random));
    const deadline = Date.now() + 3000;
    const poll = (): void => {
      if (sockets.size > 0 && Date.now() < deadline) {
        setTimeout(poll, 20);
        return;
      }
      // Sockets whose peer never answered the close frame are cut: a worker
      // thread that exits with a socket open aborts the whole process.
      for (const ws of [...sockets]) ws.close();
      this.broker.flush();
      this.broker.close();
      // The coordinator waits for the kernel to drop the connections still
      // closing before it ends this thread (see proc-sockets.ts).
      setImmediate(() => this.finish({ shard: this.task.shard }));
    };
    poll();
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
    this.ctx.log.error({ err }, 'shard crashed; closing its sockets');
    this.teardown();
    // A hard close, not end(): the other shards keep running and the
    // restart should not wait for peers to answer close frames.
    for (const ws of [...this.session.sockets]) {
      this.ctx.counters.closes.internal!++;
      ws.close();
    }
    this.broker.close();
    this.task.control.close();
    this.fail(err);
  }

  /** What stop and crash both do first: no new sockets, no timers. */
  private teardown(): void {
    this.stopping = true;
    this.closeListenSocket();
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer);
    this.fanOut.stop();
    this.session.stop();
    this.limits.stop();
    this.cap?.stop();
    this.presenceCluster?.stop();
    this.settles.close('the shard stopped');
    this.userClaims.close('the shard stopped');
    this.threadMetrics.stop();
    this.hooks.close();
    this.lifecycle?.flush();
  }

  private closeListenSocket(): void {
    if (this.listenSocket !== null) {
      this.uws.us_listen_socket_close(this.listenSocket);
      this.listenSocket = null;
    }
  }
}
