/**
 * WS_UPGRADE_RATE's budget on its own: the GCRA's bound (rate + burst in any
 * second), the schedule of returns (the refused are told distinct times,
 * one interval apart, so that obedient clients come back at the rate), the
 * horizon past which hints are random within it, and the one budget the
 * shards share: real worker threads taking from one SharedArrayBuffer.
 * Then at a real gateway: the 503 and its hint, readiness untouched, the
 * refusals counted apart, and clients that obey coming in at the rate.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import WebSocket from 'ws';
import { SharedState } from '../src/shared-state.ts';
import { burstFor, UpgradeBudget } from '../src/upgrade-budget.ts';
import { type Gateway, metricValue, startGateway } from './harness.ts';

const MS = 1_000_000n;
const fresh = (): SharedArrayBuffer => new SharedState().buffer;

describe('upgrade budget', () => {
  test('a burst of a tenth of the rate at once, then one per interval', () => {
    const b = new UpgradeBudget(fresh(), 100);
    assert.equal(b.burst, burstFor(100));
    assert.equal(b.burst, 10);
    const t0 = 1_000_000n * MS; // any monotonic origin
    let accepted = 0;
    for (let i = 0; i < 50; i++) if (b.take(t0) === 0) accepted++;
    assert.equal(accepted, 10, 'the burst, no more');
    // 10 ms is one interval at 100/s: one more each time.
    assert.equal(b.take(t0 + 9n * MS) === 0, false, 'not before the interval');
    assert.equal(b.take(t0 + 10n * MS), 0);
    assert.notEqual(b.take(t0 + 10n * MS), 0);
  });

  test('in any second at most rate + burst are accepted, however they arrive', () => {
    const rate = 200;
    const b = new UpgradeBudget(fresh(), rate);
    // Arrivals at 5x the rate for 5 s, at random instants.
    const t0 = 5_000n * MS;
    const times = Array.from({ length: 5 * rate * 5 }, () => t0 + BigInt(Math.floor(Math.random() * 5000 * 1e6))).sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
    const acceptedAt: bigint[] = times.filter((t) => b.take(t) === 0);
    assert.ok(acceptedAt.length >= rate * 5 && acceptedAt.length <= rate * 5 + b.burst, `${acceptedAt.length} accepted in 5 s`);
    // Every window of one second, starting at each accepted upgrade.
    let j = 0;
    for (let i = 0; i < acceptedAt.length; i++) {
      while (j < acceptedAt.length && acceptedAt[j]! - acceptedAt[i]! < 1000n * MS) j++;
      assert.ok(j - i <= rate + b.burst, `${j - i} accepted in the second from ${i}`);
    }
  });

  test('the refused are told distinct times, one interval apart, and coming back then they are accepted', () => {
    const rate = 100;
    const b = new UpgradeBudget(fresh(), rate);
    const t0 = 10_000n * MS;
    const waits: number[] = [];
    for (let i = 0; i < 300; i++) {
      const w = b.take(t0);
      if (w !== 0) waits.push(w);
    }
    assert.equal(waits.length, 300 - b.burst);
    // Sorted as told, 10 ms apart: 290 clients over 2.9 s at 100/s.
    for (let i = 1; i < waits.length; i++) assert.equal(waits[i]! - waits[i - 1]!, 10, `place ${i}`);
    assert.equal(waits[0], 10, 'the first when the burst has refilled one place');
    assert.equal(waits.at(-1), 2900);
    // Each comes back when told (in order): each is accepted.
    const back = waits.map((w) => b.take(t0 + BigInt(w) * MS));
    assert.deepEqual(back.filter((w) => w !== 0), [], 'every obedient return accepted');
    assert.equal(b.backlogMs(t0 + 2900n * MS), 10, 'the next place is one interval on');
    assert.equal(b.backlogMs(t0 + 3000n * MS), 0);
  });

  test('past the horizon the hint is random within it, and the schedule stays where it was', () => {
    const seq = [0, 0.5, 0.999];
    let k = 0;
    const b = new UpgradeBudget(fresh(), 10, 1, 1000, () => seq[k++ % seq.length]!);
    const t0 = 100_000n * MS;
    assert.equal(b.take(t0), 0);
    // 100 ms apart: places at 100 .. 900 ms, then the horizon (1000 ms).
    const placed = Array.from({ length: 9 }, () => b.take(t0));
    assert.deepEqual(placed, [100, 200, 300, 400, 500, 600, 700, 800, 900]);
    const beyond = [b.take(t0), b.take(t0), b.take(t0)];
    assert.deepEqual(beyond, [1000, 1000, 1000].map((hi, i) => Math.ceil(100 + (hi - 100) * seq[i]!)));
    assert.equal(b.backlogMs(t0), 1000, 'unchanged by the refusals past the horizon');
  });

  test('refuses a rate that is not positive', () => {
    assert.throws(() => new UpgradeBudget(fresh(), 0), /rate must be positive/);
  });

  test('shards share one budget: 4 threads taking at once accept at most burst + what the rate refills', async () => {
    const buffer = fresh();
    const rate = 100_000; // a token every 10 us: the threads contend for each one
    // Each worker loads the budget with tsx's ESM API (as the shards do: shard-entry.mjs).
    const src = `
      const { workerData, parentPort } = require('node:worker_threads');
      const { buffer, rate, tries, entry, url } = workerData;
      import(entry).then(({ tsImport }) => tsImport(url, entry)).then(({ UpgradeBudget }) => {
        const b = new UpgradeBudget(buffer, rate);
        const i32 = new Int32Array(buffer);
        parentPort.postMessage('ready');
        // All start together: wait on the go word (word 7: unused by SharedState).
        Atomics.wait(i32, 7, 0);
        const t0 = process.hrtime.bigint();
        let accepted = 0;
        for (let i = 0; i < tries; i++) if (b.take() === 0) accepted++;
        // The process's monotonic clock: the same in every thread.
        parentPort.postMessage({ accepted, t0: String(t0), t1: String(process.hrtime.bigint()) });
      });`;
    const url = new URL('../src/upgrade-budget.ts', import.meta.url).href;
    const entry = import.meta.resolve('tsx/esm/api');
    const workers = Array.from({ length: 4 }, () => new Worker(src, { eval: true, workerData: { buffer, rate, tries: 50_000, entry, url } }));
    await Promise.all(workers.map((w) => new Promise((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    })));
    const results = workers.map((w) => new Promise<{ accepted: number; t0: string; t1: string }>((resolve, reject) => {
      w.once('message', resolve);
      w.once('error', reject);
    }));
    const i32 = new Int32Array(buffer);
    Atomics.store(i32, 7, 1);
    Atomics.notify(i32, 7);
    const got = await Promise.all(results);
    await Promise.all(workers.map((w) => w.terminate()));
    const accepted = got.reduce((n, g) => n + g.accepted, 0);
    // From the first thread's start to the last one's end (a loaded machine wakes them at different times).
    const spanS = Number(got.reduce((m, g) => (BigInt(g.t1) > m ? BigInt(g.t1) : m), 0n) - got.reduce((m, g) => (BigInt(g.t0) < m ? BigInt(g.t0) : m), BigInt(got[0]!.t0))) / 1e9;
    // The bound the refill allows over that time, plus the burst: never more, however the CAS raced.
    const bound = burstFor(rate) + Math.ceil(rate * spanS) + 1;
    assert.ok(accepted >= burstFor(rate), `${accepted} accepted: at least the burst`);
    assert.ok(accepted <= bound, `${accepted} accepted by 4 threads in ${spanS.toFixed(3)} s; bound ${bound}`);
  });
});

interface Attempt {
  readonly status: number;
  readonly retryAfter?: string;
  readonly body?: string;
  /** performance.now() when the answer came. */
  readonly at: number;
}

