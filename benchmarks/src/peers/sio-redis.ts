// Socket.IO peer of S14 ("who is in this room" over two nodes): the sio peer's
// rooms and acks with @socket.io/redis-adapter on REDIS_URL (ioredis, one
// publishing and one subscribing connection), so that `io.in(room).fetchSockets()`
// asks every node over Redis. HTTP on the same port:
//   GET /fetch?room=R   times one fetchSockets() of the room: {"ms","count","local","bytes"}
//                       (`local`: the room's sockets on this node; `bytes`: the JSON of what it returned)
//   GET /stats          the stall gauge and RSS, as the other peers
// A join is a socket.join (local: the adapter publishes nothing for it).

import { createAdapter } from '@socket.io/redis-adapter';
import { Redis } from 'ioredis';
import { Server } from 'socket.io';
import http from 'node:http';
import { StallGauge, statsJson, type PeerHandle } from './common.ts';

interface Msg { topic?: unknown }
type Ack = (v: unknown) => void;

export function startSioRedisPeer(port: number, host = '127.0.0.1'): Promise<PeerHandle> {
  const url = process.env['REDIS_URL'];
  if (url === undefined || url === '') throw new Error('sio-redis peer: REDIS_URL is not set');
  const gauge = new StallGauge();
  const pub = new Redis(url);
  const sub = pub.duplicate();
  const server = http.createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/stats') { res.setHeader('content-type', 'application/json'); res.end(statsJson(gauge)); return; }
    if (u.pathname === '/fetch') {
      const room = u.searchParams.get('room') ?? '';
      const local = io.of('/').adapter.rooms.get(room)?.size ?? 0;
      const t0 = performance.now();
      io.in(room).fetchSockets().then((sockets) => {
        const ms = performance.now() - t0;
        // What an application would then read: every socket's id, handshake, rooms and data.
        const bytes = Buffer.byteLength(JSON.stringify(sockets.map((s) => ({ id: s.id, handshake: s.handshake, rooms: [...s.rooms], data: s.data as unknown }))));
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ ms, count: sockets.length, local, bytes }));
      }, (err: unknown) => {
        res.statusCode = 500;
        res.end(JSON.stringify({ error: err instanceof Error ? err.message : String(err), ms: performance.now() - t0 }));
      });
      return;
    }
    res.statusCode = 404;
    res.end();
  });
  const io = new Server(server, {
    transports: ['websocket'], serveClient: false, perMessageDeflate: false, maxHttpBufferSize: 1024 * 1024,
    adapter: createAdapter(pub, sub),
  });
  io.on('connection', (socket) => {
    socket.on('join', (msg: Msg, ack?: Ack) => {
      if (typeof msg?.topic !== 'string') { ack?.({ status: 'error', reason: 'bad_request' }); return; }
      void socket.join(msg.topic);
      ack?.({});
    });
  });
  const close = (): Promise<void> => new Promise<void>((done) => {
    gauge.stop();
    void io.close(() => {
      pub.disconnect();
      sub.disconnect();
      done();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const addr = server.address();
      if (addr === null || typeof addr === 'string') { reject(new Error('sio-redis peer: no address')); return; }
      resolve({ port: addr.port, close });
    });
  });
}
