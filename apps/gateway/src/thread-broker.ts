import type { MessagePort } from 'node:worker_threads';
import type { Broker, Delivery, HistoryRead, PublishRequest, PublishResult } from '@sluice/core';
import { Batcher, decodeToShard, encodeToCoordinator, forEachMessage, type ToCoordinator, type ToShard } from './messages.ts';

/**
 * The shard's side of the embedded broker: every call becomes a message to
 * the coordinator's EmbeddedHub, which owns history, idempotency and the
 * topic routing of the node. Keeps the guarantees stated on `Broker`.
 * Control messages (stop, metrics) arrive on the same port and are handed
 * to `onControl`.
 */
export class ThreadBroker implements Broker {
  private readonly out: Batcher<ToCoordinator>;
  private rid = 0;
  private readonly pending = new Map<number, (v: never) => void>();
  private deliver: (d: Delivery) => void = () => {};

  constructor(
    private readonly port: MessagePort,
    private readonly onControl: (m: ToShard) => void,
  ) {
    this.out = new Batcher(encodeToCoordinator, (batch) => port.postMessage(batch));
    port.on('message', (batch: string) => forEachMessage(batch, decodeToShard, (m) => this.receive(m)));
  }

  publish(req: PublishRequest): Promise<PublishResult> {
    return this.request<PublishResult>((rid) => ({ op: 'pub', rid, req }));
  }

  subscribe(topic: string): Promise<void> {
    return this.request<void>((rid) => ({ op: 'sub', rid, topic }));
  }

  unsubscribe(topic: string): void {
    this.out.push({ op: 'unsub', topic });
  }

  history(topic: string, since: string): Promise<HistoryRead> {
    return this.request<HistoryRead>((rid) => ({ op: 'hist', rid, topic, since }));
  }

  onDelivery(handler: (d: Delivery) => void): void {
    this.deliver = handler;
  }

  /** A control message to the coordinator, sent with the current batch. */
  send(m: ToCoordinator): void {
    this.out.push(m);
  }

  /** Sends what is batched now (before the thread stops). */
  flush(): void {
    this.out.flush();
  }

  private request<T>(make: (rid: number) => ToCoordinator): Promise<T> {
    return new Promise<T>((resolve) => {
      const rid = ++this.rid;
      this.pending.set(rid, resolve as (v: never) => void);
      this.out.push(make(rid));
    });
  }

  private settle(rid: number, value: unknown): void {
    const resolve = this.pending.get(rid);
    if (resolve === undefined) return;
    this.pending.delete(rid);
    resolve(value as never);
  }

  private receive(m: ToShard): void {
    switch (m.op) {
      case 'ev':
        this.deliver(m.d);
        return;
      case 'pubok':
        this.settle(m.rid, m.res);
        return;
      case 'subok':
        this.settle(m.rid, undefined);
        return;
      case 'hist':
        this.settle(m.rid, m.read);
        return;
      default:
        this.onControl(m);
    }
  }
}
