/**
 * The limits shared across shards and nodes (unlike a socket's own frame
 * window, which the guard keeps in its user data): per-tenant and per-user
 * publish windows and per-IP and per-tenant upgrade windows, as a shard
 * applies them.
 * The publish windows are LocalLimiters: `hit` decides on the spot from the
 * shard's allowance; the accepted hits are settled in batches with the
 * cluster's store (Redis) on a short timer. The upgrade windows are checked
 * with the store, every attempt counted (ExactWindow, one settle per turn). When Redis is not configured, or does not
 * answer, the batches go to the node's memory store in the coordinator
 * instead (one per node, shared by its shards): limits then hold per node.
 * Whether Redis is down is the shard's RedisHealth (a settle is not even
 * tried while it is), or a settle that failed. The switch is logged once
 * per outage and counted.
 */
import { type Config, ipWindowKey, LocalLimiter, SharedWindowTable, type WindowHit, type WindowState, type WindowStore } from '@sluice/core';
import { type RedisClient, RedisHealth, RedisWindowStore } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';

/** Settles with the node's memory store, in the coordinator (control port). */
export type LocalSettle = (hits: readonly WindowHit[], limit: number, windowMs: number, now: number) => Promise<readonly WindowState[]>;

export interface LimitStats {
  /** Batches settled, by store. */
  readonly settles: { redis: number; local: number };
  /** Keys settled in those batches, by store (a batch holds one entry per key). */
  readonly settled: { redis: number; local: number };
  /** Batches Redis failed and the local store took instead. */
  fallbacks: number;
}

/** How often due settles are looked for: a fraction of the limiter's gap between settles. */
const TICK_MS = 5;

class Window {
  readonly limiter: LocalLimiter;
  private busy = false;

  constructor(
    limit: number,
    windowMs: number,
    private readonly owner: SharedLimits,
  ) {
    this.limiter = new LocalLimiter({ limit, windowMs, settleMs: 25, minGapMs: 10 });
  }

  /** Nothing to settle now or later, and no settle in flight: the timer may stop. */
  get idle(): boolean {
    return !this.busy && this.limiter.dueAt() === Infinity;
  }

  tick(now: number): void {
    if (this.busy || !this.limiter.due(now)) return;
    const batch = this.limiter.takeBatch(now);
    if (batch.length === 0) return;
    this.busy = true;
    this.owner.settle(batch, this.limiter.limit, this.limiter.windowMs, now).then(
      (states) => {
        this.busy = false;
        this.limiter.apply(batch, states, Date.now());
      },
      () => {
        this.busy = false;
        this.limiter.fail(batch, Date.now());
      },
    ).catch((err: unknown) => this.owner.log.error({ err }, 'applying a limits settle failed'));
  }
}

/**
 * A window whose every hit the store counts (upgrade attempts): the checks
 * of one turn of the event loop go to the store together, one message (or
 * one Redis pipeline) for a burst.
 */
class ExactWindow {
  private queue: { readonly key: string; readonly resolve: (ms: number) => void; readonly reject: (err: unknown) => void }[] = [];

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly owner: SharedLimits,
    /** Embedded mode: the node's table in shared memory, which answers on the spot; null in cluster mode. */
    private readonly table: SharedWindowTable | null,
  ) {}

  /**
   * The check answered on the spot from the node's shared table (embedded
   * mode): 0 when the hit fits, else the ms to wait; undefined when there is
   * no table (cluster mode) or it has no room for the key: then `check`.
   */
  checkNow(key: string, now: number): number | undefined {
    const st = this.table?.hit(key, 1, this.limit, now);
    if (st === undefined) return undefined;
    return st.count <= this.limit ? 0 : Math.max(1, st.retryAfterMs);
  }

  /** Resolves 0 when the hit fits, else the ms to wait. */
  check(key: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.queue.push({ key, resolve, reject });
      if (this.queue.length === 1) setImmediate(this.flush);
    });
  }

  private readonly flush = (): void => {
    const queue = this.queue;
    this.queue = [];
    const limit = this.limit;
    // One entry per key, however many attempts it had in this turn: a storm from one tenant is one script, not one per upgrade.
    const byKey = new Map<string, number[]>();
    queue.forEach((q, i) => {
      const list = byKey.get(q.key);
      if (list === undefined) byKey.set(q.key, [i]);
      else list.push(i);
    });
    const keys = [...byKey.keys()];
    this.owner.settle(keys.map((key) => ({ key, hits: byKey.get(key)!.length })), limit, this.windowMs, Date.now()).then((states) => {
      keys.forEach((key, k) => {
        const st = states[k]!;
        const attempts = byKey.get(key)!;
        // The store counted them all; the first ones in order take the room there was.
        attempts.forEach((i, j) => queue[i]!.resolve(st.count - attempts.length + j + 1 <= limit ? 0 : Math.max(1, st.retryAfterMs)));
      });
    }, (err: unknown) => {
      for (const q of queue) q.reject(err);
    }).catch((err: unknown) => this.owner.log.error({ err }, 'answering upgrade limit checks failed'));
  };
}

