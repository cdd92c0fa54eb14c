/**
 * A typed event emitter small enough for browsers. A listener that throws
 * does not stop the others nor the SDK's own processing: its exception is
 * rethrown from a microtask, where the host reports it as uncaught, as it
 * would for any other event callback.
 */
export class Emitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly listeners = new Map<keyof Events, Set<(payload: never) => void>>();

  /** Adds a listener; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): () => void {
    let set = this.listeners.get(event);
    if (set === undefined) this.listeners.set(event, (set = new Set()));
    set.add(listener);
    return () => this.off(event, listener);
  }

  off<K extends keyof Events>(event: K, listener: (payload: Events[K]) => void): void {
    this.listeners.get(event)?.delete(listener);
  }

  protected emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    const set = this.listeners.get(event);
    if (set === undefined) return;
    for (const listener of [...set]) callSafely(listener as (p: Events[K]) => void, payload);
  }
}

/** Calls a user callback; an exception is rethrown outside the SDK's call stack. */
export function callSafely<T>(fn: (arg: T) => void, arg: T): void {
  try {
    fn(arg);
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}
