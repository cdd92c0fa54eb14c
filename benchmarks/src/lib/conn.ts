// A raw WebSocket client connection over node:net: a fixed upgrade request,
// header-only frame splitting, and the few protocol steps needed to get from
// TCP connect to "ready" (Sluice: the welcome frame; Socket.IO: the namespace
// connect ack). Everything after that belongs to the scenario's handlers.

import net from 'node:net';
import { FrameSplitter, Op, upgradeRequest } from '@sluice/gateway/testing';
import { Kind, SIO_CONNECT, SIO_PONG, classify, encodeClientFrame, paths, type Proto } from './codec.ts';
import { monoUs } from './clock.ts';

export interface Target {
  readonly host: string;
  readonly port: number;
  readonly proto: Proto;
}

export interface ConnHandlers {
  /** The socket is usable (welcome seen). */
  ready(c: RawConn): void;
  /** A text frame after ready, already classified. `now` is the chunk's receive time (us). */
  frame(c: RawConn, kind: Kind, buf: Buffer, s: number, e: number, now: number): void;
  /** After every received chunk: the place to flush batched sends. */
  flush(c: RawConn): void;
  /** The socket closed or failed; `why` names the cause. */
  closed(c: RawConn, why: string): void;
}

const HEADER_END = Buffer.from('\r\n\r\n');
const upgradeCache = new Map<string, Buffer>();

/** Arrival time (us) of the chunk being processed; one clock read per chunk, not per frame. */
let chunkNow = 0;
/** Reads (socket 'data' events) of every connection of this process: S1 reports replies per read, the batching it settled into. */
export const reads = { count: 0 };

/**
 * Sockets whose teardown was put off (see `RawConn.deferTeardown`): closed as
 * far as the scenario knows, their RST sent later by `teardownDeferred`.
 */
const deferred: net.Socket[] = [];

/** Sends the RST of every socket whose teardown was put off; how many. */
export function teardownDeferred(): number {
  const n = deferred.length;
  for (const sock of deferred.splice(0)) if (sock.destroyed) sock.destroy(); else sock.resetAndDestroy();
  return n;
}

const CONNECTION_ID = Buffer.from('"connectionId":"');

/** The shard part of a Sluice welcome's connectionId; -1 when it has none. */
export function shardOfWelcome(buf: Buffer, s: number, e: number): number {
  const at = buf.indexOf(CONNECTION_ID, s);
  if (at === -1 || at >= e) return -1;
  const id = buf.toString('latin1', at + CONNECTION_ID.length, Math.min(e, at + CONNECTION_ID.length + 64));
  const shard = Number(id.split('.')[1]);
  return Number.isInteger(shard) ? shard : -1;
}

export class RawConn {
  readonly sock: net.Socket;
  state: 'connecting' | 'upgrading' | 'handshake' | 'ready' | 'closed' = 'connecting';
  readonly startedAt = monoUs();
  readyAt = 0;
  /** The gateway shard that holds the socket (from the welcome's connectionId, `<node>.<shard>.<generation>.<seq>`); -1 for a peer. */
  shard = -1;
  private head: Buffer | null = null;
  private readonly splitter: FrameSplitter;

  // Scenario state, kept here so that the hot path touches one object.
  inFlight = 0;
  owed = 0;
  batch: Buffer | null = null;
  events = 0;
  lastSeq = -1;
  gaps = 0;
  topic = '';
  /** The token of the next `refresh` (signed ahead), and when that refresh was sent (0: none awaiting its reply). */
  refreshToken = '';
  refreshSentAt = 0;
  /**
   * S14 presence: where the socket stands on the presence topic (0 not joined,
   * 1 join sent, 2 joined, 3 leave sent), when its last join or leave went out
   * (or its reply came, us), the member count it would show (-1: no state
   * yet), whether diffs are still searched for its own user (1: its state
   * listed it ahead of the replica), when its count last moved and when its
   * last diff came.
   */
  pState = 0;
  pSentAt = 0;
  pAt = 0;
  pCount = -1;
  pSelfCheck = 0;
  pChangedAt = 0;
  pLastDiffAt = 0;

