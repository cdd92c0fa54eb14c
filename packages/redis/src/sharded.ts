/**
 * Sharded pub/sub subscriptions for Redis Cluster, one plain connection per
 * master that owns a subscribed channel's slot. (ioredis's own sharded
 * subscribers replace their connections at start and on topology changes,
 * and a subscription could lapse meanwhile without a sign; the contract
 * tests caught it.) Each connection's channels are subscribed again when it
 * reconnects, and `onReady` fires so that the caller can read what it may
 * have missed. When the Cluster's slot map changes (a failover promoted a
 * replica, slots migrated: the command client refreshes it on its errors,
 * and this asks for a refresh every second while one of its connections is
 * down), channels whose slot has another master now are subscribed there
 * and `onReady` fires too; a connection that holds no channel any more (a
 * failed master's, which would retry forever) is closed. (Not ioredis's
 * slotsRefreshInterval: a refresh in flight when the client disconnects
 * arms its timer again, and that timer holds the process open.)
 */
// eslint-disable-next-line @typescript-eslint/triple-slash-reference -- the package ships no types; this brings ours along wherever this file is compiled
/// <reference path="./cluster-key-slot.d.ts" />
import calculateSlot from 'cluster-key-slot';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisClient } from './bus.ts';
import { keepAlive } from './client.ts';

export class ShardedSubscriptions {
  private readonly conns = new Map<string, Redis>();
  /** Channel to the node key whose connection holds it. */
  private readonly where = new Map<string, string>();
  private message: (channel: string, payload: string) => void = () => {};
  private ready: () => void = () => {};
  private failed: (err: unknown) => void = () => {};

  private readonly cluster: Cluster;
  /** Nodes whose connection was not ready when channels moved to it: their first `ready` subscribes them and fires `onReady`. */
  private readonly owed = new Set<string>();
  /** Asks the Cluster client for its slot map every second while a connection is down (a failover may be under way). */
  private topologyTimer: NodeJS.Timeout | undefined;

  constructor(cluster: RedisClient, private readonly options: RedisOptions) {
    this.cluster = cluster as Cluster;
    this.cluster.on('refresh', this.relocateListener);
  }

  onMessage(cb: (channel: string, payload: string) => void): void {
    this.message = cb;
  }

  /** Called when a connection came back (not the first time it connects). */
  onReady(cb: () => void): void {
    this.ready = cb;
  }

  /** Called with what the `onReady` callback threw. */
  onError(cb: (err: unknown) => void): void {
    this.failed = cb;
  }

  async subscribe(channel: string): Promise<void> {
    const node = this.nodeOf(channel);
    this.where.set(channel, node);
    const conn = this.conn(node);
    if (conn.status !== 'ready') await readyWithin(conn, this.options.connectTimeout ?? 2000);
    await conn.ssubscribe(channel);
  }

  unsubscribe(channel: string): void {
    const node = this.where.get(channel);
    this.where.delete(channel);
    if (node === undefined) return;
    this.conns.get(node)?.sunsubscribe(channel).catch(() => {
      // Disconnected: the subscription went with the connection.
    });
  }

  /** Subscribes every channel again, each at the master that owns its slot now. */
  async resubscribe(channels: readonly string[]): Promise<void> {
    await Promise.all(channels.map((c) => this.subscribe(c)));
  }

  /** Whether every connection that holds a channel is up. */
  get up(): boolean {
    for (const c of this.conns.values()) if (c.status !== 'ready') return false;
    return true;
  }

  disconnect(): void {
    this.cluster.off('refresh', this.relocateListener);
    clearInterval(this.topologyTimer);
    this.topologyTimer = undefined;
    for (const c of this.conns.values()) c.disconnect();
    this.conns.clear();
  }

  private readonly relocateListener = (): void => this.relocate();

  /** A connection closed: until every connection is ready again, the slot map is read every second (relocate follows it). */
  private watchTopology(): void {
    if (this.topologyTimer !== undefined) return;
    this.topologyTimer = setInterval(() => {
      if (this.up) {
        clearInterval(this.topologyTimer);
        this.topologyTimer = undefined;
        return;
      }
      this.cluster.refreshSlotsCache();
    }, 1000);
    this.topologyTimer.unref();
  }

  /** After a slot map refresh: moves the channels whose slot has another master now, and closes connections that hold none. */
  private relocate(): void {
    const moved = new Map<string, string[]>();
    for (const [channel, node] of this.where) {
      const now = this.cluster.slots[calculateSlot(channel)]?.[0];
      if (now === undefined || now === node) continue;
      this.where.set(channel, now);
      const list = moved.get(now);
      if (list === undefined) moved.set(now, [channel]);
      else list.push(channel);
    }
    const held = new Set(this.where.values());
    for (const [node, conn] of this.conns) {
      if (held.has(node)) continue;
      conn.disconnect();
      this.conns.delete(node);
      this.owed.delete(node);
    }
    for (const [node, channels] of moved) {
      const conn = this.conn(node);
      if (conn.status !== 'ready') {
        this.owed.add(node);
        continue;
      }
      // The caller's catch-up reads what was published on the new master before this subscription: nothing is missed.
      conn.ssubscribe(...channels).then(() => this.ready(), (err: unknown) => this.failed(err)).catch((err: unknown) => this.failed(err));
    }
  }

  private nodeOf(channel: string): string {
    const node = this.cluster.slots[calculateSlot(channel)]?.[0];
    if (node === undefined) throw new Error(`no master known for the slot of ${channel}`);
    return node;
  }

  private conn(node: string): Redis {
    let c = this.conns.get(node);
    if (c !== undefined) return c;
    const at = node.lastIndexOf(':');
    c = keepAlive(new Redis({ ...this.options, host: node.slice(0, at), port: Number(node.slice(at + 1)), lazyConnect: false }));
    const conn = c;
    let connected = false;
    conn.on('smessage', (channel: string, payload: string) => this.message(channel, payload));
    conn.on('error', () => {
      // Reported by failed commands and the coordinator's state log.
    });
    conn.on('close', () => {
      if (this.conns.get(node) === conn) this.watchTopology();
    });
    conn.on('ready', () => {
      // The first ready of a connection made by `subscribe` needs nothing (subscribe sends its SSUBSCRIBE);
      // one made for channels that moved here (relocate) subscribes them and catches up.
      if (!connected && !this.owed.delete(node)) {
        connected = true;
        return;
      }
      connected = true;
      // Back after a drop: its channels first, then the caller's catch-up.
      const mine = [...this.where].filter(([, n]) => n === node).map(([ch]) => ch);
      const again = mine.length === 0 ? Promise.resolve() : conn.ssubscribe(...mine).then(() => undefined);
      // The caller's catch-up may throw: that is reported, never an unhandled rejection (which would end the shard).
      again.then(() => this.ready(), () => this.ready()).catch((err: unknown) => this.failed(err));
    });
    this.conns.set(node, conn);
    return conn;
  }
}

/** Resolves when `conn` is ready, rejects after `ms` (it keeps reconnecting; `onReady` reports it later). */
function readyWithin(conn: Redis, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      conn.off('ready', done);
      reject(new Error(`redis node ${conn.options.host ?? ''}:${conn.options.port ?? ''} not ready in ${ms} ms`));
    }, ms);
    conn.once('ready', done);
  });
}
