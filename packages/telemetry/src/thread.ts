import { monitorEventLoopDelay } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import type { Registry } from 'prom-client';
import { gaugeFrom } from './metrics.ts';

/** The event-loop delay sampler's timer period: what it records above this is lag. */
const RESOLUTION_MS = 10;
/** The window the lag gauges describe: the last complete one. */
export const LAG_WINDOW_MS = 5000;

/**
 * Per-thread gauges, labelled `thread` (`coordinator`, `shard0`, ...: as many
 * values as WS_WORKERS + 1, none from a client): event-loop lag (p99 and max
 * over the last complete LAG_WINDOW_MS) and the thread's V8 heap. Each worker
 * thread has its own isolate and event loop, so each reports its own;
 * Node's default process metrics (in the coordinator) see only the main
 * thread's. From the same sampler, unlabelled and aggregated with `max`:
 * `sluice_eventloop_stall_max_seconds`, the longest lag since start.
 */
export function registerThreadMetrics(registry: Registry, thread: string): { stop(): void } {
  const h = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  h.enable();
  const lagOf = (ns: number): number => (h.count > 0 ? Math.max(0, ns / 1e9 - RESOLUTION_MS / 1e3) : 0);
  // The last complete window; until the first one completes, the one in progress.
  let last: { p99: number; max: number } | undefined;
  let stall = 0;
  const timer = setInterval(() => {
    last = { p99: lagOf(h.percentile(99)), max: lagOf(h.max) };
    stall = Math.max(stall, last.max);
    h.reset();
  }, LAG_WINDOW_MS);
  timer.unref();
  labelled(registry, 'sluice_eventloop_lag_seconds',
    `Event-loop lag of the thread, p99 over the last ${LAG_WINDOW_MS / 1000} s (the delay of a ${RESOLUTION_MS} ms timer beyond its period).`,
    thread, () => last?.p99 ?? lagOf(h.percentile(99)));
  labelled(registry, 'sluice_eventloop_lag_max_seconds', `Event-loop lag of the thread, maximum over the last ${LAG_WINDOW_MS / 1000} s.`,
    thread, () => last?.max ?? lagOf(h.max));
  gaugeFrom(registry, 'sluice_eventloop_stall_max_seconds',
    `Longest event-loop stall seen by any thread of the node since start (max over threads): the delay of a ${RESOLUTION_MS} ms timer beyond its period.`,
    () => Math.max(stall, lagOf(h.max)), 'max');
  labelled(registry, 'sluice_heap_used_bytes', 'V8 heap in use by the thread (its own isolate).', thread, () => getHeapStatistics().used_heap_size);
  labelled(registry, 'sluice_heap_total_bytes', 'V8 heap reserved by the thread.', thread, () => getHeapStatistics().total_heap_size);
  return {
    stop() {
      clearInterval(timer);
      h.disable();
    },
  };
}

function labelled(registry: Registry, name: string, help: string, thread: string, read: () => number): void {
  gaugeFrom(registry, name, help, read, 'sum', { thread });
}
