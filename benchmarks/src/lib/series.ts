// Time series and samples, for every scenario and the chaos harness: order
// statistics, slopes, counts per time bucket, rates from polled counters, the
// share of buckets near a target, and a chi-square test against the uniform
// distribution. Pure; unit-tested in test/series.test.ts.

export function median(xs: readonly number[]): number {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const m = v.length >> 1;
  return v.length % 2 === 1 ? v[m]! : (v[m - 1]! + v[m]!) / 2;
}

/** Nearest-rank percentile (q in [0, 1]) of unsorted values; NaN when empty. */
export function percentile(values: readonly number[], q: number): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const rank = Math.ceil(q * v.length);
  return v[Math.min(v.length - 1, Math.max(0, rank - 1))]!;
}

/** Largest value; NaN when empty. */
export function maxOf(values: readonly number[]): number {
  return values.length === 0 ? NaN : Math.max(...values);
}

/** Least-squares slope of y over x; NaN with fewer than two distinct x. */
export function linearSlope(xs: readonly number[], ys: readonly number[]): number {
  const n = Math.min(xs.length, ys.length);
  if (n < 2) return NaN;
  let sx = 0;
  let sy = 0;
  for (let i = 0; i < n; i++) { sx += xs[i]!; sy += ys[i]!; }
  const mx = sx / n;
  const my = sy / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    const dx = xs[i]! - mx;
    num += dx * (ys[i]! - my);
    den += dx * dx;
  }
  return den === 0 ? NaN : num / den;
}

/** Slope over the points whose x is in the second half of [x0, x1] (the run's second half). */
export function secondHalfSlope(points: ReadonlyArray<{ x: number; y: number }>): number {
  if (points.length === 0) return NaN;
  const x0 = points[0]!.x;
  const x1 = points[points.length - 1]!.x;
  const mid = (x0 + x1) / 2;
  const half = points.filter((p) => p.x >= mid);
  return linearSlope(half.map((p) => p.x), half.map((p) => p.y));
}

/**
 * Groups the close causes a client saw by WebSocket close code:
 * `ws close 1013 buffer_limit` -> `1013`; anything else (no close frame:
 * `closed by peer`, `ECONNRESET`) is kept as is.
 */
export function closesByCode(reasons: Readonly<Record<string, number>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [why, n] of Object.entries(reasons)) {
    const m = /^ws close (\d+)/.exec(why);
    const k = m === null ? why : m[1]!;
    out[k] = (out[k] ?? 0) + n;
  }
  return out;
}

/**
 * Counts the times (ms) falling in consecutive buckets of `widthMs` starting at
 * `startMs`; only whole buckets that end at or before `endMs` are returned.
 * Times before `startMs` or in the last partial bucket are not counted.
 */
export function bucketCounts(timesMs: readonly number[], startMs: number, endMs: number, widthMs: number): number[] {
  if (!(widthMs > 0) || !(endMs > startMs)) return [];
  const n = Math.floor((endMs - startMs) / widthMs + 1e-9);
  const out = new Array<number>(n).fill(0);
  for (const t of timesMs) {
    if (t < startMs) continue;
    const i = Math.floor((t - startMs) / widthMs);
    if (i < n) out[i]!++;
  }
  return out;
}

/** Share (0..1) of `counts` within +-`tolerance` (0.2 = 20%) of `target`; NaN for no buckets. */
export function shareWithin(counts: readonly number[], target: number, tolerance: number): number {
  if (counts.length === 0) return NaN;
  const lo = target * (1 - tolerance);
  const hi = target * (1 + tolerance);
  return counts.filter((c) => c >= lo && c <= hi).length / counts.length;
}

/** `buckets` equal-width bins over [lo, hi] (hi falls in the last bin); values outside are counted in `below` / `above`. */
export function histogram(values: readonly number[], lo: number, hi: number, buckets: number): { counts: number[]; below: number; above: number } {
  const counts = new Array<number>(buckets).fill(0);
  let below = 0;
  let above = 0;
  const w = (hi - lo) / buckets;
  for (const v of values) {
    if (v < lo) { below++; continue; }
    if (v > hi) { above++; continue; }
    counts[Math.min(buckets - 1, Math.floor((v - lo) / w))]!++;
  }
  return { counts, below, above };
}

/** Pearson's chi-square statistic of `counts` against equal expected counts; degrees of freedom = bins - 1. */
export function chiSquareUniform(counts: readonly number[]): { stat: number; df: number; p: number } {
  const n = counts.reduce((a, b) => a + b, 0);
  const k = counts.length;
  if (k < 2 || n === 0) return { stat: NaN, df: k - 1, p: NaN };
  const e = n / k;
  const stat = counts.reduce((a, c) => a + (c - e) ** 2 / e, 0);
  return { stat, df: k - 1, p: chiSquareSurvival(stat, k - 1) };
}

/** P(X >= x) for X ~ chi-square(df): the regularized upper incomplete gamma Q(df/2, x/2). */
export function chiSquareSurvival(x: number, df: number): number {
  if (!(x >= 0) || !(df > 0)) return NaN;
  return 1 - lowerGammaRegularized(df / 2, x / 2);
}

