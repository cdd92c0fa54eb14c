/**
 * What the client does after a close or a refused upgrade, and how long it
 * waits: pure functions of what the server said, unit-tested without sockets.
 * The close table is PROTOCOL.md's, read from @sluice/protocol's closeSpecs so
 * that gateway and client share one meaning per code.
 */
import { CloseCode, type CloseReason, closeSpecs } from '@sluice/protocol';
import type { SluiceErrorCode } from './errors.ts';
import type { TokenRequest } from './types.ts';

export interface Backoff {
  /** Upper bound of the first wait (full jitter: the wait is uniform in [0, bound)). */
  readonly initialMs: number;
  /** The bound doubles per consecutive failure up to this. */
  readonly maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 500, maxMs: 30_000 };

/**
 * Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"):
 * uniform in [0, min(maxMs, initialMs * 2^failures)).
 */
export function fullJitter(failures: number, b: Backoff, random: () => number): number {
  const bound = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(failures, 30));
  return Math.floor(clamp01(random()) * bound);
}

/**
 * The wait before the next attempt. With a hint from the server, never less
 * than the hint:
 *
 * - `exact` (the milliseconds of a refusal's body or a close reason): the
 *   server already gave this client its own time (a drain's jittered
 *   1012, the upgrade budget's place among the refused), so only a little
 *   is added, at most a tenth of the hint and at most `initialMs`, and it
 *   does not grow with the failures: a client sent back again is told a
 *   later place, and the server, not the client, sets the pace;
 * - otherwise (whole seconds of a `Retry-After` header, as a proxy may
 *   send to everyone at once): the hint plus a full-jitter spread, so that
 *   clients told the same second do not all come back in it.
 */
export function reconnectDelay(failures: number, b: Backoff, random: () => number, hintMs: number | undefined, exact = false): number {
  if (hintMs === undefined) return fullJitter(failures, b, random);
  const hint = Math.max(0, Math.ceil(hintMs));
  if (!exact) return hint + fullJitter(failures, b, random);
  const spread = Math.min(b.initialMs, Math.max(1, Math.ceil(hint / 10)));
  return hint + Math.floor(clamp01(random()) * spread);
}

function clamp01(x: number): number {
  return Number.isFinite(x) ? Math.min(Math.max(x, 0), 1 - Number.EPSILON) : 0;
}

/** What to do once a socket is gone, or an upgrade was refused. */
export type Disposition =
  | {
      readonly kind: 'stop';
      /** Surfaced on the `error` event and on every pending publish. */
      readonly error: SluiceErrorCode;
      readonly reason: string | undefined;
    }
  | {
      readonly kind: 'reconnect';
      /** The server's hint: wait at least this long. */
      readonly retryAfterMs: number | undefined;
      /** The hint is the server's milliseconds (a body or close reason), not a `Retry-After` header's whole seconds. */
      readonly hintExact: boolean;
      /** Ask the token callback for a fresh token (4001, 4003, 401). */
      readonly refreshToken: boolean;
      /** What the token callback is told when `refreshToken` is set: `token_expired` (4001), `token_revoked` (4003, 401 `token_revoked`), `unauthorized` (401). */
      readonly tokenReason: TokenRequest['reason'];
      /** 1009: the largest publish in flight caused it; it must not be resent. */
      readonly dropOversized: boolean;
      /** Surfaced on the `error` event, while the client keeps trying (401). */
      readonly report: SluiceErrorCode | undefined;
      readonly reason: string | undefined;
    };

export interface ParsedReason {
  readonly reason: string | undefined;
  readonly retryAfterMs: number | undefined;
}

/** Reads a JSON close reason or refusal body, `{"reason":"...","retryAfterMs":N}`; anything else gives the raw text as reason. */
export function parseReason(text: string): ParsedReason {
  if (text === '') return { reason: undefined, retryAfterMs: undefined };
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v === 'object' && v !== null) {
      const o = v as { reason?: unknown; retryAfterMs?: unknown };
      return {
        reason: typeof o.reason === 'string' ? o.reason : undefined,
        retryAfterMs: typeof o.retryAfterMs === 'number' && Number.isFinite(o.retryAfterMs) && o.retryAfterMs >= 0 ? o.retryAfterMs : undefined,
      };
    }
  } catch {
    // Not JSON: a close from something other than the gateway (a proxy, the browser).
    return { reason: text, retryAfterMs: undefined };
  }
  return { reason: text, retryAfterMs: undefined };
}

