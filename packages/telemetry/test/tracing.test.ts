import { test } from 'node:test';
import assert from 'node:assert/strict';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { contextFrom, parseTraceparent, SpanKind, startSpan, traceparentOf } from '../src/index.ts';

const T = '4bf92f3577b34da6a3ce929d0e0e4736';
const S = '00f067aa0ba902b7';

test('parseTraceparent takes version 00 with a non-zero trace and span id; anything else is no parent', () => {
  assert.deepEqual(parseTraceparent(`00-${T}-${S}-01`), { traceId: T, spanId: S, traceFlags: 1, isRemote: true });
  assert.equal(parseTraceparent(`00-${T}-${S}-00`)!.traceFlags, 0);
  for (const bad of [undefined, '', `01-${T}-${S}-01`, `00-${'0'.repeat(32)}-${S}-01`, `00-${T}-${'0'.repeat(16)}-01`,
    `00-${T.toUpperCase()}-${S}-01`, `00-${T}-${S}-1`, `00-${T}-${S}-01-extra`]) {
    assert.equal(parseTraceparent(bad), undefined, String(bad));
    assert.equal(trace.getSpanContext(contextFrom(bad)), undefined);
  }
});

test('a span started from a traceparent is its child, and traceparentOf carries the span onward', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = provider.getTracer('test');
  const parent = startSpan(tracer, 'p', SpanKind.PRODUCER, `00-${T}-${S}-01`, { a: 1 });
  const child = startSpan(tracer, 'c', SpanKind.INTERNAL, parent);
  const tp = traceparentOf(parent);
  assert.match(tp, new RegExp(`^00-${T}-[0-9a-f]{16}-01$`));
  const remote = startSpan(tracer, 'r', SpanKind.CONSUMER, tp);
  for (const s of [child, parent, remote]) s.end();
  const [c, p, r] = exporter.getFinishedSpans();
  assert.equal(p!.parentSpanContext?.spanId, S);
  assert.equal(p!.spanContext().traceId, T);
  assert.equal(p!.attributes.a, 1);
  assert.equal(c!.parentSpanContext?.spanId, p!.spanContext().spanId);
  assert.equal(r!.parentSpanContext?.spanId, p!.spanContext().spanId);
  assert.equal(r!.spanContext().traceId, T);
  assert.equal(tp.split('-')[2], p!.spanContext().spanId);
});
