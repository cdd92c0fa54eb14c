/**
 * What stands behind a shard, made in one place: its broker, its limits
 * (with their window store) and when it may start listening. Embedded mode
 * (no REDIS_URL): the mesh of shards, the node's memory window store in the
 * coordinator and its upgrade windows in shared memory, ready at once.
 * Cluster mode: RedisBroker over the mesh, the Redis window store with the memory one as its fallback, one RedisHealth
 * for both, a histogram of Redis command times, ready once Redis answers
 * (or after a short wait, degraded as in an outage). No other part of the
 * shard needs to know which broker it has.
 */
import type { Config, TopicOwners } from '@sluice/core';
import type { RedisClient, RedisHealth } from '@sluice/redis';
import { IndexedHistogram, type Logger, type Registry } from '@sluice/telemetry';
import { SharedLimits, type LocalSettle, type SharedWindows } from './shared-limits.ts';
import { MeshBroker } from './mesh-broker.ts';
import { REDIS_OPS, RedisBroker, RedisOp } from './redis-broker.ts';
import type { ShardBroker } from './shard-broker.ts';

/** How long a shard waits for Redis before it listens anyway, degraded. */
const CONNECT_WAIT_MS = 3000;

export interface BackplaneDeps {
  readonly shard: number;
  readonly config: Config;
  readonly log: Logger;
  /** The shard's registry: cluster mode adds sluice_redis_command_seconds to it. */
  readonly registry: Registry;
  /** Settles with the node's memory window store in the coordinator (the shard's control port). */
  readonly localSettle: LocalSettle;
  /** Embedded mode: the node's upgrade windows in shared memory (the coordinator's buffers); undefined in cluster mode. */
  readonly windows: SharedWindows | undefined;
  /** The node's table of topic owners (shared memory): the mesh's. */
  readonly owners: TopicOwners;
}

export interface Backplane {
  readonly broker: ShardBroker;
  /** The node's mesh of shards (under the RedisBroker in cluster mode): presence goes through it. */
  readonly mesh: MeshBroker;
  readonly limits: SharedLimits;
  /** Resolves when the shard may listen; never rejects. */
  readonly ready: Promise<void>;
  /** Cluster mode: the broker's Redis connection and its health, for the other stores (user sockets). */
  readonly redis: { readonly client: RedisClient; readonly health: RedisHealth } | undefined;
}

/** Where a node with this config stores durable events. */
export function storeOf(cfg: Pick<Config, 'redisUrl'>): 'memory' | 'redis' {
  return cfg.redisUrl === undefined ? 'memory' : 'redis';
}

export function createBackplane(deps: BackplaneDeps): Backplane {
  const { shard, config: cfg, log } = deps;
  const mesh = new MeshBroker(shard, cfg.workers, cfg, log, deps.owners);
  if (cfg.redisUrl === undefined) {
    return {
      broker: mesh, mesh, limits: new SharedLimits(cfg, undefined, deps.localSettle, log, undefined, undefined, deps.windows),
      ready: Promise.resolve(), redis: undefined,
    };
  }
  const latency = new IndexedHistogram(deps.registry, 'sluice_redis_command_seconds',
    'How long Redis commands took, answered or failed (cluster mode), by operation.', 'op', REDIS_OPS);
  const broker = new RedisBroker(shard, mesh, cfg, log, (op, seconds) => latency.observe(op, seconds));
  const limits = new SharedLimits(cfg, broker.client, deps.localSettle, log, (seconds) => latency.observe(RedisOp.Window, seconds), broker.health);
  return { broker, mesh, limits, ready: broker.connected(CONNECT_WAIT_MS), redis: { client: broker.client, health: broker.health } };
}
