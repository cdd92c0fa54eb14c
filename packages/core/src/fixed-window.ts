/**
 * Per-socket fixed window. The state lives in the socket's user data and is
 * mutated in place: this runs on every frame and must not allocate.
 */
export interface FixedWindowState {
  windowStart: number;
  windowCount: number;
}

/**
 * Counts one frame at `now`. Returns 0 when the frame is within the limit,
 * else the milliseconds left in the window (at least 1), which is the
 * `retryAfterMs` the client is told.
 */
export function hitFixedWindow(s: FixedWindowState, now: number, limit: number, windowMs: number): number {
  if (now - s.windowStart >= windowMs || now < s.windowStart) {
    s.windowStart = now;
    s.windowCount = 0;
  }
  s.windowCount++;
  if (s.windowCount <= limit) return 0;
  return Math.max(1, s.windowStart + windowMs - now);
}
