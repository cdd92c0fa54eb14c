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
 * an upgrade request saying `Connection: close` hits it every time, which
 * is what the test uses.
 *
 * Without `res.cork()` the writes are uncorked (about 24 sends for the 101
 * and the welcome, 2.4x the CPU of a corked upgrade: benchmarks/src/
 * experiments/async-upgrade.ts), uWS prints a warning for each, and a
 * `Connection: close` upgrade is lost all the same. So the cork is taken with the WebSocket's cork method,
 * called on the response: both are uWS AsyncSockets and that method only
 * corks, runs the callback and uncorks the socket at that address, which
 * after the in-place realloc is the new WebSocket. Inside it `res.cork()`
 * finds the socket already corked and runs the upgrade without its check.
 * The WebSocket's method is learned once per thread from a socket opened
 * to a private listener on loopback (`learnUpgradeCork`).
 */
export function upgradeCorked(res: HttpResponse, upgrade: () => void): void {
  if (wsCork === undefined) throw new Error('upgradeCorked before learnUpgradeCork');
  wsCork.call(res, () => res.cork(upgrade));
}

let wsCork: ((this: unknown, cb: () => void) => unknown) | undefined;

/** Learns the WebSocket's native cork method in this thread (see `upgradeCorked`); resolves at once when known. */
export function learnUpgradeCork(uws: typeof uWS, timeoutMs = 5000): Promise<void> {
  if (wsCork !== undefined) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    let listenSocket: uWS.us_listen_socket | undefined;
    let client: Socket | undefined;
    let done = false;
    const finish = (err?: Error): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (listenSocket !== undefined) uws.us_listen_socket_close(listenSocket);
      client?.destroy();
      if (err === undefined) resolve();
      else reject(err);
    };
    const timer = setTimeout(() => finish(new Error(`no WebSocket opened on the private loopback listener within ${timeoutMs} ms`)), timeoutMs);
    uws.App()
      .ws('/*', {
        // Upgraded inside uWS's own handler: the path without the bug.
        upgrade: (res, req, context) => {
          res.upgrade({}, req.getHeader('sec-websocket-key'), '', '', context);
        },
        open: (ws) => {
          const cork = (ws as unknown as { cork?: unknown }).cork;
          if (typeof cork !== 'function' || !/\[native code\]/.test(String(cork))) {
            ws.close();
            finish(new Error('the uWS WebSocket has no native cork method'));
            return;
          }
          wsCork = cork as typeof wsCork;
          ws.close();
          finish();
        },
      })
      .any('/*', (res) => {
        res.close();
      })
      .listen('127.0.0.1', 0, (ls) => {
        if (ls === false) {
          finish(new Error('could not listen on 127.0.0.1 for the private loopback listener'));
          return;
        }
        listenSocket = ls;
        const port = uws.us_socket_local_port(ls);
        client = connect(port, '127.0.0.1', () => {
          client!.write('GET /cork HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
            'Sec-WebSocket-Key: c2x1aWNlLWNvcmstcHJvYmU=\r\nSec-WebSocket-Version: 13\r\n\r\n');
        });
        client.on('error', (err) => finish(err));
      });
  });
}
