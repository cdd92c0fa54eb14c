/**
 * The presence tables of the presence topics a shard owns (it owns them as
 * it owns their events: `ownerOf(topic key)`). Every shard of the node tells
 * the owner its count of each user's sockets on the topic (`set`, source
 * `s<shard>`); the shards subscribed to the topic get the table's flushes,
 * at most one per topic per WS_PRESENCE_DIFF_MS, and a starting replica
 * when they subscribe. In cluster mode the other nodes are sources too (see
 * presence-redis.ts).
 */
import { compileRights, allows, type Config, PresenceTable, type PresenceFlush, type Rights } from '@sluice/core';

export interface PresenceSink {
  /** Sends a subscriber shard its starting replica (`snapshot`) or a flush. */
  flush(shard: number, topic: string, snapshot: boolean, f: PresenceFlush): void;
}

/** The client-visible topic of a topic key (`tenant/topic`: a tenant never holds a `/`). */
export function clientTopic(key: string): string {
  return key.slice(key.indexOf('/') + 1);
}

/** Whether a topic keeps presence: WS_PRESENCE_TOPICS, compiled once. Null when no topic does. */
export function presencePatterns(cfg: Pick<Config, 'presenceTopics'>): Rights | null {
  return cfg.presenceTopics === undefined ? null : compileRights(cfg.presenceTopics.split(','));
}

/** The sources that are this node's shards (`s<n>`); the other nodes are `n:<id>`. */
export const isShard = (source: string): boolean => source.startsWith('s');

export function keepsPresence(rights: Rights | null, topic: string): boolean {
  return rights !== null && allows(rights, topic);
}

interface HubTopic {
  readonly table: PresenceTable;
  readonly subscribers: Set<number>;
  /** Cluster mode: the other nodes' entries are read (or could not be); subscribers that came before wait. */
  loaded: boolean;
  waiting: { readonly shard: number; readonly done: () => void }[];
}

/** What the hub needs from the cluster (presence-redis.ts); null in embedded mode. */
export interface PresenceClusterLink {
  changed(key: string, user: string): void;
  writeAll(): void;
  watch(key: string, loaded: () => void): void;
  unwatch(key: string): void;
  /** Every other node's counts on a topic, read from Redis (a topic this node does not watch). */
  readAll(key: string): Promise<Map<string, number>>;
}

export class PresenceHub {
  private readonly topics = new Map<string, HubTopic>();
  private readonly dirty = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  /** Flushes sent to subscribers (one per topic per subscriber shard). */
  flushesSent = 0;
  /** Cluster mode: this node's counts go to Redis, the other nodes' come from it. */
  cluster: PresenceClusterLink | null = null;

  constructor(private readonly diffMs: number, private readonly sink: PresenceSink) {}

