/**
 * A socket's life after the upgrade: open and close, and every frame it
 * sends: the guard (before anything is decoded), the decode, and the
 * commands (publish, join, leave, ping). A rejected frame is answered and
 * goes no further; the socket stays open unless it struck out.
 */
import { allows, clearStrikes, Guard, frameWindowWait, guardFrame, type MailItem, type PublishResult, type Revocations, strike, tokenKey, topicKey } from '@sluice/core';
import { type CloseReason, decodeClientFrame, encodePong, encodeRejection, encodeReplyOk, encodeUnsubscribed, type ErrorReason,
  encodeSubscribed, type JoinFrame, type LeaveFrame, PEEK_REF_BYTES, peekRef, type PresenceFrame, type PublishFrame, type RefreshFrame, welcomeFrame,
  welcomePrefix } from '@sluice/protocol';
import { endSpan } from '@sluice/telemetry';
import type { Verified, Verifier } from '../auth.ts';
import { ExpiryTimers } from '../expiry.ts';
import type { SharedLimits } from '../shared-limits.ts';
import type { ShardBroker } from '../shard-broker.ts';
import type { MeshBroker } from '../mesh-broker.ts';
import type { SharedState } from '../shared-state.ts';
import type { SlowLane } from '../slow-lane.ts';
import type { ShardContext } from './context.ts';
import type { ShardMetrics } from './metrics.ts';
import type { Recoveries, Recovery } from './recovery.ts';
import type { Replies } from './replies.ts';
import { closeSocket, type HookJoin, type Socket, type SocketData, socketId } from './socket-data.ts';
import { positionOf, type Topics } from './topics.ts';
import type { SocketIndex } from './socket-index.ts';
import type { UserSocketCap } from '../user-socket-cap.ts';
import type { ShardPresence } from './presence.ts';
import type { ShardHooks } from '../hooks.ts';
import type { Lifecycle } from './lifecycle.ts';
import { type ConnectAnswer, parseConnectAnswer, parsePublishAnswer, parseSubscribeAnswer, type PublishAnswer,
  type SubscribeAnswer } from '@sluice/core';

const CRASH_FRAME = '{"type":"debug.crash"}';
const utf8 = new TextDecoder();

export interface SessionParts {
  readonly metrics: ShardMetrics;
  readonly broker: ShardBroker;
  readonly limits: SharedLimits;
  /** The node's mesh: presence reads go to a topic's owner shard through it. */
  readonly mesh: MeshBroker;
  readonly shared: SharedState;
  readonly topics: Topics<Recovery>;
  readonly recoveries: Recoveries;
  readonly lane: SlowLane<SocketData>;
  readonly replies: Replies;
  /** WS_AUTH=jwt: checks a `refresh`'s token as the upgrade checks the first; null with WS_AUTH=none. */
  readonly verifier: Verifier | null;
  /** The revocations in force (POST /v1/revoke), in memory: checked on open and on refresh. */
  readonly revocations: Revocations;
  /** This shard's open sockets by user, and those whose token has a `jti` by token. */
  readonly users: SocketIndex<Socket>;
  readonly tokens: SocketIndex<Socket>;
  /** WS_MAX_USER_SOCKETS: every socket claimed one at its upgrade and gives it back at its close; null when off. */
  readonly cap: UserSocketCap | null;
  /** WS_PRESENCE_TOPICS: null when no topic keeps presence. */
  readonly presence: ShardPresence | null;
  /** The backend hooks (WS_AUTH=hook, WS_SUBSCRIBE_HOOK_URL, WS_PUBLISH_HOOK_URL): each client null when not configured. */
  readonly hooks: ShardHooks;
  /** WS_WEBHOOK_URL: connects and disconnects are reported; null without it. */
  readonly lifecycle: Lifecycle | null;
}

