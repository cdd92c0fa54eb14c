import {
  type Delivery, type HistoryRead, MapPass, MemoryHistory, type PublishFields, type PublishResult, topicKey,
} from '@sluice/core';
import { encodeEventFrame, EventClass, parseEventId, POSITION_TAIL, positionFrameHead } from '@sluice/protocol';
import { clientTopic } from './presence-hub.ts';

/** Topics looked at per sweep (each second) for a due position mark. */
const MARK_BUDGET = 1000;

/** Where the hub sends the events of a shard's subscriptions. */
export interface HubLink {
  deliver(ev: Delivery): void;
}

export interface HubStats {
  published: { durable: number; keyed: number; ephemeral: number };
}

/**
 * The embedded (no Redis) broker for the topics one shard owns (see
 * `ownerOf`). The owner is the topic's sequencer: every publish to the topic,
 * from any shard, passes through it, so a topic has one order, and storing,
 * deduplicating and routing an event happen in one synchronous step. Shards
 * subscribe per topic; an event goes only to shards that have a subscriber.
 * Idempotency is not the hub's: the MeshBroker checks a key at the key's
 * owner before the publish reaches the topic's owner.
 */
export class TopicOwner {
  private readonly log: MemoryHistory;
  private readonly links = new Map<number, HubLink>();
  private readonly subscribers = new Map<string, Set<number>>();
  readonly stats: HubStats = { published: { durable: 0, keyed: 0, ephemeral: 0 } };
  /** WS_WEBHOOK_URL: the node's first subscribing shard of a topic came (true), or its last went (false). */
  onOccupancy: ((topic: string, occupied: boolean) => void) | null = null;

  /** WS_POSITION_REFRESH_MS (0: no marks, as in cluster mode, where Redis positions the topics). */
  private readonly refreshMs: number;
  /** The marking pass over `subscribers`, MARK_BUDGET topics a sweep. */
  private readonly markPass = new MapPass(this.subscribers);
  /** Position marks sent (one per topic, to every subscribed shard). */
  marks = 0;

  constructor(
    opts: { historySize: number; historyTtlMs: number; positionRefreshMs: number },
    private readonly now: () => number = Date.now,
  ) {
    this.log = new MemoryHistory(opts.historySize, opts.historyTtlMs, undefined, now());
    this.refreshMs = opts.positionRefreshMs;
  }

  attach(shard: number, link: HubLink): void {
    this.links.set(shard, link);
  }

  /** Forgets a shard that stopped or crashed, with all its subscriptions. */
  detach(shard: number): void {
    this.links.delete(shard);
    for (const [topic, set] of this.subscribers) {
      set.delete(shard);
      if (set.size === 0) {
        this.subscribers.delete(topic);
        this.onOccupancy?.(topic, false);
      }
    }
  }

  /** Returns the topic's position: every durable event published from now on has a higher id and reaches `shard`. */
  subscribe(shard: number, topic: string): string {
    let set = this.subscribers.get(topic);
    if (set === undefined) {
      this.subscribers.set(topic, (set = new Set()));
      this.onOccupancy?.(topic, true);
    }
    set.add(shard);
    return this.log.position(topic, this.now());
  }

  unsubscribe(shard: number, topic: string): void {
    const set = this.subscribers.get(topic);
    if (set === undefined) return;
    set.delete(shard);
    if (set.size === 0) {
      this.subscribers.delete(topic);
      this.onOccupancy?.(topic, false);
    }
  }

  /** `key`: `topicKey(tenant, req.topic)`, when the caller has it. */
  publish(tenant: string, req: PublishFields, key: string = topicKey(tenant, req.topic)): PublishResult {
    const now = this.now();
    let id: string | undefined;
    let frame: string;
    if (req.cls === EventClass.Durable) {
      const stored = this.log.append(key, now, encodeEventFrame, req);
      id = stored.id;
      frame = stored.frame;
      this.stats.published.durable++;
    } else {
      frame = encodeEventFrame(req, undefined);
      if (req.cls === EventClass.Keyed) this.stats.published.keyed++;
      else this.stats.published.ephemeral++;
    }
    const set = this.subscribers.get(key);
    if (set !== undefined) {
      const ev: Delivery = { topic: key, frame, id, cls: req.cls, key: req.key, at: now };
      for (const shard of set) this.links.get(shard)?.deliver(ev);
    }
    return { ok: true, id, duplicate: false };
  }

  history(topic: string, since: string | undefined, limit?: number): HistoryRead {
    const s = since === undefined ? undefined : parseEventId(since);
    if (since !== undefined && s === undefined) return { events: [], recovered: false };
    return this.log.read(topic, s, this.now(), limit);
  }

  /** Trims expired history a little at a time, and sends the position marks that are due. */
  sweep(now: number = this.now()): void {
    this.log.sweep(now, 1000);
    if (this.refreshMs > 0) this.markQuiet(now);
  }

  /**
   * WS_POSITION_REFRESH_MS: a subscribed topic whose newest id (event or
   * mark) is older than that gets a mark, a `position` frame at now, sent
   * to its subscribed shards down the path its events take, so after every
   * event at or below it. It carries the position as its id: the shards'
   * splices and join positions take it as a durable id, and a congested
   * socket's mailbox may drop it as ephemeral (the client keeps its older
   * position). A pass over the topics takes MARK_BUDGET a sweep.
   */
  private markQuiet(now: number): void {
    const due = now - this.refreshMs;
    this.markPass.next(MARK_BUDGET, (topic, shards) => {
      if (this.log.lastAt(topic) >= due) return;
      const position = this.log.mark(topic, now);
      const ev: Delivery = {
        topic, frame: positionFrameHead(clientTopic(topic)) + position + POSITION_TAIL, id: position, cls: EventClass.Ephemeral, key: undefined, at: 0,
      };
      this.marks++;
      for (const shard of shards) this.links.get(shard)?.deliver(ev);
    });
  }

  get topicCount(): number {
    return this.log.topicCount;
  }
}
