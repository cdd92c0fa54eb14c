// S17 compression (issue 20): what WS_COMPRESSION costs and saves per
// delivered event, for price ticks (~70 B of JSON, a new price each) and chat
// messages (~300 B of text), with compression off, `shared` and `dedicated`.
//
// Per repeat and variant, a fresh gateway (WS_WORKERS=2) with that
// WS_COMPRESSION; `subscribers` `ws` clients in this process, each offering
// permessage-deflate (with `off` the gateway declines it), joined to one
// topic; one publisher socket sends `events` publishes, `depth` awaiting
// their ack, each a payload of the kind. Measured over the publishes (after
// `warmup` of them): the gateway's CPU (utime+stime, every thread, /proc)
// per delivery, and the bytes the subscribers' TCP sockets read per delivery
// (frame headers included). The clients inflate in this process, so its CPU
// is the generator's, not the gateway's. Not part of `ci`.

import WebSocket from 'ws';
import { machineBusySeconds } from '../lib/proc.ts';
import { ServerProc, TARGETS } from '../lib/server.ts';
import { failedSample, otherUtil, sleep, waitQuiet, type RunOptions, type Sample } from './common.ts';

export interface CompressionConfig {
  subscribers: number;
  events: number;
  warmup: number;
  depth: number;
}

/**
 * 100 subscribers and 1000 events: with 500 ws clients inflating every frame
 * on this 2-core machine the clients fell behind (a run at 500 x 3000 had
 * 14% to 44% of the deliveries arrive before it stopped waiting), which
 * measures the clients, not the gateway's cost per delivery.
 */
export const S17_DEFAULT: CompressionConfig = { subscribers: 100, events: 1000, warmup: 300, depth: 4 };

export const COMPRESSION_MODES = ['off', 'shared', 'dedicated'] as const;
export const PAYLOAD_KINDS = ['tick', 'chat'] as const;
type Kind = (typeof PAYLOAD_KINDS)[number];

const WORDS = ('well I think we should move the meeting to thursday because half of the team is out on friday and the release is ' +
  'due next week so can everyone check their calendars and reply here before lunch thanks').split(' ');

/** The `data` of publish `n`: a price tick of one of 50 symbols, or a chat message of ~300 B drawn from common words. */
export function payloadOf(kind: Kind, n: number): unknown {
  if (kind === 'tick') {
    const sym = `S${String(n % 50).padStart(3, '0')}`;
    return { s: sym, p: Math.round((100 + ((n * 7919) % 10_000) / 100) * 100) / 100, v: (n * 31) % 5000, t: 1_796_000_000_000 + n };
  }
  let text = '';
  for (let i = 0; text.length < 280; i++) text += `${WORDS[(n * 13 + i * 7) % WORDS.length]} `;
  return { user: `user-${n % 40}`, room: 'general', text: text.trimEnd(), at: 1_796_000_000_000 + n };
}

function open(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: true });
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

function bytesRead(ws: WebSocket): number {
  return (ws as unknown as { _socket: { bytesRead: number } })._socket.bytesRead;
}

/** Sends `frame(ref)` for refs from..to-1, `depth` awaiting their ack; resolves when all are acknowledged. */
function pump(pub: WebSocket, from: number, to: number, depth: number, frame: (n: number) => string): Promise<void> {
  return new Promise((resolve, reject) => {
    let next = from;
    let acked = from;
    const onMessage = (m: WebSocket.RawData): void => {
      const s = String(m);
      if (!s.startsWith('{"type":"reply"')) return;
      if (!s.includes('"status":"ok"')) { pub.off('message', onMessage); reject(new Error(`publish refused: ${s}`)); return; }
      acked++;
      if (acked === to) { pub.off('message', onMessage); resolve(); return; }
      if (next < to) pub.send(frame(next++));
    };
    pub.on('message', onMessage);
    while (next < Math.min(to, from + depth)) pub.send(frame(next++));
  });
}

