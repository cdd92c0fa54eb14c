// Raw uWebSockets.js peer: the ceiling for this stack. One thread. Topics are
// uWS topics; a publish is answered with a reply, then the event goes to every
// subscriber of the topic (ws.publish for the others, ws.send for the sender).

import { encodeReplyOk } from '@sluice/protocol';
import { type HttpResponse, loadUws } from '@sluice/uws';
import { BAD_REQUEST, StallGauge, WELCOME, eventFrame, idGenerator, parseClientFrame, statsJson, type PeerHandle } from './common.ts';

/**
 * The build the gateway loads on this runtime (20.30 on Node 20, 20.57 on
 * 22 and 24): the ratios compare Sluice with the uWS it runs on. Throws,
 * naming the runtime, where no build loads natively.
 */
const uWS = loadUws().uws;

export function assertNativeUws(): void {
  loadUws();
}

/**
 * `UWS_PEER_REFUSE=1`: every upgrade is answered as Sluice's upgrade budget
 * answers one over it (503, Retry-After, the JSON body, the connection
 * closed), for S9's refusal cost: the least this stack can spend on a
 * refused upgrade.
 */
const REFUSE = process.env['UWS_PEER_REFUSE'] === '1';

export function startUwsPeer(port: number, host = '127.0.0.1'): Promise<PeerHandle> {
  assertNativeUws();
  const gauge = new StallGauge();
  const nextId = idGenerator();
  const decoder = new TextDecoder();
  const app = uWS.App();
  app.ws<Record<string, never>>('/ws', {
    ...(REFUSE ? {
      upgrade: (res: HttpResponse) => {
        res.cork(() => {
          res.writeStatus('503 Service Unavailable').writeHeader('retry-after', '1').writeHeader('content-type', 'application/json')
            .end('{"reason":"unavailable","retryAfterMs":1000}', true);
        });
      },
    } : {}),
    compression: uWS.DISABLED,
    maxPayloadLength: 1024 * 1024,
    maxBackpressure: 1024 * 1024,
    idleTimeout: 0,
    open: (ws) => { ws.send(WELCOME, false); },
    message: (ws, msg, isBinary) => {
      const f = isBinary ? undefined : parseClientFrame(decoder.decode(msg));
      if (f === undefined) { ws.send(BAD_REQUEST, false); return; }
      if (f.type === 'join') {
        ws.subscribe(f.topic);
        ws.send(encodeReplyOk(f.ref, '{}'), false);
        return;
      }
      const id = nextId();
      const event = eventFrame(f.topic, id, f.data);
      ws.send(encodeReplyOk(f.ref, `{"id":"${id}"}`), false);
      // Every subscriber gets the event, the sender included. Not app.publish:
      // called inside a message handler it uncorks the sender, and every
      // frame after it costs its own send() (measured here: 80k vs 260k
      // publishes per server-CPU-second in S1).
      ws.publish(f.topic, event, false);
      if (ws.isSubscribed(f.topic)) ws.send(event, false);
    },
  });
  app.get('/stats', (res) => { res.writeHeader('content-type', 'application/json').end(statsJson(gauge)); });
  return new Promise((resolve, reject) => {
    app.listen(host, port, (listenSocket) => {
      if (listenSocket === false) { reject(new Error(`uws peer cannot listen on ${host}:${port}`)); return; }
      resolve({
        port: uWS.us_socket_local_port(listenSocket),
        close: async () => {
          uWS.us_listen_socket_close(listenSocket);
          gauge.stop();
        },
      });
    });
  });
}
