// What an idle socket of the gateway costs, part by part (issue 20): the
// gateway (WS_WORKERS=2, the S4 environment) runs under the inspector, so
// each shard's heap can be garbage-collected and read exactly, and a heap
// snapshot of one shard before and after the sockets tells which objects
// they added. RSS, less the shards' heaps, is the native side (uWS, malloc).
//
//   node --import tsx benchmarks/src/tools/socket-memory.ts [sockets] [--topics] [--snapshot]
//
// Not part of `pnpm bench`: a tool for reading where the bytes go.

import { readFileSync } from 'node:fs';
import { startInspected } from '../lib/inspector.ts';
import type { ConnectResult, JoinResult } from '../loadgen/messages.ts';
import { LoadPool, split } from '../loadgen/pool.ts';
import { SOURCES } from '../scenarios/connect.ts';

const args = process.argv.slice(2);
const sockets = Number(args.find((a) => /^\d+$/.test(a)) ?? 15_000);
const withTopics = args.includes('--topics');
const snapshot = args.includes('--snapshot');
const workers = Number(process.env.WS_WORKERS ?? 2);

/** Self sizes by (node type, class name), summed. */
function aggregate(text: string): Map<string, { bytes: number; count: number }> {
  const s = JSON.parse(text) as { snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }; nodes: number[]; strings: string[] };
  const f = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const width = f.length;
  const iType = f.indexOf('type'), iName = f.indexOf('name'), iSize = f.indexOf('self_size');
  const out = new Map<string, { bytes: number; count: number }>();
  for (let i = 0; i < s.nodes.length; i += width) {
    const type = types[s.nodes[i + iType]!]!;
    const name = type === 'object' || type === 'native' || type === 'hidden' || type === 'code' || type === 'array' || type === 'closure'
      ? s.strings[s.nodes[i + iName]!]!.slice(0, 60) : '';
    const key = `${type} ${name}`;
    const e = out.get(key) ?? { bytes: 0, count: 0 };
    e.bytes += s.nodes[i + iSize]!;
    e.count++;
    out.set(key, e);
  }
  return out;
}

function rss(pid: number): { rss: number; anon: number } {
  const r = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(r)?.[1] ?? NaN) * 1024;
  return { rss: kb('Rss'), anon: kb('Anonymous') };
}

async function main(): Promise<void> {
  const { gw, insp } = await startInspected(workers, ['--import', 'tsx', 'src/main.ts']);
  const pool = await LoadPool.start(Math.max(2, Math.ceil(sockets / 15_000)), 30 * 60_000);
  try {
    const target = { host: '127.0.0.1', port: gw.port, proto: 'sluice' as const };
    await pool.procs[0]!.call({ op: 'connect', target, count: 300, idBase: 0, sources: SOURCES, concurrency: 250, timeoutMs: 20_000 }, 30_000);
    if (withTopics) {
      await pool.all<JoinResult>(() => ({ op: 'join', topic: 'shared', timeoutMs: 30_000 }), 40_000);
      await pool.all<JoinResult>(() => ({ op: 'join', topic: null, timeoutMs: 30_000 }), 40_000);
    }
    await pool.all(() => ({ op: 'reset' }), 30_000);
    await new Promise((r) => setTimeout(r, 1000));
    const heap0 = await insp.heaps();
    const rss0 = rss(gw.pid);
    const snap0 = snapshot ? await Promise.all(insp.workers.map(async (w) => aggregate(await insp.snapshot(w)))) : undefined;
    const counts = split(sockets, pool.size);
    const results = await pool.all<ConnectResult>((p) => ({
      op: 'connect', target, count: counts[p.index]!, idBase: counts.slice(0, p.index).reduce((a, b) => a + b, 0),
      sources: SOURCES, concurrency: 250, timeoutMs: 60_000,
    }), 90_000);
    const ready = results.reduce((a, r) => a + r.ready, 0);
    if (withTopics) {
      await pool.all<JoinResult>(() => ({ op: 'join', topic: 'shared', timeoutMs: 30_000 }), 40_000);
      await pool.all<JoinResult>(() => ({ op: 'join', topic: null, timeoutMs: 30_000 }), 40_000);
    }
    await new Promise((r) => setTimeout(r, 2000));
    const rssGarbage = rss(gw.pid);
    const heap1 = await insp.heaps();
    await new Promise((r) => setTimeout(r, 1000));
    const rss1 = rss(gw.pid);
    const heapDelta = heap1.reduce((a, b) => a + b, 0) - heap0.reduce((a, b) => a + b, 0);
    const per = (b: number): string => `${(b / ready).toFixed(0)} B`;
    console.log(`sockets ${ready}${withTopics ? ', each joined to "shared" and its own topic' : ''}, ${workers} workers`);
    console.log(`RSS before GC: ${per(rssGarbage.rss - rss0.rss)} per socket; after a full GC in every shard: ${per(rss1.rss - rss0.rss)} (anonymous ${per(rss1.anon - rss0.anon)})`);
    console.log(`shard heaps after full GC: ${per(heapDelta)} per socket (${heap0.map((h, i) => `${(h / 2 ** 20).toFixed(1)} -> ${(heap1[i]! / 2 ** 20).toFixed(1)} MiB`).join(', ')})`);
    console.log(`native (RSS after GC - heap): ${per(rss1.rss - rss0.rss - heapDelta)} per socket`);
    if (snap0 !== undefined) {
      // The shard whose heap grew most; its share of the sockets is counted by its uWS socket objects.
      const grew = heap1.map((h, i) => h - heap0[i]!);
      const w = grew.indexOf(Math.max(...grew));
      const snap1 = aggregate(await insp.snapshot(insp.workers[w]!));
      const rows: [string, number, number][] = [];
      for (const [k, v] of snap1) {
        const b = snap0[w]!.get(k) ?? { bytes: 0, count: 0 };
        rows.push([k, v.bytes - b.bytes, v.count - b.count]);
      }
      const onShard = Number(process.env.ON_SHARD ?? 0) || Math.max(...rows.filter((r) => /WebSocket/i.test(r[0])).map((r) => r[2]), 1);
      rows.sort((a, b) => b[1] - a[1]);
      console.log(`heap snapshot diff of worker ${w} (${onShard} sockets by its WebSocket objects), per socket:`);
      for (const [k, bytes, count] of rows) {
        if (Math.abs(bytes) > onShard * 2) console.log(`  ${(bytes / onShard).toFixed(1).padStart(7)} B  ${(count / onShard).toFixed(2).padStart(5)} objects  ${k}`);
      }
    }
  } finally {
    insp.close();
    await pool.close();
    await gw.stop('SIGKILL');
  }
}

await main();
