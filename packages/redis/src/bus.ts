/**
 * The cluster's event bus, history and idempotency records in Redis.
 *
 * - A durable publish is one Lua script: check the idempotency record, trim
 *   the topic's stream by age and length (remembering the newest trimmed id
 *   as the topic's floor), XADD the event (its id is the stream id), record
 *   the idempotency key, and PUBLISH the event. One atomic step: an acked
 *   event is stored, and a repeat sees the first id.
 * - Keyed and ephemeral events are PUBLISHed only (pipelined by ioredis).
 * - Every key of a topic carries the hash tag `{tenant/topic}`, so that with
 *   Redis Cluster the script's keys and the topic's shard channel live on one
 *   shard; Cluster mode uses sharded pub/sub (SPUBLISH/SSUBSCRIBE). The keys
 *   are built in @sluice/core's keys.ts, with the rest of Sluice's keys.
 * - Subscriptions are per topic (never PSUBSCRIBE): a node without a
 *   subscriber is sent nothing. The wanted set is kept here and subscribed
 *   again whenever the subscriber connection comes back.
 */
import type { Cluster, Redis } from 'ioredis';
import type { ReplicaAcks } from './replica-acks.ts';
import { ShardedSubscriptions } from './sharded.ts';
import { type HistoryRead, idempotencyRedisKey, type StoredEvent, topicChannel, topicOfChannel, topicRedisKeys } from '@sluice/core';
import { compareEventIds, type EventId, parseEventId } from '@sluice/protocol';

export type RedisClient = Redis | Cluster;

export interface RedisBusOptions {
  /** REDIS_CLUSTER=1: sharded pub/sub, and idempotency records kept per (tenant, topic). */
  readonly cluster: boolean;
  readonly historySize: number;
  readonly historyTtlMs: number;
  readonly idempotencyTtlMs: number;
}

export interface DurablePublish {
  /** The tenant-scoped topic key. */
  readonly topic: string;
  readonly tenant: string;
  /** The event frame before and after its id (the script puts the stream id between them). */
  readonly head: string;
  readonly tail: string;
  readonly idempotencyKey: string | undefined;
}

/** A message as it arrives on a topic's channel. */
export interface BusMessage {
  readonly topic: string;
  readonly cls: number;
  readonly key: string | undefined;
  readonly id: string | undefined;
  readonly frame: string;
}

const SEP = '\x1f';

// Trims a stream by age (ids below ARGV minid), remembering the newest
// trimmed id in the floor key; Redis's clock in ms.
const TRIM_AGE = `
local function trimAge(stream, floor, minid, keepMs)
  local last = redis.call('XREVRANGE', stream, '(' .. minid, '-', 'COUNT', 1)
  if #last > 0 then
    -- The floor expires with its stream (every publish set the stream's expiry).
    local left = redis.call('PTTL', stream)
    redis.call('SET', floor, last[1][1], 'PX', left > 0 and left or keepMs)
    redis.call('XTRIM', stream, 'MINID', minid)
  end
end
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function minid(ttl)
  return (nowMs() - ttl) .. '-0'
end
`;