const CLASS_NAMES = ['durable', 'keyed', 'ephemeral'] as const;
/** A key that can go in an HTTP header as it is (the body carries every key). */
const ASCII = /^[\x20-\x7e]+$/;
const isConnectRefusal = (a: ConnectAnswer): boolean => !a.allow;
const isSubscribeRefusal = (a: SubscribeAnswer): boolean => !a.allow;
const isPublishRefusal = (a: PublishAnswer): boolean => !a.allow;

export class Session {
  /** Every open socket of this shard. */
  readonly sockets = new Set<Socket>();
  private readonly welcome: string;
  private readonly expiry = new ExpiryTimers<Socket>((ws) => this.close(ws, ws.getUserData().d, 'token_expired'));

  constructor(private readonly ctx: ShardContext, private readonly p: SessionParts) {
    this.welcome = welcomePrefix(ctx.cfg.heartbeatMs, ctx.cfg);
    p.recoveries.afterReply = (ws, d, key) => this.present(ws, d, key);
  }

  /** After a join's reply (or a server-side `subscribed`): on a presence topic the socket counts, and gets `presence_state`. */
  private present(ws: Socket, d: SocketData, key: string): void {
    const presence = this.p.presence;
    if (presence === null || !presence.keeps(key)) return;
    presence.joined(d, key);
    ws.send(presence.stateFrame(d, key), false, this.ctx.compressEvents);
  }

  /** Closes a socket with the code and JSON reason of the protocol's close table. */
  close(ws: Socket, d: SocketData, reason: CloseReason, retryAfterMs?: number): void {
    closeSocket(ws, d, reason, this.ctx.counters.closes, retryAfterMs);
  }

  stop(): void {
    this.expiry.clear();
  }

  readonly opened = (ws: Socket): void => {
    const d = ws.getUserData().d;
    this.sockets.add(ws);
    this.p.users.add(d.userKey, ws);
    if (d.jti !== undefined) this.p.tokens.add(tokenKey(d.tenant, d.jti), ws);
    this.p.shared.addSockets(this.ctx.task.shard, 1);
    ws.send(welcomeFrame(this.welcome, socketId(d), d.expiresAt), false);
    this.p.lifecycle?.connect(d.tenant, d.user, socketId(d));
    // A revocation may have arrived between the upgrade's check and now.
    if (this.p.revocations.size > 0 && this.p.revocations.revoked(d, Date.now())) {
      this.close(ws, d, 'token_revoked');
      return;
    }
    if (d.expiresAt !== Infinity) {
      // The token may have expired between its check and now.
      if (d.expiresAt <= Date.now()) this.close(ws, d, 'token_expired');
      else this.expiry.add(ws, d.expiresAt);
    }
  };

  readonly closed = (ws: Socket, code: number, message: ArrayBuffer): void => {
    const d = ws.getUserData().d;
    d.open = false;
    this.p.lifecycle?.disconnect(d.tenant, d.user, socketId(d), code, message);
    this.sockets.delete(ws);
    this.p.users.delete(d.userKey, ws);
    if (d.jti !== undefined) this.p.tokens.delete(tokenKey(d.tenant, d.jti), ws);
    if (d.claimed) this.p.cap!.release(d.userKey);
    this.p.shared.addSockets(this.ctx.task.shard, -1);
    if (d.expiresAt !== Infinity) this.expiry.delete(ws, d.expiresAt);
    this.p.lane.forget(ws, d);
    if (d.topics !== null) {
      // uWS already removed the socket from its native topics.
      for (const key of d.topics.values()) {
        this.p.recoveries.cancel(d, key);
        if (d.present !== null) this.p.presence!.left(d, key);
        this.p.topics.release(key);
      }
      d.topics = null;
      d.granted = null;
    }
  };

