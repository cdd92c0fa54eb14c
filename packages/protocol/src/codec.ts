import { type ClientFrame, EventClass, EVENT_ID_PATTERN, type Limits, MAX_IDEMPOTENCY_KEY_LENGTH,
  MAX_KEY_LENGTH, MAX_REF_LENGTH, MAX_TOKEN_LENGTH, TOPIC_PATTERN, TRACEPARENT_PATTERN } from './frames.ts';
import type { ErrorReason } from './reasons.ts';

export type DecodeResult =
  | { readonly ok: true; readonly frame: ClientFrame }
  | {
      readonly ok: false;
      /** The frame's `ref` when it had a usable one: the answer is then a `reply`, else an `error`. */
      readonly ref: string | undefined;
      readonly reason: 'bad_request';
      /** A human-readable hint for the client's developer; never contains the frame's data. */
      readonly message: string;
    };

const bad = (ref: string | undefined, message: string): DecodeResult => ({ ok: false, ref, reason: 'bad_request', message });

/**
 * Decodes one client text frame. Never throws: every malformed input becomes
 * a `bad_request` with a message saying what was wrong. Unknown fields are
 * ignored so that clients can be newer than the server.
 */
export function decodeClientFrame(text: string): DecodeResult {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return bad(undefined, 'frame is not valid JSON');
  }
  return decodeFrameObject(raw, text);
}

/**
 * Validates an already parsed frame (the admin publish API parses its body
 * itself). With `text`, the JSON the frame was parsed from, a publish's
 * `dataJson` is the data's own text in it (`rawMember`), not serialized again.
 */
export function decodeFrameObject(raw: unknown, text?: string): DecodeResult {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return bad(undefined, 'frame must be a JSON object');
  }
  const f = raw as Record<string, unknown>;
  const ref = f.ref;
  if (ref !== undefined && (typeof ref !== 'string' || ref.length > MAX_REF_LENGTH)) {
    return bad(undefined, `ref must be a string of at most ${MAX_REF_LENGTH} characters`);
  }
  switch (f.type) {
    case 'ping':
      return { ok: true, frame: { type: 'ping', ref } };
    case 'join': {
      const topic = f.topic;
      if (!isTopic(topic)) return bad(ref, topicMessage);
      const since = f.since;
      if (since !== undefined && (typeof since !== 'string' || !EVENT_ID_PATTERN.test(since))) {
        return bad(ref, 'since must be an event id such as "1732900000000-0"');
      }
      return { ok: true, frame: { type: 'join', ref, topic, since } };
    }
    case 'leave':
    case 'presence': {
      const topic = f.topic;
      if (!isTopic(topic)) return bad(ref, topicMessage);
      return { ok: true, frame: { type: f.type, ref, topic } };
    }
    case 'publish':
      return decodePublish(f, ref, text);
    case 'refresh': {
      const token = f.token;
      if (typeof token !== 'string' || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
        return bad(ref, `token must be a non-empty string of at most ${MAX_TOKEN_LENGTH} characters`);
      }
      return { ok: true, frame: { type: 'refresh', ref, token } };
    }
    case undefined:
      return bad(ref, 'frame needs a type');
    default:
      return bad(ref, 'unknown type: expected join, leave, publish, ping, refresh or presence');
  }
}

/** Keys travel between threads in a control-character-delimited format (see the gateway's messages.ts). */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const CONTROL = /[\u0000-\u001f\u007f]/;

const topicMessage = 'topic must match ^[A-Za-z0-9:_.\\-]{1,200}$';

function isTopic(topic: unknown): topic is string {
  return typeof topic === 'string' && TOPIC_PATTERN.test(topic);
}

function decodePublish(f: Record<string, unknown>, ref: string | undefined, text: string | undefined): DecodeResult {
  const topic = f.topic;
  if (!isTopic(topic)) return bad(ref, topicMessage);
  if (!('data' in f) || f.data === undefined) return bad(ref, 'publish needs data (any JSON value)');
  const { key, ephemeral, idempotencyKey, traceparent } = f;
  if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH || CONTROL.test(key))) {
    return bad(ref, `key must be a non-empty string of at most ${MAX_KEY_LENGTH} characters, without control characters`);
  }
  if (ephemeral !== undefined && typeof ephemeral !== 'boolean') return bad(ref, 'ephemeral must be a boolean');
  if (key !== undefined && ephemeral === true) return bad(ref, 'a publish is keyed or ephemeral, not both');
  const cls = key !== undefined ? EventClass.Keyed : ephemeral === true ? EventClass.Ephemeral : EventClass.Durable;
  if (idempotencyKey !== undefined) {
    if (typeof idempotencyKey !== 'string' || idempotencyKey.length === 0 ||
        idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH || CONTROL.test(idempotencyKey)) {
      return bad(ref, `idempotencyKey must be a non-empty string of at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters, without control characters`);
    }
    if (cls !== EventClass.Durable) return bad(ref, 'idempotencyKey applies to durable publishes only');
  }
  if (traceparent !== undefined && (typeof traceparent !== 'string' || !TRACEPARENT_PATTERN.test(traceparent))) {
    return bad(ref, 'traceparent must be a W3C Trace Context traceparent');
  }
  let dataJson = text === undefined ? undefined : rawMember(text, 'data');
  if (dataJson === undefined) {
    try {
      dataJson = JSON.stringify(f.data);
    } catch {
      // JSON.parse takes nesting that JSON.stringify's recursion cannot (about 16k levels of arrays).
      return bad(ref, 'data is nested too deeply');
    }
  }
  return {
    ok: true,
    frame: {
      type: 'publish',
      ref,
      topic,
      dataJson,
      cls,
      key: key as string | undefined,
      idempotencyKey: idempotencyKey as string | undefined,
      traceparent: traceparent as string | undefined,
    },
  };
}

