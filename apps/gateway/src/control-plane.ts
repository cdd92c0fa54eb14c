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
import { createHmac, timingSafeEqual } from 'node:crypto';
import { type ControlCommand, controlReplyChannel, decodeRevocation, isControlCommand, encodeRevocation, type Config, CONTROL_CHANNEL,
  type Revocation, Revocations, REVOCATIONS_KEY } from '@sluice/core';
import { createRedisClient, type RedisClient, redisTarget } from '@sluice/redis';
import { TOPIC_PATTERN } from '@sluice/protocol';
import type { Logger } from '@sluice/telemetry';
import { type ControlResult, MAX_USER_TARGETS, type UsersResult } from './admin.ts';
import type { NodeRegistry } from './node-registry.ts';

/** How often expired revocations are forgotten (the shards prune their own copies as often). */
const PRUNE_MS = 60_000;
/** How every `$user` event frame begins (admin.ts encodes it): a node delivers nothing else from the channel. */
const USER_FRAME_PREFIX = '{"type":"event","topic":"$user",';

interface Envelope {
  readonly from: string;
  readonly cmd: ControlCommand;
}

/** A publish to users, as the control channel carries it to every node. */
interface UsersEnvelope {
  readonly from: string;
  readonly users: { readonly rid: number; readonly tenant: string; readonly users: readonly string[]; readonly frame: string };
}

/** A node's answer to a publish to users, on the asking node's reply channel. */
interface UsersAnswer {
  readonly from: string;
  readonly rid: number;
  readonly online: readonly string[];
}

/**
 * A question to every node (the admin page's views) or to one (a drain),
 * on the control channel; each node answers on the asking node's reply
 * channel with `{from, rid, body}`.
 */
export type NodeAsk =
  | { readonly kind: 'stats' }
  | { readonly kind: 'topics'; readonly tenant: string | undefined; readonly limit: number }
  | { readonly kind: 'connections'; readonly tenant: string; readonly user: string }
  /** Only the node named drains (and answers). */
  | { readonly kind: 'drain'; readonly node: string };

interface AskEnvelope {
  readonly from: string;
  readonly ask: NodeAsk & { readonly rid: number };
  /** A drain's: when the asker sent it (its clock), and HMAC-SHA256 with ADMIN_TOKEN over from, rid, node and sentAt. */
  readonly sentAt?: number;
  readonly mac?: string;
}

/** How old a drain of another node may be when it arrives (the nodes' clocks are assumed within a few seconds). */
export const DRAIN_VALID_MS = 10_000;

function drainMac(token: string, from: string, rid: number, node: string, sentAt: number): string {
  return createHmac('sha256', token).update(`sluice-drain\n${from}\n${rid}\n${node}\n${sentAt}`).digest('base64url');
}

/** Redis did not take a question to the nodes: no other node was asked. */
export class RedisUnavailable extends Error {
  constructor(cause: unknown) {
    super('redis did not take the question', { cause });
  }
}

/** What the nodes asked answered: each answer by node id, and the nodes alive that did not answer in time. */
export interface NodeAnswers {
  readonly answers: ReadonlyMap<string, unknown>;
  readonly unanswered: readonly string[];
}

interface NodeAskWait {
  readonly answers: Map<string, unknown>;
  readonly waiting: Set<string>;
  readonly done: () => void;
}

/** The largest `limit` of a topics ask (GET /v1/topics). */
export const MAX_TOP_TOPICS = 100;
const NODE_ID = /^[A-Za-z0-9._-]{1,64}$/;

function isAskEnvelope(v: unknown): v is AskEnvelope {
  const e = v as Partial<AskEnvelope> | null;
  if (typeof e !== 'object' || e === null || typeof e.from !== 'string') return false;
  const a = e.ask as Record<string, unknown> | undefined;
  if (typeof a !== 'object' || a === null || !Number.isSafeInteger(a.rid)) return false;
  const tenantOk = (t: unknown): boolean => typeof t === 'string' && TOPIC_PATTERN.test(t);
  switch (a.kind) {
    case 'stats':
      return true;
    case 'topics':
      return (a.tenant === undefined || tenantOk(a.tenant)) && Number.isInteger(a.limit) && (a.limit as number) >= 1 &&
        (a.limit as number) <= MAX_TOP_TOPICS;
    case 'connections':
      return tenantOk(a.tenant) && typeof a.user === 'string' && a.user.length > 0 && a.user.length <= 1024;
    case 'drain':
      return typeof a.node === 'string' && NODE_ID.test(a.node);
    default:
      return false;
  }
}

