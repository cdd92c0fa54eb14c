/**
 * Time, as the SDK sees it: a monotonic `now` and one-shot timers. Injected,
 * so that tests drive reconnects, timeouts and heartbeats on a virtual clock
 * without sleeping (as phoenix.js keeps its timers behind `timer.js`).
 */

export type TimerHandle = unknown;

export interface Clock {
  /** Milliseconds on a monotonic clock; only differences are used. */
  now(): number;
  /** Milliseconds since the epoch (`Date.now()`): only held against a token's `expiresAt`, which the server sends as such. */
  wall(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

/** The host's clock: `performance.now()` and the global timers, in browsers and Node alike. */
export const systemClock: Clock = {
  now: () => performance.now(),
  wall: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** One timer slot: setting it again replaces the call armed before. */
export class Timer {
  private handle: TimerHandle | undefined;

  constructor(private readonly clock: Clock) {}

  set(fn: () => void, ms: number): void {
    this.cancel();
    this.handle = this.clock.setTimeout(() => {
      this.handle = undefined;
      fn();
    }, ms);
  }

  cancel(): void {
    if (this.handle !== undefined) this.clock.clearTimeout(this.handle);
    this.handle = undefined;
  }
}
