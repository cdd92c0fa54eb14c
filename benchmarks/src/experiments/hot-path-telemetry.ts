// Experiment: what the observability of issue 9 costs on the hot path, per
// call: the latency histograms Sluice observes once per publish and once
// per fan-out (IndexedHistogram), against prom-client's own Histogram
// observed the two usual ways, and the log throttle that a rejected frame
// passes. For each: ns per call, and the garbage collections during the
// loop (scavenges of the young generation: 0 over millions of calls means
// the call allocates nothing).
//
//   node --import tsx benchmarks/src/experiments/hot-path-telemetry.ts [calls]

import { PerformanceObserver, performance } from 'node:perf_hooks';
import { Histogram, Registry } from 'prom-client';
import { IndexedHistogram, LogThrottle, suppressedCounts } from '@sluice/telemetry';

const CALLS = Number(process.argv[2] ?? 5_000_000);
const CLASSES = ['durable', 'keyed', 'ephemeral'];

let gcs = 0;
new PerformanceObserver((list) => {
  gcs += list.getEntries().length;
}).observe({ entryTypes: ['gc'] });

interface Row {
  readonly what: string;
  readonly nsPerCall: number;
  readonly gcs: number;
}

/** `fn` returns a number that the loop sums in a local (unboxed), so that only `fn` itself can allocate. */
async function measure(what: string, fn: (i: number) => number): Promise<Row> {
  let acc = 0;
  for (let i = 0; i < 100_000; i++) acc += fn(i); // warm up (JIT)
  await new Promise((r) => setTimeout(r, 50)); // let pending GC entries arrive
  const before = gcs;
  const t0 = performance.now();
  for (let i = 0; i < CALLS; i++) acc += fn(i);
  const ns = ((performance.now() - t0) * 1e6) / CALLS;
  await new Promise((r) => setTimeout(r, 50));
  if (acc === -1) console.log('');
  return { what, nsPerCall: ns, gcs: gcs - before };
}

const values = Float64Array.from({ length: 1024 }, (_, i) => (i % 97) / 10_000);
const r1 = new Registry();
const indexed = new IndexedHistogram(r1, 'a_seconds', 'h', 'class', CLASSES);
const r2 = new Registry();
const prom = new Histogram({ name: 'b_seconds', help: 'h', labelNames: ['class'], registers: [r2],
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] });
const children = CLASSES.map((c) => prom.labels(c));
const throttle = new LogThrottle(20, 'debug', suppressedCounts());

const rows: Row[] = [];
rows.push(await measure('IndexedHistogram.observe(cls, v) (Sluice: per publish, per fan-out)', (i) => {
  indexed.observe(i % 3, values[i & 1023]!);
  return 0;
}));
rows.push(await measure('prom-client Histogram.observe({ class }, v)', (i) => {
  prom.observe({ class: CLASSES[i % 3]! }, values[i & 1023]!);
  return 0;
}));
rows.push(await measure('prom-client Histogram.labels(class) child .observe(v)', (i) => {
  children[i % 3]!.observe(values[i & 1023]!);
  return 0;
}));
rows.push(await measure('performance.now() (once per publish, for the ack latency)', () => performance.now()));
rows.push(await measure('LogThrottle.take(now) (per rejected frame, debug on)', (i) => throttle.take(i >> 10)));

console.log(`${CALLS} calls each, node ${process.version}`);
console.log('| what | ns per call | GCs during the loop |');
console.log('|---|---|---|');
for (const r of rows) console.log(`| ${r.what} | ${r.nsPerCall.toFixed(1)} | ${r.gcs} |`);
