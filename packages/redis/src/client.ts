/**
 * ioredis clients as Sluice uses them: never queue a command while Redis is
 * unreachable (a publish must answer `unavailable` now, not later), never
 * wait more than a couple of seconds for a reply, reconnect forever with a
 * capped backoff. Standalone, or Cluster with sharded pub/sub.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { type Config, parseHostPorts } from '@sluice/core';
import type { RedisClient } from './bus.ts';

export interface RedisTarget {
  /** REDIS_URL: one URL, or with `cluster` a comma-separated list of seed nodes; with `sentinel`, credentials, database and scheme only. */
  readonly url: string;
  readonly cluster: boolean;
  /** REDIS_SENTINELS: the master is the one these Sentinels name, and a failover moves the connection to the new one. */
  readonly sentinel?: {
    readonly sentinels: readonly { readonly host: string; readonly port: number }[];
    readonly name: string;
    readonly password: string | undefined;
  };
}

/** The Redis a node's config names (cluster mode: REDIS_URL or REDIS_SENTINELS set). */
export function redisTarget(cfg: Pick<Config, 'redisUrl' | 'redisCluster' | 'redisSentinels' | 'redisSentinelName' | 'redisSentinelPassword'>): RedisTarget {
  if (cfg.redisUrl === undefined) throw new Error('redisTarget: no Redis is configured (embedded mode)');
  const sentinels = cfg.redisSentinels === undefined ? undefined : parseHostPorts(cfg.redisSentinels);
  return {
    url: cfg.redisUrl,
    cluster: cfg.redisCluster,
    ...(sentinels === undefined ? {} : { sentinel: { sentinels, name: cfg.redisSentinelName, password: cfg.redisSentinelPassword } }),
  };
}

/** How long a command may wait for its reply before it fails. */
export const COMMAND_TIMEOUT_MS = 2000;

/** Reconnect backoff: 100 ms doubling to a 1 s cap, forever. */
const backoff = (attempt: number): number => Math.min(50 * 2 ** Math.min(attempt, 5), 1000);

const base: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
  commandTimeout: COMMAND_TIMEOUT_MS,
  connectTimeout: 2000,
  enableAutoPipelining: true,
  retryStrategy: backoff,
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

/**
 * A command client, or with a standalone Redis a subscriber client (Cluster
 * subscriptions: ShardedSubscriptions). `commandTimeoutMs`: longer for a
 * connection whose commands may wait behind a WAIT (replica acks).
 */
export function createRedisClient(target: RedisTarget, role: 'command' | 'subscriber', name: string,
  commandTimeoutMs = COMMAND_TIMEOUT_MS): RedisClient {
  const connectionName = `sluice-${name}-${role}`;
  const options = commandTimeoutMs === COMMAND_TIMEOUT_MS ? base : { ...base, commandTimeout: commandTimeoutMs };
  if (target.sentinel !== undefined) return keepAlive(new Redis(sentinelOptions(target, connectionName, options)));
  if (!target.cluster) return keepAlive(new Redis(target.url, { ...options, connectionName }));
  const nodes = target.url.split(',').map((u) => {
    const p = new URL(u);
    return { host: p.hostname, port: Number(p.port || 6379) };
  });
  return new Cluster(nodes, {
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    clusterRetryStrategy: base.retryStrategy!,
    redisOptions: { ...nodeOptions(target, connectionName), commandTimeout: commandTimeoutMs },
  });
}

/**
 * A connection to the master that the Sentinels name: credentials, database
 * and TLS from the URL, the address from the Sentinels. The failover
 * detector listens to the Sentinels' +switch-master and reconnects at once,
 * even while the old master still answers (a partition), and a connection
 * that lands on a replica (a master demoted meanwhile) is dropped and made
 * again.
 */
export function sentinelOptions(target: RedisTarget, connectionName: string, options: RedisOptions = base): RedisOptions {
  const s = target.sentinel!;
  const u = new URL(target.url);
  const db = u.pathname.replace(/^\//, '');
  return {
    ...options,
    connectionName,
    sentinels: s.sentinels.map((x) => ({ host: x.host, port: x.port })),
    name: s.name,
    role: 'master',
    failoverDetector: true,
    ...(s.password === undefined ? {} : { sentinelPassword: s.password }),
    ...(u.username === '' ? {} : { username: decodeURIComponent(u.username) }),
    ...(u.password === '' ? {} : { password: decodeURIComponent(u.password) }),
    ...(db === '' ? {} : { db: Number(db) }),
    ...(u.protocol === 'rediss:' ? { tls: {}, enableTLSForSentinelMode: true } : {}),
    // A Sentinel that does not answer is skipped after this long.
    sentinelCommandTimeout: COMMAND_TIMEOUT_MS,
    sentinelRetryStrategy: backoff,
  };
}

/** How often a connection is asked PING. */
export const HEARTBEAT_MS = 1000;

/**
 * What keeps a standalone or Sentinel connection alive, as far as Sluice
 * can, until the caller closes it.
 *
 * - **A heartbeat.** A connection that stops answering without closing (a
 *   partition: its packets dropped, no reset) would look up to ioredis for
 *   as long as TCP retransmits, many minutes: readiness would stay green,
 *   subscriptions silent. So every connection is asked PING every second (a
 *   subscriber connection may PING too), and one whose PING got no answer
 *   within the command timeout (2 s) is dropped and made again: its `close`
 *   is an outage to RedisHealth and to everything that watches it
 *   (readiness, the broker's fallback, the limits' local store), and its
 *   `ready` after the partition resubscribes and catches up as after any
 *   outage. Redis that stalls for longer than the timeout (a fork on a huge
 *   dataset) is taken for a partition too: the connections come back when
 *   it answers.
 * - **No end the caller did not ask for.** ioredis 5.11 in Sentinel mode
 *   can end a connection for good in a failover: the failover detector of
 *   the previous connection disconnects the connector while the new one
 *   asks a Sentinel for the master, the connect fails with "Connection is
 *   closed." and ioredis gives up (status `end`, never reconnected; found
 *   by the Sentinel chaos scenario, about one failover in ten). A
 *   connection that ends without `disconnect()` or `quit()` is connected
 *   again after the reconnect backoff's first step.
 *
 * Cluster clients route their own nodes (not watched here); the sharded
 * subscription connections, plain ones, are.
 */
export function keepAlive<T extends Redis>(client: T, everyMs = HEARTBEAT_MS): T {
  let closing = false;
  for (const method of ['disconnect', 'quit'] as const) {
    const original = client[method].bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      // disconnect(true) is a reconnect, not a close.
      if (!(method === 'disconnect' && args[0] === true)) closing = true;
      return original(...args);
    };
  }
  let waiting = false;
  const timer = setInterval(() => {
    if (closing) {
      clearInterval(timer);
      return;
    }
    if (waiting || client.status !== 'ready') return;
    waiting = true;
    client.ping().then(
      () => {
        waiting = false;
      },
      () => {
        waiting = false;
        // Timed out on a connection that still looks open: drop it and connect again. A connection that closed
        // meanwhile is reconnecting already.
        if (client.status === 'ready') client.disconnect(true);
      },
    );
  }, everyMs);
  timer.unref();
  client.on('end', () => {
    if (closing) {
      clearInterval(timer);
      return;
    }
    setTimeout(() => {
      if (!closing && client.status === 'end') client.connect().catch(() => {
        // A failed connect ends it again: this handler tries once more.
      });
    }, backoff(1)).unref();
  });
  return client;
}
