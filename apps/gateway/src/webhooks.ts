/**
 * The node's lifecycle webhooks (WS_WEBHOOK_URL), in the coordinator: the
 * shards hand over batches of events (shard/lifecycle.ts); this keeps them
 * in one bounded queue and POSTs them in order, one batch in flight, signed
 * (`x-sluice-signature` over `<x-sluice-timestamp>.<body>`). A batch that is
 * not answered 2xx within WS_WEBHOOK_TIMEOUT_MS is sent again, the same
 * events with the same ids, after a backoff that doubles up to
 * WS_WEBHOOK_RETRY_MAX_MS with full jitter: at least once. While the
 * receiver is down the node holds WS_WEBHOOK_QUEUE_MAX events in all (the
 * batch being sent included) and drops the oldest queued beyond that,
 * counted: memory never grows without bound.
 */
import { type Config, WEBHOOK_EVENTS } from '@sluice/core';
import { counterFrom, gaugeFrom, IndexedHistogram, type Logger, type Registry, signBody } from '@sluice/telemetry';
import type { Http } from './hooks.ts';

const FIRST_RETRY_MS = 250;

export class WebhookSender {
  /** Events waiting, oldest first, from `head` on. */
  private queue: string[] = [];
  private head = 0;
  /** The batch being sent (or waiting to be sent again): not in the queue, at most WS_WEBHOOK_BATCH_MAX. */
  private batch: string[] | null = null;
  private batchSeq = 0;
  private batchId = '';
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private sending = false;
  private stopped = false;
  private readonly stats = { dropped: 0, ok: 0, failed: 0, retries: 0 };
  /** Events collected, by type. */
  private readonly byType: Record<string, number> = Object.fromEntries(WEBHOOK_EVENTS.map((t) => [t, 0]));
  private readonly latency: IndexedHistogram;
  private lastError = 0;

  constructor(private readonly cfg: Config, private readonly url: string, private readonly secret: string, private readonly node: string,
    private readonly log: Logger, registry: Registry, private readonly http: Http, private readonly random: () => number = Math.random) {
    const s = this.stats;
    counterFrom(registry, 'sluice_webhook_events_total', `Lifecycle events collected for WS_WEBHOOK_URL (${WEBHOOK_EVENTS.join(', ')}).`,
      'type', () => this.byType);
    counterFrom(registry, 'sluice_webhook_events_dropped_total',
      'Lifecycle events dropped: the queue held WS_WEBHOOK_QUEUE_MAX (the receiver slow or down), or the node stopped with them unsent.',
      undefined, () => s.dropped);
    counterFrom(registry, 'sluice_webhook_batches_total', 'Webhook POSTs, by outcome: ok (2xx) or error (sent again later).', 'outcome',
      () => ({ ok: s.ok, error: s.failed }));
    counterFrom(registry, 'sluice_webhook_retries_total', 'Webhook batches scheduled to be sent again after a failed POST.', undefined,
      () => s.retries);
    gaugeFrom(registry, 'sluice_webhook_queue_events', 'Lifecycle events not yet delivered (queued, and the batch being sent).', () => this.pending, 'sum');
    this.latency = new IndexedHistogram(registry, 'sluice_webhook_duration_seconds', 'From a webhook POST sent to its answer or failure.',
      'outcome', ['ok', 'error']);
  }

  /** Events not yet delivered. */
  get pending(): number {
    return this.queue.length - this.head + (this.batch?.length ?? 0);
  }

