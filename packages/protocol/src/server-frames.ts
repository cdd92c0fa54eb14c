/**
 * Frames of protocol v1 from the server to the client, with the additions of
 * 2026-12, and the decoder a client reads them with. The gateway writes them
 * with the encoders of codec.ts; clients (the SDK, test harnesses, benchmark
 * peers) read them with `decodeServerFrame` instead of by hand.
 *
 * Forward compatible as PROTOCOL.md asks of clients: unknown fields are
 * ignored, and a reason a newer server adds decodes as a string. An unknown
 * `type` does not decode: a client skips the frame.
 */
import { EVENT_ID_PATTERN, type Limits, TOPIC_PATTERN } from './frames.ts';

/** The topic of events addressed to users (admin publish with `users`); it can never be a client topic. */
export const USER_TOPIC = '$user';

/** The first frame on every socket. */
export interface WelcomeFrame {
  readonly type: 'welcome';
  readonly connectionId: string;
  readonly heartbeatMs: number;
  /** The per-socket limits. The gateway always sends them; a client assumes the defaults when a server does not. */
  readonly limits: Limits | undefined;
  /** `WS_AUTH=jwt`: the token's `exp` in ms since the epoch (2026-12). */
  readonly expiresAt: number | undefined;
}

/** The answer to a frame with `ref`: join, leave, publish, refresh, presence. */
export interface ReplyOkFrame {
  readonly type: 'reply';
  /** Echoes the request's; undefined only when a server answers a frame without one. */
  readonly ref: string | undefined;
  readonly status: 'ok';
  /** join: `{recovered}`, publish: `{id, duplicate}`, refresh: `{expiresAt}`, presence: `PresenceData`; undefined when absent. */
  readonly data: unknown;
}

export interface ReplyErrorFrame {
  readonly type: 'reply';
  readonly ref: string | undefined;
  readonly status: 'error';
  /** One of `ErrorReasons`, or one a newer server added (2026-12: `user_rate_limited`, `unauthorized`). */
  readonly reason: string;
  readonly retryAfterMs: number | undefined;
  readonly message: string | undefined;
}

export type ReplyFrame = ReplyOkFrame | ReplyErrorFrame;

export interface EventFrame {
  readonly type: 'event';
  /** A client topic, or `USER_TOPIC` for events addressed to users. */
  readonly topic: string;
  /** Durable events only. */
  readonly id: string | undefined;
  /** Keyed events only. */
  readonly key: string | undefined;
  readonly traceparent: string | undefined;
  readonly data: unknown;
}

export interface PongFrame {
  readonly type: 'pong';
  readonly ref: string | undefined;
}

/** The answer to a frame that could not be parsed or had no usable `ref`. */
export interface ErrorFrame {
  readonly type: 'error';
  readonly reason: string;
  readonly retryAfterMs: number | undefined;
  readonly message: string | undefined;
}

/** 2026-12: `POST /v1/subscribe` joined this socket to `topic`; sent before any event of it. */
export interface SubscribedFrame {
  readonly type: 'subscribed';
  readonly topic: string;
}

/**
 * 2026-12: the socket left `topic` without asking: `forbidden` (a refreshed
 * token no longer allows it) or `removed` (`POST /v1/unsubscribe`).
 */
export interface UnsubscribedFrame {
  readonly type: 'unsubscribed';
  readonly topic: string;
  readonly reason: 'forbidden' | 'removed' | (string & Record<never, never>);
}

/**
 * 2026-12 (Sluice): a resume position for `topic`, sent when the topic had
 * no durable event for WS_POSITION_REFRESH_MS: every durable event at or
 * below it was sent before, so a later join with `since` set to it misses
 * nothing. A client keeps the newer of it and its last event id.
 */
export interface PositionFrame {
  readonly type: 'position';
  readonly topic: string;
  readonly position: string;
}

export interface PresenceUser {
  /** The user's sockets joined to the topic, across the cluster. */
  readonly connections: number;
}

/** A topic's presence: `presence_state` without type and topic, and the `data` of a `presence` reply. */
export interface PresenceData {
  readonly users: Readonly<Record<string, PresenceUser>>;
  /** Every user present, also when `users` is cut at `WS_PRESENCE_MAX_USERS`. */
  readonly count: number;
  /** True when `users` lists fewer than `count`. */
  readonly truncated: boolean;
}

/** 2026-12: after the reply to a join of a presence topic. */
export interface PresenceStateFrame extends PresenceData {
  readonly type: 'presence_state';
  readonly topic: string;
}

/** 2026-12: users that came and went since the last diff, at most one per topic each `WS_PRESENCE_DIFF_MS`. */
export interface PresenceDiffFrame {
  readonly type: 'presence_diff';
  readonly topic: string;
  readonly joins: Readonly<Record<string, PresenceUser>>;
  readonly leaves: Readonly<Record<string, Readonly<Record<string, never>>>>;
}