  readonly message = (ws: Socket, buf: ArrayBuffer, isBinary: boolean): void => {
    const d = ws.getUserData().d;
    if (!d.open) return;
    const ctx = this.ctx;
    const cfg = ctx.cfg;
    ctx.counters.framesIn++;
    const now = Date.now();
    switch (guardFrame(d, buf.byteLength, isBinary, now, cfg)) {
      case Guard.Pass:
        break;
      case Guard.HardCap:
        ctx.lines.closed.write({ conn: socketId(d), ip: d.ip, bytes: buf.byteLength }, 'closing socket: frame above the hard cap');
        this.close(ws, d, 'payload_too_large');
        return;
      case Guard.RateLimited:
        this.reject(ws, d, peek(buf), 'rate_limited', frameWindowWait(d, now, cfg.rateWindowMs));
        return;
      case Guard.Binary:
        this.reject(ws, d, undefined, 'bad_request', undefined, 'binary frames are not accepted: send JSON text');
        return;
      case Guard.TooLarge:
        this.reject(ws, d, peek(buf), 'payload_too_large', undefined, `frame above ${cfg.maxFrameBytes} bytes`);
        return;
    }
    const text = utf8.decode(buf);
    if (ctx.task.testHooks && text === CRASH_FRAME) throw new Error('debug.crash: shard crashed on purpose');
    const r = decodeClientFrame(text);
    if (!r.ok) {
      this.reject(ws, d, r.ref, r.reason, undefined, r.message);
      return;
    }
    const f = r.frame;
    switch (f.type) {
      case 'publish':
        this.publish(ws, d, f);
        return;
      case 'join':
        this.join(ws, d, f);
        return;
      case 'leave':
        this.leave(ws, d, f);
        return;
      case 'ping':
        clearStrikes(d);
        ws.send(encodePong(f.ref), false);
        return;
      case 'refresh':
        this.refresh(ws, d, f);
        return;
      case 'presence':
        this.presenceAsk(ws, d, f);
        return;
    }
  };

