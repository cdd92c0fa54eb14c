/** Error reasons in `reply` and `error` frames. Additive only: never rename one. */
export const ErrorReasons = [
  'bad_request',
  'payload_too_large',
  'rate_limited',
  'tenant_rate_limited',
  'too_many_joins',
  'forbidden',
  'not_joined',
  'unavailable',
  'internal',
  /** A `refresh` whose token is invalid, expired or revoked (2026-12). */
  'unauthorized',
  /** The user's publish window (WS_USER_MSG_LIMIT, every socket of the user, cluster-wide) is full (2026-12). */
  'user_rate_limited',
] as const;
export type ErrorReason = (typeof ErrorReasons)[number];

/**
 * Reasons that are the socket's fault. They count as strikes: WS_MAX_STRIKES
 * of them in a row close the socket with 1008 `abusive`. `unavailable` and
 * `internal` are the server's fault, and `tenant_rate_limited` and
 * `user_rate_limited` are the whole tenant's or user's doing (other sockets,
 * other nodes): they never count. A refused `refresh` (`unauthorized`) does.
 */
export function isStrike(reason: ErrorReason): boolean {
  return reason !== 'unavailable' && reason !== 'internal' && reason !== 'tenant_rate_limited' && reason !== 'user_rate_limited';
}

/**
 * Upgrade refusals: the `reason` of the plain HTTP answer to a WebSocket
 * upgrade that opens no socket (`{"reason":"...","retryAfterMs":N}`).
 * Additive only, as ErrorReasons.
 */
export const UpgradeRefusals = [
  /** 503: draining, at WS_MAX_SOCKETS, or over WS_UPGRADE_RATE; with retryAfterMs and Retry-After. */
  'unavailable',
  /** 401: missing or invalid token. */
  'unauthorized',
  /** 403: Origin not in WS_ALLOWED_ORIGINS. */
  'forbidden_origin',
  /** 429: the per-IP connection window; with retryAfterMs and Retry-After. */
  'ip_rate_limited',
  /** 429: the per-tenant connection window (2026-12); with retryAfterMs and Retry-After. */
  'tenant_rate_limited',
  /** 400/426: not a valid WebSocket handshake (missing or malformed key, version other than 13). */
  'bad_request',
  /** 431: request line and headers above WS_MAX_HEADER_BYTES. */
  'headers_too_large',
  /** 500: the upgrade handler failed; the node goes on serving. */
  'internal',
  /** 401: the token was revoked by `POST /v1/revoke` (2026-12). */
  'token_revoked',
  /** 429: the user has WS_MAX_USER_SOCKETS sockets open across the cluster (2026-12). */
  'too_many_sockets',
  /** 403: the connect hook (WS_AUTH=hook) refused with status 403; with the backend's `message` when it gave one (2026-12). */
  'forbidden',
] as const;
export type UpgradeRefusal = (typeof UpgradeRefusals)[number];
