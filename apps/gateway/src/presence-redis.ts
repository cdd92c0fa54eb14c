/**
 * Presence across the cluster (cluster mode), for the presence tables one
 * shard owns. The node's own counts (the sum of its shards' sources) live in
 * Redis, one hash per topic and node, `sluice:p:{<topic key>}:<node>`: user
 * to connections, and `\0seq`, the number of the node's last write. Each
 * write is one script (atomic): the changes, the new seq, a PEXPIRE of
 * WS_PRESENCE_TTL_MS, and a PUBLISH (SPUBLISH with Cluster) of the changes on
 * the topic's presence channel `sluice:pc:{<topic key>}`. A node writes at
 * most once per topic per WS_PRESENCE_DIFF_MS: Redis calls grow with the
 * batches, not with joins.
 *
 * Every other node with sockets on the topic subscribes to the channel and
 * reads the hashes of the nodes alive once (at its first subscriber), then
 * applies messages in seq order per node: an old one is dropped, one after
 * a gap makes it read that node's hash again. Other nodes are sources of the
 * table (`n:<node>`): their users count as the local shards' do.
 *
 * Healing: a node's lease ending (node-registry.ts) drops it as a source on
 * every node; its hashes expire by themselves. After a reconnect to Redis a
 * node writes its whole state again (a `full` write replaces its hash and
 * tells the others to replace what they hold of it) and reads the others'
 * again. A write that failed makes the next one full.
 */
import { type Config, presenceChannel, presenceKey } from '@sluice/core';
import { createRedisClient, nodeOptions, type RedisClient, RedisHealth, redisTarget, ShardedSubscriptions } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';
import { isShard, type PresenceHub } from './presence-hub.ts';

const US = '\x1f';
/** The hash field of the node's last write number: no user id holds a control character. */
const SEQ_FIELD = '\x00seq';

const WRITE_LUA = `
-- The write number only grows, a full write's too (it replaces the users, not the count).
local seq = tonumber(redis.call('HGET', KEYS[1], '\\0seq') or '0') + 1
if ARGV[1] == '1' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], '\\0seq', seq)
local msg = {ARGV[5], seq, ARGV[1]}
for i = 6, #ARGV, 2 do
  local u, n = ARGV[i], ARGV[i + 1]
  if n == '0' then redis.call('HDEL', KEYS[1], u) else redis.call('HSET', KEYS[1], u, n) end
  msg[#msg + 1] = u
  msg[#msg + 1] = n
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call(ARGV[3], ARGV[4], table.concat(msg, '\\31'))
return seq
`;

const READ_LUA = `
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
`;

/** Redis calls for presence, by operation (the metrics' `op` label). */
export interface PresenceRedisCalls {
  write: number;
  read: number;
  renew: number;
  subscribe: number;
  errors: number;
}

interface Remote {
  /** Per node, the seq of its last write applied. */
  readonly seqs: Map<string, number>;
  /** Messages that came while the first read was on its way (null once it answered). */
  buffered: string[] | null;
}

/** Whether the user/count pairs of `f` from `from` on are well formed (counts whole, 0 to 1e9): a message from any Redis client may be anything. */
function validCounts(f: readonly string[], from: number, skip?: string): boolean {
  for (let i = from; i + 1 < f.length; i += 2) {
    if (f[i] === skip) continue;
    if (f[i] === '' || !/^[0-9]{1,9}$/.test(f[i + 1]!)) return false;
  }
  return true;
}

