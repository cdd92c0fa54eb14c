/**
 * A small line chart in plain SVG: one line per node, the time axis shared
 * by all lines, 0 at the bottom, the largest value at the top. No styles in
 * attributes (the CSP allows no inline style): colours come from classes.
 */
import { formatDuration } from './format.ts';
import { CHART_H, CHART_W, coords, pathOf } from './geometry.ts';

export interface Line {
  readonly id: string;
  /** Index into the palette (the node's place in the table). */
  readonly color: number;
  readonly points: readonly (readonly [t: number, v: number])[];
  /** Drawn dashed and faint (an unresponsive node). */
  readonly faint: boolean;
}

const W = CHART_W;
const H = CHART_H;
export const PALETTE_SIZE = 8;

export function Chart(props: { title: string; lines: readonly Line[]; format: (v: number) => string; testid?: string }) {
  const { title, lines, format } = props;
  let t0 = Infinity;
  let t1 = -Infinity;
  let max = 0;
  for (const l of lines) {
    for (const [t, v] of l.points) {
      if (t < t0) t0 = t;
      if (t > t1) t1 = t;
      if (Number.isFinite(v) && v > max) max = v;
    }
  }
  const empty = !Number.isFinite(t0);
  return (
    <figure class="chart" data-testid={props.testid}>
      <figcaption>
        <span class="chart-title">{title}</span>
        <span class="chart-max" title="the largest value shown">max {format(max)}</span>
      </figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} preserveAspectRatio="none" role="img" aria-label={title}>
        <line class="grid" x1="0" y1={H / 2} x2={W} y2={H / 2} />
        <line class="axis" x1="0" y1={H - 0.5} x2={W} y2={H - 0.5} />
        {!empty && lines.map((l) => (l.points.length === 0 ? null : l.points.length === 1
          ? <Dot key={l.id} line={l} at={coords(l.points, t0, t1, max)[0] ?? [W, H]} />
          : (
            <polyline key={l.id} class={`ln c${l.color % PALETTE_SIZE}${l.faint ? ' faint' : ''}`} points={pathOf(l.points, t0, t1, max)}>
              <title>{l.id}</title>
            </polyline>
          )))}
      </svg>
      <div class="chart-foot">
        <span>{empty ? 'no samples yet' : `last ${formatDuration(t1 - t0 >= 60_000 ? Math.round((t1 - t0) / 60_000) * 60_000 : t1 - t0)}`}</span>
        <span class="legend">
          {lines.map((l) => {
            const last = l.points[l.points.length - 1];
            return (
              <span key={l.id} class={`key c${l.color % PALETTE_SIZE}${l.faint ? ' faint' : ''}`}>
                <i class="swatch" />{l.id} {last === undefined ? '–' : format(last[1])}
              </span>
            );
          })}
        </span>
      </div>
    </figure>
  );
}

function Dot(props: { line: Line; at: [number, number] }) {
  const { line, at } = props;
  return (
    <circle class={`pt c${line.color % PALETTE_SIZE}${line.faint ? ' faint' : ''}`} cx={Math.min(at[0], W - 2)} cy={at[1]} r="2">
      <title>{line.id}</title>
    </circle>
  );
}
