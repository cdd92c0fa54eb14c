/**
 * A shard's spans (WS_TRACING_MODULE set; without it this class is never
 * made and no tracing code runs): `sluice.upgrade` and `sluice.auth`,
 * `sluice.join` and `sluice.history`, `sluice.publish` and `sluice.store`,
 * `sluice.fanout`.
 */
import type { Config, Delivery, PublishFields, PublishResult } from '@sluice/core';
import { endSpan, type Span, SpanKind, startSpan, type Tracer, traceparentOf } from '@sluice/telemetry';
import { CLASS_LABELS } from './metrics.ts';

const TRACEPARENT_FIELD = '"traceparent":"';
const DATA_FIELD = ',"data":';

export interface PublishSpans<F> {
  /** The request with the publish span's traceparent: the event carries it onward. */
  readonly req: F;
  readonly span: Span;
  readonly store: Span;
}

export class ShardTracing {
  constructor(private readonly tracer: Tracer, private readonly cfg: Config, private readonly store: 'memory' | 'redis', private readonly shard: number) {}

  upgrade(traceparent: string): Span {
    return startSpan(this.tracer, 'sluice.upgrade', SpanKind.SERVER, traceparent || undefined,
      { 'sluice.auth': this.cfg.auth, 'sluice.shard': this.shard });
  }

  child(parent: Span, name: 'sluice.auth' | 'sluice.hook' | 'sluice.history'): Span {
    return startSpan(this.tracer, name, SpanKind.INTERNAL, parent);
  }

  join(topic: string, tenant: string, since: boolean): Span {
    return startSpan(this.tracer, 'sluice.join', SpanKind.SERVER, undefined, {
      'messaging.destination.name': topic, 'sluice.tenant': tenant, 'sluice.since': since, 'sluice.shard': this.shard,
    });
  }

  /**
   * A publish's spans: `sluice.publish` (a child of the publisher's
   * traceparent, when it sent one) and its child `sluice.store`, the
   * broker's part. The event carries the publish span's traceparent onward,
   * so the fan-out on every shard and node is a child of it.
   */
  publish<F extends PublishFields>(tenant: string, f: F): PublishSpans<F> {
    const span = startSpan(this.tracer, 'sluice.publish', SpanKind.PRODUCER, f.traceparent, {
      'messaging.system': 'sluice', 'messaging.operation.type': 'send', 'messaging.destination.name': f.topic, 'sluice.tenant': tenant,
      'sluice.class': CLASS_LABELS[f.cls]!, 'sluice.shard': this.shard,
    });
    const store = startSpan(this.tracer, 'sluice.store', this.store === 'memory' ? SpanKind.INTERNAL : SpanKind.CLIENT, span,
      { 'sluice.store': this.store });
    return { req: { ...f, traceparent: traceparentOf(span) }, span, store };
  }

  endPublish(t: PublishSpans<unknown>, res: PublishResult): void {
    if (res.ok) {
      if (res.id !== undefined) t.span.setAttribute('messaging.message.id', res.id);
      if (res.duplicate) t.span.setAttribute('sluice.duplicate', true);
    }
    const error = res.ok ? undefined : res.reason;
    endSpan(t.store, error);
    endSpan(t.span, error);
  }

  /**
   * `sluice.fanout`: this shard's delivery of an event, a child of the
   * publish span whose traceparent the event carries (from any shard or
   * node). An event without one (published without tracing) has no span.
   */
  fanOut(ev: Delivery, subscribers: number): Span | undefined {
    const f = ev.frame;
    const at = f.indexOf(TRACEPARENT_FIELD);
    // The frame's own field comes before its data; a match inside the data is not it.
    if (at < 0 || at > f.indexOf(DATA_FIELD)) return undefined;
    const start = at + TRACEPARENT_FIELD.length;
    const tp = f.slice(start, f.indexOf('"', start));
    return startSpan(this.tracer, 'sluice.fanout', SpanKind.CONSUMER, tp, {
      'messaging.system': 'sluice', 'messaging.operation.type': 'process', 'messaging.destination.name': ev.topic.slice(ev.topic.indexOf('/') + 1),
      'sluice.class': CLASS_LABELS[ev.cls]!, 'sluice.subscribers': subscribers, 'sluice.shard': this.shard,
      ...(ev.id === undefined ? {} : { 'messaging.message.id': ev.id }),
    });
  }
}
