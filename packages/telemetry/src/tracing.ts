import { pathToFileURL } from 'node:url';
import { isAbsolute, resolve } from 'node:path';
import {
  type Attributes, type Context, type Link, ROOT_CONTEXT, type Span, type SpanContext, SpanKind, SpanStatusCode,
  trace, TraceFlags, type Tracer,
} from '@opentelemetry/api';

export { SpanKind, SpanStatusCode, type Attributes, type Span, type Tracer };

export const TRACER_NAME = 'sluice';

/**
 * WS_TRACING_MODULE: an ES module the operator provides that registers an
 * OpenTelemetry SDK (tracer provider, exporter) with @opentelemetry/api.
 * Every thread has its own copy of the API's globals, so every thread (the
 * coordinator and each shard) imports it before it serves. Sluice bundles
 * no SDK; without the module no span is made, and no span code runs.
 */
export async function loadTracing(modulePath: string | undefined, version: string): Promise<Tracer | null> {
  if (modulePath === undefined) return null;
  const file = isAbsolute(modulePath) ? modulePath : resolve(process.cwd(), modulePath);
  await import(pathToFileURL(file).href);
  return trace.getTracer(TRACER_NAME, version);
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** The remote span context a W3C `traceparent` names, or undefined when it is absent or not a valid version-00 value. */
export function parseTraceparent(tp: string | undefined): SpanContext | undefined {
  if (tp === undefined) return undefined;
  const m = TRACEPARENT.exec(tp);
  if (m === null || m[1] === ZERO_TRACE || m[2] === ZERO_SPAN) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & TraceFlags.SAMPLED, isRemote: true };
}

/** The context whose parent is the span a `traceparent` names (the root context without one). */
export function contextFrom(tp: string | undefined): Context {
  const sc = parseTraceparent(tp);
  return sc === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, sc);
}

/** The W3C `traceparent` of a span, to carry it onward (in an event, to another thread or node). */
export function traceparentOf(span: Span): string {
  const sc = span.spanContext();
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & TraceFlags.SAMPLED) === 0 ? '00' : '01'}`;
}

/** A child of `parent` (a span of this thread) or of the span a `traceparent` names. */
export function startSpan(tracer: Tracer, name: string, kind: SpanKind, parent: Span | string | undefined, attributes?: Attributes,
  links?: Link[]): Span {
  const ctx = parent === undefined || typeof parent === 'string' ? contextFrom(parent) : trace.setSpan(ROOT_CONTEXT, parent);
  return tracer.startSpan(name, { kind, attributes, links }, ctx);
}

/** Ends a span (none: nothing), with an error status naming `error` when given (a protocol reason, never client data). */
export function endSpan(span: Span | undefined, error?: string): void {
  if (span === undefined) return;
  if (error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
  span.end();
}

