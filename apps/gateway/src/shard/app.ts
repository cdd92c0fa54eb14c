/**
 * The shard's uWS app: its route table and WebSocket options, built from
 * the config and the parts that answer each route.
 */
import { type Config, Refusals, socketOptions } from '@sluice/core';
import type { HttpRequest, HttpResponse, TemplatedApp, us_socket_context_t, Uws } from '@sluice/uws';
import type { Logger } from '@sluice/telemetry';
import type { Admission } from './admission.ts';
import type { Socket, SocketSlot } from './socket-data.ts';

export interface Routes {
  readonly admission: Admission;
  readonly opened: (ws: Socket) => void;
  readonly message: (ws: Socket, message: ArrayBuffer, isBinary: boolean) => void;
  readonly closed: (ws: Socket, code: number, message: ArrayBuffer) => void;
  /** uWS's `drain` event: the socket's send buffer has room again. */
  readonly writable: (ws: Socket) => void;
  /** /health/ready */
  readonly ready: () => boolean;
}

export function buildApp(uws: Uws, cfg: Config, log: Logger, r: Routes): TemplatedApp {
  return uws
    .App()
    .ws<SocketSlot>('/ws', {
      ...socketOptions(cfg),
      compression: compression(uws, cfg.compression),
      upgrade: (res, req, context) => upgradeGuarded(log, r.admission, res, req, context),
      open: r.opened,
      message: r.message,
      close: r.closed,
      drain: r.writable,
    })
    // Reached only by a request to /ws that uWS did not take as a WebSocket handshake.
    .any('/ws', (res, req) => {
      r.admission.refuse(res, req.getHeader('upgrade').toLowerCase() === 'websocket' ? Refusals.noKey : Refusals.notAnUpgrade);
    })
    .get('/health/live', (res) => httpJson(res, '200 OK', '{"status":"live"}'))
    .get('/health/ready', (res) => {
      const ready = r.ready();
      httpJson(res, ready ? '200 OK' : '503 Service Unavailable', ready ? '{"status":"ready"}' : '{"status":"unavailable"}');
    })
    .any('/*', (res) => httpJson(res, '404 Not Found', '{"reason":"not_found"}'));
}

/** uWS aborts the whole process when an upgrade handler throws without answering: a bug here must cost one request, not the node. */
function upgradeGuarded(log: Logger, admission: Admission, res: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
  try {
    admission.upgrade(res, req, context);
  } catch (err) {
    log.error({ err }, 'upgrade handler failed');
    try {
      admission.refuse(res, Refusals.internal);
    } catch {
      // Already answered before the failure.
    }
  }
}

/**
 * Plain HTTP answers on the public port always close their connection: a
 * keep-alive connection left open would be a socket this thread cannot close
 * (uWS has no handle to it) when the shard stops or crashes.
 */
function httpJson(res: HttpResponse, status: string, body: string): void {
  res.cork(() => {
    res.writeStatus(status).writeHeader('content-type', 'application/json').end(body, true);
  });
}

/** uWS's compressor for a WS_COMPRESSION mode; the decompressor is always the shared one. */
function compression(uws: Uws, mode: Config['compression']): number {
  switch (mode) {
    case 'off': return uws.DISABLED;
    case 'shared': return uws.SHARED_COMPRESSOR | uws.SHARED_DECOMPRESSOR;
    case 'dedicated': return uws.DEDICATED_COMPRESSOR_4KB | uws.SHARED_DECOMPRESSOR;
  }
}