export type ServerFrame =
  | WelcomeFrame
  | ReplyFrame
  | EventFrame
  | PongFrame
  | ErrorFrame
  | SubscribedFrame
  | UnsubscribedFrame
  | PresenceStateFrame
  | PresenceDiffFrame
  | PositionFrame;

export type ServerFrameType = ServerFrame['type'];

export type ServerDecodeResult =
  | { readonly ok: true; readonly frame: ServerFrame }
  | { readonly ok: false; readonly message: string };

/** Decodes one server text frame. Never throws. */
export function decodeServerFrame(text: string): ServerDecodeResult {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { ok: false, message: 'frame is not valid JSON' };
  }
  return decodeServerFrameObject(raw);
}

/** Validates an already parsed server frame. */
export function decodeServerFrameObject(raw: unknown): ServerDecodeResult {
  if (record(raw) === BAD) return { ok: false, message: 'frame must be a JSON object' };
  const f = raw as Fields;
  const type = f.type;
  const key = type === 'reply' ? `reply.${String(f.status)}` : type;
  const schema = typeof key === 'string' && Object.hasOwn(SCHEMAS, key) ? SCHEMAS[key] : undefined;
  if (schema === undefined) return { ok: false, message: type === 'reply' ? 'status must be ok or error' : 'unknown type' };
  // Checked in place: the parsed object is the frame (an event, the frame
  // that comes most, costs no second object). Only a check that normalizes
  // a value (a welcome's limits, presence_state's truncated) makes a copy.
  let frame: Fields | undefined;
  for (const k in schema) {
    const given = f[k];
    const v = schema[k]!(given);
    if (v === BAD) return { ok: false, message: `${k} is malformed` };
    if (v !== given) (frame ??= { ...f })[k] = v;
  }
  return { ok: true, frame: (frame ?? f) as unknown as ServerFrame };
}

type Fields = Record<string, unknown>;

/**
 * Each frame type's fields, as checks that return the field's value or BAD.
 * A table rather than code per type: the SDK's browser build carries it.
 */
const BAD: unique symbol = Symbol('bad');
type Check = (v: unknown) => unknown;

const opt = (check: Check): Check => (v) => (v === undefined ? v : check(v));
const is = (test: (v: unknown) => boolean): Check => (v) => (test(v) ? v : BAD);
const str = is((v) => typeof v === 'string');
const nonEmpty = is((v) => typeof v === 'string' && v !== '');
const match = (pattern: RegExp): Check => is((v) => typeof v === 'string' && pattern.test(v));
const constant = (c: string): Check => is((v) => v === c);
/** A finite, non-negative number of milliseconds. */
const ms = is((v) => typeof v === 'number' && v >= 0 && Number.isFinite(v));
const whole = (min: number): Check => is((v) => Number.isInteger(v) && (v as number) >= min);
const any: Check = (v) => v;
const present: Check = (v) => (v === undefined ? BAD : v);
const topic = match(TOPIC_PATTERN);
const ref = opt(str);

function record(v: unknown, each: Check = any): unknown {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return BAD;
  for (const k in v) if (each((v as Fields)[k]) === BAD) return BAD;
  return v;
}

/**
 * A welcome's limits, or undefined when they are not all there and well
 * formed: the socket is still usable, and a client then assumes the defaults
 * (as for a server that sends none). Refusing the whole welcome would leave
 * a client unable to connect to a server whose limits it cannot read (one of
 * another version, say).
 */
const limits: Check = (v) => (record(v) !== BAD && LIMIT_FIELDS.every((k) => {
  const n = (v as Fields)[k];
  return typeof n === 'number' && n > 0 && Number.isFinite(n);
}) ? Object.fromEntries(LIMIT_FIELDS.map((k) => [k, (v as Fields)[k]])) : undefined);
const LIMIT_FIELDS = ['maxFrameBytes', 'hardMaxFrameBytes', 'maxMessages', 'rateWindowMs', 'maxJoins'] as const;
const users: Check = (v) => record(v, (u) => (record(u) === BAD ? BAD : whole(1)((u as Fields).connections)));
const rejection = { reason: nonEmpty, retryAfterMs: opt(ms), message: opt(str) };

const SCHEMAS: Readonly<Record<string, Readonly<Record<string, Check>>>> = {
  welcome: { connectionId: nonEmpty, heartbeatMs: ms, limits: opt(limits), expiresAt: opt(ms) },
  'reply.ok': { ref, status: constant('ok'), data: any },
  'reply.error': { ref, status: constant('error'), ...rejection },
  event: {
    topic: is((v) => v === USER_TOPIC || topic(v) !== BAD), id: opt(match(EVENT_ID_PATTERN)), key: opt(nonEmpty), traceparent: opt(str),
    data: present,
  },
  pong: { ref },
  error: rejection,
  subscribed: { topic },
  unsubscribed: { topic, reason: nonEmpty },
  presence_state: { topic, users, count: whole(0), truncated: (v) => (v === undefined ? false : typeof v === 'boolean' ? v : BAD) },
  presence_diff: { topic, joins: users, leaves: (v) => record(v, record) },
  position: { topic, position: match(EVENT_ID_PATTERN) },
};