interface UsersAsk {
  readonly online: Set<string>;
  readonly waiting: Set<string>;
  readonly done: () => void;
}

function isUsersEnvelope(v: unknown): v is UsersEnvelope {
  const e = v as Partial<UsersEnvelope> | null;
  if (typeof e !== 'object' || e === null || typeof e.from !== 'string') return false;
  const u = e.users;
  return typeof u === 'object' && u !== null && Number.isSafeInteger(u.rid) && typeof u.tenant === 'string' && TOPIC_PATTERN.test(u.tenant) &&
    Array.isArray(u.users) && u.users.length <= MAX_USER_TARGETS && u.users.every((x) => typeof x === 'string') &&
    typeof u.frame === 'string' && u.frame.startsWith(USER_FRAME_PREFIX);
}

export class ControlPlane {
  readonly revocations = new Revocations();
  /** Revocations this node learned (from its admin API, another node or a reload) that it did not hold. */
  applied = 0;
  /** Commands from other nodes carried out here. */
  received = 0;
  /** Messages on the control channel that were not a command this node knows (another version, or not Sluice's). */
  ignored = 0;
  /** Publishes to users this node took (its admin API), and the users they named, online and not. */
  readonly userEvents = { publishes: 0, online: 0, offline: 0, unanswered: 0 };
  /** Cluster mode: the nodes alive, whose answers a publish to users waits for. Set once the registry exists. */
  registry: NodeRegistry | undefined;
  private sub: RedisClient | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;
  private readonly asks = new Map<number, UsersAsk>();
  private readonly nodeAsks = new Map<number, NodeAskWait>();
  /** Answers this node's part of a node ask, asked by node `from` (set by the coordinator before start). */
  answerAsk: (ask: NodeAsk, from: string) => Promise<unknown> = () => Promise.resolve(null);
  private nextRid = 1;

  constructor(
    private readonly cfg: Config,
    private readonly log: Logger,
    private readonly nodeId: string,
    /** Carries a command out on this node's shards. */
    private readonly carryOut: (cmd: ControlCommand, origin: string) => void,
    /** Sends a `$user` frame to this node's sockets of `users`; resolves with those of them it holds. */
    private readonly deliverToUsers: (tenant: string, users: readonly string[], frame: string) => Promise<readonly string[]>,
    /** Cluster mode: the coordinator's command connection. */
    private readonly redis: RedisClient | undefined,
  ) {}

  start(): void {
    this.pruneTimer = setInterval(() => this.revocations.prune(Date.now()), PRUNE_MS).unref();
    if (this.redis === undefined) return;
    const sub = (this.sub = createRedisClient(redisTarget(this.cfg), 'subscriber', 'control'));
    sub.on('error', () => {
      // The command connection's RedisWatch reports outages; this one follows it.
    });
    const replies = controlReplyChannel(this.nodeId);
    sub.on('message', (channel: string, message: string) => {
      if (channel === CONTROL_CHANNEL) this.fromChannel(message);
      else if (channel === replies) this.answered(message);
    });
    sub.on('ready', () => {
      sub.subscribe(CONTROL_CHANNEL, replies).then(() => this.reload(), (err: unknown) => {
        this.log.warn({ err }, 'control channel: subscribing failed; the next reconnect tries again');
      });
    });
  }

  stop(): void {
    if (this.pruneTimer !== undefined) clearInterval(this.pruneTimer);
    this.sub?.disconnect();
    for (const ask of this.asks.values()) ask.done();
    for (const ask of this.nodeAsks.values()) ask.done();
  }

  /** This node's id. */
  get id(): string {
    return this.nodeId;
  }