  /** A `presence` frame: who is present on a topic the socket may join. */
  private presenceAsk(ws: Socket, d: SocketData, f: PresenceFrame): void {
    if (!allows(d.join, f.topic) && d.granted?.has(f.topic) !== true) {
      this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow joining ${f.topic}`);
      return;
    }
    const key = topicKey(d.tenant, f.topic);
    const presence = this.p.presence;
    if (presence === null || !presence.keeps(key)) {
      this.reject(ws, d, f.ref, 'bad_request', undefined, `${f.topic} does not keep presence (WS_PRESENCE_TOPICS)`);
      return;
    }
    clearStrikes(d);
    const local = presence.localData(key, d);
    if (local !== undefined) {
      ws.send(encodeReplyOk(f.ref, local), false);
      return;
    }
    this.p.mesh.presenceRead(key).then((data) => {
      if (d.open) ws.cork(() => ws.send(encodeReplyOk(f.ref, data), false));
    }, () => {
      if (d.open) ws.cork(() => ws.send(encodeRejection(f.ref, 'unavailable'), false));
    });
  }

  /** Answers a rejected frame; the frame goes no further and the socket stays open, unless it struck out. */
  private reject(ws: Socket, d: SocketData, ref: string | undefined, reason: ErrorReason, retryAfterMs?: number, message?: string): void {
    const ctx = this.ctx;
    ctx.counters.rejections[reason]++;
    ws.send(encodeRejection(ref, reason, retryAfterMs, message), false);
    if (ctx.lines.rejected.enabled) ctx.lines.rejected.write({ conn: socketId(d), reason, ref }, 'frame rejected');
    if (strike(d, reason, ctx.cfg.maxStrikes)) {
      ctx.lines.closed.write({ conn: socketId(d), ip: d.ip, strikes: d.strikes }, 'closing socket: too many rejected frames in a row');
      this.close(ws, d, 'abusive');
    }
  }

  private publish(ws: Socket, d: SocketData, f: PublishFrame): void {
    if (!allows(d.pub, f.topic)) {
      this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow publishing to ${f.topic}`);
      return;
    }
    const now = Date.now();
    if (d.userWindowKey !== '') {
      const userWait = this.p.limits.userPublish(d.userWindowKey, now);
      if (userWait !== 0) {
        this.reject(ws, d, f.ref, 'user_rate_limited', userWait);
        return;
      }
    }
    const wait = this.p.limits.publish(d.tenantWindowKey, now);
    if (wait !== 0) {
      this.reject(ws, d, f.ref, 'tenant_rate_limited', wait);
      return;
    }
    const hooks = this.p.hooks;
    // Behind a publish the backend is deciding, every later publish of the socket waits its turn: one sender's events stay in order.
    if (d.hookPubs !== null || (hooks.publish !== null && allows(hooks.publishTopics!, f.topic))) {
      d.inflight++;
      (d.hookPubs ??= []).push(f);
      if (d.hookPubs.length === 1) this.nextHooked(ws, d);
      return;
    }
    this.send(ws, d, f);
  }

  /**
   * The oldest waiting publish of the socket: asked of the publish hook
   * (when its topic is one), then sent to the broker, or refused; then the
   * next. The ack follows the backend's answer.
   */
  private nextHooked(ws: Socket, d: SocketData): void {
    const queue = d.hookPubs!;
    const hooks = this.p.hooks;
    while (queue.length > 0 && (!allows(hooks.publishTopics!, queue[0]!.topic) || !allows(d.pub, queue[0]!.topic))) {
      const next = queue.shift()!;
      d.inflight--;
      // A refresh while it waited may have taken the right away.
      if (!allows(d.pub, next.topic)) this.reject(ws, d, next.ref, 'forbidden', undefined, `the token does not allow publishing to ${next.topic}`);
      else this.send(ws, d, next);
      if (!d.open) {
        d.hookPubs = null;
        return;
      }
    }
    if (queue.length === 0) {
      d.hookPubs = null;
      return;
    }
    const f = queue[0]!;
    const maxData = this.ctx.cfg.maxFrameBytes;
    hooks.publish!.call('publish', publishBody(this.ctx.task.nodeId, d, f), (json) => parsePublishAnswer(json, maxData), isPublishRefusal,
      f.idempotencyKey === undefined || !ASCII.test(f.idempotencyKey) ? undefined : { 'idempotency-key': f.idempotencyKey }).then((r) => {
      d.inflight--;
      if (!d.open) {
        d.hookPubs = null;
        return;
      }
      ws.cork(() => {
        if (!r.ok) this.reject(ws, d, f.ref, 'unavailable', r.retryAfterMs, 'the backend did not decide this publish (WS_PUBLISH_HOOK_URL)');
        else if (!r.value.allow) this.reject(ws, d, f.ref, 'forbidden', undefined, r.value.message ?? 'the backend refused this publish');
        else if (!allows(d.pub, f.topic)) this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow publishing to ${f.topic}`);
        else this.send(ws, d, r.value.dataJson === undefined ? f : { ...f, dataJson: r.value.dataJson });
        if (!d.open) {
          d.hookPubs = null;
          return;
        }
        queue.shift();
        this.nextHooked(ws, d);
      });
    });
  }

  /** A publish the rights, limits and hook allowed: to the broker, and the ack when it answers. */
  private send(ws: Socket, d: SocketData, f: PublishFrame): void {
    // Only now is the frame accepted: a publish the hook refuses is a strike, and must not have cleared the others.
    clearStrikes(d);
    d.inflight++;
    let inline = true;
    const t0 = performance.now();
    const tracing = this.ctx.tracing;
    const traced = tracing === null ? undefined : tracing.publish(d.tenant, f);
    this.p.broker.publishThen(d.tenant, traced?.req ?? f, (res: PublishResult) => {
      d.inflight--;
      if (traced !== undefined) tracing!.endPublish(traced, res);
      if (!d.open) return;
      let reply: string;
      if (!res.ok) reply = encodeRejection(f.ref, res.reason);
      else if (res.id === undefined) reply = encodeReplyOk(f.ref);
      else reply = encodeReplyOk(f.ref, res.duplicate ? `{"id":"${res.id}","duplicate":true}` : `{"id":"${res.id}"}`);
      // Answered within this message handler (this shard owns the topic):
      // uWS corks the handler's sends, and the send drains the event that
      // app.publish queued for this socket first.
      if (inline) ws.send(reply, false);
      else this.p.replies.queue(ws, reply);
      if (res.ok) this.p.metrics.ackLatency.observe(f.cls, (performance.now() - t0) / 1000);
    }, d.topics?.get(f.topic));
    inline = false;
  }

  private join(ws: Socket, d: SocketData, f: JoinFrame): void {
    if (d.topics?.has(f.topic) === true) {
      clearStrikes(d);
      ws.send(encodeReplyOk(f.ref), false);
      return;
    }
    const pending = d.hookJoins?.get(f.topic);
    if (pending !== undefined && !pending.cancelled) {
      // The backend is deciding this topic for an earlier join: this one is answered as that one is.
      pending.waiting.push(f);
      return;
    }
    if (!allows(d.join, f.topic)) {
      this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow joining ${f.topic}`);
      return;
    }
    const maxJoins = this.ctx.cfg.maxJoins;
    if ((d.topics?.size ?? 0) + (d.hookJoins?.size ?? 0) >= maxJoins) {
      this.reject(ws, d, f.ref, 'too_many_joins', undefined, `at most ${maxJoins} joined topics per socket`);
      return;
    }
    const hooks = this.p.hooks;
    if (hooks.subscribe !== null && allows(hooks.subscribeTopics!, f.topic)) {
      const cacheKey = `${d.userKey}\u0000${f.topic}`;
      const hit = hooks.cache.get(cacheKey, Date.now());
      if (hit === undefined) {
        this.askSubscribe(ws, d, f, cacheKey);
        return;
      }
      if (!hit.allow) {
        this.reject(ws, d, f.ref, 'forbidden', undefined, hit.message ?? `the backend does not allow joining ${f.topic}`);
        return;
      }
    }
    this.joinNow(ws, d, f);
  }

  /** The subscribe hook decides a join; the socket's other frames go on meanwhile. */
  private askSubscribe(ws: Socket, d: SocketData, f: JoinFrame, cacheKey: string): void {
    const entry: HookJoin = { cancelled: false, waiting: [] };
    (d.hookJoins ??= new Map()).set(f.topic, entry);
    const body = `{"hook":"subscribe","node":${JSON.stringify(this.ctx.task.nodeId)},"tenant":"${d.tenant}","user":${JSON.stringify(d.user)},` +
      `"connectionId":"${socketId(d)}","topic":"${f.topic}"}`;
    this.p.hooks.subscribe!.call('subscribe', body, parseSubscribeAnswer, isSubscribeRefusal).then((r) => {
      if (d.hookJoins?.get(f.topic) === entry) d.hookJoins.delete(f.topic);
      if (d.hookJoins?.size === 0) d.hookJoins = null;
      if (r.ok) this.p.hooks.cache.set(cacheKey, r.value.allow, r.value.message, r.value.cacheMs, Date.now());
      if (!d.open) return;
      ws.cork(() => {
        if (!r.ok) this.reject(ws, d, f.ref, 'unavailable', r.retryAfterMs, 'the backend did not decide this join (WS_SUBSCRIBE_HOOK_URL)');
        else if (!r.value.allow) this.reject(ws, d, f.ref, 'forbidden', undefined, r.value.message ?? `the backend does not allow joining ${f.topic}`);
        // Left (or removed by the operator) before the backend answered: the join happened, the leave undid it.
        else if (entry.cancelled) ws.send(encodeReplyOk(f.ref), false);
        // A refresh while the backend decided may have taken the right away.
        else if (!allows(d.join, f.topic) && d.granted?.has(f.topic) !== true) {
          this.reject(ws, d, f.ref, 'forbidden', undefined, `the token does not allow joining ${f.topic}`);
        } else this.joinNow(ws, d, f);
        for (const w of entry.waiting) {
          if (!d.open) return;
          // Joins sent before the leave that cancelled the first: answered as it was, in their order, without joining.
          if (entry.cancelled) ws.send(encodeReplyOk(w.ref), false);
          else this.join(ws, d, w);
        }
      });
    });
  }

  /** A join every check allowed: the topic is acquired (subscribed by its owner), then the reply, or the replay of `since` first. */
  private joinNow(ws: Socket, d: SocketData, f: JoinFrame): void {
    if (d.topics?.has(f.topic) === true) {
      // Joined meanwhile (an operator's subscribe while the backend decided): one join, one count.
      clearStrikes(d);
      ws.send(encodeReplyOk(f.ref), false);
      return;
    }
    if ((d.topics?.size ?? 0) >= this.ctx.cfg.maxJoins) {
      this.reject(ws, d, f.ref, 'too_many_joins', undefined, `at most ${this.ctx.cfg.maxJoins} joined topics per socket`);
      return;
    }
    clearStrikes(d);
    const key = topicKey(d.tenant, f.topic);
    (d.topics ??= new Map()).set(f.topic, key);
    const since = f.since;
    const span = this.ctx.tracing?.join(f.topic, d.tenant, since !== undefined);
    const { topics, lane } = this.p;
    topics.acquire(key, (ok) => {
      if (!d.open) {
        endSpan(span, 'closed');
        return;
      }
      if (d.topics?.get(f.topic) !== key) {
        // Left before the join completed: the join happened, the leave undid it.
        ws.cork(() => ws.send(encodeReplyOk(f.ref), false));
        endSpan(span);
        return;
      }
      if (!ok) {
        d.topics.delete(f.topic);
        topics.release(key);
        ws.cork(() => ws.send(encodeRejection(f.ref, 'unavailable'), false));
        endSpan(span, 'unavailable');
        return;
      }
      if (since === undefined) {
        // Subscribed at the same step as the position is read: every durable
        // event above it reaches the socket, and a rejoin with it as `since`
        // loses nothing (the SDK keeps it as its resume point).
        const position = positionOf(topics.get(key)!);
        ws.cork(() => {
          lane.subscribe(ws, d, key);
          ws.send(encodeReplyOk(f.ref, position === undefined ? undefined : `{"position":"${position}"}`), false);
          this.present(ws, d, key);
        });
        endSpan(span);
        return;
      }
      this.p.recoveries.start(ws, d, f, key, since, span);
    });
  }

  private leave(ws: Socket, d: SocketData, f: LeaveFrame): void {
    const key = d.topics?.get(f.topic);
    if (key === undefined) {
      const pending = d.hookJoins?.get(f.topic);
      if (pending !== undefined && !pending.cancelled) {
        // The join the backend is deciding will not take effect.
        pending.cancelled = true;
        clearStrikes(d);
        ws.send(encodeReplyOk(f.ref), false);
        return;
      }
      this.reject(ws, d, f.ref, 'not_joined', undefined, `not joined to ${f.topic}`);
      return;
    }
    clearStrikes(d);
    this.drop(ws, d, f.topic, key);
    ws.send(encodeReplyOk(f.ref), false);
  }

  /** The socket leaves a joined topic: no replay, no lane, and its count in the topic's record. */
  private drop(ws: Socket, d: SocketData, topic: string, key: string): void {
    d.topics!.delete(topic);
    d.granted?.delete(topic);
    this.p.recoveries.cancel(d, key);
    if (d.present !== null) this.p.presence!.left(d, key);
    this.p.lane.unsubscribe(ws, key);
    this.p.topics.release(key);
  }

  /** A new token for the open socket: checked as at the upgrade, then the expiry and rights are replaced. */
  private refresh(ws: Socket, d: SocketData, f: RefreshFrame): void {
    const verifier = this.p.verifier;
    const hook = this.p.hooks.connect;
    if (hook !== null) {
      const body = `{"hook":"refresh","node":${JSON.stringify(this.ctx.task.nodeId)},"ip":${JSON.stringify(d.ip)},"tenant":"${d.tenant}",` +
        `"user":${JSON.stringify(d.user)},"connectionId":"${socketId(d)}","token":${JSON.stringify(f.token)}}`;
      hook.call('refresh', body, (json) => parseConnectAnswer(json, Date.now()), isConnectRefusal).then((r) => {
        if (!d.open) return;
        ws.cork(() => {
          const counts = this.ctx.counters.refreshes;
          if (!r.ok) {
            counts.unavailable++;
            this.reject(ws, d, f.ref, 'unavailable', r.retryAfterMs, 'the backend did not decide this refresh (WS_CONNECT_HOOK_URL)');
          } else if (!r.value.allow) {
            const reason = r.value.status === 401 ? 'unauthorized' : 'forbidden';
            counts[reason]++;
            this.reject(ws, d, f.ref, reason, undefined, r.value.message ?? 'the backend refused this refresh');
          } else {
            this.refreshed(ws, d, f, { ok: true, identity: r.value.identity });
          }
        });
      });
      return;
    }
    if (verifier === null) {
      this.ctx.counters.refreshes.bad_request++;
      this.reject(ws, d, f.ref, 'bad_request', undefined, 'refresh needs WS_AUTH=jwt or hook: this gateway takes no tokens');
      return;
    }
    verifier.verify(f.token, Date.now()).then((v) => {
      if (d.open) ws.cork(() => this.refreshed(ws, d, f, v));
    }, (err: unknown) => {
      // jose does not reject for a bad token (verify answers why): this is a bug, answered and logged.
      this.ctx.log.error({ err, conn: socketId(d) }, 'refresh check failed');
      if (d.open) ws.cork(() => ws.send(encodeRejection(f.ref, 'internal'), false));
    });
  }

  /**
   * The refresh's token was checked. Accepted: the expiry moves to the new
   * `exp`, the rights become the new token's, and every joined topic they no
   * longer allow is left with `unsubscribed` (sent before the reply, so that
   * when the reply arrives the socket's topics are the new rights'). Refused:
   * nothing changes, and it is a strike. The token is never logged.
   */
  private refreshed(ws: Socket, d: SocketData, f: RefreshFrame, v: Verified): void {
    const counts = this.ctx.counters.refreshes;
    if (!v.ok) {
      counts.unauthorized++;
      if (this.ctx.lines.rejected.enabled) this.ctx.lines.rejected.write({ conn: socketId(d), why: v.why }, 'refresh refused');
      this.reject(ws, d, f.ref, 'unauthorized', undefined, 'the token is invalid, expired or revoked');
      return;
    }
    const who = v.identity;
    if (who.tenant !== d.tenant || who.user !== d.user) {
      counts.forbidden++;
      this.reject(ws, d, f.ref, 'forbidden', undefined, 'the token is for another user or tenant than the socket\'s');
      return;
    }
    if (this.p.revocations.size > 0 && this.p.revocations.revoked(who, Date.now())) {
      counts.unauthorized++;
      this.reject(ws, d, f.ref, 'unauthorized', undefined, 'the token is revoked');
      return;
    }
    clearStrikes(d);
    if (who.expiresAt !== d.expiresAt) {
      if (d.expiresAt !== Infinity) this.expiry.delete(ws, d.expiresAt);
      d.expiresAt = who.expiresAt;
      // The Verifier (and the hook's answer check) accepts only an expiry still ahead; a hook identity may have none.
      if (who.expiresAt !== Infinity) this.expiry.add(ws, who.expiresAt);
    }
    d.join = who.join;
    d.pub = who.publish;
    d.issuedAt = who.issuedAt;
    if (who.jti !== d.jti) {
      if (d.jti !== undefined) this.p.tokens.delete(tokenKey(d.tenant, d.jti), ws);
      if (who.jti !== undefined) this.p.tokens.add(tokenKey(d.tenant, who.jti), ws);
      d.jti = who.jti;
    }
    if (d.topics !== null) {
      for (const [topic, key] of d.topics) {
        if (allows(d.join, topic) || d.granted?.has(topic) === true) continue;
        this.drop(ws, d, topic, key);
        ws.send(encodeUnsubscribed(topic, 'forbidden'), false);
      }
    }
    counts.ok++;
    ws.send(encodeReplyOk(f.ref, who.expiresAt === Infinity ? '{}' : `{"expiresAt":${who.expiresAt}}`), false);
  }

  /**
   * `POST /v1/subscribe`: the socket joins `topic` whatever its rights say,
   * and is sent `subscribed` before any event of it (in one cork with the
   * native subscribe). A socket already joined, or at WS_MAX_JOINS, is
   * skipped: false. If the broker cannot subscribe the topic now, the join
   * is undone and nothing is sent.
   */
  grant(ws: Socket, d: SocketData, topic: string): boolean {
    if (!d.open) return false;
    if (d.topics?.has(topic) === true) {
      // Joined by the client already: nothing is sent, but a refresh no longer takes it away.
      (d.granted ??= new Set()).add(topic);
      return false;
    }
    if ((d.topics?.size ?? 0) >= this.ctx.cfg.maxJoins) return false;
    const key = topicKey(d.tenant, topic);
    (d.topics ??= new Map()).set(topic, key);
    (d.granted ??= new Set()).add(topic);
    const { topics, lane } = this.p;
    topics.acquire(key, (ok) => {
      if (!d.open || d.topics?.get(topic) !== key) return;
      if (!ok) {
        d.topics.delete(topic);
        d.granted?.delete(topic);
        topics.release(key);
        this.ctx.lines.degraded.write({ conn: socketId(d), topic }, 'server-side subscribe failed: the topic could not be subscribed now');
        return;
      }
      ws.cork(() => {
        ws.send(encodeSubscribed(topic), false);
        lane.subscribe(ws, d, key);
        this.present(ws, d, key);
      });
    });
    return true;
  }

  /** An event for this socket alone (`$user`), in its place behind a mailbox it may have. */
  sendTo(ws: Socket, d: SocketData, ev: MailItem, now: number): void {
    this.p.lane.sendTo(ws, d, ev, now);
  }

  /** `POST /v1/unsubscribe`: the socket leaves `topic` and is told why (`removed`); false when it was not joined. */
  remove(ws: Socket, d: SocketData, topic: string): boolean {
    // The operator's word beats a cached allow: the user's next join of the topic asks the backend again.
    this.p.hooks.cache.delete(`${d.userKey}\u0000${topic}`);
    const pending = d.hookJoins?.get(topic);
    if (pending !== undefined) pending.cancelled = true;
    const key = d.topics?.get(topic);
    if (!d.open || key === undefined) return false;
    this.drop(ws, d, topic, key);
    ws.cork(() => ws.send(encodeUnsubscribed(topic, 'removed'), false));
    return true;
  }
}

/** The publish hook's request body: who, where, and the data as sent (spliced, already JSON). */
function publishBody(node: string, d: SocketData, f: PublishFrame): string {
  return `{"hook":"publish","node":${JSON.stringify(node)},"tenant":"${d.tenant}","user":${JSON.stringify(d.user)},"connectionId":"${socketId(d)}",` +
    `"topic":"${f.topic}","class":"${CLASS_NAMES[f.cls]}"${f.key === undefined ? '' : `,"key":${JSON.stringify(f.key)}`}` +
    `${f.idempotencyKey === undefined ? '' : `,"idempotencyKey":${JSON.stringify(f.idempotencyKey)}`},"data":${f.dataJson}}`;
}

/** The `ref` of a frame the guard refused, read from its first bytes without decoding it. */
function peek(buf: ArrayBuffer): string | undefined {
  return peekRef(Buffer.from(buf, 0, Math.min(buf.byteLength, PEEK_REF_BYTES)).toString('latin1'));
}