  start(): void {
    this.timer = setInterval(() => this.flushAll(), this.diffMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
  }

  /** Users present in every topic this shard owns, summed (a user on two topics counts twice). */
  get members(): number {
    let n = 0;
    for (const t of this.topics.values()) n += t.table.size;
    return n;
  }

  private topic(key: string): HubTopic {
    let t = this.topics.get(key);
    if (t === undefined) {
      t = { table: new PresenceTable(), subscribers: new Set(), loaded: this.cluster === null, waiting: [] };
      this.topics.set(key, t);
      // A new table's first flush is a full one: replicas left from an owner that restarted are replaced.
      this.dirty.add(key);
    }
    return t;
  }

  /** WS_WEBHOOK_URL: a user's first socket on a topic came (or its last went), by a change of this node's shards or a node's end. */
  onPresence: ((key: string, user: string, joined: boolean) => void) | null = null;

  /** A source's absolute count of a user's sockets on the topic. */
  set(source: string, key: string, user: string, n: number): void {
    if (n === 0 && !this.topics.has(key)) return;
    const table = this.topic(key).table;
    const before = this.onPresence === null ? 0 : table.count(user);
    table.set(source, user, n);
    // Only this node's own changes are reported: every node holds the whole table, and would report the others' too.
    if (this.onPresence !== null && isShard(source) && (before === 0) !== (table.count(user) === 0)) this.onPresence(key, user, before === 0);
    this.dirty.add(key);
    if (this.cluster !== null && isShard(source)) this.cluster.changed(key, user);
  }

  /** Everything a source holds on a topic, said again (another node's entries, read from Redis). */
  replace(source: string, key: string, counts: ReadonlyMap<string, number>): void {
    if (counts.size === 0 && !this.topics.has(key)) return;
    this.topic(key).table.replace(source, counts);
    this.dirty.add(key);
  }

  /** A source gone: a shard that died, a node whose lease ended. */
  drop(source: string): void {
    for (const [key, t] of this.topics) {
      if (this.cluster !== null && isShard(source)) for (const user of t.table.countsOf(source).keys()) this.cluster.changed(key, user);
      const before = t.table.size;
      const gone = this.onPresence === null ? [] : [...t.table.countsOf(source).keys()];
      t.table.drop(source);
      for (const user of gone) if (t.table.count(user) === 0) this.onPresence!(key, user, false);
      if (t.table.size !== before) this.dirty.add(key);
    }
  }

  /**
   * A shard subscribes: it gets its starting replica, then `done` runs (the
   * subscribe's answer goes after the replica). In cluster mode the first
   * subscriber of a topic waits until the other nodes' entries are read, so
   * that a new socket's presence_state lists the cluster's users.
   */
  subscribe(shard: number, key: string, done: () => void): void {
    const t = this.topic(key);
    t.subscribers.add(shard);
    if (t.loaded) {
      this.sink.flush(shard, key, true, { full: true, changes: [...t.table.snapshot()] });
      done();
      return;
    }
    t.waiting.push({ shard, done });
    if (t.waiting.length > 1) return;
    this.cluster!.watch(key, () => {
      t.loaded = true;
      // What the read brought in is flushed now, so the replicas the waiting subscribers get hold it.
      this.flushTopic(key, t);
      const waiting = t.waiting;
      t.waiting = [];
      for (const w of waiting) {
        // A shard that unsubscribed meanwhile gets its answer but no replica: nothing would keep one up to date.
        if (t.subscribers.has(w.shard)) this.sink.flush(w.shard, key, true, { full: true, changes: [...t.table.snapshot()] });
        w.done();
      }
      if (t.subscribers.size === 0) this.unwatch(key, t);
    });
  }

  unsubscribe(shard: number, key: string): void {
    const t = this.topics.get(key);
    if (t === undefined) return;
    t.subscribers.delete(shard);
    if (t.subscribers.size === 0) this.unwatch(key, t);
    this.forgetIfIdle(key, t);
  }

  /** A shard gone: it no longer subscribes, and its sockets no longer count. */
  shardGone(shard: number): void {
    this.drop(`s${shard}`);
    for (const [key, t] of this.topics) {
      if (!t.subscribers.delete(shard)) continue;
      if (t.subscribers.size === 0) this.unwatch(key, t);
      this.forgetIfIdle(key, t);
    }
  }

  /**
   * The state now, for an admin read or a socket not joined to the topic.
   * In cluster mode a topic this node does not watch is read from Redis.
   */
  async read(key: string): Promise<ReadonlyMap<string, number>> {
    const t = this.topics.get(key);
    if (this.cluster === null || (t !== undefined && t.loaded && t.subscribers.size > 0)) return t?.table.current() ?? new Map();
    const users = await this.cluster.readAll(key);
    if (t !== undefined) for (const [u, n] of t.table.sum(isShard)) users.set(u, (users.get(u) ?? 0) + n);
    return users;
  }

  /** The table, for the cluster link (this node's counts as one source). */
  table(key: string): PresenceTable | undefined {
    return this.topics.get(key)?.table;
  }

  /** Sends every dirty table's flush to its subscribers. */
  flushAll(): void {
    this.cluster?.writeAll();
    for (const key of [...this.dirty]) {
      const t = this.topics.get(key);
      // A topic whose first read is on its way keeps its changes for the flush that read ends with.
      if (t !== undefined && !t.loaded && t.waiting.length > 0) continue;
      this.dirty.delete(key);
      if (t === undefined) continue;
      this.flushTopic(key, t);
      if (t.subscribers.size === 0 && t.table.empty) this.topics.delete(key);
    }
  }

  private flushTopic(key: string, t: HubTopic): void {
    const f = t.table.flush();
    if (f === undefined) return;
    for (const shard of t.subscribers) {
      this.flushesSent++;
      this.sink.flush(shard, key, false, f);
    }
  }

  /** No subscriber left: the other nodes' entries are no longer followed, and a later subscriber reads them again. */
  private unwatch(key: string, t: HubTopic): void {
    if (this.cluster === null || !t.loaded) return;
    this.cluster.unwatch(key);
    t.loaded = false;
  }

  private forgetIfIdle(key: string, t: HubTopic): void {
    if (t.subscribers.size === 0 && t.table.empty && !this.dirty.has(key)) this.topics.delete(key);
  }
}
