/**
 * The coordinator: the main thread. It parses nothing per frame; it owns the
 * shard pool, the shared flags, the embedded hub (history, idempotency,
 * routing across shards), the admin server and the process's signals.
 */
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { Server } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { Piscina } from 'piscina';
import { type Config, type PublishRequest, type PublishResult, redactedConfig } from '@sluice/core';
import { aggregateMetrics, counterFrom, gaugeFrom, type Logger, type MetricsJson, registerEventLoopStall,
  registerProcessMetrics, Registry } from '@sluice/telemetry';
import { createAdminServer } from './admin.ts';
import { EmbeddedHub } from './embedded-hub.ts';
import { Batcher, decodeToCoordinator, encodeToShard, forEachMessage, type ToShard } from './messages.ts';
import { acceptedSocketsOnPort } from './proc-sockets.ts';
import { Flag, SharedState } from './shared-state.ts';
import type { ShardExit, ShardTask } from './shard.ts';

const SHARD_FILE = new URL('./shard.ts', import.meta.url);
/** How long a shard may take to close its sockets on stop before it is cut off. */
const STOP_TIMEOUT_MS = 10_000;
const RESTART_DELAY_MS = 250;
/** uWS cuts a socket that never answers a close frame after at most 16 s (its ping timeout). */
const CLOSE_GRACE_MS = 18_000;

class ShardLink {
  readonly out: Batcher<ToShard>;
  listening: ((port: number) => void) | undefined;
  readonly metricWaiters = new Map<number, (json: MetricsJson) => void>();
  constructor(readonly port: MessagePort) {
    this.out = new Batcher(encodeToShard, (batch) => port.postMessage(batch));
  }
  send(m: ToShard): void {
    this.out.push(m);
  }
}

export interface Started {
  readonly port: number;
  readonly adminPort: number;
}

