// `ws` peer: one thread, the server users of plain Node most often pick.
// Topics are a Map of Sets; an event is serialized once and sent to each
// subscriber in a loop (ws has no native fan-out).

import { encodeReplyOk } from '@sluice/protocol';
import { WebSocketServer, type WebSocket } from 'ws';
import { BAD_REQUEST, StallGauge, WELCOME, eventFrame, idGenerator, listenWithStats, parseClientFrame, type PeerHandle } from './common.ts';

export function startWsPeer(port: number, host = '127.0.0.1'): Promise<PeerHandle> {
  const gauge = new StallGauge();
  const nextId = idGenerator();
  const topics = new Map<string, Set<WebSocket>>();
  return listenWithStats(gauge, 'ws', port, host, (server) => {
    const wss = new WebSocketServer({ server, path: '/ws', perMessageDeflate: false, maxPayload: 1024 * 1024 });
    wss.on('connection', (ws) => {
      const joined = new Set<string>();
      ws.send(WELCOME);
      ws.on('message', (raw, isBinary) => {
        const f = isBinary ? undefined : parseClientFrame(raw.toString());
        if (f === undefined) { ws.send(BAD_REQUEST); return; }
        if (f.type === 'join') {
          let set = topics.get(f.topic);
          if (set === undefined) { set = new Set(); topics.set(f.topic, set); }
          set.add(ws);
          joined.add(f.topic);
          ws.send(encodeReplyOk(f.ref, '{}'));
          return;
        }
        const id = nextId();
        ws.send(encodeReplyOk(f.ref, `{"id":"${id}"}`));
        const subs = topics.get(f.topic);
        if (subs === undefined) return;
        const event = Buffer.from(eventFrame(f.topic, id, f.data));
        for (const s of subs) s.send(event, { binary: false });
      });
      ws.on('close', () => {
        for (const t of joined) {
          const set = topics.get(t);
          if (set === undefined) continue;
          set.delete(ws);
          if (set.size === 0) topics.delete(t);
        }
      });
    });
    return () => new Promise<void>((done) => {
      for (const c of wss.clients) c.terminate();
      wss.close();
      server.close(() => done());
      gauge.stop();
    });
  });
}