// KEYS: stream, floor, idempotency record. ARGV: maxlen, ttlMs, keepMs,
// idemTtlMs (0: no record), head, tail, publish command, channel, prefix.
const PUBLISH_LUA = `${TRIM_AGE}
local stream, floor, idem = KEYS[1], KEYS[2], KEYS[3]
local maxlen, ttl, keep, idemTtl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if idemTtl > 0 then
  local first = redis.call('GET', idem)
  if first then
    -- A write on this path too (the record's own expiry, set again): WAIT
    -- (WS_REDIS_ACK_REPLICAS) sees only this connection's writes, and this
    -- one comes after the first publish's, whichever connection made that.
    local left = redis.call('PTTL', idem)
    if left > 0 then redis.call('PEXPIRE', idem, left) end
    return {first, 1}
  end
end
-- A new stream (none, or the last one expired keep ms after its last
-- event): it vouches for ids from now - keep on, as a new log in memory.
if redis.call('EXISTS', stream) == 0 then redis.call('SET', floor, minid(keep), 'PX', keep) end
trimAge(stream, floor, minid(ttl), keep)
if maxlen > 0 then
  local len = redis.call('XLEN', stream)
  if len >= maxlen then
    local gone = redis.call('XRANGE', stream, '-', '+', 'COUNT', len - maxlen + 1)
    redis.call('SET', floor, gone[#gone][1], 'PX', keep)
  end
end
local id = redis.call('XADD', stream, 'MAXLEN', maxlen, '*', 'h', ARGV[5], 't', ARGV[6])
if maxlen == 0 then redis.call('SET', floor, id, 'PX', keep) end
-- Both expire keep ms after the later of the clock and the id (an id runs
-- ahead of a clock that stepped back): a stream that is gone had its last
-- event more than keep ms ago, which the reads and the line above rely on.
local at = math.max(nowMs(), tonumber(string.match(id, '^(%d+)'))) + keep
redis.call('PEXPIREAT', stream, at)
redis.call('PEXPIREAT', floor, at)
if idemTtl > 0 then redis.call('SET', idem, id, 'PX', idemTtl) end
redis.call(ARGV[7], ARGV[8], ARGV[9] .. id .. '${SEP}' .. ARGV[5] .. id .. ARGV[6])
return {id, 0}
`;

// KEYS: stream, floor. ARGV: since, ttlMs, keepMs, count.
// Returns {0} when the topic has no stream, else {1, floor, events}.
const READ_LUA = `${TRIM_AGE}
local stream, floor = KEYS[1], KEYS[2]
if redis.call('EXISTS', stream) == 0 then return {0, minid(tonumber(ARGV[3]))} end
trimAge(stream, floor, minid(tonumber(ARGV[2])), tonumber(ARGV[3]))
local f = redis.call('GET', floor) or '0-0'
return {1, f, redis.call('XRANGE', stream, '(' .. ARGV[1], '+', 'COUNT', ARGV[4])}
`;

// The newest events, for a read without since. KEYS: stream, floor. ARGV:
// ttlMs, keepMs, count. Returns {0} when the topic has no stream, else
// {1, floor, events newest first, minid}.
const LATEST_LUA = `${TRIM_AGE}
local stream, floor = KEYS[1], KEYS[2]
if redis.call('EXISTS', stream) == 0 then return {0} end
local m = minid(tonumber(ARGV[1]))
trimAge(stream, floor, m, tonumber(ARGV[2]))
local f = redis.call('GET', floor) or '0-0'
return {1, f, redis.call('XREVRANGE', stream, '+', '-', 'COUNT', ARGV[3]), m}
`;

// A topic's position (see Broker.subscribe). KEYS: stream, floor. Its newest
// id; with no entries left, the newest trimmed one (the floor: all were
// trimmed); with neither, one ms before Redis's clock (an XADD in this ms
// gets <now>-0, and any later one more).
const POSITION_LUA = `
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then return last[1][1] end
-- A floor expires with its stream, unless Redis evicted or lost the
-- stream alone: with the stream gone, that id may be older than keep and a
-- since of it would not recover.
if redis.call('EXISTS', KEYS[1]) == 1 then
  local f = redis.call('GET', KEYS[2])
  if f then return f end
end
local t = redis.call('TIME')
return (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 1) .. '-0'
`;

