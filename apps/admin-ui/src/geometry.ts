/** Where a chart's points go in its SVG box (pure: test/chart.test.ts). */

/** The charts' viewBox (the SVG stretches it to its box). */
export const CHART_W = 320;
export const CHART_H = 90;

/** Where each point goes in a w×h box: x by time (t0 left, t1 right), y by value (0 at the bottom, `max` at the top). */
export function coords(points: readonly (readonly [number, number])[], t0: number, t1: number, max: number, w = CHART_W, h = CHART_H): [number, number][] {
  const span = t1 - t0;
  const top = max > 0 ? max : 1;
  return points.map(([t, v]) => [
    span > 0 ? ((t - t0) / span) * w : w,
    h - 1 - (Math.min(Math.max(0, v), top) / top) * (h - 2),
  ]);
}

/** `coords` as an SVG polyline's `points`. */
export function pathOf(points: readonly (readonly [number, number])[], t0: number, t1: number, max: number, w = CHART_W, h = CHART_H): string {
  return coords(points, t0, t1, max, w, h).map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
}
