/**
 * A shard's open sockets by a key: by user (`userKey`), what the admin
 * actions that name a user (revoke, disconnect, subscribe, unsubscribe) act
 * on without a scan, and by token id (`tokenKey`), what a revocation by
 * `jti` closes. Most users (and every token) hold one socket, so an entry is
 * the socket itself until a second one comes.
 */
export class UserIndex<S> {
  private readonly byUser = new Map<string, S | Set<S>>();

  /** Users with at least one open socket here. */
  get size(): number {
    return this.byUser.size;
  }

  add(key: string, s: S): void {
    const held = this.byUser.get(key);
    if (held === undefined) this.byUser.set(key, s);
    else if (held instanceof Set) held.add(s);
    else if (held !== s) this.byUser.set(key, new Set([held, s]));
  }

  delete(key: string, s: S): void {
    const held = this.byUser.get(key);
    if (held === s) this.byUser.delete(key);
    else if (held instanceof Set) {
      held.delete(s);
      if (held.size === 1) this.byUser.set(key, held.values().next().value!);
    }
  }

  /** How many sockets the user holds here. */
  count(key: string): number {
    const held = this.byUser.get(key);
    return held === undefined ? 0 : held instanceof Set ? held.size : 1;
  }

  /** The user's sockets, copied: the caller may close them while it walks the list. */
  of(key: string): S[] {
    const held = this.byUser.get(key);
    return held === undefined ? [] : held instanceof Set ? [...held] : [held];
  }
}
