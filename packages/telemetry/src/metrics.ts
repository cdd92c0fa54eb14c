import { AggregatorRegistry, Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { readdir } from 'node:fs/promises';

export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/**
 * A counter whose value lives in a plain number the hot path bumps (no
 * prom-client call per frame); prom-client reads it at scrape time.
 */
export function counterFrom<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelName: string | undefined,
  read: () => Readonly<Record<L, number>> | number,
): void {
  const reported = new Map<string, number>();
  new Counter({
    name,
    help,
    labelNames: labelName === undefined ? [] : [labelName],
    registers: [registry],
    collect() {
      const v = read();
      if (typeof v === 'number') {
        const d = v - (reported.get('') ?? 0);
        if (d > 0) this.inc(d);
        else if (!reported.has('')) this.inc(0);
        reported.set('', v);
        return;
      }
      for (const [label, value] of Object.entries(v) as [string, number][]) {
        const d = value - (reported.get(label) ?? 0);
        this.inc({ [labelName!]: label }, d > 0 ? d : 0);
        reported.set(label, value);
      }
    },
  });
}

/** A gauge read at scrape time; `labels` (fixed per registry, e.g. the thread) tell the threads' series apart. */
export function gaugeFrom(registry: Registry, name: string, help: string, read: () => number, aggregator: 'sum' | 'max' = 'sum',
  labels?: Readonly<Record<string, string>>): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    aggregator,
    labelNames: labels === undefined ? [] : Object.keys(labels),
    collect() {
      if (labels === undefined) this.set(read());
      else this.set(labels, read());
    },
  });
}

/** prom-client's event-loop lag of the main thread only; `sluice_eventloop_lag_seconds{thread}` covers every thread. */
const EVENT_LOOP_DEFAULTS = ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'].map((s) => `nodejs_eventloop_lag_${s}_seconds`)
  .concat('nodejs_eventloop_lag_seconds');
/** How often the open-fd count is read again. */
const OPEN_FDS_REFRESH_MS = 5000;

/**
 * Node's default process metrics, with two changes made for a process that
 * holds every socket of the node: `process_open_fds` is read every 5 s off
 * the event loop (prom-client lists /proc/self/fd synchronously at every
 * scrape: 4 ms at 10k sockets, 12 ms at 19k, two thirds of a scrape, S10),
 * and prom-client's event-loop lag, which reports odd values to scrapes that
 * come close together, is left to the per-thread gauges.
 */
export function registerProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of EVENT_LOOP_DEFAULTS) registry.removeSingleMetric(name);
  if (registry.getSingleMetric('process_open_fds') === undefined) return;
  registry.removeSingleMetric('process_open_fds');
  let open = 0;
  let reading = false;
  const refresh = (): void => {
    if (reading) return;
    reading = true;
    readdir('/proc/self/fd').then((fds) => (open = fds.length), () => {}).finally(() => (reading = false));
  };
  refresh();
  // For the life of the process (unref'd: it never keeps it alive).
  setInterval(refresh, OPEN_FDS_REFRESH_MS).unref();
  gaugeFrom(registry, 'process_open_fds', `Number of open file descriptors (read every ${OPEN_FDS_REFRESH_MS / 1000} s).`, () => open);
}

/**
 * Sums metrics JSON with prom-client's own aggregation (each metric's
 * aggregator: counters and histograms summed by name and labels), as JSON
 * again: to fold several registries' last values into one.
 */
export function sumMetrics(parts: MetricsJson[]): MetricsJson {
  return AggregatorRegistry.aggregate(parts).getMetricsAsArray().map((m) => (m as unknown as { get(): MetricsJson[number] }).get());
}

/** Merges the JSON of every thread's registry into one Prometheus text. */
export async function aggregateMetrics(perThread: MetricsJson[]): Promise<{ text: string; contentType: string }> {
  const merged = AggregatorRegistry.aggregate(perThread);
  return { text: await merged.metrics(), contentType: merged.contentType };
}

export { Registry };
