import type { MessagePort } from 'node:worker_threads';
import {
  BrokerUnavailable, type Config, type Delivery, type HistoryRead, MapPass, type PublishFields, type PublishResult, ReplaySplice, SpliceEmit, topicKey,
} from '@sluice/core';
import { encodeEventFrame, EventClass, eventIdMs, parseEventId, POSITION_TAIL, positionFrameHead } from '@sluice/protocol';
import {
  type BusMessage, COMMAND_TIMEOUT_MS, createRedisClient, type DurableWriter, nodeOptions, RedisBus, type RedisClient, RedisHealth, redisTarget,
  MARK_CLASS, ReplicaAckFailed, ReplicaAcks, ShardedSubscriptions,
} from '@sluice/redis';
import { clientTopic } from './presence-hub.ts';
import type { Logger } from '@sluice/telemetry';
import type { MeshBroker } from './mesh-broker.ts';
import type { BrokerStats, ShardBroker } from './shard-broker.ts';

/** The `op` label of sluice_redis_command_seconds; the index is what RedisBroker and SharedLimits observe. */
export const REDIS_OPS = ['publish', 'history', 'subscribe', 'window', 'position', 'mark'] as const;
export const RedisOp = { Publish: 0, History: 1, Subscribe: 2, Window: 3, Position: 4, Mark: 5 } as const;
/** Records how long a Redis command took, answered or failed (seconds). */
export type RedisTiming = (op: number, seconds: number) => void;

const UNAVAILABLE: PublishResult = Object.freeze({ ok: false, reason: 'unavailable' });
/** The id placeholder split out of an encoded frame: the script puts the stream id there. */
const ID_MARK = '\x00';
/** Topics looked at per sweep (each second) for a due position mark. */
const MARK_BUDGET = 1000;

/**
 * The broker of a shard in cluster mode (REDIS_URL set). Events, history and
 * idempotency records live in Redis (RedisBus): any shard of any node
 * publishes straight to Redis, and each shard subscribes to the topics its
 * own sockets joined, so Redis sends a node only what it has subscribers
 * for, and within the node every shard gets it from Redis directly.
 *
 * Failures follow Broker's convention: publish resolves `unavailable`,
 * history rejects with BrokerUnavailable, subscribe does not fail (a topic
 * Redis did not confirm stays wanted and is subscribed when it is back).
 * While Redis is unreachable: durable publishes and history reads answer
 * `unavailable`; keyed and ephemeral events still flow within the node
 * through the embedded mesh, to which every subscription is also made; and
 * when the subscriber connection comes back, every topic is subscribed
 * again and the durable events published meanwhile by other nodes are read
 * from the streams and delivered, in order, with no duplicate.
 */
export class RedisBroker implements ShardBroker {
  private readonly cmd: RedisClient;
  /** Standalone: the subscriber connection. Cluster: one connection per master that holds a subscribed channel. */
  private readonly sub: RedisClient | ShardedSubscriptions;
  private readonly bus: RedisBus;
  /** WS_REDIS_ACK_REPLICAS > 0: the durable publishes' connection and their acknowledgements by replicas. */
  private readonly durable: DurableWriter | undefined;
  private deliver: (ev: Delivery) => void = () => {};
  /**
   * Per subscribed topic, its splice (core's ReplaySplice): the last durable
   * id delivered, so that repeats are dropped and a catch-up after a
   * reconnect reads from there; while a catch-up read is out, the live
   * events wait in it.
   */
  private readonly splices = new Map<string, ReplaySplice<Delivery>>();
  private readonly emit = (ev: Delivery): void => this.deliver(ev);
  /** What a callback of a Redis reply threw (a bug downstream): logged, not an unhandled rejection that stops the shard. */
  private readonly callbackFailed = (err: unknown): void => this.log.error({ err }, 'handling a redis reply failed');
  /** Topics whose catch-up read waits for the command connection (the subscriber connection came back first). */
  private readonly awaitingCmd = new Set<string>();
  private readonly counts = { durable: 0, keyed: 0, ephemeral: 0, duplicates: 0, errors: 0, marks: 0 };
  /** WS_POSITION_REFRESH_MS, less this shard's random slack (see markQuiet). */
  private readonly markAfterMs: number;
  /**
   * When this shard last asked Redis for a topic's mark: not again within
   * markAfterMs, even when the topic looks due (its last id is on Redis's
   * clock: a node clock ahead of it would find the topic due on every
   * sweep). Dropped with the subscription.
   */
  private readonly marking = new Map<string, number>();
  /** The marking pass over `splices`, MARK_BUDGET topics a sweep. */
  private readonly markPass = new MapPass(this.splices);
  readonly stats: BrokerStats;
  /** Whether the command connection is up: this shard's one notion of "Redis is down", shared with its limits. */
  readonly health: RedisHealth;

