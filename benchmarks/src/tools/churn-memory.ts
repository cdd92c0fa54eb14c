// Does a gateway's memory follow the connections it has served, or only
// those it holds? (Issue 21's soak saw node A's RSS grow +10% of its mean an
// hour at constant sockets: 28 MiB/h, or 0.64 KiB per connection cut, if
// connections were the cause.) This runs the soak's churn many times faster
// on one node: it holds `--hold` sockets joined to two durable topics each,
// while `--rate` sessions a second connect, join two topics with `since`
// (the newest id published on any topic: a history read and a replay
// splice each, as the SDK's resumes do), get events, and close;
// events are published at `--events` a second. RSS, the V8 heaps of every
// thread and the sockets held are sampled every 10 s, and the slope of RSS
// against sessions served is fitted after the warm-up. A leak per
// connection shows as KiB per session; memory that only follows time or the
// allocator's working set does not grow with the session count.
//
//   node --import tsx benchmarks/src/tools/churn-memory.ts [--minutes 10] [--rate 300] [--hold 4000] [--events 20] [--redis] [--warmup-minutes 2]
//     [--surge N --surge-every 60 --surge-hold 20]
//
// The gateway's build, WS_WORKERS=2; embedded by default, cluster mode on a
// real redis-server with --redis. Loopback only; stops by itself. Not part
// of `pnpm bench`: a tool for telling a leak from a working set.

import WebSocket from 'ws';
import { parseMetrics } from '@sluice/gateway/testing';
import { startRedis, type RedisServer } from '@sluice/redis/testing';
import { ServerProc, TARGETS } from '../lib/server.ts';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? dflt : Number(process.argv[i + 1]);
};
const minutes = arg('minutes', 10);
const rate = arg('rate', 300);
const hold = arg('hold', 4000);
const eventsPerS = arg('events', 20);
const warmupMin = arg('warmup-minutes', 2);
const useRedis = process.argv.includes('--redis');
// --surge N: every --surge-every s, N more sockets arrive at once (joins with since, as a drained node's clients do), stay
// --surge-hold s, and leave: the soak's node A absorbing node B's clients at each drain, many times over.
const surge = arg('surge', 0);
const surgeEvery = arg('surge-every', 60);
const surgeHold = arg('surge-hold', 20);
const TOPICS = 50;
const topic = (i: number): string => `churn.t${i % TOPICS}`;

/** Least squares y = a + b x: b and its standard error. */
function fitLine(xs: readonly number[], ys: readonly number[]): { slope: number; se: number } {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (let i = 0; i < n; i++) { sxx += (xs[i]! - mx) ** 2; sxy += (xs[i]! - mx) * (ys[i]! - my); }
  const slope = sxy / sxx;
  let rss = 0;
  for (let i = 0; i < n; i++) rss += (ys[i]! - my - slope * (xs[i]! - mx)) ** 2;
  return { slope, se: Math.sqrt(rss / (n - 2) / sxx) };
}

interface Sample { t: number; sessions: number; rss: number; heap: number; sockets: number }

function open(port: number, topics: string[], since: string | undefined): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    let answered = 0;
    const timer = setTimeout(() => { ws.terminate(); reject(new Error('no welcome and join replies in 10 s')); }, 10_000);
    ws.on('message', (data: Buffer) => {
      const s = data.toString();
      if (s.startsWith('{"type":"welcome"')) {
        topics.forEach((t, i) => ws.send(JSON.stringify({ type: 'join', ref: String(i), topic: t, ...(since === undefined ? {} : { since }) })));
      } else if (s.startsWith('{"type":"reply"')) {
        if (!s.includes('"status":"ok"')) { clearTimeout(timer); ws.terminate(); reject(new Error(`join refused: ${s}`)); return; }
        if (++answered === topics.length) { clearTimeout(timer); resolve(ws); }
      }
    });
    ws.on('error', (err) => { clearTimeout(timer); reject(err); });
  });
}