export class PresenceCluster {
  readonly calls: PresenceRedisCalls = { write: 0, read: 0, renew: 0, subscribe: 0, errors: 0 };
  private readonly cmd: RedisClient;
  private readonly sub: RedisClient | ShardedSubscriptions;
  /** Topics watched (this node has a subscriber shard): channel subscribed, the other nodes read. */
  private readonly watched = new Map<string, Remote>();
  /** Per topic, users whose node-level count changed since the last write. */
  private readonly dirty = new Map<string, Set<string>>();
  /** Topics whose next write is a full one (first write, after a reconnect, after a failed write). */
  private readonly full = new Set<string>();
  /** Topics this node has written entries for (it renews their expiry). */
  private readonly written = new Set<string>();
  private live: ReadonlySet<string>;
  private renewTimer: NodeJS.Timeout | undefined;
  private readonly cmdHealth: RedisHealth;
  private subHealth: RedisHealth | undefined;

  constructor(
    private readonly cfg: Config,
    private readonly nodeId: string,
    shard: number,
    private readonly hub: PresenceHub,
    private readonly log: Logger,
    live: readonly string[],
  ) {
    this.live = new Set(live);
    const target = redisTarget(cfg);
    this.cmd = createRedisClient(target, 'command', `shard${shard}-presence`);
    this.cmd.on('error', () => {});
    this.cmdHealth = new RedisHealth(this.cmd);
    const onMessage = (channel: string, payload: string): void => this.message(channel, payload);
    if (cfg.redisCluster) {
      const sharded = new ShardedSubscriptions(this.cmd, nodeOptions(target, `sluice-shard${shard}-presence-subscriber`));
      sharded.onMessage(onMessage);
      sharded.onReady(() => this.reconnected());
      sharded.onError((err) => this.log.warn({ err }, 'presence: resuming after a reconnect failed; the next reconnect tries again'));
      this.sub = sharded;
    } else {
      const sub = createRedisClient(target, 'subscriber', `shard${shard}-presence`);
      sub.on('error', () => {});
      sub.on('message', onMessage);
      // Every ready, the first included: a watch made before the connection was up is loaded then.
      sub.on('ready', () => this.reconnected());
      this.sub = sub;
      this.subHealth = new RedisHealth(sub);
    }
    // Every (re)connect of the command connection: what was written may have been lost with an outage, and topics
    // watched while it was down were not read: say it all again, read them again.
    this.cmd.on('ready', () => this.reconnected());
  }

  start(): void {
    this.renewTimer = setInterval(() => this.renew(), Math.max(250, Math.floor(this.cfg.presenceTtlMs / 4)));
    this.renewTimer.unref();
  }

  stop(): void {
    if (this.renewTimer !== undefined) clearInterval(this.renewTimer);
    this.sub.disconnect();
    this.cmd.disconnect();
  }

  /**
   * The nodes alive changed: the gone ones stop counting (their seqs are
   * forgotten); the new ones (a node that started, or one whose lease had
   * ended and that renews again) are read on every watched topic, so a node
   * dropped for a slow renewal comes back without waiting for its next write.
   */
  nodes(live: readonly string[], gone: readonly string[], joined: readonly string[]): void {
    this.live = new Set(live);
    for (const node of gone) {
      if (node === this.nodeId) continue;
      this.hub.drop(`n:${node}`);
      for (const r of this.watched.values()) r.seqs.delete(node);
    }
    const others = joined.filter((n) => n !== this.nodeId);
    if (others.length === 0) return;
    for (const [key, remote] of this.watched) {
      if (remote.buffered !== null) continue; // Its first read is on its way and reads the live nodes.
      this.read(key, remote, others).catch(() => {
        this.calls.errors++;
      });
    }
  }

  /** A local source's count of a user changed: the node-level count is written at the next flush. */
  changed(key: string, user: string): void {
    let users = this.dirty.get(key);
    if (users === undefined) {
      this.dirty.set(key, (users = new Set()));
      if (!this.written.has(key)) this.full.add(key);
    }
    users.add(user);
  }

  /** The node-level counts of this node on a topic: the sum of its shards' sources. */
  private nodeCounts(key: string, only?: ReadonlySet<string>): Map<string, number> {
    const all = this.hub.table(key)?.sum(isShard) ?? new Map<string, number>();
    if (only === undefined) return all;
    // The changed users, each with its count now (0: gone from this node).
    return new Map([...only].map((u) => [u, all.get(u) ?? 0]));
  }

