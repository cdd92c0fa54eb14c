/**
 * WS_UPGRADE_RATE: the node's upgrade budget, shared by its shards through
 * the SharedState buffer (two 64-bit cells; no message per upgrade).
 *
 * The budget is a GCRA (the generic cell rate algorithm, a token bucket kept
 * as one timestamp): `tat`, the theoretical arrival time of the next
 * upgrade, advances by one interval (1/rate) per accepted upgrade; an
 * upgrade is accepted while `tat` is at most `burst` intervals ahead of now.
 * In any second the node accepts at most rate + burst upgrades.
 *
 * A refused upgrade is given a place in a schedule of returns (`next`): the
 * first refused after an idle spell is told to come back when a place frees,
 * each further one an interval later. So N refused clients are told N
 * different times spread over N / rate seconds, and those that obey come
 * back at the rate the node takes, however they arrived. The schedule looks
 * at most `horizonMs` ahead: past it (clients that do not obey, a flood), a
 * refusal is told a uniformly random time within the horizon instead, so
 * that the hint stays useful and the schedule does not run away.
 *
 * Times are process.hrtime (CLOCK_MONOTONIC, the same in every thread of
 * the process), in nanoseconds.
 */

/** Byte offset of the two cells in the SharedState buffer (its words 2 to 5, unused by its flags and counters). */
export const BUDGET_BYTE_OFFSET = 8;
const TAT = 0;
const NEXT = 1;

/** The burst allowance for a rate: a tenth of a second's upgrades, at least one. */
export const burstFor = (rate: number): number => Math.max(1, Math.ceil(rate / 10));

export class UpgradeBudget {
  private readonly cells: BigInt64Array;
  /** ns per upgrade. */
  private readonly interval: bigint;
  /** How far `tat` may be ahead of now for an upgrade to be accepted: burst intervals. */
  private readonly tolerance: bigint;
  private readonly horizon: bigint;

  constructor(buffer: SharedArrayBuffer, readonly rate: number, readonly burst = burstFor(rate), readonly horizonMs = 60_000,
    private readonly random: () => number = Math.random) {
    if (!(rate > 0)) throw new RangeError(`UpgradeBudget: rate must be positive, not ${rate}`);
    this.cells = new BigInt64Array(buffer, BUDGET_BYTE_OFFSET, 2);
    this.interval = BigInt(Math.max(1, Math.round(1e9 / rate)));
    this.tolerance = this.interval * BigInt(burst);
    this.horizon = BigInt(horizonMs) * 1_000_000n;
  }

  /**
   * Takes one upgrade from the budget: 0 when it may go on, else the ms
   * after which this client should come back (at least 1).
   */
  take(now: bigint = process.hrtime.bigint()): number {
    for (;;) {
      const tat = Atomics.load(this.cells, TAT);
      const next = (tat > now ? tat : now) + this.interval;
      if (next - now <= this.tolerance) {
        if (Atomics.compareExchange(this.cells, TAT, tat, next) === tat) return 0;
        continue; // another shard took one meanwhile: look again
      }
      // The earliest time an upgrade is accepted again.
      return this.place(now, next - this.tolerance);
    }
  }

  /** A place in the schedule of returns, from `free` on; in ms from now. */
  private place(now: bigint, free: bigint): number {
    const limit = now + this.horizon;
    for (;;) {
      const scheduled = Atomics.load(this.cells, NEXT);
      const at = scheduled > free ? scheduled : free;
      if (at >= limit) {
        // Past the horizon: a random time within it, the schedule left as it is.
        const lo = Number(free - now) / 1e6;
        const hi = Number(this.horizon) / 1e6;
        return Math.max(1, Math.ceil(lo >= hi ? hi : lo + (hi - lo) * this.random()));
      }
      if (Atomics.compareExchange(this.cells, NEXT, scheduled, at + this.interval) === scheduled) {
        return Math.max(1, Math.ceil(Number(at - now) / 1e6));
      }
    }
  }

  /** How far ahead the schedule of returns reaches, in ms (0 when no refused client is due). */
  backlogMs(now: bigint = process.hrtime.bigint()): number {
    const scheduled = Atomics.load(this.cells, NEXT);
    return scheduled > now ? Number(scheduled - now) / 1e6 : 0;
  }
}