/** Nesting past which `rawMember` gives up (and the caller serializes the value, which may refuse it). */
const RAW_MAX_DEPTH = 512;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * The JSON text of the top-level member `name` of `text`, which must be a
 * JSON object that JSON.parse accepted: exactly the value's characters as
 * the client wrote them, without the whitespace around it, the last such
 * member when the name repeats (as JSON.parse takes it). Undefined when the
 * member is absent, when any top-level name is written with an escape (its
 * text is then not its name), or when the value nests deeper than
 * RAW_MAX_DEPTH: the caller serializes the parsed value instead. The scan
 * skips strings with indexOf, so a long string costs little.
 */
export function rawMember(text: string, name: string): string | undefined {
  let i = skipSpace(text, 0) + 1;
  let start = -1;
  let end = -1;
  // The first backslash at or after the current name: found again only once passed, so the scans for it add up to one pass.
  let escape = text.indexOf('\\');
  for (;;) {
    i = skipSpace(text, i);
    if (text.charCodeAt(i) !== QUOTE) break;
    const keyEnd = text.indexOf('"', i + 1);
    if (escape !== -1 && escape <= i) escape = text.indexOf('\\', i + 1);
    if (escape !== -1 && escape < keyEnd) return undefined;
    const isName = keyEnd - i - 1 === name.length && text.startsWith(name, i + 1);
    i = skipSpace(text, skipSpace(text, keyEnd + 1) + 1);
    const valueEnd = skipValue(text, i);
    if (valueEnd < 0) return undefined;
    if (isName) {
      start = i;
      end = valueEnd;
    }
    i = skipSpace(text, valueEnd);
    if (text.charCodeAt(i) !== 0x2c) break;
    i++;
  }
  return start < 0 ? undefined : text.slice(start, end);
}

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

