/**
 * Whether Redis is up, as one object per connection: its state and the
 * listeners of its changes. The coordinator's readiness, RedisBroker's
 * choice between Redis and the mesh, and the limits' choice between Redis
 * and the node's memory store all read it, instead of each keeping its own
 * notion of "Redis is down".
 *
 * States, from the connection's events (ioredis emits them for a Redis and
 * a Cluster client alike):
 *
 * - `connecting`: never ready yet, no failure seen yet;
 * - `up`: ready (commands are sent);
 * - `down`: closed or ended, before the first ready (unreachable at start)
 *   or after one (an outage, counted in `outages`).
 */
import type { RedisClient } from './bus.ts';

export type RedisState = 'connecting' | 'up' | 'down';

export type RedisStateListener = (state: RedisState, prev: RedisState) => void;

export interface WaitTimers {
  set(fn: () => void, ms: number): unknown;
  clear?(handle: unknown): void;
}

const DEFAULT_TIMERS: WaitTimers = {
  set: (fn, t) => setTimeout(fn, t).unref(),
  clear: (h) => clearTimeout(h as NodeJS.Timeout),
};

export class RedisHealth {
  private current: RedisState = 'connecting';
  private readonly listeners = new Set<RedisStateListener>();
  /** Times the connection was lost after being up. */
  outages = 0;
  /** Whether it has ever been up. */
  everUp = false;

  /** Watches `client`; without one, the state is set by `set` (tests, or a caller with its own source). */
  constructor(client?: RedisClient) {
    if (client === undefined) return;
    if (client.status === 'ready') this.set('up');
    client.on('ready', () => this.set('up'));
    client.on('close', () => this.set('down'));
    client.on('end', () => this.set('down'));
  }

  get state(): RedisState {
    return this.current;
  }

  get up(): boolean {
    return this.current === 'up';
  }

  /** Calls `listener` on every change of state from now on; the function returned stops that. */
  onChange(listener: RedisStateListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Resolves when the state is `up`, or after `ms` (whichever comes first);
   * never rejects. Its listener and timer go when it resolves, so a caller
   * that waits often (a reconnect, a presence watch) leaves nothing behind.
   */
  whenUp(ms: number, timers: WaitTimers = DEFAULT_TIMERS): Promise<void> {
    if (this.up) return Promise.resolve();
    return new Promise((resolve) => {
      const wait: { handle?: unknown; off?: () => void } = {};
      const done = (): void => {
        wait.off?.();
        timers.clear?.(wait.handle);
        resolve();
      };
      wait.off = this.onChange((s) => {
        if (s === 'up') done();
      });
      wait.handle = timers.set(done, ms);
    });
  }

  /** How many listeners are registered (the tests check that waits leave none). */
  get listenerCount(): number {
    return this.listeners.size;
  }

  /** Moves to `state`; listeners hear only of changes. A `down` before the first `up` is the failure at start, not an outage. */
  set(state: RedisState): void {
    const prev = this.current;
    if (state === prev) return;
    // `connecting` is only the first state: a reconnect attempt stays `down`.
    if (state === 'connecting') return;
    this.current = state;
    if (state === 'up') this.everUp = true;
    else if (prev === 'up') this.outages++;
    for (const l of this.listeners) l(state, prev);
  }
}