// A position mark (WS_POSITION_REFRESH_MS): the topic's position now,
// PUBLISHed on its channel in the same step, so after every event at or
// below it. The newer of its newest id (entry, or the floor while the
// stream exists) and one ms before Redis's clock (any later XADD is above
// it); an existing stream's last id is moved up to it, so that a later
// XADD is above it even if the clock steps back. KEYS: stream, floor.
// ARGV: publish command, channel, message prefix, frame head, frame tail.
// Returns the position.
const MARK_LUA = `
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
local t = redis.call('TIME')
local pos = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 1) .. '-0'
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 and later(last[1][1], pos) then pos = last[1][1] end
if redis.call('EXISTS', KEYS[1]) == 1 then
  local f = redis.call('GET', KEYS[2])
  if f and later(f, pos) then pos = f end
  redis.call('XSETID', KEYS[1], pos)
end
redis.call(ARGV[1], ARGV[2], ARGV[3] .. pos .. '${SEP}' .. ARGV[4] .. pos .. ARGV[5])
return pos
`;

/** The bus class of a durable event (EventClass.Durable). */
const DURABLE_CLASS = 0;
/** The bus class of a position mark (cls of its message; events use EventClass, 0 to 2). */
export const MARK_CLASS = 3;

interface ScriptedClient {
  sluicePublish(stream: string, floor: string, idem: string, ...argv: (string | number)[]): Promise<[string, number]>;
  sluiceRead(stream: string, floor: string, ...argv: (string | number)[]): Promise<unknown[]>;
  sluiceLatest(stream: string, floor: string, ...argv: (string | number)[]): Promise<unknown[]>;
  sluicePosition(stream: string, floor: string): Promise<string>;
  sluiceMark(stream: string, floor: string, ...argv: string[]): Promise<string>;
}

/** Where subscriptions go: a standalone subscriber connection, or per-master connections with Cluster. */
export type Subscriptions = RedisClient | ShardedSubscriptions;

/** WS_REDIS_ACK_REPLICAS > 0: durable publishes go on their own connection, each acknowledged once replicas confirmed it. */
export interface DurableWriter {
  readonly client: RedisClient;
  readonly acks: ReplicaAcks;
}

/** A durable publish that Redis stored but not enough replicas confirmed in time (or the connection changed before they could). */
export class ReplicaAckFailed extends Error {
  override readonly name = 'ReplicaAckFailed';
}

export class RedisBus {
  private readonly wanted = new Set<string>();
  /** Where durable publishes go: the command connection, or the writer's. */
  private readonly writer: RedisClient;
  private handler: (m: BusMessage) => void = () => {};
  private readonly keepMs: number;
  /** Commands sent, for the metrics and the tests that count them. */
  commands = 0;

  constructor(
    private readonly cmd: RedisClient,
    private readonly sub: Subscriptions,
    private readonly opts: RedisBusOptions,
    private readonly durable?: DurableWriter,
  ) {
    this.writer = durable?.client ?? cmd;
    if (durable !== undefined) durable.client.defineCommand('sluicePublish', { numberOfKeys: 3, lua: PUBLISH_LUA });
    // Tombstone: a topic's floor and last id outlive its events by an hour
    // (or a TTL), as in memory, so that a client whose `since` is the last id
    // still recovers after the events expired.
    this.keepMs = opts.historyTtlMs + Math.max(opts.historyTtlMs, 3_600_000);
    cmd.defineCommand('sluicePublish', { numberOfKeys: 3, lua: PUBLISH_LUA });
    cmd.defineCommand('sluiceRead', { numberOfKeys: 2, lua: READ_LUA });
    cmd.defineCommand('sluiceLatest', { numberOfKeys: 2, lua: LATEST_LUA });
    cmd.defineCommand('sluicePosition', { numberOfKeys: 2, lua: POSITION_LUA });
    cmd.defineCommand('sluiceMark', { numberOfKeys: 2, lua: MARK_LUA });
    const onMessage = (channel: string, payload: string): void => {
      const m = decodeMessage(channel, payload);
      if (m !== undefined) this.handler(m);
    };
    if (sub instanceof ShardedSubscriptions) sub.onMessage(onMessage);
    else sub.on('message', onMessage);
  }

  onMessage(handler: (m: BusMessage) => void): void {
    this.handler = handler;
  }