/** From a string's opening quote to just after its closing one. */
function skipString(text: string, i: number): number {
  let from = i + 1;
  for (;;) {
    const q = text.indexOf('"', from);
    let b = q - 1;
    while (text.charCodeAt(b) === BACKSLASH) b--;
    // An even run of backslashes before the quote escapes itself, not the quote.
    if ((q - 1 - b) % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** From a value's first character to just after it; -1 past RAW_MAX_DEPTH. */
function skipValue(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === QUOTE) return skipString(text, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 1;
    i++;
    while (depth > 0) {
      const d = text.charCodeAt(i);
      if (d === QUOTE) {
        i = skipString(text, i);
        continue;
      }
      if (d === 0x7b || d === 0x5b) {
        if (++depth > RAW_MAX_DEPTH) return -1;
      } else if (d === 0x7d || d === 0x5d) depth--;
      i++;
    }
    return i;
  }
  // A number, true, false or null: up to the next delimiter.
  for (;;) {
    const d = text.charCodeAt(i);
    if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09 || Number.isNaN(d)) return i;
    i++;
  }
}

// Printable ASCII only: the head is read as latin1, so anything else would
// come back as a different ref than the client sent.
const PEEK_REF = /^\s*\{\s*(?:"type"\s*:\s*"[A-Za-z.]{1,16}"\s*,\s*)?"ref"\s*:\s*"([\x20\x21\x23-\x5b\x5d-\x7e]{0,64})"/;
/** How much of a frame `peekRef` looks at. */
export const PEEK_REF_BYTES = 160;

/**
 * Finds a frame's `ref` without decoding the frame, for answers given before
 * decoding (`rate_limited`, `payload_too_large`). It finds `ref` only when it
 * comes first, or right after `type`, as the SDK writes frames; otherwise the
 * answer is an `error` without ref. `head` is the frame's first bytes as latin1.
 */
export function peekRef(head: string): string | undefined {
  return PEEK_REF.exec(head)?.[1];
}

// Encoders. `ref` strings are escaped with JSON.stringify: a ref may hold any character.

const refPart = (ref: string | undefined): string => (ref === undefined ? '' : `,"ref":${JSON.stringify(ref)}`);

export function encodeReplyOk(ref: string | undefined, dataJson?: string): string {
  return dataJson === undefined
    ? `{"type":"reply"${refPart(ref)},"status":"ok"}`
    : `{"type":"reply"${refPart(ref)},"status":"ok","data":${dataJson}}`;
}

export function encodeReplyError(ref: string | undefined, reason: ErrorReason, retryAfterMs?: number, message?: string): string {
  let s = `{"type":"reply"${refPart(ref)},"status":"error","reason":"${reason}"`;
  if (retryAfterMs !== undefined) s += `,"retryAfterMs":${finiteMs(retryAfterMs)}`;
  if (message !== undefined) s += `,"message":${JSON.stringify(message)}`;
  return s + '}';
}

/** An `error` frame: the answer to a frame that had no usable `ref`. */
export function encodeError(reason: ErrorReason, retryAfterMs?: number, message?: string): string {
  let s = `{"type":"error","reason":"${reason}"`;
  if (retryAfterMs !== undefined) s += `,"retryAfterMs":${finiteMs(retryAfterMs)}`;
  if (message !== undefined) s += `,"message":${JSON.stringify(message)}`;
  return s + '}';
}

/** A rejection: a `reply` when the frame had a ref, an `error` otherwise. */
export function encodeRejection(ref: string | undefined, reason: ErrorReason, retryAfterMs?: number, message?: string): string {
  return ref === undefined ? encodeError(reason, retryAfterMs, message) : encodeReplyError(ref, reason, retryAfterMs, message);
}

export function encodePong(ref: string | undefined): string {
  return `{"type":"pong"${refPart(ref)}}`;
}

export interface EventFields {
  /** The client-visible topic (already validated against TOPIC_PATTERN). */
  readonly topic: string;
  readonly id: string | undefined;
  readonly key: string | undefined;
  readonly dataJson: string;
  readonly traceparent: string | undefined;
}

/** The `event` frame, serialized once per event and shared by every subscriber. */
export function encodeEvent(e: EventFields): string {
  return encodeEventFrame(e, e.id);
}

/** `encodeEvent` with the id apart, so that the hot path builds no object to pass it. */
export function encodeEventFrame(e: Omit<EventFields, 'id'>, id: string | undefined): string {
  let s = `{"type":"event","topic":"${e.topic}"`;
  if (id !== undefined) s += `,"id":"${id}"`;
  if (e.key !== undefined) s += `,"key":${JSON.stringify(e.key)}`;
  if (e.traceparent !== undefined) s += `,"traceparent":"${e.traceparent}"`;
  return s + `,"data":${e.dataJson}}`;
}

const DATA_FIELD = ',"data":';

/**
 * The `data` of an event frame made by `encodeEventFrame`, as the JSON text
 * it was spliced in from (no parse, no re-serialization): what the admin
 * history read answers. `data` is the frame's last field, and the fields
 * before it are strings, in which a JSON encoder never leaves a bare `"`:
 * so the first `,"data":` is the field's, whatever a key holds. Undefined
 * for a string that is not such a frame.
 */
export function eventFrameData(frame: string): string | undefined {
  if (!frame.startsWith('{"type":"event",') || !frame.endsWith('}')) return undefined;
  const at = frame.indexOf(DATA_FIELD);
  return at < 0 ? undefined : frame.slice(at + DATA_FIELD.length, -1);
}

/** The `welcome` frame without its connection id: build once, then `welcomeFrame(prefix, id)`. */
export function welcomePrefix(heartbeatMs: number, limits: Limits): string {
  const l = `{"maxFrameBytes":${limits.maxFrameBytes},"hardMaxFrameBytes":${limits.hardMaxFrameBytes},` +
    `"maxMessages":${limits.maxMessages},"rateWindowMs":${limits.rateWindowMs},"maxJoins":${limits.maxJoins}}`;
  return `","heartbeatMs":${heartbeatMs},"limits":${l}}`;
}

/** `expiresAt`: the token's `exp` in ms (WS_AUTH=jwt); without a token there is none. */
export function welcomeFrame(prefix: string, connectionId: string, expiresAt?: number): string {
  return expiresAt === undefined || !Number.isFinite(expiresAt)
    ? `{"type":"welcome","connectionId":"${connectionId}${prefix}`
    : `{"type":"welcome","connectionId":"${connectionId}${prefix.slice(0, -1)},"expiresAt":${expiresAt}}`;
}

/** A topic the socket no longer receives: its rights no longer allow it (`forbidden`) or the server removed it (`removed`). */
export function encodeUnsubscribed(topic: string, reason: 'forbidden' | 'removed'): string {
  return `{"type":"unsubscribed","topic":"${topic}","reason":"${reason}"}`;
}

/** The server joined the socket to a topic (admin `POST /v1/subscribe`). */
export function encodeSubscribed(topic: string): string {
  return `{"type":"subscribed","topic":"${topic}"}`;
}

/**
 * A fresh resume position for a joined topic that had no durable event for
 * a while (WS_POSITION_REFRESH_MS): every durable event at or below it was
 * sent before this frame. `head` + position + `POSITION_TAIL` is the frame,
 * so that Redis can put the position in (see RedisBus.mark).
 */
export function positionFrameHead(topic: string): string {
  return `{"type":"position","topic":"${topic}","position":"`;
}
export const POSITION_TAIL = '"}';

/** A retry hint as a JSON number: never NaN or Infinity, never negative. */
export function finiteMs(ms: number): number {
  return Number.isFinite(ms) ? Math.max(0, Math.ceil(ms)) : 0;
}
