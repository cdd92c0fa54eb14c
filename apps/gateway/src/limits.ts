/**
 * Per-tenant publish and per-IP upgrade windows, as a shard applies them.
 * Each window is a LocalLimiter: `hit` decides on the spot from the shard's
 * allowance; the accepted hits are settled in batches with the cluster's
 * store (Redis) on a short timer. When Redis is not configured, or does not
 * answer, the batches go to the node's memory store in the coordinator
 * instead (one per node, shared by its shards): limits then hold per node.
 * The switch is logged once per outage and counted.
 */
import { type Config, LocalLimiter, type WindowHit, type WindowState, type WindowStore } from '@sluice/core';
import { RedisWindowStore, type RedisClient } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';

/** Settles with the node's memory store, in the coordinator (control port). */
export type LocalSettle = (hits: readonly WindowHit[], limit: number, windowMs: number, now: number) => Promise<readonly WindowState[]>;

export interface LimitStats {
  /** Batches settled, by store. */
  readonly settles: { redis: number; local: number };
  /** Batches Redis failed and the local store took instead. */
  fallbacks: number;
}

class Window {
  readonly limiter: LocalLimiter;
  private busy = false;

  constructor(
    readonly name: 'tenant' | 'ip',
    limit: number,
    windowMs: number,
    private readonly owner: Limits,
  ) {
    this.limiter = new LocalLimiter({ limit, windowMs });
  }

  tick(now: number): void {
    if (this.busy || !this.limiter.due(now)) return;
    const batch = this.limiter.takeBatch(now);
    if (batch.length === 0) return;
    this.busy = true;
    void this.owner.settle(batch, this.limiter.limit, this.limiter.windowMs, now).then(
      (states) => {
        this.busy = false;
        this.limiter.apply(batch, states, Date.now());
      },
      () => {
        this.busy = false;
        this.limiter.fail(batch, Date.now());
      },
    );
  }
}

export class Limits {
  private readonly tenant: Window;
  private readonly ip: Window;
  private readonly redis: WindowStore | undefined;
  private redisFailing = false;
  private timer: NodeJS.Timeout | undefined;
  readonly stats: LimitStats = { settles: { redis: 0, local: 0 }, fallbacks: 0 };

  constructor(
    cfg: Config,
    client: RedisClient | undefined,
    private readonly local: LocalSettle,
    private readonly log: Logger,
  ) {
    this.tenant = new Window('tenant', cfg.tenantMsgLimit, cfg.tenantWindowMs, this);
    this.ip = new Window('ip', cfg.ipConnectLimit, cfg.ipWindowMs, this);
    this.redis = client === undefined ? undefined : new RedisWindowStore(client);
  }

  /** Settles due batches every few ms; cheap when nothing is pending. */
  start(): void {
    const every = Math.max(1, Math.min(this.tenant.limiter.settleMs, this.ip.limiter.settleMs) / 2);
    this.timer = setInterval(() => {
      const now = Date.now();
      this.tenant.tick(now);
      this.ip.tick(now);
    }, every);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  /** A publish by `tenant`: 0 when it may go on, else the ms to tell the client to wait. */
  publish(tenant: string, now: number): number {
    return this.tenant.limiter.hit(tenant, now);
  }

  /** An upgrade attempt from `ip`: 0 when it may go on, else the ms to wait. */
  connect(ip: string, now: number): number {
    return this.ip.limiter.hit(ip, now);
  }

  /** Redis commands the limits sent (a Redis store counts its own). */
  get redisCommands(): number {
    return (this.redis as { commands?: number } | undefined)?.commands ?? 0;
  }

  async settle(batch: readonly WindowHit[], limit: number, windowMs: number, now: number): Promise<readonly WindowState[]> {
    if (this.redis !== undefined) {
      try {
        const states = await this.redis.settle(batch, limit, windowMs, now);
        this.stats.settles.redis++;
        if (this.redisFailing) {
          this.redisFailing = false;
          this.log.info('limits settle with redis again');
        }
        return states;
      } catch (err) {
        this.stats.fallbacks++;
        if (!this.redisFailing) {
          this.redisFailing = true;
          this.log.warn({ err: String(err) }, 'redis unavailable for limits: settling with this node\'s memory store until it answers');
        }
      }
    }
    const states = await this.local(batch, limit, windowMs, now);
    this.stats.settles.local++;
    return states;
  }
}
