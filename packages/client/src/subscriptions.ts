/**
 * Subscriptions: one record per topic with its handlers and its resume
 * position, which outlives sockets. Delivers events in id order, settles
 * `ready`, and says which topics to join (again) on a new socket. A topic
 * the server joined the socket to (`subscribed`) gets a record like one of
 * subscribe(), without handlers until subscribe() adds one.
 */
import { compareEventIdStrings, type EventFrame, parseEventId, TOPIC_PATTERN } from '@sluice/protocol';
import { callSafely } from './emitter.ts';
import { errorCode, SluiceError } from './errors.ts';
import type { Emit, EventHandler, JoinResult, SluiceEvent, SubscribeOptions, Subscription } from './types.ts';

export interface TopicState {
  readonly name: string;
  readonly subs: Set<SubscriptionImpl>;
  /** The resume position: the last durable event's id, or the `since` of the first subscribe(). */
  lastId: string | undefined;
  /** On the current socket: waiting to send the join, join sent, or joined. */
  status: 'pending' | 'sent' | 'joined';
  everJoined: boolean;
  /**
   * The server joined a socket to it (`subscribed`, from `POST /v1/subscribe`).
   * It is joined again after a reconnect like any topic, with the client's
   * own token; a refusal of that join drops it with `unsubscribed` (the
   * refusal's reason), not with an error.
   */
  server: boolean;
}

/** A join in flight: what its reply settles. */
export interface JoinRequest {
  readonly topic: TopicState;
  readonly since: string | undefined;
  readonly rejoin: boolean;
}

class SubscriptionImpl implements Subscription {
  readonly ready: Promise<JoinResult>;
  private settled = false;
  private resolveReady!: (r: JoinResult) => void;
  private rejectReady!: (e: SluiceError) => void;

