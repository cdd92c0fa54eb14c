// Socket.IO peer: one thread, WebSocket transport only (no polling), no
// compression. Topics are rooms; a publish is acked and emitted to the room.

import { Server } from 'socket.io';
import { StallGauge, idGenerator, listenWithStats, type PeerHandle } from './common.ts';

interface Msg { topic?: unknown; data?: unknown }
type Ack = (v: unknown) => void;

export function startSioPeer(port: number, host = '127.0.0.1'): Promise<PeerHandle> {
  const gauge = new StallGauge();
  const nextId = idGenerator();
  return listenWithStats(gauge, 'sio', port, host, (server) => {
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
    return () => new Promise<void>((done) => {
      gauge.stop();
      void io.close(() => done());
    });
  });
}