  constructor(
    shard: number,
    private readonly mesh: MeshBroker,
    private readonly cfg: Config,
    private readonly log: Logger,
    private readonly timing: RedisTiming = () => {},
  ) {
    // Every shard of every node subscribed to a quiet topic comes to ask for
    // its mark; the first mark reaches them all and resets their clocks. A
    // slack of up to a tenth (at most a minute) spreads the shards out, so
    // that mostly one asks.
    this.markAfterMs = cfg.positionRefreshMs - Math.floor(Math.random() * Math.min(cfg.positionRefreshMs / 10, 60_000));
    const target = redisTarget(cfg);
    this.cmd = createRedisClient(target, 'command', `shard${shard}`);
    this.sub = cfg.redisCluster
      ? new ShardedSubscriptions(this.cmd, nodeOptions(target, `sluice-shard${shard}-subscriber`))
      : createRedisClient(target, 'subscriber', `shard${shard}`);
    this.health = new RedisHealth(this.cmd);
    // WS_REDIS_ACK_REPLICAS: durable publishes on a connection of their own,
    // which each WAIT blocks (the limits and reads on the command connection
    // do not wait behind it); its commands may wait one WAIT's timeout.
    if (cfg.redisAckReplicas > 0) {
      const client = createRedisClient(target, 'command', `shard${shard}-durable`, COMMAND_TIMEOUT_MS + cfg.redisAckTimeoutMs);
      client.on('error', () => {});
      this.durable = { client, acks: new ReplicaAcks(client, cfg.redisAckReplicas, cfg.redisAckTimeoutMs) };
    }
    this.bus = new RedisBus(this.cmd, this.sub, {
      cluster: cfg.redisCluster, historySize: cfg.historySize, historyTtlMs: cfg.historyTtlMs, idempotencyTtlMs: cfg.idempotencyTtlMs,
    }, this.durable);
    const bus = this.bus;
    const durable = this.durable;
    const own = this.counts;
    const meshStats = mesh.hub.stats.published;
    this.stats = {
      // Keyed and ephemeral events that took the mesh while Redis was down count too.
      get published() {
        return { durable: own.durable, keyed: own.keyed + meshStats.keyed, ephemeral: own.ephemeral + meshStats.ephemeral };
      },
      get duplicates() {
        return own.duplicates;
      },
      historyTopics: 0,
      get redisCommands() {
        return bus.commands + (durable?.acks.waits ?? 0);
      },
      get redisErrors() {
        return own.errors;
      },
      get replicaAckFailures() {
        return durable?.acks.failures ?? 0;
      },
      get positionMarks() {
        return own.marks;
      },
    };
    this.bus.onMessage((m) => this.fromBus(m));
    mesh.onDelivery((ev) => this.deliver(ev));
    this.cmd.on('error', () => {
      // Connection errors surface as 'close' and failed commands; the coordinator logs Redis state changes once.
    });
    this.health.onChange((state) => {
      if (state !== 'up') return;
      const topics = [...this.awaitingCmd];
      this.awaitingCmd.clear();
      for (const t of topics) this.catchUp(t);
    });
    // Every (re)connection of a subscriber connection restores the wanted
    // topics, including those joined while it was away, and reads what the
    // streams stored meanwhile.
    if (this.sub instanceof ShardedSubscriptions) {
      this.sub.onReady(() => this.resume());
      this.sub.onError((err) => this.log.warn({ err }, 'resuming subscriptions after a reconnect failed; the next reconnect tries again'));
      // Subscriptions that failed before the Cluster's slot map was known.
      this.health.onChange((state) => {
        if (state === 'up') this.resume();
      });
    } else {
      this.sub.on('error', () => {});
      this.sub.on('ready', () => this.resume());
    }
  }

  /** Resolves once both connections are up, or after `ms` (the shard then starts degraded, as during an outage). */
  connected(ms: number): Promise<void> {
    const waits = [this.health.whenUp(ms)];
    if (!(this.sub instanceof ShardedSubscriptions)) waits.push(new RedisHealth(this.sub).whenUp(ms));
    return Promise.all(waits).then(() => undefined);
  }

  /** The command connection, shared with the limits' window store. */
  get client(): RedisClient {
    return this.cmd;
  }

  private get up(): boolean {
    return this.health.up;
  }

