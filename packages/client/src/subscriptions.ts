/**
 * Subscriptions: one record per topic with its handlers and its resume
 * position, which outlives sockets. Delivers events in id order, settles
 * `ready`, and says which topics to join (again) on a new socket. A topic
 * the server joined the socket to (`subscribed`) gets a record like one of
 * subscribe(), without handlers until subscribe() adds one. Keeps each
 * topic's presence (presence.ts) and tells it to the topic's subscriptions,
 * then to the client.
 */
import { compareEventIdStrings, type EventFrame, parseEventId, type PositionFrame, type PresenceData, type PresenceDiffFrame, type PresenceStateFrame,
  TOPIC_PATTERN, USER_TOPIC } from '@sluice/protocol';
import { callSafely, Emitter } from './emitter.ts';
import { errorCode, SluiceError } from './errors.ts';
import { applyDiff, type PresenceChange, replaceState } from './presence.ts';
import type { Emit, EventHandler, JoinResult, PresenceEvent, PresenceState, SluiceEvent, SubscribeOptions, Subscription,
  SubscriptionEvents } from './types.ts';

/** Why `topic` cannot be subscribed to or asked for presence; undefined when it can. */
export function topicError(topic: unknown): SluiceError | undefined {
  // `$user` is the wire's name for events addressed to the user: no client topic can be it.
  if (topic === USER_TOPIC) return new SluiceError('bad_request', "$user is not a topic: events addressed to the user come to client.on('user-event')");
  if (typeof topic !== 'string' || !TOPIC_PATTERN.test(topic)) return new SluiceError('bad_request', 'topic must match ^[A-Za-z0-9:_.\\-]{1,200}$');
  return undefined;
}

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
  /** The presence kept: the last `presence_state` with the diffs since applied; kept across a reconnect until the next state. */
  presence: PresenceData | undefined;
  /** A `presence_state` came on the current socket: its diffs apply. Before it, a diff is dropped: the state that follows holds it. */
  presenceSynced: boolean;
}

/** A join in flight: what its reply settles. */
export interface JoinRequest {
  readonly topic: TopicState;
  readonly since: string | undefined;
  readonly rejoin: boolean;
}

class SubscriptionImpl extends Emitter<SubscriptionEvents> implements Subscription {
  readonly ready: Promise<JoinResult>;
  private settled = false;
  private resolveReady!: (r: JoinResult) => void;
  private rejectReady!: (e: SluiceError) => void;

  constructor(private readonly registry: Subscriptions, readonly state: TopicState, readonly handler: EventHandler) {
    super();
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

  presence(): PresenceState | undefined {
    return this.state.presence;
  }

  fetchPresence(): Promise<PresenceState> {
    return this.registry.ask(this.state.name);
  }

  /** The topic's presence changed: this subscription's listeners hear it. */
  tell(ev: PresenceEvent): void {
    this.emit('presence', ev);
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
    /** Asks the server for a topic's presence (`client.fetchPresence`). */
    readonly ask: (topic: string) => Promise<PresenceState>,
  ) {}

  add(topic: string, handler: EventHandler, options: SubscribeOptions): Subscription {
    const bad = topicError(topic);
    if (bad !== undefined) throw bad;
    if (options.since !== undefined && parseEventId(options.since) === undefined) {
      throw new SluiceError('bad_request', 'since must be an event id such as "1732900000000-0"', { topic });
    }
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    let state = this.topics.get(topic);
    if (state === undefined) {
      state = { name: topic, subs: new Set(), lastId: options.since, status: 'pending', everJoined: false, server: false, presence: undefined,
        presenceSynced: false };
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
    this.drop(state);
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
    this.unjoinAll();
    return [...this.topics.values()];
  }

  /** The socket is gone: no topic is joined on it any more, and its presence waits for the next socket's state. */
  unjoinAll(): void {
    for (const t of this.topics.values()) {
      t.status = 'pending';
      t.presenceSynced = false;
    }
  }

  /** A topic is no longer the client's: its record and its presence go. */
  private drop(t: TopicState): void {
    this.topics.delete(t.name);
    t.presence = undefined;
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

  /**
   * A fresh resume position for a quiet topic (`position`, sent when no
   * durable event came for a while): every durable event at or below it
   * was sent before, so it is where a rejoin starts when it is newer than
   * the last event's id. Without it, a subscriber of a feed of keyed events
   * only would rejoin from its join's position, which the server vouches
   * for only a limited time.
   */
  position(f: PositionFrame): void {
    const t = this.topics.get(f.topic);
    if (t === undefined || t.status !== 'joined') return;
    if (t.lastId !== undefined && (compareEventIdStrings(f.position, t.lastId) ?? -1) <= 0) return;
    t.lastId = f.position;
  }

  joined(p: JoinRequest, data: unknown): void {
    const t = p.topic;
    if (this.topics.get(t.name) !== t) return;
    t.status = 'joined';
    t.everJoined = true;
    const r = (typeof data === 'object' && data !== null ? data : {}) as { recovered?: unknown; position?: unknown };
    const recovered = typeof r.recovered === 'boolean' ? r.recovered : undefined;
    // A join without `since` tells where the topic stood when the socket was
    // subscribed: the resume point until an event moves it on, so that a
    // rejoin before the first event still gets everything after the join.
    if (typeof r.position === 'string' && parseEventId(r.position) !== undefined && (t.lastId === undefined || (compareEventIdStrings(r.position, t.lastId) ?? -1) > 0)) {
      t.lastId = r.position;
    }
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
    this.drop(t);
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
      this.topics.set(topic, {
        name: topic, subs: new Set(), lastId: undefined, status: 'joined', everJoined: true, server: true, presence: undefined, presenceSynced: false,
      });
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
    this.drop(t);
    const err = new SluiceError(errorCode(reason), `the server unsubscribed ${topic}: ${reason}`, { topic });
    for (const sub of t.subs) sub.settle(err);
    this.emit('unsubscribed', { topic, reason });
  }

  /**
   * A `presence_state`: it replaces the kept state (the one from before a
   * reconnect too), and who is new or gone is told as joins and leaves.
   */
  presenceState(f: PresenceStateFrame): void {
    const t = this.topics.get(f.topic);
    if (t === undefined) return; // left, or a leave still under way
    t.presenceSynced = true;
    this.tell(t, replaceState(t.presence, f));
  }

  /** A `presence_diff`, applied to the state of this socket: joins, then leaves. */
  presenceDiff(f: PresenceDiffFrame): void {
    const t = this.topics.get(f.topic);
    if (t === undefined || !t.presenceSynced || t.presence === undefined) return;
    this.tell(t, applyDiff(t.presence, f));
  }

  private tell(t: TopicState, c: PresenceChange): void {
    t.presence = c.state;
    const ev: PresenceEvent = { topic: t.name, joins: c.joins, leaves: c.leaves, ...c.state };
    for (const sub of [...t.subs]) sub.tell(ev);
    this.emit('presence', ev);
  }

  /** Rejects `ready` of every subscription, or (`onlyUnjoined`) of those not joined yet. */
  failAll(err: SluiceError, onlyUnjoined: boolean): void {
    for (const t of this.topics.values()) if (!onlyUnjoined || t.status !== 'joined') for (const sub of t.subs) sub.settle(err);
  }
}
