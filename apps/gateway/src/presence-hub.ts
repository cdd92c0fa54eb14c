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

export function keepsPresence(rights: Rights | null, topic: string): boolean {
  return rights !== null && allows(rights, topic);
}

interface HubTopic {
  readonly table: PresenceTable;
  readonly subscribers: Set<number>;
}

export class PresenceHub {
  private readonly topics = new Map<string, HubTopic>();
  private readonly dirty = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  /** Flushes sent to subscribers (one per topic per subscriber shard). */
  flushesSent = 0;
  /** Called after a table changed, with the topic: the cluster link writes this node's own counts to Redis. */
  onLocalChange: ((topic: string) => void) | undefined;

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
      t = { table: new PresenceTable(), subscribers: new Set() };
      this.topics.set(key, t);
      // A new table's first flush is a full one: replicas left from an owner that restarted are replaced.
      this.dirty.add(key);
    }
    return t;
  }

  /** A source's absolute count of a user's sockets on the topic. */
  set(source: string, key: string, user: string, n: number): void {
    if (n === 0 && !this.topics.has(key)) return;
    this.topic(key).table.set(source, user, n);
    this.dirty.add(key);
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
      const before = t.table.size;
      t.table.drop(source);
      if (t.table.size !== before) this.dirty.add(key);
    }
  }

  /** A shard subscribes: it gets its starting replica now, in order before the subscribe's answer. */
  subscribe(shard: number, key: string): void {
    const t = this.topic(key);
    t.subscribers.add(shard);
    this.sink.flush(shard, key, true, { full: true, changes: [...t.table.snapshot()] });
  }

  unsubscribe(shard: number, key: string): void {
    const t = this.topics.get(key);
    if (t === undefined) return;
    t.subscribers.delete(shard);
    this.forgetIfIdle(key, t);
  }

  /** A shard gone: it no longer subscribes, and its sockets no longer count. */
  shardGone(shard: number): void {
    this.drop(`s${shard}`);
    for (const [key, t] of this.topics) {
      t.subscribers.delete(shard);
      this.forgetIfIdle(key, t);
    }
  }

  /** The state now (flushed or not), or undefined for a topic nobody is present on. */
  current(key: string): ReadonlyMap<string, number> | undefined {
    return this.topics.get(key)?.table.current();
  }

  /** The table, for the cluster link (this node's counts as one source). */
  table(key: string): PresenceTable | undefined {
    return this.topics.get(key)?.table;
  }

  /** Topic keys with a table. */
  keys(): IterableIterator<string> {
    return this.topics.keys();
  }

  /** Sends every dirty table's flush to its subscribers. */
  flushAll(): void {
    for (const key of this.dirty) {
      const t = this.topics.get(key);
      if (t === undefined) continue;
      const f = t.table.flush();
      if (f !== undefined) {
        for (const shard of t.subscribers) {
          this.flushesSent++;
          this.sink.flush(shard, key, false, f);
        }
      }
      if (t.subscribers.size === 0 && t.table.empty) this.topics.delete(key);
    }
    this.dirty.clear();
  }

  private forgetIfIdle(key: string, t: HubTopic): void {
    if (t.subscribers.size === 0 && t.table.empty && !this.dirty.has(key)) this.topics.delete(key);
  }
}
