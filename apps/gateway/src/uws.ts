import { connect, type Socket } from 'node:net';
import uWS, { type HttpResponse } from 'uWebSockets.js';

/**
 * The uWS package silently falls back to a slow pure-JavaScript server when
 * its native binary does not load. Sluice refuses to run on the fallback.
 */
export function loadNativeUws(): typeof uWS {
  if (!/\[native code\]/.test(String(uWS.App))) {
    throw new NativeUwsMissingError();
  }
  return uWS;
}

export class NativeUwsMissingError extends Error {
  constructor() {
    super(
      `uWebSockets.js did not load its native binary for node ${process.version} ` +
        `(${process.platform}-${process.arch}, ABI ${process.versions.modules}) and fell back to a JavaScript ` +
        'implementation; Sluice refuses to run on it. Install the uWebSockets.js build that matches this Node ' +
        '(see docs/architecture.md) and unset UWS_USE_FALLBACK.',
    );
    this.name = 'NativeUwsMissingError';
  }
}

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, us_socket_context_t, WebSocket } from 'uWebSockets.js';

/**
 * Completes an upgrade that had to wait (for the IP window, for the token)
 * in one corked write, without the uWS 20.30 bug that closes the new socket.
 *
 * The bug (uNetworking/uWebSockets#1928, fixed upstream in #1929, after the
 * last build that loads here): `res.cork()` checks, after its callback,
 * whether an upgrade happened inside it by comparing the socket's address.
 * The upgrade shrinks the socket's memory with realloc, which glibc does in
 * place, so the address stays the same, the check misses the upgrade, and
 * cork() reads the HTTP response's `state` from memory that now holds the
 * WebSocket. When those bits read "connection: close, response sent" it
 * shuts the socket down: the client gets the 101 and the welcome, then a
 * FIN (1006), and the shard sees the close a millisecond after the open.
 * With a normal handshake that happened to about one upgrade in 800 here;
 * an upgrade request saying `Connection: close` hits it every time.
 *
 * Without `res.cork()` the writes are uncorked (about 24 sends for the 101
 * and the welcome, 2.4x the CPU of a corked upgrade: benchmarks/src/
 * experiments/async-upgrade.ts), uWS prints a warning for each, and a
 * `Connection: close` upgrade is lost all the same. So, where realloc
 * shrinks in place, the cork is taken with the WebSocket's cork method
 * called on the response: both are uWS AsyncSockets, and that method only
 * corks, runs the callback and uncorks the socket at that address, which is
 * now the new WebSocket; inside it `res.cork()` finds the socket corked and
 * runs the upgrade without its check.
 *
 * Where realloc moves the socket (an allocator such as jemalloc preloaded),
 * `res.cork()`'s check works, and the WebSocket's method would uncork the old
 * address and leave the new socket corked, which uWS answers by aborting the
 * process ("Cork buffer must not be held across event loop iterations").
 * `learnUpgradeCork` tells the two apart once per thread and this picks the
 * way that is right.
 */
export function upgradeCorked(res: HttpResponse, upgrade: () => void): void {
  if (corkWay === undefined) throw new Error('upgradeCorked before learnUpgradeCork');
  if (corkWay.inPlace) corkWay.wsCork.call(res, () => res.cork(upgrade));
  else res.cork(upgrade);
}

type WsCork = (this: unknown, cb: () => void) => unknown;
let corkWay: { readonly inPlace: boolean; readonly wsCork: WsCork } | undefined;

const PROBE_KEY = 'c2x1aWNlLWNvcmstcHJvYmU=';

/**
 * Learns, once per thread, what `upgradeCorked` needs, from two sockets
 * opened to a private listener on loopback: the WebSocket's native cork
 * method (from a socket upgraded inside uWS's handler, the path without the
 * bug), and whether an upgrade keeps the socket's address, from a
 * `Connection: close` upgrade completed later with `res.cork()`: the bug
 * shuts that one down exactly when the address is kept. Resolves with
 * `inPlace`, at once when already known.
 */
export function learnUpgradeCork(uws: typeof uWS, timeoutMs = 5000): Promise<{ inPlace: boolean }> {
  if (corkWay !== undefined) return Promise.resolve({ inPlace: corkWay.inPlace });
  return new Promise((resolve, reject) => {
    let listenSocket: uWS.us_listen_socket | undefined;
    const clients: Socket[] = [];
    let wsCork: WsCork | undefined;
    let probing = false;
    let probeShut = false;
    let port = 0;
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (listenSocket !== undefined) uws.us_listen_socket_close(listenSocket);
      for (const c of clients) c.destroy();
      if (err !== undefined) reject(err);
      else resolve({ inPlace: corkWay!.inPlace });
    };
    const timer = setTimeout(() => finish(new Error(`the upgrade probe on a private loopback listener did not finish within ${timeoutMs} ms`)),
      timeoutMs);
    const open = (port: number, path: string, connection: string): void => {
      const c = connect(port, '127.0.0.1', () => {
        c.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: ${connection}\r\n` +
          `Sec-WebSocket-Key: ${PROBE_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
      });
      c.on('error', (err) => finish(err));
      clients.push(c);
    };
    uws.App()
      .ws('/*', {
        upgrade: (res, req, context) => {
          const key = req.getHeader('sec-websocket-key');
          if (req.getUrl() === '/learn') {
            res.upgrade({}, key, '', '', context);
            return;
          }
          // The probe: completed later, as the gateway's upgrades are.
          let aborted = false;
          res.onAborted(() => (aborted = true));
          setImmediate(() => {
            if (aborted || done) return;
            let ws: uWS.WebSocket<unknown> | undefined;
            probing = true;
            res.cork(() => {
              res.upgrade({ probe: true, take: (w: uWS.WebSocket<unknown>) => (ws = w) }, key, '', '', context);
            });
            probing = false;
            if (!probeShut) ws?.close();
            corkWay = { inPlace: probeShut, wsCork: wsCork! };
            finish();
          });
        },
        open: (ws) => {
          const data = ws.getUserData() as { probe?: boolean; take?: (w: uWS.WebSocket<unknown>) => void };
          if (data.probe === true) {
            data.take!(ws);
            return;
          }
          const cork = (ws as unknown as { cork?: unknown }).cork;
          ws.close();
          if (typeof cork !== 'function' || !/\[native code\]/.test(String(cork))) {
            finish(new Error('the uWS WebSocket has no native cork method'));
            return;
          }
          wsCork = cork as WsCork;
          open(port, '/probe', 'close');
        },
        close: (ws) => {
          if (probing && (ws.getUserData() as { probe?: boolean }).probe === true) probeShut = true;
        },
      })
      .any('/*', (res) => {
        res.close();
      })
      .listen('127.0.0.1', 0, (ls) => {
        if (ls === false) {
          finish(new Error('could not listen on 127.0.0.1 for the upgrade probe'));
          return;
        }
        listenSocket = ls;
        port = uws.us_socket_local_port(ls);
        open(port, '/learn', 'Upgrade');
      });
  });
}