async function main(): Promise<void> {
  let redis: RedisServer | undefined;
  if (useRedis) redis = await startRedis();
  const gw = await ServerProc.start(TARGETS.sluice, 60_000, {
    ...(redis === undefined ? {} : { REDIS_URL: redis.url }),
    WS_MAX_MESSAGES: '1000000',
  });
  const heap = async (): Promise<number> => parseMetrics(await gw.gw.metrics(5000))
    .filter((m) => m.name === 'sluice_heap_used_bytes').reduce((a, m) => a + m.value, 0);
  const sockets = async (): Promise<number> => parseMetrics(await gw.gw.metrics(5000))
    .filter((m) => m.name === 'sluice_connected_sockets').reduce((a, m) => a + m.value, 0);
  const held: WebSocket[] = [];
  for (let i = 0; i < hold; i += 100) {
    held.push(...await Promise.all(Array.from({ length: Math.min(100, hold - i) }, (_, k) => open(gw.port, [topic(i + k), topic(i + k + 7)], undefined))));
  }
  console.log(`${held.length} sockets held; churn ${rate}/s for ${minutes} min (${useRedis ? 'cluster mode, redis' : 'embedded'})`);
  let published = 0;
  let lastId = '0-0';
  const pub = setInterval(() => {
    for (let k = 0; k < Math.max(1, Math.round(eventsPerS / 10)); k++) {
      void gw.gw.adminPost('/v1/publish', { topic: topic(published++), data: { n: published } })
        .then(async (r) => { const b = await r.json() as { id?: string }; if (typeof b.id === 'string') lastId = b.id; }, () => undefined);
    }
  }, 100);
  let sessions = 0;
  let failed = 0;
  const end = performance.now() + minutes * 60_000;
  const t0 = performance.now();
  const samples: Sample[] = [];
  const sample = async (): Promise<void> => {
    samples.push({ t: (performance.now() - t0) / 1000, sessions, rss: gw.rssBytes(), heap: await heap(), sockets: await sockets() });
    const s = samples.at(-1)!;
    console.log(`${s.t.toFixed(0)} s: ${s.sessions} sessions, rss ${(s.rss / 2 ** 20).toFixed(1)} MiB, heaps ${(s.heap / 2 ** 20).toFixed(1)} MiB, ${s.sockets} sockets`);
  };
  await sample();
  const sampler = setInterval(() => { void sample(); }, 10_000);
  let surges = 0;
  const surger = surge <= 0 ? undefined : setInterval(() => {
    if (performance.now() > end - surgeHold * 1000) return;
    surges++;
    const base = 1_000_000 * surges;
    void Promise.allSettled(Array.from({ length: surge }, (_, k) => open(gw.port, [topic(base + k), topic(base + k + 7)], lastId)))
      .then((rs) => setTimeout(() => { for (const r of rs) if (r.status === 'fulfilled') r.value.close(); }, surgeHold * 1000));
  }, surgeEvery * 1000);
  // Sessions started at the rate, each one open for about a second.
  let inflight = 0;
  await new Promise<void>((done) => {
    const tick = setInterval(() => {
      if (performance.now() > end) { clearInterval(tick); const wait = setInterval(() => { if (inflight === 0) { clearInterval(wait); done(); } }, 100); return; }
      for (let k = 0; k < rate / 20 && inflight < rate * 3; k++) {
        inflight++;
        const i = sessions + failed;
        open(gw.port, [topic(i), topic(i + 13)], lastId).then((ws) => {
          setTimeout(() => { ws.close(); sessions++; inflight--; }, 1000);
        }, () => { failed++; inflight--; });
      }
    }, 50);
  });
  clearInterval(pub);
  clearInterval(sampler);
  if (surger !== undefined) clearInterval(surger);
  await new Promise((r) => setTimeout(r, surge > 0 ? surgeHold * 1000 : 0));
  await new Promise((r) => setTimeout(r, 5000));
  await sample();
  for (const ws of held) ws.terminate();
  await gw.stop(10_000);
  await redis?.stop();
  const fit = samples.filter((s) => s.t >= warmupMin * 60);
  if (fit.length < 3) throw new Error(`${fit.length} samples after the ${warmupMin}-minute warm-up: run longer than it (--minutes)`);
  const bySessions = fitLine(fit.map((s) => s.sessions), fit.map((s) => s.rss));
  const heapBySessions = fitLine(fit.map((s) => s.sessions), fit.map((s) => s.heap));
  console.log(JSON.stringify({ minutes, rate, hold, eventsPerS, redis: useRedis, surge, surgeEvery, surgeHold, surges, sessions, failed, published, samples }));
  console.log(`after ${warmupMin} min of warm-up (${fit.length} samples, ${fit.at(-1)!.sessions - fit[0]!.sessions} sessions): ` +
    `RSS ${(bySessions.slope / 1024).toFixed(4)} KiB per session (± ${(2 * bySessions.se / 1024).toFixed(4)}, 2 SE); ` +
    `heaps ${(heapBySessions.slope / 1024).toFixed(4)} KiB per session (± ${(2 * heapBySessions.se / 1024).toFixed(4)}); ` +
    `RSS first/last of the fit ${(fit[0]!.rss / 2 ** 20).toFixed(1)}/${(fit.at(-1)!.rss / 2 ** 20).toFixed(1)} MiB; ${failed} sessions failed`);
}

main().then(() => process.exit(0), (err: unknown) => { console.error(err); process.exit(1); });
