import type { EventClass, PublishFrame } from '@sluice/protocol';
import type { HistoryRead } from './history.ts';

/**
 * Inside the gateway a topic is namespaced by its tenant, so that one tenant
 * can never receive another's events. Tenant ids never contain '/'.
 */
export function topicKey(tenant: string, topic: string): string {
  return `${tenant}/${topic}`;
}

/** A publish as the broker takes it: the decoded frame's fields, plus whose it is. */
export interface PublishRequest
  extends Pick<PublishFrame, 'topic' | 'dataJson' | 'cls' | 'key' | 'idempotencyKey' | 'traceparent'> {
  readonly tenant: string;
}

export type PublishResult =
  | { readonly ok: true; readonly id: string | undefined; readonly duplicate: boolean }
  | { readonly ok: false; readonly reason: 'unavailable' | 'internal' };

/** One event as it reaches a shard: the frame is encoded once, upstream. */
export interface Delivery {
  /** The tenant-scoped topic key. */
  readonly topic: string;
  readonly frame: string;
  /** Set for durable events. */
  readonly id: string | undefined;
  readonly cls: EventClass;
  readonly key: string | undefined;
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
 *   delivered to this shard. Subscriptions are per shard; the shard counts
 *   its own sockets and calls `subscribe`/`unsubscribe` on the first and last.
 * - `history` returns the stored events after `since` (see HistoryRead).
 *   Called after `subscribe` resolved, history and deliveries overlap rather
 *   than leave a gap: a caller that drops deliveries whose id is not above
 *   the last replayed id sees every durable event exactly once.
 * - On failure promises resolve with `unavailable` (publish) or reject
 *   (subscribe, history); they never hang forever.
 */
export interface Broker {
  publish(req: PublishRequest): Promise<PublishResult>;
  subscribe(topic: string): Promise<void>;
  unsubscribe(topic: string): void;
  history(topic: string, since: string): Promise<HistoryRead>;
  onDelivery(handler: (d: Delivery) => void): void;
}
