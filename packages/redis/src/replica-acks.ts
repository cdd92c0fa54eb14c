/**
 * WS_REDIS_ACK_REPLICAS: a durable publish is acknowledged only once N
 * replicas of the master that stored it confirmed it, with Redis's WAIT.
 *
 * WAIT blocks the connection it is sent on until every write that
 * connection made before it reached N replicas (or the timeout passed), and
 * answers how many did. So:
 * - The WAIT goes on the very connection (socket) the write went on, after
 *   the write's reply: `before` notes the master connection and its socket
 *   when the write is sent, `confirm` fails when either changed meanwhile (a
 *   reconnect, a failover, a slot that moved in a Cluster). A WAIT on a new
 *   connection would vouch for nothing: it has made no writes, and Redis
 *   answers at once with every replica.
 * - One WAIT covers all earlier writes of its connection: the writes whose
 *   replies arrived in one read of the socket share one WAIT, and one
 *   WAIT per connection is out at a time (the next collects what arrived
 *   while it was out). The connection should carry nothing else: whatever
 *   else it carries waits behind each WAIT.
 * - A write that Redis answered without writing (an idempotent repeat)
 *   advances nothing that WAIT can see; the publish script writes on that
 *   path too (bus.ts), so that its WAIT also covers the first publish.
 */
// eslint-disable-next-line @typescript-eslint/triple-slash-reference -- the package ships no types; this brings ours along wherever this file is compiled
/// <reference path="./cluster-key-slot.d.ts" />
import calculateSlot from 'cluster-key-slot';
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from './bus.ts';

/** Where a write went: the master's connection and the socket it had then. */
export interface AckMark {
  readonly key: string;
  readonly node: Redis;
  readonly stream: unknown;
}

interface Group {
  waiting: ((ok: boolean) => void)[];
  /** A WAIT is out on this connection, or queued for the next turn. */
  busy: boolean;
}

export class ReplicaAcks {
  private readonly groups = new Map<Redis, Group>();
  /** WAITs sent, and writes that were not confirmed (timeout, too few replicas, a changed connection). */
  waits = 0;
  failures = 0;

  constructor(
    private readonly client: RedisClient,
    private readonly replicas: number,
    private readonly timeoutMs: number,
  ) {}

  /** Before a write of `key`: the connection it goes on; undefined when there is none ready (the write then fails anyway). */
  before(key: string): AckMark | undefined {
    const node = this.nodeOf(key);
    if (node === undefined || node.status !== 'ready') return undefined;
    return { key, node, stream: node.stream };
  }

  /** After the write's reply: true once the replicas confirmed it; false when they did not in time, or the connection changed. */
  confirm(mark: AckMark | undefined): Promise<boolean> {
    if (mark === undefined || !this.same(mark)) {
      this.failures++;
      return Promise.resolve(false);
    }
    let group = this.groups.get(mark.node);
    if (group === undefined) this.groups.set(mark.node, (group = { waiting: [], busy: false }));
    const g = group;
    return new Promise<boolean>((resolve) => {
      g.waiting.push((ok) => {
        if (!ok) this.failures++;
        resolve(ok);
      });
      if (!g.busy) this.schedule(mark, g);
    });
  }

  private schedule(mark: AckMark, g: Group): void {
    g.busy = true;
    // After the continuations already queued: the replies parsed from the same read (each resolved in order by
    // ioredis, each resuming its publish before this runs) join this WAIT, without waiting a turn of the loop.
    queueMicrotask(() => this.send(mark, g));
  }

  private send(mark: AckMark, g: Group): void {
    const batch = g.waiting;
    g.waiting = [];
    const settle = (ok: boolean): void => {
      for (const w of batch) w(ok);
      if (g.waiting.length > 0) {
        // Writes answered while this WAIT was out: the next WAIT covers them, on the connection they were written on.
        this.schedule(mark, g);
        return;
      }
      g.busy = false;
      this.groups.delete(mark.node);
    };
    if (!this.same(mark)) {
      settle(false);
      return;
    }
    this.waits++;
    mark.node.call('WAIT', this.replicas, this.timeoutMs).then(
      (n) => settle(typeof n === 'number' && n >= this.replicas && this.same(mark)),
      () => settle(false),
    );
  }

  /** Whether the mark's connection is still the one the write went on, up, and (Cluster) still the master of the key's slot. */
  private same(mark: AckMark): boolean {
    return mark.node.status === 'ready' && mark.node.stream === mark.stream && this.nodeOf(mark.key) === mark.node;
  }

  /** The master connection a write of `key` goes on: the client itself, or in a Cluster the master of the key's slot. */
  private nodeOf(key: string): Redis | undefined {
    const c = this.client;
    if (!(c instanceof Cluster)) return c;
    const nodeKey = c.slots[calculateSlot(key)]?.[0];
    if (nodeKey === undefined) return undefined;
    return c.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === nodeKey);
  }
}