  constructor(
    readonly id: number,
    readonly target: Target,
    private readonly handlers: ConnHandlers,
    localAddress?: string,
    /** A JWT (WS_AUTH=jwt), sent as `?token=`: the request is then this socket's own. */
    token?: string,
  ) {
    this.splitter = new FrameSplitter((op, fin, buf, s, e) => this.onFrame(op, fin, buf, s, e));
    const key = `${target.host}:${target.port}:${target.proto}`;
    let req = token === undefined ? upgradeCache.get(key) : undefined;
    if (req === undefined) {
      const base = paths(target.proto);
      const path = token === undefined ? base : `${base}${base.includes('?') ? '&' : '?'}token=${encodeURIComponent(token)}`;
      req = Buffer.from(upgradeRequest(target.port, { host: target.host, path, protocols: [], key: 'dGhlIHNhbXBsZSBub25jZQ==' }).request);
      if (token === undefined) upgradeCache.set(key, req);
    }
    const upgrade = req;
    const opts: net.NetConnectOpts = { host: target.host, port: target.port, noDelay: true };
    if (localAddress !== undefined) opts.localAddress = localAddress;
    this.sock = net.connect(opts, () => {
      this.state = 'upgrading';
      this.sock.write(upgrade);
    });
    this.sock.on('data', (chunk: Buffer) => this.onData(chunk));
    this.sock.on('error', (err: NodeJS.ErrnoException) => this.close(err.code ?? err.message));
    this.sock.on('close', () => this.close('closed by peer'));
  }

  send(bytes: Buffer): void {
    this.sock.write(bytes);
  }

  /**
   * S12: a close frame from the server only records the close, and the RST
   * waits for `teardownDeferred`, so that the time a close is seen is not
   * held back by the teardown of the sockets before it in the same process.
   */
  static deferTeardown = false;

  close(why: string): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    if (RawConn.deferTeardown && why.startsWith('ws close ')) {
      this.sock.pause();
      deferred.push(this.sock);
      this.handlers.closed(this, why);
      return;
    }
    // RST, not FIN: a FIN from this side leaves the port in TIME_WAIT for 60 s,
    // and with a bound source address the kernel then scans ever longer for a
    // free port (measured: a second 15k storm took 15 s instead of 1.3 s).
    if (this.sock.destroyed) this.sock.destroy(); else this.sock.resetAndDestroy();
    this.handlers.closed(this, why);
  }

  private onData(chunk: Buffer): void {
    chunkNow = monoUs();
    reads.count++;
    if (this.state === 'upgrading') {
      const buf: Buffer = this.head === null ? chunk : Buffer.concat([this.head, chunk]);
      const end = buf.indexOf(HEADER_END);
      if (end === -1) {
        if (buf.length > 16384) { this.close('upgrade response too long'); return; }
        this.head = Buffer.from(buf);
        return;
      }
      this.head = null;
      const status = buf.toString('latin1', 9, 12);
      if (buf.toString('latin1', 0, 5) !== 'HTTP/' || status !== '101') {
        this.close(`http ${status}`);
        return;
      }
      this.state = 'handshake';
      chunk = buf.subarray(end + 4);
      if (chunk.length === 0) return;
    }
    try {
      this.splitter.push(chunk);
    } catch (err) {
      this.close((err as Error).message);
      return;
    }
    if (this.state === 'ready') this.handlers.flush(this);
  }

  private onFrame(op: number, _fin: boolean, buf: Buffer, s: number, e: number): void {
    if (op === Op.Text) {
      const kind = classify(this.target.proto, buf, s, e);
      if (kind === Kind.Ping) { this.sock.write(SIO_PONG); return; }
      if (this.state === 'ready') { this.handlers.frame(this, kind, buf, s, e, chunkNow); return; }
      if (kind === Kind.Open) { this.sock.write(SIO_CONNECT); return; }
      if (kind === Kind.Welcome) {
        this.state = 'ready';
        if (this.target.proto === 'sluice') this.shard = shardOfWelcome(buf, s, e);
        this.readyAt = chunkNow;
        this.handlers.ready(this);
        return;
      }
      if (kind === Kind.Error) this.close(`refused: ${buf.toString('utf8', s, Math.min(e, s + 120))}`);
      return;
    }
    if (op === Op.Ping) { this.sock.write(encodeClientFrame(buf.subarray(s, e), Op.Pong).bytes); return; }
    if (op === Op.Close) {
      const code = e - s >= 2 ? buf.readUInt16BE(s) : 1005;
      this.close(`ws close ${code} ${buf.toString('utf8', s + 2, e)}`);
    }
  }
}