  private nodeHolds(key: string): boolean {
    const table = this.hub.table(key);
    if (table === undefined) return false;
    for (const src of table.sourceIds()) if (isShard(src) && table.countsOf(src).size > 0) return true;
    return false;
  }

  /** Writes every topic whose node-level counts changed: one script per topic. Called once per WS_PRESENCE_DIFF_MS. */
  writeAll(): void {
    for (const [key, users] of this.dirty) {
      const full = this.full.has(key);
      const counts = full ? this.nodeCounts(key) : this.nodeCounts(key, users);
      this.dirty.delete(key);
      this.full.delete(key);
      const argv: (string | number)[] = [full ? '1' : '0', this.cfg.presenceTtlMs, this.cfg.redisCluster ? 'SPUBLISH' : 'PUBLISH',
        presenceChannel(key), this.nodeId];
      for (const [u, n] of counts) argv.push(u, n);
      this.calls.write++;
      // A topic where this node has nobody left is no longer renewed: its hash expires (its write number with it, which is
      // why a full message is taken whatever its number).
      if (this.nodeHolds(key)) this.written.add(key);
      else this.written.delete(key);
      this.cmd.eval(WRITE_LUA, 1, presenceKey(key, this.nodeId), ...argv).catch((err: unknown) => {
        this.calls.errors++;
        this.log.warn({ err, topic: key }, 'presence: writing this node\'s entries failed; the next write says them all');
        this.full.add(key);
        if (!this.dirty.has(key)) this.dirty.set(key, new Set());
      });
    }
  }

  /** A shard subscribed to a topic this node has no subscriber of yet: subscribe its channel and read the other nodes. */
  watch(key: string, loaded: () => void): void {
    if (this.watched.has(key)) {
      loaded();
      return;
    }
    const remote: Remote = { seqs: new Map(), buffered: [] };
    this.watched.set(key, remote);
    this.load(key, remote).finally(loaded).catch((err: unknown) => this.log.error({ err, topic: key }, 'presence: loading a topic failed'));
  }

  unwatch(key: string): void {
    const r = this.watched.get(key);
    if (r === undefined) return;
    this.watched.delete(key);
    const done = this.sub.unsubscribe(presenceChannel(key)) as Promise<unknown> | undefined;
    done?.catch(() => {});
    for (const node of r.seqs.keys()) this.hub.replace(`n:${node}`, key, new Map());
  }

  private async load(key: string, remote: Remote): Promise<void> {
    try {
      // Joins do not wait on an unreachable Redis: the topic shows this node's users now, the others' once a
      // connection is (back) up and reads them (`reconnected`).
      if (!this.cmdHealth.up || this.subHealth?.up === false) throw new Error('redis is unreachable');
      this.calls.subscribe++;
      await this.sub.subscribe(presenceChannel(key));
      await this.read(key, remote, [...this.live].filter((n) => n !== this.nodeId));
    } catch (err) {
      this.calls.errors++;
      this.log.warn({ err, topic: key }, 'presence: the other nodes\' entries could not be read; this node shows its own until Redis answers');
    } finally {
      const buffered = remote.buffered ?? [];
      remote.buffered = null;
      for (const m of buffered) this.apply(key, remote, m);
    }
  }

  async readAll(key: string): Promise<Map<string, number>> {
    // Unreachable: the answer would be this node's alone, silently.
    if (!this.cmdHealth.up) throw new Error('redis is unreachable');
    const nodes = [...this.live].filter((n) => n !== this.nodeId);
    const users = new Map<string, number>();
    if (nodes.length === 0) return users;
    this.calls.read++;
    const res = (await this.cmd.eval(READ_LUA, nodes.length, ...nodes.map((n) => presenceKey(key, n)))) as string[][];
    for (const flat of res) {
      for (let j = 0; j + 1 < flat.length; j += 2) {
        if (flat[j] !== SEQ_FIELD) users.set(flat[j]!, (users.get(flat[j]!) ?? 0) + Number(flat[j + 1]));
      }
    }
    return users;
  }