  constructor(private readonly registry: Subscriptions, readonly state: TopicState, readonly handler: EventHandler) {
    this.ready = new Promise<JoinResult>((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    // Awaiting `ready` is optional: a rejection nobody awaits must not become an unhandled rejection.
    this.ready.catch(() => undefined);
  }

  get topic(): string {
    return this.state.name;
  }

  get lastId(): string | undefined {
    return this.state.lastId;
  }

  unsubscribe(): void {
    this.registry.remove(this);
  }

  settle(result: JoinResult | SluiceError): void {
    if (this.settled) return;
    this.settled = true;
    if (result instanceof SluiceError) this.rejectReady(result);
    else this.resolveReady(result);
  }
}

export class Subscriptions {
  private readonly topics = new Map<string, TopicState>();

  constructor(
    private readonly emit: Emit,
    private readonly report: (e: SluiceError) => void,
    /** A new topic to join now (when the socket is welcomed). */
    private readonly join: (t: TopicState) => void,
    /** The last handler of a topic whose join is sent or done is gone. */
    private readonly leave: (t: TopicState) => void,
  ) {}

  add(topic: string, handler: EventHandler, options: SubscribeOptions): Subscription {
    if (typeof topic !== 'string' || !TOPIC_PATTERN.test(topic)) throw new SluiceError('bad_request', 'topic must match ^[A-Za-z0-9:_.\\-]{1,200}$');
    if (options.since !== undefined && parseEventId(options.since) === undefined) {
      throw new SluiceError('bad_request', 'since must be an event id such as "1732900000000-0"', { topic });
    }
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    let state = this.topics.get(topic);
    if (state === undefined) {
      state = { name: topic, subs: new Set(), lastId: options.since, status: 'pending', everJoined: false, server: false };
      this.topics.set(topic, state);
      this.join(state);
    }
    const sub = new SubscriptionImpl(this, state, handler);
    state.subs.add(sub);
    if (state.status === 'joined') sub.settle({ recovered: undefined });
    return sub;
  }

  remove(sub: SubscriptionImpl): void {
    const state = sub.state;
    if (!state.subs.delete(sub)) return;
    sub.settle(new SluiceError('closed', 'unsubscribed before the join completed', { topic: state.name }));
    if (state.subs.size > 0 || this.topics.get(state.name) !== state) return;
    this.topics.delete(state.name);
    // A join still queued is skipped when its turn comes; one sent is undone with a leave.
    if (state.status !== 'pending') this.leave(state);
  }

  /** Whether `t` is still the topic's record and waiting for its join on this socket. */
  wantsJoin(t: TopicState): boolean {
    return this.topics.get(t.name) === t && t.status === 'pending';
  }

  has(topic: string): boolean {
    return this.topics.has(topic);
  }

  /** A new socket: every topic is to be joined again. */
  all(): TopicState[] {
    const list = [...this.topics.values()];
    for (const t of list) t.status = 'pending';
    return list;
  }

  /** The socket is gone: no topic is joined on it any more. */
  unjoinAll(): void {
    for (const t of this.topics.values()) t.status = 'pending';
  }

  event(f: EventFrame): void {
    const t = this.topics.get(f.topic);
    if (t === undefined) return; // left, or a leave still under way
    const id = f.id;
    if (id !== undefined) {
      // The gateway sends no duplicate across replay and live; this guards the resume position all the same.
      if (t.lastId !== undefined && (compareEventIdStrings(id, t.lastId) ?? 1) <= 0) return;
      t.lastId = id;
    }
    const ev: SluiceEvent = {
      topic: f.topic,
      data: f.data,
      ...(id === undefined ? {} : { id }),
      ...(f.key === undefined ? {} : { key: f.key }),
      ...(f.traceparent === undefined ? {} : { traceparent: f.traceparent }),
    };
    for (const sub of [...t.subs]) callSafely(sub.handler, ev);
  }

  joined(p: JoinRequest, data: unknown): void {
    const t = p.topic;
    if (this.topics.get(t.name) !== t) return;
    t.status = 'joined';
    t.everJoined = true;
    const r = (typeof data === 'object' && data !== null ? data : {}) as { recovered?: unknown };
    const recovered = typeof r.recovered === 'boolean' ? r.recovered : undefined;
    for (const sub of t.subs) sub.settle({ recovered });
    if (p.since !== undefined && recovered !== undefined) this.emit('recovered', { topic: t.name, recovered, since: p.since });
    else if (p.rejoin && p.since === undefined) this.emit('recovered', { topic: t.name, recovered: false, since: undefined });
  }

  /**
   * The join was refused. True when it is to be tried again (rate_limited,
   * unavailable); otherwise (forbidden, too_many_joins, bad_request) the
   * topic cannot be joined and is dropped.
   */
  refused(t: TopicState, reason: string, message: string | undefined): boolean {
    if (this.topics.get(t.name) !== t) return false;
    // The server joined the socket to it meanwhile (`subscribed`): the answer to our own join changes nothing.
    if (t.status === 'joined') return false;
    t.status = 'pending';
    if (reason === 'rate_limited' || reason === 'unavailable') return true;
    this.topics.delete(t.name);
    const err = new SluiceError(errorCode(reason), `join of ${t.name} refused: ${message ?? reason}`, { topic: t.name });
    for (const sub of t.subs) sub.settle(err);
    // A topic the server had given, joined again with a token that does not allow it: the server's gift has ended, not an error.
    if (t.server) this.emit('unsubscribed', { topic: t.name, reason });
    else this.report(err);
    return false;
  }

  /**
   * The server joined the socket to `topic` (`subscribed`). A topic new to
   * the client gets a record, joined, without handlers, and `subscribed` is
   * emitted before any of its events: a listener that calls subscribe()
   * gets them all, without a join being sent. A topic already subscribed
   * is marked as the server's too, and nothing is emitted.
   */
  subscribed(topic: string): void {
    const t = this.topics.get(topic);
    if (t === undefined) {
      this.topics.set(topic, { name: topic, subs: new Set(), lastId: undefined, status: 'joined', everJoined: true, server: true });
      this.emit('subscribed', { topic });
      return;
    }
    t.server = true;
    // A join of ours still queued is skipped; one under way gets its reply all the same.
    t.status = 'joined';
    t.everJoined = true;
    for (const sub of t.subs) sub.settle({ recovered: undefined });
  }

  /**
   * The server took the topic away (`unsubscribed`): it is dropped as a
   * refused join is, without an error (the server meant it), and
   * `unsubscribed` is emitted. A later subscribe() joins it again, if the
   * token then allows it.
   */
  removed(topic: string, reason: string): void {
    const t = this.topics.get(topic);
    if (t === undefined) return;
    this.topics.delete(topic);
    const err = new SluiceError(errorCode(reason), `the server unsubscribed ${topic}: ${reason}`, { topic });
    for (const sub of t.subs) sub.settle(err);
    this.emit('unsubscribed', { topic, reason });
  }

  /** Rejects `ready` of every subscription, or (`onlyUnjoined`) of those not joined yet. */
  failAll(err: SluiceError, onlyUnjoined: boolean): void {
    for (const t of this.topics.values()) if (!onlyUnjoined || t.status !== 'joined') for (const sub of t.subs) sub.settle(err);
  }
}
