/**
 * The push worker: takes the jobs POST /v1/publish with `push` adds to
 * WS_PUSH_QUEUE, asks the gateway (GET /v1/online) whether the user came
 * online meanwhile, and if not POSTs the notification to
 * WS_PUSH_WEBHOOK_URL. A failed re-check or webhook call fails the attempt;
 * BullMQ retries it with exponential backoff until PUSH_ATTEMPTS, then the
 * job is dead: kept in the failed set and counted.
 */
import { signBody } from '@sluice/telemetry';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Job, UnrecoverableError, Worker } from 'bullmq';
import { Cluster, Redis } from 'ioredis';
import { sentinelOptions } from '@sluice/redis';
import type { Logger } from 'pino';
import { Counter, Registry } from 'prom-client';
import { request } from 'undici';
import type { PushWorkerConfig } from './config.ts';

/** As the gateway's queue: every key of the queue in one hash slot (Redis Cluster). */
export const PUSH_PREFIX = '{sluice-push}';
/** The attempts the gateway gives each job: the worker's PUSH_ATTEMPTS (at most this) decides when a job is dead. */
export const JOB_ATTEMPTS = 100;
const MAX_BACKOFF_MS = 3_600_000;

export interface PushJobData {
  readonly tenant: string;
  readonly user: string;
  readonly collapseKey: string;
  readonly notification: unknown;
}

/** `v1=<hex>`: HMAC-SHA256 of `<timestamp>.<body>` with the secret (the lifecycle webhooks' scheme, one helper in @sluice/core). */
export const sign = signBody;

export class PushWorker {
  readonly registry = new Registry();
  private readonly skipped = new Counter({ name: 'sluice_push_skipped_online_total', help: 'Push jobs not sent: the user had a socket open when the job ran.', registers: [this.registry] });
  private readonly sent = new Counter({ name: 'sluice_push_sent_total', help: 'Notifications the push sender took (2xx).', registers: [this.registry] });
  private readonly failed = new Counter({ name: 'sluice_push_failed_total', help: 'Attempts that failed (re-check or push sender); each is retried until PUSH_ATTEMPTS.', registers: [this.registry] });
  private readonly dead = new Counter({ name: 'sluice_push_dead_total', help: 'Jobs that failed PUSH_ATTEMPTS times: kept in the failed set, not retried.', registers: [this.registry] });
  private readonly recheckErrors = new Counter({ name: 'sluice_push_recheck_errors_total', help: 'Presence re-checks (GET /v1/online) that failed; the attempt failed with them.', registers: [this.registry] });
  private worker: Worker | undefined;
  private connection: Redis | Cluster | undefined;
  private metricsServer: Server | undefined;

  constructor(private readonly cfg: PushWorkerConfig, private readonly log: Logger) {}

  async start(): Promise<{ metricsPort: number }> {
    const cfg = this.cfg;
    // BullMQ's blocking commands want no per-request retry limit.
    if (cfg.redisSentinels !== undefined) {
      const target = { url: cfg.redisUrl, cluster: false, sentinel: { sentinels: cfg.redisSentinels, name: cfg.redisSentinelName, password: cfg.redisSentinelPassword } };
      this.connection = new Redis({ ...sentinelOptions(target, 'sluice-push-worker'), maxRetriesPerRequest: null, enableOfflineQueue: true, enableAutoPipelining: false, commandTimeout: undefined });
    } else if (cfg.redisCluster) {
      const nodes = cfg.redisUrl.split(',').map((u) => ({ host: new URL(u).hostname, port: Number(new URL(u).port || 6379) }));
      this.connection = new Cluster(nodes, { redisOptions: { maxRetriesPerRequest: null } });
    } else {
      this.connection = new Redis(cfg.redisUrl, { maxRetriesPerRequest: null });
    }
    this.connection.on('error', (err) => this.log.warn({ err: err.message }, 'redis error'));
    this.worker = new Worker<PushJobData>(cfg.queue, (job) => this.process(job), {
      connection: this.connection, prefix: PUSH_PREFIX, concurrency: cfg.concurrency,
      settings: { backoffStrategy: (attemptsMade: number) => Math.min(cfg.backoffMs * 2 ** Math.max(0, attemptsMade - 1), MAX_BACKOFF_MS) },
    });
    this.worker.on('error', (err) => this.log.warn({ err: err.message }, 'worker error'));
    this.worker.on('failed', (job, err) => {
      this.failed.inc();
      const isDead = err instanceof UnrecoverableError || err.name === 'UnrecoverableError';
      if (isDead) this.dead.inc();
      this.log[isDead ? 'error' : 'warn']({ jobId: job?.id, attempt: job?.attemptsMade, err: err.message }, isDead ? 'push job dead' : 'push attempt failed');
    });
    await this.worker.waitUntilReady();
    this.metricsServer = createServer((req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      this.registry.metrics().then((text) => {
        res.writeHead(200, { 'content-type': this.registry.contentType });
        res.end(text);
      }, () => res.writeHead(500).end());
    });
    const metricsPort = await new Promise<number>((resolve, reject) => {
      this.metricsServer!.once('error', reject);
      this.metricsServer!.listen(cfg.metricsPort, cfg.metricsHost, () => resolve((this.metricsServer!.address() as AddressInfo).port));
    });
    return { metricsPort };
  }

