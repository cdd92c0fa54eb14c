/**
 * Flags and counters shared by the coordinator and every shard through one
 * SharedArrayBuffer. Hot-path checks read them with Atomics.load: no message
 * passing per frame or per upgrade.
 */
export const MAX_SHARDS = 256;

const FLAGS = 0;
const SOCKETS_BASE = 8;
/** Hook calls in flight, per shard and hook URL (connect with refresh, subscribe, publish): HOOKS_BASE + shard * 3 + slot. */
const HOOKS_BASE = SOCKETS_BASE + MAX_SHARDS;
const HOOK_SLOTS = 3;

/** The slot of a hook's in-flight count. */
export const HookSlot = { connect: 0, subscribe: 1, publish: 2 } as const;
export type HookSlot = (typeof HookSlot)[keyof typeof HookSlot];

export const Flag = {
  /** Every shard listens. */
  Listening: 1,
  /** Readiness has flipped: new upgrades are refused with 503. */
  Draining: 2,
  /** A configured Redis is unreachable: readiness fails; sockets keep working. */
  RedisDown: 4,
} as const;

export class SharedState {
  readonly i32: Int32Array;

  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(4 * (HOOKS_BASE + HOOK_SLOTS * MAX_SHARDS))) {
    this.i32 = new Int32Array(buffer);
  }

  has(flag: number): boolean {
    return (Atomics.load(this.i32, FLAGS) & flag) !== 0;
  }

  set(flag: number): void {
    Atomics.or(this.i32, FLAGS, flag);
  }

  clear(flag: number): void {
    Atomics.and(this.i32, FLAGS, ~flag);
  }

  /**
   * Takes a place for one call of a hook if fewer than `max` are in flight
   * on the node's `shards`; false when none is free. The sum and the add
   * are two steps: shards taking places at the same instant may overshoot
   * `max` by at most one each.
   */
  takeHookCall(shard: number, slot: HookSlot, max: number, shards: number): boolean {
    let n = 0;
    for (let i = 0; i < shards; i++) n += Atomics.load(this.i32, HOOKS_BASE + i * HOOK_SLOTS + slot);
    if (n >= max) return false;
    Atomics.add(this.i32, HOOKS_BASE + shard * HOOK_SLOTS + slot, 1);
    return true;
  }

  releaseHookCall(shard: number, slot: HookSlot): void {
    Atomics.sub(this.i32, HOOKS_BASE + shard * HOOK_SLOTS + slot, 1);
  }

  /** A shard's thread is gone: the calls it had in flight are not. */
  resetHookCalls(shard: number): void {
    for (let s = 0; s < HOOK_SLOTS; s++) Atomics.store(this.i32, HOOKS_BASE + shard * HOOK_SLOTS + s, 0);
  }

  addSockets(shard: number, delta: number): void {
    Atomics.add(this.i32, SOCKETS_BASE + shard, delta);
  }

  resetSockets(shard: number): void {
    Atomics.store(this.i32, SOCKETS_BASE + shard, 0);
  }

  socketsOf(shard: number): number {
    return Atomics.load(this.i32, SOCKETS_BASE + shard);
  }

  totalSockets(shards: number): number {
    let n = 0;
    for (let i = 0; i < shards; i++) n += Atomics.load(this.i32, SOCKETS_BASE + i);
    return n;
  }

  /** Ready: listening, not draining, a configured Redis reachable, and below the socket cap (0 = none). */
  ready(shards: number, maxSockets: number): boolean {
    const f = Atomics.load(this.i32, FLAGS);
    if ((f & Flag.Listening) === 0 || (f & (Flag.Draining | Flag.RedisDown)) !== 0) return false;
    return maxSockets === 0 || this.totalSockets(shards) < maxSockets;
  }
}
