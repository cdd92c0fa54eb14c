/**
 * Flags and counters shared by the coordinator and every shard through one
 * SharedArrayBuffer. Hot-path checks read them with Atomics.load: no message
 * passing per frame or per upgrade.
 */
export const MAX_SHARDS = 256;

const FLAGS = 0;
const SOCKETS_BASE = 8;

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