/** A hint is exact unless told otherwise (a close reason's or a body's milliseconds); no hint, nothing exact. */
const reconnect = (p: Partial<Omit<Extract<Disposition, { kind: 'reconnect' }>, 'kind'>> = {}): Disposition => ({
  kind: 'reconnect', retryAfterMs: undefined, refreshToken: false, tokenReason: undefined, dropOversized: false, report: undefined, reason: undefined,
  ...p, hintExact: p.retryAfterMs !== undefined && (p.hintExact ?? true),
});

/** A new token, asked for `why`. */
const newToken = (why: NonNullable<TokenRequest['reason']>, p: Partial<Omit<Extract<Disposition, { kind: 'reconnect' }>, 'kind'>>): Disposition =>
  reconnect({ refreshToken: true, tokenReason: why, ...p });

/** Stop for good: the error names the reason where the SDK has a code for it (`forbidden`, `disconnected`), else `abusive`. */
const stop = (reason: string | undefined): Disposition => ({
  kind: 'stop', error: reason === 'forbidden' || reason === 'disconnected' ? reason : 'abusive', reason,
});

/**
 * The close table of PROTOCOL.md, seen from the client. Codes it does not
 * name (1006, 1011, 1001, ...) reconnect with backoff.
 *
 * - 1008 stops, whatever its reason: `abusive`, `forbidden`, or
 *   `disconnected` (the operator's `POST /v1/disconnect` without
 *   `reconnect`), each surfaced under its own error code.
 * - 4001 `token_expired` and 4003 `token_revoked` ask for a new token and
 *   reconnect with backoff.
 * - 1012, 1013, 4503 and 4000 (`disconnected` with `reconnect: true`)
 *   reconnect no sooner than their `retryAfterMs`.
 */
export function afterClose(code: number, reasonText: string): Disposition {
  const { reason, retryAfterMs } = parseReason(reasonText);
  const spec = reason !== undefined && reason in closeSpecs ? closeSpecs[reason as CloseReason] : undefined;
  switch (code) {
    case CloseCode.Policy:
      // 1008 never reconnects, whatever its reason says.
      return stop(reason);
    case CloseCode.TooBig:
      return reconnect({ dropOversized: true, reason });
    case CloseCode.TokenExpired:
      return newToken('token_expired', { reason });
    case CloseCode.TokenRevoked:
      // The token is dead before its exp: the callback must not hand it out again.
      return newToken('token_revoked', { reason });
    case CloseCode.Restart:
    case CloseCode.TryAgainLater:
    case CloseCode.SlowConsumer:
    case CloseCode.Disconnected:
      return reconnect({ retryAfterMs, reason });
    default:
      // A reason the table says not to reconnect after, on a code it does not pair it with
      // (unless it is the reason with a retry code, `disconnected`, and carries its retryAfterMs).
      if (spec !== undefined && !spec.reconnect && !(spec.retryCode !== undefined && retryAfterMs !== undefined)) return stop(reason);
      return reconnect({ retryAfterMs, reason });
  }
}

/**
 * A refused upgrade (plain HTTP). Only clients that can see the response
 * (`ws` in Node, through its `unexpected-response` event) get here; a browser
 * sees a close with 1006 and backs off.
 */
export function afterRefusal(status: number, body: string, retryAfterHeader: string | undefined): Disposition {
  const parsed = parseReason(body);
  const headerMs = parseRetryAfter(retryAfterHeader);
  // The body's milliseconds are exact; the header is whole seconds, rounded up.
  const retryAfterMs = parsed.retryAfterMs ?? headerMs;
  switch (status) {
    case 401:
      // `token_revoked`: the token was revoked before its exp (POST /v1/revoke); `unauthorized`: anything else wrong with it.
      return parsed.reason === 'token_revoked'
        ? newToken('token_revoked', { report: 'token_revoked', reason: 'token_revoked' })
        : newToken('unauthorized', { report: 'unauthorized', reason: parsed.reason ?? 'unauthorized' });
    case 403:
      // The Origin check (`forbidden_origin`) or the backend's connect hook (`forbidden`): retrying as is cannot succeed.
      return parsed.reason === 'forbidden'
        ? { kind: 'stop', error: 'forbidden', reason: 'forbidden' }
        : { kind: 'stop', error: 'forbidden_origin', reason: parsed.reason ?? 'forbidden_origin' };
    default:
      // 503 unavailable, 429 ip_rate_limited / tenant_rate_limited (with a hint), 429 too_many_sockets (without: plain backoff), ...
      return reconnect({ retryAfterMs, hintExact: parsed.retryAfterMs !== undefined, reason: parsed.reason ?? `http_${status}` });
  }
}

/** `Retry-After` as delay-seconds; an HTTP date is not used by the gateway and is ignored. */
export function parseRetryAfter(value: string | undefined): number | undefined {
  if (value === undefined || !/^\s*\d+\s*$/.test(value)) return undefined;
  return Number(value) * 1000;
}