  /** Events from a shard. */
  add(events: readonly string[]): void {
    for (const e of events) {
      // `{"id":"..","type":"<type>",..`: the shard's Lifecycle writes the type second.
      const at = e.indexOf('"type":"') + 8;
      const type = e.slice(at, e.indexOf('"', at));
      if (type in this.byType) this.byType[type]!++;
    }
    if (this.stopped) {
      this.stats.dropped += events.length;
      return;
    }
    for (const e of events) this.queue.push(e);
    // The batch being sent counts against the bound too (it is at most WS_WEBHOOK_QUEUE_MAX itself), so `over` never exceeds what is queued.
    const over = this.pending - this.cfg.webhookQueueMax;
    if (over > 0) {
      this.head += over;
      this.stats.dropped += over;
      this.warn(`webhook queue full (WS_WEBHOOK_QUEUE_MAX=${this.cfg.webhookQueueMax}): dropped the oldest events`, { dropped: over });
    }
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.sending || this.timer !== undefined || this.stopped) return;
    if (this.batch === null && this.queue.length === this.head) return;
    // A full batch goes now; a partial one waits WS_WEBHOOK_BATCH_MS for company (events already waited that long in the shard).
    const now = this.batch !== null || this.queue.length - this.head >= this.cfg.webhookBatchMax;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.sendBatch();
    }, now ? 0 : this.cfg.webhookBatchMs);
  }

  private async sendBatch(): Promise<void> {
    if (this.batch === null) {
      const end = Math.min(this.queue.length, this.head + Math.min(this.cfg.webhookBatchMax, this.cfg.webhookQueueMax));
      this.batch = this.queue.slice(this.head, end);
      this.head = end;
      this.batchId = `${this.node}.${(++this.batchSeq).toString(36)}`;
      this.attempt = 0;
    }
    if (this.batch.length === 0) {
      this.batch = null;
      return;
    }
    this.sending = true;
    const ok = await this.post(this.batch);
    this.sending = false;
    if (ok) {
      this.stats.ok++;
      this.batch = null;
      this.attempt = 0;
      this.schedule();
      return;
    }
    this.stats.failed++;
    if (this.stopped) return;
    this.attempt++;
    this.stats.retries++;
    const cap = Math.min(this.cfg.webhookRetryMaxMs, FIRST_RETRY_MS * 2 ** Math.min(this.attempt, 30));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.sendBatch();
    }, Math.ceil(this.random() * cap));
  }

  private async post(events: readonly string[]): Promise<boolean> {
    const body = `{"events":[${events.join(',')}]}`;
    const ts = String(Date.now());
    const t0 = performance.now();
    try {
      const res = await this.http.request(this.url, {
        method: 'POST', body, dispatcher: this.http.agent, signal: AbortSignal.timeout(this.cfg.webhookTimeoutMs),
        headersTimeout: this.cfg.webhookTimeoutMs, bodyTimeout: this.cfg.webhookTimeoutMs,
        headers: { 'content-type': 'application/json', 'x-sluice-timestamp': ts, 'x-sluice-signature': signBody(this.secret, ts, body),
          'x-sluice-batch': this.batchId, 'x-sluice-attempt': String(this.attempt + 1) },
      });
      res.body.on('error', () => {});
      await res.body.dump({ limit: 65_536 });
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      this.latency.observe(ok ? 0 : 1, (performance.now() - t0) / 1000);
      if (!ok) this.warn('webhook receiver answered an error status: the batch will be sent again', { status: res.statusCode, batch: this.batchId });
      return ok;
    } catch (err) {
      this.latency.observe(1, (performance.now() - t0) / 1000);
      const e = err as { name?: string; code?: string; message?: string };
      this.warn('webhook POST failed: the batch will be sent again', { why: e.name === 'TimeoutError' ? 'timeout' : e.code ?? e.message, batch: this.batchId });
      return false;
    }
  }

  /** At most one line a second, so that a receiver that is down does not flood the log. */
  private warn(msg: string, fields: Record<string, unknown>): void {
    const now = Date.now();
    if (now - this.lastError < 1000) return;
    this.lastError = now;
    this.log.warn({ ...fields, pending: this.pending }, msg);
  }

  /** The node stops: what is queued gets until `deadlineMs` to go out; the rest is counted as dropped. */
  async stop(deadlineMs: number): Promise<void> {
    const end = Date.now() + deadlineMs;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    while (Date.now() < end && (this.pending > 0 || this.sending)) {
      if (!this.sending && this.timer === undefined) void this.sendBatch();
      await new Promise((r) => setTimeout(r, 20));
      if (this.timer !== undefined && this.batch !== null) {
        // A failed batch at the stop is sent again at once rather than after its backoff.
        clearTimeout(this.timer);
        this.timer = undefined;
      }
    }
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.pending > 0) {
      this.log.warn({ dropped: this.pending }, 'stopping with webhook events unsent: dropped');
      this.stats.dropped += this.pending;
      this.queue = [];
      this.head = 0;
      this.batch = null;
    }
    await this.http.agent.destroy().catch(() => {});
  }
}
