/**
 * The topics some socket of this shard has joined: one record per topic,
 * made at the first join and dropped at the last leave, holding the shard's
 * single broker subscription and everything kept per topic.
 */
import type { Broker } from '@sluice/core';
import { compareEventIdStrings } from '@sluice/protocol';
import type { ThrottledLine } from './context.ts';

export interface TopicRecord<R> {
  /** Sockets of this shard joined to the topic, or joining it. */
  count: number;
  /** The broker subscription is up: live events flow. */
  ready: boolean;
  /** Joins waiting for the subscription to come up (or fail). */
  waiters: ((ok: boolean) => void)[];
  /**
   * The newest durable id (or position mark, WS_POSITION_REFRESH_MS) this
   * shard delivered live. Kept as the id string (a topic's deliveries come
   * in id order, so the last is the newest): nothing is parsed or allocated
   * per delivery.
   */
  lastLive: string | undefined;
  /**
   * What the subscription answered (Broker.subscribe): every durable event
   * above it reaches this shard. With `lastLive`, the position a join's
   * reply hands out (see `positionOf`).
   */
  position: string | undefined;
  /** Joins with `since` whose replay is not spliced onto live delivery yet; null when none. */
  recoveries: Set<R> | null;
}

export class Topics<R> {
  private readonly records = new Map<string, TopicRecord<R>>();

  /** Called when a topic's record is dropped (its last socket left). */
  onDropped: (key: string) => void = () => {};

  constructor(private readonly broker: Pick<Broker, 'subscribe' | 'unsubscribe'>, private readonly degraded: ThrottledLine) {}

  get(key: string): TopicRecord<R> | undefined {
    return this.records.get(key);
  }

  /** Counts a join; `cb` runs once the subscription is up (true) or failed (false). */
  acquire(key: string, cb: (ok: boolean) => void): void {
    const t = this.records.get(key);
    if (t !== undefined) {
      t.count++;
      if (t.ready) cb(true);
      else t.waiters.push(cb);
      return;
    }
    const created: TopicRecord<R> = { count: 1, ready: false, waiters: [cb], lastLive: undefined, position: undefined, recoveries: null };
    this.records.set(key, created);
    this.broker.subscribe(key).then(
      (position) => {
        created.position = position;
        created.ready = true;
        this.wake(created, true);
      },
      (err: unknown) => {
        this.degraded.write({ topic: key, err }, 'broker subscribe failed');
        this.wake(created, false);
      },
    );
  }

  /** Counts a leave (or a failed join); the last one drops the record and the subscription. */
  release(key: string): void {
    const t = this.records.get(key);
    if (t === undefined) return;
    if (--t.count > 0) return;
    this.records.delete(key);
    this.broker.unsubscribe(key);
    this.onDropped(key);
  }

  /**
   * The `limit` topics with the most sockets of this shard (GET /v1/topics),
   * largest first, as [key, sockets]; only keys that start with `prefix`
   * (a tenant's `tenant/`) when given. One pass over the records with a
   * bounded list: asked by the admin page, never per event.
   */
  top(limit: number, prefix: string | undefined): [string, number][] {
    const out: [string, number][] = [];
    for (const [key, t] of this.records) {
      if (prefix !== undefined && !key.startsWith(prefix)) continue;
      if (out.length === limit && t.count <= out[limit - 1]![1]) continue;
      // Insertion into the sorted list: limit is at most 100.
      let i = out.length === limit ? limit - 1 : out.length;
      while (i > 0 && out[i - 1]![1] < t.count) i--;
      out.splice(i, 0, [key, t.count]);
      if (out.length > limit) out.pop();
    }
    return out;
  }

  /** `rec` waits on the topic's live delivery. The topic must be held (a joined socket holds it). */
  addRecovery(key: string, rec: R): void {
    const t = this.records.get(key)!;
    (t.recoveries ??= new Set()).add(rec);
  }

  /** False when `rec` was not waiting (cancelled meanwhile). */
  removeRecovery(key: string, rec: R): boolean {
    const t = this.records.get(key);
    if (t?.recoveries?.delete(rec) !== true) return false;
    if (t.recoveries.size === 0) t.recoveries = null;
    return true;
  }

  /** Removes every recovery `match` selects. */
  cancelRecoveries(key: string, match: (rec: R) => boolean): void {
    const t = this.records.get(key);
    if (t === undefined || t.recoveries === null) return;
    for (const rec of t.recoveries) if (match(rec)) t.recoveries.delete(rec);
    if (t.recoveries.size === 0) t.recoveries = null;
  }

  private wake(t: TopicRecord<R>, ok: boolean): void {
    const waiters = t.waiters;
    t.waiters = [];
    for (const w of waiters) w(ok);
  }
}

/**
 * The position a join's reply hands out: every durable event with a higher
 * id reaches a socket subscribed now. The newer of the subscription's
 * position and the newest id delivered since (undefined when neither is
 * known).
 */
export function positionOf(t: TopicRecord<unknown>): string | undefined {
  const live = t.lastLive;
  const at = t.position;
  if (live === undefined || at === undefined) return live ?? at;
  return (compareEventIdStrings(live, at) ?? 0) > 0 ? live : at;
}
