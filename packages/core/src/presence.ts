// Presence (PROTOCOL.md, additions of 2026-12): which users have a socket
// joined to a topic, across the node (and, in cluster mode, the cluster).
// Pure code: no I/O, no clock.
//
// Who holds what:
// - each source (a shard of this node, or another node in cluster mode)
//   says, per topic, how many of its sockets each user has joined: an
//   absolute count, 0 when none is left;
// - the topic's table (PresenceTable, at the topic's owner shard) sums the
//   sources and, once per WS_PRESENCE_DIFF_MS, says what changed since it
//   last said so (`flush`): that batch is what every subscribed shard
//   applies to its replica;
// - each shard with sockets on the topic keeps a replica (PresenceReplica):
//   the users and their counts as of the table's last flush. Applying a
//   flush to it yields the protocol's joins and leaves: a user joins with
//   its first socket and leaves with its last; a count that changes is not
//   a diff. So the frames a socket gets are bounded by the flushes, whatever
//   the churn, and a replica corrects itself from any flush it did not see.

/** One user's count in a flush: 0 means the user is gone. */
export type PresenceChange = readonly [user: string, connections: number];

/** A table's flush: the users whose count changed, or, with `full`, every user present (the replica is replaced). */
export interface PresenceFlush {
  readonly full: boolean;
  readonly changes: readonly PresenceChange[];
}

export class PresenceTable {
  /** Per source, user to its count there. */
  private readonly sources = new Map<string, Map<string, number>>();
  /** User to the sum over sources (only users above 0). */
  private readonly total = new Map<string, number>();
  /** What the replicas hold: the total as of the last flush. */
  private readonly flushed = new Map<string, number>();
  private readonly dirty = new Set<string>();
  /** The next flush sends everything: the table is new (an owner that restarted) and replicas must be replaced, not patched. */
  private fullNext = true;

  /** A user's sockets on the topic, summed over the sources. */
  count(user: string): number {
    return this.total.get(user) ?? 0;
  }

  /** Users present now (count > 0 somewhere). */
  get size(): number {
    return this.total.size;
  }

  /** Whether nothing is held and nothing waits to be flushed: the table can be dropped. */
  get empty(): boolean {
    return this.total.size === 0 && this.flushed.size === 0 && this.dirty.size === 0;
  }

  /** A source's absolute count of `user`'s sockets (0: none left there). */
  set(source: string, user: string, connections: number): void {
    // A count from outside (a peer, Redis) that is not a whole number of sockets is nobody's.
    if (!(connections >= 0) || !Number.isSafeInteger(connections)) connections = 0;
    let counts = this.sources.get(source);
    const before = counts?.get(user) ?? 0;
    if (before === connections) return;
    if (connections > 0) {
      if (counts === undefined) this.sources.set(source, (counts = new Map()));
      counts.set(user, connections);
    } else if (counts !== undefined) {
      counts.delete(user);
      if (counts.size === 0) this.sources.delete(source);
    }
    const sum = (this.total.get(user) ?? 0) - before + connections;
    if (sum > 0) this.total.set(user, sum);
    else this.total.delete(user);
    this.dirty.add(user);
  }

  /** Replaces everything a source holds (a source that says its whole state again, after its table was lost). */
  replace(source: string, counts: ReadonlyMap<string, number>): void {
    const held = this.sources.get(source);
    if (held !== undefined) for (const user of [...held.keys()]) if (!counts.has(user)) this.set(source, user, 0);
    for (const [user, n] of counts) this.set(source, user, n);
  }

  /** A source gone (its shard died, its node's lease ended): its users' sockets no longer count. */
  drop(source: string): void {
    const held = this.sources.get(source);
    if (held === undefined) return;
    for (const user of [...held.keys()]) this.set(source, user, 0);
  }

  /** The sources that hold something. */
  sourceIds(): IterableIterator<string> {
    return this.sources.keys();
  }

  /** Per user, the sum over the sources `which` picks (those above 0 only). */
  sum(which: (source: string) => boolean): Map<string, number> {
    const out = new Map<string, number>();
    for (const [src, counts] of this.sources) {
      if (!which(src)) continue;
      for (const [u, n] of counts) out.set(u, (out.get(u) ?? 0) + n);
    }
    return out;
  }