/** One upgrade; a 101 is closed at once. */
function attempt(url: string): Promise<Attempt> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['sluice.v1']);
    ws.once('open', () => {
      resolve({ status: 101, at: performance.now() });
      ws.close();
    });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body, at: performance.now() }));
    });
    ws.once('error', reject);
  });
}

describe('WS_UPGRADE_RATE at a gateway (2 shards)', () => {
  const RATE = 50;
  let gw: Gateway;
  before(async () => {
    gw = await startGateway({ WS_UPGRADE_RATE: String(RATE) });
  });
  after(async () => {
    assert.equal(await gw.stop(), 0, gw.stderr());
  });

  test('100 at once: the burst and the refill accepted, the rest 503 with their own places, readiness 200 throughout', async () => {
    const before = {
      accepted: await metricValue(gw, 'sluice_upgrades_total', '{outcome="accepted"}'),
      overBudget: await metricValue(gw, 'sluice_upgrades_total', '{outcome="over_budget"}'),
      unavailable: await metricValue(gw, 'sluice_upgrades_total', '{outcome="unavailable"}'),
    };
    const t0 = performance.now();
    const outcomes = await Promise.all(Array.from({ length: 100 }, () => attempt(gw.url())));
    const tookS = (performance.now() - t0) / 1000;
    assert.equal((await fetch(gw.admin('/health/ready'))).status, 200, 'refusing for rate is not unready');
    const accepted = outcomes.filter((o) => o.status === 101).length;
    // The burst (5), and what 50/s refilled while they arrived: never more.
    assert.ok(accepted >= burstFor(RATE) && accepted <= burstFor(RATE) + Math.ceil(RATE * tookS) + 1, `${accepted} accepted in ${tookS.toFixed(3)} s`);
    const refused = outcomes.filter((o) => o.status !== 101);
    assert.equal(refused.length, 100 - accepted);
    const hints = refused.map((r) => {
      assert.equal(r.status, 503);
      const body = JSON.parse(r.body!) as { reason: string; retryAfterMs: number };
      assert.equal(body.reason, 'unavailable');
      assert.equal(r.retryAfter, String(Math.max(1, Math.ceil(body.retryAfterMs / 1000))), 'Retry-After: the same wait in whole seconds');
      return body.retryAfterMs;
    }).sort((x, y) => x - y);
    // Spread over the time the backlog needs at 50/s (20 ms a place), not one range for all:
    // the last is told about refused/50 s, and no two places are the same (each a full interval apart when told at once).
    const spanMs = hints.at(-1)! - hints[0]!;
    const needMs = (refused.length - 1) * (1000 / RATE);
    assert.ok(spanMs >= needMs - tookS * 1000 - 20 && spanMs <= needMs + 20, `hints span ${spanMs} ms for ${refused.length} refused (need ${needMs})`);
    assert.ok(hints.at(-1)! <= (refused.length + 1) * (1000 / RATE) + 20, `the last is told ${hints.at(-1)} ms`);
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="accepted"}') - before.accepted, accepted);
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="over_budget"}') - before.overBudget, refused.length);
    assert.equal(await metricValue(gw, 'sluice_upgrades_total', '{outcome="unavailable"}') - before.unavailable, 0, 'not counted as a drain\'s 503');

    // Each refused client comes back when told: every one gets in, at the rate.
    await new Promise((r) => setTimeout(r, 1500)); // the schedule above has run out
    const wave = await Promise.all(Array.from({ length: 60 }, () => attempt(gw.url())));
    const t1 = performance.now();
    const admittedAt: number[] = wave.filter((o) => o.status === 101).map((o) => o.at);
    const back = await Promise.all(wave.filter((o) => o.status !== 101).map(async (o) => {
      const { retryAfterMs } = JSON.parse(o.body!) as { retryAfterMs: number };
      await new Promise((r) => setTimeout(r, retryAfterMs - (performance.now() - o.at)));
      return attempt(gw.url());
    }));
    const again = back.filter((o) => o.status !== 101);
    admittedAt.push(...back.filter((o) => o.status === 101).map((o) => o.at));
    // A return may meet one that the refill let in early; almost all are in at their place.
    assert.ok(again.length <= 3, `${again.length} of ${back.length} returns refused again`);
    assert.ok(admittedAt.length >= 57);
    // Paced: the returns, at 50/s, take at least (returns - 1) x 20 ms after the wave.
    const lastS = (Math.max(...admittedAt) - t1) / 1000;
    assert.ok(lastS >= (back.length - again.length - burstFor(RATE) - 1) / RATE, `all in after ${lastS.toFixed(2)} s`);
  });
});
