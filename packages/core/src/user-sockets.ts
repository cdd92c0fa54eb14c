// WS_MAX_USER_SOCKETS: a user's open sockets, counted cluster-wide. Each
// shard generation is a *holder*: it claims one socket per upgrade of a user
// and releases it at the close, in batches (one store call per key per turn
// of the event loop, never per frame). A holder that stops saying it is alive
// (a crashed shard, a dead node) stops counting after `holderTtlMs`, so that
// its sockets do not hold the user's cap forever. Two stores keep the same
// contract: memory (one node, in the coordinator) and Redis (the cluster).

/** How often a holder says it is alive, and how long after its last word it still counts. */
export const HOLDER_BEAT_MS = 2000;
export const HOLDER_TTL_MS = 10_000;

export interface UserSocketStore {
  /**
   * Claims one socket per entry of `keys` (a key may repeat) for `holder` at
   * `now`, and answers, in order, whether each fits: a claim fits while the
   * user's sockets over every live holder, this one's included, stay at most
   * `max`. A refused claim is not counted. A claim is a sign of life.
   */
  claim(holder: string, keys: readonly string[], max: number, now: number): Promise<boolean[]>;
  /** Gives back sockets `holder` claimed: `counts` per key. */
  release(holder: string, counts: ReadonlyMap<string, number>, now: number): Promise<void>;
  /** `holder` is alive at `now`. */
  beat(holder: string, now: number): Promise<void>;
  /** `holder` is gone: its sockets stop counting at once. */
  retire(holder: string): Promise<void>;
  /** The user's sockets over every live holder at `now` (the contract tests read it; the gateway does not). */
  count(key: string, now: number): Promise<number>;
}

/** The user-socket store of one node: exact across its shards, held by the coordinator. */
export class MemoryUserSockets implements UserSocketStore {
  private readonly byKey = new Map<string, Map<string, number>>();
  private readonly seen = new Map<string, number>();

  constructor(private readonly holderTtlMs = HOLDER_TTL_MS) {}

  claim(holder: string, keys: readonly string[], max: number, now: number): Promise<boolean[]> {
    return Promise.resolve(this.claimNow(holder, keys, max, now));
  }

  claimNow(holder: string, keys: readonly string[], max: number, now: number): boolean[] {
    this.seen.set(holder, now);
    return keys.map((key) => {
      const held = this.byKey.get(key) ?? new Map<string, number>();
      if (this.live(held, now) + 1 > max) return false;
      held.set(holder, (held.get(holder) ?? 0) + 1);
      this.byKey.set(key, held);
      return true;
    });
  }

  release(holder: string, counts: ReadonlyMap<string, number>, now: number): Promise<void> {
    this.releaseNow(holder, counts, now);
    return Promise.resolve();
  }

  releaseNow(holder: string, counts: ReadonlyMap<string, number>, now: number): void {
    this.seen.set(holder, now);
    for (const [key, n] of counts) {
      const held = this.byKey.get(key);
      if (held === undefined) continue;
      const left = (held.get(holder) ?? 0) - n;
      if (left > 0) held.set(holder, left);
      else held.delete(holder);
      if (held.size === 0) this.byKey.delete(key);
    }
  }

  beat(holder: string, now: number): Promise<void> {
    this.seen.set(holder, now);
    return Promise.resolve();
  }

  count(key: string, now: number): Promise<number> {
    const held = this.byKey.get(key);
    return Promise.resolve(held === undefined ? 0 : this.live(held, now));
  }

  retire(holder: string): Promise<void> {
    this.drop(holder);
    return Promise.resolve();
  }

  /** Forgets a holder at once (a shard the coordinator saw end). */
  drop(holder: string): void {
    this.seen.delete(holder);
    for (const [key, held] of this.byKey) {
      held.delete(holder);
      if (held.size === 0) this.byKey.delete(key);
    }
  }

  /** The sockets of the live holders; a dead holder's entry is forgotten on the way. */
  private live(held: Map<string, number>, now: number): number {
    let n = 0;
    for (const [holder, c] of held) {
      const at = this.seen.get(holder);
      if (at !== undefined && now - at <= this.holderTtlMs) n += c;
      else held.delete(holder);
    }
    return n;
  }
}