export class Coordinator {
  private readonly shared = new SharedState();
  private readonly hub: EmbeddedHub;
  private readonly links = new Map<number, ShardLink>();
  private readonly tasks = new Map<number, Promise<void>>();
  private readonly generations: number[] = [];
  private readonly registry = new Registry();
  private readonly nodeId = randomBytes(4).toString('hex');
  private pool: Piscina<ShardTask, ShardExit> | undefined;
  private admin: Server | undefined;
  private publicPort = 0;
  private stopping: Promise<void> | undefined;
  private restarts = 0;
  private metricsRid = 0;
  private sweepTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly opts: { testHooks: boolean },
  ) {
    this.hub = new EmbeddedHub(config);
    this.registerMetrics();
  }

  async start(): Promise<Started> {
    const cfg = this.config;
    this.log.info({ config: redactedConfig(cfg), node: this.nodeId }, 'starting sluice');
    this.pool = new Piscina<ShardTask, ShardExit>({
      filename: SHARD_FILE.href,
      minThreads: cfg.workers,
      maxThreads: cfg.workers,
      idleTimeout: Infinity,
      concurrentTasksPerWorker: 1,
      atomics: 'disabled',
      execArgv: SHARD_FILE.pathname.endsWith('.ts') ? ['--import', 'tsx'] : [],
    });
    // uSockets sets SO_REUSEPORT only for a non-zero port, so PORT=0 is
    // resolved here first and every shard then binds the same concrete port.
    this.publicPort = cfg.port !== 0 ? cfg.port : await freePort(cfg.host);
    await Promise.all(Array.from({ length: cfg.workers }, (_, i) => this.startShard(i, this.publicPort)));
    this.admin = createAdminServer({
      config: cfg,
      log: this.log,
      ready: () => this.shared.ready(cfg.workers, cfg.maxSockets),
      metrics: () => this.metrics(),
      publish: (req) => this.publish(req),
    });
    const adminPort = await new Promise<number>((resolve, reject) => {
      this.admin!.once('error', reject);
      this.admin!.listen(cfg.adminPort, cfg.adminHost, () => resolve((this.admin!.address() as AddressInfo).port));
    });
    this.sweepTimer = setInterval(() => this.hub.sweep(), 1000);
    this.sweepTimer.unref();
    this.shared.set(Flag.Listening);
    this.log.info({ port: this.publicPort, adminPort, workers: cfg.workers, mode: 'embedded' }, 'gateway ready');
    return { port: this.publicPort, adminPort };
  }

  /** Stops cleanly: readiness fails, every shard closes its sockets and listen socket, the pool ends. */
  stop(reason: string): Promise<void> {
    this.stopping ??= this.doStop(reason);
    return this.stopping;
  }

  private async doStop(reason: string): Promise<void> {
    const started = Date.now();
    const sockets = this.shared.totalSockets(this.config.workers);
    this.log.info({ reason, sockets }, 'stopping');
    this.shared.set(Flag.Draining);
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer);
    for (const link of this.links.values()) link.send({ op: 'stop' });
    const all = Promise.allSettled(this.tasks.values());
    const timedOut = await Promise.race([all.then(() => false), delay(STOP_TIMEOUT_MS).then(() => true)]);
    if (timedOut) this.log.warn('shards did not stop in time');
    await this.waitForClosedSockets();
    await new Promise<void>((resolve) => (this.admin ? this.admin.close(() => resolve()) : resolve()));
    this.admin?.closeAllConnections();
    await this.pool?.destroy();
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
    this.hub.attach(shard, link);
    port1.on('message', (batch: string) => forEachMessage(batch, decodeToCoordinator, (m) => this.fromShard(shard, link, m)));
    const generation = (this.generations[shard] = (this.generations[shard] ?? -1) + 1);
    const listening = new Promise<number>((resolve) => (link.listening = resolve));
    const task: ShardTask = {
      shard, generation, nodeId: this.nodeId, config: this.config, shared: this.shared.buffer, port: port2,
      listenPort, testHooks: this.opts.testHooks,
    };
    let failedEarly: (err: unknown) => void = () => {};
    const early = new Promise<never>((_, reject) => (failedEarly = reject));
    const run = this.pool!.run(task, { transferList: [port2] as never });
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
    this.hub.detach(shard);
    this.shared.resetSockets(shard);
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

  private fromShard(shard: number, link: ShardLink, m: ReturnType<typeof decodeToCoordinator>): void {
    switch (m.op) {
      case 'pub':
        link.send({ op: 'pubok', rid: m.rid, res: this.hub.publish(m.req) });
        return;
      case 'sub':
        this.hub.subscribe(shard, m.topic);
        link.send({ op: 'subok', rid: m.rid });
        return;
      case 'unsub':
        this.hub.unsubscribe(shard, m.topic);
        return;
      case 'hist':
        link.send({ op: 'hist', rid: m.rid, read: this.hub.history(m.topic, m.since) });
        return;
      case 'listening':
        link.listening?.(m.port);
        return;
      case 'metrics': {
        const w = link.metricWaiters.get(m.rid);
        link.metricWaiters.delete(m.rid);
        w?.(m.json);
        return;
      }
    }
  }

  private async publish(req: PublishRequest): Promise<PublishResult> {
    return this.hub.publish(req);
  }

  private async metrics(): Promise<{ text: string; contentType: string }> {
    const own = await this.registry.getMetricsAsJSON();
    const perShard = await Promise.all(
      [...this.links.values()].map((link) =>
        Promise.race([
          new Promise<MetricsJson>((resolve) => {
            const rid = ++this.metricsRid;
            link.metricWaiters.set(rid, resolve);
            link.send({ op: 'metrics', rid });
          }),
          delay(2000).then(() => [] as MetricsJson),
        ]),
      ),
    );
    return aggregateMetrics([own, ...perShard]);
  }

  private registerMetrics(): void {
    const r = this.registry;
    registerProcessMetrics(r);
    registerEventLoopStall(r);
    counterFrom(r, 'sluice_shard_restarts_total', 'Shard threads restarted after a crash.', undefined, () => this.restarts);
    counterFrom(r, 'sluice_messages_published_total', 'Events accepted by the broker, by class.', 'class',
      () => this.hub.stats.published);
    counterFrom(r, 'sluice_publish_duplicates_total', 'Publishes answered from the idempotency table.', undefined,
      () => this.hub.stats.duplicates);
    gaugeFrom(r, 'sluice_history_topics', 'Topics with history held in memory.', () => this.hub.topicCount);
    gaugeFrom(r, 'sluice_ready', '1 while the node accepts new sockets, else 0.',
      () => (this.shared.ready(this.config.workers, this.config.maxSockets) ? 1 : 0), 'max');
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** A port the kernel just handed out on `host`; used once, for PORT=0. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
