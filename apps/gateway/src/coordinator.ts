/**
 * The coordinator: the main thread. It touches no frame and no event: it owns
 * the shard pool and the mesh of ports between shards, the shared flags, the
 * admin server and the process's signals.
 */
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Piscina } from 'piscina';
import { actionOf, type Config, type ControlCommand, describeCommand, type DrainPace, MemoryUserSockets, drainBudget, effectiveSlowBufferBytes, MemoryWindowStore, PendingRequests, shareBudget,
  type HistoryRequest, type HistoryResult, type PublishRequest, type PublishResult, redactedConfig, type RequestTimers, topicKey, OWNER_SLOTS, TopicOwners } from '@sluice/core';
import { counterFrom, endSpan, gaugeFrom, type Logger, type MetricsJson, registerProcessMetrics, registerThreadMetrics,
  Registry, SpanKind, startSpan, type Tracer, traceparentOf } from '@sluice/telemetry';
import { createAdminServer } from './admin.ts';
import { AdminViews, sumLargest } from './admin-views.ts';
import { ControlPlane, type NodeAsk } from './control-plane.ts';
import type { ConnectionView, FromShardControl, ToShardControl } from './control.ts';
import { freePort } from './free-port.ts';
import { NodeMetrics, type ShardSource } from './node-metrics.ts';
import { NodeStats } from './node-stats.ts';
import { NodeRegistry } from './node-registry.ts';
import { PushQueue } from './push-queue.ts';
import { acceptedSocketsOnPort } from './proc-sockets.ts';
import { RedisWatch } from './redis-watch.ts';
import { Flag, MAX_SHARDS, SharedState } from './shared-state.ts';
import { UpgradeBudget } from './upgrade-budget.ts';
import { type SharedWindowBuffers, type SharedWindows, sharedWindowBuffers, sharedWindows } from './shared-limits.ts';
import type { ShardExit, ShardTask } from './shard/task.ts';
import { probeCorkInPlace, type UwsBuild } from '@sluice/uws';
import { WebhookSender } from './webhooks.ts';
import { httpClient } from './hooks.ts';

/**
 * From source (`pnpm start`, the tests) the shards run under tsx through
 * shard-entry.mjs; from the build (`node dist/main.js`) they are plain
 * JavaScript, with no loader in any thread.
 */
const FROM_SOURCE = import.meta.url.endsWith('.ts');
const SHARD_FILE = new URL(FROM_SOURCE ? './shard-entry.mjs' : './shard.js', import.meta.url);
/** The gateway's own version, from its package.json (one folder up from src/ and dist/ alike). */
export const GATEWAY_VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
/** The admin page's built assets: apps/admin-ui's build, copied into dist/ui by the gateway's build. */
const UI_DIR = new URL(FROM_SOURCE ? '../../admin-ui/dist/' : './ui/', import.meta.url);
/** How long a shard may take to close its sockets on stop before it is cut off. */
const STOP_TIMEOUT_MS = 10_000;
const RESTART_DELAY_MS = 250;
/** How often the drain hands out close budgets. */
const DRAIN_TICK_MS = 50;
/** uWS cuts a socket that never answers a close frame after at most 16 s (its ping timeout). */
const CLOSE_GRACE_MS = 18_000;

/** The coordinator's timers for its asks: they never keep the process alive. */
const TIMERS: RequestTimers = { set: (fn, ms) => setTimeout(fn, ms).unref(), clear: (h) => clearTimeout(h as NodeJS.Timeout) };

/** What a shard answers the coordinator's asks with. */
type ShardAnswer = MetricsJson | PublishResult | HistoryResult | number | string | readonly string[] | readonly (readonly [string, number])[] |
  readonly ConnectionView[] | undefined;

class ShardLink {
  listening: ((port: number) => void) | undefined;
  /** The user-socket holders this shard claimed under (embedded mode): dropped when it goes. */
  readonly holders = new Set<string>();
  /** Asks waiting for this shard's answer (metrics, admin publishes and history reads, control commands, presence, users). */
  readonly requests = new PendingRequests<ShardAnswer>(TIMERS);
  constructor(readonly port: MessagePort) {}
  send(m: ToShardControl, transfer: MessagePort[] = []): void {
    this.port.postMessage(m, transfer);
  }
}

