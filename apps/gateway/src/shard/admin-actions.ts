/**
 * The admin actions as one shard carries them out on the sockets it holds:
 * revocations (4003), disconnects (1008, or 4000 with a retry hint) and
 * server-side subscribes and unsubscribes. Each command comes from the
 * coordinator (which had it from the admin API or, in cluster mode, from
 * another node over Redis) and answers how many sockets it touched here.
 */
import { actionOf, type ControlCommand, type MailItem, type Revocation, type Revocations, retryHint, tokenKey, userKey } from '@sluice/core';
import { EventClass } from '@sluice/protocol';
import type { ShardContext } from './context.ts';
import type { Session } from './session.ts';
import type { ConnectionView } from '../control.ts';
import { type Socket, socketId, socketIdPrefix } from './socket-data.ts';
import type { SocketIndex } from './socket-index.ts';

export class AdminActions {
  /** The prefix of the ids of the sockets this shard (this generation) accepted. */
  private readonly idPrefix: string;

  constructor(
    private readonly ctx: ShardContext,
    private readonly session: Session,
    private readonly users: SocketIndex<Socket>,
    private readonly tokens: SocketIndex<Socket>,
    private readonly revocations: Revocations,
  ) {
    this.idPrefix = socketIdPrefix(ctx.task);
  }

  /** Carries a command out here; the sockets it closed, joined or made leave. */
  apply(cmd: ControlCommand): number {
    const n = this.run(cmd);
    this.ctx.counters.adminSockets[actionOf(cmd)] += n;
    return n;
  }

  private run(cmd: ControlCommand): number {
    const now = Date.now();
    switch (cmd.op) {
      case 'revoke':
        this.revocations.add(cmd.revocation, now);
        return this.closeRevoked([cmd.revocation], now);
      case 'revocations':
        for (const r of cmd.list) this.revocations.add(r, now);
        return this.closeRevoked(cmd.list, now);
      case 'disconnect': {
        const t = cmd.target;
        let sockets: Socket[];
        if ('connectionId' in t) {
          sockets = [];
          // The id's last part is the socket's seq in base 36 (socketId): compared as a number, nothing made per socket.
          const suffix = t.connectionId.slice(this.idPrefix.length);
          const seq = parseInt(suffix, 36);
          if (t.connectionId.startsWith(this.idPrefix) && seq.toString(36) === suffix) {
            for (const ws of this.session.sockets) {
              const d = ws.getUserData().d;
              if (d.seq === seq) {
                if (t.tenant === undefined || t.tenant === d.tenant) sockets.push(ws);
                break;
              }
            }
          }
        } else sockets = this.users.of(userKey(t.tenant, t.user));
        let n = 0;
        for (const ws of sockets) {
          const d = ws.getUserData().d;
          if (!d.open) continue;
          this.session.close(ws, d, 'disconnected', cmd.retry ? retryHint(this.ctx.cfg, Math.random) : undefined);
          n++;
        }
        return n;
      }
      case 'subscribe': {
        let n = 0;
        for (const ws of this.users.of(userKey(cmd.tenant, cmd.user))) if (this.session.grant(ws, ws.getUserData().d, cmd.topic)) n++;
        return n;
      }
      case 'unsubscribe': {
        let n = 0;
        for (const ws of this.users.of(userKey(cmd.tenant, cmd.user))) if (this.session.remove(ws, ws.getUserData().d, cmd.topic)) n++;
        return n;
      }
    }
  }

  /**
   * A publish to users: `frame` (a `$user` event) to every open socket here
   * of each user; answers the users that had one. One index lookup per user.
   */
  toUsers(tenant: string, users: readonly string[], frame: string): string[] {
    const online: string[] = [];
    const ev: MailItem = { topic: '$user', cls: EventClass.Ephemeral, key: undefined, id: undefined, frame };
    const now = Date.now();
    for (const user of users) {
      let reached = false;
      for (const ws of this.users.of(userKey(tenant, user))) {
        const d = ws.getUserData().d;
        if (!d.open) continue;
        reached = true;
        // An empty frame is a presence probe (GET /v1/online): nothing is sent.
        if (frame === '') continue;
        this.ctx.counters.userDeliveries++;
        ws.cork(() => this.session.sendTo(ws, d, ev, now));
      }
      if (reached) online.push(user);
    }
    return online;
  }

  /** This shard's open sockets of a user (GET /v1/connections), at most `max`. */
  connections(tenant: string, user: string, max: number): ConnectionView[] {
    const out: ConnectionView[] = [];
    const { nodeId, shard } = this.ctx.task;
    for (const ws of this.users.of(userKey(tenant, user))) {
      const d = ws.getUserData().d;
      if (!d.open) continue;
      if (out.length === max) break;
      out.push({ connectionId: socketId(d), node: nodeId, shard, ip: d.ip, topics: d.topics === null ? [] : [...d.topics.keys()],
        bufferedBytes: ws.getBufferedAmount(), slow: d.mailbox !== null, expiresAt: Number.isFinite(d.expiresAt) ? d.expiresAt : null });
    }
    return out;
  }

  /** Closes with 4003 every open socket whose token the revocations now hold, found through the user and token indexes. */
  private closeRevoked(list: readonly Revocation[], now: number): number {
    let n = 0;
    for (const r of list) {
      const sockets = r.kind === 'user' ? this.users.of(userKey(r.tenant, r.user)) : this.tokens.of(tokenKey(r.tenant, r.jti));
      for (const ws of sockets) n += this.closeIfRevoked(ws, now);
    }
    return n;
  }

  private closeIfRevoked(ws: Socket, now: number): number {
    const d = ws.getUserData().d;
    if (!d.open || !this.revocations.revoked(d, now)) return 0;
    this.session.close(ws, d, 'token_revoked');
    return 1;
  }
}