  /** Stores and publishes a durable event; resolves with its stream id (the first id for a repeated key). */
  async publishDurable(p: DurablePublish): Promise<{ id: string; duplicate: boolean }> {
    const k = topicRedisKeys(p.topic);
    const idem = p.idempotencyKey === undefined ? k.stream : idempotencyRedisKey(this.opts.cluster, p.tenant, p.topic, p.idempotencyKey);
    this.commands++;
    const acks = this.durable?.acks;
    const mark = acks?.before(k.stream);
    const [id, dup] = await (this.writer as unknown as ScriptedClient).sluicePublish(
      k.stream, k.floor, idem,
      this.opts.historySize, this.opts.historyTtlMs, this.keepMs, p.idempotencyKey === undefined ? 0 : this.opts.idempotencyTtlMs,
      p.head, p.tail, this.opts.cluster ? 'SPUBLISH' : 'PUBLISH', topicChannel(p.topic), `${DURABLE_CLASS}${SEP}${SEP}`,
    );
    if (acks !== undefined) {
      if (!(await acks.confirm(mark))) throw new ReplicaAckFailed(`stored as ${id}, but not confirmed by the replicas in time`);
    }
    return { id, duplicate: dup === 1 };
  }

  /** Publishes a keyed or ephemeral event (not stored). */
  async publishVolatile(topic: string, cls: number, key: string | undefined, frame: string): Promise<void> {
    this.commands++;
    const payload = `${cls}${SEP}${key ?? ''}${SEP}${SEP}${frame}`;
    if (this.opts.cluster) await this.cmd.spublish(topicChannel(topic), payload);
    else await this.cmd.publish(topicChannel(topic), payload);
  }

  /** Resolves once Redis confirmed the subscription; the topic stays wanted (and is subscribed again after a reconnect) even if this fails. */
  async subscribe(topic: string): Promise<void> {
    this.wanted.add(topic);
    this.commands++;
    await this.sub.subscribe(topicChannel(topic));
  }

  unsubscribe(topic: string): void {
    if (!this.wanted.delete(topic)) return;
    this.commands++;
    if (this.sub instanceof ShardedSubscriptions) {
      this.sub.unsubscribe(topicChannel(topic));
      return;
    }
    this.sub.unsubscribe(topicChannel(topic)).catch(() => {
      // Disconnected: the subscription went with the connection.
    });
  }

  /**
   * The topic's position: an id every event stored after this read is above
   * (read after the subscription is confirmed, every durable event above it
   * reaches the subscriber).
   */
  async position(topic: string): Promise<string> {
    const k = topicRedisKeys(topic);
    this.commands++;
    return (this.cmd as unknown as ScriptedClient).sluicePosition(k.stream, k.floor);
  }

  /**
   * Publishes a position mark on the topic's channel (see MARK_LUA): its
   * subscribers get a message of class MARK_CLASS whose id is the position
   * and whose frame is `head` + position + `tail`. Resolves with the position.
   */
  async mark(topic: string, head: string, tail: string): Promise<string> {
    const k = topicRedisKeys(topic);
    this.commands++;
    return (this.cmd as unknown as ScriptedClient).sluiceMark(
      k.stream, k.floor, this.opts.cluster ? 'SPUBLISH' : 'PUBLISH', topicChannel(topic), `${MARK_CLASS}${SEP}${SEP}`, head, tail,
    );
  }

  /** Redis's clock, in ms: stream ids are made from it. */
  async now(): Promise<number> {
    this.commands++;
    const [s, us] = await this.cmd.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  }

  /** Every wanted topic, to subscribe again after the subscriber connection came back. */
  get topics(): ReadonlySet<string> {
    return this.wanted;
  }

  /** Subscribes every wanted topic again (after a reconnect); resolves when Redis confirmed them all. */
  async resubscribe(): Promise<void> {
    if (this.wanted.size === 0) return;
    const channels = [...this.wanted].map(topicChannel);
    this.commands++;
    if (this.sub instanceof ShardedSubscriptions) await this.sub.resubscribe(channels);
    else await this.sub.subscribe(...channels);
  }

