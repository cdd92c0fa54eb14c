/**
 * The checks of a WebSocket upgrade that need no I/O, as pure functions of
 * the handshake read once (uWS's request is gone after the handler returns).
 * The refusals are constants: a flood of bad handshakes allocates nothing
 * here. The IP window and the token, which wait on a store or a key set,
 * come after these and live in the gateway.
 */
import { PROTOCOL_VERSION, type UpgradeRefusal } from '@sluice/protocol';
import { type OriginRule, originAllowed } from './identity.ts';

/** The parts of an upgrade request the checks read. */
export interface Handshake {
  /** Request line (URL and query) and every header, names and values, with 4 bytes per header for `: ` and CRLF. */
  readonly headerBytes: number;
  readonly version: string;
  /** `sec-websocket-key` */
  readonly key: string;
  /** `origin`; '' when absent (not a browser). */
  readonly origin: string;
}

export interface HandshakePolicy {
  /** WS_MAX_HEADER_BYTES */
  readonly maxHeaderBytes: number;
  /** WS_ALLOWED_ORIGINS, parsed; undefined: every origin. */
  readonly origins: readonly OriginRule[] | undefined;
}

/** A plain-HTTP answer to an upgrade: no socket is opened. `why` is for the debug log only. */
export interface Refusal {
  readonly reason: UpgradeRefusal;
  readonly status: string;
  /** One extra header the client needs to retry correctly, e.g. `sec-websocket-version: 13`. */
  readonly header?: readonly [name: string, value: string];
  readonly why?: string;
}

export const Refusals = {
  headersTooLarge: { reason: 'headers_too_large', status: '431 Request Header Fields Too Large' },
  badVersion: { reason: 'bad_request', status: '426 Upgrade Required', header: ['sec-websocket-version', '13'], why: 'not version 13' },
  badKey: { reason: 'bad_request', status: '400 Bad Request', why: 'malformed sec-websocket-key' },
  forbiddenOrigin: { reason: 'forbidden_origin', status: '403 Forbidden' },
  /** A request to /ws with `upgrade: websocket` that uWS did not take as a handshake. */
  noKey: { reason: 'bad_request', status: '400 Bad Request', why: 'no sec-websocket-key' },
  /** A bug in the upgrade handler: this request fails, the shard goes on. */
  internal: { reason: 'internal', status: '500 Internal Server Error' },
  /** A plain request to /ws. */
  notAnUpgrade: { reason: 'bad_request', status: '426 Upgrade Required', header: ['upgrade', 'websocket'], why: 'not an upgrade' },
} as const satisfies Record<string, Refusal>;

/** A Sec-WebSocket-Key: 16 bytes in base64 (RFC 6455 4.1). */
const WS_KEY = /^[A-Za-z0-9+/]{22}==$/;

/**
 * The first check the handshake fails, in the order the cheapest to answer
 * comes first; undefined when it passes them all. A request without an
 * `origin` header is not a browser's and is not checked against the list.
 */
export function checkHandshake(h: Handshake, p: HandshakePolicy): Refusal | undefined {
  if (h.headerBytes > p.maxHeaderBytes) return Refusals.headersTooLarge;
  if (h.version !== '13') return Refusals.badVersion;
  if (!WS_KEY.test(h.key)) return Refusals.badKey;
  if (p.origins !== undefined && h.origin !== '' && !originAllowed(p.origins, h.origin)) return Refusals.forbiddenOrigin;
  return undefined;
}

/** The subprotocol to answer with: `sluice.v1` when the client offered it, else none (the client still connects). */
export function chooseSubprotocol(offered: string): string {
  return offered.split(',').some((p) => p.trim() === PROTOCOL_VERSION) ? PROTOCOL_VERSION : '';
}
