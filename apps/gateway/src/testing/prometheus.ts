/**
 * One reader of the Prometheus text exposition (version 0.0.4), for tests,
 * benchmarks and the chaos harness: sample lines into name, labels and
 * value, `# TYPE` lines into a family's type.
 */

export interface MetricSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g;

function parseValue(v: string): number {
  return v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v);
}

/** The labels of a `{k="v",...}` block (braces optional). */
export function parseLabels(block: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const l of block.matchAll(LABEL)) labels[l[1]!] = l[2]!;
  return labels;
}

/** Every sample line of an exposition, in order (comments and blank lines left out). */
export function parseMetrics(text: string): MetricSample[] {
  const out: MetricSample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (m !== null) out.push({ name: m[1]!, labels: parseLabels(m[2] ?? ''), value: parseValue(m[3]!) });
  }
  return out;
}

/** Family name -> type, from the `# TYPE` lines. */
export function metricTypes(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)/gm)) out.set(m[1]!, m[2]!);
  return out;
}

function samplesOf(from: string | readonly MetricSample[]): readonly MetricSample[] {
  return typeof from === 'string' ? parseMetrics(from) : from;
}

/** The sum of every finite sample of `name` whose labels include `where`. */
export function metricSum(from: string | readonly MetricSample[], name: string, where: Readonly<Record<string, string>> = {}): number {
  let sum = 0;
  for (const s of samplesOf(from)) {
    if (s.name === name && Number.isFinite(s.value) && Object.entries(where).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  }
  return sum;
}

/** Sums the finite samples of `name` per value of `label` (`''` for samples without it). */
export function metricByLabel(from: string | readonly MetricSample[], name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samplesOf(from)) {
    if (s.name !== name || !Number.isFinite(s.value)) continue;
    const k = s.labels[label] ?? '';
    out[k] = (out[k] ?? 0) + s.value;
  }
  return out;
}

/** The value of the one series of `name` with exactly the labels of `labels` (`{k="v",...}`, or '' for none); throws when there is none. */
export function seriesValue(from: string | readonly MetricSample[], name: string, labels = ''): number {
  const want = parseLabels(labels);
  const keys = Object.keys(want);
  const s = samplesOf(from).find((x) => x.name === name && Object.keys(x.labels).length === keys.length && keys.every((k) => x.labels[k] === want[k]));
  if (s === undefined) throw new Error(`metric ${name}${labels} not found`);
  return s.value;
}

/** Scrapes a gateway's /metrics and reads one series (see seriesValue). */
export async function metricValue(gw: { metrics(): Promise<string> }, name: string, labels = ''): Promise<number> {
  return seriesValue(await gw.metrics(), name, labels);
}
