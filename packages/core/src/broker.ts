import type { EventClass, PublishFrame } from '@sluice/protocol';
import type { HistoryRead } from './history.ts';

/** What a publish carries, as decoded from the client's frame. */
export type PublishFields = Pick<PublishFrame, 'topic' | 'dataJson' | 'cls' | 'key' | 'idempotencyKey' | 'traceparent'>;

/** A publish with whose it is, as it travels between threads and from the admin API. */
export interface PublishRequest extends PublishFields {
  readonly tenant: string;
}

export type PublishResult =
  | { readonly ok: true; readonly id: string | undefined; readonly duplicate: boolean }
  | { readonly ok: false; readonly reason: 'unavailable' | 'internal' };

/** An admin history read (`GET /v1/history`), as it travels from the admin API to a shard. */
export interface HistoryRequest {
  readonly tenant: string;
  readonly topic: string;
  /** An event id; undefined: the newest `limit` events. */
  readonly since: string | undefined;
  readonly limit: number;
}

/** A history read's answer: each event's id and its `data` as JSON text (the admin API splices it in unparsed). */
export type HistoryResult =
  | { readonly ok: true; readonly events: readonly { readonly id: string; readonly data: string }[]; readonly recovered: boolean }
  | { readonly ok: false; readonly reason: 'unavailable' | 'internal'; readonly message: string };

/** One event as it reaches a shard: the frame is encoded once, upstream. */
export interface Delivery {
  /** The tenant-scoped topic key. */
  readonly topic: string;
  readonly frame: string;
  /** Set for durable events. */
  readonly id: string | undefined;
  readonly cls: EventClass;
  readonly key: string | undefined;
  /**
   * When the broker accepted the event, in ms since the epoch (a durable
   * event's id says the same): the start of the delivery lag. 0 when not
   * known: keyed and ephemeral events that crossed nodes through Redis,
   * whose messages carry no time.
   */
  readonly at: number;
}

/**
 * What a shard needs from the rest of the node (embedded mode) or the
 * cluster (Redis). Guarantees every implementation keeps:
 *
 * - `publish` of a durable event resolves ok only after the event is stored
 *   in history with its id, and a repeated (tenant, idempotencyKey) within
 *   the idempotency TTL resolves with the first id and `duplicate: true`
 *   without a second delivery. Keyed and ephemeral events get no id.
 * - Deliveries reach every shard subscribed to the topic, at most once per
 *   shard, in the order the broker accepted the publishes of that topic.
 * - `subscribe` resolves once every event accepted after that point will be
 *   delivered to this shard, with the topic's position: an event id such
 *   that every durable event with a higher id is delivered to this shard
 *   (undefined when it cannot be known, as during a Redis outage). A
 *   `history` read after it returns every such event. Subscriptions are per
 *   shard; the shard counts its own sockets and calls
 *   `subscribe`/`unsubscribe` on the first and last.
 * - `history` returns the stored events after `since`, oldest first, at
 *   most `limit` of them (the oldest: a reader pages on from the last id);
 *   without `since`, the newest `limit` (see HistoryRead, also for
 *   `recovered`). Called after `subscribe` resolved, history and deliveries
 *   overlap rather than leave a gap: a caller that drops deliveries whose id
 *   is not above the last replayed id sees every durable event exactly once.
 *
 * Failures, one convention for every implementation: a call that cannot be
 * served because what stands behind the broker (Redis, the topic's owner
 * shard) is unreachable or failed ends as `unavailable`, and never hangs.
 *
 * - `publish`, whose outcome is the client's reply, resolves
 *   `{ ok: false, reason: 'unavailable' }` and never rejects (`internal` is
 *   for a bug caught on the way).
 * - `subscribe` and `history` reject with a `BrokerUnavailable` (code
 *   `unavailable`, the underlying error as its `cause`), and with nothing
 *   else: any other rejection is a bug.
 * - `unsubscribe` and `onDelivery` do not fail.
 */
export interface Broker {
  publish(tenant: string, fields: PublishFields): Promise<PublishResult>;
  subscribe(topic: string): Promise<string | undefined>;
  unsubscribe(topic: string): void;
  history(topic: string, since: string | undefined, limit?: number): Promise<HistoryRead>;
  onDelivery(handler: (ev: Delivery) => void): void;
}

/** Why `subscribe` or `history` failed: what stands behind the broker is unreachable (see Broker). */
export class BrokerUnavailable extends Error {
  readonly code = 'unavailable' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BrokerUnavailable';
  }
}

/** FNV-1a of a string's UTF-16 code units, unsigned: every thread computes the same value without talking. */
export function fnv1a(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * The hash's shard for a key in embedded mode. An idempotency key's owner
 * (it keeps the key's record) is this; a topic's owner is whoever first
 * touched it (`TopicOwners`), and this when the coordinator touched it first.
 */
export function ownerOf(key: string, shards: number): number {
  return fnv1a(key) % shards;
}
