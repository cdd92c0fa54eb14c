/**
 * Paces outbound frames under the server's per-socket window (`limits` in
 * `welcome`: `maxMessages` frames per `rateWindowMs`, a fixed window that
 * opens at the first frame after the previous one ended, every frame counted).
 *
 * Guarantee: every half-open interval of `rateWindowMs + margin` of send
 * times holds at most `maxMessages` frames. A server window of `rateWindowMs`
 * then sees at most `maxMessages` as long as the delivery delay of frames
 * varies by less than the margin, whatever the clocks on both sides say.
 *
 * A sliding log of the last `budget` send times: a frame may go once the one
 * `budget` sends before it is a full `span` old. Large limits are split into
 * `k` sub-spans of `budget = floor(max / k)` frames each, so the log holds at
 * most 1024 entries: `k` consecutive sub-spans cover one window, so the window
 * holds at most `k * budget <= max`.
 */
const MAX_LOG = 1024;

/** Slack for delivery jitter and millisecond rounding on both sides. */
export function marginFor(windowMs: number): number {
  return Math.max(25, Math.ceil(windowMs * 0.1));
}

export class Pacer {
  private readonly log: number[];
  private readonly budget: number;
  private readonly span: number;
  private next = 0;
  private count = 0;
  private pausedUntil = 0;

  constructor(maxMessages: number, windowMs: number) {
    const max = Math.max(1, Math.floor(maxMessages));
    const k = Math.ceil(max / MAX_LOG);
    this.budget = Math.floor(max / k);
    this.span = (Math.max(0, windowMs) + marginFor(windowMs)) / k;
    this.log = new Array<number>(this.budget).fill(0);
  }

  /** Milliseconds until the next frame may be sent at `now` (0: now). */
  wait(now: number): number {
    let w = this.pausedUntil - now;
    if (this.count === this.budget) w = Math.max(w, this.log[this.next]! + this.span - now);
    return w > 0 ? Math.ceil(w) : 0;
  }

  /** Records a frame sent at `now`. */
  sent(now: number): void {
    this.log[this.next] = now;
    this.next = (this.next + 1) % this.budget;
    if (this.count < this.budget) this.count++;
  }

  /** Holds every frame until `until` (the server answered `rate_limited`). */
  pauseUntil(until: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, until);
  }
}
