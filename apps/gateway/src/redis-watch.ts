/**
 * The coordinator's own Redis connection (cluster mode), which decides
 * readiness: down until the first connection, down while Redis is
 * unreachable (the RedisDown flag every thread reads). Each change is
 * logged once (info when it is reached, warn when it is lost), never once
 * per failed command.
 */
import type { Config } from '@sluice/core';
import { createRedisClient, type RedisClient, RedisHealth, redisTarget } from '@sluice/redis';
import { counterFrom, gaugeFrom, type Logger, type Registry } from '@sluice/telemetry';
import { Flag, type SharedState } from './shared-state.ts';

export class RedisWatch {
  readonly client: RedisClient;
  readonly health: RedisHealth;

  constructor(cfg: Config, shared: SharedState, log: Logger) {
    shared.set(Flag.RedisDown);
    this.client = createRedisClient(redisTarget(cfg), 'command', 'coordinator');
    this.client.on('error', () => {
      // Reported through the state changes below.
    });
    this.health = new RedisHealth(this.client);
    this.health.onChange((state, prev) => {
      if (state === 'up') {
        shared.clear(Flag.RedisDown);
        log.info({ cluster: cfg.redisCluster }, prev === 'down' && this.health.outages > 0 ? 'redis reachable again' : 'redis connected');
        return;
      }
      shared.set(Flag.RedisDown);
      if (prev === 'connecting') log.warn('redis unreachable at start; readiness fails until it answers');
      else log.warn('redis unreachable: readiness fails, durable publishes answer unavailable, limits use the local store');
    });
  }

  /** sluice_redis_up and sluice_redis_outages_total. */
  registerMetrics(r: Registry, shared: SharedState): void {
    gaugeFrom(r, 'sluice_redis_up', '1 while the configured Redis answers, else 0.', () => (shared.has(Flag.RedisDown) ? 0 : 1), 'max');
    counterFrom(r, 'sluice_redis_outages_total', 'Times the connection to Redis was lost.', undefined, () => this.health.outages);
  }

  disconnect(): void {
    this.client.disconnect();
  }
}
