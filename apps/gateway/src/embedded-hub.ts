import {
  type Delivery, type HistoryRead, idempotencyScope, MemoryHistory, MemoryIdempotency, type PublishRequest,
  type PublishResult, topicKey,
} from '@sluice/core';
import { encodeEvent, EventClass, parseEventId } from '@sluice/protocol';
import type { ToShard } from './messages.ts';

export interface HubLink {
  send(m: ToShard): void;
}

export interface HubStats {
  published: { durable: number; keyed: number; ephemeral: number };
  duplicates: number;
}

/**
 * The embedded (no Redis) broker of one node, living on the coordinator
 * thread. It is the node's sequencer: every publish of every shard passes
 * through it, so one topic has one order, and storing, deduplicating and
 * routing an event happen in one synchronous step. Shards subscribe per
 * topic; an event goes only to shards that have a subscriber.
 */
export class EmbeddedHub {
  private readonly log: MemoryHistory;
  private readonly idempotency: MemoryIdempotency;
  private readonly links = new Map<number, HubLink>();
  private readonly subscribers = new Map<string, Set<number>>();
  readonly stats: HubStats = { published: { durable: 0, keyed: 0, ephemeral: 0 }, duplicates: 0 };

  constructor(
    opts: { historySize: number; historyTtlMs: number; idempotencyTtlMs: number },
    private readonly now: () => number = Date.now,
  ) {
    this.log = new MemoryHistory(opts.historySize, opts.historyTtlMs, undefined, now());
    this.idempotency = new MemoryIdempotency(opts.idempotencyTtlMs);
  }

  attach(shard: number, link: HubLink): void {
    this.links.set(shard, link);
  }

  /** Forgets a shard that stopped or crashed, with all its subscriptions. */
  detach(shard: number): void {
    this.links.delete(shard);
    for (const [topic, set] of this.subscribers) {
      set.delete(shard);
      if (set.size === 0) this.subscribers.delete(topic);
    }
  }

  subscribe(shard: number, topic: string): void {
    let set = this.subscribers.get(topic);
    if (set === undefined) this.subscribers.set(topic, (set = new Set()));
    set.add(shard);
  }

  unsubscribe(shard: number, topic: string): void {
    const set = this.subscribers.get(topic);
    if (set === undefined) return;
    set.delete(shard);
    if (set.size === 0) this.subscribers.delete(topic);
  }

  publish(req: PublishRequest): PublishResult {
    const key = topicKey(req.tenant, req.topic);
    const now = this.now();
    let id: string | undefined;
    let frame: string;
    if (req.cls === EventClass.Durable) {
      const scope = req.idempotencyKey === undefined ? undefined : idempotencyScope(req.tenant, req.idempotencyKey);
      if (scope !== undefined) {
        const first = this.idempotency.get(scope, now);
        if (first !== undefined) {
          this.stats.duplicates++;
          return { ok: true, id: first, duplicate: true };
        }
      }
      let encoded = '';
      id = this.log.append(key, now, (newId) => (encoded = encodeEvent({ ...req, id: newId })));
      frame = encoded;
      if (scope !== undefined) this.idempotency.set(scope, id, now);
      this.stats.published.durable++;
    } else {
      frame = encodeEvent({ ...req, id: undefined });
      if (req.cls === EventClass.Keyed) this.stats.published.keyed++;
      else this.stats.published.ephemeral++;
    }
    const set = this.subscribers.get(key);
    if (set !== undefined) {
      const d: Delivery = { topic: key, frame, id, cls: req.cls, key: req.key };
      for (const shard of set) this.links.get(shard)?.send({ op: 'ev', d });
    }
    return { ok: true, id, duplicate: false };
  }

  history(topic: string, since: string): HistoryRead {
    const s = parseEventId(since);
    if (s === undefined) return { events: [], recovered: false };
    return this.log.read(topic, s, this.now());
  }

  /** Trims expired history and idempotency records a little at a time. */
  sweep(): void {
    const now = this.now();
    this.log.sweep(now, 1000);
    this.idempotency.sweep(now);
  }

  get topicCount(): number {
    return this.log.topicCount;
  }
}