  /**
   * The stored events after `since` (at most `limit`, the oldest), and
   * whether nothing after it was trimmed; without `since`, the newest
   * `limit`. HistoryRead says what `recovered` means in each case.
   */
  async read(topic: string, since: string | undefined, limit?: number): Promise<HistoryRead> {
    // The stream never holds more than WS_HISTORY_SIZE events.
    const count = Math.max(1, Math.min(this.opts.historySize, limit ?? this.opts.historySize));
    if (since === undefined) return this.latest(topic, count);
    const s = parseEventId(since);
    if (s === undefined) return { events: [], recovered: false };
    const k = topicRedisKeys(topic);
    this.commands++;
    const r = await (this.cmd as unknown as ScriptedClient).sluiceRead(k.stream, k.floor, since, this.opts.historyTtlMs, this.keepMs, count);
    if (r[0] === 0) {
      // No stream: it never existed, or expired keepMs after its last event
      // (every publish sets its expiry). As in memory, ids from now - keepMs
      // (ttl + tombstone) on are vouched for.
      return { events: [], recovered: compareEventIds(s, floorOf(r[1] as string)) >= 0 };
    }
    const floor = parseEventId(r[1] as string) ?? { ms: 0, seq: 0 };
    const events: StoredEvent[] = [];
    for (const [id, fields] of r[2] as [string, string[]][]) {
      events.push({ id, frame: frameOf(id, fields) });
    }
    return { events, recovered: compareEventIds(s, floor) >= 0 };
  }

  /** The newest `limit` events, oldest first; recovered when they are all the stream holds and nothing from now - ttl on was trimmed. */
  private async latest(topic: string, limit: number): Promise<HistoryRead> {
    const k = topicRedisKeys(topic);
    this.commands++;
    // One more than asked for: whether the limit left any out.
    const r = await (this.cmd as unknown as ScriptedClient).sluiceLatest(k.stream, k.floor, this.opts.historyTtlMs, this.keepMs, limit + 1);
    // No stream: as in memory, ids from now - ttl on are vouched for, and none was stored.
    if (r[0] === 0) return { events: [], recovered: true };
    const floor = parseEventId(r[1] as string) ?? { ms: 0, seq: 0 };
    const newest = r[2] as [string, string[]][];
    const events: StoredEvent[] = [];
    for (let i = Math.min(limit, newest.length) - 1; i >= 0; i--) {
      const [id, fields] = newest[i]!;
      events.push({ id, frame: frameOf(id, fields) });
    }
    return { events, recovered: newest.length <= limit && compareEventIds(floorOf(r[3] as string), floor) >= 0 };
  }
}

/** `minid` answered by the read script is `<now - ttl>-0`: ids below it may be gone. */
function floorOf(minid: string): EventId {
  const ms = Number(minid.slice(0, minid.indexOf('-')));
  return { ms: ms - 1, seq: Number.MAX_SAFE_INTEGER };
}

function frameOf(id: string, fields: string[]): string {
  let head = '';
  let tail = '';
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === 'h') head = fields[i + 1]!;
    else if (fields[i] === 't') tail = fields[i + 1]!;
  }
  return head + id + tail;
}

/** `<cls>\x1f<key>\x1f<id>\x1f<frame>` on channel `sluice:c:{<topic>}`. */
export function decodeMessage(channel: string, payload: string): BusMessage | undefined {
  const topic = topicOfChannel(channel);
  if (topic === undefined) return undefined;
  const a = payload.indexOf(SEP);
  const b = payload.indexOf(SEP, a + 1);
  const c = payload.indexOf(SEP, b + 1);
  if (a < 0 || b < 0 || c < 0) return undefined;
  const key = payload.slice(a + 1, b);
  const id = payload.slice(b + 1, c);
  return {
    topic,
    cls: Number(payload.slice(0, a)),
    key: key === '' ? undefined : key,
    id: id === '' ? undefined : id,
    frame: payload.slice(c + 1),
  };
}
