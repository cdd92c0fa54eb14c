/**
 * The push worker's configuration, from the environment. As the gateway's:
 * every bad variable is named in one error, so one start shows them all.
 */
import { parseHostPorts } from '@sluice/core';

export interface PushWorkerConfig {
  /** With redisSentinels: credentials, database and TLS only (`redis://<name>` when REDIS_URL is unset). */
  readonly redisUrl: string;
  readonly redisCluster: boolean;
  /** REDIS_SENTINELS, parsed: the master is the one they name (REDIS_SENTINEL_NAME), as in the gateway. */
  readonly redisSentinels: readonly { readonly host: string; readonly port: number }[] | undefined;
  readonly redisSentinelName: string;
  readonly redisSentinelPassword: string | undefined;
  readonly queue: string;
  readonly webhookUrl: string;
  readonly webhookSecret: string | undefined;
  readonly webhookTimeoutMs: number;
  readonly adminUrl: string;
  readonly adminToken: string | undefined;
  readonly concurrency: number;
  readonly attempts: number;
  readonly backoffMs: number;
  readonly metricsPort: number;
  readonly metricsHost: string;
  readonly logLevel: string;
}

export class PushConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`push worker configuration is invalid:\n  ${problems.join('\n  ')}`);
  }
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
const QUEUE_NAME = /^[A-Za-z0-9_.-]{1,100}$/;

export function loadPushConfig(env: Record<string, string | undefined>): PushWorkerConfig {
  const problems: string[] = [];
  const str = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v === '' ? undefined : v;
  };
  const url = (name: string, required: boolean, protocols: readonly string[]): string | undefined => {
    const v = str(name);
    if (v === undefined) {
      if (required) problems.push(`${name} is required (${protocols.join(' or ')} URL)`);
      return undefined;
    }
    const parts = name === 'REDIS_URL' ? v.split(',') : [v];
    for (const p of parts) {
      let ok: boolean;
      try { ok = protocols.includes(new URL(p).protocol); } catch { ok = false; }
      if (!ok) {
        problems.push(`${name} must be ${name === 'REDIS_URL' ? 'one or more comma-separated ' : 'a '}${protocols.join(' or ')} URL`);
        return undefined;
      }
    }
    return v;
  };
  const int = (name: string, def: number, min: number, max: number): number => {
    const v = str(name);
    if (v === undefined) return def;
    if (!/^[0-9]{1,10}$/.test(v) || Number(v) < min || Number(v) > max) {
      problems.push(`${name} must be a whole number from ${min} to ${max}`);
      return def;
    }
    return Number(v);
  };
  const bool = (name: string): boolean => {
    const v = str(name);
    if (v === undefined || v === '0' || v === 'false') return false;
    if (v === '1' || v === 'true') return true;
    problems.push(`${name} must be 1, 0, true or false`);
    return false;
  };
  const sentinelsRaw = str('REDIS_SENTINELS');
  const redisSentinels = sentinelsRaw === undefined ? undefined : parseHostPorts(sentinelsRaw);
  if (sentinelsRaw !== undefined && redisSentinels === undefined) problems.push('REDIS_SENTINELS must be a comma-separated list of host:port');
  const redisSentinelName = str('REDIS_SENTINEL_NAME') ?? 'mymaster';
  if (!/^[A-Za-z0-9._-]{1,100}$/.test(redisSentinelName)) problems.push('REDIS_SENTINEL_NAME must be a master name as in sentinel.conf');
  const redisSentinelPassword = str('REDIS_SENTINEL_PASSWORD');
  if (sentinelsRaw === undefined && (str('REDIS_SENTINEL_NAME') !== undefined || redisSentinelPassword !== undefined)) {
    problems.push('REDIS_SENTINEL_NAME and REDIS_SENTINEL_PASSWORD need REDIS_SENTINELS');
  }
  const redisUrl = url('REDIS_URL', sentinelsRaw === undefined, ['redis:', 'rediss:']) ?? (sentinelsRaw === undefined ? undefined : `redis://${redisSentinelName}`);
  const redisCluster = bool('REDIS_CLUSTER');
  if (sentinelsRaw !== undefined && redisCluster) problems.push('REDIS_CLUSTER must be unset with REDIS_SENTINELS');
  const queue = str('WS_PUSH_QUEUE') ?? 'sluice-push';
  if (!QUEUE_NAME.test(queue)) problems.push('WS_PUSH_QUEUE must match ^[A-Za-z0-9_.-]{1,100}$');
  const webhookUrl = url('WS_PUSH_WEBHOOK_URL', true, ['http:', 'https:']);
  const webhookSecret = str('WS_PUSH_WEBHOOK_SECRET');
  if (webhookSecret !== undefined && webhookSecret.length < 16) problems.push('WS_PUSH_WEBHOOK_SECRET must be at least 16 characters');
  const adminUrl = url('SLUICE_ADMIN_URL', true, ['http:', 'https:']);
  const adminToken = str('ADMIN_TOKEN');
  const webhookTimeoutMs = int('PUSH_WEBHOOK_TIMEOUT_MS', 5000, 10, 120_000);
  const concurrency = int('PUSH_CONCURRENCY', 10, 1, 1000);
  const attempts = int('PUSH_ATTEMPTS', 5, 1, 100);
  const backoffMs = int('PUSH_BACKOFF_MS', 1000, 1, 3_600_000);
  const metricsPort = int('PUSH_METRICS_PORT', 9465, 0, 65535);
  const metricsHost = str('PUSH_METRICS_HOST') ?? '0.0.0.0';
  const logLevel = str('LOG_LEVEL') ?? 'info';
  if (!LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL must be one of ${LEVELS.join(', ')}`);
  if (problems.length > 0) throw new PushConfigError(problems);
  return { redisUrl: redisUrl!, redisCluster, redisSentinels, redisSentinelName, redisSentinelPassword, queue, webhookUrl: webhookUrl!, webhookSecret, webhookTimeoutMs, adminUrl: adminUrl!.replace(/\/+$/, ''),
    adminToken, concurrency, attempts, backoffMs, metricsPort, metricsHost, logLevel };
}
