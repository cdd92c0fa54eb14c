/**
 * Request and answer over a one-way channel (a MessagePort, a control port,
 * a child process): request ids, the map of pending requests, a timeout,
 * and failing every pending request when the other side goes away. One
 * helper for the coordinator's asks, MeshBroker's requests to owner shards,
 * the shard's settles with the coordinator and the benchmark children.
 *
 * Pure but for the timer, which the caller hands in (core has no clock):
 * `{ set: (fn, ms) => setTimeout(fn, ms).unref(), clear: clearTimeout }`.
 */

/** Timers as the caller has them. */
export interface RequestTimers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

/** Why a request failed, when it fails by rejecting. */
export class RequestFailed extends Error {
  constructor(readonly code: 'timeout' | 'closed', message: string) {
    super(message);
    this.name = 'RequestFailed';
  }
}

/**
 * What a request settles with when it times out or the channel closes:
 * resolve with `value` (a fallback the caller can use as an answer), or
 * reject with `error`. Default: reject with a RequestFailed.
 */
export type RequestFailure<T> = { readonly value: T } | { readonly error: Error };

export interface RequestOptions<T> {
  /** No answer in this many ms: the request fails (needs `timers`). Default: no timeout. */
  readonly timeoutMs?: number;
  readonly fail?: RequestFailure<T>;
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
  readonly fail: RequestFailure<unknown> | undefined;
  timer: unknown;
}

/**
 * The pending requests of one channel. Ids start at 1 and increase (0 stays
 * free for "no answer wanted"). An answer for an id nobody waits for (timed
 * out, failed, unknown) is ignored.
 */
export class PendingRequests<A = unknown> {
  private readonly pending = new Map<number, Pending>();
  private rid = 0;
  private closed = false;

  constructor(private readonly timers?: RequestTimers) {}

  /**
   * Sends a request: `send(rid)` writes it to the channel (synchronously);
   * the promise settles with the answer given to `answer(rid, ...)`, or as
   * `opts.fail` says on timeout or close. After `close`, a request fails at
   * once without being sent. If `send` throws, the request is forgotten and
   * the error is the rejection.
   */
  request<T extends A>(send: (rid: number) => void, opts: RequestOptions<T> = {}): Promise<T> {
    const fail = opts.fail as RequestFailure<unknown> | undefined;
    if (this.closed) return settleFailed(fail, new RequestFailed('closed', 'the channel is closed')) as Promise<T>;
    if (opts.timeoutMs !== undefined && this.timers === undefined) throw new Error('PendingRequests: a timeout needs timers');
    return new Promise<T>((resolve, reject) => {
      this.start({ resolve: resolve as (v: unknown) => void, reject, fail, timer: undefined }, send, opts.timeoutMs);
    });
  }

  /**
   * `request` for a hot path: `done` gets the answer, or `opts.fail.value`
   * on timeout or close (at once, before this returns, when the channel is
   * already closed), with no promise and no microtask between the answer
   * and `done`.
   */
  call<T extends A>(send: (rid: number) => void, opts: RequestOptions<T> & { readonly fail: { readonly value: T } }, done: (value: T) => void): void {
    if (this.closed) {
      done(opts.fail.value);
      return;
    }
    if (opts.timeoutMs !== undefined && this.timers === undefined) throw new Error('PendingRequests: a timeout needs timers');
    this.start({ resolve: done as (v: unknown) => void, reject: FAIL_HAS_VALUE, fail: opts.fail, timer: undefined }, send, opts.timeoutMs);
  }

  /** Registers `p` under a new id, arms its timeout, and sends it (forgotten again if `send` throws). */
  private start(p: Pending, send: (rid: number) => void, timeoutMs: number | undefined): void {
    const rid = ++this.rid;
    this.pending.set(rid, p);
    if (timeoutMs !== undefined) {
      p.timer = this.timers!.set(() => {
        if (this.pending.get(rid) !== p) return;
        this.pending.delete(rid);
        failWith(p, new RequestFailed('timeout', `no answer in ${timeoutMs} ms`));
      }, timeoutMs);
    }
    try {
      send(rid);
    } catch (err) {
      this.forget(rid);
      throw err;
    }
  }

  /** The answer to request `rid`; false when no request waits for it. */
  answer(rid: number, value: A): boolean {
    const p = this.forget(rid);
    if (p === undefined) return false;
    p.resolve(value);
    return true;
  }

  /** Fails request `rid` now, as `fail` says (or with `err`); false when none waits. */
  reject(rid: number, err: Error): boolean {
    const p = this.forget(rid);
    if (p === undefined) return false;
    failWith(p, err);
    return true;
  }

  /**
   * The other side is gone: every pending request fails (as its `fail`
   * says), and later requests fail at once. Returns how many failed.
   */
  close(reason = 'the channel closed'): number {
    this.closed = true;
    const all = [...this.pending.values()];
    this.pending.clear();
    const err = new RequestFailed('closed', reason);
    // A `call`'s callback runs here: one that throws must not leave the
    // others unanswered (they are out of `pending` already).
    let thrown: unknown;
    for (const p of all) {
      if (p.timer !== undefined) this.timers!.clear(p.timer);
      try {
        failWith(p, err);
      } catch (e) {
        thrown ??= e;
      }
    }
    if (thrown !== undefined) throw thrown;
    return all.length;
  }

  /** Requests waiting for an answer. */
  get size(): number {
    return this.pending.size;
  }

  private forget(rid: number): Pending | undefined {
    const p = this.pending.get(rid);
    if (p === undefined) return undefined;
    this.pending.delete(rid);
    if (p.timer !== undefined) this.timers!.clear(p.timer);
    return p;
  }
}

/** A `call`'s reject: never called, since its `fail` has a value (failWith resolves with it). */
const FAIL_HAS_VALUE = (): void => {};

function failWith(p: Pending, err: Error): void {
  if (p.fail === undefined) p.reject(err);
  else if ('value' in p.fail) p.resolve(p.fail.value);
  else p.reject(p.fail.error);
}

function settleFailed(fail: RequestFailure<unknown> | undefined, err: Error): Promise<unknown> {
  if (fail === undefined) return Promise.reject(err);
  if ('value' in fail) return Promise.resolve(fail.value);
  return Promise.reject(fail.error);
}
