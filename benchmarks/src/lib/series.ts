// Pure helpers of S6 (slow consumers): the RSS slope, close reasons grouped
// by code, and counters read from a Prometheus text exposition.

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

/** Sums a counter or gauge of a Prometheus text exposition over every series, per value of `label` (or `''` when absent). */
export function promByLabel(text: string, name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  const re = new RegExp(`^${name}(\\{[^}]*\\})?\\s+(\\S+)`, 'gm');
  for (const m of text.matchAll(re)) {
    const v = Number(m[2]);
    if (!Number.isFinite(v)) continue;
    const lm = m[1] === undefined ? null : new RegExp(`[{,]${label}="([^"]*)"`).exec(m[1]);
    const k = lm === null ? '' : lm[1]!;
    out[k] = (out[k] ?? 0) + v;
  }
  return out;
}
