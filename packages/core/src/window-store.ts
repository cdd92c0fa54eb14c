// Per-tenant and per-IP limits: sliding windows kept by a WindowStore (Redis
// across the cluster, or memory on one node), spent locally by each shard so
// that the per-frame path never waits on the store. See docs/architecture.md
// ("Tenant and IP limits") for the accuracy this buys.

/** Hits a shard spent locally on one key since it last settled. */
export interface WindowHit {
  readonly key: string;
  readonly hits: number;
  /**
   * Hits tried since the last settle, refused ones included (>= hits);
   * `hits` when absent. Only summed and reported back, never limited.
   */
  readonly demand?: number;
}

/** What the store knows about a key's window after adding a settle's hits. */
export interface WindowState {
  /** Estimated hits in the sliding window ending now, every shard and node, these hits included. */
  readonly count: number;
  /** 0 when the window has room; otherwise ms until it will. */
  readonly retryAfterMs: number;
  /**
   * Estimated demand in the same sliding window, every shard and node, this
   * settle's included: the sum of `demand` (or `hits` where absent). A shard
   * divides it by its own demand to learn its share of the key.
   */
  readonly demand: number;
}

/**
 * A store of sliding windows. `settle` adds each key's hits at `now` and
 * answers the window's state per key, in order. Implementations: memory
 * (one node) and Redis (Lua, keys hash-tagged for Cluster). A failing store
 * rejects; it never hangs.
 */
export interface WindowStore {
  settle(hits: readonly WindowHit[], limit: number, windowMs: number, now: number): Promise<readonly WindowState[]>;
}
