/**
 * The cluster-wide WindowStore: sliding-window counters in Redis, one Lua
 * script per key per settle, pipelined.
 *
 * - Keys: `<prefix>{<key>}:<bucket>`, a hash with fields `h` (hits) and `d`
 *   (demand) per bucket of `windowMs` (bucket = floor(now / windowMs)). The
 *   hash tag puts both buckets a script reads on one Cluster slot. Braces and
 *   `%` in a key are percent-encoded so that a key cannot move the tag, and
 *   the empty key is `%`, as an empty tag would not count.
 * - Each write sets PEXPIRE to 2 * windowMs - (now mod windowMs): a bucket
 *   lives until it can no longer be the previous bucket of any `now`.
 * - The script is slidingWindowState of @sluice/core, operation for
 *   operation in the same order (doubles in both), so memory and Redis give
 *   the same answers; the contract tests check it.
 * - Time is the caller's `now`, not Redis's TIME: a shard's batch is counted
 *   in the bucket of the moment its hits were taken, buckets are aligned on
 *   every node, and tests can drive the clock. Shards' clocks must agree
 *   within a small part of a window (NTP does; a skew of d ms moves about
 *   count * d / windowMs hits between buckets, and TTLs are set in Redis's
 *   clock, so a skew also shortens a bucket's life by as much).
 * - Each key of a window must always be settled with the same `windowMs`.
 *
 * Failure: the settle rejects as soon as any of its calls fails, or after
 * `timeoutMs`; it never hangs. The client should be made to fail fast too,
 * as `createRedisClient` does: `enableOfflineQueue: false` (no queueing
 * while disconnected), `maxRetriesPerRequest: 0` and a `commandTimeout`.
 * A rejected settle may still have been applied in part (the scripts that
 * ran before the failure): settling the same hits again in Redis would count
 * those twice, on the strict side.
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { checkSettle, type WindowHit, type WindowState, type WindowStore, WINDOW_PREFIX, windowRedisKey } from '@sluice/core';

// KEYS[1]: the bucket `now` is in; KEYS[2]: the one before.
// ARGV: hits, demand, limit, windowMs, now (integers).
// Returns {count, retryAfterMs, demand}. Mirrors slidingWindowState.
export const WINDOW_LUA = `
local hits = tonumber(ARGV[1])
local demand = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local elapsed = now - math.floor(now / w) * w
local cur
local dcur
if hits > 0 or demand > 0 then
  cur = redis.call('HINCRBY', KEYS[1], 'h', hits)
  dcur = redis.call('HINCRBY', KEYS[1], 'd', demand)
  redis.call('PEXPIRE', KEYS[1], 2 * w - elapsed)
else
  local c = redis.call('HMGET', KEYS[1], 'h', 'd')
  cur = tonumber(c[1]) or 0
  dcur = tonumber(c[2]) or 0
end
local p = redis.call('HMGET', KEYS[2], 'h', 'd')
local prev = tonumber(p[1]) or 0
local dprev = tonumber(p[2]) or 0
local count = cur + math.ceil((prev * (w - elapsed)) / w)
local d = dcur + math.ceil((dprev * (w - elapsed)) / w)
if count < limit then return {count, 0, d} end
if limit < 1 then return {count, 2 * w - elapsed, d} end
if cur < limit then
  local room = limit - 1 - cur
  return {count, w - elapsed - math.floor((room * w) / prev), d}
end
return {count, w - elapsed + w - math.floor(((limit - 1) * w) / cur), d}
`;

const SHA = createHash('sha1').update(WINDOW_LUA).digest('hex');

export interface RedisWindowStoreOptions {
  /** Key prefix. Default `sluice:win:`. */
  readonly prefix?: string;
  /** A settle not answered in this many ms rejects. Default 500. */
  readonly timeoutMs?: number;
}

type Call = readonly [k1: string, k2: string, hits: number, demand: number, limit: number, windowMs: number, now: number];