  /**
   * Asks every node alive (at the last lease renewal), this one included, or
   * only the one a drain names, and waits at most WS_NODE_ANSWER_MS for the
   * others' answers. Embedded mode: this node alone. When Redis does not
   * take the question, a view has this node's answer and every other node
   * unanswered (the page still shows this node, with Redis down), and a
   * drain of another node rejects with RedisUnavailable.
   */
  async askNodes(ask: NodeAsk): Promise<NodeAnswers> {
    const answers = new Map<string, unknown>();
    const asksMe = ask.kind !== 'drain' || ask.node === this.nodeId;
    const mine = async (): Promise<void> => {
      if (asksMe) answers.set(this.nodeId, await this.answerAsk(ask, this.nodeId));
    };
    if (this.redis === undefined) {
      await mine();
      return { answers, unanswered: [] };
    }
    const rid = this.nextRid++;
    const others = ask.kind === 'drain' ? [ask.node] : [...(this.registry?.nodes ?? [])];
    const waiting = new Set(others.filter((n) => n !== this.nodeId));
    let done = (): void => {};
    const answered = new Promise<void>((resolve) => (done = resolve));
    let timer: NodeJS.Timeout | undefined;
    this.nodeAsks.set(rid, { answers, waiting, done });
    try {
      if (waiting.size > 0) {
        const envelope: AskEnvelope = { from: this.nodeId, ask: { ...ask, rid }, ...(ask.kind === 'drain' ? this.signDrain(ask.node, rid) : {}) };
        try {
          await this.redis.publish(CONTROL_CHANNEL, JSON.stringify(envelope));
        } catch (err) {
          if (ask.kind === 'drain') throw new RedisUnavailable(err);
          this.log.debug({ err, kind: ask.kind }, 'a node ask not sent (redis did not take it): this node answers alone');
          await mine();
          return { answers, unanswered: [...waiting] };
        }
      }
      timer = setTimeout(() => done(), this.cfg.nodeAnswerMs);
      await mine();
      if (waiting.size > 0) await answered;
      return { answers, unanswered: [...waiting] };
    } finally {
      clearTimeout(timer);
      this.nodeAsks.delete(rid);
    }
  }

  /**
   * A drain of another node is signed with ADMIN_TOKEN (which every node of
   * a cluster shares) and dated, so that a Redis client without the token
   * cannot stop a node, and a drain that reached its node late (a paused
   * node, a message replayed) is not carried out (DRAIN_VALID_MS).
   */
  private signDrain(node: string, rid: number): { sentAt: number; mac: string } {
    const sentAt = Date.now();
    return { sentAt, mac: drainMac(this.cfg.adminToken ?? '', this.nodeId, rid, node, sentAt) };
  }

  private drainValid(e: AskEnvelope, node: string): boolean {
    const token = this.cfg.adminToken;
    if (token === undefined || typeof e.sentAt !== 'number' || typeof e.mac !== 'string') return false;
    const want = Buffer.from(drainMac(token, e.from, e.ask.rid, node, e.sentAt));
    const got = Buffer.from(e.mac);
    return got.length === want.length && timingSafeEqual(got, want) && Math.abs(Date.now() - e.sentAt) <= DRAIN_VALID_MS;
  }

  /** Another node's question: answered when it concerns this node. */
  private askFrom(e: AskEnvelope): void {
    const a = e.ask;
    if (a.kind === 'drain') {
      if (a.node !== this.nodeId) return;
      if (!this.drainValid(e, a.node)) {
        this.ignored++;
        this.log.warn({ from: e.from }, 'a drain of this node on the control channel without a valid signature, or too old: ignored');
        return;
      }
    }
    this.answerAsk(a, e.from)
      .then((body) => this.redis!.publish(controlReplyChannel(e.from), JSON.stringify({ from: this.nodeId, rid: a.rid, body: body ?? null })))
      .catch((err: unknown) => this.log.warn({ err, from: e.from, kind: a.kind }, 'a node ask: this node\'s answer was not sent'));
  }

