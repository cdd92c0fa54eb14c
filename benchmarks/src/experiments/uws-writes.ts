// Experiment: how should a uWS server write the reply and the event of a
// publish when they are produced outside the message handler (as a gateway
// that hands publishes to another thread does)? Runs S1's load (100 sockets,
// 16 in flight, 32 B, each socket the only subscriber of its topic) against
// one-file uWS servers that differ only in how they write, and prints
// publishes per server-CPU-second for each.
//
//   node --import tsx benchmarks/src/experiments/uws-writes.ts [variant ...]
//
// Count send() calls per publish as well with, for example:
//   perf stat -e syscalls:sys_enter_sendto -p <server pid> -- sleep 2

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { loadUws, type WebSocket } from '@sluice/uws';
import { LoadPool } from '../loadgen/pool.ts';
import { cpuSeconds } from '../lib/proc.ts';
import { REPO_ROOT } from '../lib/spawn.ts';
import type { MarkResult } from '../loadgen/messages.ts';

const uWS = loadUws().uws;

const VARIANTS: Record<string, string> = {
  inline: 'in the handler: ws.send(reply); ws.publish(topic, event) + ws.send(event) to self (the uws peer)',
  'inline-app-publish': 'in the handler: ws.send(reply); app.publish(topic, event)',
  deferred: 'next tick, item by item: ws.send(reply); app.publish(topic, event)',
  'deferred-cork-each': 'next tick, item by item, each in ws.cork: ws.send(reply); app.publish(topic, event)',
  'deferred-grouped': 'next tick, grouped by socket, one ws.cork per socket: all replies, then app.publish of all events',
  'deferred-grouped-send': 'next tick, grouped by socket, one ws.cork per socket: reply and event with ws.send',
};

type Item = { ws: WebSocket<unknown>; topic: string; reply: string; event: string };

function serve(variant: string): void {
  const dec = new TextDecoder();
  let queue: Item[] = [];
  let scheduled = false;
  const app = uWS.App();
  const flush = (): void => {
    scheduled = false;
    const items = queue;
    queue = [];
    if (variant === 'deferred') {
      for (const it of items) { it.ws.send(it.reply); app.publish(it.topic, it.event); }
    } else if (variant === 'deferred-cork-each') {
      for (const it of items) it.ws.cork(() => { it.ws.send(it.reply); app.publish(it.topic, it.event); });
    } else {
      const bySocket = new Map<WebSocket<unknown>, Item[]>();
      for (const it of items) {
        const list = bySocket.get(it.ws);
        if (list === undefined) bySocket.set(it.ws, [it]); else list.push(it);
      }
      for (const [ws, list] of bySocket) {
        ws.cork(() => {
          if (variant === 'deferred-grouped') {
            for (const it of list) ws.send(it.reply);
            for (const it of list) app.publish(it.topic, it.event);
          } else {
            for (const it of list) { ws.send(it.reply); ws.send(it.event); }
          }
        });
      }
    }
  };
  app.ws('/ws', {
    compression: uWS.DISABLED,
    idleTimeout: 0,
    open: (ws) => { ws.send('{"type":"welcome"}'); },
    message: (ws, msg) => {
      const f = JSON.parse(dec.decode(msg)) as { type: string; ref: string; topic: string; data: unknown };
      if (f.type === 'join') { ws.subscribe(f.topic); ws.send(JSON.stringify({ type: 'reply', ref: f.ref, status: 'ok', data: {} })); return; }
      const reply = JSON.stringify({ type: 'reply', ref: f.ref, status: 'ok', data: { id: '1-1' } });
      const event = JSON.stringify({ type: 'event', topic: f.topic, id: '1-1', data: f.data });
      if (variant === 'inline') {
        ws.send(reply);
        ws.publish(f.topic, event);
        if (ws.isSubscribed(f.topic)) ws.send(event);
      } else if (variant === 'inline-app-publish') {
        ws.send(reply);
        app.publish(f.topic, event);
      } else {
        queue.push({ ws, topic: f.topic, reply, event });
        if (!scheduled) { scheduled = true; setImmediate(flush); }
      }
    },
  }).listen('127.0.0.1', 0, (ls) => {
    if (ls === false) throw new Error('cannot listen');
    process.stdout.write(`${JSON.stringify({ port: uWS.us_socket_local_port(ls) })}\n`);
  });
}

async function measure(variant: string): Promise<void> {
  const self = fileURLToPath(import.meta.url);
  const srv = spawn(process.execPath, ['--import', 'tsx', self, 'serve', variant], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('server did not start')), 20_000);
      srv.stdout.once('data', (d: Buffer) => { clearTimeout(timer); resolve((JSON.parse(d.toString()) as { port: number }).port); });
    });
    const pool = await LoadPool.start(1, 120_000);
    try {
      await pool.all(() => ({ op: 'connect', target: { host: '127.0.0.1', port, proto: 'sluice' }, count: 100, idBase: 0, sources: [], concurrency: 100, timeoutMs: 10_000 }));
      await pool.all(() => ({ op: 'join', topic: null, timeoutMs: 10_000 }));
      await pool.all(() => ({ op: 'pump', depth: 16, size: 32, ephemeral: false }));
      await new Promise((r) => setTimeout(r, 1000));
      const c0 = cpuSeconds(srv.pid!);
      const [m0] = await pool.all<MarkResult>(() => ({ op: 'mark' }));
      await new Promise((r) => setTimeout(r, 3000));
      const c1 = cpuSeconds(srv.pid!);
      const [m1] = await pool.all<MarkResult>(() => ({ op: 'mark' }));
      await pool.all(() => ({ op: 'stop', timeoutMs: 3000 }));
      const n = m1!.replies - m0!.replies;
      process.stdout.write(`${variant.padEnd(22)} ${String(Math.round(n / (c1 - c0))).padStart(8)} publishes/server-CPU-s   ${VARIANTS[variant]}\n`);
    } finally {
      await pool.close();
    }
  } finally {
    srv.kill('SIGKILL');
  }
}

if (process.argv[2] === 'serve') {
  serve(process.argv[3] ?? 'inline');
} else {
  const chosen = process.argv.slice(2);
  for (const v of chosen) if (VARIANTS[v] === undefined) throw new Error(`unknown variant ${v}; known: ${Object.keys(VARIANTS).join(', ')}`);
  for (const v of chosen.length > 0 ? chosen : Object.keys(VARIANTS)) await measure(v);
}
