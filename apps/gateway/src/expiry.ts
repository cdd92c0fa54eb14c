/**
 * Closes sockets at their token's `exp`. JWT `exp` is in whole seconds, so
 * sockets fall into one bucket per second with one timer each: a million
 * sockets whose tokens expire over an hour cost 3600 timers, and each socket
 * is closed within milliseconds of its `exp`, not on a coarse sweep.
 */

/** setTimeout cannot wait longer than this; a later bucket re-arms when it fires. */
const MAX_DELAY_MS = 0x7fffffff;

interface Bucket<T> {
  readonly items: Set<T>;
  timer: NodeJS.Timeout;
}

export class ExpiryTimers<T> {
  private readonly buckets = new Map<number, Bucket<T>>();

  constructor(private readonly expire: (item: T) => void) {}

  /** Calls `expire(item)` at `atMs` (ms since the epoch, a whole second for a JWT). */
  add(item: T, atMs: number): void {
    let b = this.buckets.get(atMs);
    if (b === undefined) {
      b = { items: new Set(), timer: this.arm(atMs) };
      this.buckets.set(atMs, b);
    }
    b.items.add(item);
  }

  delete(item: T, atMs: number): void {
    const b = this.buckets.get(atMs);
    if (b === undefined || !b.items.delete(item) || b.items.size > 0) return;
    clearTimeout(b.timer);
    this.buckets.delete(atMs);
  }

  clear(): void {
    for (const b of this.buckets.values()) clearTimeout(b.timer);
    this.buckets.clear();
  }

  private arm(atMs: number): NodeJS.Timeout {
    const t = setTimeout(() => this.fire(atMs), Math.min(MAX_DELAY_MS, Math.max(0, atMs - Date.now())));
    t.unref();
    return t;
  }

  private fire(atMs: number): void {
    const b = this.buckets.get(atMs);
    if (b === undefined) return;
    if (Date.now() < atMs) {
      b.timer = this.arm(atMs);
      return;
    }
    this.buckets.delete(atMs);
    for (const item of b.items) this.expire(item);
  }
}