  publishThen(tenant: string, req: PublishFields, done: (res: PublishResult) => void, key: string = topicKey(tenant, req.topic)): void {
    if (req.cls !== EventClass.Durable) {
      if (!this.up) {
        // Within the node only, through the mesh: better than nothing for events that are not stored.
        this.mesh.publishThen(tenant, req, done, key);
        return;
      }
      const t0 = performance.now();
      this.bus.publishVolatile(key, req.cls, req.key, encodeEventFrame(req, undefined)).then(
        () => {
          this.took(RedisOp.Publish, t0);
          if (req.cls === EventClass.Keyed) this.counts.keyed++;
          else this.counts.ephemeral++;
          done({ ok: true, id: undefined, duplicate: false });
        },
        () => {
          this.took(RedisOp.Publish, t0);
          this.counts.errors++;
          this.mesh.publishThen(tenant, req, done, key);
        },
      ).catch(this.callbackFailed);
      return;
    }
    if (!this.up) {
      done(UNAVAILABLE);
      return;
    }
    const frame = encodeEventFrame(req, ID_MARK);
    const at = frame.indexOf(ID_MARK);
    const t0 = performance.now();
    this.bus.publishDurable({
      topic: key, tenant, head: frame.slice(0, at), tail: frame.slice(at + 1), idempotencyKey: req.idempotencyKey,
    }).then(
      (r) => {
        this.took(RedisOp.Publish, t0);
        if (r.duplicate) this.counts.duplicates++;
        else this.counts.durable++;
        done({ ok: true, id: r.id, duplicate: r.duplicate });
      },
      (err: unknown) => {
        // Not stored, or not known to be (or not confirmed by the replicas): the client resends with the same idempotency key.
        this.took(RedisOp.Publish, t0);
        if (!(err instanceof ReplicaAckFailed)) this.counts.errors++;
        if (this.log.isLevelEnabled('debug')) this.log.debug({ err }, 'durable publish failed');
        done(UNAVAILABLE);
      },
    ).catch(this.callbackFailed);
  }

  publish(tenant: string, req: PublishFields): Promise<PublishResult> {
    return new Promise((resolve) => this.publishThen(tenant, req, resolve));
  }

  async subscribe(topic: string): Promise<string | undefined> {
    // The mesh only carries this node's keyed and ephemeral events while
    // Redis is down: a mesh owner that is restarting must not fail the join.
    await this.mesh.subscribe(topic).catch((err: unknown) => {
      if (this.log.isLevelEnabled('debug')) this.log.debug({ err, topic }, 'mesh subscribe failed; Redis carries the topic');
    });
    // Where a catch-up would start if the subscription lapses before the
    // first event: Redis's clock (stream ids come from it), or this node's
    // when Redis does not answer.
    // One ms back: an event stored in the same ms as this reading gets an id
    // `<ms>-<seq>` that must count as after it, never as already delivered.
    if (!this.splices.has(topic)) this.splices.set(topic, new ReplaySplice(`${(await this.bus.now().catch(() => Date.now())) - 1}-0`));
    const t0 = performance.now();
    try {
      await this.bus.subscribe(topic);
      this.took(RedisOp.Subscribe, t0);
    } catch (err) {
      this.took(RedisOp.Subscribe, t0);
      // Still wanted: subscribed again when Redis is back, and the durable
      // events stored from the join on are read then. Until then only the
      // mesh (this node's keyed and ephemeral events) reaches the topic.
      this.counts.errors++;
      if (this.log.isLevelEnabled('debug')) this.log.debug({ err, topic }, 'redis subscribe failed; kept for when it is back');
      return undefined;
    }
    // Read once the subscription is confirmed: every event stored after the
    // read has a higher id and comes on the channel. Not known when Redis
    // does not answer: the joins then get no position.
    const t1 = performance.now();
    try {
      return await this.bus.position(topic);
    } catch (err) {
      this.counts.errors++;
      if (this.log.isLevelEnabled('debug')) this.log.debug({ err, topic }, 'reading the topic position failed');
      return undefined;
    } finally {
      this.took(RedisOp.Position, t1);
    }
  }

  unsubscribe(topic: string): void {
    this.mesh.unsubscribe(topic);
    this.bus.unsubscribe(topic);
    this.splices.delete(topic);
    this.awaitingCmd.delete(topic);
    this.marking.delete(topic);
  }

  async history(topic: string, since: string | undefined, limit?: number): Promise<HistoryRead> {
    if (!this.up) throw new BrokerUnavailable('redis is unavailable');
    const t0 = performance.now();
    try {
      return await this.bus.read(topic, since, limit);
    } catch (err) {
      this.counts.errors++;
      throw new BrokerUnavailable('the history read from redis failed', { cause: err });
    } finally {
      this.took(RedisOp.History, t0);
    }
  }

  private took(op: number, t0: number): void {
    this.timing(op, (performance.now() - t0) / 1000);
  }

  onDelivery(handler: (ev: Delivery) => void): void {
    this.deliver = handler;
  }

  sweep(now: number): void {
    this.mesh.sweep(now);
    if (this.cfg.positionRefreshMs > 0 && this.up) this.markQuiet(now);
  }

