/**
 * Close codes and close reasons the server sends. One table, used by the
 * gateway and by clients alike: a code never changes meaning.
 */

export const CloseCode = {
  /** Policy violation (`abusive`, `forbidden`) or `disconnected` by the operator. Do not reconnect automatically. */
  Policy: 1008,
  /** A frame above the hard cap. Do not resend that frame. */
  TooBig: 1009,
  /** Shard failure. Reconnect with backoff. */
  Internal: 1011,
  /** Drain or stop: reconnect after `retryAfterMs`. */
  Restart: 1012,
  /** Buffer limit or congestion: reconnect after `retryAfterMs`, resume with `since`. */
  TryAgainLater: 1013,
  /** `disconnected` by the operator with `reconnect: true`: reconnect after `retryAfterMs`. */
  Disconnected: 4000,
  /** The token expired: refresh it, then reconnect. */
  TokenExpired: 4001,
  /** The token was revoked: get a new token, then reconnect. */
  TokenRevoked: 4003,
  /** Slow consumer: reconnect after `retryAfterMs`, resume with `since`. */
  SlowConsumer: 4503,
} as const;
export type CloseCode = (typeof CloseCode)[keyof typeof CloseCode];

export type CloseReason =
  | 'abusive'
  | 'forbidden'
  | 'payload_too_large'
  | 'internal'
  | 'unavailable'
  | 'buffer_limit'
  | 'congested'
  | 'token_expired'
  | 'token_revoked'
  | 'disconnected'
  | 'slow_consumer';

export interface CloseSpec {
  readonly code: CloseCode;
  /** Whether a well-behaved client reconnects by itself after this close. */
  readonly reconnect: boolean;
  /** Whether the close reason carries `retryAfterMs`. */
  readonly retryAfter: boolean;
  /**
   * The one reason with two codes, `disconnected`: 1008 (stay away) without
   * `retryAfterMs`, this code (come back after it) with one.
   */
  readonly retryCode?: CloseCode;
}

export const closeSpecs: Readonly<Record<CloseReason, CloseSpec>> = Object.freeze({
  abusive: { code: CloseCode.Policy, reconnect: false, retryAfter: false },
  forbidden: { code: CloseCode.Policy, reconnect: false, retryAfter: false },
  payload_too_large: { code: CloseCode.TooBig, reconnect: true, retryAfter: false },
  internal: { code: CloseCode.Internal, reconnect: true, retryAfter: false },
  unavailable: { code: CloseCode.Restart, reconnect: true, retryAfter: true },
  buffer_limit: { code: CloseCode.TryAgainLater, reconnect: true, retryAfter: true },
  congested: { code: CloseCode.TryAgainLater, reconnect: true, retryAfter: true },
  token_expired: { code: CloseCode.TokenExpired, reconnect: true, retryAfter: false },
  token_revoked: { code: CloseCode.TokenRevoked, reconnect: true, retryAfter: false },
  disconnected: { code: CloseCode.Policy, reconnect: false, retryAfter: false, retryCode: CloseCode.Disconnected },
  slow_consumer: { code: CloseCode.SlowConsumer, reconnect: true, retryAfter: true },
});

/** The code a close with this reason is sent with: `retryCode` when it carries `retryAfterMs` and the reason has one. */
export function closeCodeOf(reason: CloseReason, retryAfterMs?: number): CloseCode {
  const spec = closeSpecs[reason];
  return retryAfterMs !== undefined && spec.retryCode !== undefined ? spec.retryCode : spec.code;
}

/** RFC 6455 allows at most 123 bytes of reason in a close frame. */
export const MAX_CLOSE_REASON_BYTES = 123;

/** The JSON close reason, e.g. `{"reason":"unavailable","retryAfterMs":2400}`. */
export function encodeCloseReason(reason: CloseReason, retryAfterMs?: number): string {
  return retryAfterMs === undefined
    ? `{"reason":"${reason}"}`
    : `{"reason":"${reason}","retryAfterMs":${Number.isFinite(retryAfterMs) ? Math.max(0, Math.round(retryAfterMs)) : 0}}`;
}
