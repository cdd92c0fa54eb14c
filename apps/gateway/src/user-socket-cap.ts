/**
 * WS_MAX_USER_SOCKETS as a shard applies it: each upgrade with a valid
 * token claims one socket of its user, each close gives it back. The claims
 * and releases of one turn of the event loop go to the store together (one
 * call per key, never per frame). The store: Redis in cluster mode, the
 * node's memory store in the coordinator in embedded mode.
 *
 * The shard generation is the store's *holder*; it beats every
 * HOLDER_BEAT_MS so that its sockets keep counting, and stops counting
 * HOLDER_TTL_MS after it dies.
 *
 * Redis unreachable: the cap is not applied (upgrades go on, counted in
 * `failedOpen`), and releases are dropped. When Redis answers again the
 * shard takes a new holder id and claims its open sockets afresh, so the
 * counts left by the old id (which no longer beats) stop counting.
 */
import { HOLDER_BEAT_MS, type UserSocketStore } from '@sluice/core';
import type { RedisHealth } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';

export type Claim = 'claimed' | 'refused' | 'skipped';

export class UserSocketCap {
  private holder: string;
  private epoch = 0;
  private claims: { readonly key: string; readonly resolve: (c: Claim) => void }[] = [];
  private releases = new Map<string, number>();
  private releaseScheduled = false;
  private timer: NodeJS.Timeout | undefined;
  readonly stats = { refused: 0, failedOpen: 0 };

  constructor(
    private readonly max: number,
    private readonly store: UserSocketStore,
    private readonly holderBase: string,
    private readonly log: Logger,
    /** Every user key this shard holds sockets of, with the count: what a new holder claims again. */
    private readonly held: () => Iterable<[string, number]>,
    /** Cluster mode: whether Redis is up. */
    private readonly health?: RedisHealth,
  ) {
    this.holder = this.holderId();
    health?.onChange((state, prev) => {
      if (state === 'up' && prev === 'down') this.reclaim();
    });
  }

  start(): void {
    this.timer = setInterval(() => this.beat(), HOLDER_BEAT_MS);
    this.timer.unref();
    this.beat();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  /**
   * One socket of `key`: `claimed` (it fits, and is counted), `refused`
   * (the user is at WS_MAX_USER_SOCKETS), or `skipped` (the store did not
   * answer: let through, not counted, so not to be released). Never rejects.
   */
  claim(key: string): Promise<Claim> {
    return new Promise((resolve) => {
      this.claims.push({ key, resolve });
      if (this.claims.length === 1) setImmediate(this.flushClaims);
    });
  }

  /** A claimed socket of `key` is gone (closed, or its upgrade did not complete). */
  release(key: string): void {
    this.releases.set(key, (this.releases.get(key) ?? 0) + 1);
    if (!this.releaseScheduled) {
      this.releaseScheduled = true;
      setImmediate(this.flushReleases);
    }
  }

  private readonly flushClaims = (): void => {
    const batch = this.claims;
    this.claims = [];
    if (this.health !== undefined && !this.health.up) {
      this.stats.failedOpen += batch.length;
      for (const c of batch) c.resolve('skipped');
      return;
    }
    this.store.claim(this.holder, batch.map((c) => c.key), this.max, Date.now()).then((fits) => {
      batch.forEach((c, i) => {
        if (!fits[i]) this.stats.refused++;
        c.resolve(fits[i]! ? 'claimed' : 'refused');
      });
    }, (err: unknown) => {
      // Some of the batch may have been counted before the failure: on the strict side until the next outage's reclaim.
      this.stats.failedOpen += batch.length;
      this.log.warn({ err, claims: batch.length }, 'user socket claims failed: the upgrades go on without WS_MAX_USER_SOCKETS');
      for (const c of batch) c.resolve('skipped');
    });
  };

  private readonly flushReleases = (): void => {
    this.releaseScheduled = false;
    const counts = this.releases;
    this.releases = new Map();
    // While Redis is down they are dropped: the reclaim after the outage counts the open sockets afresh.
    if (this.health !== undefined && !this.health.up) return;
    this.store.release(this.holder, counts, Date.now()).catch((err: unknown) => {
      this.log.warn({ err, users: counts.size }, 'user socket releases failed; trying again with the next ones');
      for (const [key, n] of counts) this.releases.set(key, (this.releases.get(key) ?? 0) + n);
    });
  };

  private beat(): void {
    if (this.health !== undefined && !this.health.up) return;
    this.store.beat(this.holder, Date.now()).catch(() => {
      // The next beat tries again; a holder silent for HOLDER_TTL_MS stops counting, on the lenient side.
    });
  }

  /** After an outage: a new holder id, and every open socket claimed again under it (past the cap: they are open). */
  private reclaim(): void {
    const old = this.holder;
    this.holder = this.holderId();
    // The old id stops counting now, not HOLDER_TTL_MS after its last beat: the open sockets are claimed again below.
    this.store.retire(old).catch(() => {
      // It stops counting at its TTL anyway.
    });
    const keys: string[] = [];
    for (const [key, n] of this.held()) for (let i = 0; i < n; i++) keys.push(key);
    this.beat();
    if (keys.length === 0) return;
    this.store.claim(this.holder, keys, Number.MAX_SAFE_INTEGER, Date.now()).then(
      () => this.log.info({ sockets: keys.length }, 'user socket counts claimed again after the redis outage'),
      (err: unknown) => this.log.warn({ err }, 'claiming user socket counts again failed'),
    );
  }

  /** `<startMs>.<base>.<epoch>`: the start time first, as the Redis store reads it. */
  private holderId(): string {
    return `${Date.now()}.${this.holderBase}.${this.epoch++}`;
  }
}