  /**
   * A publish to users from this node's admin API. Embedded: this node's
   * shards. Cluster: one PUBLISH on the control channel takes it to every
   * node, each answers on this node's reply channel with the users it holds
   * (one PUBLISH each), and this waits for the nodes alive at the last lease
   * renewal, at most WS_NODE_ANSWER_MS: the Redis calls grow with publishes and
   * nodes, never with users. A node that does not answer in time has still
   * been sent the event; its users are not counted as online.
   */
  async toUsers(tenant: string, users: readonly string[], frame: string): Promise<UsersResult> {
    this.userEvents.publishes++;
    const online = new Set<string>();
    if (this.redis !== undefined) {
      const rid = this.nextRid++;
      const waiting = new Set([...(this.registry?.nodes ?? [])].filter((n) => n !== this.nodeId));
      let done = (): void => {};
      const answered = new Promise<void>((resolve) => (done = resolve));
      this.asks.set(rid, { online, waiting, done });
      try {
        await this.redis.publish(CONTROL_CHANNEL, JSON.stringify({ from: this.nodeId, users: { rid, tenant, users, frame } } satisfies UsersEnvelope));
      } catch (err) {
        this.asks.delete(rid);
        this.log.warn({ err }, 'publish to users not sent: redis did not take it');
        return { ok: false, reason: 'unavailable', message: 'redis did not take the event, so no node sent it; retry' };
      }
      // The nodes' window starts once Redis took the request, however long that took.
      const timer = setTimeout(() => done(), this.cfg.nodeAnswerMs);
      for (const u of await this.deliverToUsers(tenant, users, frame)) online.add(u);
      if (waiting.size > 0) await answered;
      clearTimeout(timer);
      this.asks.delete(rid);
      if (waiting.size > 0) {
        this.userEvents.unanswered += waiting.size;
        this.log.warn({ nodes: [...waiting] }, 'publish to users: some nodes did not say in time which users they hold');
      }
    } else {
      for (const u of await this.deliverToUsers(tenant, users, frame)) online.add(u);
    }
    // In the order asked: the answer reads as a filter of the request.
    const list = users.filter((u) => online.has(u));
    this.userEvents.online += list.length;
    this.userEvents.offline += users.length - list.length;
    return { ok: true, online: list };
  }

  /** Another node's answer to one of this node's publishes to users. */
  private answered(message: string): void {
    let a: Partial<UsersAnswer> | undefined;
    try {
      a = JSON.parse(message) as Partial<UsersAnswer>;
    } catch {
      a = undefined;
    }
    if (typeof a === 'object' && a !== null && typeof a.from === 'string' && typeof a.rid === 'number' && 'body' in a) {
      const wait = this.nodeAsks.get(a.rid);
      if (wait === undefined || !wait.waiting.has(a.from)) return; // Too late, or not asked.
      wait.answers.set(a.from, (a as { body: unknown }).body);
      wait.waiting.delete(a.from);
      if (wait.waiting.size === 0) wait.done();
      return;
    }
    if (typeof a !== 'object' || a === null || typeof a.from !== 'string' || !Array.isArray(a.online) || typeof a.rid !== 'number') {
      this.ignored++;
      return;
    }
    const ask = this.asks.get(a.rid);
    if (ask === undefined) return; // Too late: answered already.
    for (const u of a.online) if (typeof u === 'string') ask.online.add(u);
    ask.waiting.delete(a.from);
    if (ask.waiting.size === 0) ask.done();
  }

  /** Another node's publish to users: delivered here, and answered with the users this node holds. */
  private usersFrom(e: UsersEnvelope): void {
    const u = e.users;
    this.received++;
    this.deliverToUsers(u.tenant, u.users, u.frame).then((online) => {
      const answer: UsersAnswer = { from: this.nodeId, rid: u.rid, online };
      return this.redis!.publish(controlReplyChannel(e.from), JSON.stringify(answer));
    }).catch((err: unknown) => this.log.warn({ err, from: e.from }, 'publish to users: this node\'s answer was not sent'));
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
    if (isUsersEnvelope(env)) {
      if (env.from !== this.nodeId) this.usersFrom(env);
      return;
    }
    if (isAskEnvelope(env)) {
      if (env.from !== this.nodeId) this.askFrom(env);
      return;
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