  /** What one source holds. */
  countsOf(source: string): ReadonlyMap<string, number> {
    return this.sources.get(source) ?? new Map();
  }

  /** What changed since the last flush (undefined when nothing did), and the replicas' state moves on to it. */
  flush(): PresenceFlush | undefined {
    if (this.fullNext) {
      this.fullNext = false;
      this.dirty.clear();
      this.flushed.clear();
      for (const [u, n] of this.total) this.flushed.set(u, n);
      return { full: true, changes: [...this.total] };
    }
    if (this.dirty.size === 0) return undefined;
    const changes: PresenceChange[] = [];
    for (const user of this.dirty) {
      const now = this.total.get(user) ?? 0;
      const was = this.flushed.get(user) ?? 0;
      if (now === was) continue;
      changes.push([user, now]);
      if (now > 0) this.flushed.set(user, now);
      else this.flushed.delete(user);
    }
    this.dirty.clear();
    return changes.length === 0 ? undefined : { full: false, changes };
  }

  /** The replicas' state (as of the last flush): what a shard that subscribes now starts from. */
  snapshot(): ReadonlyMap<string, number> {
    return this.flushed;
  }

  /** The state now, flushed or not: what an admin read answers. */
  current(): ReadonlyMap<string, number> {
    return this.total;
  }
}

/** The protocol's joins and leaves that one flush made of a replica; both empty when no user came or went. */
export interface PresenceDiff {
  readonly joins: Map<string, number>;
  readonly leaves: string[];
}

/** A shard's copy of a topic's presence as of the table's last flush. */
export class PresenceReplica {
  readonly users = new Map<string, number>();

  /** Applies a flush; answers the joins and leaves it makes. */
  apply(f: PresenceFlush): PresenceDiff {
    const joins = new Map<string, number>();
    const leaves: string[] = [];
    if (f.full) {
      const next = new Map(f.changes);
      for (const user of this.users.keys()) if (!next.has(user)) leaves.push(user);
      for (const [user, n] of next) if (!this.users.has(user)) joins.set(user, n);
      this.users.clear();
      for (const [user, n] of next) if (n > 0) this.users.set(user, n);
      return { joins, leaves };
    }
    for (const [user, n] of f.changes) {
      const was = this.users.has(user);
      if (n > 0) {
        this.users.set(user, n);
        if (!was) joins.set(user, n);
      } else if (was) {
        this.users.delete(user);
        leaves.push(user);
      }
    }
    return { joins, leaves };
  }
}

/**
 * The presence `data` of the protocol: `{"users":{"u1":{"connections":2}},"count":1}`,
 * at most `max` users listed, `"truncated":true` when the list is cut.
 * `extra` is one more user to show (a socket's own, not flushed yet), when
 * it is not in `users`.
 */
export function encodePresenceData(users: ReadonlyMap<string, number>, max: number, extra?: PresenceChange): string {
  let s = '{"users":{';
  let listed = 0;
  let count = users.size;
  if (extra !== undefined && !users.has(extra[0])) {
    count++;
    s += `${JSON.stringify(extra[0])}:{"connections":${extra[1]}}`;
    listed++;
  }
  for (const [user, n] of users) {
    if (listed >= max) break;
    s += `${listed === 0 ? '' : ','}${JSON.stringify(user)}:{"connections":${n}}`;
    listed++;
  }
  s += `},"count":${count}`;
  return listed < count ? `${s},"truncated":true}` : `${s}}`;
}

/** `presence_state` for a topic (its client-visible name), with the data of encodePresenceData. */
export function encodePresenceState(topic: string, dataJson: string): string {
  return `{"type":"presence_state","topic":"${topic}",${dataJson.slice(1)}`;
}

/** `presence_diff`: joins with their counts, leaves as `{}`. */
export function encodePresenceDiff(topic: string, d: PresenceDiff): string {
  let s = `{"type":"presence_diff","topic":"${topic}","joins":{`;
  let first = true;
  for (const [user, n] of d.joins) {
    s += `${first ? '' : ','}${JSON.stringify(user)}:{"connections":${n}}`;
    first = false;
  }
  s += '},"leaves":{';
  first = true;
  for (const user of d.leaves) {
    s += `${first ? '' : ','}${JSON.stringify(user)}:{}`;
    first = false;
  }
  return `${s}}}`;
}
