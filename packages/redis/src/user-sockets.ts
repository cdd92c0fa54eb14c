/**
 * The cluster-wide UserSocketStore (WS_MAX_USER_SOCKETS) in Redis.
 *
 * - A user's count is a hash (`userSocketsKey`): one field per holder (a
 *   shard generation) with its sockets of the user. A claim is one script
 *   per key (HINCRBY, then HGETALL, atomic), the claims of a batch run
 *   together (ioredis pipelines them); the count is summed over the live
 *   holders only, and claims beyond `max` are given back at once.
 * - Liveness: `HOLDERS_KEY`, a sorted set of holders scored by their last
 *   beat, read at most once a second per store. A holder id begins with
 *   the ms it started at (`<startMs>.<rest>`): one missing from the set
 *   is new (counted) if it started within the last `10 * holderTtlMs`, and
 *   otherwise long dead (pruned from the set). A holder retired after an
 *   outage is scored minus the time it retired, dead at once. A dead
 *   holder's fields are deleted when a claim sees them.
 * - Two holders claiming the last place at the same moment may both see the
 *   other's claim and both refuse (never both accept): the cap is strict.
 * - Each hash expires a day after its last claim, so that the keys of users
 *   who left do not pile up.
 */
import type { Cluster, Redis } from 'ioredis';
import { HOLDER_TTL_MS, HOLDERS_KEY, type UserSocketStore, userSocketsKeyOf } from '@sluice/core';

const CLAIM_LUA = `
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('HGETALL', KEYS[1])
`;

const RELEASE_LUA = `
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return left
`;

const KEY_TTL_MS = 86_400_000;
const LIVE_CACHE_MS = 1000;

export class RedisUserSockets implements UserSocketStore {
  /** Commands sent, for metrics and tests. */
  commands = 0;
  /** Every holder in the set with its last beat, as last read. */
  private beats = new Map<string, number>();
  private beatsAt = -Infinity;

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly holderTtlMs = HOLDER_TTL_MS,
  ) {}

  async claim(holder: string, keys: readonly string[], max: number, now: number): Promise<boolean[]> {
    const wanted = new Map<string, number>();
    for (const k of keys) wanted.set(k, (wanted.get(k) ?? 0) + 1);
    const [beats] = await Promise.all([this.holders(now), this.beat(holder, now)]);
    const granted = new Map<string, number>();
    await Promise.all([...wanted].map(async ([key, n]) => {
      const redisKey = userSocketsKeyOf(key);
      this.commands++;
      const flat = (await this.redis.eval(CLAIM_LUA, 1, redisKey, holder, n, KEY_TTL_MS)) as string[];
      let total = 0;
      const dead: string[] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const h = flat[i]!;
        if (h === holder || this.alive(beats, h, now)) total += Number(flat[i + 1]);
        else dead.push(h);
      }
      // Total includes these n; the claims that do not fit go back at once.
      const fit = Math.max(0, Math.min(n, max - (total - n)));
      granted.set(key, fit);
      const back: Promise<unknown>[] = [];
      if (fit < n) back.push(this.give(redisKey, holder, n - fit));
      if (dead.length > 0) {
        this.commands++;
        back.push(this.redis.hdel(redisKey, ...dead));
      }
      await Promise.all(back);
    }));
    return keys.map((k) => {
      const left = granted.get(k)!;
      granted.set(k, left - 1);
      return left > 0;
    });
  }

  async release(holder: string, counts: ReadonlyMap<string, number>): Promise<void> {
    await Promise.all([...counts].map(([key, n]) => this.give(userSocketsKeyOf(key), holder, n)));
  }

  async beat(holder: string, now: number): Promise<void> {
    this.commands++;
    await this.redis.zadd(HOLDERS_KEY, now, holder);
  }

  /**
   * Scored minus the time it retired: dead to every store from its next read
   * of the holders (within a second), and kept in the set until its id's
   * start time alone says it is dead.
   */
  async retire(holder: string): Promise<void> {
    const now = Date.now();
    this.commands++;
    await this.redis.zadd(HOLDERS_KEY, -now, holder);
    this.beats.set(holder, -now);
  }

  async count(key: string, now: number): Promise<number> {
    const beats = await this.holders(now);
    this.commands++;
    const all = await this.redis.hgetall(userSocketsKeyOf(key));
    let n = 0;
    for (const [h, c] of Object.entries(all)) if (this.alive(beats, h, now)) n += Number(c);
    return n;
  }

  private alive(beats: ReadonlyMap<string, number>, holder: string, now: number): boolean {
    const at = beats.get(holder);
    if (at !== undefined) return at >= 0 && now - at <= this.holderTtlMs;
    const started = Number(holder.slice(0, holder.indexOf('.')));
    return Number.isFinite(started) && now - started <= 10 * this.holderTtlMs;
  }

  private give(redisKey: string, holder: string, n: number): Promise<unknown> {
    this.commands++;
    return this.redis.eval(RELEASE_LUA, 1, redisKey, holder, n);
  }

  /** Every holder with its last beat; read from Redis at most once a second (the long dead are pruned then). */
  private async holders(now: number): Promise<ReadonlyMap<string, number>> {
    if (now - this.beatsAt < LIVE_CACHE_MS) return this.beats;
    this.commands += 2;
    const [, flat] = await Promise.all([
      // Beats and retirements (negative) older than ten TTLs: their ids' start times say they are dead.
      this.redis.zremrangebyscore(HOLDERS_KEY, -(now - 10 * this.holderTtlMs), now - 10 * this.holderTtlMs),
      this.redis.zrange(HOLDERS_KEY, 0, -1, 'WITHSCORES'),
    ]);
    const beats = new Map<string, number>();
    for (let i = 0; i + 1 < flat.length; i += 2) beats.set(flat[i]!, Number(flat[i + 1]));
    this.beats = beats;
    this.beatsAt = now;
    return beats;
  }
}
