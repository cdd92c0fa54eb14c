/** Lines left out by every throttle of a thread, by level: `sluice_log_lines_suppressed_total`. */
export type SuppressedCounts = Record<'debug' | 'info' | 'warn', number>;

export function suppressedCounts(): SuppressedCounts {
  return { debug: 0, info: 0, warn: 0 };
}

/**
 * Keeps one kind of log line (a rejected frame, a refused upgrade, an
 * abusive socket closed) to at most `perSecond` lines per second per
 * thread, so that a flood of bad input costs a bounded amount of log, and
 * the lines that are written say how many of their kind were left out
 * before them. Its clock is handed in: a pure policy.
 */
export class LogThrottle {
  private windowStart = -Infinity;
  private used = 0;
  private pending = 0;

  constructor(
    private readonly perSecond: number,
    private readonly level: keyof SuppressedCounts,
    private readonly counts: SuppressedCounts,
  ) {}

  /**
   * -1: leave this line out (it is counted). Otherwise the line may be
   * written, and the number is how many of its kind were left out since the
   * last one written (log it with the line when above 0).
   */
  take(now: number): number {
    if (now - this.windowStart >= 1000) {
      this.windowStart = now;
      this.used = 0;
    }
    if (this.used >= this.perSecond) {
      this.pending++;
      this.counts[this.level]++;
      return -1;
    }
    this.used++;
    const left = this.pending;
    this.pending = 0;
    return left;
  }
}
