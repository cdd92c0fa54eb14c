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
] as const;
export type ErrorReason = (typeof ErrorReasons)[number];

/**
 * Reasons that are the socket's fault. They count as strikes: WS_MAX_STRIKES
 * of them in a row close the socket with 1008 `abusive`. `unavailable` and
 * `internal` are the server's fault, and `tenant_rate_limited` is the whole
 * tenant's doing (other sockets, other nodes): they never count.
 */
export function isStrike(reason: ErrorReason): boolean {
  return reason !== 'unavailable' && reason !== 'internal' && reason !== 'tenant_rate_limited';
}

/** Upgrade refusals (plain HTTP bodies). */
export type UpgradeRefusal =
  | 'unavailable'
  | 'unauthorized'
  | 'forbidden_origin'
  | 'ip_rate_limited'
  | 'tenant_rate_limited'
  /** 400/426: not a valid WebSocket handshake (missing or malformed key, version other than 13). */
  | 'bad_request'
  /** 431: request line and headers above WS_MAX_HEADER_BYTES. */
  | 'headers_too_large';