async function once(mode: (typeof COMPRESSION_MODES)[number], kind: Kind, repeat: number, cfg: CompressionConfig): Promise<Sample> {
  const variant = `${kind}, ${mode}`;
  const srv = await ServerProc.start(TARGETS.sluice, 60_000, { WS_COMPRESSION: mode });
  const clients: WebSocket[] = [];
  try {
    const url = `ws://127.0.0.1:${srv.port}/ws`;
    let delivered = 0;
    for (let i = 0; i < cfg.subscribers; i++) {
      const ws = await open(url);
      ws.on('message', (m) => { if (String(m).startsWith('{"type":"event"')) delivered++; });
      clients.push(ws);
    }
    const negotiated = clients.filter((c) => c.extensions.includes('permessage-deflate')).length;
    const joined = clients.map((c) => new Promise<void>((resolve) => {
      const f = (m: WebSocket.RawData): void => { if (String(m).includes('"ref":"j"')) { c.off('message', f); resolve(); } };
      c.on('message', f);
      c.send('{"type":"join","topic":"zip","ref":"j"}');
    }));
    await Promise.all(joined);
    const pub = await open(url);
    clients.push(pub);
    const frame = (n: number): string => JSON.stringify({ type: 'publish', topic: 'zip', ref: String(n), data: payloadOf(kind, n) });
    await pump(pub, 0, cfg.warmup, cfg.depth, frame);
    await waitQuiet(10_000);
    const want = cfg.events * cfg.subscribers;
    const bytes0 = clients.slice(0, -1).reduce((a, c) => a + bytesRead(c), 0);
    delivered = 0;
    const cpu0 = srv.cpuSeconds();
    const busy0 = machineBusySeconds();
    const t0 = performance.now();
    await pump(pub, cfg.warmup, cfg.warmup + cfg.events, cfg.depth, frame);
    for (const end = performance.now() + 10_000; delivered < want && performance.now() < end;) await sleep(5);
    const wallS = (performance.now() - t0) / 1000;
    const serverCpuS = srv.cpuSeconds() - cpu0;
    const busyS = machineBusySeconds() - busy0;
    const bytes = clients.slice(0, -1).reduce((a, c) => a + bytesRead(c), 0) - bytes0;
    if (delivered < want) throw new Error(`${delivered} of ${want} deliveries arrived`);
    const plainBytes = Buffer.byteLength(JSON.stringify({ type: 'event', topic: 'zip', id: '1796257057320-0', data: payloadOf(kind, 0) }));
    return {
      scenario: 'S17', variant, target: 'sluice', repeat, ok: true, count: delivered, wallS, serverCpuS, clientCpuS: [],
      serverUtil: serverCpuS / wallS, clientUtilMax: 0, otherUtil: otherUtil(busyS, serverCpuS, [], wallS), bound: 'none',
      perSec: delivered / wallS, perServerCpuS: delivered / serverCpuS,
      extra: {
        mode, kind, negotiated, bytesPerDelivery: bytes / delivered, eventJsonBytes: plainBytes,
        cpuPerDeliveryUs: (serverCpuS / delivered) * 1e6, rssBytes: srv.rssBytes(), subscribers: cfg.subscribers,
      },
    };
  } catch (err) {
    return failedSample('S17', variant, 'sluice', repeat, err instanceof Error ? err.message : String(err));
  } finally {
    for (const c of clients) c.terminate();
    await srv.stop();
  }
}

export async function runCompression(opts: RunOptions, cfg: CompressionConfig): Promise<Sample[]> {
  const out: Sample[] = [];
  for (let repeat = 0; repeat < opts.repeats; repeat++) {
    for (const kind of PAYLOAD_KINDS) {
      // Rotated each repeat, so that no mode always runs first.
      const modes = COMPRESSION_MODES.map((_, i) => COMPRESSION_MODES[(i + repeat) % COMPRESSION_MODES.length]!);
      for (const mode of modes) {
        const s = await once(mode, kind, repeat, cfg);
        opts.log(s.ok
          ? `  S17 ${s.variant} r${repeat}: ${(s.extra['cpuPerDeliveryUs'] as number).toFixed(2)} us server CPU and ${(s.extra['bytesPerDelivery'] as number).toFixed(1)} B on the wire per delivery, ${s.extra['negotiated']}/${cfg.subscribers} negotiated`
          : `  S17 ${s.variant} r${repeat}: FAILED ${s.error}`);
        out.push(s);
      }
    }
  }
  return out;
}
