/**
 * The SDK's public types: options, events, subscriptions and publishes.
 * Everything here is re-exported from index.ts unchanged.
 */
import type { Limits, PresenceData, PresenceUser } from '@sluice/protocol';
import type { SluiceError } from './errors.ts';
import type { WebSocketConstructor } from './socket.ts';

export type ClientState = 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed';

/** What the `token` callback is told. */
export interface TokenRequest {
  /**
   * True when a new token is wanted: after a close with 4001
   * `token_expired` or 4003 `token_revoked`, or a 401 at the upgrade (the
   * server refused the last one), or, with `reason: 'expiring'`, ahead of
   * the open socket's `expiresAt`, when the client sends the new token on
   * that socket (a `refresh` frame, no reconnect). A cached token must not
   * be handed out again.
   */
  readonly refresh: boolean;
  /**
   * Why a new token is wanted: `token_expired` (close 4001), `token_revoked`
   * (close 4003, or a 401 `token_revoked` at the upgrade: the operator
   * revoked the user's tokens or this one, so a token issued before the
   * revocation, a cached one included, will be refused again),
   * `unauthorized` (any other 401), `expiring` (ahead of `expiresAt`), or
   * undefined (a plain connection attempt).
   */
  readonly reason: 'token_expired' | 'token_revoked' | 'unauthorized' | 'expiring' | undefined;
}

export interface SluiceClientOptions {
  /** `ws://host:port/ws`, or a list: each attempt picks one at random, never the one that just failed or closed. */
  readonly url: string | readonly string[];
  /** Asked before every connection attempt; with `refresh: true` after 4001, 4003 or 401, and before the open socket's token expires. */
  readonly token?: (request: TokenRequest) => string | Promise<string>;
  /**
   * Where the token travels. `protocol` (default): a `bearer.<jwt>`
   * subprotocol next to `sluice.v1`, the only way a browser can send it
   * without the query string. `query`: `?token=<jwt>`, which proxies log.
   */
  readonly tokenIn?: 'protocol' | 'query';
  /** The WebSocket implementation: default `globalThis.WebSocket`; in Node 20 pass the `ws` package's export. */
  readonly WebSocket?: WebSocketConstructor;
  /** Reconnect backoff with full jitter. `resetAfterMs`: a connection open at least this long resets the failure count. */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number; readonly resetAfterMs?: number };
  /** Most unacknowledged publishes kept (default 1000); one more rejects with `outbox_full`. */
  readonly outboxLimit?: number;
  /**
   * Idle time before the client sends a `ping` frame, and the time it then
   * waits for any frame before it declares the socket dead. Default: the
   * server's `heartbeatMs` from `welcome`; 0 turns the check off.
   */
  readonly heartbeatMs?: number;
  /** Random source for jitter and the choice of URL, in [0, 1). Default Math.random. */
  readonly random?: () => number;
  /** From the socket's creation to `welcome` (default 15000); longer counts as a failed attempt. */
  readonly connectTimeoutMs?: number;
  /**
   * How long after its first send an unacknowledged durable publish may still
   * be resent with its idempotencyKey (default 290000, under the gateway's
   * WS_IDEMPOTENCY_TTL_MS of 300000). Past it the publish is rejected with
   * `outcome_unknown` rather than risk a second delivery.
   */
  readonly idempotencyWindowMs?: number;
}

export interface ConnectedEvent {
  readonly connectionId: string;
  readonly url: string;
  /** The server's heartbeat interval from `welcome`. */
  readonly heartbeatMs: number;
  /** The per-socket limits from `welcome`; the client paces its frames under them. */
  readonly limits: Limits;
}

export interface DisconnectedEvent {
  /** The close code (1006 when the socket was cut, or when the client gave up on it: see `reason`). */
  readonly code: number;
  /** The close reason's `reason` (e.g. `unavailable`, `slow_consumer`), or the client's own: `heartbeat_timeout`, `client_closed`. */
  readonly reason: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly willReconnect: boolean;
  readonly url: string;
}

export interface ReconnectingEvent {
  /** The wait before the next attempt. Never less than `retryAfterMs`. */
  readonly inMs: number;
  /** 1 for the first attempt after a good connection, counting up while attempts fail. */
  readonly attempt: number;
  /** The server's hint, when it gave one (close reason, refusal body, Retry-After, ...). */
  readonly retryAfterMs: number | undefined;
  /** Why: a close or refusal reason (`unavailable`, `token_expired`, `ip_rate_limited`, ...) or the client's own. */
  readonly reason: string | undefined;
  /** The close code, when a socket closed. */
  readonly code: number | undefined;
  /** The HTTP status, when the upgrade was refused and the WebSocket implementation showed it (`ws` does, browsers do not). */
  readonly status: number | undefined;
}

export interface RecoveredEvent {
  readonly topic: string;
  /**
   * True when every event after `since` was replayed. False when some may be
   * missing: the application should refetch the topic's state another way.
   */
  readonly recovered: boolean;
  /** The id the join resumed from; undefined when the client had none (no durable event seen yet), in which case `recovered` is false. */
  readonly since: string | undefined;
}

