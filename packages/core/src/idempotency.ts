/**
 * Remembers the first event id published under an idempotency key for
 * `ttlMs`. Every entry has the same TTL, so Map insertion order is expiry
 * order and a sweep only ever looks at expired entries plus one.
 * Keys are scoped by the caller (tenant first): see `idempotencyScope` (keys.ts).
 */
export class MemoryIdempotency {
  private readonly entries = new Map<string, { readonly id: string; readonly expires: number }>();

  constructor(private readonly ttlMs: number) {}

  get(key: string, now: number): string | undefined {
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (e.expires <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return e.id;
  }

  set(key: string, id: string, now: number): void {
    this.entries.delete(key);
    this.entries.set(key, { id, expires: now + this.ttlMs });
  }

  sweep(now: number): void {
    for (const [key, e] of this.entries) {
      if (e.expires > now) return;
      this.entries.delete(key);
    }
  }

  get size(): number {
    return this.entries.size;
  }
}
