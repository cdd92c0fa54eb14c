/**
 * What the gateway tells uWS and its clients, derived from the config alone:
 * the WebSocket options and the retry hint of every 1012, 1013 and 503.
 */
import type { Config } from './config.ts';
import { jitter } from './jitter.ts';

/** The uWS WebSocket behaviour options (`app.ws(pattern, {...})`) Sluice sets. */
export interface SocketOptions {
  readonly maxPayloadLength: number;
  readonly idleTimeout: number;
  readonly maxBackpressure: number;
  readonly closeOnBackpressureLimit: true;
  readonly sendPingsAutomatically: true;
}

export function socketOptions(cfg: Pick<Config, 'hardMaxFrameBytes' | 'heartbeatMs' | 'maxBufferedBytes'>): SocketOptions {
  return {
    // uWS drops a frame above maxPayloadLength by closing the TCP connection
    // (the client sees 1006). Leaving room above the hard cap lets the guard
    // answer every frame up to twice the cap with a proper 1009.
    maxPayloadLength: Math.min(2 * cfg.hardMaxFrameBytes, 0x7fffffff),
    // Seconds, a multiple of 4 in [8, 960] (uWS rounds to its 4 s timer):
    // two heartbeats of silence close the socket.
    idleTimeout: Math.min(960, Math.max(8, Math.ceil((2 * cfg.heartbeatMs) / 4000) * 4)),
    // The slow lane closes a socket at WS_MAX_BUFFERED_BYTES with 1013. A
    // socket still on the native lane can pass that between two sweeps;
    // uWS's own limit, well above, stays as the last guard: it closes
    // rather than skip a socket silently.
    maxBackpressure: 2 * cfg.maxBufferedBytes + 2 * cfg.hardMaxFrameBytes,
    // A boolean: uWS 20.57 rejects any other value.
    closeOnBackpressureLimit: true,
    sendPingsAutomatically: true,
  };
}

/**
 * The `retryAfterMs` of a 1012/1013 close or a 503: jittered over
 * [WS_RETRY_AFTER_MIN_MS, WS_RETRY_AFTER_MAX_MS] so that the clients of a
 * drained node do not come back in one wave.
 */
export function retryHint(cfg: Pick<Config, 'retryAfterMinMs' | 'retryAfterMaxMs'>, random: () => number): number {
  return jitter(cfg.retryAfterMinMs, cfg.retryAfterMaxMs, random);
}

/** The HTTP `retry-after` header for a wait in ms: whole seconds, at least 1. */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, Math.ceil(ms / 1000)));
}
