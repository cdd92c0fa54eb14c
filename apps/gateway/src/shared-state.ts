/**
 * Flags and counters shared by the coordinator and every shard through one
 * SharedArrayBuffer. Hot-path checks read them with Atomics.load: no message
 * passing per frame or per upgrade.
 */
export const MAX_SHARDS = 256;

const FLAGS = 0;
/** Hook calls in flight on the node, one slot per hook URL (connect with refresh, subscribe, publish). */
const HOOKS_BASE = 1;
const SOCKETS_BASE = 8;

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

  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(4 * (SOCKETS_BASE + MAX_SHARDS))) {
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

  /** Takes a place for one call of a hook if fewer than `max` are in flight on the node; false when none is free. */
  takeHookCall(slot: HookSlot, max: number): boolean {
    if (Atomics.add(this.i32, HOOKS_BASE + slot, 1) < max) return true;
    Atomics.sub(this.i32, HOOKS_BASE + slot, 1);
    return false;
  }

  releaseHookCall(slot: HookSlot): void {
    Atomics.sub(this.i32, HOOKS_BASE + slot, 1);
  }

  hookCalls(slot: HookSlot): number {
    return Atomics.load(this.i32, HOOKS_BASE + slot);
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
