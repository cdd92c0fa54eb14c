/**
 * Offline push, the gateway's side (issue 19, point 6): POST /v1/publish
 * with `users` and `push` adds, for each named user without an open socket,
 * one delayed BullMQ job on WS_PUSH_QUEUE whose id is made of tenant, user
 * and collapse key, so that a burst of publishes becomes one notification.
 * `pnpm push-worker` (apps/push-worker) takes the jobs.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queue } from 'bullmq';
import type { Config } from '@sluice/core';
import { createRedisClient, redisTarget } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';

/** Every queue key shares one hash slot: BullMQ's scripts touch several keys of a queue at once (Redis Cluster). */
export const PUSH_PREFIX = '{sluice-push}';

export interface PushRequest {
  readonly collapseKey: string;
  readonly delayMs: number;
  /** The notification payload, as JSON text (an object of at most 4 KiB). */
  readonly notificationJson: string;
}

export interface PushJobData {
  readonly tenant: string;
  readonly user: string;
  readonly collapseKey: string;
  readonly notification: unknown;
  /** Tells this add from an earlier one with the same id: a collapse leaves the earlier job's nonce in place. */
  readonly nonce: string;
}

export type PushResult = { readonly ok: true; readonly queued: readonly string[]; readonly collapsed: readonly string[] } |
  { readonly ok: false; readonly message: string; readonly queued: readonly string[]; readonly collapsed: readonly string[] };

/**
 * The job id: BullMQ refuses ids with ':' and user ids may hold anything, so
 * it is a hash of tenant, user and collapse key (NUL-separated: none of them
 * can hold one).
 */
export function pushJobId(tenant: string, user: string, collapseKey: string): string {
  return `push-${createHash('sha256').update(`${tenant}\0${user}\0${collapseKey}`).digest('base64url')}`;
}

export class PushQueue {
  /** Made at the first push: see `open`. */
  private queue: Promise<Queue> | undefined;
  private readonly connection: ReturnType<typeof createRedisClient>;
  readonly counts = { queued: 0, collapsed: 0, errors: 0 };

  constructor(private readonly cfg: Pick<Config, 'redisUrl' | 'redisCluster' | 'redisSentinels' | 'redisSentinelName' | 'redisSentinelPassword' | 'pushQueue'>,
    private readonly log: Logger) {
    // The connection fails fast (no offline queue, no retries): a publish
    // with `push` while Redis is away is answered 503 at once, not held.
    const connection = this.connection = createRedisClient(redisTarget(cfg), 'command', 'push');
    connection.on('error', () => {});
  }

  /**
   * The BullMQ queue, made at the first publish with `push`: bullmq is a
   * sixth of a start's CPU (110 ms of the coordinator's 730 here) and most
   * nodes never push, so it is loaded then (once, 0.1 s), on the connection
   * made at start.
   */
  private open(): Promise<Queue> {
    this.queue ??= import('bullmq').then(({ Queue }) => {
      const queue = new Queue(this.cfg.pushQueue, { connection: this.connection, prefix: PUSH_PREFIX });
      queue.on('error', (err) => this.log.debug({ err }, 'push queue: redis error'));
      return queue;
    });
    return this.queue;
  }

  /**
   * Adds one job per user. An add whose id is taken by a job still waiting
   * or delayed is a collapse: BullMQ keeps that job (its delay, its payload)
   * and returns its id; this tells the two apart by reading back the nonce.
   */
  async enqueue(tenant: string, users: readonly string[], push: PushRequest): Promise<PushResult> {
    const queued: string[] = [];
    const collapsed: string[] = [];
    const queue = await this.open();
    const notification: unknown = JSON.parse(push.notificationJson);
    for (const user of users) {
      const jobId = pushJobId(tenant, user, push.collapseKey);
      const nonce = randomBytes(9).toString('base64url');
      const data: PushJobData = { tenant, user, collapseKey: push.collapseKey, notification, nonce };
      try {
        const opts = {
          jobId, delay: push.delayMs,
          // Done jobs go, so that a later publish with the same key makes a new notification.
          removeOnComplete: true,
          // The worker's PUSH_ATTEMPTS (at most this many) decides when a job is dead; its backoff strategy, the waits.
          attempts: 100, backoff: { type: 'sluice' },
          // Dead jobs stay (the newest 10000), to be looked at and counted.
          removeOnFail: { count: 10_000 },
        };
        await queue.add('push', data, opts);
        let stored = await queue.getJob(jobId);
        // A dead job holds the id: it gives way to the new notification (it was logged and counted when it died).
        if (stored !== undefined && (stored.data as PushJobData).nonce !== nonce && await stored.getState() === 'failed') {
          await stored.remove();
          await queue.add('push', data, opts);
          stored = await queue.getJob(jobId);
        }
        // Gone already (delay 0, sent and removed): it was ours.
        if (stored === undefined || (stored.data as PushJobData).nonce === nonce) queued.push(user);
        else collapsed.push(user);
      } catch (err) {
        this.counts.errors++;
        this.log.warn({ err }, 'push job not added: redis did not take it');
        this.count(queued, collapsed);
        return { ok: false, message: 'redis did not take the push jobs', queued, collapsed };
      }
    }
    this.count(queued, collapsed);
    return { ok: true, queued, collapsed };
  }

  private count(queued: readonly string[], collapsed: readonly string[]): void {
    this.counts.queued += queued.length;
    this.counts.collapsed += collapsed.length;
  }

  async close(): Promise<void> {
    await this.queue?.then((q) => q.close()).catch(() => {});
    this.connection.disconnect();
  }
}