  /** Reads the hashes of `nodes` on a topic and makes them the table's sources. */
  private async read(key: string, remote: Remote, nodes: readonly string[]): Promise<void> {
    if (nodes.length === 0) return;
    this.calls.read++;
    const asked = nodes.map((n) => remote.seqs.get(n) ?? 0);
    const res = (await this.cmd.eval(READ_LUA, nodes.length, ...nodes.map((n) => presenceKey(key, n)))) as string[][];
    if (this.watched.get(key) !== remote) return;
    nodes.forEach((node, i) => {
      const flat = res[i] ?? [];
      if (!validCounts(flat, 0, SEQ_FIELD)) return;
      const counts = new Map<string, number>();
      let seq = 0;
      for (let j = 0; j + 1 < flat.length; j += 2) {
        if (flat[j] === SEQ_FIELD) seq = Number(flat[j + 1]);
        else counts.set(flat[j]!, Number(flat[j + 1]));
      }
      // A number below the one known: a newer message was applied while the read was on its way (skip the read), or,
      // when it is below what was known when the read was asked, the hash was lost and started again (Redis lost
      // its data, or it expired): the read is the truth then.
      if (seq < (remote.seqs.get(node) ?? 0) && seq >= asked[i]!) return;
      remote.seqs.set(node, seq);
      this.hub.replace(`n:${node}`, key, counts);
    });
  }

  private message(channel: string, payload: string): void {
    // sluice:pc:{<key>}
    if (!channel.endsWith('}')) return;
    const key = channel.slice(channel.indexOf('{') + 1, -1);
    const remote = this.watched.get(key);
    if (remote === undefined) return;
    if (remote.buffered !== null) remote.buffered.push(payload);
    else this.apply(key, remote, payload);
  }

  private apply(key: string, remote: Remote, payload: string): void {
    const f = payload.split(US);
    const node = f[0]!;
    const seq = Number(f[1]);
    const full = f[2] === '1';
    if (node === this.nodeId || !Number.isSafeInteger(seq) || !validCounts(f, 3)) return;
    const known = remote.seqs.get(node);
    // One writer per (node, topic) and one channel: a full message is the newest whatever its number (a hash that
    // expired starts again at 1).
    if (!full && known !== undefined && seq <= known) return;
    if (!full && (known === undefined || seq !== known + 1)) {
      // A gap: what came between is in the node's hash.
      this.read(key, remote, [node]).catch(() => {
        this.calls.errors++;
      });
      return;
    }
    remote.seqs.set(node, seq);
    const source = `n:${node}`;
    if (full) {
      const counts = new Map<string, number>();
      for (let i = 3; i + 1 < f.length; i += 2) counts.set(f[i]!, Number(f[i + 1]));
      this.hub.replace(source, key, counts);
      return;
    }
    for (let i = 3; i + 1 < f.length; i += 2) this.hub.set(source, key, f[i]!, Number(f[i + 1]));
  }

  /** The subscriber connection is back: subscribe again, read again, and say this node's state again. */
  private reconnected(): void {
    for (const key of this.written) {
      this.full.add(key);
      if (!this.dirty.has(key)) this.dirty.set(key, new Set());
    }
    for (const [key, remote] of this.watched) {
      remote.buffered = [];
      this.load(key, remote).catch(() => {});
    }
  }

  /** Keeps this node's entries from expiring while it lives: one PEXPIRE per topic per TTL/4. */
  private renew(): void {
    for (const key of this.written) {
      this.calls.renew++;
      this.cmd.pexpire(presenceKey(key, this.nodeId), this.cfg.presenceTtlMs).catch(() => {
        this.calls.errors++;
      });
    }
  }
}
