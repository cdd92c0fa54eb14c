/**
 * The outbox: every publish from `publish()` until the server acknowledges
 * it. Durable publishes are resent with their idempotencyKey (exactly once),
 * keyed ones as they are (at least once), ephemeral ones never (at most once).
 * It decides what to send and what to give up on; the facade sends.
 */
import { decodeFrameObject } from '@sluice/protocol';
import { SluiceError } from './errors.ts';
import type { Settings } from './options.ts';
import type { PublishOptions, PublishResult } from './types.ts';
import { randomId, utf8Length } from './util.ts';

type PublishClass = 'durable' | 'keyed' | 'ephemeral';

export interface Entry {
  readonly seq: number;
  readonly cls: PublishClass;
  readonly topic: string;
  /** The frame after `{"type":"publish","ref":"..."`: built once, resent unchanged. */
  readonly body: string;
  readonly bodyBytes: number;
  readonly resolve: (r: PublishResult) => void;
  readonly reject: (e: SluiceError) => void;
  firstSentAt: number | undefined;
  /** Size of the frame as last sent. */
  bytes: number;
}

export class Outbox {
  private readonly clientId: string;
  private publishSeq = 0;
  /** Unacknowledged publishes, in publish() order. */
  private readonly unacked = new Set<Entry>();
  /** Publishes waiting to be sent (never sent, or to be resent), in publish() order. */
  private queue: Entry[] = [];
  /** Publishes (not other frames) wait until then: tenant_rate_limited, unavailable. */
  pausedUntil = 0;

  constructor(private readonly settings: Settings, private readonly report: (e: SluiceError) => void) {
    this.clientId = randomId(settings.random);
  }

  get waiting(): boolean {
    return this.queue.length > 0;
  }

  /** A new publish, checked as the server would check it; an error when it cannot be taken. */
  add(topic: string, data: unknown, options: PublishOptions): Promise<PublishResult> | SluiceError {
    const cls: PublishClass = options.key !== undefined ? 'keyed' : options.ephemeral === true ? 'ephemeral' : 'durable';
    const seq = ++this.publishSeq;
    const idempotencyKey = options.idempotencyKey ?? (cls === 'durable' ? `${this.clientId}.${seq}` : undefined);
    // The server's own decoder: a publish it would refuse as bad_request never leaves the client.
    const checked = decodeFrameObject({
      type: 'publish', topic, data, key: options.key, ephemeral: options.ephemeral, idempotencyKey, traceparent: options.traceparent,
    });
    if (!checked.ok) return new SluiceError('bad_request', checked.message, { topic: typeof topic === 'string' ? topic : undefined });
    if (this.unacked.size >= this.settings.outboxLimit) {
      return new SluiceError('outbox_full', `${this.unacked.size} publishes are waiting for their acknowledgement (outboxLimit)`, { topic });
    }
    let body = `,"topic":${JSON.stringify(topic)},"data":${checked.frame.type === 'publish' ? checked.frame.dataJson : 'null'}`;
    if (options.key !== undefined) body += `,"key":${JSON.stringify(options.key)}`;
    if (cls === 'ephemeral') body += ',"ephemeral":true';
    if (idempotencyKey !== undefined) body += `,"idempotencyKey":${JSON.stringify(idempotencyKey)}`;
    if (options.traceparent !== undefined) body += `,"traceparent":${JSON.stringify(options.traceparent)}`;
    body += '}';
    return new Promise<PublishResult>((resolve, reject) => {
      const bodyBytes = utf8Length(body);
      const entry: Entry = { seq, cls, topic, body, bodyBytes, resolve, reject, firstSentAt: undefined, bytes: bodyBytes };
      this.unacked.add(entry);
      this.queue.push(entry);
    });
  }

  /**
   * Takes the next publish off the queue for sending at `now` with a ref from
   * `nextRef`: its frame, or undefined when that publish is settled instead
   * (acked already, too old to resend safely, too big for the socket).
   */
  take(now: number, maxFrameBytes: number, nextRef: () => string): { entry: Entry; ref: string; frame: string } | undefined {
    const e = this.queue.shift()!;
    if (!this.unacked.has(e)) return undefined;
    if (e.cls === 'durable' && e.firstSentAt !== undefined && now - e.firstSentAt > this.settings.idempotencyWindowMs) {
      this.fail(e, new SluiceError('outcome_unknown',
        'unacknowledged for longer than idempotencyWindowMs: it may or may not have been stored, and a resend could deliver it twice',
        { topic: e.topic }));
      return undefined;
    }
    const ref = nextRef();
    const head = `{"type":"publish","ref":"${ref}"`;
    e.bytes = head.length + e.bodyBytes;
    if (e.bytes > maxFrameBytes) {
      // Refused locally: the server would answer payload_too_large (a strike), or close with 1009 above the hard cap.
      this.fail(e, new SluiceError('payload_too_large', `a ${e.bytes}-byte frame is above the server's maxFrameBytes (${maxFrameBytes})`,
        { topic: e.topic }));
      return undefined;
    }
    e.firstSentAt ??= now;
    return { entry: e, ref, frame: head + e.body };
  }

  acked(e: Entry, data: unknown): void {
    this.unacked.delete(e);
    const d = (typeof data === 'object' && data !== null ? data : {}) as { id?: unknown; duplicate?: unknown };
    e.resolve({
      ...(typeof d.id === 'string' ? { id: d.id } : {}),
      ...(d.duplicate === true ? { duplicate: true } : {}),
    });
  }

  /** Puts a publish back in line, in publish() order. */
  requeue(e: Entry): void {
    let lo = 0;
    let hi = this.queue.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.queue[mid]!.seq < e.seq) lo = mid + 1;
      else hi = mid;
    }
    this.queue.splice(lo, 0, e);
  }

  fail(e: Entry, err: SluiceError): void {
    if (!this.unacked.delete(e)) return;
    const i = this.queue.indexOf(e);
    if (i >= 0) this.queue.splice(i, 1);
    e.reject(err);
    this.report(err);
  }

  /**
   * The socket closed with these publishes in flight: each is resent, except
   * ephemeral ones and, after a 1009 (`dropOversized`), the largest.
   */
  inflightLost(entries: Entry[], dropOversized: boolean, code: number): void {
    const inflight = entries.filter((e) => this.unacked.has(e));
    if (dropOversized && inflight.length > 0) {
      // 1009: the frame above the hard cap was the largest in flight. It is never resent.
      const big = inflight.reduce((a, b) => (b.bytes > a.bytes ? b : a));
      inflight.splice(inflight.indexOf(big), 1);
      this.fail(big, new SluiceError('payload_too_large', `the server closed with 1009 after a ${big.bytes}-byte frame`, { topic: big.topic, closeCode: code }));
    }
    for (const e of inflight.sort((a, b) => a.seq - b.seq)) {
      if (e.cls === 'ephemeral') this.fail(e, new SluiceError('disconnected', 'the socket closed before the ephemeral publish was acknowledged', { topic: e.topic }));
      else this.requeue(e);
    }
  }

  /** Rejects every unacknowledged publish. */
  failAll(err: SluiceError): void {
    const entries = [...this.unacked];
    this.unacked.clear();
    this.queue = [];
    for (const e of entries) e.reject(err);
  }
}
