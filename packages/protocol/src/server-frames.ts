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
  | PresenceDiffFrame;

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
    return bad('frame is not valid JSON');
  }
  return decodeServerFrameObject(raw);
}

type Fields = Record<string, unknown>;

/** Thrown inside the decoder only, caught at its top: one check per field instead of one branch per check. */
class Bad {
  constructor(readonly message: string) {}
}

/** Validates an already parsed server frame. */
export function decodeServerFrameObject(raw: unknown): ServerDecodeResult {
  try {
    return { ok: true, frame: frameOf(record(raw, 'frame')) };
  } catch (e) {
    if (e instanceof Bad) return bad(e.message);
    throw e;
  }
}

function bad(message: string): ServerDecodeResult {
  return { ok: false, message };
}

function frameOf(f: Fields): ServerFrame {
  switch (f.type) {
    case 'welcome': {
      const connectionId = f.connectionId;
      if (typeof connectionId !== 'string' || connectionId === '') throw new Bad('connectionId must be a non-empty string');
      return {
        type: 'welcome',
        connectionId,
        heartbeatMs: ms(f.heartbeatMs, 'heartbeatMs', false)!,
        limits: f.limits === undefined ? undefined : limitsOf(record(f.limits, 'limits')),
        expiresAt: ms(f.expiresAt, 'expiresAt', true),
      };
    }
    case 'reply': {
      const ref = optString(f.ref, 'ref');
      if (f.status === 'ok') return { type: 'reply', ref, status: 'ok', data: f.data };
      if (f.status !== 'error') throw new Bad('status must be ok or error');
      return { type: 'reply', ref, status: 'error', ...rejection(f) };
    }
    case 'event':
      if (!('data' in f)) throw new Bad('event needs data');
      return {
        type: 'event',
        topic: topicOf(f.topic, true),
        id: optMatch(f.id, EVENT_ID_PATTERN, 'id'),
        key: optMatch(f.key, NON_EMPTY, 'key'),
        traceparent: optString(f.traceparent, 'traceparent'),
        data: f.data,
      };
    case 'pong':
      return { type: 'pong', ref: optString(f.ref, 'ref') };
    case 'error':
      return { type: 'error', ...rejection(f) };
    case 'subscribed':
      return { type: 'subscribed', topic: topicOf(f.topic, false) };
    case 'unsubscribed':
      return { type: 'unsubscribed', topic: topicOf(f.topic, false), reason: reasonOf(f.reason) };
    case 'presence_state': {
      const count = f.count;
      if (!Number.isInteger(count) || (count as number) < 0) throw new Bad('count must be a whole number');
      if (f.truncated !== undefined && typeof f.truncated !== 'boolean') throw new Bad('truncated must be a boolean');
      return {
        type: 'presence_state', topic: topicOf(f.topic, false), users: usersOf(f.users, 'users'), count: count as number, truncated: f.truncated === true,
      };
    }
    case 'presence_diff': {
      const leaves = record(f.leaves, 'leaves');
      for (const k in leaves) record(leaves[k], 'leaves');
      return { type: 'presence_diff', topic: topicOf(f.topic, false), joins: usersOf(f.joins, 'joins'), leaves: leaves as PresenceDiffFrame['leaves'] };
    }
    default:
      throw new Bad(f.type === undefined ? 'frame needs a type' : 'unknown type');
  }
}

const NON_EMPTY = /^[^]+$/;

function record(v: unknown, name: string): Fields {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Bad(`${name} must be a JSON object`);
  return v as Fields;
}

function optString(v: unknown, name: string): string | undefined {
  if (v !== undefined && typeof v !== 'string') throw new Bad(`${name} must be a string`);
  return v;
}

function optMatch(v: unknown, pattern: RegExp, name: string): string | undefined {
  if (v !== undefined && (typeof v !== 'string' || !pattern.test(v))) throw new Bad(`${name} is malformed`);
  return v;
}

/** A finite, non-negative number of milliseconds. */
function ms(v: unknown, name: string, optional: boolean): number | undefined {
  if (v === undefined && optional) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new Bad(`${name} must be a number of milliseconds`);
  return v;
}

function reasonOf(v: unknown): string {
  if (typeof v !== 'string' || v === '') throw new Bad('reason must be a non-empty string');
  return v;
}

function rejection(f: Fields): { reason: string; retryAfterMs: number | undefined; message: string | undefined } {
  return { reason: reasonOf(f.reason), retryAfterMs: ms(f.retryAfterMs, 'retryAfterMs', true), message: optString(f.message, 'message') };
}

function topicOf(v: unknown, orUsers: boolean): string {
  if (typeof v !== 'string' || !(TOPIC_PATTERN.test(v) || (orUsers && v === USER_TOPIC))) throw new Bad('topic is malformed');
  return v;
}

const LIMIT_FIELDS = ['maxFrameBytes', 'hardMaxFrameBytes', 'maxMessages', 'rateWindowMs', 'maxJoins'] as const;

function limitsOf(l: Fields): Limits {
  const out: Partial<Record<keyof Limits, number>> = {};
  for (const k of LIMIT_FIELDS) {
    const v = l[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new Bad(`limits.${k} must be a positive number`);
    out[k] = v;
  }
  return out as Limits;
}

function usersOf(v: unknown, name: string): Readonly<Record<string, PresenceUser>> {
  const users = record(v, name);
  for (const k in users) {
    const c = record(users[k], name).connections;
    if (!Number.isInteger(c) || (c as number) < 1) throw new Bad(`${name}: connections must be a positive whole number`);
  }
  return users as Record<string, PresenceUser>;
}
