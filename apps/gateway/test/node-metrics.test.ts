// The node's /metrics over its shards (NodeMetrics), with real prom-client
// registries standing for the shards and their answers held back by hand:
// a busy shard is stood in for by its previous answer after
// WS_METRICS_WAIT_MS, its late answer is kept for the next scrape, and a
// shard that never answered is waited for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Counter } from 'prom-client';
import { Registry, type MetricsJson } from '@sluice/telemetry';
import { parseMetrics } from './harness.ts';
import { NodeMetrics, type ShardSource } from '../src/node-metrics.ts';

/** A shard's registry with one counter, and a scrape that answers now or when released. */
function shard(id: number) {
  const registry = new Registry();
  const frames = new Counter({ name: 'sluice_frames_in_total', help: 'frames', registers: [registry] });
  let held: { release(): void } | undefined;
  let asks = 0;
  const source: ShardSource = {
    shard: id,
    current: () => true,
    scrape: async (): Promise<MetricsJson | undefined> => {
      asks++;
      if (held !== undefined) await new Promise<void>((resolve) => (held = { release: resolve }));
      // A copy, as a shard's answer arrives through postMessage (prom-client's JSON holds its live values).
      return structuredClone(await registry.getMetricsAsJSON());
    },
  };
  return {
    frames, source,
    asks: () => asks,
    /** From now on the shard answers only when released. */
    busy(): void { held = { release: () => undefined }; },
    /** Answers the ask it holds, and the next ones at once. */
    release(): void { const h = held; held = undefined; h?.release(); },
  };
}

const framesIn = (text: string): number =>
  parseMetrics(text).filter((m) => m.name === 'sluice_frames_in_total').reduce((a, m) => a + m.value, 0);

/** Whether `p` settles before `ms` of timers have run. */
async function settlesWithin<T>(p: Promise<T>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const r = await Promise.race([p.then(() => true), late]);
  clearTimeout(timer);
  return r;
}

test('a busy shard is stood in for by its previous answer after the wait; its late answer counts at the next scrape', async () => {
  const a = shard(0);
  const b = shard(1);
  const node = new NodeMetrics(new Registry(), 20);
  a.frames.inc(1);
  b.frames.inc(10);
  assert.equal(framesIn((await node.render([a.source, b.source])).text), 11);

  b.frames.inc(5);
  b.busy();
  // The scrape answers without b's fresh figures: b's previous 10 stand in.
  const stale = node.render([a.source, b.source]);
  assert.equal(await settlesWithin(stale, 2000), true, 'the scrape waited for a shard that had answered before');
  assert.equal(framesIn((await stale).text), 11);

  // A scrape while b's ask is still out does not ask b again.
  const asksBefore = b.asks();
  assert.equal(framesIn((await node.render([a.source, b.source])).text), 11);
  assert.equal(b.asks(), asksBefore);

  // b answers late; the next scrape has its figures, even if b is busy again.
  b.release();
  await new Promise((resolve) => setImmediate(resolve));
  b.busy();
  assert.equal(framesIn((await node.render([a.source, b.source])).text), 16);
  b.release();
});

test('a shard that never answered a scrape is waited for, past the wait', async () => {
  const a = shard(0);
  const b = shard(1);
  const node = new NodeMetrics(new Registry(), 5);
  a.frames.inc(2);
  b.frames.inc(3);
  b.busy();
  const first = node.render([a.source, b.source]);
  assert.equal(await settlesWithin(first, 100), false, 'the first scrape answered without the shard that had never answered');
  b.release();
  assert.equal(framesIn((await first).text), 5);
});

test('a shard that is retired while its answer is out does not come back from that answer', async () => {
  const a = shard(0);
  const b = shard(1);
  const node = new NodeMetrics(new Registry(), 5);
  b.frames.inc(7);
  await node.render([a.source, b.source]);
  b.busy();
  let alive = true;
  const pending = node.render([a.source, { ...b.source, current: () => alive }]);
  await pending;
  alive = false;
  node.retire(1);
  b.release();
  await new Promise((resolve) => setImmediate(resolve));
  // Only a is running now; b's counters are kept as retired (7), not replaced by its late answer.
  b.frames.inc(100);
  assert.equal(framesIn((await node.render([a.source])).text), 7);
});
