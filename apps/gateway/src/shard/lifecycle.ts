/**
 * The lifecycle events a shard sees (WS_WEBHOOK_URL): connects and
 * disconnects of its sockets, and, for the topics it owns, presence joins
 * and leaves and the node's topic occupancy. Each is one small JSON object
 * with an id of its own, made where it happens and kept until the batch
 * goes to the coordinator in one message (at most WS_WEBHOOK_BATCH_MAX
 * events, at the latest after WS_WEBHOOK_BATCH_MS): no message per event.
 * The coordinator's WebhookSender signs, sends and retries them.
 */
import { type Config, type WebhookEvent } from '@sluice/core';

export class Lifecycle {
  private buf: string[] = [];
  private seq = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly wanted: ReadonlySet<string>;
  private readonly node: string;

  constructor(
    private readonly cfg: Config,
    /** `node.shard.generation`: the ids' prefix, unique for this shard's life. */
    private readonly prefix: string,
    nodeId: string,
    private readonly send: (events: string[]) => void,
  ) {
    this.wanted = new Set(cfg.webhookEvents.split(','));
    this.node = JSON.stringify(nodeId);
  }

  /** Whether events of `type` are collected at all (WS_WEBHOOK_EVENTS). */
  wants(type: WebhookEvent): boolean {
    return this.wanted.has(type);
  }

  connect(tenant: string, user: string, connectionId: string): void {
    if (this.wanted.has('connect')) this.emit('connect', `"tenant":"${tenant}","user":${JSON.stringify(user)},"connectionId":"${connectionId}"`);
  }

  /** `message`: the close frame's reason (uWS's close handler; valid only during it), sent as `reason` when there is one. */
  disconnect(tenant: string, user: string, connectionId: string, code: number, message: ArrayBuffer): void {
    if (this.wanted.has('disconnect')) {
      // A close reason is at most 123 bytes (RFC 6455), so the event stays small.
      const reason = message.byteLength === 0 ? '' : `,"reason":${JSON.stringify(Buffer.from(message, 0, Math.min(message.byteLength, 123)).toString())}`;
      this.emit('disconnect', `"tenant":"${tenant}","user":${JSON.stringify(user)},"connectionId":"${connectionId}","code":${code}${reason}`);
    }
  }

  /** A user's first socket on a presence topic joined (or its last left), as this node's presence table saw it. */
  presence(key: string, user: string, joined: boolean): void {
    const type = joined ? 'presence_join' : 'presence_leave';
    if (this.wanted.has(type)) this.emit(type, `${topicFields(key)},"user":${JSON.stringify(user)}`);
  }

  /** The node's first socket on a topic (or its last one) came or went. */
  occupancy(key: string, occupied: boolean): void {
    const type = occupied ? 'topic_occupied' : 'topic_vacated';
    if (this.wanted.has(type)) this.emit(type, topicFields(key));
  }

  private emit(type: WebhookEvent, fields: string): void {
    this.buf.push(`{"id":"${this.prefix}.${(++this.seq).toString(36)}","type":"${type}","time":${Date.now()},"node":${this.node},${fields}}`);
    if (this.buf.length >= this.cfg.webhookBatchMax) this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), this.cfg.webhookBatchMs);
  }

  /** Hands what is collected to the coordinator. */
  flush(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.buf.length === 0) return;
    const events = this.buf;
    this.buf = [];
    this.send(events);
  }
}

/** `"tenant":..,"topic":..` of a tenant-scoped key (`tenant/topic`; both match the topic alphabet, which has no `/` or `"`). */
function topicFields(key: string): string {
  const slash = key.indexOf('/');
  return `"tenant":"${key.slice(0, slash)}","topic":"${key.slice(slash + 1)}"`;
}
