// Where a shard's CPU goes under one scenario's load (issue 20: "profile
// where the rest goes"): the gateway (its build, as the benchmarks run it)
// runs under the inspector, V8's sampling profiler runs in every shard
// thread while the load runs, and the shares of the busy samples are
// printed per function, self and inclusive. The profiles are written to
// benchmarks/runs/ (open them in Chrome's DevTools, Performance panel).
//
//   node --import tsx benchmarks/src/tools/shard-profile.ts s1 [--seconds 5] [--size 32] [--hashed]
//   node --import tsx benchmarks/src/tools/shard-profile.ts s5 [--sockets 15000] [--rounds 2]
//   WS_WORKERS=1 node --import tsx benchmarks/src/tools/shard-profile.ts s1 [--from-source]
//   node --import tsx benchmarks/src/tools/shard-profile.ts s1 --alloc   # bytes allocated per function instead (sampled)
//   node --import tsx benchmarks/src/tools/shard-profile.ts idle [--sockets 0] [--seconds 10]   # a node at rest, its coordinator too
//   node --import tsx benchmarks/src/tools/shard-profile.ts s1 --redis   # cluster mode on a private redis-server
//
// Not part of `pnpm bench`: the profiler costs CPU itself, so shares are the
// figures to read, not rates.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ConnectResult, JoinResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { SOURCES } from '../scenarios/connect.ts';
import { claimByHash } from '../scenarios/pump.ts';
import { profileShares, startInspected } from '../lib/inspector.ts';
import { startRedis } from '@sluice/redis/testing';
import { BENCH_ROOT } from '../lib/spawn.ts';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    seconds: { type: 'string', default: '5' }, size: { type: 'string', default: '32' }, hashed: { type: 'boolean', default: false },
    sockets: { type: 'string' }, rounds: { type: 'string', default: '2' }, top: { type: 'string', default: '30' },
    'from-source': { type: 'boolean', default: false }, alloc: { type: 'boolean', default: false }, redis: { type: 'boolean', default: false },
  },
});
const load = positionals[0];
if (load !== 's1' && load !== 's5' && load !== 'idle') throw new Error('usage: shard-profile.ts s1|s5|idle [options] (see the head of this file)');
/** Idle: the coordinator is profiled too (what a node costs with nothing to do). */
const withMain = load === 'idle';
const workers = Number(process.env.WS_WORKERS ?? 2);
const top = Number(values.top);

