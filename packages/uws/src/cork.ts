/**
 * Completing an upgrade that had to wait (for the IP window, for the token)
 * in one corked write, without the `res.cork()` bug of every uWS build on the
 * registry (uNetworking/uWebSockets#1928, fixed upstream from core v20.79).
 *
 * The bug: `res.cork()` checks, after its callback, whether an upgrade
 * happened inside it by comparing the socket's address. The upgrade shrinks
 * the socket's memory with realloc, which glibc does in place, so the
 * address stays the same, the check misses the upgrade, and cork() reads the
 * HTTP response's `state` from memory that now holds the WebSocket. When
 * those bits read "connection: close, response sent" it shuts the socket
 * down: the client gets the 101 and the welcome, then a FIN (1006). With a
 * normal handshake that happened to about one upgrade in 800 on 20.30; an
 * upgrade request saying `Connection: close` hits it every time (500 of 500
 * on 20.57 too).
 *
 * Without a cork the writes go out one by one (2.4x the CPU of a corked
 * upgrade: benchmarks/src/experiments/async-upgrade.ts), uWS prints a warning
 * for each, and a `Connection: close` upgrade is lost all the same. So, where
 * realloc shrinks in place, the cork is taken with the WebSocket's native
 * cork method called on the response: both are uWS AsyncSockets, and that
 * method only corks, runs the callback and uncorks the socket at that
 * address, which is now the new WebSocket; inside it `res.cork()` finds the
 * socket corked and runs the upgrade without its check.
 *
 * Where realloc moves the socket (an allocator such as jemalloc preloaded),
 * `res.cork()`'s check works, and the WebSocket's method would uncork the old
 * address and leave the new socket corked, which uWS answers by aborting the
 * process ("Cork buffer must not be held across event loop iterations").
 *
 * Which of the two holds is learned once per process by `probeCorkInPlace`,
 * in a child process that takes the WebSocket's way on a fresh heap (exit 0:
 * in place; SIGABRT: moved). An earlier probe inside each shard thread read
 * whether a `res.cork` upgrade was shut, and on Node 24 the leftover memory
 * of that thread made it answer "moved" under glibc, after which every
 * `Connection: close` upgrade closed 2 ms after opening.
 */
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { HttpResponse, us_listen_socket, Uws, WebSocket } from './index.ts';

type WsCork = (this: unknown, cb: () => void) => unknown;
let corkWay: { readonly inPlace: boolean; readonly wsCork: WsCork | undefined } | undefined;

/** Completes `upgrade` (a call of `res.upgrade`) in one corked write, the way this process's allocator needs. */
export function upgradeCorked(res: HttpResponse, upgrade: () => void): void {
  if (corkWay === undefined) throw new Error('upgradeCorked before useUpgradeCork');
  if (corkWay.inPlace) corkWay.wsCork!.call(res, () => res.cork(upgrade));
  else res.cork(upgrade);
}

export interface CorkProbe {
  /** Whether an upgrade keeps the socket's address (realloc shrinks in place). */
  readonly inPlace: boolean;
  /** How the probe process ended, for the log. */
  readonly how: string;
}

/** The probe script: beside this module in src/ and in dist/ (and in the gateway's bundle folder). */
export const CORK_PROBE_FILE = fileURLToPath(new URL('./cork-probe.mjs', import.meta.url));

/**
 * Runs the cork probe in a child process with this process's Node, uWS
 * binary and environment (an LD_PRELOAD'ed allocator included). Rejects when
 * the probe could not run at all.
 */
export function probeCorkInPlace(binaryPath: string, opts: { probeFile?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<CorkProbe> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [opts.probeFile ?? CORK_PROBE_FILE, binaryPath], { stdio: ['ignore', 'ignore', 'pipe'], env: opts.env ?? process.env });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve({ inPlace: true, how: 'exit 0' });
      else if (signal === 'SIGABRT') resolve({ inPlace: false, how: 'SIGABRT' });
      else reject(new Error(`the cork probe ended with ${signal ?? `exit code ${code}`}${stderr === '' ? '' : `: ${stderr.trim().split('\n').slice(-3).join(' | ')}`}`));
    });
  });
}

/**
 * Sets up `upgradeCorked` in this thread: with the process's probe answer,
 * and, where realloc is in place, the WebSocket's native cork method, taken
 * from one socket opened to a private loopback listener and upgraded inside
 * uWS's handler (the path without the bug).
 */
export async function useUpgradeCork(uws: Uws, inPlace: boolean, timeoutMs = 5000): Promise<void> {
  corkWay = { inPlace, wsCork: inPlace ? await learnWsCork(uws, timeoutMs) : undefined };
}

const KEY = 'c2x1aWNlLWNvcmstcHJvYmU=';

/** The WebSocket's native cork method in this thread, from a socket upgraded on a private loopback listener. */
export function learnWsCork(uws: Uws, timeoutMs = 5000): Promise<WsCork> {
  return new Promise((resolve, reject) => {
    let listenSocket: us_listen_socket | undefined;
    let done = false;
    const client = { socket: undefined as ReturnType<typeof connect> | undefined };
    const finish = (err: Error | undefined, cork?: WsCork): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (listenSocket !== undefined) uws.us_listen_socket_close(listenSocket);
      client.socket?.destroy();
      if (err !== undefined) reject(err);
      else resolve(cork!);
    };
    const timer = setTimeout(() => finish(new Error(`learning the WebSocket's cork on a private loopback listener took over ${timeoutMs} ms`)),
      timeoutMs);
    uws.App()
      .ws('/*', {
        upgrade: (res, req, context) => res.upgrade({}, req.getHeader('sec-websocket-key'), '', '', context),
        open: (ws: WebSocket<unknown>) => {
          const cork = (ws as unknown as { cork?: unknown }).cork;
          ws.close();
          if (typeof cork !== 'function' || !/\[native code\]/.test(String(cork))) finish(new Error('the uWS WebSocket has no native cork method'));
          else finish(undefined, cork as WsCork);
        },
      })
      .any('/*', (res) => {
        res.close();
      })
      .listen('127.0.0.1', 0, (ls) => {
        if (ls === false) {
          finish(new Error('could not listen on 127.0.0.1 to learn the WebSocket\'s cork'));
          return;
        }
        listenSocket = ls;
        const c = connect(uws.us_socket_local_port(ls), '127.0.0.1', () => {
          c.write('GET /learn HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
            `Sec-WebSocket-Key: ${KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
        });
        c.on('error', (err) => finish(err));
        client.socket = c;
      });
  });
}
