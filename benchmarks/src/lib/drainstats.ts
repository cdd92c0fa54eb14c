// Pure helpers of S7 (drain pacing): closes counted per time bucket, the
// share of buckets near a target rate, a histogram over a range, and a
// chi-square test of that histogram against the uniform distribution.

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