  /** One attempt. Throws to fail it: the last allowed attempt throws UnrecoverableError, so the job is dead. */
  private async process(job: Job<PushJobData>): Promise<'sent' | 'online'> {
    const attempt = job.attemptsMade + 1;
    try {
      return await this.attempt(job, attempt);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (attempt >= this.cfg.attempts) {
        const dead = new UnrecoverableError(`${message} (attempt ${attempt} of ${this.cfg.attempts})`);
        dead.cause = err;
        throw dead;
      }
      throw err;
    }
  }

  private async attempt(job: Job<PushJobData>, attempt: number): Promise<'sent' | 'online'> {
    const { tenant, user, collapseKey, notification } = job.data;
    let online: boolean;
    try {
      online = await this.isOnline(tenant, user);
    } catch (err) {
      this.recheckErrors.inc();
      throw new Error(`presence re-check failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    if (online) {
      this.skipped.inc();
      this.log.debug({ jobId: job.id }, 'push skipped: the user is online');
      return 'online';
    }
    const body = JSON.stringify({ tenant, user, collapseKey, notification, jobId: job.id, attempt });
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.cfg.webhookSecret !== undefined) {
      const ts = String(Math.floor(Date.now() / 1000));
      headers['x-sluice-timestamp'] = ts;
      headers['x-sluice-signature'] = sign(this.cfg.webhookSecret, ts, body);
    }
    const res = await request(this.cfg.webhookUrl, { method: 'POST', headers, body,
      headersTimeout: this.cfg.webhookTimeoutMs, bodyTimeout: this.cfg.webhookTimeoutMs, signal: AbortSignal.timeout(this.cfg.webhookTimeoutMs) });
    await res.body.dump();
    if (res.statusCode < 200 || res.statusCode > 299) throw new Error(`push sender answered ${res.statusCode}`);
    this.sent.inc();
    this.log.info({ jobId: job.id, attempt }, 'push sent');
    return 'sent';
  }

  /** Asks the gateway (GET /v1/online): throws when it does not answer 200, so that nothing is sent blindly. */
  private async isOnline(tenant: string, user: string): Promise<boolean> {
    const q = new URLSearchParams({ tenant, user });
    const headers: Record<string, string> = {};
    if (this.cfg.adminToken !== undefined) headers.authorization = `Bearer ${this.cfg.adminToken}`;
    const res = await request(`${this.cfg.adminUrl}/v1/online?${q}`, { headers, signal: AbortSignal.timeout(this.cfg.webhookTimeoutMs) });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`GET /v1/online answered ${res.statusCode}`);
    const parsed = JSON.parse(text) as { online?: unknown };
    if (!Array.isArray(parsed.online)) throw new Error('GET /v1/online answered without an online list');
    return parsed.online.includes(user);
  }

  async stop(): Promise<void> {
    await this.worker?.close();
    await new Promise<void>((resolve) => (this.metricsServer === undefined ? resolve() : this.metricsServer.close(() => resolve())));
    this.connection?.disconnect();
  }
}