/** Slots of each shared upgrade-window table: keys live in about the last three windows (1.8 MiB a table, paged in as used). */
export const SHARED_WINDOW_SLOTS = 65_536;

/** The buffers of a node's upgrade windows in shared memory (embedded mode), made by the coordinator and handed to every shard. */
export interface SharedWindowBuffers {
  readonly ip: SharedArrayBuffer;
  /** Null while WS_TENANT_CONNECT_LIMIT is off. */
  readonly tenantConnect: SharedArrayBuffer | null;
}

/** The node's upgrade-window tables as one thread sees them. */
export interface SharedWindows {
  readonly ip: SharedWindowTable;
  readonly tenantConnect: SharedWindowTable | null;
}

/** New zeroed buffers for `cfg`'s upgrade windows. */
export function sharedWindowBuffers(cfg: Pick<Config, 'tenantConnectLimit'>): SharedWindowBuffers {
  const bytes = SharedWindowTable.bytes(SHARED_WINDOW_SLOTS);
  return { ip: new SharedArrayBuffer(bytes), tenantConnect: cfg.tenantConnectLimit === 0 ? null : new SharedArrayBuffer(bytes) };
}

/**
 * The tables over `buffers` for thread `holder` (a shard's number; the
 * coordinator takes MAX_SHARDS). `canWait`: a worker thread may block on a
 * held lock for a millisecond after spinning; the main thread only spins.
 */
export function sharedWindows(cfg: Pick<Config, 'ipWindowMs' | 'tenantConnectWindowMs'>, buffers: SharedWindowBuffers, holder: number,
  canWait: boolean): SharedWindows {
  return {
    ip: new SharedWindowTable(buffers.ip, SHARED_WINDOW_SLOTS, cfg.ipWindowMs, holder, canWait),
    tenantConnect: buffers.tenantConnect === null ? null
      : new SharedWindowTable(buffers.tenantConnect, SHARED_WINDOW_SLOTS, cfg.tenantConnectWindowMs, holder, canWait),
  };
}

export class SharedLimits {
  private readonly tenant: Window;
  /** WS_USER_MSG_LIMIT: null when off (0). */
  private readonly user: Window | null;
  /** The upgrade windows, per IP and (WS_TENANT_CONNECT_LIMIT, null when off) per tenant: every attempt counted by the store. */
  private readonly ip: ExactWindow;
  private readonly tenantConnect: ExactWindow | null;
  private readonly redis: (WindowStore & { readonly commands: number }) | undefined;
  private readonly health: RedisHealth | undefined;
  /** The fallback was logged for this outage (cleared by the next settle Redis answers). */
  private redisFailing = false;
  private timer: NodeJS.Timeout | undefined;
  private started = false;
  readonly stats: LimitStats = { settles: { redis: 0, local: 0 }, settled: { redis: 0, local: 0 }, fallbacks: 0 };

  constructor(
    cfg: Config,
    client: RedisClient | undefined,
    private readonly local: LocalSettle,
    readonly log: Logger,
    /** How long each Redis settle took (answered or failed), in seconds. */
    private readonly timing: (seconds: number) => void = () => {},
    /** Whether `client` is up: the shard's one signal (the backplane hands in RedisBroker's); made here from `client` when not given. */
    health?: RedisHealth,
    /** Embedded mode: the node's upgrade windows in shared memory (see SharedWindows), answered on the spot. */
    windows?: SharedWindows,
  ) {
    this.tenant = new Window(cfg.tenantMsgLimit, cfg.tenantWindowMs, this);
    this.user = cfg.userMsgLimit === 0 ? null : new Window(cfg.userMsgLimit, cfg.userWindowMs, this);
    this.ip = new ExactWindow(cfg.ipConnectLimit, cfg.ipWindowMs, this, windows?.ip ?? null);
    this.tenantConnect = cfg.tenantConnectLimit === 0 ? null
      : new ExactWindow(cfg.tenantConnectLimit, cfg.tenantConnectWindowMs, this, windows?.tenantConnect ?? null);
    this.redis = client === undefined ? undefined : new RedisWindowStore(client);
    this.health = client === undefined ? undefined : health ?? new RedisHealth(client);
  }