function logGamma(z: number): number {
  // Lanczos approximation (g = 7, n = 9).
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (z < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * z)) - logGamma(1 - z);
  z -= 1;
  let a = c[0]!;
  const t = z + 7.5;
  for (let i = 1; i < 9; i++) a += c[i]! / (z + i);
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(a);
}

/** P(a, x): series for x < a + 1, continued fraction otherwise (Numerical Recipes gser/gcf). */
function lowerGammaRegularized(a: number, x: number): number {
  if (x <= 0) return 0;
  const gln = logGamma(a);
  if (x < a + 1) {
    let ap = a;
    let sum = 1 / a;
    let del = sum;
    for (let i = 0; i < 1000; i++) {
      ap++;
      del *= x / ap;
      sum += del;
      if (Math.abs(del) < Math.abs(sum) * 1e-15) break;
    }
    return sum * Math.exp(-x + a * Math.log(x) - gln);
  }
  let b = x + 1 - a;
  let c = 1 / 1e-300;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (Math.abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return 1 - Math.exp(-x + a * Math.log(x) - gln) * h;
}

/** Most times (arrivals, closes) in any window of `windowMs` (sliding, from each arrival), `sorted` ascending. */
export function peakInWindow(sorted: readonly number[], windowMs: number): number {
  let best = 0;
  let j = 0;
  for (let i = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= windowMs) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

/** Time (in the times' unit) at which `share` of `total` had arrived; NaN when fewer did. `sorted` ascending. */
export function timeToShare(sorted: readonly number[], total: number, share: number): number {
  const k = Math.ceil(share * total - 1e-9);
  if (k <= 0) return 0;
  return k <= sorted.length ? sorted[k - 1]! : NaN;
}

// ---- rates from polled counters ----------------------------------------------------

/** One poll of a node: ms on the run's clock, and the raw counter as the node reported it. */
export interface CounterPoll {
  readonly ms: number;
  readonly value: number;
  /** Which start of the process answered (a new one counts from 0 again). */
  readonly gen?: number;
}

/**
 * Makes a counter series monotonic across restarts of the process that
 * exports it: when the poll comes from another start (`gen`), or its value is
 * below the one before, the process counted from 0 again, so that value is
 * all growth. The first poll is the baseline (0).
 */
export function accumulate(polls: readonly CounterPoll[]): CounterPoll[] {
  const out: CounterPoll[] = [];
  let total = 0;
  let prev: CounterPoll | undefined;
  for (const p of polls) {
    if (prev !== undefined) total += p.gen === prev.gen && p.value >= prev.value ? p.value - prev.value : p.value;
    prev = p;
    out.push({ ms: p.ms, value: total });
  }
  return out;
}

/**
 * The sum of several monotonic series polled at their own times: at each
 * poll of any of them, the sum of the latest value of each (0 before its
 * first poll).
 */
export function sumSeries(series: readonly (readonly CounterPoll[])[]): CounterPoll[] {
  const all = series.flatMap((s, i) => s.map((p) => ({ i, p }))).sort((x, y) => x.p.ms - y.p.ms);
  const latest = new Array<number>(series.length).fill(0);
  return all.map(({ i, p }) => {
    latest[i] = p.value;
    return { ms: p.ms, value: latest.reduce((a, b) => a + b, 0) };
  });
}

/**
 * Growth of a (monotonic) counter per bucket of `widthMs` from `fromMs` to
 * `toMs`: what a poll saw since the poll before goes to the bucket the poll
 * falls in. Polls outside the range are left out (a growth seen by the first
 * poll inside it is counted).
 */
export function bucketGrowth(polls: readonly CounterPoll[], fromMs: number, toMs: number, widthMs: number): number[] {
  if (!(widthMs > 0) || !(toMs > fromMs)) return [];
  const out = new Array<number>(Math.ceil((toMs - fromMs) / widthMs)).fill(0);
  for (let i = 1; i < polls.length; i++) {
    const p = polls[i]!;
    if (p.ms < fromMs || p.ms >= toMs) continue;
    out[Math.floor((p.ms - fromMs) / widthMs)]! += Math.max(0, p.value - polls[i - 1]!.value);
  }
  return out;
}

/**
 * The highest growth per second of a monotonic counter over any stretch of at
 * least `windowMs` between two polls in [fromMs, toMs] (for each later poll,
 * the closest earlier poll at least `windowMs` before it). With polls every
 * 100 ms and a window of 1000 ms, this is the peak arrivals in one second.
 */
export function peakRate(polls: readonly CounterPoll[], windowMs: number, fromMs = -Infinity, toMs = Infinity): number {
  const ps = polls.filter((p) => p.ms >= fromMs && p.ms <= toMs);
  let best = 0;
  let i = 0;
  for (let j = 1; j < ps.length; j++) {
    while (i + 1 < j && ps[j]!.ms - ps[i + 1]!.ms >= windowMs) i++;
    const dt = ps[j]!.ms - ps[i]!.ms;
    if (dt >= windowMs) best = Math.max(best, ((ps[j]!.value - ps[i]!.value) / dt) * 1000);
  }
  return best;
}
