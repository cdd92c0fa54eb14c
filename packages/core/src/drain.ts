/**
 * Drain pacing: the node closes `rate` sockets per second in total, shared
 * among shards in proportion to what each still holds. Pure: the caller
 * owns the clock and the tick.
 */
export interface DrainPace {
  /** Fractional sockets owed from earlier ticks. */
  carry: number;
  /** When the last budget was computed; -1 before the first. */
  lastAt: number;
}

/** How many sockets the node may close now, given `rate` per second since the last call. */
export function drainBudget(pace: DrainPace, now: number, rate: number): number {
  if (pace.lastAt < 0) {
    pace.lastAt = now;
    // The first tick closes one socket at once, so a drain visibly starts.
    pace.carry = 1;
  }
  const owed = pace.carry + (Math.max(0, now - pace.lastAt) * rate) / 1000;
  pace.lastAt = now;
  const whole = Math.floor(owed);
  pace.carry = owed - whole;
  return whole;
}

/**
 * Splits `budget` among shards in proportion to `held` (sockets per shard),
 * never giving a shard more than it holds; what rounding leaves goes to the
 * shards with the most left. The sum is min(budget, total held).
 */
export function shareBudget(budget: number, held: readonly number[]): number[] {
  const total = held.reduce((a, b) => a + Math.max(0, b), 0);
  const give = Math.min(budget, total);
  const out = held.map(() => 0);
  if (give <= 0) return out;
  let given = 0;
  for (let i = 0; i < held.length; i++) {
    out[i] = Math.min(Math.max(0, held[i]!), Math.floor((give * Math.max(0, held[i]!)) / total));
    given += out[i]!;
  }
  while (given < give) {
    let best = -1;
    for (let i = 0; i < held.length; i++) {
      const left = held[i]! - out[i]!;
      if (left > 0 && (best < 0 || left > held[best]! - out[best]!)) best = i;
    }
    if (best < 0) break;
    out[best]!++;
    given++;
  }
  return out;
}
