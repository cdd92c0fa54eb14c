// Socket.IO peer: one thread, WebSocket transport only (no polling), no
// compression. Topics are rooms; a publish is acked and emitted to the room.

import http from 'node:http';
import { Server } from 'socket.io';
import { StallGauge, idGenerator, statsJson, type PeerHandle } from './common.ts';

interface Msg { topic?: unknown; data?: unknown }
type Ack = (v: unknown) => void;

export function startSioPeer(port: number, host = '127.0.0.1'): Promise<PeerHandle> {
  const gauge = new StallGauge();
  const nextId = idGenerator();
  const server = http.createServer((req, res) => {
    if (req.url === '/stats') { res.setHeader('content-type', 'application/json'); res.end(statsJson(gauge)); return; }
    res.statusCode = 404;
    res.end();
  });
  const io = new Server(server, { transports: ['websocket'], serveClient: false, perMessageDeflate: false, maxHttpBufferSize: 1024 * 1024 });
  io.on('connection', (socket) => {
    socket.on('join', (msg: Msg, ack?: Ack) => {
      if (typeof msg?.topic !== 'string') { ack?.({ status: 'error', reason: 'bad_request' }); return; }
      void socket.join(msg.topic);
      ack?.({});
    });
    socket.on('publish', (msg: Msg, ack?: Ack) => {
      if (typeof msg?.topic !== 'string') { ack?.({ status: 'error', reason: 'bad_request' }); return; }
      const id = nextId();
      ack?.({ id });
      io.to(msg.topic).emit('event', { topic: msg.topic, id, data: msg.data });
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const addr = server.address();
      if (addr === null || typeof addr === 'string') { reject(new Error('sio peer: no address')); return; }
      resolve({
        port: addr.port,
        close: () => new Promise<void>((done) => {
          gauge.stop();
          void io.close(() => done());
        }),
      });
    });
  });
}
