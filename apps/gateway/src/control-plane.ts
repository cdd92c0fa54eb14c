/**
 * The node's half of the cluster's control plane (in the coordinator): takes
 * the admin API's commands (revoke, disconnect, subscribe, unsubscribe) to
 * every node, and keeps the node's revocations.
 *
 * Embedded mode: a command is carried out on this node's shards at once;
 * revocations are held in memory only (a restart forgets them).
 *
 * Cluster mode: a revocation is first added to one Redis sorted set (member:
 * the revocation, score: its expiry), then every command is published on the
 * control channel; only once Redis took it is it carried out here and
 * answered 202, so an answer of 503 means no node acts on it. Each node's
 * subscriber carries out the commands of the other nodes (its own it already
 * did). When the subscriber connects (at start, and after every outage) it
 * reads the whole set: a node that starts, or missed commands while Redis
 * was away, learns every revocation in force and closes the sockets they
 * name. Disconnects and subscribes sent while a node could not hear are not
 * replayed: they concern the sockets open at that moment.
 */
import { type ControlCommand, decodeRevocation, isControlCommand, encodeRevocation, type Config, CONTROL_CHANNEL, type Revocation, Revocations,
  REVOCATIONS_KEY } from '@sluice/core';
import { createRedisClient, type RedisClient } from '@sluice/redis';
import type { Logger } from '@sluice/telemetry';
import type { ControlResult } from './admin.ts';

/** How often expired revocations are forgotten (the shards prune their own copies as often). */
const PRUNE_MS = 60_000;

interface Envelope {
  readonly from: string;
  readonly cmd: ControlCommand;
}

export class ControlPlane {
  readonly revocations = new Revocations();
  /** Revocations this node learned (from its admin API, another node or a reload) that it did not hold. */
  applied = 0;
  /** Commands from other nodes carried out here. */
  received = 0;
  /** Messages on the control channel that were not a command this node knows (another version, or not Sluice's). */
  ignored = 0;
  private sub: RedisClient | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly cfg: Config,
    private readonly log: Logger,
    private readonly nodeId: string,
    /** Carries a command out on this node's shards. */
    private readonly carryOut: (cmd: ControlCommand, origin: string) => void,
    /** Cluster mode: the coordinator's command connection. */
    private readonly redis: RedisClient | undefined,
  ) {}

  start(): void {
    this.pruneTimer = setInterval(() => this.revocations.prune(Date.now()), PRUNE_MS).unref();
    if (this.redis === undefined) return;
    const sub = (this.sub = createRedisClient({ url: this.cfg.redisUrl!, cluster: this.cfg.redisCluster }, 'subscriber', 'control'));
    sub.on('error', () => {
      // The command connection's RedisWatch reports outages; this one follows it.
    });
    sub.on('message', (channel: string, message: string) => {
      if (channel === CONTROL_CHANNEL) this.fromChannel(message);
    });
    sub.on('ready', () => {
      sub.subscribe(CONTROL_CHANNEL).then(() => this.reload(), (err: unknown) => {
        this.log.warn({ err }, 'control channel: subscribing failed; the next reconnect tries again');
      });
    });
  }

  stop(): void {
    if (this.pruneTimer !== undefined) clearInterval(this.pruneTimer);
    this.sub?.disconnect();
  }

  /** A command from this node's admin API. */
  async send(cmd: ControlCommand): Promise<ControlResult> {
    if (this.redis !== undefined) {
      try {
        if (cmd.op === 'revoke') await this.redis.zadd(REVOCATIONS_KEY, cmd.revocation.expiresAt, encodeRevocation(cmd.revocation));
      } catch (err) {
        this.log.warn({ err, op: cmd.op }, 'admin command not sent: redis did not take it');
        return { ok: false, reason: 'unavailable', message: 'redis did not take the command, so no node acts on it; retry' };
      }
      try {
        await this.redis.publish(CONTROL_CHANNEL, JSON.stringify({ from: this.nodeId, cmd } satisfies Envelope));
      } catch (err) {
        this.log.warn({ err, op: cmd.op }, 'admin command not sent: redis did not take it');
        // A revocation is in the set by now: nodes apply it when they next read it (a reconnect, a restart).
        return { ok: false, reason: 'unavailable', message: cmd.op === 'revoke'
          ? 'the revocation was stored but not sent: nodes apply it only when they next read the stored set (a reconnect or a restart); retry'
          : 'redis did not take the command, so no node acts on it; retry' };
      }
    }
    this.carry(cmd, this.nodeId);
    return { ok: true };
  }

  private carry(cmd: ControlCommand, origin: string): void {
    const now = Date.now();
    if (cmd.op === 'revoke' && this.revocations.add(cmd.revocation, now)) this.applied++;
    if (cmd.op === 'revocations') for (const r of cmd.list) if (this.revocations.add(r, now)) this.applied++;
    this.carryOut(cmd, origin);
  }

  /** A message on the control channel: checked in full before anything acts on it (it may come from any Redis client). */
  private fromChannel(message: string): void {
    let env: unknown;
    try {
      env = JSON.parse(message);
    } catch {
      env = undefined;
    }
    const e = env as Partial<Envelope> | null | undefined;
    if (typeof e !== 'object' || e === null || typeof e.from !== 'string' || !isControlCommand(e.cmd)) {
      this.ignored++;
      this.log.warn({ message: message.slice(0, 200) }, 'control channel: not a command this node knows, ignored');
      return;
    }
    if (e.from === this.nodeId) return;
    this.received++;
    this.carry(e.cmd, e.from);
  }

  /** Every revocation in force, from Redis: after a (re)connect of the subscriber. */
  private async reload(): Promise<void> {
    const redis = this.redis!;
    const now = Date.now();
    try {
      await redis.zremrangebyscore(REVOCATIONS_KEY, '-inf', now);
      const flat = await redis.zrangebyscore(REVOCATIONS_KEY, `(${now}`, '+inf', 'WITHSCORES');
      const list: Revocation[] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const r = decodeRevocation(flat[i]!, Number(flat[i + 1]));
        if (r !== undefined) list.push(r);
      }
      this.log.info({ revocations: list.length }, 'revocations loaded from redis');
      if (list.length > 0) this.carry({ op: 'revocations', list }, 'redis');
    } catch (err) {
      this.log.warn({ err }, 'revocations could not be loaded from redis; trying again in 1 s');
      setTimeout(() => void this.reload(), 1000).unref();
    }
  }
}
