import { slidingWindowState, windowBucket } from './memory-window-store.ts';
import type { WindowState } from './window-store.ts';

// MemoryWindowStore's sliding-window counter (the same buckets, the same
// rollover, the same `slidingWindowState`), for hits only, in one
// SharedArrayBuffer that every shard thread of a node maps: an upgrade's
// per-IP (or per-tenant) check is answered on the spot and exactly, every
// attempt counted once for the whole node, without a message to the
// coordinator and back (S5: that round trip, its batching and the
// asynchronous upgrade it forces were a third of a shard's CPU per upgrade).
//
// Layout: a lock word, then `slots` slots of SLOT_I32 Int32 words (lock-free
// reads of the key hash; counters changed only under the lock) and, after
// them, one Float64 per slot for its newest bucket. A key is two 32-bit
// FNV-1a hashes of its string (collisions of 64 bits are not a concern at
// the keys a node sees in three windows). A slot whose newest bucket is
// three or more buckets old holds nothing a check can read, so it is free
// (MemoryWindowStore drops such keys in its sweep). Open addressing with at
// most PROBE slots looked at; when all of them hold live keys the table is
// full for that key and `hit` answers undefined: the caller counts it
// elsewhere (the coordinator's store).
//
// One lock for the table: the critical section is a probe of a few slots
// and some arithmetic, under a microsecond, taken once per upgrade attempt.
// Its word holds the holder's id + 1, so that a thread that died holding it
// (it cannot throw inside) can be released by whoever restarts that thread.

const LOCK = 0;
const HEADER_I32 = 2;
/** Per slot: hash A, hash B, then the counters of the newest bucket and the two before it. */
const SLOT_I32 = 5;
const HA = 0;
const HB = 1;
const H0 = 2;
const H1 = 3;
const H2 = 4;
/** Slots looked at for one key before the table counts as full for it. */
const PROBE = 64;
/** Spins on a held lock before waiting on it for a millisecond (worker threads only; the main thread only spins). */
const SPINS = 1000;

/** The slot's counter `ago` buckets before its newest (0 beyond the three it keeps). */
function counter(i: Int32Array, base: number, ago: number): number {
  return ago === 0 ? i[base + H0]! : ago === 1 ? i[base + H1]! : ago === 2 ? i[base + H2]! : 0;
}

export class SharedWindowTable {
  private readonly i32: Int32Array;
  private readonly buckets: Float64Array;
  private readonly mask: number;

  /** The bytes of a table of `slots` slots (a power of two). */
  static bytes(slots: number): number {
    if (!Number.isInteger(Math.log2(slots)) || slots < PROBE) throw new RangeError(`slots must be a power of two of at least ${PROBE}, got ${slots}`);
    const words = HEADER_I32 + slots * SLOT_I32;
    return Math.ceil((words * 4) / 8) * 8 + slots * 8;
  }

  /**
   * `buffer` of `SharedWindowTable.bytes(slots)` bytes, zeroed at first (a
   * new SharedArrayBuffer is); `holder` names this thread in the lock word.
   */
  constructor(
    buffer: SharedArrayBuffer,
    readonly slots: number,
    readonly windowMs: number,
    private readonly holder: number,
    private readonly canWait = false,
  ) {
    if (buffer.byteLength < SharedWindowTable.bytes(slots)) throw new RangeError(`the buffer holds ${buffer.byteLength} bytes, a table of ${slots} slots needs ${SharedWindowTable.bytes(slots)}`);
    const words = HEADER_I32 + slots * SLOT_I32;
    this.i32 = new Int32Array(buffer, 0, words);
    this.buckets = new Float64Array(buffer, Math.ceil((words * 4) / 8) * 8, slots);
    this.mask = slots - 1;
  }

  /**
   * Counts `hits` attempts of `key` at `now` against `limit` and answers the
   * window's state after them, as `MemoryWindowStore.settle` does for one
   * key; undefined when the table has no slot for the key (nothing counted).
   */
  hit(key: string, hits: number, limit: number, now: number): WindowState | undefined {
    let a = 0x811c9dc5;
    let b = 0x01000193;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 15);
    }
    // 0 marks a slot never used: a key whose hashes are both 0 takes another pair.
    if (a === 0 && b === 0) a = 1;
    const w = this.windowMs;
    now = Math.floor(now);
    const bucket = windowBucket(now, w);
    this.lock();
    try {
      let free = -1;
      let at = -1;
      for (let p = 0, s = a & this.mask; p < PROBE; p++, s = (s + 1) & this.mask) {
        const base = HEADER_I32 + s * SLOT_I32;
        const used = this.i32[base + HA] !== 0 || this.i32[base + HB] !== 0;
        const live = used && bucket - this.buckets[s]! < 3;
        if (live && this.i32[base + HA] === a && this.i32[base + HB] === b) {
          at = s;
          break;
        }
        if (!live && free === -1) free = s;
      }
      if (at === -1) {
        if (free === -1) return undefined;
        at = free;
        const base = HEADER_I32 + at * SLOT_I32;
        this.i32[base + HA] = a;
        this.i32[base + HB] = b;
        this.i32[base + H0] = 0;
        this.i32[base + H1] = 0;
        this.i32[base + H2] = 0;
        this.buckets[at] = bucket;
      }
      const base = HEADER_I32 + at * SLOT_I32;
      const i = this.i32;
      // MemoryWindowStore's `add`: forward, the older buckets slide out; far back (a clock that stepped), start afresh.
      const shift = bucket - this.buckets[at]!;
      if (shift > 0 || shift < -2) {
        i[base + H2] = shift === 1 ? i[base + H1]! : shift === 2 ? i[base + H0]! : 0;
        i[base + H1] = shift === 1 ? i[base + H0]! : 0;
        i[base + H0] = 0;
        this.buckets[at] = bucket;
      }
      const newest = this.buckets[at]!;
      const age = newest - bucket;
      const slot = base + (age === 0 ? H0 : age === 1 ? H1 : H2);
      i[slot] = i[slot]! + hits;
      const current = counter(i, base, newest - bucket);
      const previous = counter(i, base, newest - bucket + 1);
      return slidingWindowState({ current, previous }, { current, previous }, limit, w, now);
    } finally {
      this.unlock();
    }
  }

  /** Keys held (live at `now`): for tests and the table's gauge. */
  size(now: number): number {
    const bucket = windowBucket(Math.floor(now), this.windowMs);
    let n = 0;
    for (let s = 0; s < this.slots; s++) {
      const base = HEADER_I32 + s * SLOT_I32;
      if ((this.i32[base + HA] !== 0 || this.i32[base + HB] !== 0) && bucket - this.buckets[s]! < 3) n++;
    }
    return n;
  }

  /** Frees the lock if the thread `holder` holds it: that thread is gone (it cannot have been inside for any other reason). */
  releaseIfHeldBy(holder: number): boolean {
    return Atomics.compareExchange(this.i32, LOCK, holder + 1, 0) === holder + 1;
  }

  private lock(): void {
    const mine = this.holder + 1;
    for (let n = 0; ; n++) {
      if (Atomics.compareExchange(this.i32, LOCK, 0, mine) === 0) return;
      if (n >= SPINS && this.canWait) {
        const held = Atomics.load(this.i32, LOCK);
        if (held !== 0) Atomics.wait(this.i32, LOCK, held, 1);
      }
    }
  }

  private unlock(): void {
    Atomics.store(this.i32, LOCK, 0);
    Atomics.notify(this.i32, LOCK, 1);
  }
}