async function main(): Promise<void> {
  const entry = values['from-source'] ? ['--import', 'tsx', 'src/main.ts'] : ['dist/main.js'];
  // --redis: cluster mode on a private redis-server, so that S1 shows what a durable publish costs there (S8's per-event share).
  const redis = values.redis ? await startRedis() : undefined;
  const { gw, insp } = await startInspected(workers, entry, redis === undefined ? {} : { REDIS_URL: redis.url });
  const sockets = Number(values.sockets ?? (load === 's1' ? 100 : 15_000));
  const pool = await LoadPool.start(load === 's1' ? 1 : 2, 30 * 60_000);
  const target = { host: '127.0.0.1', port: gw.port, proto: 'sluice' as const };
  const connect = async (count: number, concurrency: number): Promise<number> => {
    const counts = split(count, pool.size);
    const r = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target, count: counts[p.index]!, idBase: counts.slice(0, p.index).reduce((a, b) => a + b, 0),
      sources: SOURCES, concurrency, timeoutMs: 60_000,
    }), 90_000);
    return r.reduce((a, x) => a + x.ready, 0);
  };
  try {
    let what: string;
    // Warm-up upgrades, as S5 has (JIT, pools), before the profile; S1 warms up on its own sockets' publishes.
    if (load !== 's1') {
      await pool.procs[0]!.call({ op: 'connect', target, count: 300, idBase: 0, sources: SOURCES, concurrency: 250, timeoutMs: 20_000 }, 30_000);
    }
    if (load === 'idle') {
      const ready = values.sockets === undefined ? 300 : await connect(sockets, 250) + 300;
      await new Promise((r) => setTimeout(r, 2000));
      await insp.startProfiles(100, true);
      await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
      what = `idle: ${ready} sockets open, no traffic, ${values.seconds} s`;
    } else if (load === 's1') {
      const ready = await connect(sockets, 100);
      if (values.hashed) await claimByHash(gw.adminPort, 'bench', sockets);
      const joins = await pool.all<JoinResult>(() => ({ op: 'join', topic: null, timeoutMs: 10_000 }));
      await pool.all(() => ({ op: 'pump', depth: 16, size: Number(values.size), ephemeral: false }));
      await new Promise((r) => setTimeout(r, 1000));
      await (values.alloc ? insp.startAllocations() : insp.startProfiles());
      await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
      what = `S1: ${ready} sockets (${joins.reduce((a, j) => a + j.joined, 0)} joined${values.hashed ? ' to topics owned by their hash\'s shard' : ''}), ` +
        `16 publishes of ${values.size} B in flight each, ${values.seconds} s`;
    } else {
      await pool.all(() => ({ op: 'reset' }), 30_000);
      await (values.alloc ? insp.startAllocations() : insp.startProfiles());
      let ready = 0;
      for (let r = 0; r < Number(values.rounds); r++) {
        ready += await connect(sockets, 250);
        await pool.all(() => ({ op: 'reset' }), 30_000);
      }
      what = `S5: ${ready} upgrades in ${values.rounds} storms of ${sockets}, 250 handshakes in flight per generator, 2 generators, each storm closed after`;
    }
    if (values.alloc) {
      const allocs = await insp.stopAllocations();
      console.log(`${what}; gateway ${values['from-source'] ? 'from source (tsx)' : 'build (dist/main.js)'}, WS_WORKERS=${workers}, Node ${process.version}`);
      allocs.forEach((bytes, i) => {
        const total = [...bytes.values()].reduce((a, b) => a + b, 0);
        console.log(`\nshard thread ${i}: ${(total / 2 ** 20).toFixed(1)} MiB allocated (sampled), by the allocating function:`);
        for (const [fn, b] of [...bytes].sort((x, y) => y[1] - x[1]).slice(0, top)) {
          console.log(`  ${((100 * b) / total).toFixed(1).padStart(5)}%  ${(b / 2 ** 20).toFixed(1).padStart(7)} MiB  ${fn}`);
        }
      });
      return;
    }
    const profiles = await insp.stopProfiles(withMain);
    const dir = join(BENCH_ROOT, 'runs');
    mkdirSync(dir, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    console.log(`${what}; gateway ${values['from-source'] ? 'from source (tsx)' : 'build (dist/main.js)'}, WS_WORKERS=${workers}, ` +
      `${redis === undefined ? 'embedded' : 'cluster mode on one redis-server'}, Node ${process.version}`);
    profiles.forEach((p, i) => {
      const file = join(dir, `${stamp}-profile-${load}-shard${i}.cpuprofile`);
      writeFileSync(file, JSON.stringify(p));
      const { total, rows } = profileShares(p);
      const idle = rows.find((r) => r.fn.startsWith('(idle)'))?.self ?? 0;
      const busy = total - idle;
      const pct = (n: number): string => `${((100 * n) / busy).toFixed(1).padStart(5)}%`;
      const thread = withMain && i === profiles.length - 1 ? 'coordinator (main thread)' : `shard thread ${i}`;
      console.log(`\n${thread}: ${total} samples, ${busy} busy (${((100 * busy) / total).toFixed(1)}% of a core); ${file}`);
      console.log('  self   incl  function (shares of the busy samples)');
      const shown = new Set<string>();
      for (const r of [...rows].filter((x) => !x.fn.startsWith('(idle)')).sort((a, b) => b.self - a.self).slice(0, top)) {
        shown.add(r.fn);
        console.log(`  ${pct(r.self)} ${pct(r.incl)}  ${r.fn}`);
      }
      console.log('  inclusive, the gateway\'s and the packages\' own functions:');
      for (const r of [...rows].filter((x) => /(apps|packages)\//.test(x.fn) && !shown.has(x.fn)).sort((a, b) => b.incl - a.incl).slice(0, top)) {
        console.log(`  ${pct(r.self)} ${pct(r.incl)}  ${r.fn}`);
      }
    });
  } finally {
    insp.close();
    await pool.close();
    await gw.stop('SIGKILL');
    await redis?.stop();
  }
}

await main();