export interface ClientEvents {
  connected: ConnectedEvent;
  disconnected: DisconnectedEvent;
  reconnecting: ReconnectingEvent;
  recovered: RecoveredEvent;
  /**
   * The server joined the client to a topic it had not subscribed
   * (`POST /v1/subscribe`). Emitted before any event of the topic: call
   * `subscribe(topic, handler)` in the listener to get them all (no join is
   * sent). The topic is then resumed after reconnects like any other.
   */
  subscribed: SubscribedEvent;
  /**
   * The server took a topic away: `forbidden` (a refreshed token no longer
   * allows it), `removed` (`POST /v1/unsubscribe`), or, for a topic the
   * server had subscribed the client to, the refusal of its join after a
   * reconnect (`forbidden`: the client's own token does not allow it;
   * `too_many_joins`). It is not joined again.
   */
  unsubscribed: UnsubscribedEvent;
  /** The presence of a topic changed, or was synced again: see `SubscriptionEvents.presence`. Emitted for every topic, after its subscriptions' listeners. */
  presence: PresenceEvent;
  /**
   * An event the server addressed to this client's user (admin
   * `POST /v1/publish` with `users`; topic `$user` on the wire): its `data`.
   * Ephemeral: never stored, never replayed after a reconnect.
   */
  'user-event': unknown;
  error: SluiceError;
}

export interface SubscribedEvent {
  readonly topic: string;
}

export interface UnsubscribedEvent {
  readonly topic: string;
  /** `forbidden`, `removed`, or a join's refusal reason (see `ClientEvents.unsubscribed`). */
  readonly reason: string;
}

export interface SluiceEvent {
  readonly topic: string;
  /** Durable events only. */
  readonly id?: string;
  /** Keyed events only. */
  readonly key?: string;
  readonly traceparent?: string;
  readonly data: unknown;
}

export type EventHandler = (event: SluiceEvent) => void;

export interface SubscribeOptions {
  /** Start after this event id: every later event still in history is replayed first. */
  readonly since?: string;
}

export interface JoinResult {
  /** The server's answer to a join with `since`; undefined for a join without. */
  readonly recovered: boolean | undefined;
}

export interface Subscription {
  readonly topic: string;
  /** The id of the last durable event delivered on this topic (or the `since` it started from). */
  readonly lastId: string | undefined;
  /** Settles at the first join's reply: rejects with `forbidden`, `too_many_joins`, or `closed`. */
  readonly ready: Promise<JoinResult>;
  unsubscribe(): void;
  /**
   * The topic's presence as the client keeps it: the server's last
   * `presence_state` with every `presence_diff` since applied. Undefined
   * until the first `presence_state` (a topic without presence never has
   * one). While the client reconnects it is the last state it had.
   */
  presence(): PresenceState | undefined;
  /** Asks the server for the topic's presence now: `client.fetchPresence(topic)`. */
  fetchPresence(): Promise<PresenceState>;
  /** Adds a listener; returns a function that removes it. Listeners end with unsubscribe(). */
  on<K extends keyof SubscriptionEvents>(event: K, listener: (payload: SubscriptionEvents[K]) => void): () => void;
  off<K extends keyof SubscriptionEvents>(event: K, listener: (payload: SubscriptionEvents[K]) => void): void;
}

export interface SubscriptionEvents {
  /**
   * After every `presence_state` (the first one after the join, and the
   * fresh one after each rejoin) and every `presence_diff` of the topic.
   */
  presence: PresenceEvent;
}

export type { PresenceUser };

/**
 * A topic's presence: `users` by user id (at most `WS_PRESENCE_MAX_USERS`
 * of them), `count` (every user present), `truncated` (true when `users`
 * lists fewer than `count`). A user's `connections` is as of its join or
 * the last `presence_state`: the server sends no diff when only that
 * changes. Never changed once handed out: each change is a new state.
 */
export type PresenceState = PresenceData;

export interface PresenceEvent extends PresenceState {
  readonly topic: string;
  /**
   * Users now in `users` that were not before: after a diff, those that
   * joined; after a `presence_state`, those not in the state kept until then
   * (after a rejoin: who came while the client was away).
   */
  readonly joins: Readonly<Record<string, PresenceUser>>;
  /** Users no longer in `users`, with the entry they had: those that left (after a rejoin: while the client was away). */
  readonly leaves: Readonly<Record<string, PresenceUser>>;
}

export interface PublishOptions {
  /** Durable publishes only. Default: generated by the client, unique per publish. */
  readonly idempotencyKey?: string;
  /** A keyed publish: only the newest per (topic, key) matters. */
  readonly key?: string;
  /** An ephemeral publish: not stored, never resent. */
  readonly ephemeral?: boolean;
  /** W3C Trace Context, carried to the event frames. */
  readonly traceparent?: string;
}

export interface PublishResult {
  /** The event's id (durable publishes). */
  readonly id?: string;
  /** True when the server had already stored this idempotencyKey: `id` is the first publish's. */
  readonly duplicate?: boolean;
}

/** How the parts tell the facade's listeners (the facade's protected `emit`). @internal */
export type Emit = <K extends keyof ClientEvents>(event: K, payload: ClientEvents[K]) => void;
