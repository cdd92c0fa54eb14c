/**
 * The node's drain, as one shard sees it: ticks of "close up to `budget`
 * sockets" from the coordinator's pacer (core's drain.ts), each socket
 * closed with 1012 and a jittered retry hint. Not uWS's `drain` event (a
 * socket's buffer has room again), which the app calls `writable`.
 */
import { type Config, retryHint } from '@sluice/core';
import type { Socket, SocketData } from './socket-data.ts';

/**
 * Closes up to `budget` sockets, oldest first. A socket with a publish whose
 * ack it has not been sent is left for a later tick: it is closed between
 * frames, after its acks. Returns how many it closed.
 */
export function drainTick(sockets: ReadonlySet<Socket>, budget: number, cfg: Config,
  close: (ws: Socket, d: SocketData, retryAfterMs: number) => void): number {
  let left = budget;
  for (const ws of sockets) {
    if (left <= 0) break;
    const d = ws.getUserData().d;
    if (!d.open || d.inflight > 0) continue;
    close(ws, d, retryHint(cfg, Math.random));
    left--;
  }
  return budget - left;
}
