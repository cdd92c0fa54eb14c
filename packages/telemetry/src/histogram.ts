import type { Registry } from 'prom-client';

/** Seconds: from half a millisecond (a publish acked within one shard) to 10 s (a Redis outage's timeout). */
export const LATENCY_BUCKETS: readonly number[] = Object.freeze([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);

interface Value {
  readonly value: number;
  readonly labels: Record<string, string | number>;
  readonly metricName: string;
}

/**
 * A Prometheus histogram with one label of a fixed set, observed by the
 * label's index: no string, object or map lookup per observation (the hot
 * path calls it once per publish and once per delivered event per shard).
 * prom-client reads it at scrape time through `get()`, as it reads its own
 * metrics, so the registry, the thread aggregation and the text format are
 * prom-client's.
 */
export class IndexedHistogram {
  private readonly counts: Float64Array;
  private readonly sums: Float64Array;
  private readonly totals: Float64Array;
  private readonly width: number;
  readonly aggregator = 'sum';

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly labelName: string,
    private readonly labelValues: readonly string[],
    private readonly buckets: readonly number[] = LATENCY_BUCKETS,
  ) {
    for (let i = 1; i < buckets.length; i++) {
      if (!(buckets[i]! > buckets[i - 1]!)) throw new Error(`${name}: buckets must increase`);
    }
    this.width = buckets.length;
    this.counts = new Float64Array(labelValues.length * this.width);
    this.sums = new Float64Array(labelValues.length);
    this.totals = new Float64Array(labelValues.length);
    registry.registerMetric(this as never);
  }

  /** Counts `value` for the label at `index`; an index outside the set is ignored. */
  observe(index: number, value: number): void {
    if (index < 0 || index >= this.sums.length || !(value >= 0)) return;
    this.totals[index]!++;
    this.sums[index]! += value;
    const b = this.buckets;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    if (i < b.length) this.counts[index * this.width + i]!++;
  }

  /** The observations so far of one label: count and sum (for tests and benchmarks). */
  snapshot(index: number): { count: number; sum: number } {
    return { count: this.totals[index] ?? 0, sum: this.sums[index] ?? 0 };
  }

  get(): { name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: Value[] } {
    const values: Value[] = [];
    for (let l = 0; l < this.labelValues.length; l++) {
      const label = this.labelValues[l]!;
      let cumulative = 0;
      for (let i = 0; i < this.width; i++) {
        cumulative += this.counts[l * this.width + i]!;
        values.push({ value: cumulative, labels: { [this.labelName]: label, le: this.buckets[i]! }, metricName: `${this.name}_bucket` });
      }
      values.push({ value: this.totals[l]!, labels: { [this.labelName]: label, le: '+Inf' }, metricName: `${this.name}_bucket` });
      values.push({ value: this.sums[l]!, labels: { [this.labelName]: label }, metricName: `${this.name}_sum` });
      values.push({ value: this.totals[l]!, labels: { [this.labelName]: label }, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: 'histogram', aggregator: 'sum', values };
  }

  reset(): void {
    this.counts.fill(0);
    this.sums.fill(0);
    this.totals.fill(0);
  }
}
