/**
 * The socket guard: what happens to a client frame before it is decoded, and
 * the strike count that closes a socket sending rejected frames in a row.
 * Pure and allocation-free: it runs on every frame, handed the socket's own
 * state (mutated in place), the limits and the clock.
 */
import { type ErrorReason, isStrike } from '@sluice/protocol';
import { type FixedWindowState, hitFixedWindow } from './fixed-window.ts';

/** What the guard decided for one frame. */
export const Guard = {
  /** Within every limit: decode it. */
  Pass: 0,
  /** Above the hard cap: close the socket with 1009 `payload_too_large`. */
  HardCap: 1,
  /** The socket's frame window is full: reject with `rate_limited` and the wait `frameWindowWait` gives. */
  RateLimited: 2,
  /** A binary frame: reject with `bad_request` (the protocol is JSON text). */
  Binary: 3,
  /** Above WS_MAX_FRAME_BYTES but within the hard cap: reject with `payload_too_large`. */
  TooLarge: 4,
} as const;
export type Guard = (typeof Guard)[keyof typeof Guard];

/** The guard's slice of the config. */
export interface FrameGuardLimits {
  readonly hardMaxFrameBytes: number;
  readonly maxFrameBytes: number;
  readonly maxMessages: number;
  readonly rateWindowMs: number;
}

/**
 * Checks one frame of `bytes` bytes at `now`, in the order a flood is
 * cheapest to stop: the hard cap (no window spent on a frame that closes the
 * socket), the socket's frame window (every other frame counts, binary and
 * oversized ones too), then the frame's kind and size.
 */
export function guardFrame(s: FixedWindowState, bytes: number, isBinary: boolean, now: number, l: FrameGuardLimits): Guard {
  if (bytes > l.hardMaxFrameBytes) return Guard.HardCap;
  if (hitFixedWindow(s, now, l.maxMessages, l.rateWindowMs) !== 0) return Guard.RateLimited;
  if (isBinary) return Guard.Binary;
  if (bytes > l.maxFrameBytes) return Guard.TooLarge;
  return Guard.Pass;
}

/** After `Guard.RateLimited`: the ms until the socket's window has room (at least 1), its `retryAfterMs`. */
export function frameWindowWait(s: FixedWindowState, now: number, windowMs: number): number {
  return Math.max(1, s.windowStart + windowMs - now);
}

/** A socket's strike count: rejected frames in a row that were its own fault. */
export interface StrikeState {
  strikes: number;
}

/** A frame was accepted: the run of rejected ones is broken. */
export function clearStrikes(s: StrikeState): void {
  s.strikes = 0;
}

/**
 * A frame was rejected for `reason`. True when the socket has struck out
 * (WS_MAX_STRIKES rejections in a row that were its own fault, see
 * `isStrike`) and is to be closed with 1008 `abusive`.
 */
export function strike(s: StrikeState, reason: ErrorReason, maxStrikes: number): boolean {
  return isStrike(reason) && ++s.strikes >= maxStrikes;
}