export class RedisWindowStore implements WindowStore {
  /** Script calls sent (EVALSHA, and EVAL after a NOSCRIPT), for metrics and tests. */
  commands = 0;
  readonly prefix: string;
  readonly timeoutMs: number;

  constructor(
    private readonly redis: Redis | Cluster,
    opts: RedisWindowStoreOptions = {},
  ) {
    this.prefix = opts.prefix ?? WINDOW_PREFIX;
    this.timeoutMs = opts.timeoutMs ?? 500;
  }

  /** The Redis key of `key`'s bucket `bucket` (`windowRedisKey` of @sluice/core). */
  keyOf(key: string, bucket: number): string {
    return windowRedisKey(this.prefix, key, bucket);
  }

  async settle(hits: readonly WindowHit[], limit: number, windowMs: number, now: number): Promise<readonly WindowState[]> {
    checkSettle(hits, limit, windowMs, now);
    if (hits.length === 0) return [];
    const t = Math.floor(now);
    const b = Math.floor(t / windowMs);
    const calls: Call[] = hits.map((h) => [this.keyOf(h.key, b), this.keyOf(h.key, b - 1), h.hits, h.demand ?? h.hits, limit, windowMs, t]);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`window store: no answer from Redis in ${this.timeoutMs} ms`)), this.timeoutMs);
    });
    const work = this.redis.isCluster ? this.concurrent(calls) : this.pipelined(calls);
    // After a timeout the calls may still fail: that is already reported.
    work.catch(() => undefined);
    try {
      const replies = await Promise.race([work, timeout]);
      return replies.map(toState);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Standalone: one pipeline of EVALSHA; the calls that met NOSCRIPT go again as EVAL in a second one. */
  private async pipelined(calls: readonly Call[]): Promise<unknown[]> {
    const first = await this.exec(calls, 'evalsha');
    const out: unknown[] = [];
    const again: number[] = [];
    for (let i = 0; i < calls.length; i++) {
      const [err, val] = first[i]!;
      if (err === null) out[i] = val;
      else if (isNoScript(err)) again.push(i);
      else throw err;
    }
    if (again.length > 0) {
      const second = await this.exec(again.map((i) => calls[i]!), 'eval');
      again.forEach((i, j) => {
        const [err, val] = second[j]!;
        if (err !== null) throw err;
        out[i] = val;
      });
    }
    return out;
  }

  private async exec(calls: readonly Call[], how: 'evalsha' | 'eval'): Promise<[Error | null, unknown][]> {
    const p = this.redis.pipeline();
    for (const [k1, k2, ...args] of calls) {
      if (how === 'evalsha') p.evalsha(SHA, 2, k1, k2, ...args);
      else p.eval(WINDOW_LUA, 2, k1, k2, ...args);
    }
    this.commands += calls.length;
    const res = await p.exec();
    if (res === null || res.length !== calls.length) throw new Error('window store: Redis pipeline gave no result');
    return res;
  }

  /**
   * Cluster: the calls go out at once and ioredis routes each by its slot
   * (a pipeline must stay in one slot); with `enableAutoPipelining` the
   * client writes those for one node together.
   */
  private async concurrent(calls: readonly Call[]): Promise<unknown[]> {
    return Promise.all(calls.map(async ([k1, k2, ...args]) => {
      this.commands++;
      try {
        return await this.redis.evalsha(SHA, 2, k1, k2, ...args);
      } catch (err) {
        if (!isNoScript(err)) throw err;
        this.commands++;
        return this.redis.eval(WINDOW_LUA, 2, k1, k2, ...args);
      }
    }));
  }
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

function toState(reply: unknown): WindowState {
  if (!Array.isArray(reply) || reply.length !== 3 || !reply.every((v) => typeof v === 'number')) {
    throw new Error(`window store: unexpected reply from the script: ${JSON.stringify(reply)}`);
  }
  const [count, retryAfterMs, demand] = reply as [number, number, number];
  return { count, retryAfterMs, demand };
}
