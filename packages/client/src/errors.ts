/**
 * The one error type the SDK hands to callers: on `publish()` promises, on
 * `Subscription.ready`, and on the client's `error` event.
 */

export type SluiceErrorCode =
  // Raised by the SDK itself.
  /** `publish()` found the outbox at `outboxLimit` unacknowledged publishes. */
  | 'outbox_full'
  /** `close()` was called, or the client stopped for good, before the publish was acknowledged. */
  | 'closed'
  /**
   * An ephemeral publish was in flight when the socket dropped: ephemeral
   * publishes are never resent. Also the server's reason of a close 1008
   * `disconnected` (the operator's `POST /v1/disconnect` without
   * `reconnect`): the client stops, and this error has `closeCode` 1008.
   */
  | 'disconnected'
  /**
   * A durable publish went unacknowledged for longer than `idempotencyWindowMs`
   * after its first send: a resend could no longer be recognised as a repeat,
   * so the SDK does not resend it. It may or may not have been stored.
   */
  | 'outcome_unknown'
  /** The `token` callback threw or rejected. */
  | 'token_failed'
  // Reasons of the server, in replies, closes and upgrade refusals.
  | 'bad_request'
  | 'payload_too_large'
  | 'forbidden'
  | 'too_many_joins'
  | 'internal'
  | 'abusive'
  | 'unauthorized'
  /** The upgrade was refused 401 because the token was revoked (`POST /v1/revoke`); the client asks for a new one and keeps trying. */
  | 'token_revoked'
  | 'forbidden_origin';

export interface SluiceErrorDetails {
  readonly topic?: string;
  /** The close code when the error came with a close. */
  readonly closeCode?: number;
  /** The HTTP status when the error came with a refused upgrade. */
  readonly status?: number;
  readonly cause?: unknown;
}

export class SluiceError extends Error {
  override readonly name = 'SluiceError';
  readonly topic: string | undefined;
  readonly closeCode: number | undefined;
  readonly status: number | undefined;

  constructor(readonly code: SluiceErrorCode, message: string, details: SluiceErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.topic = details.topic;
    this.closeCode = details.closeCode;
    this.status = details.status;
  }
}

const KNOWN_CODES = new Set<string>(['bad_request', 'payload_too_large', 'forbidden', 'too_many_joins', 'internal', 'abusive', 'unauthorized',
  'forbidden_origin']);

/** A server reason as an error code; a reason this SDK does not know (a newer server) maps to `internal`. */
export function errorCode(reason: string): SluiceErrorCode {
  return KNOWN_CODES.has(reason) ? (reason as SluiceErrorCode) : 'internal';
}