/** How long a stopping node keeps sending the webhook events it holds. */
const WEBHOOK_STOP_MS = 2000;

export interface Started {
  readonly port: number;
  readonly adminPort: number;
}

export class Coordinator {
  private readonly shared = new SharedState();
  private readonly links = new Map<number, ShardLink>();
  private readonly tasks = new Map<number, Promise<void>>();
  private readonly generations: number[] = [];
  private readonly registry = new Registry();
  private readonly nodeMetrics: NodeMetrics;
  private readonly nodeId = randomBytes(4).toString('hex');
  private pool: Piscina<ShardTask, ShardExit> | undefined;
  private admin: Server | undefined;
  private publicPort = 0;
  private stopping: Promise<void> | undefined;
  private push: PushQueue | undefined;
  private restarts = 0;
  private draining = false;
  private cutDrain = false;
  /** The drain in progress: when it began and what the configuration implies for its length (both 0 when none). */
  private drainStartedAt = 0;
  private drainExpectedMs = 0;
  /** Cluster mode: the coordinator's own connection, which tells readiness whether Redis is reachable. */
  private redis: RedisWatch | undefined;
  /** The node's sliding windows for tenant and IP limits: the embedded store, and the fallback when Redis is down. */
  private readonly windows = new MemoryWindowStore();
  /** Embedded mode: the upgrade windows in shared memory, counted by the shards themselves; undefined in cluster mode. */
  private readonly windowBuffers: SharedWindowBuffers | undefined;
  /** Which shard owns which topic (shared memory, given to every shard): a topic is its first toucher's. */
  private readonly owners: TopicOwners;
  /** The coordinator's view of them: only to free a lock a gone shard held. */
  private readonly upgradeWindows: SharedWindows | undefined;
  /** WS_MAX_USER_SOCKETS in embedded mode: the node's count of each user's sockets, over its shards. */
  private readonly userSockets = new MemoryUserSockets();
  /** Admin commands to every node, and the node's revocations. */
  private control: ControlPlane | undefined;
  /** Cluster mode: the nodes alive (leases in Redis). */
  private nodes: NodeRegistry | undefined;
  /** WS_WEBHOOK_URL: the node's lifecycle webhook queue, made at start (it loads undici). */
  private webhooks: WebhookSender | undefined;
  /** The admin page's samples of this node. */
  private stats: NodeStats | undefined;
  /** WS_UPGRADE_RATE's shared cells, as the coordinator reads them (null: no budget). */
  private readonly budget: UpgradeBudget | null;
  private readonly startedAt = Date.now();

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly opts: { testHooks: boolean; onDrainRequest?: () => void; tracer?: Tracer | null; uws: UwsBuild },
  ) {
    this.nodeMetrics = new NodeMetrics(this.registry, config.metricsWaitMs);
    this.budget = config.upgradeRate === 0 ? null : new UpgradeBudget(this.shared.buffer, config.upgradeRate);
    this.windowBuffers = config.redisUrl === undefined ? sharedWindowBuffers(config) : undefined;
    this.owners = new TopicOwners(config.workers);
    this.upgradeWindows = this.windowBuffers === undefined ? undefined : sharedWindows(config, this.windowBuffers, MAX_SHARDS, false);
    this.registerMetrics();
  }

  /** Whether an upgrade keeps the socket's address here: probed once per process, before the first shard starts. */
  private corkInPlace = false;

  async start(): Promise<Started> {
    const cfg = this.config;
    this.log.info({ config: redactedConfig(cfg), node: this.nodeId }, 'starting sluice');
    const soft = effectiveSlowBufferBytes(cfg.slowClientBufferBytes, cfg.maxBufferedBytes);
    if (soft.clamped) {
      this.log.warn({ WS_SLOW_CLIENT_BUFFER_BYTES: cfg.slowClientBufferBytes, WS_MAX_BUFFERED_BYTES: cfg.maxBufferedBytes, used: soft.value },
        'WS_SLOW_CLIENT_BUFFER_BYTES lowered to half of WS_MAX_BUFFERED_BYTES');
    }
    if (cfg.webhookUrl !== undefined) {
      this.webhooks = new WebhookSender(cfg, cfg.webhookUrl, cfg.webhookSecret!, this.nodeId, this.log, this.registry,
        await httpClient({ connections: 1, keepAliveTimeout: 30_000 }));
    }
    const build = this.opts.uws;
    try {
      this.corkInPlace = (await probeCorkInPlace(build.path)).inPlace;
    } catch (err) {
      // res.cork is the way that cannot abort the process; it loses
      // `Connection: close` upgrades that waited where realloc is in place.
      this.log.warn({ err }, 'the cork probe failed: upgrades that waited are corked with res.cork');
    }
    this.log.info({ uws: build.uws, npm: build.npm, node: build.node, glibc: build.glibc ?? null, binary: build.path,
      cork: this.corkInPlace ? 'websocket' : 'res' }, `uWebSockets.js ${build.uws} loaded natively on Node ${build.node}`);
    this.pool = new Piscina<ShardTask, ShardExit>({
      filename: SHARD_FILE.href,
      minThreads: cfg.workers,
      maxThreads: cfg.workers,
      idleTimeout: Infinity,
      concurrentTasksPerWorker: 1,
      atomics: 'disabled',
      // A small young generation: garbage (per event, per upgrade) is
      // scavenged before it costs resident memory. With 64 MB per shard, 15k
      // upgrades left ~2.5 KiB of uncollected garbage per socket in RSS (S4);
      // with 8 MB it is gone, and S1/S3 throughput did not move (measured).
      resourceLimits: { maxYoungGenerationSizeMb: 8 },
      execArgv: FROM_SOURCE ? ['--import', 'tsx'] : [],
    });
    // uSockets sets SO_REUSEPORT only for a non-zero port, so PORT=0 is
    // resolved here first and every shard then binds the same concrete port.
    this.publicPort = cfg.port !== 0 ? cfg.port : await freePort(cfg.host);
    if (cfg.redisUrl !== undefined) {
      this.redis = new RedisWatch(cfg, this.shared, this.log);
      this.redis.registerMetrics(this.registry, this.shared);
      this.nodes = new NodeRegistry(this.redis.client, this.nodeId, cfg.presenceTtlMs, this.log, (live, gone, joined) => {
        if (gone.length > 0) this.log.info({ gone, live: live.size }, 'nodes gone: their leases ended');
        for (const link of this.links.values()) link.send({ op: 'nodes', live: [...live], gone, joined });
      });
      this.nodes.start();
    }
    this.control = new ControlPlane(cfg, this.log, this.nodeId, (cmd, origin) => {
      this.carryOut(cmd, origin).catch((err: unknown) => this.log.error({ err, op: cmd.op }, 'carrying out an admin command failed'));
    }, (tenant, users, frame) => this.deliverToUsers(tenant, users, frame), this.redis?.client);
    this.control.registry = this.nodes;
    // Before start: a question from another node may come as soon as the control channel is subscribed.
    this.control.answerAsk = (ask, from) => this.answer(ask, from);
    if (cfg.redisUrl !== undefined) {
      this.push = new PushQueue(cfg, this.log);
      const push = this.push;
      counterFrom(this.registry, 'sluice_push_jobs_total', 'Push jobs POST /v1/publish with push added (queued) or found waiting (collapsed).',
        'outcome', () => ({ queued: push.counts.queued, collapsed: push.counts.collapsed }));
    }
    this.control.start();
    await Promise.all(Array.from({ length: cfg.workers }, (_, i) => this.startShard(i, this.publicPort)));
    this.stats = new NodeStats({
      id: this.nodeId, version: GATEWAY_VERSION, startedAt: this.startedAt,
      state: () => (this.draining || this.stopping !== undefined ? 'draining' : this.shared.ready(cfg.workers, cfg.maxSockets) ? 'ready' : 'not_ready'),
      redis: () => (cfg.redisUrl === undefined ? 'none' : this.shared.has(Flag.RedisDown) ? 'down' : 'up'),
      upgradeBudget: () => cfg.upgradeRate,
      upgradeBacklogMs: () => this.budget?.backlogMs() ?? 0,
      sockets: () => new Map([...this.links.keys()].sort((a, b) => a - b).map((i) => [i, this.shared.socketsOf(i)])),
      rssBytes: () => process.memoryUsage.rss(),
    }, () => this.nodeMetrics.parts(this.shardSources()), (err) => this.log.warn({ err }, 'admin page: sampling the node failed'));
    this.stats.start();
    const control = this.control;
    const views = new AdminViews(cfg, this.nodeId, (ask) => control.askNodes(ask), () => this.nodes?.nodes ?? new Set([this.nodeId]));
    this.admin = createAdminServer({
      config: cfg,
      log: this.log,
      ready: () => this.shared.ready(cfg.workers, cfg.maxSockets),
      metrics: () => this.metrics(),
      publish: (req) => this.publish(req),
      history: (req) => this.history(req),
      control: (cmd) => this.control!.send(cmd),
      toUsers: (tenant, users, frame) => this.control!.toUsers(tenant, users, frame),
      // An empty frame: each shard answers which users it holds and sends nothing.
      online: (tenant, users) => this.control!.toUsers(tenant, users, ''),
      push: this.push === undefined ? undefined : (tenant, users, req) => this.push!.enqueue(tenant, users, req),
      presence: (tenant, topic) => this.presence(topicKey(tenant, topic)),
      drain: () => this.opts.onDrainRequest?.(),
      views,
      uiDir: UI_DIR,
    });
    const adminPort = await new Promise<number>((resolve, reject) => {
      this.admin!.once('error', reject);
      this.admin!.listen(cfg.adminPort, cfg.adminHost, () => resolve((this.admin!.address() as AddressInfo).port));
    });
    this.shared.set(Flag.Listening);
    this.log.info({ port: this.publicPort, adminPort, workers: cfg.workers, mode: cfg.redisUrl === undefined ? 'embedded' : 'redis',
      redisCluster: cfg.redisCluster }, 'gateway ready');
    return { port: this.publicPort, adminPort };
  }

  /** Stops at once: readiness fails, every shard closes its sockets and listen socket, the pool ends. */
  stop(reason: string): Promise<void> {
    if (this.stopping !== undefined && this.draining) {
      // A drain is on: cut it short, straight to the stop.
      this.log.info({ reason }, 'drain cut short');
      this.cutDrain = true;
    }
    this.stopping ??= this.doStop(reason);
    return this.stopping;
  }

  /**
   * The deploy path (SIGTERM, POST /admin/drain): readiness fails first; after
   * WS_DRAIN_DELAY_MS the shards stop listening and close WS_DRAIN_RATE
   * sockets per second for the whole node, shared in proportion to what each
   * holds; at WS_DRAIN_MAX_MS whatever is left is closed; then the stop.
   */
  drain(reason: string): Promise<void> {
    this.stopping ??= this.doDrain(reason);
    return this.stopping;
  }

  private async doDrain(reason: string): Promise<void> {
    const cfg = this.config;
    const started = Date.now();
    const deadline = started + cfg.drainMaxMs;
    const sockets = this.shared.totalSockets(cfg.workers);
    this.shared.set(Flag.Draining);
    this.draining = true;
    this.drainStartedAt = started;
    this.drainExpectedMs = Math.min(cfg.drainMaxMs, cfg.drainDelayMs + (sockets * 1000) / cfg.drainRate);
    this.log.info({ reason, sockets, delayMs: cfg.drainDelayMs, rate: cfg.drainRate, maxMs: cfg.drainMaxMs }, 'drain started');
    const closingAt = started + Math.min(cfg.drainDelayMs, cfg.drainMaxMs);
    while (Date.now() < closingAt && !this.cutDrain) await delay(Math.min(DRAIN_TICK_MS, closingAt - Date.now()));
    const pace: DrainPace = { carry: 0, lastAt: -1 };
    let first = true;
    while (Date.now() < deadline && !this.cutDrain) {
      const held = Array.from({ length: cfg.workers }, (_, i) => (this.links.has(i) ? this.shared.socketsOf(i) : 0));
      if (held.every((n) => n === 0) && !first) break;
      const shares = shareBudget(drainBudget(pace, Date.now(), cfg.drainRate), held);
      for (const [i, link] of this.links) if (first || shares[i]! > 0) link.send({ op: 'drain', close: shares[i] ?? 0 });
      first = false;
      await delay(DRAIN_TICK_MS);
    }
    const left = this.shared.totalSockets(cfg.workers);
    this.log.info({ reason, drained: sockets - left, left, durationMs: Date.now() - started }, 'drain finished');
    await this.doStop(`${reason}: drain finished`);
  }

  private async doStop(reason: string): Promise<void> {
    const started = Date.now();
    const sockets = this.shared.totalSockets(this.config.workers);
    this.log.info({ reason, sockets }, 'stopping');
    this.shared.set(Flag.Draining);
    for (const link of this.links.values()) link.send({ op: 'stop' });
    const all = Promise.allSettled(this.tasks.values());
    const timedOut = await Promise.race([all.then(() => false), delay(STOP_TIMEOUT_MS).then(() => true)]);
    if (timedOut) this.log.warn('shards did not stop in time');
    await this.waitForClosedSockets();
    // The shards have handed over their last events (disconnects of the stop included).
    await this.webhooks?.stop(WEBHOOK_STOP_MS);
    await new Promise<void>((resolve) => (this.admin ? this.admin.close(() => resolve()) : resolve()));
    this.admin?.closeAllConnections();
    this.stats?.stop();
    await this.pool?.destroy();
    await this.nodes?.stop();
    await this.push?.close();
    this.control?.stop();
    this.redis?.disconnect();
    this.log.info({ durationMs: Date.now() - started, sockets }, 'stopped');
  }

  /**
   * Waits until the kernel holds no connection accepted on the public port:
   * peers answer a close frame within a round trip, and uWS itself cuts a
   * silent one after its close timeout (at most 16 s), so this is bounded.
   */
  private async waitForClosedSockets(): Promise<void> {
    const deadline = Date.now() + CLOSE_GRACE_MS;
    for (;;) {
      const open = acceptedSocketsOnPort(this.publicPort);
      if (open === undefined || open === 0) return;
      if (Date.now() > deadline) {
        this.log.warn({ open }, 'connections still closing at the deadline; stopping anyway');
        return;
      }
      await delay(20);
    }
  }

  private startShard(shard: number, listenPort: number): Promise<number> {
    const { port1, port2 } = new MessageChannel();
    const link = new ShardLink(port1);
    this.links.set(shard, link);
    port1.on('message', (m: FromShardControl) => this.fromShard(link, m));
    // A port to every other shard. Shards already running get their end now;
    // at the first start every shard is started here, so each pair gets one
    // channel, made by the lower-numbered shard's start.
    const peers: { shard: number; port: MessagePort }[] = [];
    for (let other = 0; other < this.config.workers; other++) {
      if (other === shard) continue;
      const running = this.links.get(other);
      if (running === undefined) continue;
      const ch = new MessageChannel();
      peers.push({ shard: other, port: ch.port1 });
      running.send({ op: 'peer', shard, port: ch.port2 }, [ch.port2]);
    }
    const generation = (this.generations[shard] = (this.generations[shard] ?? -1) + 1);
    const listening = new Promise<number>((resolve) => (link.listening = resolve));
    const task: ShardTask = {
      shard, generation, nodeId: this.nodeId, config: this.config, shared: this.shared.buffer, windows: this.windowBuffers, owners: this.owners.buffer, control: port2, peers,
      listenPort, testHooks: this.opts.testHooks, uws: this.opts.uws.uws, corkInPlace: this.corkInPlace,
      revocations: this.control?.revocations.list() ?? [], nodes: [...(this.nodes?.nodes ?? [])],
    };
    let failedEarly: (err: unknown) => void = () => {};
    const early = new Promise<never>((_, reject) => (failedEarly = reject));
    const run = this.pool!.run(task, { transferList: [port2, ...peers.map((p) => p.port)] as never });
    const done = run.then(
      () => {
        this.detach(shard, link);
        failedEarly(new Error(`shard ${shard} ended before listening`));
      },
      (err: unknown) => {
        failedEarly(err);
        this.crashed(shard, link, err);
      },
    );
    this.tasks.set(shard, done);
    return Promise.race([listening, early]);
  }

  private detach(shard: number, link: ShardLink): void {
    if (this.links.get(shard) !== link) return;
    this.links.delete(shard);
    this.nodeMetrics.retire(shard);
    this.shared.resetSockets(shard);
    this.shared.resetHookCalls(shard);
    // A thread cut off inside a window check (it cannot throw there) would leave the tables locked.
    if (this.upgradeWindows !== undefined) {
      for (const t of [this.upgradeWindows.ip, this.upgradeWindows.tenantConnect]) {
        if (t?.releaseIfHeldBy(shard) === true) this.log.warn({ shard }, 'released the upgrade-window lock a gone shard held');
      }
    }
    // Its sockets are gone: they stop counting toward their users' caps now, not after the holder TTL.
    for (const h of link.holders) this.userSockets.drop(h);
    // Asks still waiting get their fallbacks now, not at their deadlines.
    link.requests.close(`shard ${shard} is gone`);
    link.port.close();
  }

  private crashed(shard: number, link: ShardLink, err: unknown): void {
    this.detach(shard, link);
    // Before the node is up a failing shard fails the start (start() reports it).
    if (!this.shared.has(Flag.Listening)) return;
    if (this.stopping !== undefined) {
      this.log.warn({ shard, err }, 'shard failed while stopping');
      return;
    }
    this.restarts++;
    this.log.error({ shard, err, restarts: this.restarts }, 'shard crashed; restarting it');
    setTimeout(() => {
      if (this.stopping !== undefined) return;
      this.startShard(shard, this.publicPort).then(
        () => this.log.info({ shard }, 'shard restarted'),
        (e: unknown) => this.log.error({ shard, err: e }, 'shard restart failed'),
      );
    }, RESTART_DELAY_MS);
  }

  private fromShard(link: ShardLink, m: FromShardControl): void {
    switch (m.op) {
      case 'listening':
        link.listening?.(m.port);
        return;
      case 'webhook':
        this.webhooks?.add(m.events);
        return;
      case 'claim':
        link.holders.add(m.holder);
        link.send({ op: 'claimed', rid: m.rid, fits: this.userSockets.claimNow(m.holder, m.keys, m.max, m.now) });
        return;
      case 'release':
        this.userSockets.releaseNow(m.holder, new Map(m.counts), m.now);
        return;
      case 'beat':
        void this.userSockets.beat(m.holder, m.now);
        return;
      case 'settle':
        // The node's memory window store: synchronous, so a shard's settle is answered at once.
        link.send({ op: 'settled', rid: m.rid, states: this.windows.settleNow(m.hits, m.limit, m.windowMs, m.now) });
        return;
      case 'metrics':
        link.requests.answer(m.rid, m.json);
        return;
      case 'published':
      case 'history':
        link.requests.answer(m.rid, m.res);
        return;
      case 'controlled':
        link.requests.answer(m.rid, m.sockets);
        return;
      case 'presenceData':
        link.requests.answer(m.rid, m.data);
        return;
      case 'usersSent':
        link.requests.answer(m.rid, m.online);
        return;
      case 'topicsTop':
        link.requests.answer(m.rid, m.top);
        return;
      case 'connectionsOf':
        link.requests.answer(m.rid, m.connections);
        return;
    }
  }

  /**
   * Carries an admin command out on every shard of this node, and logs one
   * line with how many sockets it reached here (who asked is in the admin
   * API's line on the node that took the request).
   */
  private async carryOut(cmd: ControlCommand, origin: string): Promise<void> {
    const counts = await Promise.all([...this.links.values()].map((link) =>
      this.ask<number>(link, (rid) => ({ op: 'control', rid, cmd }), 0, 5000)));
    const sockets = counts.reduce((a, b) => a + b, 0);
    if (cmd.op === 'revocations' && sockets === 0) return;
    this.log.info({ action: actionOf(cmd), ...describeCommand(cmd), sockets, origin: origin === this.nodeId ? 'this node' : origin },
      'admin action carried out on this node');
  }

  /** A presence topic's data, asked of its owner shard (any shard reaches the owner through the mesh). */
  private presence(key: string): Promise<string | undefined> {
    const link = this.links.get(this.owners.ownerOf(key)) ?? this.links.values().next().value;
    if (link === undefined) return Promise.resolve(undefined);
    return this.ask<string | undefined>(link, (rid) => ({ op: 'presence', rid, key }), undefined, 5000);
  }

  /** A `$user` frame to this node's sockets of `users`: the users that had one, over every shard. */
  private async deliverToUsers(tenant: string, users: readonly string[], frame: string): Promise<readonly string[]> {
    const each = await Promise.all([...this.links.values()].map((link) =>
      this.ask<readonly string[]>(link, (rid) => ({ op: 'users', rid, tenant, users, frame }), [], 5000)));
    return [...new Set(each.flat())];
  }

  /** Asks a shard and waits for its answer, or for `fallback` after `ms` or when the shard goes away. */
  private ask<T extends ShardAnswer>(link: ShardLink,
    make: (rid: number) => ToShardControl, fallback: T,
    ms: number): Promise<T> {
    return link.requests.request<T>((rid) => link.send(make(rid)), { timeoutMs: ms, fail: { value: fallback } });
  }

  /**
   * An admin publish goes to the shard that owns the topic (embedded mode);
   * in cluster mode any shard publishes to Redis, so a restarting owner is
   * stood in for by another.
   */
  private async publish(req: PublishRequest): Promise<PublishResult> {
    const owner = this.owners.ownerOf(topicKey(req.tenant, req.topic));
    const link = this.links.get(owner) ?? (this.config.redisUrl === undefined ? undefined : this.links.values().next().value);
    const tracer = this.opts.tracer ?? null;
    // `sluice.http.publish`: a child of the request's traceparent; the shard's publish span is its child.
    const span = tracer === null ? undefined : startSpan(tracer, 'sluice.http.publish', SpanKind.SERVER,
      req.traceparent, { 'http.request.method': 'POST', 'http.route': '/v1/publish', 'messaging.destination.name': req.topic,
        'sluice.tenant': req.tenant });
    const sent = span === undefined ? req : { ...req, traceparent: traceparentOf(span) };
    const res = link === undefined ? { ok: false as const, reason: 'unavailable' as const }
      : await this.ask<PublishResult>(link, (rid) => ({ op: 'publish', rid, req: sent }), { ok: false, reason: 'unavailable' }, 5000);
    endSpan(span, res.ok ? undefined : res.reason);
    return res;
  }

  /**
   * An admin history read goes to the shard that owns the topic (embedded
   * mode: its history is in that shard's memory, and no other can stand in
   * while it restarts); in cluster mode any shard reads Redis.
   */
  private history(req: HistoryRequest): Promise<HistoryResult> {
    const owner = this.owners.ownerOf(topicKey(req.tenant, req.topic));
    const link = this.links.get(owner) ?? (this.config.redisUrl === undefined ? undefined : this.links.values().next().value);
    const gone: HistoryResult = { ok: false, reason: 'unavailable', message: this.config.redisUrl === undefined
      ? `shard ${owner}, which keeps the topic's history, is restarting or did not answer within 5 s; retry later`
      : 'the shard asked did not answer within 5 s; retry later' };
    if (link === undefined) return Promise.resolve(gone);
    return this.ask<HistoryResult>(link, (rid) => ({ op: 'history', rid, req }), gone, 5000);
  }

  private metrics(): Promise<{ text: string; contentType: string }> {
    return this.nodeMetrics.render(this.shardSources());
  }

  private shardSources(): ShardSource[] {
    return [...this.links].map(([shard, link]) => ({
      shard,
      scrape: () => this.ask<MetricsJson | undefined>(link, (rid) => ({ op: 'metrics', rid }), undefined, 2000),
      current: () => this.links.get(shard) === link,
    }));
  }

  /** This node's part of a question to the nodes (the admin page's views, a drain); see AdminViews. */
  private async answer(ask: NodeAsk, from: string): Promise<unknown> {
    const links = [...this.links.values()];
    switch (ask.kind) {
      case 'stats':
        // Still starting (no shard listening yet): no view; the asker shows this node as not answering.
        return this.stats === undefined ? null : this.stats.view();
      case 'topics': {
        const each = await Promise.all(links.map((link) =>
          this.ask<readonly (readonly [string, number])[]>(link, (rid) => ({ op: 'topics', rid, limit: ask.limit, tenant: ask.tenant }), [], 2000)));
        return sumLargest(each, ask.limit);
      }
      case 'connections': {
        const each = await Promise.all(links.map((link) =>
          this.ask<readonly ConnectionView[]>(link, (rid) => ({ op: 'connections', rid, tenant: ask.tenant, user: ask.user }), [], 2000)));
        return each.flat();
      }
      case 'drain':
        if (from !== this.nodeId) this.log.info({ from }, 'drain requested by the admin API of another node');
        this.opts.onDrainRequest?.();
        return { status: 'draining' };
    }
  }

  private registerMetrics(): void {
    const r = this.registry;
    registerProcessMetrics(r);
    gaugeFrom(r, 'sluice_build_info', 'Always 1: the gateway\'s version, the Node it runs on and the uWebSockets.js build it loaded, as labels.',
      () => 1, 'max', { version: GATEWAY_VERSION, node: this.opts.uws.node, uws: this.opts.uws.uws });
    counterFrom(r, 'sluice_revocations_applied_total', 'Revocations this node learned (its admin API, another node, or a reload from redis).',
      undefined, () => this.control?.applied ?? 0);
    gaugeFrom(r, 'sluice_revocations', 'Revocations in force that this node holds in memory.', () => this.control?.revocations.size ?? 0, 'max');
    gaugeFrom(r, 'sluice_topic_owner_slots', `Slots of the node's topic owner table that a shard has claimed, of ${OWNER_SLOTS}: near that, a new topic is owned by whichever shard first touched its slot.`,
      () => this.owners.claimedSlots(), 'max');
    counterFrom(r, 'sluice_control_commands_received_total', 'Admin commands from other nodes carried out here (cluster mode).', undefined,
      () => this.control?.received ?? 0);
    counterFrom(r, 'sluice_control_messages_ignored_total',
      'Messages on the control channel that were not a command this node knows (another version, or not from Sluice), ignored.', undefined,
      () => this.control?.ignored ?? 0);
    counterFrom(r, 'sluice_user_publishes_total', 'Publishes to users (POST /v1/publish with users) this node took.', undefined,
      () => this.control?.userEvents.publishes ?? 0);
    counterFrom(r, 'sluice_user_publish_targets_total',
      'Users named by publishes to users this node took, by whether they had a socket open anywhere (online) or not (offline).',
      'state', () => ({ online: this.control?.userEvents.online ?? 0, offline: this.control?.userEvents.offline ?? 0 }));
    counterFrom(r, 'sluice_user_publish_unanswered_total',
      'Cluster mode: nodes that did not say in time (WS_NODE_ANSWER_MS) which users of a publish to users they hold; the event was still sent to them.',
      undefined, () => this.control?.userEvents.unanswered ?? 0);
    gaugeFrom(r, 'sluice_cluster_nodes', 'Cluster mode: the nodes alive (this one included) at this node\'s last lease renewal; 0 in embedded mode.',
      () => this.nodes?.nodes.size ?? 0, 'max');
    counterFrom(r, 'sluice_shard_restarts_total', 'Shard threads restarted after a crash.', undefined, () => this.restarts);
    gaugeFrom(r, 'sluice_draining', '1 while the node drains, else 0.', () => (this.draining ? 1 : 0), 'max');
    gaugeFrom(r, 'sluice_drain_elapsed_seconds', 'Seconds since the drain in progress began; 0 when none.',
      () => (this.drainStartedAt === 0 ? 0 : (Date.now() - this.drainStartedAt) / 1000), 'max');
    gaugeFrom(r, 'sluice_drain_expected_seconds',
      'What the configuration implies for the drain in progress: WS_DRAIN_DELAY_MS plus its sockets at the start / WS_DRAIN_RATE, at most WS_DRAIN_MAX_MS; 0 when none.',
      () => this.drainExpectedMs / 1000, 'max');
    gaugeFrom(r, 'sluice_drain_max_seconds', 'WS_DRAIN_MAX_MS in seconds: no drain lasts longer.', () => this.config.drainMaxMs / 1000, 'max');
    registerThreadMetrics(r, 'coordinator');
    gaugeFrom(r, 'sluice_ready', '1 while the node accepts new sockets, else 0.',
      () => (this.shared.ready(this.config.workers, this.config.maxSockets) ? 1 : 0), 'max');
    // Read from the shards' shared budget cells; no budget (0) reads 0.
    const budget = this.budget;
    gaugeFrom(r, 'sluice_upgrade_budget_per_second', 'WS_UPGRADE_RATE: upgrades the node accepts per second (0 = no budget).', () => this.config.upgradeRate, 'max');
    gaugeFrom(r, 'sluice_upgrade_backlog_seconds',
      'How far ahead the upgrade budget has told refused clients to come back: the backlog at WS_UPGRADE_RATE; 0 when none waits.',
      () => (budget === null ? 0 : budget.backlogMs() / 1000), 'max');
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
