/**
 * A shard's open sockets by a key: by user (`userKey`), what the admin
 * actions that name a user (revoke, disconnect, subscribe, unsubscribe) act
 * on without a scan, and by token id (`tokenKey`), what a revocation by
 * `jti` closes. Most users (and every token) hold one socket, so an entry is
 * the socket itself until a second one comes.
 */
export class SocketIndex<S> {
  private readonly byKey = new Map<string, S | Set<S>>();

  /** Keys (users, tokens) with at least one open socket here. */
  get size(): number {
    return this.byKey.size;
  }

  add(key: string, s: S): void {
    const held = this.byKey.get(key);
    if (held === undefined) this.byKey.set(key, s);
    else if (held instanceof Set) held.add(s);
    else if (held !== s) this.byKey.set(key, new Set([held, s]));
  }

  delete(key: string, s: S): void {
    const held = this.byKey.get(key);
    if (held === s) this.byKey.delete(key);
    else if (held instanceof Set) {
      held.delete(s);
      if (held.size === 1) this.byKey.set(key, held.values().next().value!);
    }
  }

  /** How many sockets the key has here. */
  count(key: string): number {
    const held = this.byKey.get(key);
    return held === undefined ? 0 : held instanceof Set ? held.size : 1;
  }

  /** The key's sockets, copied: the caller may close them while it walks the list. */
  of(key: string): S[] {
    const held = this.byKey.get(key);
    return held === undefined ? [] : held instanceof Set ? [...held] : [held];
  }
}
