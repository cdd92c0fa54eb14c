/** The client's options, checked once and filled with defaults, for every part to read. */
import type { Limits } from '@sluice/protocol';
import { type Backoff, DEFAULT_BACKOFF } from './policy.ts';
import type { WebSocketConstructor } from './socket.ts';
import type { SluiceClientOptions } from './types.ts';

/** The gateway's defaults, assumed until (or unless) `welcome` announces the limits. */
export const FALLBACK_LIMITS: Limits = { maxFrameBytes: 131_072, hardMaxFrameBytes: 1_048_576, maxMessages: 20, rateWindowMs: 1000, maxJoins: 50 };

export interface Settings {
  readonly urls: readonly string[];
  readonly Ctor: WebSocketConstructor;
  readonly backoff: Backoff;
  readonly resetAfterMs: number;
  readonly outboxLimit: number;
  readonly connectTimeoutMs: number;
  readonly idempotencyWindowMs: number;
  readonly random: () => number;
  readonly options: SluiceClientOptions;
}

/** Throws a TypeError for the first option that is wrong, in the order they are documented. */
export function settingsOf(options: SluiceClientOptions): Settings {
  const urls = typeof options.url === 'string' ? [options.url] : [...options.url];
  if (urls.length === 0 || urls.some((u) => typeof u !== 'string' || u === '')) throw new TypeError('url must be a URL or a non-empty list of URLs');
  const Ctor = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (Ctor === undefined) throw new TypeError('no global WebSocket here: pass one as the WebSocket option (in Node: the `ws` package)');
  const settings: Settings = {
    urls,
    Ctor,
    backoff: {
      initialMs: positive(options.backoff?.initialMs, DEFAULT_BACKOFF.initialMs, 'backoff.initialMs'),
      maxMs: positive(options.backoff?.maxMs, DEFAULT_BACKOFF.maxMs, 'backoff.maxMs'),
    },
    resetAfterMs: positive(options.backoff?.resetAfterMs, 5000, 'backoff.resetAfterMs'),
    outboxLimit: positive(options.outboxLimit, 1000, 'outboxLimit'),
    connectTimeoutMs: positive(options.connectTimeoutMs, 15_000, 'connectTimeoutMs'),
    idempotencyWindowMs: positive(options.idempotencyWindowMs, 290_000, 'idempotencyWindowMs'),
    random: options.random ?? Math.random,
    options,
  };
  if (options.heartbeatMs !== undefined && !(options.heartbeatMs >= 0)) throw new TypeError('heartbeatMs must be 0 or more');
  return settings;
}

function positive(v: number | undefined, dflt: number, name: string): number {
  if (v === undefined) return dflt;
  if (!(typeof v === 'number' && Number.isFinite(v) && v > 0)) throw new TypeError(`${name} must be a positive number`);
  return v;
}
