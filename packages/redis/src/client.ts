/**
 * ioredis clients as Sluice uses them: never queue a command while Redis is
 * unreachable (a publish must answer `unavailable` now, not later), never
 * wait more than a couple of seconds for a reply, reconnect forever with a
 * capped backoff. Standalone, or Cluster with sharded pub/sub.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisClient } from './bus.ts';

export interface RedisTarget {
  /** REDIS_URL: one URL, or with `cluster` a comma-separated list of seed nodes. */
  readonly url: string;
  readonly cluster: boolean;
}

/** How long a command may wait for its reply before it fails. */
export const COMMAND_TIMEOUT_MS = 2000;

const base: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: COMMAND_TIMEOUT_MS,
  connectTimeout: 2000,
  enableAutoPipelining: true,
  retryStrategy: (attempt: number) => Math.min(50 * 2 ** Math.min(attempt, 5), 1000),
  // Subscriptions are restored by the bus itself (it knows which topics it still wants).
  autoResubscribe: false,
  lazyConnect: false,
};

/**
 * The options of one connection to a Cluster node: credentials and TLS from
 * the first URL of the list (every node of a Cluster shares them).
 */
export function nodeOptions(target: RedisTarget, connectionName: string): RedisOptions {
  const first = new URL(target.url.split(',')[0]!);
  return {
    ...base,
    connectionName,
    ...(first.username === '' ? {} : { username: decodeURIComponent(first.username) }),
    ...(first.password === '' ? {} : { password: decodeURIComponent(first.password) }),
    ...(first.protocol === 'rediss:' ? { tls: {} } : {}),
  };
}

/** A command client, or with a standalone Redis a subscriber client (Cluster subscriptions: ShardedSubscriptions). */
export function createRedisClient(target: RedisTarget, role: 'command' | 'subscriber', name: string): RedisClient {
  const connectionName = `sluice-${name}-${role}`;
  if (!target.cluster) return new Redis(target.url, { ...base, connectionName });
  const nodes = target.url.split(',').map((u) => {
    const p = new URL(u);
    return { host: p.hostname, port: Number(p.port || 6379) };
  });
  return new Cluster(nodes, {
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    clusterRetryStrategy: base.retryStrategy!,
    redisOptions: nodeOptions(target, connectionName),
  });
}