  /**
   * WS_POSITION_REFRESH_MS: asks Redis for a mark (RedisBus.mark) for each
   * subscribed topic whose last durable id or mark is older than that (ids
   * are Redis's clock: the node's is taken to be close to it). The mark
   * comes back on the topic's channel, after every event at or below it,
   * to every subscribed shard of every node. A pass over the topics takes
   * MARK_BUDGET a sweep; a topic whose catch-up is under way waits.
   */
  private markQuiet(now: number): void {
    const due = now - this.markAfterMs;
    this.markPass.next(MARK_BUDGET, (topic, splice) => {
      if (splice.holding || eventIdMs(splice.lastId) >= due) return;
      const asked = this.marking.get(topic);
      if (asked !== undefined && asked > due) return;
      this.marking.set(topic, now);
      this.counts.marks++;
      const t0 = performance.now();
      this.bus.mark(topic, positionFrameHead(clientTopic(topic)), POSITION_TAIL).then(() => this.took(RedisOp.Mark, t0), (err: unknown) => {
        // Asked again on a later pass.
        this.took(RedisOp.Mark, t0);
        this.counts.errors++;
        this.marking.delete(topic);
        if (this.log.isLevelEnabled('debug')) this.log.debug({ err, topic }, 'position mark failed');
      });
    });
  }

  flush(): void {
    this.mesh.flush();
  }

  addPeer(shard: number, port: MessagePort): void {
    this.mesh.addPeer(shard, port);
  }

  close(): void {
    this.cmd.disconnect();
    this.durable?.client.disconnect();
    this.sub.disconnect();
    this.mesh.close();
  }

  private fromBus(m: BusMessage): void {
    // Unsubscribed meanwhile, or not subscribed again yet (subscribe makes the splice before the bus subscription).
    const splice = this.splices.get(m.topic);
    if (splice === undefined || !this.bus.topics.has(m.topic)) return;
    // The id is parsed once: for the lag's time part and for the splice.
    const id = m.id === undefined ? undefined : parseEventId(m.id);
    let ev: Delivery;
    if (m.cls === MARK_CLASS) {
      // A position mark: spliced by its id like a durable event (so it moves
      // the topic's last id on), handed on as ephemeral (a congested
      // socket's mailbox may drop it), with no delivery lag.
      ev = { topic: m.topic, frame: m.frame, id: m.id, cls: EventClass.Ephemeral, key: undefined, at: 0 };
    } else {
      ev = { topic: m.topic, frame: m.frame, id: m.id, cls: m.cls as EventClass, key: m.key, at: id === undefined ? 0 : id.ms };
    }
    // Held while a catch-up read is out; dropped when not newer than the last delivered on its topic.
    if ((splice.live(ev, id) & SpliceEmit) !== 0) this.deliver(ev);
  }

  /**
   * The subscriber connection is back: subscribe every wanted topic again,
   * then read what each topic stored after the last event delivered, and
   * deliver it before the live events that arrived meanwhile.
   */
  private resume(): void {
    const topics = [...this.bus.topics];
    if (topics.length === 0) return;
    // A catch-up already under way keeps the live events it holds.
    for (const t of topics) this.splices.get(t)?.hold();
    this.bus.resubscribe().then(
      () => {
        for (const t of topics) this.catchUp(t);
      },
      (err: unknown) => {
        this.counts.errors++;
        this.log.warn({ err }, 'redis resubscribe failed; retrying on the next reconnect');
        for (const t of topics) this.release(t);
      },
    ).catch(this.callbackFailed);
  }

  private catchUp(topic: string): void {
    const splice = this.splices.get(topic);
    if (splice === undefined || !splice.holding) return;
    if (!this.up) {
      // The read goes over the command connection, which is not back yet:
      // read once it is, holding the live events meanwhile.
      this.awaitingCmd.add(topic);
      return;
    }
    const t0 = performance.now();
    this.bus.read(topic, splice.lastId).then(
      (read) => {
        this.took(RedisOp.History, t0);
        if (this.splices.get(topic) !== splice || !splice.holding) return;
        if (!read.recovered) this.log.warn({ topic }, 'events published while redis was unreachable were trimmed before they could be delivered');
        splice.replay(read.events.map((e) => ({ topic, frame: e.frame, id: e.id, cls: EventClass.Durable, key: undefined, at: eventIdMs(e.id) })),
          this.emit);
        splice.release(this.emit);
      },
      (err: unknown) => {
        this.took(RedisOp.History, t0);
        this.counts.errors++;
        if (!this.up) {
          this.awaitingCmd.add(topic);
          return;
        }
        this.log.warn({ err, topic }, 'could not read what a topic stored while redis was unreachable');
        this.release(topic);
      },
    ).catch(this.callbackFailed);
  }

  /** Ends a topic's catch-up without its read: the live events that waited go out in order. */
  private release(topic: string): void {
    this.splices.get(topic)?.release(this.emit);
  }
}