  /**
   * From now on due batches are settled: every TICK_MS while hits are
   * pending or a settle is in flight; the timer stops when both windows are
   * idle and the next publish starts it again (a shard at rest does not wake
   * 200 times a second for nothing).
   */
  start(): void {
    this.started = true;
  }

  stop(): void {
    this.started = false;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  private wake(): void {
    if (!this.started) return;
    this.timer = setInterval(this.tick, TICK_MS);
    this.timer.unref();
  }

  private readonly tick = (): void => {
    const now = Date.now();
    this.tenant.tick(now);
    this.user?.tick(now);
    if (this.tenant.idle && (this.user === null || this.user.idle)) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  };

  /**
   * A publish under a tenant's window key (`tenantWindowKey`, made once per
   * socket at the upgrade: nothing is built per frame): 0 when it may go on,
   * else the ms to tell the client to wait.
   */
  publish(windowKey: string, now: number): number {
    const wait = this.tenant.limiter.hit(windowKey, now);
    if (this.timer === undefined) this.wake();
    return wait;
  }

  /** A publish under a user's window key (`userWindowKey`, made at the upgrade); 0 while WS_USER_MSG_LIMIT is off. */
  userPublish(windowKey: string, now: number): number {
    if (this.user === null) return 0;
    const wait = this.user.limiter.hit(windowKey, now);
    if (this.timer === undefined) this.wake();
    return wait;
  }

  /**
   * An upgrade with a valid token of a tenant (`tenantConnectWindowKey`):
   * resolves 0 when it may go on, else the ms to wait; 0 at once while
   * WS_TENANT_CONNECT_LIMIT is off. Counted by the store exactly, as the IP
   * window is (see `connect`): a tenant's first burst of upgrades is not cut
   * to a cold key's small local allowance.
   */
  tenantUpgrade(windowKey: string): Promise<number> {
    if (this.tenantConnect === null) return Promise.resolve(0);
    const now = this.tenantConnect.checkNow(windowKey, Date.now());
    return now === undefined ? this.tenantConnect.check(windowKey) : Promise.resolve(now);
  }

  /**
   * An upgrade attempt from `ip`: resolves 0 when it may go on, else the ms
   * to wait. Upgrades are rare next to frames, and a per-IP limit is small
   * (60 a minute), too small to split into per-shard allowances without
   * losing its precision: every attempt is counted by the store itself,
   * refused ones too, exactly. The attempts of one turn of the event loop go
   * to the store together: one message (or one Redis pipeline) for a burst
   * of upgrades.
   */
  connect(ip: string): Promise<number> {
    const key = ipWindowKey(ip);
    const now = this.ip.checkNow(key, Date.now());
    return now === undefined ? this.ip.check(key) : Promise.resolve(now);
  }

  /**
   * `connect` answered on the spot (embedded mode, from the node's shared
   * table): the ms to wait, 0 to go on; undefined when it cannot be (cluster
   * mode, or no room in the table): then `connect`, which counts it.
   */
  connectNow(ip: string): number | undefined {
    return this.ip.checkNow(ipWindowKey(ip), Date.now());
  }

  /** Whether the per-tenant upgrade window is off (WS_TENANT_CONNECT_LIMIT=0): `tenantUpgrade` then always answers 0. */
  get tenantUpgradesOff(): boolean {
    return this.tenantConnect === null;
  }

  /** Redis commands the limits sent (a Redis store counts its own). */
  get redisCommands(): number {
    return this.redis?.commands ?? 0;
  }

  async settle(batch: readonly WindowHit[], limit: number, windowMs: number, now: number): Promise<readonly WindowState[]> {
    if (this.redis !== undefined && !this.health!.up) this.fellBack('redis is not connected');
    else if (this.redis !== undefined) {
      const t0 = performance.now();
      try {
        const states = await this.redis.settle(batch, limit, windowMs, now);
        this.timing((performance.now() - t0) / 1000);
        this.stats.settles.redis++;
        this.stats.settled.redis += batch.length;
        if (this.redisFailing) {
          this.redisFailing = false;
          this.log.info('limits settle with redis again');
        }
        return states;
      } catch (err) {
        this.timing((performance.now() - t0) / 1000);
        this.fellBack(String(err));
      }
    }
    const states = await this.local(batch, limit, windowMs, now);
    this.stats.settles.local++;
    this.stats.settled.local += batch.length;
    return states;
  }

  /** A batch Redis should have settled goes to the local store: counted, and logged once per outage. */
  private fellBack(err: string): void {
    this.stats.fallbacks++;
    if (this.redisFailing) return;
    this.redisFailing = true;
    this.log.warn({ err }, 'redis unavailable for limits: settling with this node\'s memory store until it answers');
  }
}
