import WebSocket from 'ws';
import { readFileSync } from 'node:fs';
const [port, pid, seconds = '5', cls = 'durable'] = process.argv.slice(2);
const cpu = () => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100; };
const N = 100, DEPTH = 16; let acks = 0; let running = true;
const socks = await Promise.all(Array.from({ length: N }, (_, i) => new Promise(r => { const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`); ws.on('open', () => r(ws)); })));
const extra = cls === 'ephemeral' ? ',"ephemeral":true' : '';
for (const [i, ws] of socks.entries()) {
  let n = 0;
  const send = () => ws.send(`{"type":"publish","ref":"${n++}","topic":"t${i}","data":"${'x'.repeat(20)}"${extra}}`);
  ws.on('message', (m) => { if (m[2] === 116 && m[9] === 114) { acks++; if (running) send(); } });
  ws.send(`{"type":"join","ref":"j","topic":"t${i}"}`);
  for (let k = 0; k < DEPTH; k++) send();
}
await new Promise(r => setTimeout(r, 1000));
const a0 = acks, c0 = cpu(), t0 = Date.now();
await new Promise(r => setTimeout(r, Number(seconds) * 1000));
const a1 = acks, c1 = cpu(), t1 = Date.now();
running = false;
console.log(JSON.stringify({ acksPerSec: Math.round((a1 - a0) / ((t1 - t0) / 1000)), serverCpuSec: +(c1 - c0).toFixed(2), acksPerServerCpuSec: Math.round((a1 - a0) / (c1 - c0)) }));
process.exit(0);
