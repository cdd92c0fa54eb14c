/**
 * Presence as one shard sees it: its own sockets' counts per user on each
 * presence topic (told to the topic's owner, see presence-hub.ts), and a
 * replica of each topic it has sockets on, kept from the owner's flushes.
 * A flush applied to the replica gives the `presence_diff` of this shard's
 * sockets, encoded once and fanned out as an ephemeral event of the topic
 * (so sockets replaying history or in the slow lane get it in their place);
 * the replica answers `presence_state` after a join and the `presence`
 * frame without a round trip.
 *
 * Socket data it touches: `present` (the topics where the socket counts).
 */
import { type Delivery, encodePresenceData, encodePresenceDiff, encodePresenceState, type PresenceFlush, PresenceReplica } from '@sluice/core';
import { EventClass } from '@sluice/protocol';
import type { MeshBroker } from '../mesh-broker.ts';
import { clientTopic } from '../presence-hub.ts';
import type { ShardContext } from './context.ts';
import type { SocketData } from './socket-data.ts';

export class ShardPresence {
  /** Per topic key, user to this shard's sockets counted there. */
  private readonly local = new Map<string, Map<string, number>>();
  private readonly replicas = new Map<string, PresenceReplica>();
  /** presence_diff frames fanned out (one per topic per flush; uWS writes it to each socket). */
  diffs = 0;
  /** Sockets that were sent a presence_diff (the topic's subscribers at each fan-out). */
  diffSockets = 0;

  constructor(
    private readonly ctx: ShardContext,
    private readonly mesh: MeshBroker,
    private readonly deliver: (ev: Delivery) => void,
    private readonly subscribers: (key: string) => number,
    /** Whether this shard still joins the topic (has its record): a starting replica that comes after the last leave is not kept. */
    private readonly holds: (key: string) => boolean,
  ) {
    const max = ctx.cfg.presenceMaxUsers;
    mesh.encodePresence = (users) => encodePresenceData(users, max);
    mesh.onPresence((key, snapshot, f) => this.flushed(key, snapshot, f), (shard) => this.peerUp(shard));
  }

  /** Whether a topic (its key) keeps presence. */
  keeps(key: string): boolean {
    return this.mesh.keepsPresence(key);
  }

  /** A socket's join of a presence topic completed: it counts from now on. */
  joined(d: SocketData, key: string): void {
    if (d.present?.has(key) === true) return;
    (d.present ??= new Set()).add(key);
    let users = this.local.get(key);
    if (users === undefined) this.local.set(key, (users = new Map()));
    const n = (users.get(d.user) ?? 0) + 1;
    users.set(d.user, n);
    this.mesh.presenceSet(key, d.user, n);
  }

  /** The socket left the topic, or closed. */
  left(d: SocketData, key: string): void {
    if (d.present?.delete(key) !== true) return;
    const users = this.local.get(key);
    if (users === undefined) return;
    const n = (users.get(d.user) ?? 1) - 1;
    if (n > 0) users.set(d.user, n);
    else {
      users.delete(d.user);
      if (users.size === 0) this.local.delete(key);
    }
    this.mesh.presenceSet(key, d.user, n);
  }

  /** `presence_state` for a socket whose join completed: the replica, and the socket's own user if the replica does not list it yet. */
  stateFrame(d: SocketData, key: string): string {
    return encodePresenceState(clientTopic(key), this.data(key, d));
  }

  /**
   * The presence `data` from this shard's replica, when it has one (some
   * socket here is joined), else undefined: the owner is asked instead.
   */
  localData(key: string, d: SocketData): string | undefined {
    return this.replicas.has(key) ? this.data(key, d) : undefined;
  }

  private data(key: string, d: SocketData): string {
    const users = this.replicas.get(key)?.users ?? new Map<string, number>();
    const mine = d.present?.has(key) === true ? this.local.get(key)?.get(d.user) : undefined;
    return encodePresenceData(users, this.ctx.cfg.presenceMaxUsers, mine === undefined ? undefined : [d.user, mine]);
  }

  /** The topic's record was dropped (no socket of this shard joins it): its replica goes too. */
  dropped(key: string): void {
    this.replicas.delete(key);
  }

  /** The owner's starting replica (at the subscribe) or a flush. */
  private flushed(key: string, snapshot: boolean, f: PresenceFlush): void {
    let replica = this.replicas.get(key);
    if (snapshot) {
      // A subscribe again to an owner that restarted: its table is new and
      // its first flush is a full one, which reconciles the replica kept
      // here without making every user leave and join meanwhile.
      if (replica !== undefined || !this.holds(key)) return;
      this.replicas.set(key, (replica = new PresenceReplica()));
      replica.apply(f);
      return;
    }
    if (replica === undefined) return; // Not subscribed (any more): a flush that crossed the unsubscribe.
    const diff = replica.apply(f);
    if (diff.joins.size === 0 && diff.leaves.length === 0) return;
    this.diffs++;
    this.diffSockets += this.subscribers(key);
    this.deliver({ topic: key, cls: EventClass.Ephemeral, id: undefined, key: undefined, at: 0, frame: encodePresenceDiff(clientTopic(key), diff) });
  }

  /** A peer shard (re)started: the counts of topics it owns are said to it again (its tables are new). */
  private peerUp(shard: number): void {
    for (const [key, users] of this.local) {
      if (!this.mesh.ownedBy(key, shard)) continue;
      for (const [user, n] of users) this.mesh.presenceSet(key, user, n);
    }
  }
}
